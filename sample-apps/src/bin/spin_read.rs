//! The `spin_read` pinning case: `cargo run --release -p sample-apps --bin spin_read -- --help`.

fn main() {
    sample_apps::cli_main("spin_read");
}
