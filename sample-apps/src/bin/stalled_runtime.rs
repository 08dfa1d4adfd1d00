//! The `stalled_runtime` case: `cargo run --release -p sample-apps --bin stalled_runtime -- --help`.

fn main() {
    sample_apps::cli_main("stalled_runtime");
}
