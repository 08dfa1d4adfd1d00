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
        "pinwatch" => {
            let (rt, d) = pinwatch::Builder::new()
                .tracing(false)
                .build(&mut tokio)
                .expect("runtime");
            (rt, Some(d))
        }
        other => {
            eprintln!("yield_storm: unknown mode {other:?}; use plain, hooks or pinwatch");
            std::process::exit(2);
        }
    };
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
    drop(rt);
    if let Some(d) = detector {
        println!("{:?}", d.shutdown());
    }
}
