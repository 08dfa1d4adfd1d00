//! The `ffi_block` pinning case: `cargo run --release -p sample-apps --bin ffi_block -- --help`.

fn main() {
    sample_apps::cli_main("ffi_block");
}
