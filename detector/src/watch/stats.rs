//! What the detector has done so far: the counters the watchdog and the export thread keep, and
//! the [`Stats`] a snapshot of them gives.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::poll::slot::SlotTable;

/// What the detector has done so far. See [`Detector::stats`](crate::Detector::stats).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Polls found pinning a worker (reported, and not retracted).
    pub pinned_polls: u64,
    /// Reports handed to the analysis queue (`in_progress`, `completed`, `retracted`).
    pub events: u64,
    /// Events delivered to the sinks (reports of `block_in_place` polls, recognised by their
    /// stack, are not).
    pub delivered: u64,
    /// Reports dropped because the queue to the sinks was full.
    pub dropped: u64,
    /// Events lost by the sinks with a queue of their own — the `tracing` sink and yours (each
    /// on a thread of its own, so that one that blocks holds back no other), the OTLP and
    /// console exporters — because their queue was full, the sink panicked in them, the
    /// collector did not take them (OTLP), or they were still queued when the stop gave up
    /// waiting for the sink; and by the recordings, whose write failed (`ctl status` and
    /// `pinwatch_events_dropped_total` count them per sink while the detector runs).
    pub sink_dropped: u64,
    /// Long polls not reported, or retracted, because their thread had handed its worker over
    /// in `block_in_place`.
    pub block_in_place: u64,
    /// Of those, the ones reported before tokio recorded the hand-over, then retracted.
    pub retracted: u64,
    /// Threads that polled tasks but found no free slot (raise [`Builder::max_threads`](crate::Builder::max_threads)).
    pub unwatched_threads: u64,
    /// Stack samples attached to events.
    pub samples: u64,
    /// Signals sent that the thread did not answer within the wait (it takes them later, or
    /// never; they are not sent again meanwhile).
    pub samples_missed: u64,
    /// Samples that arrived after their poll had ended, and were dropped.
    pub samples_discarded: u64,
    /// Total time workers spent in the sampling signal handler (the stall samples cost them).
    pub sample_handler_time: Duration,
    /// Total time from sending a sampling signal to reading the sample, on the watchdog.
    pub sample_round_trip_time: Duration,
    /// Time the whole runtime was stalled by pins: a pin ran while nobody drove the runtime's
    /// drivers, or (where the drivers cannot be seen) while the heartbeat was late past the
    /// threshold (see docs/blast-radius.md). Wall time: pins that stall it together count
    /// once.
    pub runtime_stalled_time: Duration,
    /// Time the watchdog took the whole process to have stood still (a stop, a debugger, a
    /// cgroup freezer: it neither ran nor waited for a CPU, and, at the end of a timed wait, was
    /// switched out for it), left out of the polls it watched then (see
    /// docs/how-it-works.md).
    pub process_stopped_time: Duration,
    /// Scans the watchdog made: a look at every watched thread's slot. While a worker runs, one
    /// every scan interval, or, where polls are rare and their starts stamped, one every
    /// quarter of the threshold plus a scan interval while nothing runs that long.
    pub watchdog_scans: u64,
    /// Long polls (a quarter of the threshold, at least) timed from their
    /// start stamp, exactly, instead of from the watchdog's looks.
    pub stamped_polls: u64,
    /// Times the watchdog went to sleep because every worker was parked and no poll ran (a
    /// worker unparking wakes it).
    pub watchdog_sleeps: u64,
    /// Times a pin left the runtime's drivers undriven and pinwatch woke a parked worker to
    /// take them over (`PINWATCH_RESCUE`).
    pub driver_rescues: u64,
    /// Times a worker took the drivers over after such a wake-up.
    pub driver_handovers: u64,
    /// Whether the watchdog sees who drives the runtime's I/O and timer drivers: on a
    /// current-thread runtime always (its one thread, between polls); on a multi-thread one once
    /// it has seen one of the runtime's parked workers wait on its I/O driver (`epoll_wait`),
    /// while it can read the workers' system calls. Until then — a runtime without
    /// `enable_io`, park hooks not installed, `/proc` unreadable — the heartbeat is the
    /// evidence of a stall (see docs/blast-radius.md).
    pub drivers_seen: bool,
    /// Tasks polled after waiting at least the threshold to be polled while no pin ran: a busy
    /// runtime, not a pinned worker (measured with the `schedule-latency` feature only).
    pub busy_waits: u64,
    /// Of the waits tokio measured past the threshold, the ones the watchdog did not read in
    /// time (a worker's record of them is a ring of 16; with the `schedule-latency` feature).
    pub victims_lost: u64,
    /// Tasks that waited past the threshold behind a pin whose completed report had already
    /// gone out ([`VICTIM_WINDOW`](crate::event::VICTIM_WINDOW) after it ended): in no event,
    /// and not taken for a busy runtime's either.
    pub victims_late: u64,
}

pub(crate) fn snapshot(c: &StatsCounters, table: &SlotTable) -> Stats {
    let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
    Stats {
        pinned_polls: r(&c.pinned_polls),
        events: r(&c.events),
        delivered: r(&c.delivered),
        dropped: r(&c.dropped),
        // The detector adds the sinks' own.
        sink_dropped: 0,
        block_in_place: r(&c.block_in_place),
        retracted: r(&c.retracted),
        unwatched_threads: r(&table.unwatched_threads),
        samples: r(&c.samples),
        samples_missed: r(&c.samples_missed),
        samples_discarded: r(&c.samples_discarded),
        sample_handler_time: Duration::from_nanos(r(&c.sample_handler_ns)),
        sample_round_trip_time: Duration::from_nanos(r(&c.sample_round_trip_ns)),
        runtime_stalled_time: Duration::from_nanos(r(&c.stalled_ns)),
        process_stopped_time: Duration::from_nanos(r(&c.stopped_ns)),
        watchdog_scans: r(&c.scans),
        stamped_polls: r(&c.stamped_polls),
        watchdog_sleeps: r(&c.sleeps),
        driver_rescues: r(&c.rescues),
        driver_handovers: r(&c.handovers),
        drivers_seen: c.drivers_seen.load(Ordering::Relaxed),
        busy_waits: r(&c.busy_waits),
        victims_lost: r(&c.victims_lost),
        victims_late: r(&c.victims_late),
    }
}

/// Counters behind [`crate::Stats`]. Relaxed: they are totals, read for reporting only.
#[derive(Default)]
pub(crate) struct StatsCounters {
    pub pinned_polls: AtomicU64,
    pub events: AtomicU64,
    pub dropped: AtomicU64,
    pub block_in_place: AtomicU64,
    pub retracted: AtomicU64,
    pub samples: AtomicU64,
    pub samples_missed: AtomicU64,
    pub samples_discarded: AtomicU64,
    pub sample_handler_ns: AtomicU64,
    pub sample_round_trip_ns: AtomicU64,
    /// Time the whole runtime was stalled by pins, in ns.
    pub stalled_ns: AtomicU64,
    /// Time the process stood still, as the watchdog tells it, in ns.
    pub stopped_ns: AtomicU64,
    pub delivered: AtomicU64,
    /// Times the watchdog slept because every worker was parked.
    pub sleeps: AtomicU64,
    pub scans: AtomicU64,
    pub stamped_polls: AtomicU64,
    pub rescues: AtomicU64,
    pub handovers: AtomicU64,
    /// Whether the watchdog sees who drives the runtime's drivers.
    pub drivers_seen: AtomicBool,
    /// Tasks that waited past the threshold while no pin ran.
    pub busy_waits: AtomicU64,
    /// Waits past the threshold overwritten before the watchdog read them.
    pub victims_lost: AtomicU64,
    /// Waits past the threshold behind a pin already reported.
    pub victims_late: AtomicU64,
}
