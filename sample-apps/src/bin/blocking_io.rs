//! The `blocking_io` pinning case: `cargo run --release -p sample-apps --bin blocking_io -- --help`.

fn main() {
    sample_apps::cli_main("blocking_io");
}
