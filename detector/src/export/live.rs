//! What the metrics exporters read live, on their own threads: the watchdog's pins, the
//! runtime's workers, the drops — never waiting for the export thread.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::Parts;

/// The detector's state now, as a metrics exporter reads it.
#[derive(Default)]
pub(crate) struct Live {
    /// The threshold in force.
    pub threshold: Duration,
    /// Whether the runtime is stalled now, and for how long it has been stalled in all.
    pub stall: (bool, Duration),
    /// Each pin running now (workers' and `block_on` bodies'): event id and age.
    pub pinned: Vec<(u64, Duration)>,
    /// Workers pinned now: the pins that hold one of the runtime's workers. A multi-thread
    /// runtime's `block_on` body holds none and is not counted here.
    pub workers_pinned: usize,
    /// The age of the oldest pin that holds a worker (zero when none).
    pub oldest_worker_pin: Duration,
    /// `block_on` bodies of a multi-thread runtime blocked now.
    pub bodies_blocked: usize,
    /// Workers of the runtime.
    pub workers: usize,
    /// Times a worker pinwatch woke took the drivers over so far.
    pub handovers: u64,
    /// Tasks polled after waiting at least the threshold while no pin ran, so far
    /// ([`Stats::busy_waits`](crate::Stats::busy_waits)).
    pub busy_waits: u64,
    /// Events lost so far, by where: `queue` (the queue to the export thread was full), then
    /// each sink with a queue of its own (`otlp`, `console`).
    pub dropped: Vec<(&'static str, u64)>,
}

/// Reads [`Live`]; called on an exporter's own thread.
pub(crate) type LiveFn = Arc<dyn Fn() -> Live + Send + Sync>;

impl Parts {
    /// The live view of this detector.
    pub(crate) fn live(&self) -> LiveFn {
        let w = Arc::clone(&self.watched);
        let handle = self.handle.clone();
        let drops = self.drops.clone();
        Arc::new(move || {
            let now = w.pinned_now_counted();
            let mut dropped = vec![("queue", w.stats.dropped.load(Ordering::Relaxed))];
            dropped.extend(drops.totals());
            Live {
                threshold: w.tunables.get().threshold,
                stall: w.stall(),
                pinned: now.all,
                workers_pinned: now.workers,
                oldest_worker_pin: now.oldest_worker_pin,
                bodies_blocked: now.bodies,
                workers: handle.metrics().num_workers(),
                handovers: w.stats.handovers.load(Ordering::Relaxed),
                busy_waits: w.stats.busy_waits.load(Ordering::Relaxed),
                dropped,
            }
        })
    }
}
