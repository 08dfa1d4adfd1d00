//! The `lock_sleep` pinning case: `cargo run --release -p sample-apps --bin lock_sleep -- --help`.

fn main() {
    sample_apps::cli_main("lock_sleep");
}
