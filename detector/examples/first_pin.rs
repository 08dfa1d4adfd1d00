//! What the first pin of a process costs: memory added and time to its first report.
//!
//! ```text
//! cargo run --release -p pinwatch --example first_pin
//! cargo run -p pinwatch --example first_pin
//! ```
//!
//! Builds a runtime (2 workers, pinwatch's defaults, a sink of its own), spawns one task that
//! `std::thread::sleep`s 200 ms, and prints: the time from the task blocking to the sink
//! getting the first `in_progress` event, the `RssAnon` and `VmRSS` (`/proc/self/status`)
//! added between just before the block and that event, and the event's reason and top frame.
//! Then a second, distinct pin (a later pin: the symbols it needs are not all loaded yet) for
//! comparison.

use std::sync::mpsc;
use std::time::{Duration, Instant};

/// `RssAnon` and `VmRSS` of this process, in KiB.
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("RssAnon:"), field("VmRSS:"))
}

/// A report as the sink saw it: when, the memory then, and what it said.
struct Seen {
    at: Instant,
    memory: (u64, u64),
    reason: String,
    top: String,
    frames: usize,
}

fn measure(
    rt: &tokio::runtime::Runtime,
    seen: &mpsc::Receiver<Seen>,
    label: &str,
    block: fn(),
) -> bool {
    let (tx, rx) = mpsc::channel();
    let before = memory();
    rt.spawn(async move {
        let _ = tx.send(Instant::now());
        block();
    });
    let blocked = rx.recv().expect("the task ran");
    let Ok(first) = seen.recv_timeout(Duration::from_secs(30)) else {
        eprintln!("first_pin: no report within 30 s");
        return false;
    };
    println!(
        "{label:<11} report after {:>6.1} ms  RssAnon +{:>6} KiB  VmRSS +{:>6} KiB  \
         reason {}  {} frames  top {}",
        first.at.duration_since(blocked).as_secs_f64() * 1e3,
        first.memory.0 as i64 - before.0 as i64,
        first.memory.1 as i64 - before.1 as i64,
        first.reason,
        first.frames,
        first.top,
    );
    // The rest of this pin's reports.
    while seen.recv_timeout(Duration::from_millis(500)).is_ok() {}
    true
}

fn first_block() {
    std::thread::sleep(Duration::from_millis(200));
}

fn second_block() {
    let lock = std::sync::Mutex::new(0u64);
    let mut guard = lock.lock().unwrap();
    *guard += 1;
    std::thread::sleep(Duration::from_millis(200));
    drop(guard);
}

fn main() {
    let (tx, seen) = mpsc::channel();
    let sink = move |e: &pinwatch::PinnedEvent| {
        if e.state != pinwatch::State::InProgress {
            return;
        }
        let at = Instant::now();
        let memory = memory();
        let _ = tx.send(Seen {
            at,
            memory,
            reason: e.reason.map_or("-".into(), |r| r.to_string()),
            top: e.top_frame.as_ref().map_or("-".into(), |f| f.to_string()),
            frames: e.stack.len(),
        });
    };
    let mut tokio = tokio::runtime::Builder::new_multi_thread();
    tokio.worker_threads(2).enable_all();
    let (rt, detector) = pinwatch::Builder::new()
        .tracing(false)
        .sink(sink)
        .build(&mut tokio)
        .expect("runtime");
    // Let the runtime and the detector's threads settle.
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(300)).await });
    let ok = measure(&rt, &seen, "first pin", first_block)
        && measure(&rt, &seen, "second pin", second_block);
    drop(rt);
    drop(detector);
    if !ok {
        std::process::exit(1);
    }
}
