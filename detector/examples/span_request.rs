//! What a request's span costs with `pinwatch::tracing_layer()`: for counting instructions with
//! valgrind, and for timing the same work on many workers at once (contention).
//!
//! ```text
//! cargo build --release -p pinwatch --example span_request
//! valgrind --tool=cachegrind --cache-sim=no target/release/examples/span_request pinwatch 20000
//! valgrind --tool=cachegrind --cache-sim=no target/release/examples/span_request pinwatch 40000
//! target/release/examples/span_request pinwatch 400000 8     # 8 workers, wall time
//! ```
//!
//! One request is what tower-http's `TraceLayer` (with axum's `MatchedPath` in its
//! `make_span_with`, docs/spans.md) makes of one: a span `request` with four fields (`method`,
//! `uri`, `version`, `http.route`), created, entered and exited on each of four polls, and
//! closed. The difference of the two totals divided by the difference in requests is the cost of
//! one; `registry` (a `tracing_subscriber::registry()` without pinwatch's layer) is what the
//! layer adds to, `none` runs the loop with no subscriber. A registry with no layer at all never
//! frees a closed span (its close path runs only under a `Layered`, tokio-rs/tracing#900): it
//! grows its slab by one span a request instead. `noop` is the registry with a layer that does
//! nothing (`Identity`), which frees and reuses them as under any real layer: the denominator
//! that differs from `pinwatch` by pinwatch's callbacks only.
//!
//! `MODE REQUESTS [WORKERS]`: the requests are split over 4 tasks per worker on a runtime of
//! `WORKERS` (1) workers, watched by pinwatch; it prints the wall time.

use tracing_subscriber::prelude::*;

/// What `TraceLayer` formats of a request (`http::Method`, `http::Uri`, `http::Version`).
struct Method;
impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GET")
    }
}
struct Version;
impl std::fmt::Debug for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HTTP/1.1")
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "pinwatch".into());
    let n: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(20_000);
    let workers: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(1);
    match mode.as_str() {
        "pinwatch" => tracing_subscriber::registry()
            .with(pinwatch::tracing_layer())
            .init(),
        "registry" => tracing_subscriber::registry().init(),
        "noop" => tracing_subscriber::registry()
            .with(tracing_subscriber::layer::Identity::new())
            .init(),
        "none" => {}
        other => {
            eprintln!("span_request: unknown mode {other:?}; use pinwatch, registry, noop or none");
            std::process::exit(2);
        }
    }
    let mut tokio = tokio::runtime::Builder::new_multi_thread();
    tokio.worker_threads(workers.max(1)).enable_all();
    let (rt, detector) = pinwatch::Builder::new()
        .tracing(false)
        .build(&mut tokio)
        .expect("runtime");
    let tasks = 4 * workers.max(1);
    let start = std::time::Instant::now();
    rt.block_on(async move {
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let mine = n / tasks + usize::from(t < n % tasks);
                tokio::spawn(async move {
                    for i in 0..mine {
                        let uri = "/orders/42";
                        let span = tracing::info_span!(
                            "request",
                            method = %Method,
                            uri = %uri,
                            version = ?Version,
                            http.route = "/orders/{id}",
                        );
                        // Four polls of the request's future, each entering its span.
                        for _ in 0..4 {
                            let _entered = span.enter();
                            std::hint::black_box(i);
                        }
                        drop(span);
                        if i % 64 == 63 {
                            tokio::task::yield_now().await;
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.await.expect("task");
        }
    });
    let elapsed = start.elapsed();
    drop(rt);
    println!(
        "{mode}: {n} requests on {workers} workers in {:.1} ms ({:.0} ns per request)",
        elapsed.as_secs_f64() * 1e3,
        elapsed.as_secs_f64() * 1e9 / n.max(1) as f64
    );
    let _ = detector.shutdown();
}
