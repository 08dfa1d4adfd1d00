//! The `library_cpu` pinning case: `cargo run --release -p sample-apps --bin library_cpu -- --help`.

fn main() {
    sample_apps::cli_main("library_cpu");
}
