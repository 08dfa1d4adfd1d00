//! `semaphore`: 10,000 tasks call a downstream that accepts at most 20 at once, limited with
//! `tokio::sync::Semaphore`; shows the maximum concurrency the downstream saw and the total time
//! (expected: tasks / 20 × latency). `--variant bad` drops the semaphore to show what the
//! downstream would see.
//!
//! `cargo run --release -p sample-apps --bin semaphore`

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use sample_apps::table;

#[derive(Parser)]
#[command(about = "10,000 tasks, a downstream that takes 20 at once, a Semaphore in between")]
struct Args {
    /// Number of tasks.
    #[arg(long, default_value_t = 10_000)]
    tasks: usize,
    /// The downstream's limit (and the semaphore's permits).
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// The downstream's latency per call.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10ms")]
    latency: Duration,
    /// Worker threads.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// `fixed` (with the semaphore), `bad` (without), or both when not given.
    #[arg(long)]
    variant: Option<String>,
}

#[derive(Default)]
struct Downstream {
    in_flight: AtomicUsize,
    max: AtomicUsize,
    over_limit: AtomicUsize,
}

impl Downstream {
    async fn call(&self, limit: usize, latency: Duration) {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
        if now > limit {
            self.over_limit.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep(latency).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn main() {
    let args = Args::parse();
    if args.limit == 0 || args.workers == 0 {
        eprintln!("semaphore: --limit and --workers must be at least 1");
        std::process::exit(2);
    }
    let variants: Vec<&str> = match args.variant.as_deref() {
        None => vec!["fixed", "bad"],
        Some(v @ ("fixed" | "bad")) => vec![v],
        Some(other) => {
            eprintln!("semaphore: --variant must be `fixed` or `bad`, not {other:?}");
            std::process::exit(2);
        }
    };
    let mut rows = Vec::new();
    for v in variants {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(args.workers).enable_all();
        let (rt, detector) = pinwatch::Builder::new()
            .tracing(false)
            .build(&mut b)
            .expect("runtime");
        let down = Arc::new(Downstream::default());
        let sem = Arc::new(tokio::sync::Semaphore::new(args.limit));
        let start = Instant::now();
        rt.block_on(async {
            let hs: Vec<_> = (0..args.tasks)
                .map(|_| {
                    let (down, sem) = (Arc::clone(&down), Arc::clone(&sem));
                    let (limit, latency) = (args.limit, args.latency);
                    let limited = v == "fixed";
                    tokio::spawn(async move {
                        let _permit = if limited {
                            Some(sem.acquire().await.unwrap())
                        } else {
                            None
                        };
                        down.call(limit, latency).await;
                    })
                })
                .collect();
            for h in hs {
                h.await.unwrap();
            }
        });
        let elapsed = start.elapsed();
        let pinned = detector.stats().pinned_polls;
        drop(rt);
        drop(detector);
        let expected = args.latency * (args.tasks.div_ceil(args.limit) as u32);
        rows.push(vec![
            if v == "fixed" {
                "Semaphore(limit)".into()
            } else {
                "no limit".into()
            },
            args.tasks.to_string(),
            args.limit.to_string(),
            down.max.load(Ordering::SeqCst).to_string(),
            down.over_limit.load(Ordering::Relaxed).to_string(),
            table::ms(elapsed),
            if v == "fixed" {
                table::ms(expected)
            } else {
                "-".into()
            },
            pinned.to_string(),
        ]);
    }
    print!(
        "{}",
        table::render(
            &[
                "variant",
                "tasks",
                "limit",
                "max concurrency",
                "calls over limit",
                "total time",
                "expected",
                "pinned polls"
            ],
            &rows
        )
    );
}
