//! Where the threshold really is: how often a poll blocked for a given time is reported.
//!
//! ```text
//! cargo run --release -p pinwatch --example threshold_curve
//! cargo run --release -p pinwatch --example threshold_curve -- 100 15,18,19,20,21,22,23,25,30
//! cargo run --release -p pinwatch --example threshold_curve -- 100 19,20,21,22 spin
//! cargo run --release -p pinwatch --example threshold_curve -- 100 19,20,21,22 park-spin
//! stress-ng --cpu 2 & cargo run --release -p pinwatch --example threshold_curve
//! ```
//!
//! Builds a runtime (2 workers, pinwatch's defaults: 20 ms threshold, 2 ms scan interval, a
//! sink of its own), then for each duration spawns tasks one after another (the first argument:
//! tries per duration, 60 by default; the second: the durations in ms) whose one poll blocks in
//! `std::thread::sleep` for that long (the third argument `spin`: runs on the CPU that long;
//! `park-spin`: first waits 0–18 ms on tokio's timer, its worker parked, and then spins — a
//! poll after a park). It prints, per duration, how many of those polls were
//! reported, how long they really ran (timed inside the poll), and the durations reported.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pinwatch::{PinnedEvent, State};

fn main() -> Result<(), pinwatch::Error> {
    let mut args = std::env::args().skip(1);
    let tries: usize = args
        .next()
        .map_or(60, |a| a.parse().expect("tries: a number"));
    let durations: Vec<u64> = args.next().map_or_else(
        || vec![10, 15, 18, 19, 20, 21, 22, 23, 25, 30],
        |a| {
            a.split(',')
                .map(|d| d.parse().expect("durations: ms,ms,…"))
                .collect()
        },
    );
    let how = args.next().unwrap_or_else(|| "sleep".into());
    let (spin, park) = match how.as_str() {
        "sleep" => (false, false),
        "spin" => (true, false),
        "park-spin" => (true, true),
        other => panic!("how a poll blocks: sleep, spin or park-spin, not {other:?}"),
    };
    // The waits before the polls of `park-spin`: spread over 0–18 ms, the same every run.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let events: Arc<Mutex<Vec<PinnedEvent>>> = Arc::default();
    let sink = Arc::clone(&events);
    let mut tokio = tokio::runtime::Builder::new_multi_thread();
    tokio.worker_threads(2).enable_all();
    let (rt, detector) = pinwatch::Builder::from_env()?
        .tracing(false)
        .sink(move |e: &PinnedEvent| sink.lock().unwrap().push(e.clone()))
        .build(&mut tokio)?;
    let threshold = detector.settings().map(|s| s.threshold);
    // Per duration: (task id, how long its poll really blocked).
    let mut runs: Vec<(u64, Vec<(u64, Duration)>)> = Vec::new();
    for &ms in &durations {
        let mut these = Vec::with_capacity(tries);
        for _ in 0..tries {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let wait = Duration::from_micros(seed % 18_000);
            let (id, real) = rt.block_on(async move {
                tokio::spawn(async move {
                    if park {
                        tokio::time::sleep(wait).await;
                    }
                    let start = Instant::now();
                    if spin {
                        while start.elapsed() < Duration::from_millis(ms) {
                            std::hint::spin_loop();
                        }
                    } else {
                        std::thread::sleep(Duration::from_millis(ms));
                    }
                    let real = start.elapsed();
                    (tokio::task::id().to_string().parse::<u64>().unwrap(), real)
                })
                .await
                .unwrap()
            });
            these.push((id, real));
        }
        runs.push((ms, these));
    }
    drop(rt);
    let stats = detector.shutdown();
    let reported: HashMap<u64, Duration> = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.state == State::Completed)
        .filter_map(|e| Some((e.task_id?, e.duration)))
        .collect();
    println!(
        "threshold {threshold:?}, {tries} tries per duration, polls that {}, load {}",
        how,
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .unwrap_or("?")
    );
    println!("blocked  reported  really ran (min..max)  reported as (min..max)  shortfall");
    for (ms, these) in &runs {
        let real_min = these.iter().map(|r| r.1).min().unwrap_or_default();
        let real_max = these.iter().map(|r| r.1).max().unwrap_or_default();
        let got: Vec<(Duration, Duration)> = these
            .iter()
            .filter_map(|(id, real)| Some((*real, *reported.get(id)?)))
            .collect();
        let rep_min = got.iter().map(|g| g.1).min();
        let rep_max = got.iter().map(|g| g.1).max();
        // A reported duration shorter than the poll really ran breaks the promise.
        let short = got.iter().filter(|(real, rep)| rep < real).count();
        println!(
            "{ms:>4} ms  {:>5.1} %  {:>8.2?}..{:<8.2?}  {:>9}..{:<9}  {short}",
            100.0 * got.len() as f64 / these.len() as f64,
            real_min,
            real_max,
            rep_min.map_or("-".into(), |d| format!("{d:.2?}")),
            rep_max.map_or("-".into(), |d| format!("{d:.2?}")),
        );
    }
    println!(
        "events {} delivered {} dropped {}",
        stats.events, stats.delivered, stats.dropped
    );
    Ok(())
}
