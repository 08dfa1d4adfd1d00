//! Overhead of pinwatch's poll hooks on a yield storm: 200,000 tasks × 10 `yield_now` on two
//! workers, on a plain tokio runtime (no hooks installed) and on a pinwatch runtime,
//! alternating, several rounds. Prints medians, the ratio and ns per poll; never fails on
//! timing.
//!
//! `cargo bench -p pinwatch --bench overhead` (`-- --rounds N --tasks N` to change the size).

use std::time::{Duration, Instant};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a whole number, got {v:?}"))
        })
        .unwrap_or(default)
}

fn tokio_builder() -> tokio::runtime::Builder {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(2).enable_all();
    b
}

fn storm(rt: &tokio::runtime::Runtime, tasks: usize, yields: usize) -> Duration {
    rt.block_on(async {
        let start = Instant::now();
        let handles: Vec<_> = (0..tasks)
            .map(|_| {
                tokio::spawn(async move {
                    for _ in 0..yields {
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        for h in handles {
            h.await.unwrap();
        }
        start.elapsed()
    })
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let rounds = arg("--rounds", 9);
    let tasks = arg("--tasks", 200_000);
    let yields = 10;
    let polls = (tasks * (yields + 1)) as f64;

    let plain = tokio_builder().build().unwrap();
    // tokio's own cost of calling two poll hooks, as a reference: hooks that do nothing.
    let empty = tokio_builder()
        .on_before_task_poll(|_| {})
        .on_after_task_poll(|_| {})
        .build()
        .unwrap();
    let (watched, detector) = pinwatch::Builder::new()
        .tracing(false)
        .build(&mut tokio_builder())
        .unwrap();
    // Warm-up: thread pools, allocator, slots.
    storm(&plain, tasks / 4, yields);
    storm(&watched, tasks / 4, yields);
    storm(&empty, tasks / 4, yields);

    let mut p = Vec::new();
    let mut w = Vec::new();
    let mut e = Vec::new();
    for round in 0..rounds {
        // Rotate the order, so drift in machine load hits all alike.
        for k in 0..3 {
            match (round + k) % 3 {
                0 => p.push(storm(&plain, tasks, yields)),
                1 => w.push(storm(&watched, tasks, yields)),
                _ => e.push(storm(&empty, tasks, yields)),
            }
        }
        eprintln!(
            "round {}/{rounds}: plain {:.1} ms, pinwatch {:.1} ms, empty hooks {:.1} ms",
            round + 1,
            p[round].as_secs_f64() * 1e3,
            w[round].as_secs_f64() * 1e3,
            e[round].as_secs_f64() * 1e3
        );
    }
    let stats = detector.stats();
    // The median of per-round ratios: each round's three runs share the machine's load.
    let round_ratio = median_ratio(&w, &p);
    let hook_ratio = median_ratio(&w, &e);
    let (mp, mw, me) = (median(&mut p), median(&mut w), median(&mut e));
    println!("yield storm: {tasks} tasks x {yields} yield_now, 2 workers, {rounds} rounds");
    let line = |label: &str, d: Duration, note: &str| {
        println!(
            "{label:<13} median {:8.1} ms  {:6.1} ns/poll{note}",
            d.as_secs_f64() * 1e3,
            d.as_secs_f64() * 1e9 / polls
        )
    };
    line("plain tokio", mp, "");
    line("with pinwatch", mw, "");
    line("empty hooks", me, " (tokio's cost of calling hooks)");
    println!(
        "ratio {:.3} (overhead {:+.1} %), {:+.1} ns/poll; pinned polls seen: {}",
        mw.as_secs_f64() / mp.as_secs_f64(),
        (mw.as_secs_f64() / mp.as_secs_f64() - 1.0) * 100.0,
        (mw.as_secs_f64() - mp.as_secs_f64()) * 1e9 / polls,
        stats.pinned_polls
    );
    println!(
        "median of per-round ratios: pinwatch / plain {:+.1} %, pinwatch / empty hooks {:+.1} %",
        (round_ratio - 1.0) * 100.0,
        (hook_ratio - 1.0) * 100.0
    );
    drop(watched);
    drop(detector);
}

/// The median over rounds of `num[i] / den[i]`.
fn median_ratio(num: &[Duration], den: &[Duration]) -> f64 {
    let mut ratios: Vec<f64> = num
        .iter()
        .zip(den)
        .map(|(n, d)| n.as_secs_f64() / d.as_secs_f64())
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios[ratios.len() / 2]
}
