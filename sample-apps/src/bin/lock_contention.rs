//! The `lock_contention` pinning case: `cargo run --release -p sample-apps --bin lock_contention -- --help`.

fn main() {
    sample_apps::cli_main("lock_contention");
}
