//! `traced_service`: an axum service whose requests are `tracing` spans (tower-http's
//! `TraceLayer`, its span made by [`request_span`]: an INFO `request` span with `method`, `uri`
//! and `http.route`, the router's template from axum's `MatchedPath`), bridged to OpenTelemetry
//! by `tracing-opentelemetry`. Its routes: `/report` blocks its worker 80 ms with
//! `std::thread::sleep` (bad) or awaits the same wait (fixed); `/orders/{id}` blocks 60 ms in a
//! DB-like call inside a DEBUG `db_query` span (fixed: on the blocking pool); `/cpu` spins
//! 80 ms without an `.await` (fixed: on the blocking pool); `/health` answers at once. With
//! `pinwatch::tracing_layer()` in the subscriber, each pin names the request it happened in.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Path};
use axum::http::Request;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tower_http::trace::TraceLayer;
use tracing_subscriber::prelude::*;

use crate::Variant;

/// The route that blocks its worker in the bad variant.
pub const BLOCKING_ROUTE: &str = "/report";
/// The route that never blocks.
pub const FAST_ROUTE: &str = "/health";
/// The route whose DB-like call blocks in the bad variant: an id in its path.
pub const ORDERS_ROUTE: &str = "/orders/{id}";
/// The route that spins on the CPU in the bad variant.
pub const CPU_ROUTE: &str = "/cpu";
/// How long `/report` waits.
pub const REPORT_WAIT: Duration = Duration::from_millis(80);
/// How long `/orders/{id}`'s query takes.
pub const QUERY_WAIT: Duration = Duration::from_millis(60);
/// How long `/cpu` spins.
pub const CPU_SPIN: Duration = Duration::from_millis(80);

/// The bad `/report`: the "report query" blocks the worker.
async fn blocking_report() -> &'static str {
    std::thread::sleep(REPORT_WAIT); // pinned: a blocking wait inside a request
    "report"
}

/// The fixed `/report`: the same wait, awaited.
async fn async_report() -> &'static str {
    tokio::time::sleep(REPORT_WAIT).await;
    "report"
}

/// A DB client's blocking call, in a DEBUG span of its own (below `RUST_LOG=info`).
#[tracing::instrument(level = "debug")]
fn db_query(id: u64) -> String {
    std::thread::sleep(QUERY_WAIT); // pinned: a blocking DB call inside a request
    format!("order {id}")
}

/// The bad `/orders/{id}`: the query on the worker.
async fn blocking_order(Path(id): Path<u64>) -> String {
    db_query(id)
}

/// The fixed `/orders/{id}`: the query on tokio's blocking pool.
async fn pooled_order(Path(id): Path<u64>) -> String {
    tokio::task::spawn_blocking(move || db_query(id))
        .await
        .unwrap_or_default()
}

/// `CPU_SPIN` of arithmetic, with no `.await` in it.
fn spin() -> String {
    let start = Instant::now();
    let mut x = 0u64;
    while start.elapsed() < CPU_SPIN {
        for i in 0..10_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
    }
    format!("{x}")
}

/// The bad `/cpu`: spins on the worker.
async fn spinning() -> String {
    spin() // pinned: a CPU loop inside a request
}

/// The fixed `/cpu`: spins on the blocking pool.
async fn pooled_spin() -> String {
    tokio::task::spawn_blocking(spin).await.unwrap_or_default()
}

async fn health() -> &'static str {
    "ok"
}

/// The span of one request, for `TraceLayer::make_span_with`: INFO (tower-http's default is
/// DEBUG, below `RUST_LOG=info`), with `method`, `uri` and OpenTelemetry's `http.route` — the
/// router's template (`/orders/{id}`) from axum's `MatchedPath`, present when the layer is
/// added with `Router::layer` (it runs after routing). pinwatch groups pins by that route: one
/// series per route, not one per id.
pub fn request_span<B>(req: &Request<B>) -> tracing::Span {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str);
    tracing::info_span!(
        "request",
        method = %req.method(),
        uri = %req.uri(),
        http.route = route,
    )
}

/// The service's routes, each request in a `TraceLayer` span ([`request_span`]).
pub fn router(variant: Variant) -> axum::Router {
    let fixed = matches!(variant, Variant::Fixed);
    let report = if fixed {
        axum::routing::get(async_report)
    } else {
        axum::routing::get(blocking_report)
    };
    let orders = if fixed {
        axum::routing::get(pooled_order)
    } else {
        axum::routing::get(blocking_order)
    };
    let cpu = if fixed {
        axum::routing::get(pooled_spin)
    } else {
        axum::routing::get(spinning)
    };
    axum::Router::new()
        .route(BLOCKING_ROUTE, report)
        .route(ORDERS_ROUTE, orders)
        .route(CPU_ROUTE, cpu)
        .route(FAST_ROUTE, axum::routing::get(health))
        .layer(TraceLayer::new_for_http().make_span_with(request_span::<axum::body::Body>))
}

/// An OpenTelemetry tracer provider. With `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
/// `OTEL_EXPORTER_OTLP_ENDPOINT` set, its spans are exported by OTLP (http/protobuf, batched
/// on the SDK's own thread: `OTEL_BSP_SCHEDULE_DELAY` sets how often); without, spans still get
/// trace and span ids but go nowhere. Build it before any tokio runtime exists (the exporter's
/// blocking HTTP client must not be made or dropped inside one).
pub fn tracer_provider() -> Result<SdkTracerProvider, String> {
    let endpoint = [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()));
    let builder = SdkTracerProvider::builder();
    if !endpoint {
        return Ok(builder.build());
    }
    use opentelemetry_otlp::WithExportConfig as _;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .build()
        .map_err(|e| {
            format!("the OTLP span exporter (check OTEL_EXPORTER_OTLP_*_ENDPOINT): {e}")
        })?;
    Ok(builder.with_batch_exporter(exporter).build())
}

/// Whether a span or event is tokio's own instrumentation (`runtime.spawn` task spans and the
/// like, on with tokio's `tracing` feature): not a request, so not exported as one.
fn not_tokio(meta: &tracing::Metadata<'_>) -> bool {
    !meta.target().starts_with("tokio") && !meta.target().starts_with("runtime")
}

/// The service's subscriber: `tracing-opentelemetry` (the request spans, tokio's own left
/// out), `fmt` to stderr and `pinwatch::tracing_layer()`. `RUST_LOG` (default `info`) filters
/// the fmt layer alone — a per-layer filter: a global one (`.with(EnvFilter)`) would hide the
/// DEBUG `db_query` span from pinwatch too, and its pins would not say what in the request
/// pinned.
pub fn dispatch(provider: &SdkTracerProvider, log: bool) -> tracing::Dispatch {
    let otel = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("traced_service"))
        .with_filter(tracing_subscriber::filter::filter_fn(not_tokio));
    let fmt = log.then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "info".into()),
            )
    });
    tracing_subscriber::registry()
        .with(otel)
        .with(fmt)
        .with(pinwatch::tracing_layer())
        .into()
}

/// The tour's run: serves on 127.0.0.1 (on the current pinwatch runtime), then `n` rounds of
/// one request to each route from a plain thread; says how many answered.
pub async fn run(variant: Variant, n: usize, _full: bool) -> Option<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1");
    let addr = listener.local_addr().expect("local address");
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, router(variant)).await;
    });
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut ok = 0;
        for _ in 0..n {
            for route in [BLOCKING_ROUTE, FAST_ROUTE] {
                if get(addr, route).is_ok_and(|(status, _)| status == 200) {
                    ok += 1;
                }
            }
        }
        let _ = tx.send(ok);
    });
    let ok = rx.await.expect("the client thread");
    server.abort();
    Some(format!("{ok} of {} requests answered", 2 * n))
}

/// `GET path` over a new HTTP/1.1 connection (std's blocking socket, 10 s timeouts): the status
/// and the body.
pub fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    conn.set_write_timeout(Some(Duration::from_secs(10)))?;
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    conn.read_to_string(&mut text)?;
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not an HTTP response: {text:?}"),
            )
        })?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// The tour's check of the bad variant's pins: each was in the `request` span of a
/// `GET /report` (with its `method` and `uri`), and none in a `/health` request.
pub fn check_spans(events: &[pinwatch::PinnedEvent]) -> Result<(), String> {
    let request = |e: &pinwatch::PinnedEvent| {
        e.spans
            .iter()
            .find(|s| s.name == "request" && s.fields.contains_key("uri"))
            .cloned()
    };
    if events.is_empty() {
        return Err("no pins".into());
    }
    for e in events {
        let Some(span) = request(e) else {
            return Err(format!(
                "a pin without a request span: spans {:?} ({})",
                e.spans,
                e.headline()
            ));
        };
        let (method, uri) = (span.fields.get("method"), span.fields.get("uri"));
        if method.map(String::as_str) != Some("GET")
            || uri.map(String::as_str) != Some(BLOCKING_ROUTE)
        {
            return Err(format!(
                "a pin in request {method:?} {uri:?}, expected GET {BLOCKING_ROUTE} ({})",
                e.headline()
            ));
        }
    }
    Ok(())
}
