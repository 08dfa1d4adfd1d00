//! The watchdog thread's loop: every scan interval it looks at each slot in use — the poll
//! counter, with a clock read beside it — and acts on what [`judge`](super::judge) decides:
//! flags a poll that crossed the threshold (so that the after-poll hook records its end),
//! probes its thread and sends an `in_progress` report, re-reports it while it stays stuck and
//! sends it `completed` once it returns. While every worker is parked and no poll runs it
//! sleeps until one unparks.
//!
//! Every time is taken next to the counter load it belongs to, per slot. What `/proc` says of a
//! thread (its scheduler accounting, its state) is read only for polls past half the threshold.

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

use tokio::runtime::Handle;

use super::judge::{
    first_park, first_since, ran_since, wait_at_most, worth_arming, Armed, Asleep, Before,
    DriverView, DriverWatch, Drivers, FirstPark, Frozen, Idle, Pinned, Stall, Tracked, WorkerState,
    ASLEEP_LOOKS, FIRST_PARK_WITHIN, FOLLOW_EVERY, SETTLE_AFTER, TICK,
};
use super::probe::{self, Probe, SchedStatReader};
use super::shared::Shared;
use super::stamps::{self, Stamping, Switch, TickClock};
#[cfg(feature = "schedule-latency")]
use super::victims::Wait;
use super::victims::LIFO_ADVICE;
use super::workers::{self, Owner};
use crate::config::Settings;
use crate::event::{PinnedEvent, SourceLocation, State, Worker};
use crate::poll::protocol::Snapshot;
use crate::poll::slot::{NameBuf, Panicked, Slot, SlotTable, NAME_MAX};
use crate::poll::waits::{Polled, AFTER_PIN_MAX};
#[cfg(feature = "schedule-latency")]
use crate::poll::waits::{NO_WAIT, WAIT_RING};

/// The runtime-level advice for a pin that held the worker driving the runtime's I/O and
/// timers while the others slept.
const DRIVER_ADVICE: &str = "it held the worker that drove the runtime's timers and I/O while \
    the others slept: run it in tokio::task::spawn_blocking; tokio's \
    Builder::enable_eager_driver_handoff() (tokio 1.52+, unstable) has a worker hand the drivers \
    to another whenever it leaves them to poll a task, for an extra wake-up each time";

/// The runtime-level advice for a pin of a multi-thread runtime during which pinwatch's heartbeat
/// fired late (where the drivers cannot be seen): the timers ran late, which an undriven
/// runtime and one whose other workers were all busy look alike in.
const HEARTBEAT_ADVICE: &str = "the runtime's timers fired late while it ran (pinwatch's \
    heartbeat): it held the worker driving them while the others slept, or the others were all \
    busy; run it in tokio::task::spawn_blocking";

/// The runtime-level advice for a pin during which every worker was pinned.
const ALL_PINNED_ADVICE: &str = "every worker was pinned at once, so nothing drove the \
    runtime's timers and I/O: move the blocking work to tokio::task::spawn_blocking (more \
    workers only move the limit)";

/// What the watchdog sends on: the event as far as the watchdog knows it, plus the raw probes
/// that [`crate::analyze`] turns into frames, a reason and a profile.
pub(crate) struct RawReport {
    pub event: PinnedEvent,
    pub probes: Vec<Probe>,
    /// How many probes the pin has had (`probes` keeps the first and the latest of them): two
    /// reports of a pin with the same count carry the same probes.
    pub probes_taken: u64,
    /// When the poll started ([`Pinned::start`]): the probes' readings are timed against it.
    pub start: Instant,
}

/// Starts the watchdog thread for `shared`'s slots on the runtime of `handle`: it sends its
/// reports into `tx` and stops, after a last scan, once [`Parking::stop`] is called on the slot
/// table's parking.
///
/// Returns once the thread has set itself up and is about to wait for its first scan, so that
/// the runtime's first tasks are watched from their start. Its setup allocates (its first
/// allocation makes the thread's malloc arena): on a 2-core machine running 8 CPU hogs that
/// took 120 to 520 ms for one of the tour's cases in most runs, during which a 600 ms spin
/// was seen late (one sample, the wrong advice) or not at all.
///
/// [`Parking::stop`]: crate::poll::park::Parking::stop
pub(crate) fn spawn(
    shared: Arc<Shared>,
    handle: Handle,
    tx: crate::handoff::Sender<Box<RawReport>>,
) -> Result<std::thread::JoinHandle<()>, crate::Error> {
    let (ready, is_ready) = mpsc::sync_channel(1);
    let thread = std::thread::Builder::new()
        .name("pinwatch-watchdog".into())
        .spawn(move || run(shared, handle, tx, ready))
        .map_err(|source| crate::Error::Thread {
            what: "watchdog",
            source,
        })?;
    match is_ready.recv() {
        // It could not set itself up as asked, and has ended.
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        // `Err`: the thread ended before it was ready (a panic); the join says so.
        Ok(Ok(())) | Err(_) => Ok(thread),
    }
}

/// Sets the nice value of the calling thread, `tid`: on Linux, `setpriority` of a thread id
/// sets that thread's alone.
fn set_own_nice(tid: i32, nice: i8) -> Result<(), crate::Error> {
    // SAFETY: `setpriority` takes three integers and touches no memory of ours.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice.into()) };
    if r == 0 {
        return Ok(());
    }
    Err(crate::Error::WatchdogNice {
        nice,
        rlimit: 20 - i16::from(nice),
        source: std::io::Error::last_os_error(),
    })
}

fn run(
    shared: Arc<Shared>,
    handle: Handle,
    tx: crate::handoff::Sender<Box<RawReport>>,
    ready: mpsc::SyncSender<Result<(), crate::Error>>,
) {
    if let Some(d) = shared.config.late_start {
        std::thread::sleep(d);
    }
    let own_tid = crate::poll::slot::current_tid();
    if let Some(nice) = shared.config.watchdog_nice {
        if let Err(e) = set_own_nice(own_tid, nice) {
            let _ = ready.send(Err(e));
            return;
        }
    }
    // Its own timer slack, not the one it inherits (systemd's `TimerSlackNSec=` sets a
    // service's): its waits end when due. With 40 ms inherited, a poll that began as a sampled
    // poll ended (its end ends the wait for the sample) fell between looks 40 ms apart: 24–27
    // of 40 polls of 45 ms after one blocked 60 ms in `vfork` were reported, 40 of 40 now
    // (helper-118's test); and a sample nobody answered held the watchdog 90 ms, not 50.
    let slack = shared.config.watchdog_timer_slack.unwrap_or(TIMER_SLACK);
    // SAFETY: `PR_SET_TIMERSLACK` takes one integer argument and sets the calling thread's
    // timer slack; it touches no memory of ours. Its failure leaves the slack as it was.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, slack.as_nanos() as libc::c_ulong) };
    let mut settings = shared.tunables.reader();
    let n = shared.table.slots().len();
    let mut tracked: Vec<Option<Tracked>> = (0..n).map(|_| None).collect();
    // Just before the last look at each slot. The hooks may run before this thread does: the
    // first lower bound is the moment the slots were made, before the runtime existed.
    let mut last_look: Vec<Instant> = vec![shared.table.base; n];
    // Just before the last scan's load of the slots in use: the lower bound of a poll in a slot
    // claimed since.
    let mut beyond = shared.table.base;
    let mut scan = Scan {
        shared: &shared,
        handle: &handle,
        tx: &tx,
        settings: settings.refresh(&shared.tunables),
        stalled: None,
        multi_thread: handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread,
        lifo_slot: handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
            && handle.metrics().num_workers() >= 2,
        view: DriverView::default(),
        drivers: DriverWatch::default(),
        heartbeat_woke: None,
        found_ended: Vec::new(),
        cur: 0,
        held: Vec::new(),
        sent: Default::default(),
        wait_next: vec![0; n],
        used: 0,
        clock: None,
        counter: shared.config.stamps && stamps::counter_trusted(),
        stamps: Vec::new(),
        readers: (0..n).map(|_| SchedStatReader::default()).collect(),
        read: vec![None; n],
        frozen: Frozen::default(),
        switches_tell: !switches_hidden(),
        mark: Instant::now(),
        stop_found: false,
        own: SchedStatReader::default(),
        own_tid,
    };
    // When the next scan is due while every poll that may run long is stamped (`None`: one
    // scan interval after the last).
    let mut due: Option<Instant> = None;
    let mut scans = 0u64;
    let mut last_scan = Instant::now();
    let parking = &shared.table.parking;
    parking.register_watchdog();
    // The runtime's cores: its workers, or the one of a current-thread runtime.
    let cores = handle.metrics().num_workers();
    let mut idle = Idle::default();
    let mut sleep = false;
    // A current-thread runtime needs neither: the looks always see who drives its timers and
    // I/O (its one thread, between polls), and there is no other worker to wake.
    if scan.multi_thread {
        shared.heartbeat.start(&handle, shared.config.rescue);
    }
    // The waker thread ends with the watchdog, however it ends.
    let _waker = StopWaker(&shared.heartbeat);
    // The counter's rate is known before the first task runs, so that its first polls are
    // stamped: found by the scans, it took 50 ms, and until then polls were bounded by the
    // looks (helper-106: the first 19 ms sleep of a runtime was reported as 21-23 ms). The
    // start's wait for the workers to park counts toward it.
    scan.read_clock();
    let calibrating = Instant::now();
    scan.learn_at_start(FIRST_PARK_WITHIN);
    if scan.clock.is_some() {
        std::thread::sleep(stamps::CALIBRATION.saturating_sub(calibrating.elapsed()));
        scan.read_clock();
    }
    scan.seen_changed();
    scan.mark = Instant::now();
    // Set up: the runtime may run tasks now.
    let _ = ready.send(Ok(()));
    loop {
        let stopping = if std::mem::take(&mut sleep) {
            // Idle for a whole scan interval: sleep until a worker unparks. Say so first, then
            // check again that nothing can poll (see `poll::park`).
            let from = Instant::now();
            let prepared = parking.prepare_sleep();
            let unparked = !idle.still(parking.unparks());
            if prepared {
                if !unparked && quiet(&shared.table, cores) {
                    shared.stats.sleeps.fetch_add(1, Ordering::Relaxed);
                    let woken = parking.sleep(from);
                    // No poll ran while it slept: every poll seen next began after the wake.
                    for look in last_look.iter_mut() {
                        *look = (*look).max(woken);
                    }
                    beyond = beyond.max(woken);
                } else {
                    parking.cancel_sleep();
                }
            }
            // (Not looked into: the waker's stamp is no deadline, and a stop that lands in
            // the microseconds before the wake is left to the looks.)
            scan.frozen.wake();
            scan.mark = Instant::now();
            parking.stopping()
        } else {
            // One scan interval from the start of the last scan, not from its end: scans keep
            // to the interval on average (a poll's start and the threshold are bounded by the
            // looks, and a period longer than the interval would lose the difference).
            let due = due.unwrap_or_else(|| {
                stamps::later(last_scan, scan.settings.effective_scan_interval())
            });
            // In waits of `wait_at_most` at most, to see a stop near its start: a wait that
            // ends before the scan is due only checks whether the process stood still.
            let most = wait_at_most(scan.settings.threshold);
            loop {
                // The step from the last look (or wake) to here, as the step between two
                // looks: a stop that landed in what the scan did after its looks was lost (the
                // first 2 s stop of the stood-still test, 1 run in 54 beside `stress-ng`). One
                // found there or during the scan is scanned for at once, as one a wake finds,
                // with no wake: a poll first seen by that scan may have run across it
                // (`Frozen::at_wake`).
                scan.clock_at(Instant::now(), scan.mark, false);
                if scan.stop_found {
                    break parking.stopping();
                }
                // From here the watchdog only waits: late past both, it stood still (if
                // switched out for it: see `Frozen`).
                scan.frozen.waits(
                    scan.switches_tell
                        .then(probe::own_voluntary_switches)
                        .flatten(),
                );
                scan.mark = Instant::now();
                let until = due.min(stamps::later(scan.mark, most));
                // Stopping: scan once more, to complete what ended.
                let stopping = parking.wait(until.saturating_duration_since(scan.mark));
                let now = Instant::now();
                let nudged = parking.take_nudge();
                // A scan may begin: a poll it sees first may have run across what this wake
                // finds (a wake that does not scan found nothing).
                scan.frozen.wake();
                scan.clock_at(now, until, true);
                // Due, stopping, asked for, woken before its time (a spurious wake: a look
                // more), or the process stood still: the sooner the polls that may have run
                // across the stop are seen, the less of their age it can take (helper-114: a
                // stop found by a cut wait, then a scan that took it for older than its polls
                // first seen, pinned a 400 ms poll for a 2 s stop 12 times in 12).
                if nudged || stopping || until == due || now < until || scan.stop_found {
                    break stopping;
                }
            }
        };
        // Every stop found so far is before this scan.
        scan.stop_found = false;
        scans += 1;
        shared.stats.scans.fetch_add(1, Ordering::Relaxed);
        // One set of settings for the whole scan.
        scan.settings = settings.refresh(&shared.tunables);
        // The wait that makes a task a victim, for the after-poll hooks (`schedule-latency`).
        let floor = if scan.settings.paused {
            u64::MAX
        } else {
            scan.settings.threshold.as_nanos().min(u128::from(u64::MAX)) as u64
        };
        if shared.table.wait_floor.0.load(Ordering::Relaxed) != floor {
            shared.table.wait_floor.0.store(floor, Ordering::Relaxed);
        }
        if let Some(late) = shared.config.late_scans {
            if scans.is_multiple_of(2) {
                // A watchdog kept away, not a process that stood still.
                scan.aside(|_| std::thread::sleep(late));
            }
        }
        // Before every load of this scan: the look time of the slots nobody holds (most of the
        // table), so that only the few in use read the clock next to their own loads.
        let scan_start = Instant::now();
        scan.read_clock();
        // The slots ever claimed, loaded after `scan_start`: the rest never held a poll, and
        // are not looked at (most of the table, its lines cold by now).
        let used = shared.table.used();
        if used > scan.used {
            // Claimed since the last scan's load, which found them free: no poll ran in them
            // before that scan's start.
            for look in &mut last_look[scan.used..used] {
                *look = beyond;
            }
            scan.used = used;
        }
        beyond = scan_start;
        let tracked = &mut tracked[..used];
        let mut blamed = false;
        // The heartbeat is the evidence only where the drivers cannot be seen (it may beat on a
        // while after they are: see `arm` below).
        scan.stalled = shared
            .heartbeat
            .late(scan_start)
            .filter(|_| !scan.sees())
            .and_then(|(_, due)| Stall::past_bound(due, scan_start, scan.settings.threshold));
        for (i, ((slot, tracked), look)) in shared
            .table
            .slots()
            .iter()
            .zip(tracked.iter_mut())
            .zip(last_look.iter_mut())
            .enumerate()
        {
            if tracked.is_none() && !slot.is_active() {
                // Free and not followed: nothing to time. A thread that takes the slot after
                // this load starts its polls after `scan_start`.
                *look = scan_start;
                continue;
            }
            scan.cur = i;
            scan.slot(slot, tracked, look);
            let pinned = tracked.as_ref().and_then(|t| t.pinned.as_ref());
            match pinned {
                Some(p) => shared.set_live(i, p.event.id, p.start, p.event.worker.index.is_some()),
                None => shared.set_live(i, 0, scan_start, false),
            }
            // A pin holds a worker while the heartbeat is overdue: the runtime stands still
            // (which pin to blame for it is each event's question).
            // (A multi-thread runtime's `block_on` body holds no worker: not it.)
            blamed |=
                pinned.is_some_and(|p| p.event.worker.index.is_some()) && scan.stalled.is_some();
        }
        // Stalled: where the drivers are seen, a pin holds a worker while nobody drives them;
        // elsewhere, a pin that was running when the heartbeat was due runs still, and the
        // runtime's timers have not fired since.
        // After the looks: one time for what follows them.
        let looked = Instant::now();
        let seen = scan.look_at_drivers(tracked, looked);
        scan.collect_waits(tracked);
        scan.send_first_reports(tracked);
        scan.release_held(looked, stopping);
        if let Some(stall) = scan.stalled.filter(|_| blamed) {
            scan.heartbeat_rescue(tracked, stall, looked);
        } else if scan.stalled.is_none() {
            // On time again, or not beating: a rescue's hand-over is no longer to come.
            scan.heartbeat_woke = None;
        }
        if let Some(stalled) = seen {
            // The looks count their own stall time.
            blamed = stalled;
        } else if let Some(stall) = scan.stalled.filter(|_| blamed) {
            // From when the late beat was due (the timers have not fired since), what no scan
            // or look counted yet.
            scan.count_stall(scan_start, stall.due);
        }
        shared.stalled_now.store(blamed, Ordering::Relaxed);
        last_scan = scan_start;
        if stopping {
            // Whatever is still flagged never returned: its last report stands.
            return;
        }
        let pins = tracked
            .iter()
            .flatten()
            .filter(|t| t.pinned.is_some())
            .count();
        // The heartbeat is the evidence only where the drivers cannot be seen; once they are,
        // it stops (the pins it beat for may run on).
        shared.heartbeat.arm(if scan.sees() { 0 } else { pins });
        // Idle: no poll runs, none is followed, and every core is parked.
        let running = tracked.iter().flatten().any(|t| t.seq & 1 == 1);
        sleep = idle.scanned(
            pins == 0 && !running && scan.held.is_empty() && parking.all_parked(cores),
            parking.unparks(),
        );
        // Every worker parked is when one of them waits on the I/O driver, if there is one.
        scan.learn_drivers(looked, sleep);
        due = scan.stamped_due(tracked, scan_start);
    }
}

/// Reads the record of the tasks `p`'s thread polled after it (in `slots`), keeping the longest
/// read: the thread reuses the record after later flagged polls.
fn read_after(slots: &[Slot], p: &mut Pinned) {
    let mut after = [Polled {
        task_id: 0,
        spawned_at: 0,
    }; AFTER_PIN_MAX];
    let n = slots
        .get(p.slot)
        .map_or(0, |s| s.after_pin.read(p.seq, &mut after));
    if n > p.after.1 {
        p.after = (after, n);
    }
}

/// The reading that bounds what a poll first seen at a look did before it began: its thread's
/// accounting as the last look read it (`read_before`, with the thread it read), if that was
/// thread `tid`; none when the last look `followed` a pin on the slot. A pin's looks may be a
/// follow's interval apart ([`Scan::follow_due`]), and what its thread did from that reading to
/// the pin's end (blocked, which the accounting does not show) would be taken off the poll
/// after it: a CPU-bound poll right after a blocking pin was counted up to 6 ms short, and
/// missed at 24 ms. Without a reading that poll is looked at as one whose thread was not read
/// (`stamps::Slot::Following`).
fn before_of(read_before: Option<(i32, Before)>, tid: i32, followed: bool) -> Option<Before> {
    read_before
        .filter(|&(read, _)| read == tid && !followed)
        .map(|(_, b)| b)
}

/// Turns `slot`'s stamping on under a new generation: the counter read just before (see
/// `PollCell::set_stamping`), never 0, which is "off".
fn stamp_on(slot: &Slot, stamping: &mut Stamping) {
    let generation = crate::poll::ticks().max(1);
    stamping.generation = Some(generation);
    slot.poll.set_stamping(generation);
}

/// Stops the heartbeat and its waker thread when dropped: when the watchdog ends.
struct StopWaker<'a>(&'a super::heartbeat::Heartbeat);

impl Drop for StopWaker<'_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Whether a cgroup v1 freezer may freeze this process, so that its freeze would not switch the
/// watchdog out ([`v1_freezable`](super::judge::v1_freezable)); read once, at the start.
fn switches_hidden() -> bool {
    let Ok(cgroup) = std::fs::read_to_string("/proc/self/cgroup") else {
        return true;
    };
    super::judge::v1_freezable(&cgroup, || {
        use std::os::unix::fs::MetadataExt;
        // The initial cgroup namespace's inode: there, `/` is the real root.
        const INITIAL: u64 = 0xEFFF_FFFB;
        if std::fs::metadata("/proc/self/ns/cgroup").is_ok_and(|m| m.ino() == INITIAL) {
            return Some(false);
        }
        // A namespace of its own: its root, where this mount namespace mounts it, tells.
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let point = super::judge::freezer_mount(&mounts)?;
        Some(std::path::Path::new(point).join("freezer.state").exists())
    })
}

/// Nothing can poll now: every core is parked and no slot has a poll running.
fn quiet(table: &SlotTable, cores: usize) -> bool {
    table.parking.all_parked(cores) && table.used_slots().iter().all(|s| s.poll.seq() & 1 == 0)
}

/// One scan: what it reads from and sends to, and what it found at its start.
struct Scan<'a> {
    shared: &'a Shared,
    handle: &'a Handle,
    tx: &'a crate::handoff::Sender<Box<RawReport>>,
    /// The settings of this scan.
    settings: Settings,
    /// How late the heartbeat was at this scan's start, when it is past the stall bound.
    stalled: Option<Stall>,
    /// A multi-thread runtime: who drives its drivers may be seen from its workers' states.
    multi_thread: bool,
    /// A multi-thread runtime of two workers or more: a task that waits a whole pin while
    /// another worker could have stolen it, then runs first on the pinned worker, sat in its
    /// LIFO slot (one worker has nobody to steal; a current-thread runtime has no such slot).
    lifo_slot: bool,
    view: DriverView,
    drivers: DriverWatch,
    /// When the late beat was due for which pinwatch last woke a worker, where only the
    /// heartbeat tells a stall (`PINWATCH_RESCUE`): one wake-up per late beat.
    heartbeat_woke: Option<Instant>,
    /// Pins of this scan found already ended: sent with the scan's first reports, in the
    /// order of their ids (pins are numbered as they are found).
    found_ended: Vec<Pinned>,
    /// The index of the slot being looked at.
    cur: usize,
    /// Completed pins whose report waits, until the time beside each, for the tasks that
    /// waited behind them to be polled ([`VICTIM_WINDOW`](crate::event::VICTIM_WINDOW)).
    held: Vec<(Pinned, Instant)>,
    /// Pins whose reports have gone out, for a while: a wait that only they overlapped (its
    /// task polled after the report was sent) is neither theirs any more nor a busy runtime's.
    #[cfg_attr(not(feature = "schedule-latency"), allow(dead_code))]
    sent: std::collections::VecDeque<super::victims::PinSpan>,
    /// Per slot, the next record of its wait ring to read (`schedule-latency`).
    #[cfg_attr(not(feature = "schedule-latency"), allow(dead_code))]
    wait_next: Vec<u64>,
    /// The slots in use as this scan loaded them ([`SlotTable::used`]): the others are free
    /// and never followed.
    used: usize,
    /// The time-stamp counter's rate, where polls' starts can be stamped (`None`: not here).
    clock: Option<TickClock>,
    /// Whether polls' starts can be stamped here (the clock is made at its first reading).
    counter: bool,
    /// Per slot, its stamping; empty until the clock is calibrated.
    stamps: Vec<Stamping>,
    /// Per slot, its thread's `schedstat` (and, once it runs a long poll, `stat`), kept open for
    /// the readings below.
    readers: Vec<SchedStatReader>,
    /// Per slot, its thread's accounting as the last look read it, before loading the counter
    /// (while stamping is on): a poll that look did not see began after it ([`Before`]).
    read: Vec<Option<(i32, Before)>>,
    /// The time the whole process stood still, from the watchdog's late wakes.
    frozen: Frozen,
    /// The watchdog's voluntary context switches tell a stop from its CPU taken away
    /// ([`Frozen`]): not where a cgroup v1 freezer may freeze the process.
    switches_tell: bool,
    /// The watchdog's last read of the clock, or the end of its last wait for a thread.
    mark: Instant,
    /// A stop of the process was found since the last scan began: the next scan comes at once,
    /// with no wake (see the wait loop in [`run`]).
    stop_found: bool,
    /// The watchdog's own `schedstat`, read for [`Frozen`].
    own: SchedStatReader,
    own_tid: i32,
}

/// How long a pin whose report has gone out is remembered, so that a wait it caused is not
/// taken for a busy runtime's.
const SENT_KEPT: Duration = Duration::from_secs(10);

/// The watchdog's timer slack: the kernel's default, however the process was started.
const TIMER_SLACK: Duration = Duration::from_micros(50);

/// Whether tokio measures the tasks' waits (the `schedule-latency` feature).
const MEASURED: bool = cfg!(feature = "schedule-latency");

impl<'a> Scan<'a> {
    /// A look at `slot`, whose poll the watchdog remembers in `tracked`; `last_look` is the
    /// time just before the previous look, and becomes this one's.
    fn slot(&mut self, slot: &Slot, tracked: &mut Option<Tracked>, last_look: &mut Instant) {
        // Before the counter's load: a poll that load does not show began after the reading.
        let reading = self.read_thread(slot);
        let before = Instant::now();
        let active = slot.is_active();
        let seq = slot.poll.seq();
        let now = Instant::now();
        // Stood still since the last check (in the last look, or after it)? Not this poll's
        // time. The rest of the look is checked by the next: a stop that landed there, the
        // step timed from the look's end, was lost (the stood-still test's first 2 s stop, once
        // in CI; every time with slow looks).
        self.clock_at(now, self.mark, false);
        if let Some(d) = self.shared.config.slow_looks.filter(|_| active) {
            let from = Instant::now();
            while from.elapsed() < d {
                std::hint::spin_loop();
            }
        }
        // (A poll that ended since the last look is judged by its end: see `ended_unseen`.)
        let interval = self.settings.effective_scan_interval();
        if let Some(t) = tracked.as_mut().filter(|t| active && t.seq == seq) {
            t.leave_out_frozen(self.frozen.total, now, interval);
        }
        // The last look's reading: the one before a poll new at this look.
        let read_before = std::mem::replace(&mut self.read[self.cur], reading);
        let prev_look = std::mem::replace(last_look, before);
        let start = if active {
            self.stamped_start(slot, seq, now, prev_look)
        } else {
            None
        };
        // The last look followed a pin here: its reading may be a follow's interval old.
        let followed = tracked.as_ref().is_some_and(|t| t.pinned.is_some());
        if let Some(t) = tracked.as_mut() {
            if let Some(p) = t.pinned.take() {
                t.pinned = self.follow_pinned(slot, p, seq, now);
                if t.pinned.is_none() && t.seq == seq && seq & 1 == 1 {
                    // Retracted while the same poll runs on: it is in `block_in_place`.
                    t.handed_off = true;
                }
            }
        }
        if !active {
            self.restamp(slot);
            if let Some(mut t) = tracked.take_if(|t| t.pinned.is_none()) {
                // The thread went away: its last poll may have ended unseen past the threshold.
                self.ended_unseen(slot, &mut t, now);
            }
            // The thread went away: its files are closed until another takes the slot.
            self.readers[self.cur] = SchedStatReader::default();
            return;
        }
        let first_look = tracked.as_ref().is_none_or(|t| t.seq != seq);
        match tracked.as_mut() {
            None => *tracked = Some(self.fresh(slot, seq, now, prev_look, start)),
            Some(t) if seq != t.seq => {
                // Counters never repeat, not even across owners of the slot: another poll. The
                // one before may have ended past the threshold while the watchdog was kept away.
                self.ended_unseen(slot, t, now);
                let pinned = t.pinned.take();
                // It began after the poll before it here ended, when that end is recorded (a
                // pin followed here, or a poll armed and found ended; a pin is its tracked
                // poll's): the thread runs one poll at a time, and two pins in a row do not
                // overlap.
                let ended = slot.poll.ended(t.seq).map(|nanos| self.shared.at(nanos));
                let after = ended.map_or(prev_look, |e| e.max(prev_look));
                *t = self.fresh(slot, seq, now, after, start);
                t.pinned = pinned;
            }
            Some(_) => {}
        }
        let Some(t) = tracked.as_mut() else { return };
        if first_look && t.exact {
            let tid = slot.tid.load(Ordering::Relaxed);
            t.before = before_of(read_before, tid, followed);
            self.early_after_a_block(slot, t, now);
        }
        if first_look && !t.exact {
            // The first look at this poll: its start is bounded by this look and the last.
            return;
        }
        if seq & 1 == 0 || t.pinned.is_some() || self.settings.paused {
            return;
        }
        if let Some(panicked) = slot.unwinding.since_running(seq) {
            // It panicked: the panic hook's time (printing, symbolizing a backtrace) is the
            // panic machinery's, not the code under test's. Not timed while the hook runs.
            if panicked.resumed.is_none() {
                return;
            }
            // The hook has returned (the poll unwinds, or caught the panic and goes on): leave
            // the hooks' time out, and the thread's accounting in them, and time the rest.
            t.leave_out(panicked.hooks, now);
        }
        if t.handed_off {
            // Still in `block_in_place`? Once the thread has a worker again, the rest of the
            // poll holds that worker: time it from here.
            let thread = slot.thread.load(Ordering::Relaxed);
            if workers::owner(self.handle, thread) != Owner::HandedOff {
                let mut fresh = self.fresh(slot, seq, now, prev_look, None);
                fresh.pinned = t.pinned.take();
                *t = fresh;
            }
            return;
        }
        let threshold = self.settings.threshold;
        let first = if t.looked_at_late() {
            stamps::late_look(threshold, interval)
        } else {
            stamps::first_look(threshold)
        };
        if t.exact && t.baseline.is_none() && t.age(now, interval) < first {
            // Stamped: its age is known, and too young for a second look yet.
            return;
        }
        let tid = slot.tid.load(Ordering::Relaxed);
        if t.baseline.is_none() {
            // The second look at this poll (polls this long are rare: the read is too); for a
            // stamped poll, the first (its age is known), from the reading before it if any.
            t.baseline = match t.before {
                Some(before) => {
                    let before = self.past_parks(slot, before, t.after);
                    let at = Instant::now();
                    self.schedstat(self.cur, tid).map(|stat| {
                        let state = self.state(self.cur, tid);
                        t.baseline_since(before, at, stat, state, threshold, interval)
                    })
                }
                None => self
                    .schedstat(self.cur, tid)
                    .map(|stat| t.baseline(Instant::now(), stat, threshold, interval)),
            };
            if t.exact {
                self.shared
                    .stats
                    .stamped_polls
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        if t.armed.is_none() && !t.tried_arm {
            t.tried_arm = true;
            self.arm(slot, t, seq);
        }
        let age = t.age(before, interval);
        if Tracked::worth_counting(age, threshold) {
            let (at, stat) = (Instant::now(), self.schedstat(self.cur, tid));
            if t.near.is_none() {
                // What the first probe is read against, should the poll be pinned: once a
                // poll, at half the threshold (polls that long are rare; the read is too).
                // Timed after the read, as a probe's reading is: a watchdog preempted between
                // the two must not lend the worker its delay.
                t.near = stat.map(|stat| probe::Reading {
                    at: Instant::now(),
                    stat,
                    switches: probe::voluntary_switches(tid),
                });
            }
            // A worker the kernel preempted (an overloaded machine, a CPU quota) is late, but
            // not pinned by its task: only time on a CPU or blocked counts.
            let (pinned_for, waited) = match t.baseline {
                Some(b) => b.pinned_time(at, stat, self.state(self.cur, tid)),
                None => (age, Duration::ZERO),
            };
            if t.count(age, pinned_for, threshold) {
                self.flag(slot, t, seq, waited);
            }
        }
    }

    /// The first look at stamped poll `t`, at `now`: where its thread may have blocked (outside
    /// tokio's park) for more than a tick between the reading before the poll and the poll's
    /// start ([`Before::blocked_until`]) — a poll before this one that blocked under the
    /// threshold — the poll is looked at closely at a quarter of the threshold, as one whose
    /// thread was not read, instead of 16 ms: the accounting of a thread that runs again cannot
    /// tell that block from time before the poll, so the reading credits a CPU-bound poll after
    /// it no more than a look without it would (a quarter of the threshold and an interval),
    /// and a close look at 16 ms left it short (a 24 ms one after a 8–15 ms block: reported 1
    /// time in 40). The reading is kept: it never credits less than a look without it.
    fn early_after_a_block(&self, slot: &Slot, t: &mut Tracked, now: Instant) {
        let interval = self.settings.effective_scan_interval();
        let (Some(before), Some((tid, reading))) = (t.before, self.read[self.cur]) else {
            return;
        };
        t.early = tid == slot.tid.load(Ordering::Relaxed)
            && t.age(now, interval) < stamps::late_look(self.settings.threshold, interval)
            && self
                .past_parks(slot, before, t.after)
                .blocked_until(&reading, t.after);
    }

    /// The second look at poll `seq`, if its thread is blocked ([`worth_arming`]): asks it to
    /// record when it ends, as for a poll found pinned, without reporting anything, so that a
    /// watchdog kept away until after the poll has ended still judges it by its end
    /// ([`ended_unseen`](Self::ended_unseen)). Costs what flagging costs (a barrier here, a
    /// clock read when the poll returns), once per poll that lives to a second look; the
    /// per-poll path is unchanged.
    fn arm(&mut self, slot: &Slot, t: &mut Tracked, seq: u64) {
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
        let tid = slot.tid.load(Ordering::Relaxed);
        if !worth_arming(self.state(self.cur, tid)) {
            return;
        }
        let mut name: NameBuf = [0; NAME_MAX];
        let name_len = slot.name_into(&mut name);
        if slot.poll.flag(seq) && slot.poll.seq() == seq {
            t.armed = Some(Armed {
                snap,
                tid,
                thread,
                index,
                name,
                name_len,
            });
        }
    }

    /// Poll `t.seq`, armed at its second look and not reported, has ended (the slot's counter
    /// moved, or its thread went away): if it pinned ([`Tracked::ended_pinned`]), reports it,
    /// completed, in one event without a stack.
    fn ended_unseen(&mut self, slot: &Slot, t: &mut Tracked, now: Instant) {
        let Some(armed) = t.armed else { return };
        if t.pinned.is_some() || t.handed_off || self.settings.paused {
            return;
        }
        let Some(nanos) = slot.poll.ended(t.seq) else {
            return;
        };
        let end = self.shared.at(nanos);
        // Of the process's stops found since the last look, what lay before the poll's end.
        t.leave_out_frozen_before(
            self.frozen.total,
            end,
            now,
            self.settings.effective_scan_interval(),
        );
        // The poll's panic hooks since the last look (it caught the panics, or ended unwinding
        // from one) are the panic machinery's time, not a pin: left out, as a look would.
        match slot.unwinding.since(t.seq) {
            // Its panic hook never returned: the poll ended in the panic machinery.
            Some(Panicked { resumed: None, .. }) => return,
            Some(p) => t.leave_out(p.hooks, end),
            None => {}
        }
        // Waited since the baseline until now, not until the end: never more pinned time than
        // there was.
        // A thread that has ended since (a runtime dropped right after its last poll) left its
        // accounting as it exited; without either, a poll that waited for a CPU on a busy
        // machine would be pinned by its wall time alone (helper-108: a 15 ms poll sharing its
        // CPU, in 16 of 20 rounds): not judged.
        let stat = self.schedstat_or_exited(slot, self.cur, armed.tid, t.seq);
        if t.baseline.is_some() && stat.is_none() {
            return;
        }
        let waited = t.baseline.map_or(Duration::ZERO, |b| b.waited(stat));
        let Some(duration) = t.ended_pinned(
            end,
            waited,
            self.settings.threshold,
            self.settings.effective_scan_interval(),
        ) else {
            return;
        };
        // (On a current-thread runtime there is no `block_in_place`, and another thread may have
        // taken the core since the poll ended: not asked.)
        if let Some(i) = armed.index.filter(|_| self.multi_thread) {
            if workers::owner(self.handle, armed.thread) != Owner::Worker(i) {
                // tokio no longer has the thread running the worker it ran at the second look:
                // it handed it over since (`block_in_place`), so what it did after that look
                // may not have held a worker. Not judged.
                return;
            }
        }
        self.shared
            .stats
            .pinned_polls
            .fetch_add(1, Ordering::Relaxed);
        let worker = Worker {
            index: armed.index,
            tid: armed.tid,
            name: String::from_utf8_lossy(&armed.name[..armed.name_len]).into_owned(),
        };
        let mut event = self.new_event(armed.snap, worker, Default::default(), t, waited, end);
        event.state = State::Completed;
        // Its panic hooks left out: it starts that much later, and ends where it ended.
        let waited = event.cpu_wait;
        event.timed(duration, waited);
        let mut pinned = Pinned::new(t, armed.tid, armed.thread, event, now);
        pinned.slot = self.cur;
        pinned.end = Some(end);
        if !self.multi_thread && pinned.event.worker.index.is_some() {
            // A stall no look saw while it ran.
            self.current_thread_stall(&mut pinned);
        }
        self.found_ended.push(pinned);
    }

    /// A poll just crossed the threshold: decide whether it pins a worker, and report it.
    fn flag(&mut self, slot: &Slot, t: &mut Tracked, seq: u64, waited: Duration) {
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
            // blocking it stops the body (on a current-thread runtime it is worker 0 on the
            // thread holding the core, and holds nothing on another one waiting for it).
            Owner::HandedOff if body => None,
            Owner::HandedOff => {
                // The thread gave its worker to another thread in `block_in_place`: a blocking
                // section the runtime planned for, not a pinned worker.
                t.handed_off = true;
                self.shared
                    .stats
                    .block_in_place
                    .fetch_add(1, Ordering::Relaxed);
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
        self.shared
            .stats
            .pinned_polls
            .fetch_add(1, Ordering::Relaxed);
        let worker = Worker {
            index,
            tid,
            name: String::from_utf8_lossy(&name[..name_len]).into_owned(),
        };
        let event = self.new_event(snap, worker, spans, t, waited, Instant::now());
        let mut pinned = Pinned::new(t, tid, thread, event, Instant::now());
        pinned.slot = self.cur;
        self.probe(slot, &mut pinned);
        // Sent at the end of the scan, with what its look at the drivers finds.
        t.pinned = Some(Box::new(pinned));
        // Reported: its end is followed from here, not judged again when it ends.
        t.armed = None;
    }

    /// A new event (`in_progress`, first report) for the poll `snap` of `t`, begun after
    /// `t.after` (`t.began`: that bound before panic hooks moved it), looked at `until` (its
    /// end, for one found ended).
    fn new_event(
        &self,
        snap: Snapshot,
        worker: Worker,
        spans: crate::spans::Captured,
        t: &Tracked,
        waited: Duration,
        until: Instant,
    ) -> PinnedEvent {
        let (after, began) = (t.after, t.began);
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
        // A pin that holds no worker (a multi-thread runtime's `block_on` body) stalls nothing.
        let late = index.and(self.stalled).and_then(|s| s.blames(began, until));
        let mut event = PinnedEvent {
            id: self.shared.next_id.fetch_add(1, Ordering::Relaxed),
            run_id: self.shared.run_id.clone(),
            pid: std::process::id(),
            state: State::InProgress,
            start: SystemTime::now()
                .checked_sub(elapsed)
                .unwrap_or(SystemTime::UNIX_EPOCH),
            duration: Duration::ZERO,
            threshold: self.settings.threshold,
            task_id: (!body).then_some(snap.task_id),
            block_on: body,
            current_thread: !self.multi_thread,
            spawned_at,
            worker,
            reason: None,
            other_reasons: Vec::new(),
            blocking_operation: None,
            advice: None,
            top_frame: None,
            app_frame: None,
            profile: Vec::new(),
            no_stack: None,
            stack: Vec::new(),
            held_locks: Vec::new(),
            lock_holder: None,
            samples: 0,
            report: 1,
            cpu_wait: Duration::ZERO,
            runtime_stalled: late.is_some(),
            heartbeat_late: late,
            drivers: None,
            runtime_advice: self.runtime_advice(late.is_some()),
            tasks_queued_behind: self.queued_behind(index),
            victims: None,
            spans: spans.spans,
            trace_id: spans.trace_id,
            span_id: spans.span_id,
        };
        event.timed(elapsed, waited);
        event
    }

    /// Where only the heartbeat tells a stall (a pin holds a worker while the beat due at `due`
    /// is late past the bound), the rescue (`PINWATCH_RESCUE`, a multi-thread runtime): wakes a
    /// parked worker once for that beat, as [`look_at_drivers`](Self::look_at_drivers) does for
    /// drivers it sees — unless every worker is pinned (there is none to wake). The pins it
    /// blames say so (`drivers`) from now on.
    fn heartbeat_rescue(&mut self, tracked: &mut [Option<Tracked>], stall: Stall, now: Instant) {
        let due = stall.due;
        if !self.shared.config.rescue || !self.multi_thread || self.heartbeat_woke == Some(due) {
            return;
        }
        let mut held: Vec<usize> = tracked
            .iter()
            .flatten()
            .filter_map(|t| t.pinned.as_ref()?.event.worker.index)
            .collect();
        held.sort_unstable();
        held.dedup();
        if held.len() >= self.handle.metrics().num_workers() {
            return;
        }
        if !self.shared.heartbeat.wake() {
            return;
        }
        self.heartbeat_woke = Some(due);
        self.shared.stats.rescues.fetch_add(1, Ordering::Relaxed);
        for p in tracked
            .iter_mut()
            .flatten()
            .filter_map(|t| t.pinned.as_mut())
        {
            if p.event.worker.index.is_some() && stall.blames(p.began, now).is_some() {
                p.undriven_by_heartbeat(now, due);
            }
        }
    }

    /// Pin `p`, ended, held a current-thread runtime's one thread, and with it the timers and
    /// I/O, for its whole time (its panic hooks left out), and no look counted any of it: a
    /// stall of that time, counted.
    fn current_thread_stall(&mut self, p: &mut Pinned) {
        let whole = p.event.duration;
        p.event.runtime_stalled = true;
        p.event.drivers = Some(crate::event::Drivers {
            undriven: whole,
            ..Default::default()
        });
        if let Some(end) = p.end {
            // What no count reached yet: the pin before it may have been counted into its time.
            self.count_stall(end, end.checked_sub(whole).unwrap_or(end));
        }
    }

    /// The runtime was stalled from `since` to `now` (`Stats::runtime_stalled_time`): counts
    /// what no count reached yet ([`DriverWatch::stall_time`]).
    fn count_stall(&mut self, now: Instant, since: Instant) {
        let d = self.drivers.stall_time(now, since);
        self.shared
            .stats
            .stalled_ns
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// The runtime-level advice for a pin of this runtime that its heartbeat says stalls it
    /// (`stalled`) or not.
    fn runtime_advice(&self, stalled: bool) -> Option<String> {
        if !self.multi_thread {
            Some(crate::event::CURRENT_THREAD_ADVICE.to_owned())
        } else {
            stalled.then(|| HEARTBEAT_ADVICE.to_owned())
        }
    }

    /// The memory of poll `seq`, first seen at `first_seen` and begun after `after`, as the
    /// slot's panic mark leaves it ([`Tracked::new`]).
    /// The watchdog's memory of poll `seq`, first seen at `first_seen`: begun after `after`,
    /// or at `start` where its start stamp says so.
    fn fresh(
        &self,
        slot: &Slot,
        seq: u64,
        first_seen: Instant,
        after: Instant,
        start: Option<Instant>,
    ) -> Tracked {
        let mark = slot.unwinding.since_running(seq);
        let resumed = mark.and_then(|p| p.resumed).map(|r| self.shared.at(r));
        let hooks = mark.map_or(Default::default(), |p| p.hooks);
        let mut t = match start {
            Some(start) => Tracked::stamped(seq, start, first_seen, hooks, resumed),
            None => Tracked::new(seq, first_seen, after, hooks, resumed),
        };
        // It may have run across a freeze found since the scan's wake.
        t.frozen_left_out = self.frozen.at_wake;
        t.leave_out_frozen(
            self.frozen.total,
            first_seen,
            self.settings.effective_scan_interval(),
        );
        t
    }

    /// Runs `wait`, where the watchdog may block for a reason of its own (a thread's stack
    /// sample, the report queue's lock, a second look's pause): the step to it is checked for a
    /// stop first, and the next step is timed from its end. A stop in it is not seen; a late end
    /// (timer slack, a lock held long) is not taken for one.
    fn aside<R>(&mut self, wait: impl FnOnce(&mut Self) -> R) -> R {
        self.clock_at(Instant::now(), self.mark, false);
        let r = wait(self);
        self.mark = Instant::now();
        r
    }

    /// The watchdog read its clock at `now`, after `mark` (from where it did nothing that may
    /// wait for a reason of its own: a wait, the step from its last check), meant to go on at
    /// `due` or then: later than that, the process may have stood still ([`Frozen`]): if it
    /// had, [`stop_found`](Self::stop_found) says so.
    fn clock_at(&mut self, now: Instant, due: Instant, timed: bool) {
        let late = now.saturating_duration_since(due.max(self.mark));
        self.mark = now;
        let tid = self.own_tid;
        let own = &mut self.own;
        let before = self.frozen.total;
        self.frozen.check(
            now,
            late,
            timed,
            || own.read(tid),
            probe::own_voluntary_switches,
        );
        if self.frozen.total != before {
            self.stop_found = true;
            self.shared
                .stats
                .stopped_ns
                .store(self.frozen.total, Ordering::Relaxed);
        }
    }

    /// Reads the time-stamp counter with the clock, as one instant ([`stamps::reading`]), after
    /// the scan's start and before its loads; once its rate is known,
    /// stamping starts on every slot (the busy ones stop it at their next look).
    fn read_clock(&mut self) {
        if !self.counter {
            return;
        }
        // No close reading this time (preempted in each try): the last one stands.
        let Some((at, ticks)) = stamps::reading(Instant::now, crate::poll::ticks) else {
            return;
        };
        let Some(clock) = self.clock.as_mut() else {
            self.clock = Some(TickClock::new(at, ticks));
            return;
        };
        clock.observe(at, ticks);
        if !clock.ready() || !self.stamps.is_empty() {
            return;
        }
        self.stamps = self
            .shared
            .table
            .slots()
            .iter()
            .map(|slot| {
                let mut s = Stamping::new(slot.poll.seq(), at);
                stamp_on(slot, &mut s);
                s
            })
            .collect();
    }

    /// The start of poll `seq` (just loaded from `slot`, the one looked at) by its stamp, if it
    /// has a valid one; then turns the slot's stamping on or off by its poll rate. The stamp is
    /// judged by the stamping the poll began under: a burst of short polls that turns stamping
    /// off at this look leaves the long poll after it its own valid stamp (without it, a poll
    /// that began during a sparse scan's wait would be bounded by a look up to a first look's
    /// age ago and credited only one and a half intervals of that gap).
    ///
    /// Placed no earlier than `after` (the previous look at the slot, which a poll new at this
    /// look began after — the bound an unstamped poll gets) and no later than `now`: a counter
    /// misread, a rate gone stale (a VM migrated) or a core's counter behind never make a poll
    /// older than the looks allow.
    fn stamped_start(
        &mut self,
        slot: &Slot,
        seq: u64,
        now: Instant,
        after: Instant,
    ) -> Option<Instant> {
        let clock = self.clock.as_ref()?;
        let stamping = self.stamps.get_mut(self.cur)?;
        let start = (seq & 1 == 1 && stamping.generation.is_some())
            .then(|| slot.poll.read_stamp())
            .flatten()
            .filter(|&(read, _, generation)| read == seq && stamping.valid(generation))
            .and_then(|(_, stamp, _)| clock.instant(stamp, now))
            .map(|start| start.max(after.min(now)));
        match stamping.look(seq, now) {
            Some(Switch::On) => stamp_on(slot, stamping),
            Some(Switch::Off) => {
                slot.poll.set_stamping(0);
                stamping.generation = None;
            }
            None => {}
        }
        start
    }

    /// The accounting of the thread of `slot` (the one looked at) now, with its id, where the
    /// slot is stamped (a stamped poll needs it from before it began): one `pread` of a file
    /// kept open. `None` elsewhere, and where it cannot be read.
    fn read_thread(&mut self, slot: &Slot) -> Option<(i32, Before)> {
        if self.stamps.get(self.cur)?.generation.is_none() || !slot.is_active() {
            return None;
        }
        let tid = slot.tid.load(Ordering::Relaxed);
        // The reading's time first: a park that ends before the sum's load is in it, and so
        // taken as before the reading (its time then counts against the poll, never for it).
        let at = Instant::now();
        let now = crate::poll::ticks();
        // The park going on, if any, on both sides of the load of the parks' sum: the same on
        // both, and that park is taken as not in the sum yet (see `mark_parked`).
        let since = slot.park_since.load(Ordering::Acquire);
        let sum = slot.parked_ticks.load(Ordering::Acquire);
        let stat = self.readers[self.cur].read(tid)?;
        let parked = match (since, slot.park_since.load(Ordering::Acquire)) {
            (0, 0) => Some(sum),
            // Parked since `since`: the part of that park before the reading is in the sum
            // once it ends.
            (a, b) if a == b => Some(sum.saturating_add(now.saturating_sub(since))),
            _ => None,
        };
        Some((tid, Before { at, stat, parked }))
    }

    /// `before` (read before the poll in `slot` that began at `start`) moved later by the time
    /// the thread has spent in tokio's park since, by the parks' sum now: as it stands for the
    /// poll. Unmoved where the sum could not be read whole.
    fn past_parks(&self, slot: &Slot, before: Before, start: Instant) -> Before {
        let parked = before
            .parked
            .zip(self.clock.as_ref())
            .and_then(|(base, clock)| {
                clock.duration(
                    slot.parked_ticks
                        .load(Ordering::Acquire)
                        .saturating_sub(base),
                )
            });
        match parked {
            Some(parked) => before.past_parks(parked, start),
            None => before,
        }
    }

    /// A slot nobody polls in: stamping goes back on for its next owner, whose poll rate is
    /// not known yet (it is stopped at a look if it polls often).
    fn restamp(&mut self, slot: &Slot) {
        let Some(stamping) = self.stamps.get_mut(self.cur) else {
            return;
        };
        if stamping.generation.is_none() {
            *stamping = Stamping::new(slot.poll.seq(), Instant::now());
            stamp_on(slot, stamping);
        }
    }

    /// When the next scan is due, if every slot in use that may hold a poll running toward the
    /// threshold is stamped and nothing else waits (a stall, a pin that needs every look): the
    /// first of its stamped polls' first looks, and, for a slot between polls, a first look's
    /// age from `scan_start` (its next poll starts after it); each running pin's next look
    /// ([`follow_due`](Self::follow_due)); and when the first completed pin held for its
    /// victims is to be sent. Never sooner than a scan interval. `None`: one scan interval
    /// after this scan, as without stamps.
    ///
    /// A held pin needs no look every interval: the record of the tasks its thread polled after
    /// it is read at every scan (`release_held`) and once more when it is sent, and the thread
    /// starts another record only when a later flagged poll ends. Only a look flags (or arms)
    /// a poll, once per slot a scan, so at most two start between two reads — the flagged poll
    /// running at the first, and one flagged at the second's look that ends before it — of the
    /// four records it keeps (`AfterPins`): a read always finds the held pin's, complete.
    /// With `schedule-latency` it does need them: the tasks that waited behind it are read from
    /// the workers' rings of sixteen, which a scan every interval keeps from overflowing while
    /// they are polled.
    fn stamped_due(&self, tracked: &[Option<Tracked>], scan_start: Instant) -> Option<Instant> {
        if self.stamps.is_empty()
            || self.settings.paused
            || self.stalled.is_some()
            || (MEASURED && !self.held.is_empty())
        {
            return None;
        }
        let (threshold, interval) = (
            self.settings.threshold,
            self.settings.effective_scan_interval(),
        );
        let slots = tracked
            .iter()
            .zip(&self.stamps)
            .zip(&self.read)
            .map(|((t, stamping), read)| match t {
                None => stamps::Slot::Free,
                Some(Tracked {
                    pinned: Some(p), ..
                }) if stamping.generation.is_some() => match self.follow_due(p, scan_start) {
                    Some(next) => stamps::Slot::Following { next },
                    None => stamps::Slot::Looked,
                },
                // Looked at closely (armed or not) as late as its reading allowed, younger
                // than the threshold.
                Some(t)
                    if t.seq & 1 == 1
                        && t.exact
                        && t.looked_at_late()
                        && t.baseline.is_some()
                        && t.pinned.is_none()
                        && !t.handed_off
                        && stamping.generation.is_some()
                        && t.age(scan_start, interval) < threshold =>
                {
                    stamps::Slot::Young {
                        at: stamps::young_due(
                            stamps::later(t.after, threshold),
                            scan_start,
                            interval,
                            TICK,
                        ),
                    }
                }
                Some(t) if t.pinned.is_some() || t.armed.is_some() || t.handed_off => {
                    stamps::Slot::Looked
                }
                Some(t) if t.seq & 1 == 0 && stamping.generation.is_some() => {
                    stamps::Slot::Between {
                        read: read.is_some(),
                    }
                }
                // Stamping off since (a burst before it): the poll after it is not stamped.
                Some(t)
                    if t.seq & 1 == 1
                        && t.exact
                        && t.baseline.is_none()
                        && stamping.generation.is_some() =>
                {
                    stamps::Slot::Stamped {
                        start: t.after,
                        read: t.looked_at_late(),
                    }
                }
                Some(_) => stamps::Slot::Looked,
            })
            .chain(
                self.held
                    .iter()
                    .map(|(_, until)| stamps::Slot::Held { until: *until }),
            );
        stamps::due(
            slots,
            scan_start,
            interval,
            stamps::first_look(threshold),
            stamps::late_look(threshold, interval),
        )
    }

    /// When pin `p`, followed while it runs, needs its next look, where not every interval: its
    /// next stack sample or report; the next look at the drivers ([`FOLLOW_EVERY`] after the
    /// last, or after the scan at `scan_start` where they are not looked at); and no later than
    /// the first look that can find the heartbeat late. A look more often than that would find
    /// nothing to do: the thread stamps the poll's end itself, and the completed report is held
    /// [`VICTIM_WINDOW`](crate::event::VICTIM_WINDOW) past that end anyway. (`stamps::due` also
    /// looks at the slot in time for the poll after it.) A bound too far to name (a huge
    /// setting) is left out.
    ///
    /// `None` (every interval) while the drivers stand still, so that the look that sees them
    /// driven again times the stall's end; while a worker woken for them has not taken them;
    /// and with `schedule-latency`, whose rings of measured waits the tasks polled on the other
    /// workers fill (see [`stamped_due`](Self::stamped_due)).
    fn follow_due(&self, p: &Pinned, scan_start: Instant) -> Option<Instant> {
        // A current-thread runtime's stall ends with its pin, whose end the thread stamps
        // itself (counted then: `follow_pinned`): no look needs to time it.
        let undriven = self.multi_thread
            && (matches!(self.drivers.last, Some((_, true))) || p.undriven_since.is_some());
        if MEASURED || undriven || self.drivers.woke_at.is_some() {
            return None;
        }
        // `DriverWatch::skip` looks at them again this long after its last look.
        let drivers_looked = self.drivers.last.map_or(scan_start, |(at, _)| at);
        let beat = self
            .shared
            .heartbeat
            .late(scan_start)
            .and_then(|(_, due)| Stall::judged_after(due, self.settings.threshold));
        let next = [
            drivers_looked.checked_add(FOLLOW_EVERY),
            p.last_sample.checked_add(self.settings.sample_interval),
            p.last_report.checked_add(self.settings.report_interval),
            beat,
        ]
        .into_iter()
        .flatten()
        .min();
        Some(next.unwrap_or(scan_start))
    }

    /// Thread `tid`'s accounting, from the file kept open for slot `i` (`tid` is its thread).
    fn schedstat(&mut self, i: usize, tid: i32) -> Option<probe::SchedStat> {
        match self.readers.get_mut(i) {
            Some(reader) => reader.read(tid),
            None => probe::read_schedstat(tid),
        }
    }

    /// Thread `tid`'s state letter, as [`schedstat`](Self::schedstat).
    fn state(&mut self, i: usize, tid: i32) -> Option<char> {
        match self.readers.get_mut(i) {
            Some(reader) => reader.state(tid),
            None => probe::read_state(tid),
        }
    }

    /// Follows a reported poll: completes it, retracts it, re-reports it, or samples it again.
    /// Returns it while it is still running and pinning. `seq` is the counter just loaded.
    fn follow_pinned(
        &mut self,
        slot: &Slot,
        mut p: Box<Pinned>,
        seq: u64,
        now: Instant,
    ) -> Option<Box<Pinned>> {
        // The panic hooks the poll ran since it was found pinned (it caught the panics, or
        // ends unwinding from one) are the panic machinery's time, not the pin's. Nothing is
        // sampled or reported while a hook runs.
        let mut in_hook = false;
        if let Some(m) = slot.unwinding.since_running(p.seq) {
            let left_out = p.hooks_left_out;
            p.leave_out(m.hooks);
            in_hook = m.resumed.is_none();
            // Nor is what the thread did meanwhile, on a CPU or waiting for one, the pin's.
            p.across_hook |= in_hook || p.hooks_left_out != left_out;
        }
        let ended = slot.poll.ended(p.seq);
        if ended.is_some() || seq != p.seq {
            let end = match ended {
                Some(nanos) => self.shared.at(nanos),
                // The end time was missed (the thread went away mid-poll): this look is the
                // tightest bound left.
                None => now,
            };
            if !slot.is_active() || slot.tid.load(Ordering::Relaxed) != p.tid {
                // Do not leave a request to a thread that is gone on the slot.
                crate::signal::withdraw(slot);
            }
            let waited = self.cpu_wait(&p);
            // (The heartbeat's stalls are counted by the scans, from its late beat.)
            let stalling = p.undriven_since.filter(|_| !p.by_heartbeat);
            p.complete(end, waited);
            if p.event.worker.index.is_some() {
                if let Some(since) = stalling {
                    // Its report has the drivers undriven until its end: counted up to there,
                    // not only to the last look (the look that finds it ended counts nothing;
                    // one that found it ended first started the watch over).
                    self.count_stall(end, since);
                } else if !self.multi_thread && !p.event.runtime_stalled {
                    // Flagged, and ended before a look judged it (the flag's stack sample can
                    // take that long): a stall no look saw, as one found ended.
                    self.current_thread_stall(&mut p);
                }
            }
            // Sent once the tasks it held up have had time to be polled.
            self.held.push((*p, end + crate::event::VICTIM_WINDOW));
            return None;
        }
        if in_hook {
            return Some(p);
        }
        p.queued(self.queued_behind(p.event.worker.index));
        if !p.event.block_on && workers::owner(self.handle, p.thread) == Owner::HandedOff {
            // tokio has now recorded that this thread handed its worker over: the poll was in
            // `block_in_place` all along (the hand-over is recorded late under load). The
            // analysis counts it.
            p.retract(now);
            self.send(&p);
            return None;
        }
        let holds_worker = p.event.worker.index.is_some();
        let stall = self.stalled.filter(|_| holds_worker);
        if let Some((late, due)) = stall.and_then(|s| Some((s.blames(p.began, now)?, s.due))) {
            let newly = p.stalls(late);
            if self.heartbeat_woke == Some(due) {
                p.undriven_by_heartbeat(now, due);
            }
            if newly {
                p.event.runtime_advice = self.runtime_advice(true);
                // Say so now, not at the next report: the whole service has stopped.
                self.resend(&mut p, now);
            }
        } else if let Some(beat) = p
            .undriven_since
            .filter(|_| p.by_heartbeat && stall.is_none())
            .and_then(|since| self.shared.heartbeat.beat_since(since))
        {
            // The heartbeat beat again after pinwatch woke a worker: it took the timers over.
            p.driven(beat, None);
            if self.heartbeat_woke.take().is_some() {
                self.shared.stats.handovers.fetch_add(1, Ordering::Relaxed);
            }
            self.resend(&mut p, now);
        }
        if p.sample_due(now, self.settings.sample_interval) {
            p.last_sample = now;
            self.probe(slot, &mut p);
        }
        if p.resend_due(now, self.settings.report_interval) {
            self.resend(&mut p, now);
        }
        Some(p)
    }

    /// The first reports of the pins flagged in this scan, and the pins found ended, by id.
    fn send_first_reports(&mut self, tracked: &mut [Option<Tracked>]) {
        let unsent = |t: &Tracked| t.pinned.as_ref().is_some_and(|p| !p.first_sent);
        if self.found_ended.is_empty() && !tracked.iter().flatten().any(unsent) {
            // Most scans: nothing to send (and no kilobyte-sized iterator to set up).
            return;
        }
        let mut ended = std::mem::take(&mut self.found_ended).into_iter().peekable();
        for p in tracked
            .iter_mut()
            .flatten()
            .filter_map(|t| t.pinned.as_mut())
        {
            if !p.first_sent {
                while let Some(e) = ended.next_if(|e| e.event.id < p.event.id) {
                    self.send_completed(e, Instant::now());
                }
                p.first_sent = true;
                self.send(p);
            }
        }
        for e in ended {
            self.send_completed(e, Instant::now());
        }
    }

    /// Sends the held completed reports that are due at `now` (all of them when `all`), with
    /// their victims.
    fn release_held(&mut self, now: Instant, all: bool) {
        let mut i = 0;
        while i < self.held.len() {
            if all || self.held[i].1 <= now {
                let (p, _) = self.held.remove(i);
                self.send_completed(p, now);
            } else {
                read_after(self.shared.table.slots(), &mut self.held[i].0);
                i += 1;
            }
        }
    }

    /// Puts the victims on a completed pin's event: the tally of measured waits, or the tasks
    /// its thread polled right after it; and, when one of them waited in the worker's LIFO
    /// slot, the runtime-level advice for that.
    fn finish_victims(&self, p: &mut Pinned) {
        read_after(self.shared.table.slots(), p);
        let (after, n) = &p.after;
        p.event.victims = p.tally.victims(
            MEASURED,
            self.lifo_slot,
            &after[..*n],
            p.span(),
            p.queue_max,
        );
        let lifo = p
            .event
            .victims
            .as_ref()
            .is_some_and(|v| v.worst.iter().any(|w| w.lifo));
        if lifo {
            p.event.runtime_advice = Some(match p.event.runtime_advice.take() {
                Some(a) => format!("{a}; {LIFO_ADVICE}"),
                None => LIFO_ADVICE.to_owned(),
            });
        }
    }

    /// Sends a completed pin's report with its victims, and remembers it as sent.
    fn send_completed(&mut self, mut p: Pinned, now: Instant) {
        self.finish_victims(&mut p);
        self.send(&p);
        self.sent_out(&p, now);
    }

    /// Remembers a pin whose report has gone out (`schedule-latency`).
    fn sent_out(&mut self, p: &Pinned, now: Instant) {
        if !MEASURED {
            return;
        }
        // Kept a while (a wait never outlives this by much on a live runtime), and bounded.
        while self.sent.len() >= 256
            || self
                .sent
                .front()
                .is_some_and(|s| s.end.is_some_and(|e| now > e + SENT_KEPT))
        {
            self.sent.pop_front();
        }
        self.sent.push_back(p.span());
    }

    /// Reads the waits the workers recorded since the last scan (`schedule-latency`) and hands
    /// each to the pins it waited behind: running, found ended in this scan, or held.
    #[cfg(feature = "schedule-latency")]
    fn collect_waits(&mut self, tracked: &mut [Option<Tracked>]) {
        let mut waits: Vec<Wait> = Vec::new();
        let mut read = [NO_WAIT; WAIT_RING];
        let mut lost = 0;
        for (slot, next) in self.used_slots().iter().zip(&mut self.wait_next) {
            let (n, missed) = slot.waits.read(next, &mut read);
            lost += missed;
            if n == 0 {
                continue;
            }
            let worker = match workers::owner(self.handle, slot.thread.load(Ordering::Relaxed)) {
                Owner::Worker(i) => Some(i),
                Owner::HandedOff => None,
            };
            // pinwatch's own tasks (its heartbeat, the task that wakes a worker) wait with the
            // runtime: neither victims nor a busy runtime's.
            let own = |w: &&crate::poll::waits::Waited| super::victims::is_own(&w.task);
            waits.extend(read[..n].iter().filter(|w| !own(w)).map(|w| Wait {
                task: w.task,
                wait: Duration::from_nanos(w.wait),
                polled: self.shared.at(w.at),
                worker,
                // A poll still running: the spans it is in now.
                span: w.span.or_else(|| {
                    (slot.poll.seq() == w.poll)
                        .then(|| slot.spans.innermost(w.poll))
                        .flatten()
                        .map(|e| (e.layer, e.id))
                }),
            }));
        }
        let stats = &self.shared.stats;
        stats.victims_lost.fetch_add(lost, Ordering::Relaxed);
        if waits.is_empty() {
            return;
        }
        let mut pins: Vec<&mut Pinned> = tracked
            .iter_mut()
            .flatten()
            // Boxed in `Tracked`, in place in the others.
            .filter_map(|t| t.pinned.as_deref_mut())
            .chain(self.found_ended.iter_mut())
            .chain(self.held.iter_mut().map(|(p, _)| p))
            .collect();
        let spans: Vec<_> = pins.iter().map(|p| p.span()).collect();
        let sent = self.sent.make_contiguous();
        // Every pin known, for whether another worker was free while a task waited.
        let all: Vec<_> = spans.iter().chain(sent.iter()).copied().collect();
        let workers = self.handle.metrics().num_workers();
        // A worker free this long would have stolen a queued task, its own backlog drained.
        let min_free = (self.settings.threshold / 4).max(Duration::from_millis(1));
        for w in &waits {
            let blamed = super::victims::blame(w, &spans);
            if blamed.is_empty() {
                if super::victims::blame(w, sent).is_empty() {
                    stats.busy_waits.fetch_add(1, Ordering::Relaxed);
                } else {
                    stats.victims_late.fetch_add(1, Ordering::Relaxed);
                }
            }
            // Asked only of a wait among a pin's worst (the only ones that say `lifo`).
            let lifo = || super::victims::lifo_possible(w, &all, workers, min_free);
            for i in blamed {
                pins[i].tally.add(w, lifo, || {
                    w.span
                        .map(|(layer, id)| crate::spans::chain(layer, id))
                        .unwrap_or_default()
                });
            }
        }
    }

    #[cfg(not(feature = "schedule-latency"))]
    fn collect_waits(&mut self, _tracked: &mut [Option<Tracked>]) {}

    /// Looks, while the drivers cannot be seen yet, for a parked worker waiting on the I/O
    /// driver (when due: see [`DriverView::learn_due`]).
    fn learn_drivers(&mut self, now: Instant, idle: bool) {
        if !self.multi_thread || !self.view.learn_due(now, idle) {
            return;
        }
        self.view.tried_at = Some(now);
        for slot in self.used_slots() {
            if slot.is_active() && slot.parked.load(Ordering::Relaxed) {
                if let Some(probe::Wait::Epoll(fd)) =
                    probe::read_wait(slot.tid.load(Ordering::Relaxed))
                {
                    self.view.epoll(fd);
                    self.view.blind = false;
                    break;
                }
            }
        }
        self.seen_changed();
    }

    /// At the watchdog's start, before the runtime runs a task of the service's (the detector's
    /// start waits for it): waits, up to `within`, for one of the runtime's workers to park on
    /// its drivers, and learns their descriptor from it. Without this the drivers were seen
    /// only once the service first idled, and a service whose workers went straight into
    /// pins — every worker pinned, nothing driving the runtime — was judged by the heartbeat
    /// alone, which tells a stall only once it is late past its bound.
    ///
    /// Only on a multi-thread runtime whose park hooks pinwatch installed itself
    /// ([`PollHooks::install`](crate::poll::PollHooks::install)): hooks the service chains are
    /// known only once a worker has used them. It stops at once where a parked worker's system
    /// call cannot be read or a started worker has no slot (the table is full: it is never
    /// seen), and where every worker sleeps on a futex for [`ASLEEP_LOOKS`] looks in a row (a
    /// runtime without I/O driver: nothing to learn, and the heartbeat is the evidence).
    fn learn_at_start(&mut self, within: Duration) {
        if !self.multi_thread || !self.shared.table.parking.is_installed() {
            return;
        }
        let deadline = Instant::now() + within;
        let metrics = self.handle.metrics();
        let n = metrics.num_workers();
        let mut asleep = 0;
        loop {
            // Every slot claimed so far (the scans' own count starts with the first scan), by
            // thread, once a look: a search per worker would cost workers × slots.
            let slots = self.shared.table.used_slots();
            let full = slots.len() >= self.shared.table.slots().len();
            let by_thread: std::collections::HashMap<u64, &Slot> = slots
                .iter()
                .filter(|s| s.is_active())
                .map(|s| (s.thread.load(Ordering::Relaxed), s))
                .collect();
            let mut workers: Vec<Option<Option<probe::Wait>>> = Vec::with_capacity(n);
            for i in 0..n {
                let thread = metrics.worker_thread_id(i).map(|t| crate::poll::id_u64(&t));
                let worker = match thread.map(|t| by_thread.get(&t)) {
                    // Not started yet.
                    None => None,
                    Some(Some(slot)) => slot
                        .parked
                        .load(Ordering::Relaxed)
                        .then(|| probe::read_wait(slot.tid.load(Ordering::Relaxed))),
                    // Started, and no slot is left for it: never seen, as if unreadable.
                    Some(None) if full => Some(None),
                    // Started, its slot still to claim (at its first hook).
                    Some(None) => None,
                };
                // Settled by this one: the workers after it need no `/proc` read.
                let settles = matches!(worker, Some(Some(probe::Wait::Epoll(_)) | None));
                workers.push(worker);
                if settles {
                    break;
                }
            }
            match first_park(&workers) {
                FirstPark::OnDrivers(fd) => {
                    self.view.epoll(fd);
                    self.view.blind = false;
                    break;
                }
                FirstPark::Unreadable => break,
                FirstPark::Asleep => {
                    asleep += 1;
                    if asleep >= ASLEEP_LOOKS {
                        break;
                    }
                }
                FirstPark::Again => asleep = 0,
            }
            if Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Whether the looks at the workers tell who drives the runtime's timers and I/O (and the
    /// heartbeat is left unarmed): on a multi-thread runtime once the I/O driver is seen; on a
    /// current-thread runtime always — its one thread drives them between polls, so a pin
    /// there (which holds it: worker 0) stalls them for as long as it runs.
    fn sees(&self) -> bool {
        !self.multi_thread || self.view.sees()
    }

    fn seen_changed(&self) {
        self.shared
            .stats
            .drivers_seen
            .store(self.sees(), Ordering::Relaxed);
    }

    /// What worker `i` of the runtime does, without reading `/proc`: `Err` when it is parked
    /// (what it waits in tells), with its thread's id and its slot's index.
    fn worker_state(
        &self,
        i: usize,
        holding: &[Option<usize>],
    ) -> Result<WorkerState, (i32, usize)> {
        if holding.contains(&Some(i)) {
            return Ok(WorkerState::Pinned);
        }
        let metrics = self.handle.metrics();
        let Some(thread) = metrics.worker_thread_id(i).map(|t| crate::poll::id_u64(&t)) else {
            return Ok(WorkerState::Busy);
        };
        let Some((index, slot)) = self
            .used_slots()
            .iter()
            .enumerate()
            .find(|(_, s)| s.is_active() && s.thread.load(Ordering::Relaxed) == thread)
        else {
            return Ok(WorkerState::Busy);
        };
        if !slot.parked.load(Ordering::Relaxed) {
            return Ok(WorkerState::Busy);
        }
        Err((slot.tid.load(Ordering::Relaxed), index))
    }

    /// Every worker's state, read only as far as the verdict needs: a busy worker settles it
    /// with no `/proc` read, and the parked ones are read from the one last seen on the
    /// drivers, until one is on them (the ones left unread are marked busy: the verdict is
    /// `Driven` either way). With the workers found asleep on a futex, and their time on a CPU.
    fn worker_states(&mut self, holding: &[Option<usize>]) -> (Vec<WorkerState>, Vec<Asleep>) {
        let n = self.handle.metrics().num_workers();
        let known: Vec<Result<WorkerState, (i32, usize)>> =
            (0..n).map(|i| self.worker_state(i, holding)).collect();
        let mut states: Vec<WorkerState> = known
            .iter()
            .map(|k| *k.as_ref().unwrap_or(&WorkerState::Busy))
            .collect();
        let mut asleep = Vec::new();
        if known.contains(&Ok(WorkerState::Busy)) {
            return (states, asleep);
        }
        let first = self.drivers.last_on_drivers.filter(|i| *i < n).unwrap_or(0);
        self.view.blind = false;
        for i in (first..n).chain(0..first) {
            let Err((tid, slot)) = known[i] else {
                continue;
            };
            states[i] = match probe::read_wait(tid) {
                Some(probe::Wait::Epoll(fd)) => self.view.epoll(fd),
                Some(probe::Wait::Futex) => {
                    let on_cpu = self.schedstat(slot, tid).map(|s| s.on_cpu);
                    asleep.push(Asleep {
                        worker: i,
                        tid,
                        on_cpu,
                    });
                    WorkerState::OnCondvar
                }
                Some(probe::Wait::Other) => WorkerState::Busy,
                None => {
                    self.view.blind = true;
                    WorkerState::Busy
                }
            };
            if matches!(states[i], WorkerState::OnDrivers | WorkerState::Busy) {
                break;
            }
        }
        (states, asleep)
    }

    /// One look at the workers for [`look_at_drivers`](Self::look_at_drivers): their states,
    /// the verdict on them (driven where the drivers cannot be seen: undriven would be a
    /// guess), and the ones found asleep on a futex.
    fn workers_now(
        &mut self,
        holding: &[Option<usize>],
    ) -> (Vec<WorkerState>, Drivers, Vec<Asleep>) {
        let (states, asleep) = self.worker_states(holding);
        self.seen_changed();
        let verdict = if self.sees() {
            Drivers::of(&states)
        } else {
            Drivers::Driven { by: None }
        };
        (states, verdict, asleep)
    }

    /// [`look_at_drivers`](Self::look_at_drivers) when no pin holds a worker: the watch starts
    /// over (but for what [`DriverWatch::start_over`] keeps), and the runtime is not stalled.
    fn nothing_held(&mut self) -> Option<bool> {
        self.drivers.start_over();
        self.sees().then_some(false)
    }

    /// Who drives the runtime's I/O and timer drivers now, while a pin holds a worker: each
    /// worker's state from its slot (pinned, in tokio's park) and, for a parked one, from the
    /// system call it waits in. When nobody does, the pins that left them so stall the
    /// runtime (reported at once), and a parked worker is woken to take them over (with
    /// `PINWATCH_RESCUE`); the look that finds one on them again records the hand-over.
    /// Returns whether the runtime is stalled now, `None` where the drivers cannot be seen
    /// (the heartbeat tells). A current-thread runtime has one worker, which drives them between
    /// its polls: a pin there holds it, and stalls them until it ends (nobody to wake).
    fn look_at_drivers(&mut self, tracked: &mut [Option<Tracked>], now: Instant) -> Option<bool> {
        if !tracked.iter().flatten().any(|t| t.pinned.is_some()) {
            // Nothing pinned (nearly every scan): nothing to allocate for.
            return self.nothing_held();
        }
        let slots = self.shared.table.slots();
        // The worker each pin holds, while its poll runs: one that has just ended (its end is
        // recorded; the next look completes it) holds nothing, and is judged no further.
        let holding: Vec<Option<usize>> = tracked
            .iter()
            .zip(slots)
            .map(|(t, slot)| {
                let p = t.as_ref()?.pinned.as_ref()?;
                if slot.poll.ended(p.seq).is_some() {
                    return None;
                }
                p.event.worker.index
            })
            .collect();
        if holding.iter().all(Option::is_none) {
            return self.nothing_held();
        }
        let news = tracked
            .iter()
            .flatten()
            .filter_map(|t| t.pinned.as_ref())
            .any(|p| !p.first_sent);
        if let Some(stalled) = self.drivers.skip(now, news) {
            return self.sees().then_some(stalled);
        }
        let (mut states, mut verdict, mut asleep) = self.workers_now(&holding);
        let mut rescue = self.shared.config.rescue;
        if self.drivers.needs_second_look(verdict, &asleep) {
            // Looked at again a moment later, whose verdict stands.
            self.aside(|_| std::thread::sleep(SETTLE_AFTER));
            // Judged as the workers were at the first look, by the same pins (one that ended
            // meanwhile held its worker then), and timed then: timed after the wait, a stall
            // ran on past the end of a pin that ended in it, and its rescue came after that
            // end (helper-116: 29 of 30 pins of 21.5 ms said undriven 22.7 ms). A rescue is
            // sent only while one of them runs still.
            (states, verdict, asleep) = self.workers_now(&holding);
            rescue &= tracked.iter().zip(slots).any(|(t, slot)| {
                t.as_ref()
                    .and_then(|t| t.pinned.as_ref())
                    .is_some_and(|p| slot.poll.ended(p.seq).is_none())
            });
        }
        self.drivers.saw_asleep(verdict, asleep);
        if let Drivers::Driven { by: Some(i) } = verdict {
            self.drivers.last_on_drivers = Some(i);
        }
        let driven_at = self.drivers.driven_at;
        let all_pinned = !states.iter().any(|s| *s != WorkerState::Pinned);
        // The pins that left the drivers undriven: the ones that began after a worker was last
        // seen on them (when none did, the look could not tell: all of them). With every
        // worker pinned, each of them keeps the drivers from a free worker: all of them.
        let blamed: Vec<bool> = {
            let held = |t: &Option<Tracked>, h: &Option<usize>| {
                h.is_some() && t.as_ref().is_some_and(|t| t.pinned.is_some())
            };
            let by_rule: Vec<bool> = tracked
                .iter()
                .zip(&holding)
                .map(|(t, h)| {
                    held(t, h)
                        && t.as_ref()
                            .is_some_and(|t| self.drivers.blames(t.first_seen))
                })
                .collect();
            if by_rule.contains(&true) && !all_pinned {
                by_rule
            } else {
                tracked
                    .iter()
                    .zip(&holding)
                    .map(|(t, h)| held(t, h))
                    .collect()
            }
        };
        let (mut wake, handed_over) = self.drivers.looked(verdict, now, rescue);
        // Spawned by the waker thread: a task from outside the runtime, for which tokio wakes a
        // parked worker, which takes the free drivers as it parks again. Not asked (the thread
        // is held up, or there is none): no wake-up to claim or wait for.
        if wake && !self.shared.heartbeat.wake() {
            wake = false;
            self.drivers.woke_at = None;
        }
        if wake {
            self.shared.stats.rescues.fetch_add(1, Ordering::Relaxed);
        }
        if handed_over {
            self.shared.stats.handovers.fetch_add(1, Ordering::Relaxed);
        }
        let mut since: Option<Instant> = None;
        // Stalls this look ends: their reports run up to it.
        let mut ended: Option<Instant> = None;
        for (t, blame) in tracked.iter_mut().zip(&blamed) {
            let Some(p) = t.as_mut().and_then(|t| t.pinned.as_mut()) else {
                continue;
            };
            match verdict {
                Drivers::Undriven { .. } if *blame => {
                    let newly = p.undriven(now, driven_at, wake);
                    since = Some(since.map_or(p.start, |s| s.min(p.start)));
                    p.event.runtime_advice = Some(
                        if !self.multi_thread {
                            crate::event::CURRENT_THREAD_ADVICE
                        } else if all_pinned {
                            ALL_PINNED_ADVICE
                        } else {
                            DRIVER_ADVICE
                        }
                        .to_owned(),
                    );
                    if newly && p.first_sent {
                        // Say so now, not at the next report: the whole service has stopped.
                        self.resend(p, now);
                    }
                }
                Drivers::Undriven { .. } => {}
                // The heartbeat tells when the timers of such a pin fire again.
                Drivers::Driven { .. } if p.by_heartbeat => {}
                Drivers::Driven { by } => {
                    let was = p.undriven_since;
                    if let Some(s) = was {
                        ended = Some(ended.map_or(s, |e| e.min(s)));
                    }
                    p.driven(now, by);
                    if was.is_some() && p.first_sent {
                        self.resend(p, now);
                    }
                }
            }
        }
        let stalled = matches!(verdict, Drivers::Undriven { .. });
        let counted_from = if stalled {
            since.map(|s| driven_at.map_or(s, |d| d.max(s)))
        } else {
            ended
        };
        if let Some(from) = counted_from {
            self.count_stall(now, from);
        }
        self.drivers.last = Some((now, stalled));
        // Not seen: the heartbeat's word stands.
        self.sees().then_some(stalled)
    }

    /// Sends the next `in_progress` report of a pin still running, brought up to `now`.
    fn resend(&mut self, p: &mut Pinned, now: Instant) {
        let waited = self.cpu_wait(p);
        let queued = self.queued_behind(p.event.worker.index);
        p.again(now, waited, queued);
        if p.tally.tasks() > 0 {
            // Those polled so far (another worker stole them): the completed report has all.
            p.event.victims = p
                .tally
                .victims(MEASURED, self.lifo_slot, &[], p.span(), p.queue_max);
        }
        self.send(p);
    }

    /// The slots in use as this scan loaded them ([`SlotTable::used`]).
    fn used_slots(&self) -> &'a [Slot] {
        &self.shared.table.slots()[..self.used]
    }

    /// Tasks waiting in worker `index`'s local run queue.
    fn queued_behind(&self, index: Option<usize>) -> Option<usize> {
        let metrics = self.handle.metrics();
        index
            .filter(|i| *i < metrics.num_workers())
            .map(|i| metrics.worker_local_queue_depth(i))
    }

    /// Pin `p`'s [`Pinned::cpu_wait`], its thread read now.
    fn cpu_wait(&mut self, p: &Pinned) -> Duration {
        let shared = self.shared;
        let slot = shared.table.slots().get(p.slot);
        p.cpu_wait(|| match slot {
            Some(slot) => self.schedstat_or_exited(slot, p.slot, p.tid, p.seq),
            None => self.schedstat(p.slot, p.tid),
        })
    }

    /// Thread `tid`'s accounting now, as [`schedstat`](Self::schedstat) reads it; once the
    /// thread has exited (after its poll `seq` began), as it left it in `slot`
    /// ([`Slot::exited`]).
    fn schedstat_or_exited(
        &mut self,
        slot: &Slot,
        i: usize,
        tid: i32,
        seq: u64,
    ) -> Option<probe::SchedStat> {
        self.schedstat(i, tid).or_else(|| {
            let (on_cpu, waiting) = slot.exited.of(tid, seq)?;
            Some(probe::SchedStat { on_cpu, waiting })
        })
    }

    fn probe(&mut self, slot: &Slot, p: &mut Pinned) {
        // Before the look at its state: a block between the two shows as blocked in the look,
        // or in the next probe's count. `take` reads the same status file again for the
        // signal's masks, right before it signals: read here, they would be as old as the look
        // (tens of µs, milliseconds on a loaded machine), and a thread that blocked the signal
        // meanwhile (as `posix_spawn` does) would be signalled and waited for in vain.
        let switches = probe::voluntary_switches(p.tid);
        let reading = self.schedstat(p.slot, p.tid).map(|stat| probe::Reading {
            at: Instant::now(),
            stat,
            switches,
        });
        // A stack of the thread from before a panic hook is not its stack now, whatever call
        // it is in.
        let last = p.probes.last().filter(|_| !p.across_hook);
        let Some(mut probe) =
            self.aside(|s| probe::take(s.shared, slot, p.seq, last, s.settings.stacks))
        else {
            return;
        };
        let previous = last.map(|last| {
            let running = last.proc.as_ref().is_some_and(|s| s.syscall.is_none());
            (running, last.switches)
        });
        let mut since = match p.probes.last() {
            Some(last) => last.reading,
            None => first_since(p.near, p.baseline, reading),
        };
        if std::mem::take(&mut p.across_hook) {
            // A panic hook ran since then: its time on a CPU (symbolizing a backtrace) would
            // read as the pin's computing (helper-106). The interval counts for no reason.
            since = None;
        }
        if let Some(Some(holder)) = probe.waiting_for.as_mut() {
            // The lock's holder is a watched thread: the worker it runs, if it runs one
            // (`lock_holder.worker.index` was never set: helper-106).
            if let Owner::Worker(i) = workers::owner(self.handle, holder.thread) {
                holder.index = Some(i);
            }
        }
        probe.switches = switches;
        probe.reading = reading;
        probe.since = since;
        probe.between = probe::between(since, reading);
        probe.ran = ran_since(probe.between, previous, switches);
        p.probes.push(probe);
        p.probes_taken += 1;
        p.event.samples = p.probes.iter().filter(|x| x.stack.is_some()).count() as u32;
        // Bound the memory of a poll stuck for hours: keep the first samples and the latest.
        const KEEP: usize = 64;
        if p.probes.len() > KEEP {
            p.probes.remove(KEEP / 2);
        }
    }

    fn send(&mut self, p: &Pinned) {
        // Boxed: a place in the queue is a pointer, not a report (which the queue would keep
        // room for, a report's size a place, once it had filled).
        let report = Box::new(RawReport {
            event: p.event.clone(),
            probes: p.probes.clone(),
            probes_taken: p.probes_taken,
            start: p.start,
        });
        match self.aside(|s| s.tx.try_send(report)) {
            Ok(()) => {
                self.shared.stats.events.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                self.shared.stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_taken_while_a_pin_was_followed_bounds_no_poll_after_it() {
        let reading = Before {
            at: Instant::now(),
            stat: probe::SchedStat {
                on_cpu: 1,
                waiting: 2,
            },
            parked: Some(0),
        };
        // The same thread, read at the last look: the poll's reading.
        assert!(before_of(Some((7, reading)), 7, false).is_some());
        // Another thread's, or none.
        assert!(before_of(Some((8, reading)), 7, false).is_none());
        assert!(before_of(None, 7, false).is_none());
        // The last look followed a pin on the slot: its reading may be a follow's interval
        // before the pin ended, and the pin's blocked tail would be taken off this poll.
        assert!(before_of(Some((7, reading)), 7, true).is_none());
    }
}
