//! The yield storm, once, for counting instructions per poll with valgrind:
//!
//! ```text
//! cargo build --release -p pinwatch --example yield_storm
//! valgrind --tool=cachegrind --cache-sim=no target/release/examples/yield_storm pinwatch 20000
//! valgrind --tool=cachegrind --cache-sim=no target/release/examples/yield_storm pinwatch 40000
//! ```
//!
//! The difference of the two totals divided by the difference in polls (tasks × 11) is the
//! cost of one poll; do the same with `plain` and `hooks` (two empty poll hooks) to compare.
//!
//! `nobeat` is pinwatch without its heartbeat (`PINWATCH_HEARTBEAT=off`), to see what the
//! heartbeat costs.
//!
//! Built with `--features schedule-latency`, `tracked` is tokio measuring every task's wait
//! (`track_task_schedule_latency`) with two empty hooks: tokio's share of what the feature
//! costs; `pinwatch` then includes it.
//!
//! Built with `--features console`, `console` runs pinwatch with `PINWATCH_CONSOLE=on`'s setup
//! (tokio-console's layer installed, its server listening on `TOKIO_CONSOLE_BIND`). Every mode
//! prints the storm's wall time.

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "pinwatch".into());
    let tasks: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(20_000);
    let mut tokio = tokio::runtime::Builder::new_multi_thread();
    tokio.worker_threads(2).enable_all();
    let (rt, detector) = match mode.as_str() {
        "plain" => (tokio.build().expect("runtime"), None),
        "hooks" => {
            tokio.on_before_task_poll(|_| {}).on_after_task_poll(|_| {});
            (tokio.build().expect("runtime"), None)
        }
        // tokio measuring every task's schedule latency, with two empty hooks: what the
        // `schedule-latency` feature costs in tokio itself (its clock reads).
        #[cfg(feature = "schedule-latency")]
        "tracked" => {
            tokio
                .track_task_schedule_latency()
                .on_before_task_poll(|_| {})
                .on_after_task_poll(|_| {});
            (tokio.build().expect("runtime"), None)
        }
        "pinwatch" | "nobeat" => {
            let beat = (mode == "pinwatch").then_some(pinwatch::config::DEFAULT_HEARTBEAT);
            // `PINWATCH_THRESHOLD` and the rest of the environment apply (the storm's tasks
            // wait long under valgrind: a threshold above the run's length keeps every poll on
            // the common path).
            let (rt, d) = pinwatch::Builder::new()
                .tracing(false)
                .heartbeat(beat)
                .with_env()
                .expect("PINWATCH_* settings")
                .build(&mut tokio)
                .expect("runtime");
            (rt, Some(d))
        }
        #[cfg(feature = "console")]
        "console" => {
            let (rt, d) = pinwatch::Builder::new()
                .tracing(false)
                .console(pinwatch::Console::On)
                .build(&mut tokio)
                .expect("runtime");
            (rt, Some(d))
        }
        other => {
            eprintln!(
                "yield_storm: unknown mode {other:?}; use plain, hooks, pinwatch, nobeat, \
                 (built with the `console` feature) console or (with `schedule-latency`) tracked"
            );
            std::process::exit(2);
        }
    };
    let start = std::time::Instant::now();
    rt.block_on(async {
        let handles: Vec<_> = (0..tasks)
            .map(|_| {
                tokio::spawn(async {
                    for _ in 0..10 {
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        for h in handles {
            h.await.expect("task");
        }
    });
    let elapsed = start.elapsed();
    drop(rt);
    println!(
        "{mode}: {tasks} tasks x 10 yields in {:.1} ms ({:.0} ns per poll)",
        elapsed.as_secs_f64() * 1e3,
        elapsed.as_secs_f64() * 1e9 / (tasks * 11) as f64
    );
    if let Some(d) = detector {
        println!("{:?}", d.shutdown());
    }
}
