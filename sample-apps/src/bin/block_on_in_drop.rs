//! The `block_on_in_drop` pinning case: `cargo run --release -p sample-apps --bin block_on_in_drop -- --help`.

fn main() {
    sample_apps::cli_main("block_on_in_drop");
}
