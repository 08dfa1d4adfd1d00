//! Who paid for a pin, measured: the tasks a pin delayed as pinwatch names them, beside each
//! task's own measure of its wait (from just before its spawn to its first poll).
//!
//! ```text
//! cargo run --release -p pinwatch --features schedule-latency --example victims
//! cargo run --release -p pinwatch --example victims        # without: not measured
//! ```
//!
//! - `lifo`: a request spawns 10 tasks, then blocks its worker 300 ms (2 workers, the other
//!   idle). The last one spawned is in the pinned worker's LIFO slot and waits for the whole
//!   pin; the other worker steals the nine before it at once.
//! - `queue`: the same with 50 tasks of 2 ms each, while the other worker is busy (a task
//!   polling 10 ms at a time, yielding between): the 50 wait in the pinned worker's queue until
//!   the busy worker steals and runs them, between its own polls.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use pinwatch::{PinnedEvent, State};

fn id_of(id: tokio::task::Id) -> u64 {
    id.to_string().parse().unwrap()
}

fn spin(d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

fn case(name: &str, followers: usize, busy_other: bool, work: Duration) {
    let (etx, erx) = mpsc::channel::<PinnedEvent>();
    let (rt, detector) = pinwatch::Builder::new()
        .tracing(false)
        .control(pinwatch::Control::Off)
        .threshold(Duration::from_millis(20))
        .sink(move |e: &PinnedEvent| {
            let _ = etx.send(e.clone());
        })
        .build(tokio::runtime::Builder::new_multi_thread().worker_threads(2))
        .expect("runtime");
    let (tx, rx) = mpsc::channel::<(usize, Duration)>();
    let (me, ids) = rt.block_on(async move {
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let busy = busy_other.then(|| {
            tokio::spawn(async move {
                let _ = started_tx.send(());
                let until = Instant::now() + Duration::from_millis(700);
                while Instant::now() < until {
                    spin(Duration::from_millis(10));
                    tokio::task::yield_now().await;
                }
            })
        });
        if busy.is_some() {
            let _ = started_rx.await;
        }
        let request = tokio::spawn(async move {
            let mut ids = Vec::new();
            for k in 0..followers {
                let tx = tx.clone();
                let spawned = Instant::now();
                let h = tokio::spawn(async move {
                    let _ = tx.send((k, spawned.elapsed()));
                    spin(work);
                });
                ids.push(id_of(h.id()));
            }
            std::thread::sleep(Duration::from_millis(300));
            (id_of(tokio::task::id()), ids)
        });
        let out = request.await.unwrap();
        if let Some(b) = busy {
            b.await.unwrap();
        }
        out
    });
    let mut own = vec![Duration::ZERO; followers];
    for _ in 0..followers {
        let (k, w) = rx.recv_timeout(Duration::from_secs(30)).expect("task ran");
        own[k] = w;
    }
    drop(rt);
    let stats = detector.shutdown();
    let pin = erx
        .try_iter()
        .find(|e| e.state == State::Completed && e.task_id == Some(me))
        .expect("the request's pin");
    let waited_past = own
        .iter()
        .filter(|w| **w >= Duration::from_millis(20))
        .count();
    println!("== {name}: {followers} tasks spawned before a 300 ms pin");
    println!("{}", pin.headline());
    let Some(v) = &pin.victims else {
        println!("no victims");
        return;
    };
    println!(
        "pinwatch: measured={} tasks={} total={:?} max={:?} queue_depth_max={:?}",
        v.measured, v.tasks, v.total_wait, v.max_wait, v.queue_depth_max
    );
    println!(
        "own measures: {waited_past} of {followers} waited >= 20 ms; busy waits (no pin) {}; lost {}",
        stats.busy_waits, stats.victims_lost
    );
    println!("named (task, pinwatch's wait, the task's own wait, worker, lifo):");
    for w in &v.worst {
        let k = ids.iter().position(|i| *i == w.task_id);
        println!(
            "  task {} (#{}) {:?} vs own {:?}, worker {:?}{}",
            w.task_id,
            k.map_or_else(|| "?".into(), |k| k.to_string()),
            w.wait,
            k.map(|k| own[k]),
            w.worker,
            if w.lifo { ", lifo" } else { "" }
        );
    }
    if let Some(a) = &pin.runtime_advice {
        println!("runtime advice: {a}");
    }
}

fn main() {
    case("lifo", 10, false, Duration::ZERO);
    case("queue", 50, true, Duration::from_millis(2));
}
