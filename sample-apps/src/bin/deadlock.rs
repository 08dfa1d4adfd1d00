//! Workers stuck for good: tasks wait on `std::sync::mpsc` channels that nobody sends on.
//! No tool that reports slow polls after they return ever sees this; pinwatch reports it while
//! it lasts, again every `PINWATCH_REPORT_INTERVAL`.
//!
//! `cargo run -p sample-apps --bin deadlock -- --for 3s` (without `--for`, until killed). With
//! `PINWATCH_CONSOLE=on`, `tokio-console` shows the stuck workers as `pinwatch.worker` resources.

use std::time::Duration;

use clap::Parser;

#[derive(Parser)]
#[command(about = "Pins tokio workers on std channel receives, for a while or for good")]
struct Args {
    /// Release the stuck workers after this long (humantime: `3s`); default: never.
    #[arg(long = "for", value_parser = humantime::parse_duration)]
    release_after: Option<Duration>,
    /// Release the stuck workers when a line (or the end) comes on stdin; exit at its end.
    #[arg(long, conflicts_with = "release_after")]
    release_on_stdin: bool,
    /// How many of the 2 workers get stuck.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    stuck: u8,
}

#[pinwatch::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    // pinwatch reports through `tracing` (target `pinwatch`, WARN): print it. With
    // `PINWATCH_CONSOLE=on` pinwatch has installed the process's subscriber already (the console
    // layer and a `fmt` layer), so this one is not needed and `try_init` leaves it be.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .try_init();
    let mut senders = Vec::new();
    let mut stuck = Vec::new();
    for _ in 0..args.stuck {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        senders.push(tx);
        stuck.push(tokio::spawn(async move {
            // Pinned: a blocking receive inside a task.
            let _ = rx.recv();
        }));
    }
    let ids: Vec<String> = stuck.iter().map(|h| h.id().to_string()).collect();
    println!(
        "{} worker(s) stuck in std::sync::mpsc::Receiver::recv (task ids {}); pinwatch reports \
         them while it lasts",
        args.stuck,
        ids.join(" ")
    );
    // With --release-on-stdin: release on the first line, exit at the end of stdin (so that a
    // watcher sees the workers idle again before the process goes).
    let (eof_tx, eof_rx) = tokio::sync::oneshot::channel::<()>();
    match (args.release_after, args.release_on_stdin) {
        (Some(d), _) => {
            std::thread::spawn(move || {
                std::thread::sleep(d);
                release(senders);
            });
        }
        (None, true) => {
            std::thread::spawn(move || {
                let mut stdin = std::io::stdin();
                let _ = stdin.read_line(&mut String::new());
                release(senders);
                let _ = std::io::copy(&mut stdin, &mut std::io::sink());
                let _ = eof_tx.send(());
            });
        }
        (None, false) => std::mem::forget(senders),
    }
    for h in stuck {
        let _ = h.await;
    }
    println!("released");
    if args.release_on_stdin {
        let _ = eof_rx.await;
    }
}

fn release(senders: Vec<std::sync::mpsc::Sender<()>>) {
    for tx in senders {
        let _ = tx.send(());
    }
}
