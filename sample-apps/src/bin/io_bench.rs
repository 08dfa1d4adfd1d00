//! `io_bench`: N tasks each waiting 100 ms — tokio tasks (pinwatch on) vs a thread per task vs a
//! fixed pool of 200 threads — wall time, peak OS threads, peak RSS. Each run is a child process,
//! so that peaks are its own. Article: pool(200) 5,047 / 50,173 ms; thread-per-task 2,107 /
//! 18,425 ms; virtual threads 261 / 1,048 ms with 9 peak OS threads (10k / 100k tasks).
//!
//! `cargo run --release -p sample-apps --bin io_bench` (`--all` adds the slow pool run at 100k).

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use sample_apps::{procstat, table};

const WAIT: Duration = Duration::from_millis(100);

#[derive(Parser)]
#[command(
    about = "N tasks each waiting 100 ms: tokio tasks vs thread per task vs a pool of 200 threads"
)]
struct Args {
    /// Task counts to run (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    tasks: Vec<usize>,
    /// Also run the pool of 200 threads at 100,000 tasks or more (about 50 s each).
    #[arg(long)]
    all: bool,
    /// tokio worker threads (default: one per core).
    #[arg(long)]
    workers: Option<usize>,
    /// Internal: run one mode in this process and print its result.
    #[arg(long, hide = true)]
    child: Option<String>,
}

fn main() {
    let args = Args::parse();
    if args.workers == Some(0) {
        eprintln!("io_bench: --workers must be at least 1");
        std::process::exit(2);
    }
    if let Some(mode) = &args.child {
        child(mode, args.tasks[0], args.workers);
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    let mut rows = Vec::new();
    for &n in &args.tasks {
        for mode in ["tokio", "thread-per-task", "pool-200"] {
            if mode == "pool-200" && n >= 100_000 && !args.all {
                rows.push(vec![
                    mode.into(),
                    n.to_string(),
                    "skipped (about 50 s; run with --all)".into(),
                    String::new(),
                    String::new(),
                    String::new(),
                ]);
                continue;
            }
            eprintln!("io_bench: {mode} with {n} tasks…");
            let mut cmd = Command::new(&exe);
            cmd.args(["--child", mode, "--tasks", &n.to_string()]);
            if let Some(w) = args.workers {
                cmd.args(["--workers", &w.to_string()]);
            }
            let out = cmd.output().expect("run child");
            let text = String::from_utf8_lossy(&out.stdout);
            let f: Vec<&str> = text.split_whitespace().collect();
            if !out.status.success() || f.len() < 3 {
                // One line says it best: the panic message or the error, not the backtrace.
                let err = String::from_utf8_lossy(&out.stderr);
                let lines: Vec<&str> = err.lines().collect();
                let why = lines
                    .iter()
                    .position(|l| l.contains("panicked at"))
                    .and_then(|i| lines.get(i + 1))
                    .or_else(|| lines.last())
                    .map_or("no output", |l| l.trim());
                rows.push(vec![
                    mode.into(),
                    n.to_string(),
                    format!("failed ({}): {why}", out.status),
                    String::new(),
                    String::new(),
                    String::new(),
                ]);
                continue;
            }
            rows.push(vec![
                mode.into(),
                n.to_string(),
                format!("{} ms", f[0]),
                f[1].into(),
                format!("{} MiB", f[2].parse::<u64>().unwrap_or(0) / 1024),
                f[3..].join(" "),
            ]);
        }
    }
    print!(
        "{}",
        table::render(
            &[
                "mode",
                "tasks",
                "wall time",
                "peak OS threads",
                "peak RSS",
                "notes"
            ],
            &rows
        )
    );
}

/// Runs one mode; prints `elapsed_ms peak_threads peak_rss_kib notes…`.
fn child(mode: &str, n: usize, workers: Option<usize>) {
    let peak = procstat::ThreadPeak::start();
    let start = Instant::now();
    let notes = match mode {
        "tokio" => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.enable_all();
            if let Some(w) = workers {
                b.worker_threads(w);
            }
            let (rt, detector) = pinwatch::Builder::new()
                .tracing(false)
                .build(&mut b)
                .expect("runtime");
            rt.block_on(async {
                let hs: Vec<_> = (0..n)
                    .map(|_| tokio::spawn(tokio::time::sleep(WAIT)))
                    .collect();
                for h in hs {
                    h.await.unwrap();
                }
            });
            let stats = detector.stats();
            format!("pinned polls: {}", stats.pinned_polls)
        }
        "thread-per-task" => {
            let mut handles = Vec::with_capacity(n);
            let mut failed = None;
            for i in 0..n {
                match std::thread::Builder::new().spawn(|| std::thread::sleep(WAIT)) {
                    Ok(h) => handles.push(h),
                    Err(e) => {
                        failed = Some(format!("spawn failed after {i} threads: {e}"));
                        break;
                    }
                }
            }
            for h in handles {
                let _ = h.join();
            }
            failed.unwrap_or_default()
        }
        "pool-200" => {
            let next = Arc::new(AtomicUsize::new(0));
            let workers: Vec<_> = (0..200)
                .map(|_| {
                    let next = Arc::clone(&next);
                    std::thread::spawn(move || {
                        while next.fetch_add(1, Ordering::Relaxed) < n {
                            std::thread::sleep(WAIT);
                        }
                    })
                })
                .collect();
            for w in workers {
                w.join().unwrap();
            }
            String::new()
        }
        other => {
            eprintln!("io_bench: unknown mode {other:?}");
            std::process::exit(2);
        }
    };
    let elapsed = start.elapsed();
    let threads = peak.finish();
    println!(
        "{} {} {} {}",
        elapsed.as_millis(),
        threads,
        procstat::peak_rss_kib(),
        notes
    );
}
