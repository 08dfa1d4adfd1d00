//! An axum service with pinwatch and its Prometheus endpoint: the shape of most services.
//!
//! ```text
//! PINWATCH_PROMETHEUS_ADDR=127.0.0.1:9464 cargo run -p pinwatch --example web_service
//! curl -s 127.0.0.1:3000/slow                          # a handler that blocks its worker
//! curl -s 127.0.0.1:9464/metrics | grep '^pinwatch_pins_total'
//! ```
//!
//! `#[pinwatch::main]` in place of `#[tokio::main]` is the whole integration: the environment
//! turns on the endpoint (`PINWATCH_PROMETHEUS_ADDR`), a recording (`PINWATCH_RECORD`), OTLP, …
//! (docs/configuration.md). `GET /` answers at once; `GET /slow` waits 100 ms for a "database"
//! with `std::thread::sleep`, which pins its worker: pinwatch's WARN event names the line, and
//! `pinwatch_pins_total{reason="sleep"}` counts it. The fix is `tokio::time::sleep(..).await`.
//!
//! `LISTEN` sets the service's address (default `127.0.0.1:3000`; port 0 picks a free one). The
//! first line on stdout is `listening on http://ADDR`.

use std::time::Duration;

use axum::{routing::get, Router};

/// The bug to find: a blocking wait inside an async handler.
async fn slow() -> &'static str {
    std::thread::sleep(Duration::from_millis(100)); // pins the worker: use tokio::time::sleep
    "slow\n"
}

async fn fast() -> &'static str {
    "ok\n"
}

#[pinwatch::main]
async fn main() {
    // The service's own logging, at `info` unless RUST_LOG says otherwise (`fmt::init()` alone
    // reads RUST_LOG and defaults to `error`, which hides pinwatch's WARN reports).
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let addr = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .unwrap_or_else(|e| panic!("cannot listen on {addr} (set LISTEN to another address): {e}"));
    println!("listening on http://{}", listener.local_addr().unwrap());
    let app = Router::new()
        .route("/", get(fast))
        .route("/slow", get(slow));
    axum::serve(listener, app).await.unwrap();
}
