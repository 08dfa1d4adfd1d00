//! An axum service as many are written: `axum::serve` with no graceful shutdown, so SIGTERM and
//! SIGINT end it with their default action and its runtime is never dropped. It pins a worker
//! once at start (a task that sleeps 100 ms with `std::thread::sleep`), then serves until
//! killed. For `PINWATCH_DUMP_ON_EXIT`'s tests (`tests/flight.rs`):
//! `PINWATCH_DUMP_ON_EXIT=/var/tmp/pins-%p.jsonl cargo run -p sample-apps --bin plain_serve`,
//! then `kill -TERM <pid>`.
//!
//! `--graceful`: it shuts down on SIGTERM or SIGINT itself (tokio's `signal`, registered before
//! it says it is listening), says so on stdout, and returns from `main`.
//!
//! `--second-runtime PATH`: a second runtime with a detector of its own
//! (`pinwatch::Builder::from_env`, its dump on exit to `PATH`) pins once too; it is never
//! dropped.

use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};

const USAGE: &str = "\
plain_serve: an axum service with no graceful shutdown; pins a worker once at start

Usage: plain_serve [--graceful | --second-runtime PATH]

  --graceful             shut down on SIGTERM or SIGINT and return from main
  --second-runtime PATH  a second runtime with a detector of its own, its dump on exit to PATH";

#[pinwatch::main]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg_strs: Vec<&str> = args.iter().map(String::as_str).collect();
    // `--second-runtime`'s path first: `--second-runtime -h` dumps to a file named `-h`. The
    // code is returned, not exited with: the detector started already, and its shutdown runs
    // as `main` returns.
    let (graceful, second) = match arg_strs.as_slice() {
        [] => (false, None),
        ["--graceful"] => (true, None),
        ["--second-runtime", path] => (false, Some(std::path::PathBuf::from(path))),
        _ if sample_apps::fixture_help(USAGE, &args) => return std::process::ExitCode::SUCCESS,
        other => {
            eprintln!("plain_serve: unknown arguments {other:?}\n\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    // Kept to the end of the process (the service never returns without --graceful).
    let _second = second.map(|path| {
        let (rt, detector) = pinwatch::Builder::from_env()
            .expect("PINWATCH_* settings")
            .dump_on_exit(Some(path))
            .build(tokio::runtime::Builder::new_multi_thread().worker_threads(1))
            .expect("a second runtime");
        rt.spawn(async {
            std::thread::sleep(Duration::from_millis(100));
        });
        std::mem::ManuallyDrop::new((rt, detector))
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let app = axum::Router::new().route("/", axum::routing::get(|| async { "ok\n" }));
    // Registered before the line below: a signal sent after it reaches them.
    let signals = graceful.then(|| {
        (
            signal(SignalKind::terminate()).expect("SIGTERM"),
            signal(SignalKind::interrupt()).expect("SIGINT"),
        )
    });
    println!(
        "plain_serve: listening on http://{}",
        listener.local_addr().expect("its address")
    );
    tokio::spawn(async {
        std::thread::sleep(Duration::from_millis(100));
    });
    match signals {
        None => axum::serve(listener, app).await.expect("serve"),
        Some((mut term, mut int)) => {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let name = tokio::select! {
                        _ = term.recv() => "SIGTERM",
                        _ = int.recv() => "SIGINT",
                    };
                    println!("plain_serve: {name}, shutting down");
                })
                .await
                .expect("serve");
            println!("plain_serve: shut down");
        }
    }
    std::process::ExitCode::SUCCESS
}
