//! The `lazy_init` pinning case: `cargo run --release -p sample-apps --bin lazy_init -- --help`.

fn main() {
    sample_apps::cli_main("lazy_init");
}
