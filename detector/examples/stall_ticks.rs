//! A pin that stalls the whole runtime, counted: two workers, four tasks ticking on 100 ms
//! timers, and a task woken by a timer that then blocks its worker for 2 s; a plain thread
//! counts the ticks during the pin (80 = the runtime kept running) and the events that said
//! `runtime_stalled`.
//!
//! ```text
//! cargo run --release -p pinwatch --example stall_ticks -- [plain|defaults|no-heartbeat|no-rescue] [RUNS]
//! ```
//!
//! `plain` is tokio alone (`PINWATCH=off`); the others are pinwatch as the environment sets it
//! (`PINWATCH_*`, its defaults when none is set), with the heartbeat off
//! (`PINWATCH_HEARTBEAT=off`), or with the rescue off (`PINWATCH_RESCUE=off`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "defaults".into());
    let runs: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(5);
    for run in 1..=runs {
        let Some(builder) = builder(&mode) else {
            eprintln!(
                "stall_ticks: unknown mode {mode:?}: plain, defaults, no-heartbeat, no-rescue"
            );
            std::process::exit(2);
        };
        let (ticks, stalled, handed, line) = once(builder);
        if run == 1 {
            if let Some(line) = line {
                println!("{mode}: the pin's last report says: {line}");
            }
        }
        println!(
            "{mode} run {run}: {ticks} ticks during the 2 s pin; {stalled} events runtime_stalled{}",
            handed.map_or(String::new(), |d| format!(
                "; drivers taken over {:.1} ms after the pin began",
                d.as_secs_f64() * 1e3
            ))
        );
    }
}

/// The detector of `mode`, over the environment's settings (a builder is consumed by `build`:
/// one per run).
fn builder(mode: &str) -> Option<pinwatch::Builder> {
    let env = pinwatch::Builder::from_env().unwrap_or_else(|e| {
        eprintln!("stall_ticks: {e}");
        std::process::exit(2);
    });
    Some(match mode {
        "plain" => env.enabled(false),
        "defaults" => env,
        "no-heartbeat" => env.heartbeat(None),
        "no-rescue" => env.rescue(false),
        _ => return None,
    })
}

/// One run: the ticks during the pin, the events that said the runtime stalled, when the
/// drivers were taken over (when they were), and the pin's last report as its log line says it.
fn once(builder: pinwatch::Builder) -> (u64, usize, Option<Duration>, Option<String>) {
    let (tx, events) = mpsc::channel::<pinwatch::PinnedEvent>();
    let mut tokio = tokio::runtime::Builder::new_multi_thread();
    tokio.worker_threads(2).enable_all();
    let (rt, detector) = builder
        .tracing(false)
        .control(pinwatch::Control::Off)
        .sink(move |e: &pinwatch::PinnedEvent| {
            let _ = tx.send(e.clone());
        })
        .build(&mut tokio)
        .expect("runtime");
    let ticks = Arc::new(AtomicU64::new(0));
    for _ in 0..4 {
        let ticks = Arc::clone(&ticks);
        rt.spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                ticks.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    std::thread::sleep(Duration::from_millis(500));
    let (blocked_tx, blocked_rx) = mpsc::channel();
    rt.spawn(async move {
        tokio::time::sleep(Duration::from_millis(1)).await; // woken by the timer…
        blocked_tx.send(()).expect("the counter");
        std::thread::sleep(Duration::from_secs(2)); // …then blocks its worker
    });
    blocked_rx.recv().expect("the pin");
    let before = ticks.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(2));
    let during = ticks.load(Ordering::Relaxed) - before;
    drop(rt);
    drop(detector);
    let events: Vec<_> = events.try_iter().collect();
    let stalled = events.iter().filter(|e| e.runtime_stalled).count();
    let handed = events
        .iter()
        .filter_map(|e| e.drivers.as_ref()?.taken_over_after)
        .max();
    let line = events.last().map(pinwatch::PinnedEvent::headline);
    (during, stalled, handed, line)
}
