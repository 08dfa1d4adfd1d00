//! Span enter and exit on a watched worker, for counting instructions with valgrind:
//!
//! ```text
//! cargo build --release -p pinwatch --example span_storm
//! valgrind --tool=cachegrind --cache-sim=no target/release/examples/span_storm pinwatch 200000
//! valgrind --tool=cachegrind --cache-sim=no target/release/examples/span_storm pinwatch 400000
//! ```
//!
//! The difference of the two totals divided by the difference in iterations is the cost of one
//! iteration: entering and exiting two nested spans (`request` and `load_report`), through a
//! `tracing_subscriber::registry()`. Do the same with `registry` (the registry without
//! `pinwatch::tracing_layer()`) to see what the layer adds; `none` runs the loop with no
//! subscriber at all.

use tracing_subscriber::prelude::*;

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "pinwatch".into());
    let n: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(200_000);
    match mode.as_str() {
        "pinwatch" => tracing_subscriber::registry()
            .with(pinwatch::tracing_layer())
            .init(),
        "registry" => tracing_subscriber::registry().init(),
        "none" => {}
        other => {
            eprintln!("span_storm: unknown mode {other:?}; use pinwatch, registry or none");
            std::process::exit(2);
        }
    }
    let mut tokio = tokio::runtime::Builder::new_multi_thread();
    tokio.worker_threads(1).enable_all();
    let (rt, detector) = pinwatch::Builder::new()
        .tracing(false)
        .build(&mut tokio)
        .expect("runtime");
    let start = std::time::Instant::now();
    rt.block_on(rt.spawn(async move {
        let request = tracing::info_span!("request", method = "GET", uri = "/report");
        let inner = tracing::info_span!(parent: &request, "load_report", user = 7);
        for i in 0..n {
            {
                let _request = request.enter();
                let _inner = inner.enter();
                std::hint::black_box(i);
            }
            // Short polls: nothing here is pinned.
            if i % 1000 == 999 {
                tokio::task::yield_now().await;
            }
        }
    }))
    .expect("task");
    let elapsed = start.elapsed();
    drop(rt);
    println!(
        "{mode}: {n} x (enter+exit of 2 nested spans) in {:.1} ms ({:.1} ns per span enter+exit)",
        elapsed.as_secs_f64() * 1e3,
        elapsed.as_secs_f64() * 1e9 / (2 * n) as f64
    );
    println!("{:?}", detector.shutdown());
}
