//! The watchdog thread: scans the slots every few milliseconds and reports polls that run past
//! the threshold while they are still running.
//!
//! For each slot it remembers the last `seq` it saw and when. A slot whose `seq` is odd and
//! unchanged for at least the threshold is running one poll that long: the watchdog flags it
//! (so that the after-poll hook reads the clock when it returns), probes the thread (state,
//! system call, stack) and sends an `in_progress` event; it sends it again every report interval
//! while the poll stays stuck, and a `completed` one with the exact end once the poll returns.
//!
//! The poll's start is bounded by scans: it began after the last scan that saw another `seq`.
//! That bound is what `start` and `duration` report, so a duration is never shorter than the
//! real one, and longer by less than one scan interval.

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

use tokio::runtime::{Handle, RuntimeFlavor};

use crate::event::{PinnedEvent, SourceLocation, State, Worker};
use crate::probe::{self, Probe};
use crate::runtime::Shared;
use crate::slot::{Slot, NOT_FLAGGED};

/// Event ids are unique in the process, across runtimes: a recording shared by several runtimes
/// (one file, appended to) must not mix their polls up.
static NEXT_EVENT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// What the watchdog sends to the sink thread: an event, plus the raw probes that the sink
/// thread turns into stack frames and a reason (off the watchdog's path).
pub(crate) struct Report {
    pub event: PinnedEvent,
    pub probes: Vec<Probe>,
}

/// The watchdog's memory of one slot.
struct Watch {
    generation: usize,
    seq: u64,
    /// When the watchdog first saw `seq`.
    first_seen: Instant,
    /// The last scan before `first_seen`: the poll started after it.
    after: Instant,
    /// The current long poll is a `block_in_place` section: not reported.
    dismissed: bool,
    /// The thread's scheduler accounting when the poll was a quarter of the threshold old:
    /// time spent after it waiting for a CPU does not count toward the threshold.
    baseline: Option<Baseline>,
    pinned: Option<Pinned>,
}

/// A poll reported as pinned and not yet completed.
struct Pinned {
    seq: u64,
    tid: i32,
    baseline: Option<Baseline>,
    event: PinnedEvent,
    start: Instant,
    last_report: Instant,
    last_sample: Instant,
    probes: Vec<Probe>,
}

pub(crate) fn run(
    shared: Arc<Shared>,
    handle: Handle,
    tx: mpsc::SyncSender<Report>,
    stop: mpsc::Receiver<()>,
) {
    let interval = shared.config.effective_scan_interval();
    let mut watches: Vec<Option<Watch>> = (0..shared.slots.slots().len()).map(|_| None).collect();
    // The hooks may run before this thread does: the first scan's lower bound is the moment the
    // slots were made, before the runtime existed.
    let mut prev_scan = shared.slots.base;
    let mut wd = Watchdog {
        shared: &shared,
        handle: &handle,
        tx: &tx,
    };
    loop {
        let stopping = match stop.recv_timeout(interval) {
            Err(mpsc::RecvTimeoutError::Timeout) => false,
            // Sender dropped: the runtime is gone. Scan once more to complete what ended.
            _ => true,
        };
        let now = Instant::now();
        for (slot, watch) in shared.slots.slots().iter().zip(watches.iter_mut()) {
            wd.scan_slot(slot, watch, now, prev_scan);
        }
        prev_scan = now;
        if stopping {
            // Whatever is still flagged never returned: its last report stands.
            return;
        }
    }
}

struct Watchdog<'a> {
    shared: &'a Shared,
    handle: &'a Handle,
    tx: &'a mpsc::SyncSender<Report>,
}

impl Watchdog<'_> {
    fn scan_slot(&mut self, slot: &Slot, watch: &mut Option<Watch>, now: Instant, prev: Instant) {
        let active = slot.is_active();
        let generation = slot.generation.load(Ordering::Relaxed);
        if let Some(w) = watch.as_mut() {
            if let Some(p) = w.pinned.take() {
                w.pinned = self.follow_pinned(slot, p, now, active && w.generation == generation);
            }
        }
        if !active {
            if watch.as_ref().is_some_and(|w| w.pinned.is_none()) {
                *watch = None;
            }
            return;
        }
        let seq = slot.seq.load(Ordering::Acquire);
        let fresh = match watch.as_ref() {
            Some(w) => w.generation != generation,
            None => true,
        };
        if fresh {
            *watch = Some(Watch {
                generation,
                seq,
                first_seen: now,
                after: prev,
                dismissed: false,
                baseline: None,
                pinned: None,
            });
            return;
        }
        let Some(w) = watch.as_mut() else { return };
        if seq != w.seq {
            w.seq = seq;
            w.first_seen = now;
            w.after = prev;
            w.dismissed = false;
            w.baseline = None;
            return;
        }
        if seq & 1 == 0 || w.pinned.is_some() || w.dismissed {
            return;
        }
        let threshold = self.shared.config.threshold;
        let age = now.saturating_duration_since(w.first_seen);
        let tid = slot.tid.load(Ordering::Relaxed);
        if w.baseline.is_none() && age >= threshold / 4 {
            w.baseline = probe::read_schedstat(tid).map(|stat| Baseline { at: now, age, stat });
        }
        if age >= threshold {
            // A worker the kernel preempted (an overloaded machine, a CPU quota) is late, but
            // not pinned by its task: only time on a CPU or blocked counts.
            let (pinned_for, waited) = match w.baseline {
                Some(b) => b.pinned_time(now, tid),
                None => (age, Duration::ZERO),
            };
            if pinned_for >= threshold {
                self.flag(slot, w, seq, now, waited);
            }
        }
    }

    /// A poll just crossed the threshold: decide whether it is pinned, and report it.
    fn flag(&mut self, slot: &Slot, w: &mut Watch, seq: u64, now: Instant, waited: Duration) {
        let (thread_id, name) = match slot.info.lock() {
            Ok(info) => (info.thread_id, info.name.clone()),
            Err(_) => (None, String::new()),
        };
        let index = match worker_index(self.handle, thread_id) {
            WorkerIndex::Worker(i) => Some(i),
            WorkerIndex::HandedOff => {
                // The thread gave its worker to another thread in `block_in_place`: this is a
                // blocking section the runtime planned for, not a pinned worker.
                w.dismissed = true;
                self.shared
                    .stats
                    .block_in_place
                    .fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        slot.flagged.store(seq, Ordering::Relaxed);
        let task_id = slot.task_id.load(Ordering::Relaxed);
        let spawned_at = slot.spawned_at.load(Ordering::Relaxed);
        if slot.seq.load(Ordering::Acquire) != seq {
            // It returned just as it crossed the threshold, and the task id read above may
            // already be the next poll's: not worth a report that could be wrong.
            slot.flagged.store(NOT_FLAGGED, Ordering::Relaxed);
            return;
        }
        let spawned_at = if spawned_at.is_null() {
            None
        } else {
            // SAFETY: the pointer was stored from a `&'static Location<'static>` in the
            // before-poll hook, and locations are never freed.
            Some(SourceLocation::from_std(unsafe { &*spawned_at }))
        };
        self.shared
            .stats
            .pinned_polls
            .fetch_add(1, Ordering::Relaxed);
        let tid = slot.tid.load(Ordering::Relaxed);
        let elapsed = now.saturating_duration_since(w.after);
        let event = PinnedEvent {
            id: NEXT_EVENT_ID.fetch_add(1, Ordering::Relaxed),
            state: State::InProgress,
            start: SystemTime::now()
                .checked_sub(elapsed)
                .unwrap_or(SystemTime::UNIX_EPOCH),
            duration: elapsed,
            threshold: self.shared.config.threshold,
            task_id: Some(task_id),
            spawned_at,
            worker: Worker { index, tid, name },
            reason: None,
            other_reasons: Vec::new(),
            blocking_operation: None,
            top_frame: None,
            stack: Vec::new(),
            held_locks: Vec::new(),
            lock_holder: None,
            samples: 0,
            report: 1,
            cpu_wait: waited,
        };
        let mut pinned = Pinned {
            seq,
            tid,
            baseline: w.baseline,
            event,
            start: w.after,
            last_report: now,
            last_sample: now,
            probes: Vec::new(),
        };
        self.probe(slot, &mut pinned);
        self.send(&pinned);
        w.pinned = Some(pinned);
    }

    /// Follows a reported poll: completes it, re-reports it, or samples it again. Returns it
    /// while it is still running.
    fn follow_pinned(
        &mut self,
        slot: &Slot,
        mut p: Pinned,
        now: Instant,
        same_owner: bool,
    ) -> Option<Pinned> {
        let ended = same_owner && slot.ended_seq.load(Ordering::Acquire) == p.seq;
        let running = same_owner && slot.seq.load(Ordering::Acquire) == p.seq;
        if ended || !running {
            let end = if ended {
                self.shared.slots.base
                    + Duration::from_nanos(slot.end_nanos.load(Ordering::Relaxed))
            } else {
                // The end time was missed (it returned as it was being flagged, or its thread
                // went away): this scan is the tightest bound left.
                now
            };
            p.event.state = State::Completed;
            p.event.duration = end.saturating_duration_since(p.start);
            p.event.cpu_wait = p.event.cpu_wait.max(waited_since(p.baseline, p.tid));
            p.event.report += 1;
            self.send(&p);
            return None;
        }
        if now.saturating_duration_since(p.last_sample) >= self.shared.config.sample_interval {
            p.last_sample = now;
            self.probe(slot, &mut p);
        }
        if now.saturating_duration_since(p.last_report) >= self.shared.config.report_interval {
            p.last_report = now;
            p.event.cpu_wait = waited_since(p.baseline, p.tid);
            p.event.duration = now.saturating_duration_since(p.start);
            p.event.report += 1;
            self.send(&p);
        }
        Some(p)
    }

    fn probe(&mut self, slot: &Slot, p: &mut Pinned) {
        let probe = probe::take(self.shared, slot, p.probes.last());
        if probe.signalled {
            let counter = if probe.stack.is_some() {
                &self.shared.stats.samples
            } else {
                &self.shared.stats.samples_missed
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
        p.probes.push(probe);
        p.event.samples = p.probes.len() as u32;
        // Bound the memory of a poll stuck for hours: keep the first samples and the latest.
        const KEEP: usize = 64;
        if p.probes.len() > KEEP {
            p.probes.remove(KEEP / 2);
        }
    }

    fn send(&mut self, p: &Pinned) {
        let report = Report {
            event: p.event.clone(),
            probes: p.probes.clone(),
        };
        match self.tx.try_send(report) {
            Ok(()) => {
                self.shared.stats.events.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                self.shared.stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The scheduler's view of a poll, taken when it was a quarter of the threshold old.
#[derive(Clone, Copy)]
struct Baseline {
    at: Instant,
    /// The poll's age then.
    age: Duration,
    stat: probe::SchedStat,
}

/// A stint on a CPU is accounted only when it ends (at the latest at the next tick): allow this
/// much unaccounted time to a running thread.
const TICK: Duration = Duration::from_millis(4);

impl Baseline {
    /// Time on a CPU and time waiting for one since the baseline, as the kernel has accounted
    /// them so far. `None` if the thread is gone or the kernel keeps no `schedstat`.
    fn deltas(&self, tid: i32) -> Option<(Duration, Duration)> {
        let stat = probe::read_schedstat(tid)?;
        let d = |now: u64, then: u64| Duration::from_nanos(now.saturating_sub(then));
        Some((
            d(stat.on_cpu, self.stat.on_cpu),
            d(stat.waiting, self.stat.waiting),
        ))
    }

    /// How long the poll has held its worker, not counting time spent waiting for a CPU since
    /// the baseline; and that waiting time.
    fn pinned_time(&self, now: Instant, tid: i32) -> (Duration, Duration) {
        let since = now.saturating_duration_since(self.at);
        let Some((on_cpu, waited)) = self.deltas(tid) else {
            return (self.age + since, Duration::ZERO);
        };
        // Neither on a CPU nor waiting for one, as far as the kernel has accounted yet.
        let rest = since.saturating_sub(on_cpu + waited);
        let counted = match probe::read_state(tid) {
            // Asleep or in a blocking call now: the unaccounted time is that blocked time.
            Some('S' | 'D') => on_cpu + rest,
            // Runnable: the unaccounted time may be a wait for a CPU still going on; count
            // only what a running thread could have left unaccounted.
            _ => on_cpu + rest.min(TICK),
        };
        (self.age + counted, waited)
    }
}

/// Time thread `tid` spent waiting for a CPU since `baseline` (zero when unknown).
fn waited_since(baseline: Option<Baseline>, tid: i32) -> Duration {
    baseline
        .and_then(|b| b.deltas(tid))
        .map_or(Duration::ZERO, |(_, waited)| waited)
}

enum WorkerIndex {
    Worker(usize),
    HandedOff,
}

/// Which of the runtime's workers the thread runs now. A multi-thread worker that is in
/// `block_in_place` has handed its worker to another thread, and tokio's metrics say so.
fn worker_index(handle: &Handle, thread: Option<std::thread::ThreadId>) -> WorkerIndex {
    match handle.runtime_flavor() {
        RuntimeFlavor::MultiThread => {
            let metrics = handle.metrics();
            let Some(thread) = thread else {
                return WorkerIndex::HandedOff;
            };
            (0..metrics.num_workers())
                .find(|&i| metrics.worker_thread_id(i) == Some(thread))
                .map_or(WorkerIndex::HandedOff, WorkerIndex::Worker)
        }
        _ => WorkerIndex::Worker(0),
    }
}
