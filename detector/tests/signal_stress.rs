//! The sampling signal, stress-tested: more than 10,000 samples of workers that allocate and
//! free in a tight loop, and that take and release a contended std lock, with no deadlock, no
//! crash, and the allocator intact afterwards.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn ten_thousand_samples_of_allocating_and_locking_workers() {
    let events = support::Collected::default();
    let rt = support::builder(&events)
        .threshold(Duration::from_millis(1))
        .sample_interval(Duration::from_micros(100))
        .report_interval(Duration::from_secs(3600))
        .queue_capacity(64)
        .build(&mut support::multi_thread(2))
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let work = Arc::new(AtomicU64::new(0));
    let lock = Arc::new(std::sync::Mutex::new(Vec::<u64>::new()));

    // A thread outside the runtime contends the lock, so the worker's lock is sometimes slow.
    let contender = {
        let (stop, lock) = (Arc::clone(&stop), Arc::clone(&lock));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                lock.lock().unwrap().push(1);
                std::thread::yield_now();
            }
        })
    };
    let allocator = {
        let (stop, work) = (Arc::clone(&stop), Arc::clone(&work));
        rt.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let v: Vec<u64> = (0..64).collect();
                let s = format!("{v:?}");
                work.fetch_add(s.len() as u64 % 7 + 1, Ordering::Relaxed);
            }
        })
    };
    let locker = {
        let (stop, work, lock) = (Arc::clone(&stop), Arc::clone(&work), Arc::clone(&lock));
        rt.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let mut g = lock.lock().unwrap();
                g.push(2);
                if g.len() > 1000 {
                    g.clear();
                }
                drop(g);
                work.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let deadline = Instant::now() + Duration::from_secs(120);
    while rt.stats().samples < 10_000 {
        assert!(
            Instant::now() < deadline,
            "only {:?} after 120 s",
            rt.stats()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let work_before = work.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        work.load(Ordering::Relaxed) > work_before,
        "workers stalled"
    );
    stop.store(true, Ordering::Relaxed);
    rt.block_on(async {
        allocator.await.unwrap();
        locker.await.unwrap();
    });
    contender.join().unwrap();
    let stats = rt.shutdown();
    println!("{stats:?}");
    assert!(stats.samples >= 10_000, "{stats:?}");

    // The allocator is intact: big and small allocations, filled and checked.
    let big: Vec<u64> = (0..1_000_000).collect();
    assert_eq!(big.iter().sum::<u64>(), 999_999 * 1_000_000 / 2);
    let strings: Vec<String> = (0..10_000).map(|i| i.to_string()).collect();
    assert_eq!(strings[9_999], "9999");
    assert!(!events.all().is_empty());
}
