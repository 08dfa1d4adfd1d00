//! Cost of one stack sample: a task spins (pinned) for a few seconds while the watchdog samples
//! it as fast as it can (threshold 1 ms, sample interval 100 µs). Prints the worker's time in the
//! signal handler per sample, the watchdog's round trip per sample, and how much the spinning
//! task's own progress slowed compared with the same run without stack samples.
//!
//! `cargo bench -p pinwatch --bench sample_cost`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[inline(never)]
fn spin_for(d: Duration, work: &AtomicU64) {
    let start = Instant::now();
    let mut x = 1u64;
    while start.elapsed() < d {
        for _ in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        work.fetch_add(1, Ordering::Relaxed);
    }
}

fn run(stacks: pinwatch::Stacks, d: Duration) -> (pinwatch::Stats, u64) {
    let mut tokio = tokio::runtime::Builder::new_multi_thread();
    tokio.worker_threads(2).enable_all();
    let (rt, detector) = pinwatch::Builder::new()
        .tracing(false)
        .stacks(stacks)
        .threshold(Duration::from_millis(1))
        .sample_interval(Duration::from_micros(100))
        .build(&mut tokio)
        .unwrap();
    let work = Arc::new(AtomicU64::new(0));
    let w = Arc::clone(&work);
    rt.block_on(rt.spawn(async move { spin_for(d, &w) }))
        .unwrap();
    drop(rt);
    let stats = detector.shutdown();
    (stats, work.load(Ordering::Relaxed))
}

fn main() {
    let d = Duration::from_secs(3);
    let (_, base) = run(pinwatch::Stacks::Off, d);
    let (stats, sampled) = run(pinwatch::Stacks::Full, d);
    let n = stats.samples.max(1) as f64;
    println!(
        "stack samples of a spinning worker over {d:?}: {}",
        stats.samples
    );
    println!(
        "worker time in the signal handler: {:.1} µs per sample",
        stats.sample_handler_time.as_secs_f64() * 1e6 / n
    );
    println!(
        "watchdog round trip (signal sent to sample read): {:.1} µs per sample",
        stats.sample_round_trip_time.as_secs_f64() * 1e6 / n
    );
    println!(
        "spinning task's progress with samples / without: {:.3} ({} vs {} units)",
        sampled as f64 / base as f64,
        sampled,
        base
    );
    println!("samples missed: {}", stats.samples_missed);
}
