//! The watchdog thread: scans the slots every few milliseconds and reports polls that run past
//! the threshold while they are still running.
//!
//! For each slot it remembers the last poll counter it saw and when. A slot whose counter is odd
//! and unchanged for at least the threshold is running one poll that long: the watchdog flags it
//! (so that the after-poll hook reads the clock when it returns), probes the thread (state,
//! system call, stack) and sends an `in_progress` report; it sends it again every report interval
//! while the poll stays stuck, and a `completed` one with the exact end once the poll returns.
//!
//! Every time is taken next to the counter load it belongs to, per slot: a watchdog made late by
//! a slow probe or by the kernel never ages a poll by its own lateness. The poll's start is
//! bounded by looks at its slot: it began after the last look that saw another counter. That
//! bound is what `start` and `duration` report, so a duration is never shorter than the real one
//! (the reported start is at or before the real start, the end is the exact one).
//!
//! Against the threshold a poll's age is taken from the first look that saw it, plus the gap
//! before that look credited up to one and a half scan intervals (see `Watch::age`): so a poll
//! running for the threshold plus one scan interval is reported while the watchdog looks on
//! time, and on an idle machine no poll is reported that ran less than the threshold minus one
//! and a half scan intervals. (On a loaded one, a poll whose worker waited for a CPU can be
//! credited part of that wait, below: a poll of half the threshold was reported 1 in 120 times
//! with both cores busy.) Time the worker spent waiting for a CPU after the watchdog's second look at the
//! poll (its thread's `schedstat`) does not count; before that look at most a quarter of the
//! threshold plus one scan interval counts.
//!
//! At its second look at a poll blocked in the kernel the watchdog also asks the thread to
//! record the poll's end, as for a pinned one, without reporting anything: a watchdog kept off
//! the CPU past the poll's end
//! (the host stealing a VM's CPUs, its code paged back in, a loaded machine) then still finds
//! the exact end at its next look, judges the poll by it the same way, and reports it completed
//! (without a stack: there was nothing left to sample). Before, such a poll was never reported.

pub(crate) mod probe;
mod workers;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use tokio::runtime::Handle;

use crate::config::{Config, Settings};
use crate::event::{PinnedEvent, SourceLocation, State, Worker};
use crate::poll::protocol::Snapshot;
use crate::poll::slot::{NameBuf, Panicked, Slot, SlotTable, NAME_MAX};
use probe::Probe;
use workers::Owner;

/// What the watchdog shares with the hooks' table and the detector handle.
pub(crate) struct Watched {
    pub table: Arc<SlotTable>,
    /// The settings at start; those that change at run time are in `tunables`.
    pub config: Config,
    /// The settings in force now.
    pub tunables: Tunables,
    pub stats: StatsCounters,
    /// Why no stack can be sampled here whatever the settings (`unwinder_not_signal_safe`).
    pub stacks_blocked: Option<&'static str>,
    /// Names this detector's events (see [`PinnedEvent::run_id`]).
    pub run_id: String,
    next_id: AtomicU64,
    /// Per slot, the pin running there now: for live views (metrics) that must not wait for
    /// the export thread.
    live: Box<[LivePin]>,
    /// The heartbeat's last beat, in ns since the slot table's base (see [`Watched::beat`]).
    last_beat: AtomicU64,
    /// Whether the runtime is stalled now: a pin runs and the heartbeat is late.
    stalled_now: AtomicBool,
    /// Polls followed as pinned at the last scan: the heartbeat beats while it is not zero.
    pins: std::sync::atomic::AtomicUsize,
    /// A heartbeat task runs.
    beat_armed: AtomicBool,
}

/// The heartbeat must be later than this (and than the threshold) for the runtime to count as
/// stalled: on a machine whose CPUs are all busy a worker can wait this long for one, and its
/// timers are late without being stalled.
pub(crate) const STALL_FLOOR: Duration = Duration::from_millis(100);

/// The pin a slot runs now, as the watchdog last saw it.
struct LivePin {
    /// Its event id; 0 when the slot is not pinned.
    id: AtomicU64,
    /// When it started, in ns since the slot table's base.
    start: AtomicU64,
    /// Whether it holds one of the runtime's workers: not so for a `block_on` body on a
    /// multi-thread runtime, whose thread is not a worker.
    holds_worker: AtomicBool,
}

/// The pins running now, as live views count them.
#[derive(Clone, Debug, Default)]
pub(crate) struct PinnedNow {
    /// Every pin running now (workers' and `block_on` bodies'): event id and age.
    pub all: Vec<(u64, Duration)>,
    /// How many of them hold a worker.
    pub workers: usize,
    /// The age of the oldest of those that hold a worker.
    pub oldest_worker_pin: Duration,
    /// `block_on` bodies of a multi-thread runtime blocked now (they hold no worker).
    pub bodies: usize,
}

impl Watched {
    /// Each pin running now: its event id and how long it has run.
    pub(crate) fn pinned_now(&self) -> Vec<(u64, Duration)> {
        self.pinned_now_counted().all
    }

    /// The pins running now, with which of them hold a worker.
    pub(crate) fn pinned_now_counted(&self) -> PinnedNow {
        let now = self.table.nanos_since_base(Instant::now());
        let mut out = PinnedNow::default();
        for p in self.live.iter() {
            let id = p.id.load(Ordering::Acquire);
            if id == 0 {
                continue;
            }
            let age = Duration::from_nanos(now.saturating_sub(p.start.load(Ordering::Relaxed)));
            if p.holds_worker.load(Ordering::Relaxed) {
                out.workers += 1;
                out.oldest_worker_pin = out.oldest_worker_pin.max(age);
            } else {
                out.bodies += 1;
            }
            out.all.push((id, age));
        }
        out
    }
}

impl Watched {
    /// Called by the heartbeat task each time its timer fires.
    pub(crate) fn beat(&self) {
        self.last_beat.store(
            self.table.nanos_since_base(Instant::now()),
            Ordering::Relaxed,
        );
    }

    /// How late the heartbeat is at `now` (zero when on time), and when its next beat was due;
    /// `None` when it is off.
    fn heartbeat_late(&self, now: Instant) -> Option<(Duration, Instant)> {
        let interval = self.config.heartbeat?;
        if !self.beat_armed.load(Ordering::SeqCst) {
            // Not beating: no pin runs (see `arm_heartbeat`).
            return None;
        }
        let last = self.last_beat.load(Ordering::Relaxed);
        let now = self.table.nanos_since_base(now);
        let due = self.table.base + Duration::from_nanos(last) + interval;
        Some((
            Duration::from_nanos(now.saturating_sub(last)).saturating_sub(interval),
            due,
        ))
    }

    /// Whether the runtime is stalled now, and for how long it has been stalled in all.
    pub(crate) fn stall(&self) -> (bool, Duration) {
        (
            self.stalled_now.load(Ordering::Relaxed),
            Duration::from_nanos(self.stats.stalled_ns.load(Ordering::Relaxed)),
        )
    }

    pub(crate) fn new(
        table: Arc<SlotTable>,
        config: Config,
        stacks_blocked: Option<&'static str>,
        run_id: String,
    ) -> Watched {
        let live = (0..table.slots().len())
            .map(|_| LivePin {
                id: AtomicU64::new(0),
                start: AtomicU64::new(0),
                holds_worker: AtomicBool::new(false),
            })
            .collect();
        Watched {
            table,
            tunables: Tunables::new(config.settings()),
            config,
            stats: StatsCounters::default(),
            stacks_blocked,
            run_id,
            next_id: AtomicU64::new(1),
            live,
            last_beat: AtomicU64::new(0),
            stalled_now: AtomicBool::new(false),
            pins: std::sync::atomic::AtomicUsize::new(0),
            beat_armed: AtomicBool::new(false),
        }
    }
}

/// The settings that can change at run time. Writers (the control thread) replace them whole
/// under the lock and then move the generation; readers (the watchdog once per scan, the export
/// thread once per event) load the generation and take the lock only when it moved, so a scan
/// or an event always sees one consistent set, and the per-poll path never sees any of it.
pub(crate) struct Tunables {
    generation: AtomicU64,
    settings: Mutex<Settings>,
}

impl Tunables {
    pub(crate) fn new(settings: Settings) -> Tunables {
        Tunables {
            generation: AtomicU64::new(0),
            settings: Mutex::new(settings),
        }
    }

    /// A reader's copy, refreshed when the settings change.
    pub(crate) fn reader(&self) -> Current {
        Current::new(self)
    }

    /// The settings in force now.
    pub(crate) fn get(&self) -> Settings {
        *self.settings.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the settings with `f`, all at once; when `f` fails nothing changes. Returns the
    /// settings before and after.
    pub(crate) fn update<E>(
        &self,
        f: impl FnOnce(&mut Settings) -> Result<(), E>,
    ) -> Result<(Settings, Settings), E> {
        let mut guard = self.settings.lock().unwrap_or_else(PoisonError::into_inner);
        let before = *guard;
        let mut after = before;
        f(&mut after)?;
        *guard = after;
        self.generation.fetch_add(1, Ordering::Release);
        Ok((before, after))
    }
}

/// A reader's copy of [`Tunables`], refreshed when their generation moves.
pub(crate) struct Current {
    generation: u64,
    settings: Settings,
}

impl Current {
    pub(crate) fn new(t: &Tunables) -> Current {
        Current {
            generation: t.generation.load(Ordering::Acquire),
            settings: t.get(),
        }
    }

    /// The settings in force, re-read only if they changed since the last call.
    pub(crate) fn refresh(&mut self, t: &Tunables) -> Settings {
        let g = t.generation.load(Ordering::Acquire);
        if g != self.generation {
            self.generation = g;
            self.settings = t.get();
        }
        self.settings
    }
}

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
    /// Time the whole runtime was stalled by pins: a pin ran and the heartbeat was late past
    /// the threshold (see `PINWATCH_HEARTBEAT`).
    pub runtime_stalled_time: Duration,
    /// Times the watchdog went to sleep because every worker was parked and no poll ran (a
    /// worker unparking wakes it).
    pub watchdog_sleeps: u64,
}

pub(crate) fn snapshot(c: &StatsCounters, table: &SlotTable) -> Stats {
    let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
    Stats {
        pinned_polls: r(&c.pinned_polls),
        events: r(&c.events),
        delivered: r(&c.delivered),
        dropped: r(&c.dropped),
        block_in_place: r(&c.block_in_place),
        retracted: r(&c.retracted),
        unwatched_threads: r(&table.unwatched_threads),
        samples: r(&c.samples),
        samples_missed: r(&c.samples_missed),
        samples_discarded: r(&c.samples_discarded),
        sample_handler_time: Duration::from_nanos(r(&c.sample_handler_ns)),
        sample_round_trip_time: Duration::from_nanos(r(&c.sample_round_trip_ns)),
        runtime_stalled_time: Duration::from_nanos(r(&c.stalled_ns)),
        watchdog_sleeps: r(&c.sleeps),
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
    pub delivered: AtomicU64,
    /// Times the watchdog slept because every worker was parked.
    pub sleeps: AtomicU64,
}

/// What the watchdog sends on: the event as far as the watchdog knows it, plus the raw probes
/// that [`crate::analyze`] turns into frames, a reason and a profile.
pub(crate) struct RawReport {
    pub event: PinnedEvent,
    pub probes: Vec<Probe>,
}

/// The watchdog's memory of one slot.
struct Watch {
    seq: u64,
    /// Just after the load that first saw `seq`.
    first_seen: Instant,
    /// Just before the last load that saw another counter: the poll started after it (moved
    /// later by the time its panic hooks took, which is not timed).
    after: Instant,
    /// `after` as first found, never moved: what a stall blames.
    began: Instant,
    /// The thread has handed its worker over (`block_in_place`): not pinning while that lasts.
    handed_off: bool,
    /// The thread's scheduler accounting at the second look at the poll: time spent after it
    /// waiting for a CPU does not count toward the threshold.
    baseline: Option<Baseline>,
    /// The most pinned time found for the poll so far: time only adds up, and a look that
    /// finds the thread runnable (its sleep just ended, it waits for a CPU) can count less of
    /// it than an earlier look that found it blocked.
    counted: Duration,
    /// The poll's task and thread, read at the second look, when the watchdog asked there for
    /// its end time because its thread was blocked (see `Watchdog::arm`).
    armed: Option<Armed>,
    /// The second look has decided whether to arm it.
    tried_arm: bool,
    /// The time of the poll's panic hooks (`Panicked::hooks`) left out of its timing so far.
    hooks_left_out: u64,
    pinned: Option<Pinned>,
}

/// How much of the time between the last look that saw another counter and the first that saw
/// this poll counts toward its age: one and a half scan intervals (a timely watchdog's looks
/// are one interval and its wake-up apart).
const GAP_CREDIT: (u32, u32) = (3, 2);

impl Watch {
    /// Poll `seq`, first seen at `first_seen`, begun after `after`; `hooks` of its panic
    /// hooks' time had passed before (not left out: it is in the gap before the first look).
    fn new(seq: u64, first_seen: Instant, after: Instant, hooks: u64) -> Watch {
        Watch {
            seq,
            first_seen,
            after,
            began: after,
            handed_off: false,
            baseline: None,
            counted: Duration::ZERO,
            armed: None,
            tried_arm: false,
            hooks_left_out: hooks,
            pinned: None,
        }
    }

    /// Leaves `hooks` of panic hooks' time, new since the last look, out of the poll's
    /// timing: its start bounds move that much later, and so does its baseline's instant.
    fn leave_out(&mut self, hooks: u64, now: Instant) {
        let new = Duration::from_nanos(hooks.saturating_sub(self.hooks_left_out));
        self.hooks_left_out = self.hooks_left_out.max(hooks);
        if new.is_zero() {
            return;
        }
        self.first_seen = (self.first_seen + new).min(now);
        self.after = (self.after + new).min(self.first_seen);
        if let Some(b) = self.baseline.as_mut() {
            b.at += new;
        }
    }

    /// The poll's age at `t` as the threshold sees it: the time since the first look that saw
    /// it, plus the gap before that look (the poll started in it), credited up to one and a
    /// half scan intervals. Never more than the poll's real age plus that, and, while the
    /// watchdog looks on time, never less than its real age: a poll that runs for the threshold
    /// plus one scan interval is seen past the threshold by the last look before it returns.
    fn age(&self, t: Instant, interval: Duration) -> Duration {
        let gap = self.first_seen.saturating_duration_since(self.after);
        t.saturating_duration_since(self.first_seen)
            + gap.min(interval * GAP_CREDIT.0 / GAP_CREDIT.1)
    }
}

/// A poll reported as pinned and not yet completed.
/// A poll armed at its second look: what the report would say of it, read then — by the time it
/// is judged, the thread may be gone and its slot another thread's.
#[derive(Clone, Copy)]
struct Armed {
    snap: Snapshot,
    tid: i32,
    thread: u64,
    /// The worker the thread owned then (`None`: a `block_on` body).
    index: Option<usize>,
    name: NameBuf,
    name_len: usize,
}

struct Pinned {
    seq: u64,
    tid: i32,
    thread: u64,
    baseline: Option<Baseline>,
    event: PinnedEvent,
    /// When it started, moved later by the time of its panic hooks (not timed): its duration is
    /// up to now from here, and `event.start` moves with it (start + duration is the end).
    start: Instant,
    /// `start` never moved: what a stall blames.
    began: Instant,
    /// The time of the poll's panic hooks (`Panicked::hooks`) left out of the pin so far.
    hooks_left_out: u64,
    last_report: Instant,
    last_sample: Instant,
    probes: Vec<Probe>,
}

impl Pinned {
    /// Poll `wt.seq` of thread `thread` (`tid`), reported now as `event`.
    fn new(wt: &Watch, tid: i32, thread: u64, event: PinnedEvent, now: Instant) -> Pinned {
        Pinned {
            seq: wt.seq,
            tid,
            thread,
            baseline: wt.baseline,
            event,
            start: wt.after,
            began: wt.began,
            hooks_left_out: wt.hooks_left_out,
            last_report: now,
            last_sample: now,
            probes: Vec::new(),
        }
    }
}

/// Starts the watchdog thread for `w`'s slots on the runtime of `handle`: it sends its reports
/// into `tx` and stops, after a last scan, when `stop`'s sender is dropped.
pub(crate) fn spawn(
    w: Arc<Watched>,
    handle: Handle,
    tx: mpsc::SyncSender<RawReport>,
    stop: mpsc::Receiver<()>,
) -> Result<std::thread::JoinHandle<()>, crate::Error> {
    std::thread::Builder::new()
        .name("pinwatch-watchdog".into())
        .spawn(move || run(w, handle, tx, stop))
        .map_err(|source| crate::Error::Thread {
            what: "watchdog",
            source,
        })
}

fn run(w: Arc<Watched>, handle: Handle, tx: mpsc::SyncSender<RawReport>, stop: mpsc::Receiver<()>) {
    let mut current = Current::new(&w.tunables);
    let n = w.table.slots().len();
    let mut watches: Vec<Option<Watch>> = (0..n).map(|_| None).collect();
    // Just before the last look at each slot. The hooks may run before this thread does: the
    // first lower bound is the moment the slots were made, before the runtime existed.
    let mut last_look: Vec<Instant> = vec![w.table.base; n];
    let mut wd = Watchdog {
        w: &w,
        handle: &handle,
        tx: &tx,
        settings: current.refresh(&w.tunables),
        stalled: None,
    };
    let mut scans = 0u64;
    let mut last_scan = Instant::now();
    let parking = &w.table.parking;
    parking.register_watchdog();
    // The runtime's cores: its workers, or the one of a current-thread runtime.
    let cores = handle.metrics().num_workers();
    // The unpark count at the last scan that found the runtime idle.
    let mut idle_at: Option<u64> = None;
    let mut sleep = false;
    loop {
        let stopping = if std::mem::take(&mut sleep) {
            // Idle for a whole scan interval: sleep until a worker unparks. Say so first, then
            // check again that nothing can poll (see `poll::park`).
            let from = Instant::now();
            if parking.prepare_sleep() {
                if idle_at == Some(parking.unparks()) && quiet(&w.table, cores) {
                    w.stats.sleeps.fetch_add(1, Ordering::Relaxed);
                    let woken = parking.sleep(from);
                    // No poll ran while it slept: every poll seen next began after the wake.
                    for look in last_look.iter_mut() {
                        *look = (*look).max(woken);
                    }
                } else {
                    parking.cancel_sleep();
                }
            }
            idle_at = None;
            !matches!(stop.try_recv(), Err(mpsc::TryRecvError::Empty))
        } else {
            // One scan interval from the start of the last scan, not from its end: scans keep
            // to the interval on average (a poll's start and the threshold are bounded by the
            // looks, and a period longer than the interval would lose the difference).
            let wait = wd
                .settings
                .effective_scan_interval()
                .saturating_sub(last_scan.elapsed());
            match stop.recv_timeout(wait) {
                Err(mpsc::RecvTimeoutError::Timeout) => false,
                // Sender dropped: the detector is stopping. Scan once more to complete what
                // ended.
                _ => true,
            }
        };
        scans += 1;
        // One set of settings for the whole scan.
        wd.settings = current.refresh(&w.tunables);
        if let Some(late) = w.config.late_scans {
            if scans % 2 == 0 {
                std::thread::sleep(late);
            }
        }
        // Before every load of this scan: the look time of the slots nobody holds (most of the
        // table), so that only the few in use read the clock next to their own loads.
        let scan_start = Instant::now();
        let mut blamed = false;
        let bound = wd.settings.threshold.max(STALL_FLOOR);
        wd.stalled = w
            .heartbeat_late(scan_start)
            .filter(|(late, _)| *late > bound)
            .map(|(late, due)| Stall { late, due });
        for (((slot, watch), look), live) in w
            .table
            .slots()
            .iter()
            .zip(watches.iter_mut())
            .zip(last_look.iter_mut())
            .zip(w.live.iter())
        {
            if watch.is_none() && !slot.is_active() {
                // Free and not followed: nothing to time. A thread that takes the slot after
                // this load starts its polls after `scan_start`.
                *look = scan_start;
                continue;
            }
            wd.scan_slot(slot, watch, look);
            let pinned = watch.as_ref().and_then(|wt| wt.pinned.as_ref());
            let id = pinned.map_or(0, |p| p.event.id);
            if live.id.load(Ordering::Relaxed) != id {
                if let Some(p) = pinned {
                    live.start
                        .store(w.table.nanos_since_base(p.start), Ordering::Relaxed);
                    live.holds_worker
                        .store(p.event.worker.index.is_some(), Ordering::Relaxed);
                }
                live.id.store(id, Ordering::Release);
            }
            if let (Some(p), Some(stall)) = (pinned, wd.stalled) {
                blamed |= stall.blames(p.began);
            }
        }
        // Stalled: a pin that was running when the heartbeat was due runs still, and the
        // runtime's timers have not fired since.
        w.stalled_now.store(blamed, Ordering::Relaxed);
        if blamed {
            let d = scan_start.saturating_duration_since(last_scan);
            w.stats
                .stalled_ns
                .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
        }
        last_scan = scan_start;
        if stopping {
            // Whatever is still flagged never returned: its last report stands.
            return;
        }
        let pins = watches
            .iter()
            .flatten()
            .filter(|wt| wt.pinned.is_some())
            .count();
        arm_heartbeat(&w, &handle, pins);
        // Idle: no poll runs, none is followed, and every core is parked. Twice in a row with
        // no unpark between: sleep.
        let running = watches.iter().flatten().any(|wt| wt.seq & 1 == 1);
        let idle = pins == 0 && !running && parking.all_parked(cores);
        let unparks = parking.unparks();
        sleep = idle && idle_at == Some(unparks);
        idle_at = idle.then_some(unparks);
    }
}

/// Nothing can poll now: every core is parked and no slot has a poll running.
fn quiet(table: &SlotTable, cores: usize) -> bool {
    table.parking.all_parked(cores) && table.slots().iter().all(|s| s.poll.seq() & 1 == 0)
}

/// Runs the heartbeat while `pins` (polls followed as pinned now) is not zero: a task on the
/// runtime that beats every heartbeat period. Nothing beats while nothing pins: the heartbeat
/// only tells whether a pin stops the whole runtime.
fn arm_heartbeat(w: &Arc<Watched>, handle: &Handle, pins: usize) {
    w.pins.store(pins, Ordering::SeqCst);
    let Some(every) = w.config.heartbeat else {
        return;
    };
    if pins == 0 || w.beat_armed.swap(true, Ordering::SeqCst) {
        return;
    }
    // Due one period from now: a runtime that cannot run the task from here is late.
    w.beat();
    let w = Arc::clone(w);
    handle.spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            w.beat();
            if w.pins.load(Ordering::SeqCst) == 0 {
                // Disarm, then look again: either the watchdog sees it disarmed and arms a new
                // beat, or this one sees the new pin and goes on (see `arm_heartbeat`).
                w.beat_armed.store(false, Ordering::SeqCst);
                if w.pins.load(Ordering::SeqCst) == 0 || w.beat_armed.swap(true, Ordering::SeqCst) {
                    return;
                }
            }
        }
    });
}

struct Watchdog<'a> {
    w: &'a Watched,
    handle: &'a Handle,
    tx: &'a mpsc::SyncSender<RawReport>,
    /// The settings of this scan.
    settings: Settings,
    /// How late the heartbeat was at this scan's start, when it is past the stall bound.
    stalled: Option<Stall>,
}

/// The heartbeat is late past the stall bound.
#[derive(Clone, Copy)]
struct Stall {
    /// By how much, at this scan's start.
    late: Duration,
    /// When its beat was due: only a poll running then can have stalled it.
    due: Instant,
}

impl Stall {
    /// Whether a poll that started after `start` (its lower bound) was running when the beat
    /// was due. A poll that began only after that, while the runtime was already stalled by
    /// something else or had just come back, did not cause it.
    fn blames(&self, start: Instant) -> bool {
        start < self.due
    }
}

impl Watchdog<'_> {
    fn scan_slot(&mut self, slot: &Slot, watch: &mut Option<Watch>, last_look: &mut Instant) {
        let before = Instant::now();
        let active = slot.is_active();
        let seq = slot.poll.seq();
        let now = Instant::now();
        let prev_look = std::mem::replace(last_look, before);
        if let Some(wt) = watch.as_mut() {
            if let Some(p) = wt.pinned.take() {
                wt.pinned = self.follow_pinned(slot, p, seq, now);
                if wt.pinned.is_none() && wt.seq == seq && seq & 1 == 1 {
                    // Retracted while the same poll runs on: it is in `block_in_place`.
                    wt.handed_off = true;
                }
            }
        }
        if !active {
            if let Some(wt) = watch.take_if(|w| w.pinned.is_none()) {
                // The thread went away: its last poll may have ended unseen past the threshold.
                self.ended_unseen(slot, &wt, now);
            }
            return;
        }
        let Some(wt) = watch.as_mut() else {
            *watch = Some(self.fresh_watch(slot, seq, now, prev_look));
            return;
        };
        if seq != wt.seq {
            // Counters never repeat, not even across owners of the slot: another poll. The one
            // before may have ended past the threshold while the watchdog was kept away.
            self.ended_unseen(slot, wt, now);
            let pinned = wt.pinned.take();
            *wt = self.fresh_watch(slot, seq, now, prev_look);
            wt.pinned = pinned;
            return;
        }
        if seq & 1 == 0 || wt.pinned.is_some() || self.settings.paused {
            return;
        }
        if let Some(panicked) = slot.unwinding.since_running(seq) {
            // It panicked: the panic hook's time (printing, symbolizing a backtrace) is the
            // panic machinery's, not the code under test's. Not timed while the hook runs.
            if panicked.resumed.is_none() {
                return;
            }
            // The hook has returned (the poll unwinds, or caught the panic and goes on): leave
            // the hooks' time out, and time the rest.
            wt.leave_out(panicked.hooks, now);
        }
        if wt.handed_off {
            // Still in `block_in_place`? Once the thread has a worker again, the rest of the
            // poll holds that worker: time it from here.
            let thread = slot.thread.load(Ordering::Relaxed);
            if workers::owner(self.handle, thread) != Owner::HandedOff {
                let mut fresh = self.fresh_watch(slot, seq, now, prev_look);
                fresh.pinned = wt.pinned.take();
                *wt = fresh;
            }
            return;
        }
        let threshold = self.settings.threshold;
        let interval = self.settings.effective_scan_interval();
        let tid = slot.tid.load(Ordering::Relaxed);
        if wt.baseline.is_none() {
            // The second look at this poll (polls this long are rare: the read is too). What
            // the poll did before it is unknown: on a CPU, blocked, or waiting for a CPU.
            // Credit it with what two timely looks see, at most a quarter of the threshold
            // plus one scan interval: a watchdog that looks late — preempted on a loaded
            // machine — must not turn a preempted worker's wait into a pin.
            wt.baseline = probe::read_schedstat(tid).map(|stat| {
                let at = Instant::now();
                Baseline {
                    at,
                    age: wt.age(at, interval).min(threshold / 4 + interval),
                    stat,
                }
            });
        }
        if wt.armed.is_none() && !wt.tried_arm {
            wt.tried_arm = true;
            self.arm(slot, wt, seq);
        }
        let age = wt.age(before, interval);
        // From half the threshold on (polls that long are rare), every look counts the
        // pinned time: a look that finds the thread blocked is kept for the looks after it.
        if age >= threshold / 2 {
            // A worker the kernel preempted (an overloaded machine, a CPU quota) is late, but
            // not pinned by its task: only time on a CPU or blocked counts.
            let (pinned_for, waited) = match wt.baseline {
                Some(b) => b.pinned_time(Instant::now(), tid),
                None => (age, Duration::ZERO),
            };
            wt.counted = wt.counted.max(pinned_for);
            if age >= threshold && wt.counted >= threshold {
                self.flag(slot, wt, seq, waited);
            }
        }
    }

    /// The second look at poll `seq`, if its thread is blocked: asks it to record when it ends, as for a poll
    /// found pinned, without reporting anything. If the watchdog is then kept away until after
    /// the poll has ended (the host steals the CPUs, the kernel pages the watchdog's code back
    /// in, a loaded machine), its next look still finds the exact end and judges the poll by it
    /// ([`ended_unseen`](Self::ended_unseen)); without it, such a poll ended unknown and was
    /// never reported. Costs what flagging costs (a barrier here, a clock read when the poll
    /// returns), once per poll that lives to a second look; the per-poll path is unchanged.
    fn arm(&mut self, slot: &Slot, wt: &mut Watch, seq: u64) {
        let Some(snap) = slot.poll.read().filter(|s| s.seq == seq) else {
            return;
        };
        let body = snap.task_id == crate::poll::BODY_TASK_ID;
        let thread = slot.thread.load(Ordering::Relaxed);
        let index = match workers::owner(self.handle, thread) {
            Owner::Worker(i) => Some(i),
            Owner::HandedOff if body => None,
            // In `block_in_place` (the flag path counts it): nothing to time.
            Owner::HandedOff => return,
        };
        // Only a poll blocked in the kernel (asleep, in a blocking call): time its thread spends
        // off the CPU and not waiting for one is then the block. A poll found running could
        // spend it stolen by the host (a VM's CPUs), which no account shows; it is judged only
        // by looks while it runs, as before.
        let tid = slot.tid.load(Ordering::Relaxed);
        if !matches!(probe::read_state(tid), Some('S' | 'D')) {
            return;
        }
        let mut name: NameBuf = [0; NAME_MAX];
        let name_len = slot.name_into(&mut name);
        if slot.poll.flag(seq) && slot.poll.seq() == seq {
            wt.armed = Some(Armed {
                snap,
                tid,
                thread,
                index,
                name,
                name_len,
            });
        }
    }

    /// Poll `wt.seq`, armed at its second look and not reported, has ended (the slot's counter
    /// moved, or its thread went away): if it ran past the threshold — timed to its recorded
    /// end, the same way as while it ran, time spent waiting for a CPU not counted — reports it,
    /// completed, in one event without a stack.
    fn ended_unseen(&mut self, slot: &Slot, wt: &Watch, now: Instant) {
        let Some(armed) = wt.armed else { return };
        if wt.pinned.is_some() || wt.handed_off || self.settings.paused {
            return;
        }
        let Some(nanos) = slot.poll.ended(wt.seq) else {
            return;
        };
        let end = self.at(nanos);
        let threshold = self.settings.threshold;
        let tid = armed.tid;
        // Waited since the baseline until now, not until the end: never more pinned time than
        // there was.
        let waited = waited_since(wt.baseline, tid);
        // The poll's panic hooks since the last look (it caught the panics, or ended unwinding
        // from one) are the panic machinery's time, not a pin: left out, as a look would.
        let hooks = match slot.unwinding.since(wt.seq) {
            // Its panic hook never returned: the poll ended in the panic machinery.
            Some(Panicked { resumed: None, .. }) => return,
            Some(p) => Duration::from_nanos(p.hooks.saturating_sub(wt.hooks_left_out)),
            None => Duration::ZERO,
        };
        let after = wt.after;
        let age = wt
            .age(end, self.settings.effective_scan_interval())
            .saturating_sub(hooks);
        let pinned_for = match wt.baseline {
            Some(b) => (b.age + end.saturating_duration_since(b.at)).saturating_sub(waited),
            None => age,
        }
        .saturating_sub(hooks);
        if age < threshold {
            // The common case: a poll of a few milliseconds. Nothing more to read.
            return;
        }
        if pinned_for < threshold {
            return;
        }
        if let Some(i) = armed.index {
            if workers::owner(self.handle, armed.thread) != Owner::Worker(i) {
                // tokio no longer has the thread running the worker it ran at the second look:
                // it handed it over since (`block_in_place`), so what it did after that look
                // may not have held a worker. Not judged.
                return;
            }
        }
        self.w.stats.pinned_polls.fetch_add(1, Ordering::Relaxed);
        let worker = Worker {
            index: armed.index,
            tid,
            name: String::from_utf8_lossy(&armed.name[..armed.name_len]).into_owned(),
        };
        let mut event = self.new_event(
            armed.snap,
            worker,
            Default::default(),
            after,
            wt.began,
            waited,
        );
        event.state = State::Completed;
        // Its panic hooks left out: it starts that much later, and ends where it ended.
        event.duration = end.saturating_duration_since(after).saturating_sub(hooks);
        event.start += hooks;
        let pinned = Pinned::new(wt, tid, armed.thread, event, now);
        self.send(&pinned);
    }

    /// A poll just crossed the threshold: decide whether it is pinned, and report it.
    fn flag(&mut self, slot: &Slot, wt: &mut Watch, seq: u64, waited: Duration) {
        // The task and the owner, read between two loads of the counter: all of poll `seq`.
        let Some(snap) = slot.poll.read() else { return };
        let tid = slot.tid.load(Ordering::Relaxed);
        let thread = slot.thread.load(Ordering::Relaxed);
        let mut name: NameBuf = [0; NAME_MAX];
        let name_len = slot.name_into(&mut name);
        if snap.seq != seq || slot.poll.seq() != seq {
            return;
        }
        let body = snap.task_id == crate::poll::BODY_TASK_ID;
        let index = match workers::owner(self.handle, thread) {
            Owner::Worker(i) => Some(i),
            // A `block_on` body on a multi-thread runtime: its thread owns no worker, and
            // blocking it stops the body (on a current-thread runtime it is worker 0).
            Owner::HandedOff if body => None,
            Owner::HandedOff => {
                // The thread gave its worker to another thread in `block_in_place`: a blocking
                // section the runtime planned for, not a pinned worker.
                wt.handed_off = true;
                self.w.stats.block_in_place.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        if !slot.poll.flag(seq) {
            // It returned as it was being flagged: not worth a report.
            return;
        }
        // The spans the poll entered, as they are now: the report keeps them, even once the
        // spans close.
        let spans = crate::spans::capture(slot, seq);
        self.w.stats.pinned_polls.fetch_add(1, Ordering::Relaxed);
        let worker = Worker {
            index,
            tid,
            name: String::from_utf8_lossy(&name[..name_len]).into_owned(),
        };
        let event = self.new_event(snap, worker, spans, wt.after, wt.began, waited);
        let mut pinned = Pinned::new(wt, tid, thread, event, Instant::now());
        self.probe(slot, &mut pinned);
        self.send(&pinned);
        wt.pinned = Some(pinned);
        // Reported: its end is followed from here, not judged again when it ends.
        wt.armed = None;
    }

    /// A new event (`in_progress`, first report) for the poll `snap` began after `after`.
    fn new_event(
        &self,
        snap: Snapshot,
        worker: Worker,
        spans: crate::spans::Captured,
        after: Instant,
        began: Instant,
        waited: Duration,
    ) -> PinnedEvent {
        let body = snap.task_id == crate::poll::BODY_TASK_ID;
        let index = worker.index;
        let spawned_at = if snap.spawned_at == 0 {
            None
        } else {
            // SAFETY: the address was stored from a `&'static Location<'static>` by the
            // before-poll hook, and locations are never freed.
            Some(SourceLocation::from_std(unsafe {
                &*(snap.spawned_at as *const std::panic::Location<'static>)
            }))
        };
        let elapsed = Instant::now().saturating_duration_since(after);
        let stall = self.stalled.filter(|s| s.blames(began));
        PinnedEvent {
            id: self.w.next_id.fetch_add(1, Ordering::Relaxed),
            run_id: self.w.run_id.clone(),
            pid: std::process::id(),
            state: State::InProgress,
            start: SystemTime::now()
                .checked_sub(elapsed)
                .unwrap_or(SystemTime::UNIX_EPOCH),
            duration: elapsed,
            threshold: self.settings.threshold,
            task_id: (!body).then_some(snap.task_id),
            block_on: body,
            spawned_at,
            worker,
            reason: None,
            other_reasons: Vec::new(),
            blocking_operation: None,
            advice: None,
            top_frame: None,
            profile: Vec::new(),
            no_stack: None,
            stack: Vec::new(),
            held_locks: Vec::new(),
            lock_holder: None,
            samples: 0,
            report: 1,
            cpu_wait: waited,
            runtime_stalled: stall.is_some(),
            heartbeat_late: stall.map(|s| s.late),
            tasks_queued_behind: self.queued_behind(index),
            spans: spans.spans,
            trace_id: spans.trace_id,
            span_id: spans.span_id,
        }
    }

    /// A watch of poll `seq`, first seen at `first_seen` and begun after `after`: a panic
    /// hook of it that had returned since `after` is in the gap before the first look, which
    /// the timing credits only in part; the poll is timed from the hook's return instead
    /// (what it did before the panic is unknown).
    fn fresh_watch(&self, slot: &Slot, seq: u64, first_seen: Instant, after: Instant) -> Watch {
        let mark = slot.unwinding.since_running(seq);
        let mut w = Watch::new(seq, first_seen, after, mark.map_or(0, |p| p.hooks));
        if let Some(r) = mark.and_then(|p| p.resumed).map(|r| self.at(r)) {
            if r > after {
                w.after = r.min(first_seen);
            }
        }
        w
    }

    /// The instant of `nanos` on the slot table's clock.
    fn at(&self, nanos: u64) -> Instant {
        self.w.table.base + Duration::from_nanos(nanos)
    }

    /// Follows a reported poll: completes it, retracts it, re-reports it, or samples it again.
    /// Returns it while it is still running and pinning. `seq` is the counter just loaded.
    fn follow_pinned(
        &mut self,
        slot: &Slot,
        mut p: Pinned,
        seq: u64,
        now: Instant,
    ) -> Option<Pinned> {
        // The panic hooks the poll ran since it was found pinned (it caught the panics, or
        // ends unwinding from one) are the panic machinery's time, not the pin's: its start
        // moves that much later. Nothing is sampled or reported while a hook runs.
        let mut in_hook = false;
        if let Some(m) = slot.unwinding.since_running(p.seq) {
            let new = Duration::from_nanos(m.hooks.saturating_sub(p.hooks_left_out));
            p.hooks_left_out = p.hooks_left_out.max(m.hooks);
            p.start += new;
            p.event.start += new;
            in_hook = m.resumed.is_none();
        }
        let ended = slot.poll.ended(p.seq);
        if ended.is_some() || seq != p.seq {
            let end = match ended {
                Some(nanos) => self.at(nanos),
                // The end time was missed (the thread went away mid-poll): this look is the
                // tightest bound left.
                None => now,
            };
            if !slot.is_active() || slot.tid.load(Ordering::Relaxed) != p.tid {
                // Do not leave a request to a thread that is gone on the slot.
                crate::signal::withdraw(slot);
            }
            p.event.state = State::Completed;
            p.event.duration = end.saturating_duration_since(p.start);
            p.event.cpu_wait = p.event.cpu_wait.max(waited_since(p.baseline, p.tid));
            p.event.report += 1;
            self.send(&p);
            return None;
        }
        if in_hook {
            return Some(p);
        }
        if !p.event.block_on && workers::owner(self.handle, p.thread) == Owner::HandedOff {
            // tokio has now recorded that this thread handed its worker over: the poll was in
            // `block_in_place` all along (the hand-over is recorded late under load). The
            // analysis counts it.
            p.event.state = State::Retracted;
            p.event.duration = now.saturating_duration_since(p.start);
            p.event.report += 1;
            self.send(&p);
            return None;
        }
        if let Some(late) = self.stalled.filter(|s| s.blames(p.began)).map(|s| s.late) {
            p.event.heartbeat_late = Some(p.event.heartbeat_late.map_or(late, |m| m.max(late)));
            if !p.event.runtime_stalled {
                // Say so now, not at the next report: the whole service has stopped.
                p.event.runtime_stalled = true;
                self.report_again(&mut p, now);
            }
        }
        if now.saturating_duration_since(p.last_sample) >= self.settings.sample_interval {
            p.last_sample = now;
            self.probe(slot, &mut p);
        }
        if now.saturating_duration_since(p.last_report) >= self.settings.report_interval {
            self.report_again(&mut p, now);
        }
        Some(p)
    }

    /// Sends the next `in_progress` report of a pin still running, brought up to `now`.
    fn report_again(&mut self, p: &mut Pinned, now: Instant) {
        p.last_report = now;
        p.event.cpu_wait = waited_since(p.baseline, p.tid);
        p.event.duration = now.saturating_duration_since(p.start);
        p.event.tasks_queued_behind = self.queued_behind(p.event.worker.index);
        p.event.report += 1;
        self.send(p);
    }

    /// Tasks waiting in worker `index`'s local run queue.
    fn queued_behind(&self, index: Option<usize>) -> Option<usize> {
        let metrics = self.handle.metrics();
        index
            .filter(|i| *i < metrics.num_workers())
            .map(|i| metrics.worker_local_queue_depth(i))
    }

    fn probe(&mut self, slot: &Slot, p: &mut Pinned) {
        let probe = probe::take(self.w, slot, p.seq, p.probes.last(), self.settings.stacks);
        p.probes.push(probe);
        p.event.samples = p.probes.iter().filter(|x| x.stack.is_some()).count() as u32;
        // Bound the memory of a poll stuck for hours: keep the first samples and the latest.
        const KEEP: usize = 64;
        if p.probes.len() > KEEP {
            p.probes.remove(KEEP / 2);
        }
    }

    fn send(&mut self, p: &Pinned) {
        let report = RawReport {
            event: p.event.clone(),
            probes: p.probes.clone(),
        };
        match self.tx.try_send(report) {
            Ok(()) => {
                self.w.stats.events.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                self.w.stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The scheduler's view of a poll, taken at the watchdog's second look at it.
#[derive(Clone, Copy)]
struct Baseline {
    at: Instant,
    /// The poll's age then, credited toward the threshold (at most a quarter of it plus one
    /// scan interval).
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader never sees half of a change: every set it reads is one a writer wrote whole.
    #[test]
    fn settings_change_all_at_once_for_their_readers() {
        let base = Config::default().settings();
        let a = Settings {
            threshold: Duration::from_millis(20),
            report_interval: Duration::from_secs(1),
            ..base
        };
        let b = Settings {
            threshold: Duration::from_millis(200),
            report_interval: Duration::from_secs(5),
            ..base
        };
        let t = Arc::new(Tunables::new(a));
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let writer = {
            let t = Arc::clone(&t);
            std::thread::spawn(move || {
                for i in 0..20_000 {
                    let next = if i % 2 == 0 { b } else { a };
                    t.update(|s| {
                        s.threshold = next.threshold;
                        s.report_interval = next.report_interval;
                        Ok::<(), ()>(())
                    })
                    .unwrap();
                }
                drop(done_tx);
            })
        };
        let mut current = Current::new(&t);
        loop {
            let s = current.refresh(&t);
            assert!(s == a || s == b, "a mixed set: {s:?}");
            if let Err(mpsc::TryRecvError::Disconnected) = done_rx.try_recv() {
                break;
            }
        }
        writer.join().unwrap();
        assert_eq!(current.refresh(&t), a, "the last write");
        // A failed change changes nothing.
        let r = t.update(|s| {
            s.threshold = Duration::from_secs(9);
            Err::<(), _>("no")
        });
        assert!(r.is_err());
        assert_eq!(current.refresh(&t), a);
    }
}
