//! A small service that pins its workers now and then, for the dashboards, the alert rules and
//! the exporters' tests: every 100 ms a task sleeps 30–120 ms with `std::thread::sleep`, every
//! 300 ms one spins the CPU for 40 ms, and every 700 ms one reads a slow socket (`io`).
//! `--stuck N` also leaves N workers stuck for good (a receive nobody answers).
//! `--commands` takes pins to make from stdin, one per line — `pin 100ms` (a task sleeps that
//! long), `hold` / `release` (a task blocks its worker until released), `storm 300 8ms` (that
//! many tasks sleeping that long) — and says on stdout when each has started or ended; it stops
//! at the end of stdin. For `pinwatch ctl`'s tests and demos.
//!
//! `PINWATCH_PROMETHEUS_ADDR=127.0.0.1:9464 cargo run -p sample-apps --bin pin_service`, then
//! `curl -s 127.0.0.1:9464/metrics | grep pinwatch_`.

use std::io::Read;
use std::time::{Duration, Instant};

use clap::Parser;

#[derive(Parser)]
#[command(about = "A service that pins its tokio workers now and then, optionally some for good")]
struct Args {
    /// Workers left stuck for good (at most the worker count, 3).
    #[arg(long, default_value_t = 0)]
    stuck: usize,
    /// Stop after this long (humantime: `30s`), stuck workers or not (with stuck workers the
    /// process exits at once: no final reports, no `PINWATCH_DUMP_ON_EXIT`); default: run until
    /// killed.
    #[arg(long = "for", value_parser = humantime::parse_duration)]
    run_for: Option<Duration>,
    /// Only the stuck workers: no pins that come and go.
    #[arg(long)]
    quiet: bool,
    /// Take pins to make from stdin (`pin 100ms`, `hold`, `release`, `storm 300 8ms`); stop at
    /// its end.
    #[arg(long)]
    commands: bool,
}

#[pinwatch::main(flavor = "multi_thread", worker_threads = 3)]
async fn main() {
    let args = Args::parse();
    if args.stuck > 3 {
        eprintln!(
            "pin_service: --stuck {} is more than the 3 workers",
            args.stuck
        );
        std::process::exit(2);
    }
    let stuck = args.stuck;
    if let (true, Some(d)) = (stuck > 0, args.run_for) {
        // With every worker stuck no timer of the runtime fires, and `serve` never looks at
        // the clock again: a thread of its own ends the process on time.
        std::thread::spawn(move || {
            std::thread::sleep(d);
            stopped(stuck);
        });
    }
    // The work runs as a task, as in a service.
    tokio::spawn(serve(args)).await.expect("service");
    if stuck > 0 {
        // A runtime waits for its workers when it is dropped, and these never return (that is
        // what they are for): end the process here, or `--for` would never end it.
        stopped(stuck);
    }
}

/// Ends the process with its stuck workers, once, whoever sees the time is up first.
fn stopped(stuck: usize) -> ! {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| println!("pin_service: stopped ({stuck} workers still stuck)"));
    std::process::exit(0);
}

async fn serve(args: Args) {
    for _ in 0..args.stuck {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        std::mem::forget(tx);
        tokio::spawn(async move {
            let _ = rx.recv();
        });
    }
    let ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    if args.commands {
        let handle = tokio::runtime::Handle::current();
        let ended = std::sync::Arc::clone(&ended);
        std::thread::spawn(move || {
            commands(&handle);
            ended.store(true, std::sync::atomic::Ordering::Release);
        });
    }
    println!("pin_service: running ({} workers stuck)", args.stuck);
    let start = Instant::now();
    let mut tick = 0u64;
    let mut ticker = tokio::time::interval(Duration::from_millis(100));
    while args.run_for.is_none_or(|d| start.elapsed() < d)
        && !ended.load(std::sync::atomic::Ordering::Acquire)
    {
        ticker.tick().await;
        tick += 1;
        if args.quiet {
            continue;
        }
        let ms = 30 + (tick * 37) % 90;
        tokio::spawn(async move { std::thread::sleep(Duration::from_millis(ms)) });
        if tick.is_multiple_of(3) {
            tokio::spawn(async { spin(Duration::from_millis(40)) });
        }
        if tick.is_multiple_of(7) {
            tokio::spawn(async { slow_read(Duration::from_millis(50)) });
        }
    }
}

/// Reads pins to make from stdin until its end; answers each line on stdout.
fn commands(rt: &tokio::runtime::Handle) {
    let mut release: Option<std::sync::mpsc::Sender<()>> = None;
    for line in std::io::stdin().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        let dur = |s: &str| humantime::parse_duration(s).ok();
        match words.as_slice() {
            ["pin", d] if dur(d).is_some() => {
                let d = dur(d).unwrap_or_default();
                let what = d.as_millis();
                rt.spawn(async move {
                    std::thread::sleep(d);
                    println!("pin_service: pin of {what}ms done");
                });
            }
            ["hold"] => {
                let (tx, rx) = std::sync::mpsc::channel::<()>();
                release = Some(tx);
                rt.spawn(async move {
                    println!("pin_service: holding a worker");
                    let _ = rx.recv();
                    println!("pin_service: released");
                });
            }
            ["release"] => {
                if let Some(tx) = release.take() {
                    let _ = tx.send(());
                }
            }
            ["storm", n, d] if n.parse::<usize>().is_ok() && dur(d).is_some() => {
                let n: usize = n.parse().unwrap_or(0);
                let d = dur(d).unwrap_or_default();
                rt.spawn(async move {
                    let pins: Vec<_> = (0..n)
                        .map(|_| tokio::spawn(async move { std::thread::sleep(d) }))
                        .collect();
                    for p in pins {
                        let _ = p.await;
                    }
                    println!("pin_service: storm of {n} done");
                });
            }
            _ => println!("pin_service: unknown command {line:?}"),
        }
    }
}

fn spin(d: Duration) -> u64 {
    let start = Instant::now();
    let mut x = 1u64;
    while start.elapsed() < d {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
    x
}

/// Reads a socket whose peer answers after `d`: blocking I/O inside a task.
fn slow_read(d: Duration) {
    let (mut reader, mut writer) = std::os::unix::net::UnixStream::pair().expect("socket pair");
    std::thread::spawn(move || {
        std::thread::sleep(d);
        let _ = std::io::Write::write_all(&mut writer, b"x");
    });
    let mut byte = [0u8; 1];
    let _ = reader.read_exact(&mut byte);
}
