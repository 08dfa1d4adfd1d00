//! The first thing a newcomer tries: `#[pinwatch::main]` on a service that pins a worker once —
//! a task that sleeps 100 ms with `std::thread::sleep` — and nothing else. With no `tracing`
//! subscriber, pinwatch's start-up line and its report go to stderr.
//!
//! `--fmt`: the service sets up `tracing_subscriber::fmt().init()` first (it prints to stdout),
//! and the report goes through it. `--console-layer`: its subscriber is a registry with
//! `pinwatch::console_layer()` and a `fmt` layer, as pinwatch's message for
//! `PINWATCH_CONSOLE=on` says to write.
//!
//! `cargo run -p sample-apps --bin first_pin`

use std::time::Duration;

const USAGE: &str = "\
first_pin: a task that sleeps 100 ms with std::thread::sleep, under #[pinwatch::main]

Usage: first_pin [--fmt | --console-layer]

  --fmt            the service sets up tracing_subscriber::fmt().init() first
  --console-layer  a registry with pinwatch::console_layer() and a fmt layer";

#[pinwatch::main]
async fn main() -> std::process::ExitCode {
    // Returned, not exited with: the detector started already, and its shutdown runs as `main`
    // returns.
    let arg = match sample_apps::fixture_arg("first_pin", USAGE, &["--fmt", "--console-layer"]) {
        Ok(arg) => arg,
        Err(code) => return code,
    };
    match arg.as_deref() {
        Some("--fmt") => tracing_subscriber::fmt().init(),
        Some("--console-layer") => {
            use tracing_subscriber::prelude::*;
            tracing_subscriber::registry()
                .with(pinwatch::console_layer())
                .with(tracing_subscriber::fmt::layer())
                .init();
        }
        _ => {}
    }
    tokio::spawn(async {
        std::thread::sleep(Duration::from_millis(100));
    })
    .await
    .expect("the task");
    std::process::ExitCode::SUCCESS
}
