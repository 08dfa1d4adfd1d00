//! The `large_drop` pinning case: `cargo run --release -p sample-apps --bin large_drop -- --help`.

fn main() {
    sample_apps::cli_main("large_drop");
}
