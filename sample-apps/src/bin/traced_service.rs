//! A web service that pins a worker inside a request, and says which request: axum with
//! tower-http's `TraceLayer` (a `request` span per request, with `method` and `uri`),
//! `tracing-opentelemetry` (an OpenTelemetry tracer whose spans go by OTLP to the endpoint in
//! `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, when set), and the
//! subscriber `registry().with(otel_layer).with(fmt::layer()).with(pinwatch::tracing_layer())`.
//! `GET /report` blocks its worker 80 ms with `std::thread::sleep` (`--variant fixed`: awaits
//! it); `GET /health` answers at once. It prints `traced_service: listening on ADDR` on stdout.
//!
//! `PINWATCH_RECORD=pins.jsonl cargo run -p sample-apps --bin traced_service`, then
//! `curl 127.0.0.1:3000/report` and `pinwatch print pins.jsonl`: the pin is `in request`.

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use sample_apps::{traced, Variant};

#[derive(Parser)]
#[command(about = "An axum service with request spans and OpenTelemetry traces; /report pins")]
struct Args {
    /// The address to serve on (port 0: any free port; the line on stdout says which).
    #[arg(long, default_value = "127.0.0.1:3000")]
    addr: SocketAddr,
    /// `bad` (the default): /report blocks its worker; `fixed`: it awaits the same wait.
    #[arg(long, value_enum, default_value = "bad")]
    variant: Variant,
    /// Stop after this long (humantime: `30s`); default: run until killed.
    #[arg(long = "for", value_parser = humantime::parse_duration)]
    run_for: Option<Duration>,
}

fn main() {
    let args = Args::parse();
    // Before the runtime: the OTLP exporter's blocking HTTP client has a runtime of its own.
    let provider = traced::tracer_provider().unwrap_or_else(|e| {
        eprintln!("traced_service: {e}");
        std::process::exit(2);
    });
    tracing::dispatcher::set_global_default(traced::dispatch(&provider, true))
        .expect("no subscriber was set before (this is a bug)");
    let mut tokio = tokio::runtime::Builder::new_multi_thread();
    tokio.worker_threads(2).enable_all();
    let (rt, detector) = pinwatch::Builder::from_env()
        .and_then(|b| b.build(&mut tokio))
        .unwrap_or_else(|e| {
            eprintln!("traced_service: pinwatch: {e}");
            std::process::exit(2);
        });
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(args.addr))
        .unwrap_or_else(|e| {
            eprintln!("traced_service: cannot listen on {}: {e}", args.addr);
            std::process::exit(2);
        });
    let addr = listener.local_addr().expect("local address");
    println!("traced_service: listening on {addr}");
    let _ = std::io::stdout().flush();
    let app = traced::router(args.variant);
    // The server runs as a task, as in a service (the `block_on` body is not watched).
    let server = rt.spawn(async move { axum::serve(listener, app).await });
    let served = rt.block_on(async move {
        match args.run_for {
            Some(d) => tokio::time::timeout(d, server).await.ok(),
            None => Some(server.await),
        }
    });
    match served {
        Some(Ok(Err(e))) => eprintln!("traced_service: serving on {addr}: {e}"),
        Some(Err(e)) => eprintln!("traced_service: the server task failed: {e}"),
        _ => {}
    }
    drop(rt);
    detector.shutdown();
    if let Err(e) = provider.shutdown() {
        eprintln!("traced_service: flushing the spans: {e}");
    }
}
