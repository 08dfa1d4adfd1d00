//! The core detector on real runtimes. Time bounds are generous: these machines are noisy.

mod support;

use std::time::{Duration, Instant};

use pinwatch::State;
use support::{builder, current_thread, multi_thread, spin, Collected};

/// Timing tests run one at a time: two of them sharing two cores would stretch each other's
/// polls past the threshold.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn thread_sleep_is_one_completed_event_with_task_and_spawn_site() {
    let _serial = serial();
    let events = Collected::default();
    let rt = builder(&events).build(&mut multi_thread(2)).unwrap();
    let spawn_line = line!() + 1;
    let handle = rt.spawn(async { std::thread::sleep(Duration::from_millis(100)) });
    let task_id = handle.id();
    rt.block_on(handle).unwrap();
    let stats = rt.shutdown();

    let completed = events.completed();
    assert_eq!(completed.len(), 1, "{:#?}", events.all());
    let e = &completed[0];
    assert!(e.duration >= Duration::from_millis(100), "{e:?}");
    assert!(e.duration < Duration::from_secs(5), "{e:?}");
    assert_eq!(e.task_id, Some(task_id.to_string().parse().unwrap()));
    let at = e.spawned_at.as_ref().expect("spawn location");
    assert!(at.file.ends_with("detect.rs"), "{at}");
    assert_eq!(at.line, spawn_line);
    assert_eq!(e.threshold, Duration::from_millis(20));
    assert!(e.worker.index.is_some_and(|i| i < 2));
    assert!(e.worker.tid > 0);
    // Every report of the poll shares the id.
    assert!(events.all().iter().all(|x| x.id == e.id));
    assert_eq!(stats.pinned_polls, 1);
    assert_eq!(stats.dropped, 0);
}

#[test]
fn tokio_sleep_is_not_pinning() {
    let _serial = serial();
    let events = Collected::default();
    let rt = builder(&events).build(&mut multi_thread(2)).unwrap();
    rt.block_on(async {
        let tasks: Vec<_> = (0..50)
            .map(|_| tokio::spawn(tokio::time::sleep(Duration::from_millis(100))))
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    let stats = rt.shutdown();
    assert!(events.all().is_empty(), "{:#?}", events.all());
    assert_eq!(stats.pinned_polls, 0);
}

#[test]
fn cpu_loop_is_pinning_and_yielding_loop_is_not() {
    let _serial = serial();
    let events = Collected::default();
    let rt = builder(&events).build(&mut multi_thread(2)).unwrap();
    rt.block_on(rt.spawn(async { spin(Duration::from_millis(100)) }))
        .unwrap();
    rt.block_on(rt.spawn(async {
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(100) {
            spin(Duration::from_millis(1));
            tokio::task::yield_now().await;
        }
    }))
    .unwrap();
    rt.shutdown();
    let completed = events.completed();
    assert_eq!(completed.len(), 1, "{:#?}", events.all());
    assert!(completed[0].duration >= Duration::from_millis(100));
}

#[test]
fn spawn_blocking_and_block_in_place_are_not_pinning() {
    let _serial = serial();
    let events = Collected::default();
    let rt = builder(&events).build(&mut multi_thread(2)).unwrap();
    rt.block_on(async {
        tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(200)))
            .await
            .unwrap();
        tokio::spawn(async {
            tokio::task::block_in_place(|| std::thread::sleep(Duration::from_millis(200)))
        })
        .await
        .unwrap();
    });
    let stats = rt.shutdown();
    assert!(events.all().is_empty(), "{:#?}", events.all());
    assert_eq!(stats.block_in_place, 1, "{stats:?}");
}

#[test]
fn current_thread_runtime_is_watched() {
    let _serial = serial();
    let events = Collected::default();
    let rt = builder(&events).build(&mut current_thread()).unwrap();
    let spawn_line = line!() + 1;
    let h = rt.spawn(async { std::thread::sleep(Duration::from_millis(100)) });
    rt.block_on(h).unwrap();
    rt.shutdown();
    let completed = events.completed();
    assert_eq!(completed.len(), 1, "{:#?}", events.all());
    assert!(
        completed[0].duration >= Duration::from_millis(100),
        "{:#?}",
        events.all()
    );
    assert_eq!(completed[0].spawned_at.as_ref().unwrap().line, spawn_line);
    assert_eq!(completed[0].worker.index, Some(0));
}

#[test]
fn stuck_worker_is_reported_while_stuck_then_completed() {
    let _serial = serial();
    let events = Collected::default();
    let rt = builder(&events)
        .report_interval(Duration::from_millis(300))
        .build(&mut multi_thread(2))
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let started = Instant::now();
    let h = rt.spawn(async move { rx.recv().unwrap() });
    let first = events
        .wait_for(Duration::from_secs(10), |e| e.state == State::InProgress)
        .expect("an in_progress event while the worker is stuck");
    let seen_after = started.elapsed();
    assert!(seen_after < Duration::from_millis(1500), "{seen_after:?}");
    assert!(first.duration >= Duration::from_millis(20));
    // Re-reported while still stuck.
    let again = events
        .wait_for(Duration::from_secs(10), |e| {
            e.state == State::InProgress && e.report >= 2
        })
        .expect("a second in_progress report");
    assert_eq!(again.id, first.id);
    assert!(again.duration > first.duration);
    // Released at 2 s.
    std::thread::sleep(Duration::from_secs(2).saturating_sub(started.elapsed()));
    tx.send(()).unwrap();
    rt.block_on(h).unwrap();
    rt.shutdown();
    let completed = events.completed();
    assert_eq!(completed.len(), 1, "{:#?}", events.all());
    assert_eq!(completed[0].id, first.id);
    assert!(completed[0].duration >= Duration::from_secs(2));
}

#[test]
fn many_short_polls_are_not_pinning() {
    let _serial = serial();
    let events = Collected::default();
    let rt = builder(&events).build(&mut multi_thread(2)).unwrap();
    rt.block_on(async {
        let tasks: Vec<_> = (0..10_000)
            .map(|_| {
                tokio::spawn(async {
                    for _ in 0..100 {
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    let stats = rt.shutdown();
    assert!(events.all().is_empty(), "{:#?}", events.all());
    assert_eq!(stats.pinned_polls, 0);
}

#[test]
fn event_storm_drops_and_counts_and_the_app_keeps_running() {
    let _serial = serial();
    fn rss_kib() -> u64 {
        let s = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
        pages * 4
    }
    let events = Collected::default();
    let slow = events.sink();
    let mut slow = slow;
    let rt = pinwatch::Builder::new()
        .tracing(false)
        .threshold(Duration::from_millis(1))
        .queue_capacity(4)
        .sink(move |e: &pinwatch::PinnedEvent| {
            // A sink slower than the event rate.
            std::thread::sleep(Duration::from_millis(20));
            slow(e);
        })
        .build(&mut multi_thread(2))
        .unwrap();
    let rss_before = rss_kib();
    let progress = rt.block_on(async {
        let ticker = tokio::spawn(async {
            let mut ticks = 0u32;
            for _ in 0..100 {
                tokio::time::sleep(Duration::from_millis(10)).await;
                ticks += 1;
            }
            ticks
        });
        let storm: Vec<_> = (0..4)
            .map(|_| {
                tokio::spawn(async {
                    let start = Instant::now();
                    while start.elapsed() < Duration::from_secs(2) {
                        std::thread::sleep(Duration::from_millis(3));
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        for s in storm {
            s.await.unwrap();
        }
        ticker.await.unwrap()
    });
    let stats = rt.stats();
    let rss_after = rss_kib();
    drop(rt);
    assert_eq!(progress, 100, "the app kept running");
    assert!(stats.pinned_polls > 200, "{stats:?}");
    assert!(stats.dropped > 0, "{stats:?}");
    assert!(
        rss_after < rss_before + 64 * 1024,
        "memory grew from {rss_before} KiB to {rss_after} KiB"
    );
    let delivered = events.all().len() as u64;
    assert!(delivered <= stats.events, "{delivered} > {stats:?}");
}

#[test]
fn off_builds_a_plain_runtime() {
    let _serial = serial();
    let events = Collected::default();
    let rt = builder(&events)
        .enabled(false)
        .build(&mut multi_thread(2))
        .unwrap();
    assert!(rt.detector().is_none());
    rt.block_on(rt.spawn(async { std::thread::sleep(Duration::from_millis(100)) }))
        .unwrap();
    assert_eq!(rt.shutdown(), pinwatch::Stats::default());
    assert!(events.all().is_empty());
}
