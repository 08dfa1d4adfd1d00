//! Overhead of pinwatch's poll hooks on a yield storm: 200,000 tasks × 10 `yield_now` on two
//! workers, on a plain tokio runtime (no hooks installed), tokio with two empty poll hooks, a
//! pinwatch runtime, and one with the Prometheus exporter on and scraped, rotating, several
//! rounds. Prints medians, per-round ratios and ns per poll; never fails on timing.
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
    // The exporter on: its endpoint serving, scraped every 100 ms while the storm runs.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (exported, exporting) = pinwatch::Builder::new()
        .tracing(false)
        .prometheus_addr(([127, 0, 0, 1], port).into())
        .build(&mut tokio_builder())
        .unwrap();
    let scraping = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let scraper = {
        let scraping = std::sync::Arc::clone(&scraping);
        std::thread::spawn(move || {
            let mut scrapes = 0u64;
            while scraping.load(std::sync::atomic::Ordering::Relaxed) {
                use std::io::{Read, Write};
                if let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                    let _ = c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n");
                    let _ = c.read_to_end(&mut Vec::new());
                    scrapes += 1;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            scrapes
        })
    };
    let configs: [(&str, &tokio::runtime::Runtime, &str); 4] = [
        ("plain tokio", &plain, ""),
        ("empty hooks", &empty, " (tokio's cost of calling hooks)"),
        ("pinwatch", &watched, ""),
        (
            "+ prometheus",
            &exported,
            " (endpoint on, scraped every 100 ms)",
        ),
    ];
    // Warm-up: thread pools, allocator, slots.
    for (_, rt, _) in &configs {
        storm(rt, tasks / 4, yields);
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); configs.len()];
    for round in 0..rounds {
        // Rotate the order, so drift in machine load hits all alike.
        for k in 0..configs.len() {
            let i = (round + k) % configs.len();
            times[i].push(storm(configs[i].1, tasks, yields));
        }
        let line: Vec<String> = configs
            .iter()
            .zip(&times)
            .map(|((name, _, _), t)| format!("{name} {:.1} ms", t[round].as_secs_f64() * 1e3))
            .collect();
        eprintln!("round {}/{rounds}: {}", round + 1, line.join(", "));
    }
    scraping.store(false, std::sync::atomic::Ordering::Relaxed);
    let scrapes = scraper.join().unwrap();
    println!("yield storm: {tasks} tasks x {yields} yield_now, 2 workers, {rounds} rounds");
    let base = times[0].clone();
    for ((name, _, note), t) in configs.iter().zip(&times) {
        // The median of per-round ratios: each round's runs share the machine's load.
        let ratio = median_ratio(t, &base);
        let m = median(&mut t.clone());
        println!(
            "{name:<13} median {:8.1} ms  {:6.1} ns/poll  per-round ratio to plain {:+6.1} %{note}",
            m.as_secs_f64() * 1e3,
            m.as_secs_f64() * 1e9 / polls,
            (ratio - 1.0) * 100.0
        );
    }
    println!(
        "pinwatch vs empty hooks (per-round ratio) {:+.1} %; exporter on vs off {:+.1} %",
        (median_ratio(&times[2], &times[1]) - 1.0) * 100.0,
        (median_ratio(&times[3], &times[2]) - 1.0) * 100.0
    );
    println!(
        "pinned polls seen: {} and {}; scrapes answered: {scrapes}",
        detector.stats().pinned_polls,
        exporting.stats().pinned_polls
    );
    drop((watched, exported, plain, empty));
    drop((detector, exporting));
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
