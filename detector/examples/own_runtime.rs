//! A service that builds its own runtime: `pinwatch::Builder` on tokio's `Builder`, tokio's own
//! `Runtime` back, a `Detector` guard, and a sink of your own.
//!
//! ```text
//! cargo run -p pinwatch --example own_runtime
//! ```
//!
//! It runs a few tasks, one of which blocks its worker for 50 ms, then shuts down in order (the
//! runtime first, so a poll still running is completed; then the detector: a last scan, the
//! sinks flushed) and prints what the detector saw. Settings come from code here (a 10 ms
//! threshold) and from the environment (`Builder::from_env`: every `PINWATCH_*` variable still
//! applies on top of the defaults; the setters after it win).

use std::sync::mpsc;
use std::time::Duration;

fn main() -> std::process::ExitCode {
    // `main` returning the error would print it with `Debug`; say it as the message it is.
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("own_runtime: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    // The service's own logging, at `info` unless RUST_LOG says otherwise (`fmt::init()` alone
    // reads RUST_LOG and defaults to `error`, which hides pinwatch's WARN reports).
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    // A sink of your own: any `FnMut(&PinnedEvent) + Send + 'static`, called on pinwatch's
    // export thread (never on the runtime).
    let (tx, rx) = mpsc::channel();
    let sink = move |e: &pinwatch::PinnedEvent| {
        let _ = tx.send(format!(
            "{} {:?} {:.1} ms",
            e.state.as_str(),
            e.reason,
            e.duration.as_secs_f64() * 1e3
        ));
    };
    let (rt, detector) = pinwatch::Builder::from_env()?
        .threshold(Duration::from_millis(10))
        .sink(sink)
        .build(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all(),
        )?;
    rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..4 {
            tasks.push(tokio::spawn(async move {
                if i == 0 {
                    std::thread::sleep(Duration::from_millis(50)); // pinned: blocks its worker
                } else {
                    tokio::time::sleep(Duration::from_millis(50)).await; // not pinned
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    drop(rt); // the runtime first: a poll still running is completed
    let stats = detector.shutdown(); // then the detector: a last scan, the sinks flushed
    for line in rx.try_iter() {
        println!("my sink got: {line}");
    }
    println!(
        "pinned polls: {}, events: {}, dropped: {}",
        stats.pinned_polls, stats.events, stats.dropped
    );
    Ok(())
}
