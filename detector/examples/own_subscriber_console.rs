//! A service with its own `tracing` subscriber and tokio-console: the console's layer goes into
//! the service's subscriber, and pinwatch adds only its per-worker resources
//! (`Console::Resources`, as `PINWATCH_CONSOLE=resources` would).
//!
//! ```text
//! cargo run -p pinwatch --example own_subscriber_console --features console
//! tokio-console http://127.0.0.1:6669          # in another terminal; press r for resources
//! ```
//!
//! Needs the `console` cargo feature (tokio-console's task list also needs `--cfg
//! tokio_unstable`, which this workspace sets). One task pins a worker for 2 s every 5 s; the
//! resource `pinwatch.worker` of that worker shows `pinned=true`, the task id, the reason and the
//! top frame while it does. Runs until stopped (`--for 10s` to stop by itself).

use std::time::Duration;

use tracing_subscriber::prelude::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let run_for = std::env::args()
        .skip_while(|a| a != "--for")
        .nth(1)
        .map(|s| humantime::parse_duration(&s))
        .transpose()?;
    // The service's own subscriber: the console's layer (its server on a thread of its own,
    // `TOKIO_CONSOLE_BIND`, default 127.0.0.1:6669) and a `fmt` layer for its logs, where
    // pinwatch's WARN reports print too.
    tracing_subscriber::registry()
        .with(pinwatch::console_layer())
        .with(
            tracing_subscriber::fmt::layer()
                .with_filter(tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let (rt, detector) = pinwatch::Builder::from_env()?
        .console(pinwatch::Console::Resources)
        .build(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all(),
        )?;
    rt.block_on(async {
        let work = tokio::spawn(async {
            loop {
                tokio::time::sleep(Duration::from_secs(3)).await;
                std::thread::sleep(Duration::from_secs(2)); // pins the worker, shown in the console
            }
        });
        match run_for {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
        work.abort();
    });
    drop(rt);
    detector.shutdown();
    Ok(())
}
