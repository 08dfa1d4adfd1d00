//! A service that already serves `/metrics` from its own `prometheus::Registry`: pinwatch's
//! collector goes into that registry, next to the service's own metrics, and no second port is
//! opened.
//!
//! ```text
//! cargo run -p pinwatch --example own_registry
//! curl -s 127.0.0.1:3000/slow
//! curl -s 127.0.0.1:3000/metrics | grep -E '^(pinwatch_pins_total|requests_total)'
//! ```
//!
//! `LISTEN` sets the address (default `127.0.0.1:3000`; port 0 picks a free one). The first line
//! on stdout is `listening on http://ADDR`.

use std::time::Duration;

use axum::{extract::State, routing::get, Router};
use prometheus::{Encoder, IntCounter, Registry, TextEncoder};

#[derive(Clone)]
struct App {
    registry: Registry,
    requests: IntCounter,
}

async fn metrics(State(app): State<App>) -> String {
    let mut out = Vec::new();
    TextEncoder::new()
        .encode(&app.registry.gather(), &mut out)
        .expect("text encoding");
    String::from_utf8(out).expect("the text format is UTF-8")
}

async fn slow(State(app): State<App>) -> &'static str {
    app.requests.inc();
    std::thread::sleep(Duration::from_millis(100)); // pins the worker: use tokio::time::sleep
    "slow\n"
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The service's own logging, at `info` unless RUST_LOG says otherwise (`fmt::init()` alone
    // reads RUST_LOG and defaults to `error`, which hides pinwatch's WARN reports).
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let registry = Registry::new();
    let requests = IntCounter::new("requests_total", "Requests served.")?;
    registry.register(Box::new(requests.clone()))?;
    let (rt, detector) = pinwatch::Builder::from_env()?
        .prometheus_registry(&registry)
        .build(tokio::runtime::Builder::new_multi_thread().enable_all())?;
    let app = App { registry, requests };
    rt.block_on(async {
        let addr = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
        let listener = tokio::net::TcpListener::bind(&addr).await?;
        println!("listening on http://{}", listener.local_addr()?);
        let router = Router::new()
            .route("/metrics", get(metrics))
            .route("/slow", get(slow))
            .with_state(app);
        axum::serve(listener, router).await
    })?;
    drop(rt);
    detector.shutdown();
    Ok(())
}
