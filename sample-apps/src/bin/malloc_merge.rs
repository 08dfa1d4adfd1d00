//! The `malloc_merge` pinning case: `cargo run --release -p sample-apps --bin malloc_merge -- --help`.

fn main() {
    sample_apps::cli_main("malloc_merge");
}
