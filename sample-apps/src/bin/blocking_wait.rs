//! The `blocking_wait` pinning case: `cargo run --release -p sample-apps --bin blocking_wait -- --help`.

fn main() {
    sample_apps::cli_main("blocking_wait");
}
