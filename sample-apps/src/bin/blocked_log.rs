//! The `blocked_log` pinning case: `cargo run --release -p sample-apps --bin blocked_log -- --help`.

fn main() {
    sample_apps::cli_main("blocked_log");
}
