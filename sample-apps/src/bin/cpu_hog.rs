//! The `cpu_hog` pinning case: `cargo run --release -p sample-apps --bin cpu_hog -- --help`.

fn main() {
    sample_apps::cli_main("cpu_hog");
}
