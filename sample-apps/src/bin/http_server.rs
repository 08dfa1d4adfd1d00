//! The `http_server` pinning case: `cargo run --release -p sample-apps --bin http_server -- --help`.
//! `--tasks` is the number of concurrent connections.

fn main() {
    sample_apps::cli_main("http_server");
}
