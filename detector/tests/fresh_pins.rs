//! Every long pin is reported, also the first poll of a fresh runtime: many runtimes, each
//! built, given one task whose one poll blocks in `std::thread::sleep` for five times the
//! threshold, and shut down. Each must report that poll once, completed.

mod support;

use std::time::{Duration, Instant};

use support::{builder, multi_thread, Collected};

/// Fresh runtimes to try; bounded by time too (a loaded machine).
const TRIES: usize = 40;
const BUDGET: Duration = Duration::from_secs(15);

#[test]
fn the_first_long_poll_of_every_fresh_runtime_is_reported() {
    let started = Instant::now();
    let mut tried = 0;
    let mut missed = Vec::new();
    while tried < TRIES && started.elapsed() < BUDGET {
        tried += 1;
        let events = Collected::default();
        let rt = support::watch(builder(&events), &mut multi_thread(2));
        let handle = rt.spawn(async {
            let t = Instant::now();
            std::thread::sleep(Duration::from_millis(100));
            t.elapsed()
        });
        let slept = rt.block_on(handle).unwrap();
        let stats = rt.shutdown();
        let completed = events.completed();
        if completed.len() != 1 || completed[0].duration < slept {
            missed.push(format!(
                "try {tried}: slept {slept:?}, completed {:?}, stats {stats:?}",
                completed.iter().map(|e| e.duration).collect::<Vec<_>>()
            ));
        }
    }
    assert!(tried >= 5, "only {tried} runtimes in {BUDGET:?}");
    assert!(
        missed.is_empty(),
        "{} of {tried} fresh runtimes missed their 100 ms pin:\n{}",
        missed.len(),
        missed.join("\n")
    );
}
