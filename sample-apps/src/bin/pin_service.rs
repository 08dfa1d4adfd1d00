//! A small service that pins its workers now and then, for the dashboards, the alert rules and
//! the exporters' tests: every 100 ms a task sleeps 30–120 ms with `std::thread::sleep`, every
//! 300 ms one spins the CPU for 40 ms, and every 700 ms one reads a slow socket (`io`).
//! `--stuck N` also leaves N workers stuck for good (a receive nobody answers).
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
    /// Stop after this long (humantime: `30s`); default: run until killed.
    #[arg(long = "for", value_parser = humantime::parse_duration)]
    run_for: Option<Duration>,
    /// Only the stuck workers: no pins that come and go.
    #[arg(long)]
    quiet: bool,
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
    // The work runs as a task, as in a service.
    tokio::spawn(serve(args)).await.expect("service");
}

async fn serve(args: Args) {
    for _ in 0..args.stuck {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        std::mem::forget(tx);
        tokio::spawn(async move {
            let _ = rx.recv();
        });
    }
    println!("pin_service: running ({} workers stuck)", args.stuck);
    let start = Instant::now();
    let mut tick = 0u64;
    let mut ticker = tokio::time::interval(Duration::from_millis(100));
    while args.run_for.is_none_or(|d| start.elapsed() < d) {
        ticker.tick().await;
        tick += 1;
        if args.quiet {
            continue;
        }
        let ms = 30 + (tick * 37) % 90;
        tokio::spawn(async move { std::thread::sleep(Duration::from_millis(ms)) });
        if tick % 3 == 0 {
            tokio::spawn(async { spin(Duration::from_millis(40)) });
        }
        if tick % 7 == 0 {
            tokio::spawn(async { slow_read(Duration::from_millis(50)) });
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
