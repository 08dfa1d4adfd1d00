//! A worker stuck for good: a task waits on a `std::sync::mpsc` channel that nobody sends on.
//! No tool that reports slow polls after they return ever sees this; pinwatch reports it while
//! it lasts, again every `PINWATCH_REPORT_INTERVAL`.
//!
//! `cargo run -p sample-apps --bin deadlock -- --for 3s` (without `--for`, until killed).

use std::time::Duration;

use clap::Parser;

#[derive(Parser)]
#[command(about = "Pins one tokio worker on a std channel receive, for a while or for good")]
struct Args {
    /// Release the stuck worker after this long (humantime: `3s`); default: never.
    #[arg(long = "for", value_parser = humantime::parse_duration)]
    release_after: Option<Duration>,
}

#[pinwatch::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    // pinwatch reports through `tracing` (target `pinwatch`, WARN): print it.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let stuck = tokio::spawn(async move {
        // Pinned: a blocking receive inside a task.
        let _ = rx.recv();
    });
    println!(
        "a worker is stuck in std::sync::mpsc::Receiver::recv; pinwatch reports it while it lasts"
    );
    match args.release_after {
        Some(d) => {
            std::thread::spawn(move || {
                std::thread::sleep(d);
                let _ = tx.send(());
            });
        }
        None => std::mem::forget(tx),
    }
    let _ = stuck.await;
    println!("released");
}
