//! The sampling signal, stress-tested: more than 10,000 samples of workers that allocate and
//! free in a tight loop, and that take and release a contended std lock, with no deadlock and no
//! crash; the samples taken inside the allocator are counted, and every sample is of the code
//! that was running.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn ten_thousand_samples_of_allocating_and_locking_workers() {
    let events = support::Collected::default();
    let rt = support::watch(
        support::builder(&events)
            .stacks(pinwatch::Stacks::Full)
            .threshold(Duration::from_millis(1))
            .sample_interval(Duration::from_micros(100))
            .report_interval(Duration::from_millis(50))
            .queue_capacity(64),
        &mut support::multi_thread(2),
    );
    let stop = Arc::new(AtomicBool::new(false));
    // Declared after the runtime, so dropped before it: a failed assertion stops the tasks'
    // endless polls, and the runtime's drop then does not wait for them forever.
    let _stop_on_unwind = StopOnDrop(Arc::clone(&stop));
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
    let allocator_line = line!() + 3;
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
    let locker_line = line!() + 3;
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

    // About 5 s on an idle 2-core machine, 30–50 s with both cores busy with another load.
    let deadline = Instant::now() + Duration::from_secs(600);
    while rt.stats().samples < 10_000 {
        assert!(
            Instant::now() < deadline,
            "only {:?} after 600 s",
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

    // What the samples held: the profile entries are the two tasks (a line of their loops, or
    // code inlined into them), and some of the stacks shown were taken inside the allocator.
    // A sample whose frames resolve to nothing of the application (an unwind cut short in code
    // without unwind tables or line info) counts under its innermost frame: allowed, rarely.
    let events = events.all();
    assert!(events.len() > 10, "{}", events.len());
    let mut in_allocator = 0;
    let (mut total, mut outside) = (0u32, Vec::new());
    for e in &events {
        for p in &e.profile {
            total += p.samples;
            let file = p.frame.file.as_deref().unwrap_or("");
            let line = p.frame.line.unwrap_or(0);
            let near = |start: u32| (start..start + 14).contains(&line);
            let in_loop =
                file.ends_with("signal_stress.rs") && (near(allocator_line) || near(locker_line));
            let in_task = p
                .frame
                .function
                .as_deref()
                .is_some_and(|f| f.starts_with("signal_stress::"));
            if !(in_loop || in_task) {
                outside.push(p.clone());
            }
        }
        let allocating = e.stack.iter().any(|f| {
            f.function.as_deref().is_some_and(|n| {
                n.contains("malloc") || n.contains("free") || n.starts_with("alloc::alloc")
            })
        });
        in_allocator += usize::from(allocating);
    }
    let stray: u32 = outside.iter().map(|p| p.samples).sum();
    println!(
        "{} events, {in_allocator} with a stack inside the allocator; {stray} of {total} \
         profile samples outside the tasks: {outside:?}",
        events.len()
    );
    assert!(in_allocator > 0, "no sample was taken inside the allocator");
    assert!(total > 1000, "{total} profile samples");
    assert!(
        stray * 100 <= total,
        "{stray} of {total} samples outside the tasks: {outside:#?}"
    );
}

struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
