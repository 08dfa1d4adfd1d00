//! What an idle service costs: a runtime whose only task sleeps, measured over a window.
//!
//! ```text
//! cargo run --release -p pinwatch --example idle -- pinwatch 10
//! cargo run --release -p pinwatch --example idle -- plain 10
//! ```
//!
//! Modes: `plain` (tokio alone), `pinwatch` (`pinwatch::Builder::from_env()`: the defaults,
//! with whatever `PINWATCH_*` variables are set). After a one-second warm-up it sums every
//! thread's CPU time (`/proc/self/task/*/schedstat`) and context switches
//! (`/proc/self/task/*/status`) over the window, and prints them per thread and in all.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Per thread (name and tid): CPU ns, and voluntary + involuntary context switches.
fn threads() -> BTreeMap<(String, String), (u64, u64)> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for e in dir.flatten() {
        let p = e.path();
        let tid = e.file_name().to_string_lossy().into_owned();
        let name = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        let cpu = std::fs::read_to_string(p.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        let switches = std::fs::read_to_string(p.join("status"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("ctxt_switches"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        out.insert((name.trim().to_owned(), tid), (cpu, switches));
    }
    out
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "pinwatch".into());
    let secs: f64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(10.0);
    let mut tokio = tokio::runtime::Builder::new_multi_thread();
    tokio.worker_threads(2).enable_all();
    let (rt, detector) = match mode.as_str() {
        "plain" => (tokio.build().expect("runtime"), None),
        "pinwatch" => {
            let (rt, d) = pinwatch::Builder::from_env()
                .expect("PINWATCH_* settings")
                .build(&mut tokio)
                .expect("runtime");
            (rt, Some(d))
        }
        other => {
            eprintln!("idle: unknown mode {other:?}; use plain or pinwatch");
            std::process::exit(2);
        }
    };
    let window = Duration::from_secs_f64(secs);
    let (before, after, took) = rt.block_on(async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let before = threads();
        let t = Instant::now();
        tokio::time::sleep(window).await;
        (before, threads(), t.elapsed())
    });
    let per_s = |ns: u64| ns as f64 / 1e6 / took.as_secs_f64();
    let (mut cpu, mut sw) = (0u64, 0u64);
    for (k, (c1, s1)) in &after {
        let (c0, s0) = before.get(k).copied().unwrap_or((0, 0));
        let (dc, ds) = (c1.saturating_sub(c0), s1.saturating_sub(s0));
        cpu += dc;
        sw += ds;
        println!(
            "{:<20} {:>8.3} ms/s  {:>7.1} switches/s",
            k.0,
            per_s(dc),
            ds as f64 / took.as_secs_f64()
        );
    }
    println!(
        "{mode}: {:.3} ms of CPU per second, {:.1} context switches per second ({:.1} s)",
        per_s(cpu),
        sw as f64 / took.as_secs_f64(),
        took.as_secs_f64()
    );
    drop(rt);
    drop(detector);
}
