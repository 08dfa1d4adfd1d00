//! The per-poll path never allocates: the same workload (10,000 tasks × 100 polls) is run on a
//! plain runtime and on a pinwatch runtime, counting allocations made on worker threads. A
//! per-poll allocation would add a million; claiming a slot adds a handful per worker.

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

static WORKER_ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static IS_WORKER: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: forwards to the system allocator; the bookkeeping touches only a const thread-local
// without destructor and an atomic, neither of which allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if IS_WORKER.try_with(|w| w.get()).unwrap_or(false) {
            WORKER_ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const TASKS: usize = 10_000;
const POLLS: usize = 100;

fn workload(rt: &tokio::runtime::Runtime) -> u64 {
    // Spawn from this (non-worker) thread so task allocations are not counted.
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            rt.spawn(async {
                for _ in 0..POLLS - 1 {
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    let before = WORKER_ALLOCS.load(Ordering::Relaxed);
    rt.block_on(async {
        for t in tasks {
            t.await.unwrap();
        }
    });
    WORKER_ALLOCS.load(Ordering::Relaxed) - before
}

fn tokio_builder() -> tokio::runtime::Builder {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(2)
        .enable_all()
        .on_thread_start(|| IS_WORKER.with(|w| w.set(true)));
    b
}

#[test]
fn poll_path_does_not_allocate() {
    let plain = tokio_builder().build().unwrap();
    let plain_allocs = workload(&plain);
    drop(plain);

    let events = support::Collected::default();
    let rt = support::builder(&events)
        .build(&mut tokio_builder())
        .unwrap();
    // Warm up: the first poll on each worker claims its slot.
    workload(&rt);
    let watched_allocs = workload(&rt);
    let stats = rt.shutdown();

    println!(
        "worker-thread allocations over {} polls: plain {plain_allocs}, pinwatch {watched_allocs}",
        TASKS * POLLS
    );
    assert!(events.all().is_empty());
    assert_eq!(stats.pinned_polls, 0);
    // The workload itself allocates on workers only now and then (tokio's internals); any
    // allocation per poll — or per hundred polls — would be far above this bound.
    assert!(
        watched_allocs <= plain_allocs + 1_000,
        "pinwatch runtime allocated {watched_allocs} times on workers, plain {plain_allocs}"
    );
}
