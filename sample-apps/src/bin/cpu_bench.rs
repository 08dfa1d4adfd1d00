//! `cpu_bench`: CPU-bound tasks (count the primes below 60,000; 2,000 tasks) as tokio tasks
//! (pinwatch on), on a fixed pool of one thread per core, and with rayon. Warm-up, then several
//! rounds, median. Articles: no speed-up from virtual threads on CPU-bound work.
//!
//! `cargo run --release -p sample-apps --bin cpu_bench`

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use rayon::prelude::*;
use sample_apps::table;

#[derive(Parser)]
#[command(about = "CPU-bound tasks: tokio tasks vs a pool of one thread per core vs rayon")]
struct Args {
    /// Number of tasks.
    #[arg(long, default_value_t = 2000)]
    tasks: usize,
    /// Each task counts the primes below this.
    #[arg(long, default_value_t = 60_000)]
    limit: u32,
    /// Threads for every mode: tokio workers, pool threads, rayon threads (default: one per
    /// core).
    #[arg(long)]
    workers: Option<usize>,
    /// Measured rounds (after one warm-up round).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

fn count_primes(limit: u32) -> u32 {
    (2..limit)
        .filter(|&n| (2..).take_while(|d| d * d <= n).all(|d| n % d != 0))
        .count() as u32
}

fn main() {
    let args = Args::parse();
    if args.workers == Some(0) || args.rounds == 0 || args.tasks == 0 {
        eprintln!("cpu_bench: --workers, --rounds and --tasks must be at least 1");
        std::process::exit(2);
    }
    let cores = args
        .workers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(cores).enable_all();
    let (rt, detector) = pinwatch::Builder::new()
        .tracing(false)
        .build(&mut b)
        .expect("runtime");
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(cores)
        .build()
        .expect("rayon pool");
    let (tasks, limit) = (args.tasks, args.limit);
    let expected = count_primes(limit) as u64 * tasks as u64;

    let run_tokio = || {
        rt.block_on(async {
            let hs: Vec<_> = (0..tasks)
                .map(|_| tokio::spawn(async move { count_primes(limit) as u64 }))
                .collect();
            let mut sum = 0;
            for h in hs {
                sum += h.await.unwrap();
            }
            sum
        })
    };
    let run_pool = || {
        let next = Arc::new(AtomicUsize::new(0));
        let sum = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..cores)
            .map(|_| {
                let (next, sum) = (Arc::clone(&next), Arc::clone(&sum));
                std::thread::spawn(move || {
                    while next.fetch_add(1, Ordering::Relaxed) < tasks {
                        sum.fetch_add(count_primes(limit) as usize, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        sum.load(Ordering::Relaxed) as u64
    };
    let run_rayon = || {
        pool.install(|| {
            (0..tasks)
                .into_par_iter()
                .map(|_| count_primes(limit) as u64)
                .sum::<u64>()
        })
    };
    let modes: [(&str, &dyn Fn() -> u64); 3] = [
        ("tokio tasks", &run_tokio),
        ("pool of cores", &run_pool),
        ("rayon", &run_rayon),
    ];
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); modes.len()];
    for round in 0..=args.rounds {
        for (i, (name, f)) in modes.iter().enumerate() {
            let t = Instant::now();
            let sum = f();
            let d = t.elapsed();
            assert_eq!(sum, expected, "{name} counted wrong");
            if round > 0 {
                times[i].push(d);
            }
        }
        eprintln!("cpu_bench: round {round}/{} done", args.rounds);
    }
    let medians: Vec<Duration> = times
        .iter_mut()
        .map(|t| {
            t.sort();
            t[t.len() / 2]
        })
        .collect();
    let base = medians[1];
    let rows: Vec<Vec<String>> = modes
        .iter()
        .zip(&medians)
        .map(|((name, _), m)| {
            vec![
                name.to_string(),
                cores.to_string(),
                table::ms(*m),
                format!("{:.2}x", base.as_secs_f64() / m.as_secs_f64()),
            ]
        })
        .collect();
    println!(
        "{tasks} tasks, each counting the primes below {limit}; median of {} rounds after a warm-up",
        args.rounds
    );
    print!(
        "{}",
        table::render(&["mode", "threads", "median", "speed vs pool"], &rows)
    );
    println!(
        "pinned polls reported by pinwatch: {}",
        detector.stats().pinned_polls
    );
}
