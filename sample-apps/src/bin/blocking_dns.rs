//! The `blocking_dns` pinning case: `cargo run -p sample-apps --bin blocking_dns -- --help`.
//! Needs root or unprivileged user namespaces: it resolves with its own nameserver on loopback,
//! in a network namespace of its own (see `sample_apps::dns`).

fn main() {
    sample_apps::cli_main("blocking_dns");
}
