//! The watchdog's judgement: when a poll is pinned, what its start and duration are, how much of
//! a worker's wait for a CPU is credited, which pin a stall blames, when the watchdog sleeps.
//! Every decision here is a function of the looks, times and thread states it is given; the
//! loop in `scan` reads the clock, the slots and `/proc`, and hands them over. The unit tests
//! feed synthetic times (a base instant plus durations) and states: none sleeps.
//!
//! A look at a slot loads its poll counter with a clock read beside it. A poll's start is
//! bounded by looks: it began after the last look that saw another counter (`after`). That
//! bound is what `start` and `duration` report, so a duration is never shorter than the real
//! one (the reported start is at or before the real start; the end is the exact one, recorded
//! by the after-poll hook once the poll is flagged or armed).
//!
//! Against the threshold a poll's age is taken from the first look that saw it, plus the gap
//! before that look credited up to one and a half scan intervals ([`Tracked::age`]): a poll
//! running for the threshold plus one scan interval is reported while the watchdog looks on
//! time, and no poll is reported that ran less than the threshold minus one and a half scan
//! intervals. A watchdog made late by a slow probe or by the kernel never ages a poll by its
//! own lateness. Time the worker spent waiting for a CPU after the second look at the poll (its
//! thread's `schedstat`, [`Baseline`]) does not count; before that look at most a quarter of
//! the threshold plus one scan interval counts.

use std::time::{Duration, Instant};

use super::probe::{Between, Probe, Reading, SchedStat, Wait};
use crate::event::PinnedEvent;
use crate::poll::protocol::Snapshot;
use crate::poll::slot::{HookTime, NameBuf};

/// How much of the gap between the last look that saw another counter and the first that saw
/// this poll counts toward its age: one and a half scan intervals (a timely watchdog's looks
/// are one interval and its wake-up apart).
const GAP_CREDIT: (u32, u32) = (3, 2);

pub(super) use super::probe::TICK;

/// The heartbeat must be later than this (and than the threshold) for the runtime to count as
/// stalled: on a machine whose CPUs are all busy a worker can wait this long for one, and its
/// timers are late without being stalled.
const STALL_FLOOR: Duration = Duration::from_millis(100);

/// The watchdog's memory of the poll running in one slot.
pub(super) struct Tracked {
    pub seq: u64,
    /// Just after the load that first saw `seq`.
    pub first_seen: Instant,
    /// Just before the last load that saw another counter: the poll started after it (moved
    /// later by the time its panic hooks took, which is not timed).
    pub after: Instant,
    /// `after` as first found, before panic hooks moved it: what a stall blames.
    pub began: Instant,
    /// The thread has handed its worker over (`block_in_place`): not pinning while that lasts.
    pub handed_off: bool,
    /// `after` and `first_seen` are the poll's start, stamped by the before-poll hook: its age
    /// is exact, and the watchdog need not look before [`stamps::first_look`].
    ///
    /// [`stamps::first_look`]: super::stamps::first_look
    pub exact: bool,
    /// The thread's scheduler accounting read before the poll began, for a stamped poll: its
    /// first close look need not come within what a second look credits
    /// ([`baseline_since`](Self::baseline_since)).
    pub before: Option<Before>,
    /// The thread blocked between `before` and the poll's start: it is looked at closely at
    /// [`stamps::first_look`], as a poll whose thread was not read, and still credited from
    /// `before` (never less than a look without it would credit).
    ///
    /// [`stamps::first_look`]: super::stamps::first_look
    pub early: bool,
    /// The thread's scheduler accounting at the second look at the poll.
    pub baseline: Option<Baseline>,
    /// The thread's accounting and voluntary switches at the first look at half the threshold
    /// or more: what the first probe, if the poll is pinned, is read against
    /// ([`between`](super::probe::between)). Once a poll, and only for polls that long.
    pub near: Option<Reading>,
    /// The most pinned time found for the poll so far: time only adds up, and a look that
    /// finds the thread runnable (its sleep just ended, it waits for a CPU) can count less of
    /// it than an earlier look that found it blocked.
    pub counted: Duration,
    /// What the report would say of the poll, read at the second look, when the watchdog
    /// asked there for its end time because its thread was blocked.
    pub armed: Option<Armed>,
    /// The second look has decided whether to arm it.
    pub tried_arm: bool,
    /// What the poll's panic hooks took (`Panicked::hooks`), left out of its timing so far.
    pub hooks_left_out: HookTime,
    /// The process's frozen time ([`Frozen::total`]) seen so far: what of it this poll ran
    /// across is `frozen`.
    pub frozen_left_out: u64,
    /// The time the process stood still while this poll ran: not counted in its age (its start
    /// and so its reported duration stay the wall time's).
    pub frozen: Duration,
    /// The poll, reported as pinned and not yet completed. Boxed: a pin is rare, and a
    /// `Tracked` moves whenever its slot's counter does (the watchdog's most common work), which
    /// a kilobyte of event in place made a copy of that size at every look.
    pub pinned: Option<Box<Pinned>>,
}

impl Tracked {
    /// Poll `seq`, first seen at `first_seen`, begun after `after`; `hooks` of its panic
    /// hooks' time had passed before (not left out: it is in the gap before the first look, and
    /// in every reading of the thread from then on).
    /// `resumed`: where its last panic hook returned, if one had: the poll is timed from there
    /// (what it did before the panic is unknown, and the hook's time is not its own).
    pub fn new(
        seq: u64,
        first_seen: Instant,
        after: Instant,
        hooks: HookTime,
        resumed: Option<Instant>,
    ) -> Tracked {
        let began = after;
        let after = match resumed {
            Some(r) if r > after => r.min(first_seen),
            _ => after,
        };
        Tracked {
            seq,
            first_seen,
            after,
            began,
            handed_off: false,
            exact: false,
            before: None,
            early: false,
            baseline: None,
            near: None,
            counted: Duration::ZERO,
            armed: None,
            tried_arm: false,
            hooks_left_out: hooks,
            frozen_left_out: 0,
            frozen: Duration::ZERO,
            pinned: None,
        }
    }

    /// Poll `seq`, first seen at `now`, whose start stamp says it began at `start` (no later
    /// than `now`): its age is exact from there, or from where its last panic hook returned.
    pub fn stamped(
        seq: u64,
        start: Instant,
        now: Instant,
        hooks: HookTime,
        resumed: Option<Instant>,
    ) -> Tracked {
        let from = resumed.map_or(start, |r| r.min(now).max(start));
        let mut t = Tracked::new(seq, from, from, hooks, None);
        t.exact = true;
        t
    }

    /// Whether its first close look waits for [`stamps::late_look`]: its thread was read before
    /// it began, and did not block in between.
    ///
    /// [`stamps::late_look`]: super::stamps::late_look
    pub fn looked_at_late(&self) -> bool {
        self.before.is_some() && !self.early
    }

    /// Leaves what panic hooks took (`hooks`, the slot's running total), new since the last
    /// look, out of the poll's timing, as if they had not run: its start bounds move that much
    /// later, and so does each reading of its thread taken before them (its baseline, and the
    /// one before it began) — by their wall time, never past `now`, and by the thread's time on
    /// a CPU and waiting for one in them, so that what the thread did since a reading counts
    /// none of theirs. Symbolizing a backtrace computes, and on a busy machine waits for a CPU:
    /// counted as the poll's, the one made a preempted 35 ms poll a pin, the other hid a 130 ms
    /// block (helper-110), and a pin's `cpu_wait` said 394–545 ms of 215 (helper-108).
    pub fn leave_out(&mut self, hooks: HookTime, now: Instant) {
        let new = self.hooks_left_out.take_new(hooks);
        self.shift(Duration::from_nanos(new.nanos), now);
        if let Some(b) = self.baseline.as_mut() {
            b.stat = b.stat.past(new);
        }
        if let Some(b) = self.before.as_mut() {
            b.at = (b.at + Duration::from_nanos(new.nanos)).min(now);
            b.stat = b.stat.past(new);
        }
    }

    /// Leaves the time the whole process stood still (`frozen`, [`Frozen::total`]), new since
    /// the last look at `now`, out of what the threshold counts of the poll: a poll blocked in
    /// a short call when the process was stopped returns that much late, and its code did not
    /// hold the worker for it. Never more than the poll's age: one begun after the freeze (first
    /// seen just after it) ran across none of it. Its start stays where it was: a pin's duration
    /// is its wall time, the stop included.
    pub fn leave_out_frozen(&mut self, frozen: u64, now: Instant, interval: Duration) {
        let new = Duration::from_nanos(frozen.saturating_sub(self.frozen_left_out));
        self.frozen_left_out = self.frozen_left_out.max(frozen);
        let new = new.min(self.age(now, interval));
        if new.is_zero() {
            return;
        }
        self.frozen += new;
        if let Some(b) = self.baseline.as_mut() {
            b.at = (b.at + new).min(now);
        }
        // Its reading against the first probe would count the stop as blocked time.
        self.near = None;
    }

    /// [`leave_out_frozen`](Self::leave_out_frozen) for a poll that ended at `end`, looked at
    /// `now`: of the stops found since its last look, only what must have lain before its end —
    /// their sum less the time from its end to `now` (they may all have come after it).
    pub fn leave_out_frozen_before(
        &mut self,
        frozen: u64,
        end: Instant,
        now: Instant,
        interval: Duration,
    ) {
        let new = frozen.saturating_sub(self.frozen_left_out);
        let after_end = now.saturating_duration_since(end).as_nanos() as u64;
        let before_end = self.frozen_left_out + new.saturating_sub(after_end);
        self.leave_out_frozen(before_end, end, interval);
        self.frozen_left_out = self.frozen_left_out.max(frozen);
    }

    /// Moves the poll's start bounds and its baseline's instant `new` later, never past `now`.
    fn shift(&mut self, new: Duration, now: Instant) {
        if new.is_zero() {
            return;
        }
        self.first_seen = (self.first_seen + new).min(now);
        self.after = (self.after + new).min(self.first_seen);
        if let Some(b) = self.baseline.as_mut() {
            b.at = (b.at + new).min(now);
        }
        self.near = None;
    }

    /// The poll's age at `t` as the threshold sees it: the time since the first look that saw
    /// it, plus the gap before that look (the poll started in it), credited up to one and a
    /// half scan intervals, less the time the process stood still meanwhile (`frozen`). Never
    /// more than the poll's real age plus that, and, while the watchdog looks on time, never
    /// less than its real age less that.
    pub fn age(&self, t: Instant, interval: Duration) -> Duration {
        let gap = self.first_seen.saturating_duration_since(self.after);
        (t.saturating_duration_since(self.first_seen)
            + gap.min(interval * GAP_CREDIT.0 / GAP_CREDIT.1))
        .saturating_sub(self.frozen)
    }

    /// The baseline taken at `at` from the kernel's accounting `stat`: what the poll did before
    /// it is unknown (on a CPU, blocked, or waiting for one), so it is credited with what two
    /// timely looks see, at most a quarter of the threshold plus one scan interval: a watchdog
    /// that looks late — preempted on a loaded machine — must not turn a preempted worker's
    /// wait into a pin.
    pub fn baseline(
        &self,
        at: Instant,
        stat: SchedStat,
        threshold: Duration,
        interval: Duration,
    ) -> Baseline {
        Baseline {
            at,
            age: self.age(at, interval).min(threshold / 4 + interval),
            stat,
        }
    }

    /// The baseline taken at `at` (accounting `stat`, thread state `state`) of a stamped poll
    /// whose thread's accounting `before` was read before the poll began, `before.at` moved
    /// later by the time the thread spent in tokio's park since (its accounting does not move
    /// while it is parked, and a runnable thread's unaccounted time counts only up to a
    /// [`TICK`]: a park left in would be taken off the poll). Its time on a CPU or blocked
    /// since `before` (counted as [`Baseline::pinned_time`] counts it) less the time from
    /// `before` to the poll's start is what the poll did, except for the thread's waits for a
    /// CPU in that time, which may have been before the poll or in it: of those, at most what a
    /// second look credits (a quarter of the threshold plus one scan interval) is counted. So
    /// the credit is what it is for any other poll — a worker preempted for longer is not
    /// pinned by it — and no look need come early to bound it. Never more than the poll's age;
    /// never less than what [`baseline`](Self::baseline) credits at that age (as much of it as
    /// the credit), which overcounts no more: where the thread, between the reading and the
    /// poll, waited for a CPU longer than the credit or blocked outside the park (a poll before
    /// this one) for longer than a tick, that is what the poll gets.
    pub fn baseline_since(
        &self,
        before: Before,
        at: Instant,
        stat: SchedStat,
        state: Option<char>,
        threshold: Duration,
        interval: Duration,
    ) -> Baseline {
        let since = Baseline {
            at: before.at,
            age: Duration::ZERO,
            stat: before.stat,
        };
        let (counted, waited) = since.pinned_time(at, Some(stat), state);
        // More accounted than the time since the reading: the excess lay before it — in the
        // parks it was moved past (tokio's own work there, and the wait for a CPU after one
        // ends), or in a stint going on at the reading — and is not the poll's.
        let wall = at.saturating_duration_since(before.at);
        let counted = counted.saturating_sub((counted + waited).saturating_sub(wall));
        let gap = self.after.saturating_duration_since(before.at);
        let cap = threshold / 4 + interval;
        let age = self.age(at, interval);
        Baseline {
            at,
            age: (counted + waited.min(gap).min(cap))
                .saturating_sub(gap)
                .min(age)
                .max(age.min(cap)),
            stat,
        }
    }

    /// Whether a look at a poll of `age` counts its pinned time (reads the kernel's
    /// accounting): from half the threshold on. Polls that long are rare; the reads are too.
    pub fn worth_counting(age: Duration, threshold: Duration) -> bool {
        age >= threshold / 2
    }

    /// Counts `pinned_for`, found by a look at `age`, and says whether the poll is pinned now:
    /// both its age and the most pinned time found so far have reached the threshold.
    pub fn count(&mut self, age: Duration, pinned_for: Duration, threshold: Duration) -> bool {
        self.counted = self.counted.max(pinned_for);
        age >= threshold && self.counted >= threshold
    }

    /// The poll, armed and never reported, has ended at `end`: its duration if it pinned, timed
    /// to that end as looks would have timed it — `waited` (its time waiting for a CPU since
    /// the baseline) not counted; its panic hooks since the last look left out before
    /// ([`leave_out`](Self::leave_out) at `end`). `None` if it did not pin.
    pub fn ended_pinned(
        &self,
        end: Instant,
        waited: Duration,
        threshold: Duration,
        interval: Duration,
    ) -> Option<Duration> {
        let age = self.age(end, interval);
        let pinned_for = match self.baseline {
            Some(b) => (b.age + end.saturating_duration_since(b.at)).saturating_sub(waited),
            None => age,
        };
        if age < threshold || pinned_for < threshold {
            return None;
        }
        Some(end.saturating_duration_since(self.after))
    }
}

/// The second look arms a poll — asks its thread to record when the poll ends, as for a pinned
/// one, without reporting anything — only when the thread is blocked in the kernel (`S`, `D`):
/// then the time it spends off a CPU and not waiting for one is the block, and a watchdog kept
/// away until after the poll ends still judges it by its recorded end. A running poll could
/// spend that time stolen by the host (a VM's CPUs), which no account shows: it is judged only
/// by looks while it runs.
pub(super) fn worth_arming(state: Option<char>) -> bool {
    matches!(state, Some('S' | 'D'))
}

/// Whether a thread ran from one probe to the next — on a CPU or waiting for one, never
/// blocked: what a probe that found it running needs for its `cpu` to stand against a probe
/// that found it blocked (see `analyze::dominant`). `previous`: whether the earlier probe found
/// it running, and its voluntary context switches then; `now`: its switches at this probe.
///
/// A thread counts a voluntary switch each time it blocks (a sleep, a lock's wait, a read that
/// waits), never when it is preempted: one that made none ran throughout, however long it
/// waited for a CPU on a loaded machine. The earlier probe must have found it running too: a
/// thread asleep then made its switch before it, and may have slept most of the time between.
/// A thread just woken from a sleep and waiting for a CPU reads as running, and is told apart
/// by this.
pub(super) fn ran_throughout(previous: Option<(bool, Option<u64>)>, now: Option<u64>) -> bool {
    matches!((previous, now), (Some((true, Some(then))), Some(now)) if now == then)
}

/// What a pin's first probe (its accounting `reading`) is read against: the reading at the
/// poll's first look at half the threshold ([`Tracked::near`]), unless that look was the one
/// that flagged it (a late watchdog's) and is a few µs old, too close for the kernel's
/// accounting (updated at a tick) to say anything; then the baseline, older, without switches.
pub(super) fn first_since(
    near: Option<Reading>,
    baseline: Option<Baseline>,
    reading: Option<Reading>,
) -> Option<Reading> {
    near.filter(|n| reading.is_some_and(|r| r.at.saturating_duration_since(n.at) >= TICK))
        .or(baseline.map(|b| b.reading()))
}

/// Whether a thread found running at a probe ran since the probe before ([`Probe::ran`]): on
/// a CPU most of the time, whatever short blocks it made among the work, it did; mostly off
/// one after a block, it did not; where its accounting does not tell (none read, or a wait for
/// a CPU not yet accounted), as before the accounting was read: no block since a probe that
/// found it running ([`ran_throughout`]). A loop with 1 µs sleeps after an 18 ms sleep was
/// `sleep` while its probes had to have made no switch at all (helper-62).
///
/// [`Probe::ran`]: super::probe::Probe::ran
pub(super) fn ran_since(
    between: Between,
    previous: Option<(bool, Option<u64>)>,
    switches: Option<u64>,
) -> bool {
    match between {
        Between::Computed => true,
        Between::Blocked => false,
        Between::Unknown => ran_throughout(previous, switches),
    }
}

/// A thread's scheduler accounting `stat`, read at `at`, before a poll of its began: a look
/// read it and then loaded the slot's counter, which showed an earlier poll.
#[derive(Clone, Copy, Debug)]
pub(super) struct Before {
    pub at: Instant,
    pub stat: SchedStat,
    /// The sum of the thread's parks' ticks ([`Slot::parked_ticks`]) that already lay before
    /// `at`, with the part of a park going on then; `None` if a park ended while it was read.
    ///
    /// [`Slot::parked_ticks`]: crate::poll::slot::Slot::parked_ticks
    pub parked: Option<u64>,
}

impl Before {
    /// The reading as it stands for a poll that began at `start`: moved later by `parked`, the
    /// time its thread has spent in tokio's park since it was taken (the thread's accounting
    /// does not move while it is parked), never past `start`.
    pub fn past_parks(self, parked: Duration, start: Instant) -> Before {
        Before {
            at: self
                .at
                .checked_add(parked)
                .map_or(start, |at| at.min(start))
                .max(self.at),
            ..self
        }
    }

    /// Whether the thread may have blocked before a poll that began at `start`, for more than
    /// a [`TICK`]: from this reading to `later` (a reading of the same thread) it spent that
    /// long neither on a CPU nor waiting for one — blocked outside tokio's park (this reading
    /// moved past the parks already), or its CPU taken by the host — and that long passed from
    /// this reading to the start. Its accounting cannot tell such a block from the poll's own
    /// time once the thread runs again, so the poll is not bounded by this reading. A poll that
    /// blocks itself, begun right after the reading, is no such case: the block is the poll's.
    pub fn blocked_until(&self, later: &Before, start: Instant) -> bool {
        let (on_cpu, waited) = later.stat.since(self.stat);
        let unaccounted = later
            .at
            .saturating_duration_since(self.at)
            .saturating_sub(on_cpu + waited);
        unaccounted.min(start.saturating_duration_since(self.at)) > TICK
    }
}

/// The scheduler's view of a poll, taken at the watchdog's second look at it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Baseline {
    pub at: Instant,
    /// The poll's age then, credited toward the threshold (at most a quarter of it plus one
    /// scan interval).
    pub age: Duration,
    pub stat: SchedStat,
}

impl Baseline {
    /// The baseline as a [`Reading`] (no switches read): what the first probe is read against
    /// when the poll had no look at half the threshold ([`Tracked::near`]).
    pub fn reading(&self) -> Reading {
        Reading {
            at: self.at,
            stat: self.stat,
            switches: None,
        }
    }

    /// Time spent waiting for a CPU since the baseline, by the accounting `now` (zero when the
    /// thread is gone or the kernel keeps none).
    pub fn waited(&self, now: Option<SchedStat>) -> Duration {
        now.map_or(Duration::ZERO, |s| s.since(self.stat).1)
    }

    /// How long the poll has held its worker at `at`, not counting time spent waiting for a CPU
    /// since the baseline; and that waiting time. `stat` is the kernel's accounting then and
    /// `state` the thread's state (`/proc`): time the kernel has not accounted yet counts as
    /// blocked time for a thread asleep or in a blocking call, and only up to a [`TICK`] for a
    /// runnable one (it may be a wait for a CPU still going on).
    pub fn pinned_time(
        &self,
        at: Instant,
        stat: Option<SchedStat>,
        state: Option<char>,
    ) -> (Duration, Duration) {
        let since = at.saturating_duration_since(self.at);
        let Some(stat) = stat else {
            return (self.age + since, Duration::ZERO);
        };
        let (on_cpu, waited) = stat.since(self.stat);
        let rest = since.saturating_sub(on_cpu + waited);
        let counted = on_cpu + super::probe::blocked_part(rest, state);
        (self.age + counted, waited)
    }
}

/// A poll armed at its second look: what the report would say of it, read then — by the time it
/// is judged, the thread may be gone and its slot another thread's.
#[derive(Clone, Copy)]
pub(super) struct Armed {
    pub snap: Snapshot,
    pub tid: i32,
    pub thread: u64,
    /// The worker the thread owned then (`None`: a `block_on` body).
    pub index: Option<usize>,
    pub name: NameBuf,
    pub name_len: usize,
}

/// A poll reported as pinned and not yet completed.
pub(super) struct Pinned {
    pub seq: u64,
    pub tid: i32,
    pub thread: u64,
    pub baseline: Option<Baseline>,
    /// See [`Tracked::near`].
    pub near: Option<Reading>,
    pub event: PinnedEvent,
    /// When it started, moved later by the time of its panic hooks (not timed): its duration is
    /// up to now from here, and `event.start` moves with it (start + duration is the end).
    pub start: Instant,
    /// `start` never moved: what a stall blames.
    pub began: Instant,
    /// What the poll's panic hooks took (`Panicked::hooks`), left out of the pin so far.
    pub hooks_left_out: HookTime,
    /// A panic hook ran, or runs, since the last probe (none yet: since the baseline): the
    /// next probe reads nothing against the one before (the stack before a hook is not the
    /// stack after it, and a reading before it counts the hook's work as the pin's).
    pub across_hook: bool,
    pub last_report: Instant,
    pub last_sample: Instant,
    pub probes: Vec<Probe>,
    /// How many probes it has had, `probes` keeping the first and the latest of them.
    pub probes_taken: u64,
    /// Its first report waits for the end of the scan that flagged it, whose look at the
    /// drivers it carries.
    pub first_sent: bool,
    /// When the drivers' current undriven stretch began, while they are undriven.
    pub undriven_since: Option<Instant>,
    /// The drivers' earlier undriven stretches during this pin.
    pub undriven_before: Duration,
    /// Its `drivers` come from the heartbeat (where the drivers cannot be seen): the first beat
    /// after its undriven stretch began is the hand-over.
    pub by_heartbeat: bool,
    /// The slot it runs in (its index in the table).
    pub slot: usize,
    /// The tasks that waited behind it so far (`schedule-latency`).
    pub tally: super::victims::Tally,
    /// The most tasks seen in its worker's local run queue while it ran.
    pub queue_max: Option<usize>,
    /// When it ended, once it has.
    pub end: Option<Instant>,
    /// The tasks its thread polled next, as far as read so far (the record may be reused).
    pub after: (
        [crate::poll::waits::Polled; crate::poll::waits::AFTER_PIN_MAX],
        usize,
    ),
}

impl Pinned {
    /// Poll `tracked.seq` of thread `thread` (`tid`), reported at `now` as `event`.
    pub fn new(
        tracked: &Tracked,
        tid: i32,
        thread: u64,
        event: PinnedEvent,
        now: Instant,
    ) -> Pinned {
        Pinned {
            seq: tracked.seq,
            tid,
            thread,
            baseline: tracked.baseline,
            near: tracked.near,
            start: tracked.after,
            began: tracked.began,
            hooks_left_out: tracked.hooks_left_out,
            across_hook: false,
            last_report: now,
            last_sample: now,
            probes: Vec::new(),
            probes_taken: 0,
            first_sent: false,
            undriven_since: None,
            undriven_before: Duration::ZERO,
            by_heartbeat: false,
            slot: usize::MAX,
            tally: Default::default(),
            queue_max: event.tasks_queued_behind,
            end: None,
            after: (
                [crate::poll::waits::Polled {
                    task_id: 0,
                    spawned_at: 0,
                }; crate::poll::waits::AFTER_PIN_MAX],
                0,
            ),
            event,
        }
    }

    /// The pin as the victims' attribution sees it.
    pub fn span(&self) -> super::victims::PinSpan {
        super::victims::PinSpan {
            task: self.event.task_id,
            worker: self.event.worker.index,
            start: self.start,
            end: self.end,
        }
    }

    /// A deeper local queue seen behind it.
    pub fn queued(&mut self, depth: Option<usize>) {
        self.queue_max = self.queue_max.max(depth);
    }

    /// Leaves what panic hooks took new since the last look (`hooks`: the slot's running
    /// total) out of the pin, as [`Tracked::leave_out`] does: its start moves that much later,
    /// in the event too, and its baseline and last probe's reading past the thread's accounting
    /// in them.
    pub fn leave_out(&mut self, hooks: HookTime) {
        let fresh = self.hooks_left_out.take_new(hooks);
        // And the last probe's reading, which `cpu_wait` may count to: it was taken before them.
        let last = self.probes.last_mut().and_then(|p| p.reading.as_mut());
        for stat in self
            .baseline
            .as_mut()
            .map(|b| &mut b.stat)
            .into_iter()
            .chain(last.map(|r| &mut r.stat))
        {
            *stat = stat.past(fresh);
        }
        let new = Duration::from_nanos(fresh.nanos);
        self.start += new;
        self.event.start += new;
        // Nor are they the stall's: it is never longer than the pin.
        if let Some(since) = self.undriven_since.as_mut() {
            *since += new;
        }
    }

    /// The poll ended at `end`: the completed report. Drivers still undriven were so until then.
    pub fn complete(&mut self, end: Instant, waited: Duration) {
        if let (Some(since), Some(d)) = (self.undriven_since.take(), self.event.drivers.as_mut()) {
            self.undriven_before += end.saturating_duration_since(since);
            d.undriven = self.undriven_before;
        }
        self.event.state = crate::event::State::Completed;
        self.end = Some(end);
        let waited = self.event.cpu_wait.max(waited);
        self.event
            .timed(end.saturating_duration_since(self.start), waited);
        self.event.report += 1;
    }

    /// The poll turned out to be in `block_in_place` (tokio recorded the hand-over late): the
    /// retraction, at `now`.
    pub fn retract(&mut self, now: Instant) {
        self.event.state = crate::event::State::Retracted;
        self.event.duration = now.saturating_duration_since(self.start);
        self.event.report += 1;
    }

    /// The next `in_progress` report, brought up to `now`.
    pub fn again(&mut self, now: Instant, waited: Duration, queued: Option<usize>) {
        self.last_report = now;
        self.event
            .timed(now.saturating_duration_since(self.start), waited);
        self.event.tasks_queued_behind = queued;
        self.queued(queued);
        self.event.report += 1;
    }

    /// The time its thread has waited for a CPU since the baseline, its panic hooks' waits
    /// left out ([`leave_out`](Self::leave_out)): counted up to now, or, where the thread
    /// cannot be read `now` (it ended with its runtime, and left no record: a pin found ended
    /// then said no wait at all), up to the last probe (none yet: nothing).
    pub fn cpu_wait(&self, now: impl FnOnce() -> Option<SchedStat>) -> Duration {
        let Some(baseline) = self.baseline else {
            return Duration::ZERO;
        };
        let last = || self.probes.last().and_then(|x| x.reading).map(|r| r.stat);
        baseline.waited(now().or_else(last))
    }

    /// A stall blames this pin, the heartbeat `late`: kept as the most seen. True when the pin
    /// is newly found to stall the runtime (it is reported at once: the whole service stopped).
    pub fn stalls(&mut self, late: Duration) -> bool {
        self.event.heartbeat_late = Some(self.event.heartbeat_late.map_or(late, |m| m.max(late)));
        !std::mem::replace(&mut self.event.runtime_stalled, true)
    }

    /// Whether a new stack sample is due at `now`.
    pub fn sample_due(&self, now: Instant, interval: Duration) -> bool {
        now.saturating_duration_since(self.last_sample) >= interval
    }

    /// Whether a new report is due at `now`.
    pub fn resend_due(&self, now: Instant, interval: Duration) -> bool {
        now.saturating_duration_since(self.last_report) >= interval
    }
}

/// The runtime's heartbeat is late past the bound at a scan: its timers have not fired.
#[derive(Clone, Copy, Debug)]
pub(super) struct Stall {
    /// When its beat was due.
    pub due: Instant,
    /// The scan's start.
    pub now: Instant,
    /// How late it must be: the threshold, and at least [`STALL_FLOOR`].
    pub bound: Duration,
}

impl Stall {
    /// The heartbeat's last beat at `last`, its period `every`: how late it is at `now` (zero
    /// when on time), and when the next beat was due.
    pub fn lateness(last: Instant, every: Duration, now: Instant) -> (Duration, Instant) {
        (
            now.saturating_duration_since(last).saturating_sub(every),
            super::stamps::later(last, every),
        )
    }

    /// The instant after which a look finds the heartbeat, due at `due`, late past the bound
    /// ([`past_bound`](Self::past_bound)) if it has not beaten by then (`None`: too far to name,
    /// for a huge threshold).
    pub fn judged_after(due: Instant, threshold: Duration) -> Option<Instant> {
        due.checked_add(threshold.max(STALL_FLOOR))
    }

    /// A stall, when the heartbeat, due at `due`, is late past the bound at `now`.
    pub fn past_bound(due: Instant, now: Instant, threshold: Duration) -> Option<Stall> {
        let bound = threshold.max(STALL_FLOOR);
        (now.saturating_duration_since(due) > bound).then_some(Stall { due, now, bound })
    }

    /// How long the runtime has stood still while a poll that started after `start` (its lower
    /// bound) ran until `end` (this scan's start for one still running), when that is past the
    /// bound: from the beat's due time for a poll running then; from its own start for one
    /// that began later, in a runtime already stalled (back to back pins, each holding the
    /// worker the heartbeat needs). A poll that overlapped the overdue beat by less than the
    /// bound — the runtime may just have come back, its heartbeat not run yet — is not blamed.
    pub fn blames(&self, start: Instant, end: Instant) -> Option<Duration> {
        let late = end
            .min(self.now)
            .saturating_duration_since(start.max(self.due));
        (late > self.bound).then_some(late)
    }
}

/// What one of a multi-thread runtime's workers does, as far as driving the runtime's I/O and
/// timer drivers goes. tokio's worker parks on the drivers when it can take them (one at a
/// time, behind a try-lock: it then waits in `epoll_wait`), else on a condvar; a running worker
/// polls them every so many tasks, and takes them when it parks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WorkerState {
    /// It runs a pin: it drives nothing until the pin ends.
    Pinned,
    /// In tokio's park, waiting on the runtime's I/O driver: it drives them.
    OnDrivers,
    /// In tokio's park, asleep on its condvar: it drives nothing until something wakes it.
    OnCondvar,
    /// Running tasks, on its way into or out of the park, or a thread the watchdog does not
    /// know: it drives them, or will soon.
    Busy,
}

/// Who drives the drivers, by the workers' states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Drivers {
    /// A worker drives them: the one waiting on them when one does (`Some`), else a busy one.
    Driven { by: Option<usize> },
    /// Nobody: every worker is pinned or asleep on its condvar. `asleep`: how many sleep (a
    /// wake-up would reach one of them).
    Undriven { asleep: usize },
}

impl Drivers {
    /// The verdict on `workers` (worker `i`'s state at index `i`).
    pub fn of(workers: &[WorkerState]) -> Drivers {
        if let Some(i) = workers.iter().position(|w| *w == WorkerState::OnDrivers) {
            return Drivers::Driven { by: Some(i) };
        }
        if workers.contains(&WorkerState::Busy) {
            return Drivers::Driven { by: None };
        }
        Drivers::Undriven {
            asleep: workers
                .iter()
                .filter(|w| **w == WorkerState::OnCondvar)
                .count(),
        }
    }
}

/// The least lateness of the watchdog's wake that is looked into, and the least frozen time
/// counted ([`Frozen`]).
pub(super) const FROZEN_MIN: Duration = Duration::from_millis(2);

/// How old the watchdog's reading of its own accounting may grow before a wake reads it again
/// ([`Frozen`]): the waits for a CPU since it are taken for the late wake's, so the older it is
/// the less frozen time a late wake can tell.
pub(super) const OWN_READ_EVERY: Duration = Duration::from_millis(100);

/// The longest the watchdog waits at a time under `threshold` (its sleep while the runtime is
/// idle aside): a quarter of it, as a stamped poll's first look, and at least 100 ms. A stop
/// that begins in a wait is seen only from where the wait was to end ([`Frozen`]), and the part
/// of it before then counts as the polls' own time; the next scan may be due much later, at a
/// stamped poll's first look up to the threshold less two scan intervals away: a wait of 996 ms
/// under a 1 s threshold left out only 1.4 s of a 2 s stop 0.4 s into a blocked read, which
/// returned 1 s old by the threshold's count, a pin had the watchdog looked before it returned
/// (`preemption.rs`, under load). A wait that ends before the scan is due only reads the clock
/// and the watchdog's own accounting, and scans at once if it finds a stop (`scan::run`): at
/// most four such wakes per threshold, and none under a threshold of 100 ms or less, whose
/// waits are shorter (a wake from a 100 ms sleep costs about 130 µs of CPU on a VM here, a few
/// µs on bare metal).
pub(super) fn wait_at_most(threshold: Duration) -> Duration {
    (threshold / 4).max(Duration::from_millis(100))
}

/// The time the whole process stood still — stopped (`SIGSTOP`, a debugger) or frozen (a
/// cgroup freezer): the watchdog's clock jumps by that much between two of its reads, past when
/// it meant to wake, while it neither ran nor waited for a CPU (its own accounting, read only
/// then, and every [`OWN_READ_EVERY`]). Its workers stood still too, and a poll blocked in a
/// short call then returns late by the same: that time is left out of the polls' timing
/// ([`Tracked::leave_out_frozen`]). A jump because the watchdog waited for a CPU (a loaded
/// machine, a CPU quota) is not a freeze: the workers' own waits are left out by their
/// accounting.
///
/// A stop (`SIGSTOP`, a debugger, the cgroup v2 freezer) takes every thread off its CPU through
/// the scheduler: the watchdog, stopped in its timed wait, is switched out once more than the
/// wait itself switches it out. A late end of that wait without that second voluntary switch
/// is not a stop — the host took the watchdog's CPU away (a VM's steal), or its timer fired
/// late (timer slack) — and its workers ran on meanwhile: it is not left out of their polls
/// ([`waits`](Self::waits)). The cgroup v1 freezer (since Linux 6.1) freezes a thread asleep
/// in a futex where it sleeps, with no switch: where it may freeze the process
/// ([`v1_freezable`]), the switches are not read.
#[derive(Default)]
pub(super) struct Frozen {
    /// The frozen time found so far, in nanoseconds.
    pub total: u64,
    /// `total` at the watchdog's last wake: what a poll first seen in the scan after it is
    /// marked with (it may have run across any freeze found since).
    pub at_wake: u64,
    /// The watchdog's own accounting at its last reading, and when.
    own: Option<(Instant, SchedStat)>,
    /// The watchdog's voluntary context switches as it began its last timed wait, if known.
    switches_at_wait: Option<u64>,
}

impl Frozen {
    /// The watchdog woke, and may scan.
    pub fn wake(&mut self) {
        self.at_wake = self.total;
    }

    /// The watchdog begins a timed wait; `switches`: its voluntary context switches so far
    /// ([`own_voluntary_switches`](super::probe::own_voluntary_switches)).
    pub fn waits(&mut self, switches: Option<u64>) {
        self.switches_at_wait = switches;
    }

    /// The watchdog read its clock at `now`, `late` past the later of when it meant to wake and
    /// its last read; `read` reads its own accounting. `timed`: it woke from a timed wait (on a
    /// busy runtime, every scan interval), where a stale reading is read again, and `switches`
    /// reads its voluntary context switches if it was late; a look (`timed` false) reads
    /// nothing unless late.
    pub fn check(
        &mut self,
        now: Instant,
        late: Duration,
        timed: bool,
        read: impl FnOnce() -> Option<SchedStat>,
        switches: impl FnOnce() -> Option<u64>,
    ) {
        let at_wait = std::mem::take(&mut self.switches_at_wait).filter(|_| timed);
        let late = Some(late).filter(|l| *l >= FROZEN_MIN);
        let stale = timed
            && self
                .own
                .is_none_or(|(at, _)| now.saturating_duration_since(at) >= OWN_READ_EVERY);
        if late.is_none() && !stale {
            return;
        }
        let Some(stat) = read() else {
            self.own = None;
            return;
        };
        if let (Some(late), Some((_, before))) = (late, self.own) {
            // Its every run and wait for a CPU since the last reading is taken for this jump's,
            // and a tick more: the kernel accounts a stint on a CPU only as it ends, and a
            // timed wait may end up to its timer slack late. Never more frozen time than there
            // was (a 50 ms stop is told as 46 ms or less).
            let (ran, waited) = stat.since(before);
            let frozen = late.saturating_sub(ran + waited + TICK);
            // Switched out no more than by the wait (one switch if it slept): not stopped.
            // Unknown (unreadable, or late between two checks): taken for a stop.
            let stopped = || {
                at_wait.is_none_or(|then| switches().is_none_or(|now| now.saturating_sub(then) > 1))
            };
            if frozen >= FROZEN_MIN && stopped() {
                self.total = self.total.saturating_add(frozen.as_nanos() as u64);
            }
        }
        self.own = Some((now, stat));
    }
}

/// Whether a cgroup v1 freezer may freeze this process, from its `/proc/self/cgroup`:
/// it is in a v1 `freezer` hierarchy, at a cgroup other than the root (which cannot be frozen).
/// `root_state` tells, for one listed at `/` (the root, or the root of a cgroup namespace of its
/// own), whether that cgroup has a `freezer.state`: only the real root has none; `None` where
/// it cannot be told, taken as freezable.
pub(super) fn v1_freezable(cgroup: &str, root_state: impl Fn() -> Option<bool>) -> bool {
    cgroup.lines().any(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next(), fields.next(), fields.next());
        controllers.is_some_and(|c| c.split(',').any(|c| c == "freezer"))
            && (path != Some("/") || root_state() != Some(false))
    })
}

/// From `/proc/self/mountinfo`: where this mount namespace mounts a cgroup v1 hierarchy with the
/// `freezer` controller at its root as this cgroup namespace sees it (root field `/`).
pub(super) fn freezer_mount(mountinfo: &str) -> Option<&str> {
    mountinfo.lines().find_map(|line| {
        let (mount, sb) = line.split_once(" - ")?;
        let mut mount = mount.split(' ');
        let (root, point) = (mount.nth(3)?, mount.next()?);
        let mut sb = sb.split(' ');
        let (kind, options) = (sb.next()?, sb.nth(1)?);
        (kind == "cgroup" && root == "/" && options.split(',').any(|o| o == "freezer"))
            .then_some(point)
    })
}

/// A worker woken for the drivers that has not taken them over after this long is woken again
/// (it may have found tasks and pinned in turn).
pub(super) const RESCUE_AGAIN: Duration = Duration::from_millis(50);

/// While nothing changes — no pin just flagged, no wake-up waiting to be taken — the drivers
/// are looked at this often (a look reads `/proc` for parked workers until one is found on
/// the drivers).
pub(super) const DRIVERS_EVERY: Duration = Duration::from_millis(10);

/// A pin is followed while it runs at least this often, when nothing needs a look at it every
/// scan interval (`Scan::follow_due`): when the drivers are looked at next.
pub(super) const FOLLOW_EVERY: Duration = DRIVERS_EVERY;

/// While the drivers cannot be seen yet, the watchdog looks for a parked worker waiting on the
/// I/O driver this often while the runtime runs (and each time before it sleeps).
pub(super) const LEARN_EVERY: Duration = Duration::from_secs(1);

/// How long the watchdog's start waits for the first park of a runtime's workers, to see its
/// drivers from the start ([`first_park`]). A fresh runtime's workers park within a millisecond
/// or so; this bounds a start where they do not (a start hook of the service's that blocks, a
/// machine that gives them no CPU).
pub(super) const FIRST_PARK_WITHIN: Duration = Duration::from_millis(250);

/// How long after a look whose verdict needs a second the watchdog looks again
/// ([`DriverWatch::needs_second_look`]): the same look waits that long, once at a stall's start
/// (and when the sleepers change). Waiting for the next scan instead held the pins' first reports
/// back, and lost the stall of a pin that ended before it (helper-115: 1 of 30 pins of 21.5 ms
/// under a 20 ms threshold said stalled, 28 of 30 before). A worker on its way out of the
/// park waits for a lock the microseconds another thread holds it; one kept off its CPU
/// holding it can still make the two looks agree.
pub(super) const SETTLE_AFTER: Duration = Duration::from_millis(2);

/// How many looks in a row must find every worker asleep on a futex for the start to take the
/// runtime for one without an I/O driver (a look can catch the drivers' worker in a futex of a
/// lock it takes on the way to `epoll_wait`).
pub(super) const ASLEEP_LOOKS: u32 = 3;

/// What one look at a runtime's workers, at the watchdog's start, tells of its drivers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FirstPark {
    /// A parked worker waits in `epoll_wait` on this descriptor: the I/O driver's.
    OnDrivers(i32),
    /// Every worker is parked, each in a futex: no worker waits on an I/O driver (it has none,
    /// or the look caught its worker on the way; see [`ASLEEP_LOOKS`]).
    Asleep,
    /// A parked worker's system call cannot be read (or its thread is gone): looking again
    /// would not tell more.
    Unreadable,
    /// A worker has not parked yet, or is between its park hook and its wait: look again.
    Again,
}

/// [`FirstPark`] from each worker's state at one look: `None` while it is not parked (or not
/// started), else what its thread waits in (`None` if that could not be read, or the worker
/// cannot be watched).
pub(super) fn first_park(workers: &[Option<Option<Wait>>]) -> FirstPark {
    let mut all_asleep = !workers.is_empty();
    for w in workers {
        match w {
            Some(Some(Wait::Epoll(fd))) => return FirstPark::OnDrivers(*fd),
            Some(None) => return FirstPark::Unreadable,
            Some(Some(Wait::Futex)) => {}
            Some(Some(Wait::Other)) | None => all_asleep = false,
        }
    }
    if all_asleep {
        FirstPark::Asleep
    } else {
        FirstPark::Again
    }
}

/// What the watchdog knows of the runtime's I/O driver: whether it can see who drives. It sees
/// once it has found one of the runtime's parked workers (in tokio's park, by the park hooks)
/// waiting in `epoll_wait` — that descriptor is the driver's; its start waits for the first
/// ([`first_park`]) — and while it can read the parked workers' system calls. A runtime
/// without `enable_io` (its time driver waits on a condvar, like a sleeping worker), one whose
/// park hooks pinwatch did not install, or a `/proc` it cannot read never shows it: the
/// heartbeat stays the evidence there.
#[derive(Default)]
pub(super) struct DriverView {
    /// The I/O driver's epoll descriptor, once seen.
    pub fd: Option<i32>,
    /// The last look could not read a parked worker's system call.
    pub blind: bool,
    /// The last time the watchdog looked for the descriptor.
    pub tried_at: Option<Instant>,
}

impl DriverView {
    /// Whether the drivers' verdicts are to be trusted (and the heartbeat left unarmed).
    pub fn sees(&self) -> bool {
        self.fd.is_some() && !self.blind
    }

    /// Whether to look for the descriptor at `now` (`idle`: about to sleep).
    pub fn learn_due(&self, now: Instant, idle: bool) -> bool {
        self.fd.is_none()
            && (idle
                || self
                    .tried_at
                    .is_none_or(|at| now.saturating_duration_since(at) >= LEARN_EVERY))
    }

    /// A parked worker waits in `epoll_wait` on `fd`: the state it is in, learning the
    /// descriptor when it is the first seen. One on another descriptor is not in tokio's park.
    pub fn epoll(&mut self, fd: i32) -> WorkerState {
        if *self.fd.get_or_insert(fd) == fd {
            WorkerState::OnDrivers
        } else {
            WorkerState::Busy
        }
    }
}

/// The watchdog's memory of the drivers across looks, while pins hold workers.
#[derive(Default)]
pub(super) struct DriverWatch {
    /// When the last look found them driven.
    pub driven_at: Option<Instant>,
    /// When the last look saw a worker waiting on them.
    pub on_drivers_at: Option<Instant>,
    /// When the last wake-up for them was sent, while they stay undriven.
    pub woke_at: Option<Instant>,
    /// The last look, and whether it found the runtime stalled.
    pub last: Option<(Instant, bool)>,
    /// Up to when stall time has been counted: never again before it. Kept across stalls and
    /// looks that start the watch over, so a pin's end counts only its uncounted tail.
    pub counted_to: Option<Instant>,
    /// The worker last seen waiting on them (read first at the next look).
    pub last_on_drivers: Option<usize>,
    /// The workers the last look found asleep on a futex in tokio's park, while it found the
    /// drivers undriven ([`needs_second_look`](Self::needs_second_look)).
    pub asleep: Vec<Asleep>,
}

/// A worker a look found asleep on a futex in tokio's park: its index, its thread, and the
/// thread's time on a CPU then (`None`: unreadable).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Asleep {
    pub worker: usize,
    pub tid: i32,
    pub on_cpu: Option<u64>,
}

impl DriverWatch {
    /// Whether to look at the drivers at `now`; `news`: a pin was just flagged. `Some`: no
    /// look is due, and the last one's verdict stands.
    pub fn skip(&self, now: Instant, news: bool) -> Option<bool> {
        let (at, stalled) = self.last?;
        let due =
            news || self.woke_at.is_some() || now.saturating_duration_since(at) >= DRIVERS_EVERY;
        (!due).then_some(stalled)
    }

    /// Whether the look that found `verdict`, `asleep` the workers it found asleep on a futex in
    /// tokio's park, needs a second, [`SETTLE_AFTER`] later, whose verdict is taken instead. One
    /// look can take a worker for asleep on its condvar when it is on its way through the park:
    /// in a futex of a lock taken after `epoll_wait` returned, its unpark hook not run yet (CI
    /// caught one beside `stress-ng`, and a pin beside it was reported as stalling the runtime
    /// while the others slept). So a verdict that counts on a sleeper needs one, unless the last
    /// look found it asleep too and it has not run since (its time on a CPU the same; a thread
    /// whose time cannot be read is taken at its word). Pinned workers need none (the
    /// watchdog's own record says so), nor does a verdict that the drivers are driven.
    pub fn needs_second_look(&self, verdict: Drivers, asleep: &[Asleep]) -> bool {
        matches!(verdict, Drivers::Undriven { .. })
            && !asleep
                .iter()
                .all(|a| a.on_cpu.is_none() || self.asleep.contains(a))
    }

    /// The look's verdict stands: who it found asleep is what the next look compares with (no
    /// one when the drivers were driven).
    pub fn saw_asleep(&mut self, verdict: Drivers, asleep: Vec<Asleep>) {
        self.asleep = match verdict {
            Drivers::Undriven { .. } => asleep,
            Drivers::Driven { .. } => Vec::new(),
        };
    }

    /// The look at `now` found `verdict`: whether to wake a parked worker now (`rescue`: the
    /// setting), and whether this look ends a stall that a wake-up was sent for (a hand-over:
    /// a worker is seen waiting on the drivers; a busy one may be the woken worker running
    /// the wake-up's task, not there yet).
    pub fn looked(&mut self, verdict: Drivers, now: Instant, rescue: bool) -> (bool, bool) {
        match verdict {
            Drivers::Driven { by } => {
                self.driven_at = Some(now);
                if by.is_none() {
                    return (false, false);
                }
                self.on_drivers_at = Some(now);
                (false, self.woke_at.take().is_some())
            }
            Drivers::Undriven { asleep } => {
                let due = self
                    .woke_at
                    .is_none_or(|at| now.saturating_duration_since(at) >= RESCUE_AGAIN);
                let wake = rescue && asleep > 0 && due;
                if wake {
                    self.woke_at = Some(now);
                }
                (wake, false)
            }
        }
    }

    /// Whether a pin whose poll was first seen running at `first_seen` (it began before then)
    /// may have left the drivers undriven: one that was running already when a look saw
    /// another worker waiting on them did not hold that worker (it could not take them while
    /// its poll ran); the runtime stalled while it ran, by another pin.
    pub fn blames(&self, first_seen: Instant) -> bool {
        self.on_drivers_at.is_none_or(|at| first_seen > at)
    }

    /// Undriven at `now`, since `since`: the stall time not counted yet (from the stretch's
    /// start at its first look, from the last count after). No instant is counted twice.
    pub fn stall_time(&mut self, now: Instant, since: Instant) -> Duration {
        let from = self.counted_to.map_or(since, |c| c.max(since));
        self.counted_to = Some(self.counted_to.map_or(now, |c| c.max(now)));
        now.saturating_duration_since(from)
    }

    /// No pin holds a worker now: the watch starts over, but for who was last seen on the
    /// drivers and how far stall time is counted (a pin whose end is recorded and not yet
    /// followed still has its tail to count).
    pub fn start_over(&mut self) {
        *self = DriverWatch {
            last_on_drivers: self.last_on_drivers,
            counted_to: self.counted_to,
            ..DriverWatch::default()
        };
    }
}

impl Pinned {
    /// A look at `now` found the drivers undriven while this pin holds a worker, the last look
    /// that found them driven at `driven_at`: the pin stalls the runtime. True when that is
    /// new (the pin is reported at once).
    pub fn undriven(&mut self, now: Instant, driven_at: Option<Instant>, woke: bool) -> bool {
        let since = *self
            .undriven_since
            .get_or_insert_with(|| driven_at.map_or(self.start, |d| d.max(self.start)));
        // The report's time brought up to the look's: the stall is never longer than the pin.
        self.event.duration = self
            .event
            .duration
            .max(now.saturating_duration_since(self.start));
        let d = self.event.drivers.get_or_insert_with(Default::default);
        d.undriven = self.undriven_before + now.saturating_duration_since(since);
        d.taken_over_by = None;
        d.taken_over_after = None;
        d.woke_worker |= woke;
        !std::mem::replace(&mut self.event.runtime_stalled, true)
    }

    /// pinwatch woke a worker at `now` because the heartbeat, due at `due`, had not beaten: the
    /// drivers count as undriven since then at the latest (never before the pin began), and the
    /// next beat is the hand-over.
    pub fn undriven_by_heartbeat(&mut self, now: Instant, due: Instant) {
        self.by_heartbeat = true;
        self.undriven(now, Some(due), true);
    }

    /// A look at `now` found the drivers driven again (by worker `by`, when known) after this
    /// pin left them undriven: the hand-over. Later looks only name the worker when the first
    /// could not.
    pub fn driven(&mut self, now: Instant, by: Option<usize>) {
        let Some(d) = self.event.drivers.as_mut() else {
            return;
        };
        if let Some(since) = self.undriven_since.take() {
            self.undriven_before += now.saturating_duration_since(since);
            d.undriven = self.undriven_before;
            d.taken_over_after = Some(now.saturating_duration_since(self.start));
        }
        if d.taken_over_by.is_none() {
            d.taken_over_by = by;
        }
    }
}

/// When the watchdog sleeps: after two scans in a row that found the runtime idle (no poll
/// running or followed, every core parked) with no unpark between them.
#[derive(Default)]
pub(super) struct Idle {
    /// The unpark count at the last scan that found the runtime idle.
    at: Option<u64>,
}

impl Idle {
    /// A scan found the runtime `idle` with `unparks` so far: whether to sleep now.
    pub fn scanned(&mut self, idle: bool, unparks: u64) -> bool {
        let sleep = idle && self.at == Some(unparks);
        self.at = idle.then_some(unparks);
        sleep
    }

    /// About to sleep, the count now `unparks`: whether nothing unparked since the scans that
    /// found it idle. Either way the next sleep needs two idle scans again.
    pub fn still(&mut self, unparks: u64) -> bool {
        self.at.take() == Some(unparks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_learns_the_drivers_from_the_first_worker_parked_on_them() {
        use FirstPark::*;
        let (epoll, futex, other) = (
            Some(Some(Wait::Epoll(9))),
            Some(Some(Wait::Futex)),
            Some(Some(Wait::Other)),
        );
        // One parked on the drivers settles it, whatever the others do.
        assert_eq!(first_park(&[None, epoll]), OnDrivers(9));
        assert_eq!(first_park(&[futex, epoll, other]), OnDrivers(9));
        // Every worker asleep on a futex: no I/O driver (or a look on the way to it).
        assert_eq!(first_park(&[futex, futex]), Asleep);
        // One not parked yet, or between its park hook and its wait: look again.
        assert_eq!(first_park(&[futex, None]), Again);
        assert_eq!(first_park(&[futex, other]), Again);
        // Unreadable: no look will tell.
        assert_eq!(first_park(&[futex, Some(None)]), Unreadable);
        // No workers (none started): nothing to say yet.
        assert_eq!(first_park(&[]), Again);
    }

    const MS: fn(u64) -> Duration = Duration::from_millis;
    const THRESHOLD: Duration = Duration::from_millis(20);
    const SCAN: Duration = Duration::from_millis(2);

    /// A poll first seen at `t0 + seen` ms, whose last look seeing another counter was at
    /// `t0 + after` ms.
    fn tracked(t0: Instant, after: u64, seen: u64) -> Tracked {
        Tracked::new(7, t0 + MS(seen), t0 + MS(after), HookTime::default(), None)
    }

    /// What panic hooks took: `ms` by the wall clock, `on_cpu` and `waiting` of it by the
    /// thread's accounting (ms).
    fn hook(ms: u64, on_cpu: u64, waiting: u64) -> HookTime {
        HookTime {
            nanos: ms * 1_000_000,
            on_cpu: on_cpu * 1_000_000,
            waiting: waiting * 1_000_000,
        }
    }

    fn stat(on_cpu_ms: u64, waiting_ms: u64) -> SchedStat {
        SchedStat {
            on_cpu: on_cpu_ms * 1_000_000,
            waiting: waiting_ms * 1_000_000,
        }
    }

    /// The look at `at` ms: the age, then the counting as the scan does it, with the thread's
    /// accounting `now` and `state` then.
    fn look(
        t: &mut Tracked,
        t0: Instant,
        at: u64,
        now: Option<SchedStat>,
        state: Option<char>,
    ) -> bool {
        let at = t0 + MS(at);
        let age = t.age(at, SCAN);
        if !Tracked::worth_counting(age, THRESHOLD) {
            return false;
        }
        let (pinned, _) = match t.baseline {
            Some(b) => b.pinned_time(at, now, state),
            None => (age, Duration::ZERO),
        };
        t.count(age, pinned, THRESHOLD)
    }

    #[test]
    fn a_stamped_poll_is_aged_from_its_start_and_fully_credited_at_its_first_look() {
        let t0 = Instant::now();
        let t = Tracked::stamped(7, t0 + MS(1), t0 + MS(8), HookTime::default(), None);
        // No gap credit: the start is known.
        assert_eq!(t.age(t0 + MS(8), MS(2)), MS(7));
        assert_eq!(t.age(t0 + MS(30), MS(2)), MS(29));
        // Looked at first when a second look credits all of its age: all of it counts.
        let first = super::super::stamps::first_look(MS(20));
        let b = t.baseline(t0 + MS(1) + first, stat(0, 0), MS(20), MS(2));
        assert_eq!(b.age, first);
        // A panic hook returned after the start: timed from the return, never after the look.
        let t = Tracked::stamped(
            7,
            t0 + MS(1),
            t0 + MS(8),
            HookTime::default(),
            Some(t0 + MS(3)),
        );
        assert_eq!(t.age(t0 + MS(8), MS(2)), MS(5));
        let t = Tracked::stamped(
            7,
            t0 + MS(1),
            t0 + MS(8),
            HookTime::default(),
            Some(t0 + MS(9)),
        );
        assert_eq!(t.age(t0 + MS(8), MS(2)), MS(0));
    }

    /// The thread's accounting read at `t0`: 100 ms on a CPU and 50 waiting so far; `parked`,
    /// the parks' sum then.
    fn read_at(t0: Instant, parked: Option<u64>) -> Before {
        Before {
            at: t0,
            stat: stat(100, 50),
            parked,
        }
    }

    /// Between two readings 12 ms apart the thread ran 3 ms and waited 2 for a CPU: 7 ms
    /// unaccounted, past a tick. For a poll begun 8 ms after the first reading that is a block
    /// before it (an earlier poll); for one begun 1 ms after, it may be the poll's own. Up to a
    /// tick unaccounted is a stint on a CPU not accounted yet; the readings' order reversed, or
    /// a park taken out of the time (the earlier reading moved past it), is not a block.
    #[test]
    fn a_thread_blocked_before_a_poll_is_told_from_one_that_ran_or_blocked_in_it() {
        let t0 = Instant::now();
        let before = read_at(t0, Some(0));
        let at = |ms: u64, cpu: u64, waited: u64| Before {
            at: t0 + MS(ms),
            stat: stat(100 + cpu, 50 + waited),
            parked: Some(0),
        };
        let start = t0 + MS(8);
        assert!(before.blocked_until(&at(12, 3, 2), start));
        assert!(!before.blocked_until(&at(12, 3, 2), t0 + MS(1)));
        assert!(!before.blocked_until(&at(12, 6, 2), start));
        assert!(!before.blocked_until(&at(12, 8, 0), start));
        assert!(!at(12, 3, 2).blocked_until(&before, start));
        let past_park = before.past_parks(MS(7), start);
        assert!(!past_park.blocked_until(&at(12, 3, 2), start));
    }

    #[test]
    fn a_stamped_poll_read_before_it_began_is_credited_its_own_time_at_any_first_look() {
        let t0 = Instant::now();
        // Read at 0; the poll begins at 5 and is first looked at closely at 17 (age 12, past
        // what a second look credits without the reading).
        let before = read_at(t0, None);
        let mut t = Tracked::stamped(7, t0 + MS(5), t0 + MS(17), HookTime::default(), None);
        t.before = Some(before);
        let at = t0 + MS(17);
        let baseline = |on_cpu: u64, waiting: u64, state| {
            t.baseline_since(
                before,
                at,
                stat(100 + on_cpu, 50 + waiting),
                state,
                THRESHOLD,
                SCAN,
            )
            .age
        };
        // Nothing waited for a CPU: all of its age, on a CPU or blocked.
        assert_eq!(baseline(17, 0, Some('R')), MS(12));
        assert_eq!(baseline(2, 0, Some('S')), MS(12));
        // 4 ms of waits for a CPU since the reading, and the poll's 5 ms gap could have held
        // them all: they are credited (10 on a CPU and 3 unaccounted, less the 5 before the
        // poll, plus the 4).
        assert_eq!(baseline(10, 4, Some('R')), MS(12));
        // 9 ms of waits: at most the 5 of the gap can have been before the poll; the other 4
        // were in it and do not count.
        assert_eq!(baseline(8, 9, Some('R')), MS(8));
        // A poll that began at the reading, 12 of its 17 ms waiting for a CPU: none of the waits
        // was before it; what it is credited is what a second look at 17 ms credits without a
        // reading (7 ms: the promise stands, a worker preempted longer is not pinned), not less.
        let mut t2 = Tracked::stamped(7, t0, t0 + MS(17), HookTime::default(), None);
        t2.before = Some(before);
        let b = t2.baseline_since(before, at, stat(105, 62), Some('R'), THRESHOLD, SCAN);
        assert_eq!(b.age, MS(7));
        let b = t2.baseline_since(before, at, stat(109, 58), Some('R'), THRESHOLD, SCAN);
        assert_eq!(b.age, MS(9));
        // 12 ms of waits in a 12 ms gap: they may all have been before the poll, but no more
        // than that credit is counted, as for any poll; the poll's 5 ms are then all it gets.
        let mut t3 = Tracked::stamped(7, t0 + MS(12), t0 + MS(17), HookTime::default(), None);
        t3.before = Some(before);
        let b = t3.baseline_since(before, at, stat(105, 62), Some('R'), THRESHOLD, SCAN);
        assert_eq!(b.age, MS(5));
        // The thread's accounting behind (a stint not yet added): no more than a tick of the
        // unaccounted time counts for a runnable thread, and then no less than the credit; all
        // of it for a blocked one.
        assert_eq!(baseline(0, 0, Some('R')), MS(7));
        assert_eq!(baseline(0, 0, Some('S')), MS(12));
        // Never more than its age, whatever the accounting says.
        assert_eq!(baseline(40, 0, Some('R')), MS(12));
    }

    #[test]
    fn what_a_park_spent_on_a_cpu_is_not_the_polls() {
        let t0 = Instant::now();
        let before = read_at(t0, Some(0));
        // 0–7 an earlier poll on a CPU; 7–17 parked, 3 ms of it on a CPU (the driver's turn);
        // 17–37 the poll, 10 ms on a CPU and 10 preempted, runnable at 37. Moved past the park,
        // the reading is at 10 ms, and the 30 ms accounted since 0 would be more than the 27
        // since 10: the 3 over were the park's.
        let t = Tracked::stamped(7, t0 + MS(17), t0 + MS(37), HookTime::default(), None);
        let past = before.past_parks(MS(10), t.after);
        let b = t.baseline_since(past, t0 + MS(37), stat(120, 60), Some('R'), THRESHOLD, SCAN);
        // Its 10 ms on a CPU and at most the credit's 7 of the waits, not 20 (a pin).
        assert_eq!(b.age, MS(17));
        // The price: a wait the sums cannot place is taken off the poll. Read while parked,
        // the poll starting as the park ends (the reading moved to its start), 3 ms waiting for
        // a CPU as the park ended, then 16 ms on a CPU: credited 13 of its 16, so a CPU-bound
        // poll on a loaded machine is reported that much later, never sooner.
        let t = Tracked::stamped(7, t0 + MS(20), t0 + MS(36), HookTime::default(), None);
        let past = before.past_parks(MS(20), t.after);
        let b = t.baseline_since(past, t0 + MS(36), stat(116, 53), Some('R'), THRESHOLD, SCAN);
        assert_eq!(b.age, MS(13));
    }

    #[test]
    fn a_park_between_the_reading_and_the_poll_is_not_taken_off_the_poll() {
        let t0 = Instant::now();
        let before = read_at(t0, Some(0));
        // Parked from 0 to 14 ms (none of it in the accounting), then a poll on the CPU from 14
        // to 30, looked at closely at 30: runnable, 16 ms on a CPU accounted.
        let t = Tracked::stamped(7, t0 + MS(14), t0 + MS(30), HookTime::default(), None);
        let at = t0 + MS(30);
        let baseline = |b: Before| {
            t.baseline_since(b, at, stat(116, 50), Some('R'), THRESHOLD, SCAN)
                .age
        };
        // Left in, the park would count as the runnable thread's unaccounted time, a tick of it
        // at most, and be taken off the poll: it would get only what a look without a reading
        // credits.
        assert_eq!(baseline(before), MS(7));
        // Left out: the poll's own 16 ms.
        let past = before.past_parks(MS(14), t.after);
        assert_eq!(past.at, t0 + MS(14));
        assert_eq!(baseline(past), MS(16));
        // A park sum read wrong (a park that ended while it was read) never moves the reading
        // past the poll's start, nor before the reading.
        assert_eq!(before.past_parks(MS(40), t.after).at, t0 + MS(14));
        assert_eq!(before.past_parks(Duration::MAX, t.after).at, t0 + MS(14));
        assert_eq!(before.past_parks(MS(3), t0).at, t0);
    }

    #[test]
    fn age_credits_the_gap_before_the_first_look_up_to_one_and_a_half_intervals() {
        let t0 = Instant::now();
        // Looks on time: the gap is one interval, all of it credited.
        let t = tracked(t0, 0, 2);
        assert_eq!(t.age(t0 + MS(10), SCAN), MS(10));
        // A watchdog kept away 50 ms: the gap is credited 3 ms only, never the lateness.
        let t = tracked(t0, 0, 50);
        assert_eq!(t.age(t0 + MS(60), SCAN), MS(13));
        // Before the first look: no negative age, only the credit.
        assert_eq!(t.age(t0, SCAN), MS(3));
    }

    #[test]
    fn a_poll_of_the_threshold_plus_one_interval_is_pinned_while_looks_are_on_time() {
        let t0 = Instant::now();
        // The poll starts at 1 ms (between the looks at 0 and 2) and runs 22 ms.
        let mut t = tracked(t0, 0, 2);
        let mut flagged = None;
        for at in (2..=23).step_by(2) {
            if look(&mut t, t0, at, None, None) {
                flagged = Some(at);
                break;
            }
        }
        assert_eq!(flagged, Some(20), "a look before its end at 23 ms sees it");
    }

    #[test]
    fn a_poll_shorter_than_the_threshold_less_the_credit_is_never_pinned() {
        let t0 = Instant::now();
        // It began just after the look at 0 and ends at 16.9 ms: 17 ms < 20 - 3.
        let mut t = tracked(t0, 0, 2);
        assert!((2..=16).all(|at| !look(&mut t, t0, at, None, None)));
    }

    #[test]
    fn nothing_is_counted_before_half_the_threshold() {
        let t0 = Instant::now();
        let t = tracked(t0, 0, 2);
        assert!(!Tracked::worth_counting(t.age(t0 + MS(8), SCAN), THRESHOLD));
        assert!(Tracked::worth_counting(t.age(t0 + MS(10), SCAN), THRESHOLD));
    }

    #[test]
    fn the_baseline_credits_at_most_a_quarter_of_the_threshold_plus_an_interval() {
        let t0 = Instant::now();
        let t = tracked(t0, 0, 2);
        let on_time = t.baseline(t0 + MS(4), stat(0, 0), THRESHOLD, SCAN);
        assert_eq!(on_time.age, MS(4));
        // A second look 30 ms late: credited 7 ms (5 + 2), not 32.
        let late = t.baseline(t0 + MS(32), stat(0, 0), THRESHOLD, SCAN);
        assert_eq!(late.age, MS(7));
    }

    #[test]
    fn a_wait_for_a_cpu_after_the_baseline_does_not_count() {
        let t0 = Instant::now();
        let mut t = tracked(t0, 0, 2);
        t.baseline = Some(t.baseline(t0 + MS(4), stat(100, 50), THRESHOLD, SCAN));
        // 40 ms later: 6 ms on a CPU, 34 ms waiting for one. Runnable now.
        let (pinned, waited) =
            t.baseline
                .unwrap()
                .pinned_time(t0 + MS(44), Some(stat(106, 84)), Some('R'));
        assert_eq!((pinned, waited), (MS(4 + 6), MS(34)));
        assert!(!look(&mut t, t0, 44, Some(stat(106, 84)), Some('R')));
    }

    #[test]
    fn unaccounted_time_is_blocked_time_only_for_a_blocked_thread() {
        let t0 = Instant::now();
        let t = tracked(t0, 0, 2);
        let b = t.baseline(t0 + MS(4), stat(10, 10), THRESHOLD, SCAN);
        // 30 ms later the kernel has accounted nothing: asleep, all 30 count; runnable, a tick.
        let now = Some(stat(10, 10));
        assert_eq!(b.pinned_time(t0 + MS(34), now, Some('S')).0, MS(34));
        assert_eq!(b.pinned_time(t0 + MS(34), now, Some('D')).0, MS(34));
        assert_eq!(b.pinned_time(t0 + MS(34), now, Some('R')).0, MS(4) + TICK);
        // No accounting to read (the thread is gone): the time since the baseline counts.
        assert_eq!(
            b.pinned_time(t0 + MS(34), None, None),
            (MS(34), Duration::ZERO)
        );
    }

    #[test]
    fn a_blocked_poll_is_pinned_by_its_blocked_time() {
        let t0 = Instant::now();
        let mut t = tracked(t0, 0, 2);
        t.baseline = Some(t.baseline(t0 + MS(4), stat(0, 0), THRESHOLD, SCAN));
        assert!(!look(&mut t, t0, 18, Some(stat(0, 0)), Some('S')));
        assert!(look(&mut t, t0, 20, Some(stat(0, 0)), Some('S')));
    }

    #[test]
    fn counted_time_never_goes_back() {
        let t0 = Instant::now();
        let mut t = tracked(t0, 0, 2);
        t.baseline = Some(t.baseline(t0 + MS(4), stat(0, 0), THRESHOLD, SCAN));
        // Blocked at 18 ms: 18 ms counted. At 20 ms it is runnable (its sleep just ended) and
        // the kernel has accounted nothing: that look alone counts 4 + 4 — but 18 stands.
        assert!(!look(&mut t, t0, 18, Some(stat(0, 0)), Some('S')));
        assert_eq!(t.counted, MS(18));
        assert!(!look(&mut t, t0, 20, Some(stat(0, 0)), Some('R')));
        assert_eq!(t.counted, MS(18));
        // Blocked again at 22 ms: pinned.
        assert!(look(&mut t, t0, 22, Some(stat(0, 0)), Some('S')));
    }

    #[test]
    fn a_poll_is_pinned_only_when_both_its_age_and_its_pinned_time_reach_the_threshold() {
        let t0 = Instant::now();
        let mut t = tracked(t0, 0, 2);
        assert!(!t.count(MS(19), MS(30), THRESHOLD), "too young");
        assert!(
            t.count(MS(20), MS(5), THRESHOLD),
            "the time found earlier stands"
        );
        let mut t = tracked(t0, 0, 2);
        assert!(
            !t.count(MS(30), MS(19), THRESHOLD),
            "not pinned long enough"
        );
        assert!(t.count(MS(30), MS(20), THRESHOLD));
    }

    #[test]
    fn only_a_poll_blocked_in_the_kernel_is_armed() {
        assert!(worth_arming(Some('S')));
        assert!(worth_arming(Some('D')));
        assert!(!worth_arming(Some('R')));
        assert!(!worth_arming(Some('t')));
        assert!(!worth_arming(None));
    }

    #[test]
    fn panic_hooks_time_is_left_out_of_the_bounds() {
        let t0 = Instant::now();
        let mut t = tracked(t0, 0, 2);
        t.baseline = Some(t.baseline(t0 + MS(4), stat(0, 0), THRESHOLD, SCAN));
        // A 300 ms hook ran (the slot's total is 300 ms): every bound moves 300 ms later.
        t.leave_out(hook(300, 0, 0), t0 + MS(400));
        assert_eq!(t.first_seen, t0 + MS(302));
        assert_eq!(t.after, t0 + MS(300));
        assert_eq!(t.baseline.unwrap().at, t0 + MS(304));
        assert_eq!(t.began, t0, "a stall blames the first bound");
        // The same total again moves nothing; bounds never pass the look.
        t.leave_out(hook(300, 0, 0), t0 + MS(400));
        assert_eq!(t.after, t0 + MS(300));
        let mut t = tracked(t0, 0, 2);
        t.leave_out(hook(1_000, 0, 0), t0 + MS(50));
        assert_eq!((t.first_seen, t.after), (t0 + MS(50), t0 + MS(50)));
    }

    #[test]
    fn a_poll_first_seen_after_its_panic_hook_returned_is_timed_from_the_return() {
        let t0 = Instant::now();
        let t = Tracked::new(7, t0 + MS(10), t0, HookTime::default(), Some(t0 + MS(6)));
        assert_eq!(t.after, t0 + MS(6));
        assert_eq!(t.began, t0, "a stall blames the first bound");
        // A return before the bound, or after the first look, moves it no further than those.
        assert_eq!(
            Tracked::new(
                7,
                t0 + MS(10),
                t0 + MS(8),
                HookTime::default(),
                Some(t0 + MS(6))
            )
            .after,
            t0 + MS(8)
        );
        assert_eq!(
            Tracked::new(7, t0 + MS(10), t0, HookTime::default(), Some(t0 + MS(12))).after,
            t0 + MS(10)
        );
    }

    #[test]
    fn an_armed_poll_that_ended_unseen_is_judged_by_its_recorded_end() {
        let t0 = Instant::now();
        let mut t = tracked(t0, 0, 2);
        t.baseline = Some(t.baseline(t0 + MS(4), stat(0, 0), THRESHOLD, SCAN));
        // It ended at 25 ms, seen only at 200 ms: pinned for 25 ms from its lower bound.
        let judged = t.ended_pinned(t0 + MS(25), Duration::ZERO, THRESHOLD, SCAN);
        assert_eq!(judged, Some(MS(25)));
        // Ended at 15 ms: not pinned.
        let short = t.ended_pinned(t0 + MS(15), Duration::ZERO, THRESHOLD, SCAN);
        assert_eq!(short, None);
    }

    #[test]
    fn a_poll_is_not_timed_for_the_time_the_process_stood_still() {
        let t0 = Instant::now();
        let judged =
            |t: &Tracked, end: u64| t.ended_pinned(t0 + MS(end), Duration::ZERO, THRESHOLD, SCAN);
        let mut t = tracked(t0, 0, 2);
        t.baseline = Some(t.baseline(t0 + MS(4), stat(0, 0), THRESHOLD, SCAN));
        // Blocked in a 10 ms call across a 200 ms stop (found at 212 ms): 12 ms, not pinned.
        t.leave_out_frozen(MS(200).as_nanos() as u64, t0 + MS(212), SCAN);
        assert_eq!(t.age(t0 + MS(212), SCAN), MS(12));
        assert_eq!(judged(&t, 211), None);
        let (pinned, _) =
            t.baseline
                .unwrap()
                .pinned_time(t0 + MS(212), Some(stat(0, 0)), Some('S'));
        assert_eq!(pinned, MS(12));
        // The same stop told again leaves out nothing more.
        t.leave_out_frozen(MS(200).as_nanos() as u64, t0 + MS(212), SCAN);
        assert_eq!(t.age(t0 + MS(212), SCAN), MS(12));
        // A poll blocked 30 ms besides the stop is still pinned, for its wall time.
        let mut long = tracked(t0, 0, 2);
        long.baseline = Some(long.baseline(t0 + MS(4), stat(0, 0), THRESHOLD, SCAN));
        long.leave_out_frozen(MS(200).as_nanos() as u64, t0 + MS(232), SCAN);
        assert_eq!(judged(&long, 230), Some(MS(230)));
        // A poll that ended (30 ms, pinned) before a 200 ms stop found after it: judged as
        // without the stop. One that ended 1 ms after it was found: all of it left out.
        let mut before = tracked(t0, 0, 2);
        before.baseline = Some(before.baseline(t0 + MS(4), stat(0, 0), THRESHOLD, SCAN));
        before.leave_out_frozen_before(MS(200).as_nanos() as u64, t0 + MS(30), t0 + MS(232), SCAN);
        assert_eq!(judged(&before, 30), Some(MS(30)));
        let mut across = tracked(t0, 0, 2);
        across.baseline = Some(across.baseline(t0 + MS(4), stat(0, 0), THRESHOLD, SCAN));
        across.leave_out_frozen_before(MS(200).as_nanos() as u64, t0 + MS(211), t0 + MS(212), SCAN);
        assert_eq!(across.frozen, MS(199));
        assert_eq!(judged(&across, 211), None);
        // A poll first seen 1 ms after a 200 ms stop (it may have begun before): it loses at
        // most its age, and is timed from there as any other.
        let mut young = tracked(t0 + MS(300), 0, 1);
        young.leave_out_frozen(MS(400).as_nanos() as u64, t0 + MS(301), SCAN);
        assert_eq!(young.age(t0 + MS(301), SCAN), Duration::ZERO);
        assert_eq!(young.age(t0 + MS(331), SCAN), MS(30));
    }

    #[test]
    fn a_late_wake_is_a_freeze_only_for_the_time_the_watchdog_did_not_run_or_wait_for_a_cpu() {
        let t0 = Instant::now();
        let mut f = Frozen::default();
        // The first check reads the watchdog's accounting.
        f.check(t0, Duration::ZERO, true, own(1, 10), no_switches);
        // On time, its reading fresh: not read.
        f.check(
            t0 + MS(2),
            MS(1),
            true,
            || panic!("read on time"),
            no_switches,
        );
        // 150 ms late, 10 ms of it waiting for a CPU and 1 ms running: 139 ms frozen, less
        // the tick the kernel may not have accounted yet.
        f.wake();
        f.check(t0 + MS(160), MS(150), true, own(2, 20), no_switches);
        assert_eq!(f.total, (MS(139) - TICK).as_nanos() as u64);
        assert_eq!(f.at_wake, 0);
        let told = f.total;
        // 5 ms late with nothing accounted (a stint not accounted yet, timer slack): no freeze.
        f.check(t0 + MS(166), MS(5), true, own(2, 20), no_switches);
        assert_eq!(f.total, told);
        // 50 ms late, all of it waiting for a CPU (a loaded machine): no freeze.
        f.wake();
        f.check(t0 + MS(220), MS(50), true, own(2, 70), no_switches);
        assert_eq!(f.total, told);
        assert_eq!(f.at_wake, f.total);
        // Its accounting unreadable: nothing is told, and the next check reads it again.
        f.check(t0 + MS(300), MS(60), true, || None, no_switches);
        assert_eq!(f.total, told);
        // Late with no reading to compare: read, nothing told.
        f.check(t0 + MS(400), MS(60), true, own(3, 70), no_switches);
        assert_eq!(f.total, told);
        // A wake from idle, on time, reads nothing, however stale the reading.
        f.check(
            t0 + MS(400) + OWN_READ_EVERY,
            MS(0),
            false,
            || panic!("read from idle"),
            no_switches,
        );
        // A stale reading is read again on a timely check.
        let mut read = false;
        f.check(
            t0 + MS(400) + OWN_READ_EVERY,
            MS(0),
            true,
            || {
                read = true;
                Some(stat(3, 70))
            },
            no_switches,
        );
        assert!(read);
    }

    #[test]
    fn only_a_v1_freezer_cgroup_other_than_the_root_may_freeze_the_process() {
        let at = |path: &str| format!("6:freezer:{path}\n4:memory:/x\n0::/\n");
        // cgroup v2 only: its freezer wakes every thread through the signal path.
        assert!(!v1_freezable("0::/user.slice\n", || panic!("not read")));
        // A v1 freezer cgroup of its own (`docker pause` on a v1 host).
        assert!(v1_freezable(&at("/docker/abc"), || panic!("not read")));
        assert!(v1_freezable("3:cpu,freezer:/lxc/a\n", || panic!(
            "not read"
        )));
        // At `/`: the root (no `freezer.state`), or a namespace's root (one), or unknown.
        assert!(!v1_freezable(&at("/"), || Some(false)));
        assert!(v1_freezable(&at("/"), || Some(true)));
        assert!(v1_freezable(&at("/"), || None));
        // Another v1 controller at a cgroup of its own says nothing.
        assert!(!v1_freezable("4:memory:/x\n6:freezer:/\n", || Some(false)));
    }

    #[test]
    fn the_freezer_mount_is_the_one_of_this_namespaces_root() {
        let info = "\
25 1 254:0 / / rw,relatime - ext4 /dev/vda rw
31 30 0:27 /.. /sys/fs/cgroup/freezer ro,nosuid - cgroup cgroup rw,freezer
32 30 0:28 / /sys/fs/cgroup/cpu rw,nosuid shared:9 - cgroup cgroup rw,cpu
33 30 0:29 / /mnt/fz rw,nosuid shared:10 - cgroup pinwatch rw,cpuacct,freezer
34 30 0:30 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
";
        // The host's root bind-mounted in a namespace (`/..`) is not this one's.
        assert_eq!(freezer_mount(info), Some("/mnt/fz"));
        assert_eq!(
            freezer_mount(&info.replace("/mnt/fz", "/x").replace(" / /x", " /.. /x")),
            None
        );
        assert_eq!(freezer_mount("garbage\n"), None);
    }

    /// The watchdog's accounting, as `Frozen::check` reads it.
    fn own(on_cpu_ms: u64, waiting_ms: u64) -> impl FnOnce() -> Option<SchedStat> {
        move || Some(stat(on_cpu_ms, waiting_ms))
    }

    /// Its voluntary context switches unknown: any late wake is taken for a stop.
    fn no_switches() -> Option<u64> {
        None
    }

    #[test]
    fn a_late_wake_is_a_freeze_only_if_the_watchdog_was_switched_out_more_than_its_wait() {
        let t0 = Instant::now();
        let mut f = Frozen::default();
        f.check(t0, Duration::ZERO, true, own(1, 10), no_switches);
        // 100 ms late, switched out once (the wait's sleep): its CPU was taken from it (a
        // VM's steal), or its timer fired late; the workers ran on. No freeze.
        f.waits(Some(40));
        f.check(t0 + MS(102), MS(100), true, own(1, 10), || Some(41));
        assert_eq!(f.total, 0);
        // Switched out twice: the sleep, and the stop.
        f.waits(Some(41));
        f.check(t0 + MS(204), MS(100), true, own(1, 10), || Some(43));
        assert_eq!(f.total, (MS(100) - TICK).as_nanos() as u64);
        let told = f.total;
        // The switches unreadable then: taken for a stop.
        f.waits(None);
        f.check(t0 + MS(306), MS(100), true, own(1, 10), || Some(50));
        assert_eq!(f.total, told + (MS(100) - TICK).as_nanos() as u64);
        let told = f.total;
        // Late between two looks: no wait to compare with, taken for a stop (the switches
        // read before the last wait are not this stretch's).
        f.waits(Some(50));
        f.check(t0 + MS(408), MS(100), false, own(1, 10), || Some(50));
        assert_eq!(f.total, told + (MS(100) - TICK).as_nanos() as u64);
        // On time: the switches are not read.
        f.waits(Some(50));
        f.check(t0 + MS(410), MS(1), true, own(1, 10), || {
            panic!("switches read on time")
        });
    }

    #[test]
    fn an_ended_poll_is_not_credited_its_waits_for_a_cpu_nor_its_panic_hooks() {
        let t0 = Instant::now();
        let mut t = tracked(t0, 0, 2);
        t.baseline = Some(t.baseline(t0 + MS(4), stat(0, 0), THRESHOLD, SCAN));
        // 30 ms, of which 12 waiting for a CPU: 18 pinned.
        assert_eq!(t.ended_pinned(t0 + MS(30), MS(12), THRESHOLD, SCAN), None);
        // 50 ms, of which a 25 ms panic hook (left out at the end): 25 pinned, and its
        // duration says 25.
        let hooked = |end| {
            let mut t = tracked(t0, 0, 2);
            t.baseline = Some(t.baseline(t0 + MS(4), stat(0, 0), THRESHOLD, SCAN));
            t.leave_out(hook(25, 0, 0), t0 + MS(end));
            t.ended_pinned(t0 + MS(end), Duration::ZERO, THRESHOLD, SCAN)
        };
        assert_eq!(hooked(50), Some(MS(25)));
        assert_eq!(hooked(40), None);
    }

    #[test]
    fn an_ended_poll_without_a_baseline_is_judged_by_its_age() {
        let t0 = Instant::now();
        // No schedstat to read (the kernel keeps none): the age alone decides.
        let t = tracked(t0, 0, 2);
        assert_eq!(
            t.ended_pinned(t0 + MS(21), Duration::ZERO, THRESHOLD, SCAN),
            Some(MS(21))
        );
        assert_eq!(
            t.ended_pinned(t0 + MS(19), Duration::ZERO, THRESHOLD, SCAN),
            None
        );
    }

    /// A loaded machine: the watchdog's second look comes 30 ms late, and the worker spent
    /// the time since waiting for a CPU. Its age is past the threshold, but it is not pinned.
    #[test]
    fn a_late_second_look_does_not_turn_a_preempted_worker_into_a_pin() {
        let t0 = Instant::now();
        let mut t = tracked(t0, 0, 2);
        t.baseline = Some(t.baseline(t0 + MS(32), stat(5, 0), THRESHOLD, SCAN));
        // 10 ms later: 1 ms on a CPU, 9 waiting for one; runnable.
        assert!(!look(&mut t, t0, 42, Some(stat(6, 9)), Some('R')));
        assert!(t.age(t0 + MS(42), SCAN) >= THRESHOLD);
        assert!(t.counted < THRESHOLD, "{:?}", t.counted);
    }

    #[test]
    fn the_gap_credit_follows_the_scan_interval_in_force() {
        let t0 = Instant::now();
        // A 2 ms threshold scans every 0.5 ms: a gap of 10 ms is credited 0.75 ms.
        let t = tracked(t0, 0, 10);
        let half = Duration::from_micros(500);
        assert_eq!(t.age(t0 + MS(10), half), Duration::from_micros(750));
    }

    fn pinned(t0: Instant) -> Pinned {
        let t = tracked(t0, 0, 2);
        let event = PinnedEvent::for_test(
            1,
            crate::event::State::InProgress,
            crate::event::Reason::Sleep,
            20,
            1,
        );
        Pinned::new(&t, 10, 11, event, t0 + MS(22))
    }

    #[test]
    fn a_pin_completes_with_its_duration_from_its_lower_bound_to_its_end() {
        let t0 = Instant::now();
        let mut p = pinned(t0);
        p.complete(t0 + MS(130), MS(3));
        assert_eq!(p.event.state, crate::event::State::Completed);
        assert_eq!(p.event.duration, MS(130));
        assert_eq!(p.event.cpu_wait, MS(3));
        assert_eq!(p.event.report, 2);
    }

    /// A pin's waits for a CPU lie inside it: never reported longer than it (a panic hook whose
    /// accounting could not be read leaves its waits in the thread's, its wall time out).
    #[test]
    fn a_pins_cpu_wait_is_never_longer_than_the_pin() {
        let t0 = Instant::now();
        let mut p = pinned(t0);
        p.again(t0 + MS(100), MS(400), None);
        assert_eq!((p.event.duration, p.event.cpu_wait), (MS(100), MS(100)));
        p.complete(t0 + MS(150), MS(700));
        assert_eq!((p.event.duration, p.event.cpu_wait), (MS(150), MS(150)));
    }

    /// A poll's panic hooks are left out of what its thread did, as if they had not run: one
    /// that computed makes no pin of a preempted poll, one that waited for a CPU hides no
    /// blocked one (helper-110: 6 of 6 and 0 of 6), and the reading before the poll moves past
    /// them too.
    #[test]
    fn a_polls_hooks_count_neither_as_its_work_nor_as_its_waits() {
        let t0 = Instant::now();
        let read = || {
            let mut t = tracked(t0, 0, 2);
            t.baseline = Some(t.baseline(t0 + MS(4), stat(1, 0), THRESHOLD, SCAN));
            t
        };
        // Preempted: from the baseline to 60 ms it computed 6 ms and waited 20 for a CPU,
        // around a 30 ms hook that computed throughout: 6 ms of work.
        let mut t = read();
        t.leave_out(hook(30, 30, 0), t0 + MS(40));
        assert_eq!(
            t.baseline.map(|b| (b.at, b.stat)),
            Some((t0 + MS(34), stat(31, 0)))
        );
        assert!(!look(&mut t, t0, 60, Some(stat(1 + 30 + 6, 20)), Some('R')));
        assert!(t.age(t0 + MS(60), SCAN) >= THRESHOLD);
        assert!(t.counted < THRESHOLD, "{:?}", t.counted);
        // Blocked: from the baseline to 80 ms it slept 26 ms around a 50 ms hook that computed
        // 5 ms and waited 45 for a CPU: pinned, its hook's waits not its own.
        let mut t = read();
        t.leave_out(hook(50, 5, 45), t0 + MS(60));
        assert!(look(&mut t, t0, 80, Some(stat(1 + 5, 45)), Some('S')));
        let b = t.baseline.unwrap();
        assert_eq!(b.waited(Some(stat(1 + 5, 45))), Duration::ZERO);
        // The same total again moves nothing.
        t.leave_out(hook(50, 5, 45), t0 + MS(90));
        assert_eq!(t.baseline.map(|b| b.stat), Some(b.stat));
        // A stamped poll's reading from before it began moves past them too.
        let mut t = tracked(t0, 0, 2);
        t.before = Some(Before {
            at: t0,
            stat: stat(0, 0),
            parked: Some(0),
        });
        t.leave_out(hook(30, 10, 20), t0 + MS(40));
        let before = t.before.unwrap();
        assert_eq!((before.at, before.stat), (t0 + MS(30), stat(10, 20)));
    }

    #[test]
    fn a_pins_cpu_wait_counts_its_hooks_waits_out_and_to_its_last_probe_past_its_thread() {
        let t0 = Instant::now();
        let mut p = pinned(t0);
        let stat = |waiting_ms: u64| SchedStat {
            on_cpu: 0,
            waiting: waiting_ms * 1_000_000,
        };
        p.baseline = None;
        assert_eq!(p.cpu_wait(|| Some(stat(50))), Duration::ZERO);
        p.baseline = Some(Baseline {
            at: t0,
            age: Duration::ZERO,
            stat: stat(10),
        });
        // No probe yet: up to now; with the thread gone, nothing to count to.
        assert_eq!(p.cpu_wait(|| Some(stat(50))), MS(40));
        assert_eq!(p.cpu_wait(|| None), Duration::ZERO);
        // A probe read 30 ms of waits: a thread gone since counts to it.
        p.probes.push(Probe {
            reading: Some(Reading {
                at: t0 + MS(30),
                stat: stat(40),
                switches: None,
            }),
            ..Probe::default()
        });
        assert_eq!(p.cpu_wait(|| None), MS(30));
        assert_eq!(p.cpu_wait(|| Some(stat(50))), MS(40));
        // A panic hook that waited 450 ms for a CPU ran since that probe: counted out, up to
        // now or up to the probe.
        p.leave_out(hook(460, 10, 450));
        assert_eq!(p.cpu_wait(|| Some(stat(500))), MS(40));
        assert_eq!(p.cpu_wait(|| None), MS(30));
    }

    #[test]
    fn a_pins_panic_hooks_move_its_start_in_the_event_too() {
        let t0 = Instant::now();
        let mut p = pinned(t0);
        let start = p.event.start;
        p.leave_out(hook(40, 0, 0));
        p.leave_out(hook(40, 0, 0));
        assert_eq!(p.start, t0 + MS(40));
        assert_eq!(p.event.start, start + MS(40));
        assert_eq!(p.began, t0);
        p.complete(t0 + MS(100), Duration::ZERO);
        assert_eq!(p.event.duration, MS(60), "start + duration is its end");
    }

    #[test]
    fn a_pin_is_reported_and_sampled_again_when_each_is_due() {
        let t0 = Instant::now();
        let mut p = pinned(t0);
        let second = Duration::from_secs(1);
        assert!(!p.resend_due(t0 + MS(1021), second));
        assert!(p.resend_due(t0 + MS(1022), second));
        assert!(!p.sample_due(t0 + MS(121), MS(100)));
        assert!(p.sample_due(t0 + MS(122), MS(100)));
        p.again(t0 + MS(1022), MS(2), Some(4));
        assert_eq!(
            (
                p.event.duration,
                p.event.report,
                p.event.tasks_queued_behind
            ),
            (MS(1022), 2, Some(4))
        );
        assert!(!p.resend_due(t0 + MS(1500), second));
    }

    #[test]
    fn a_retracted_pin_says_how_long_it_ran() {
        let t0 = Instant::now();
        let mut p = pinned(t0);
        p.retract(t0 + MS(60));
        assert_eq!(p.event.state, crate::event::State::Retracted);
        assert_eq!((p.event.duration, p.event.report), (MS(60), 2));
    }

    #[test]
    fn a_stall_is_said_once_with_the_latest_lateness_kept_the_most() {
        let t0 = Instant::now();
        let mut p = pinned(t0);
        assert!(p.stalls(MS(150)));
        assert!(!p.stalls(MS(120)));
        assert!(!p.stalls(MS(400)));
        assert!(p.event.runtime_stalled);
        assert_eq!(p.event.heartbeat_late, Some(MS(400)));
    }

    #[test]
    fn the_heartbeat_is_late_by_what_passed_its_period() {
        let t0 = Instant::now();
        let every = MS(50);
        assert_eq!(
            Stall::lateness(t0, every, t0 + MS(30)),
            (Duration::ZERO, t0 + every)
        );
        assert_eq!(
            Stall::lateness(t0, every, t0 + MS(250)),
            (MS(200), t0 + every)
        );
        // A clock read before the beat (another thread beat after it) is on time.
        assert_eq!(Stall::lateness(t0 + MS(5), every, t0).0, Duration::ZERO);
    }

    #[test]
    fn a_stall_needs_the_heartbeat_late_past_the_threshold_and_the_floor() {
        let t0 = Instant::now();
        let late = |d| Stall::past_bound(t0, t0 + d, THRESHOLD);
        assert!(late(MS(99)).is_none());
        assert!(late(STALL_FLOOR).is_none());
        assert!(late(MS(101)).is_some());
        // A threshold above the floor is the bound.
        assert!(Stall::past_bound(t0, t0 + MS(400), MS(500)).is_none());
        assert!(Stall::past_bound(t0, t0 + MS(501), MS(500)).is_some());
        // The watchdog following a pin wakes for the first look that can find it.
        for threshold in [THRESHOLD, MS(500)] {
            let after = Stall::judged_after(t0, threshold).unwrap();
            assert!(Stall::past_bound(t0, after, threshold).is_none());
            let just = after + Duration::from_micros(1);
            assert!(Stall::past_bound(t0, just, threshold).is_some());
        }
        assert_eq!(Stall::judged_after(t0, Duration::MAX), None);
        // A heartbeat too slow to add to an instant is never late, and no panic.
        let (late, due) = Stall::lateness(t0, Duration::MAX, t0 + MS(500));
        assert_eq!(late, Duration::ZERO);
        assert!(due > t0 + MS(500));
    }

    #[test]
    fn a_stall_blames_a_pin_for_the_time_it_ran_while_the_beat_was_overdue() {
        let t0 = Instant::now();
        // Due at 50 ms, seen at 350 ms: 300 ms late.
        let now = t0 + MS(350);
        let stall = Stall::past_bound(t0 + MS(50), now, THRESHOLD).unwrap();
        assert_eq!(
            stall.blames(t0 + MS(10), now),
            Some(MS(300)),
            "running when due"
        );
        assert_eq!(stall.blames(t0 + MS(50), now), Some(MS(300)));
        // Began later, in a runtime stalled already (pins back to back): its own time counts.
        assert_eq!(stall.blames(t0 + MS(200), now), Some(MS(150)));
        assert_eq!(
            stall.blames(t0 + MS(300), now),
            None,
            "began 50 ms ago: the runtime may just have come back"
        );
        // A poll found ended: only the time it ran counts, not the scan's lateness.
        assert_eq!(stall.blames(t0 + MS(10), t0 + MS(200)), Some(MS(150)));
        assert_eq!(
            stall.blames(t0 + MS(200), t0 + MS(290)),
            None,
            "a 90 ms pin overlapped the overdue beat by less than the bound"
        );
    }

    #[test]
    fn the_drivers_are_undriven_only_when_every_worker_is_pinned_or_asleep() {
        use WorkerState::*;
        assert_eq!(
            Drivers::of(&[Pinned, OnCondvar]),
            Drivers::Undriven { asleep: 1 }
        );
        assert_eq!(
            Drivers::of(&[Pinned, Pinned]),
            Drivers::Undriven { asleep: 0 }
        );
        assert_eq!(
            Drivers::of(&[Pinned, OnDrivers]),
            Drivers::Driven { by: Some(1) }
        );
        // A worker running tasks polls the drivers between them; one on its way into the
        // park, or not known, may be about to take them: driven, by nobody known.
        assert_eq!(Drivers::of(&[Pinned, Busy]), Drivers::Driven { by: None });
        assert_eq!(
            Drivers::of(&[OnCondvar, Busy, OnDrivers]),
            Drivers::Driven { by: Some(2) }
        );
    }

    #[test]
    fn a_worker_is_woken_once_for_undriven_drivers_then_again_only_if_they_stay_so() {
        let t0 = Instant::now();
        let mut w = DriverWatch::default();
        let undriven = Drivers::Undriven { asleep: 1 };
        assert_eq!(w.looked(undriven, t0, true), (true, false));
        assert_eq!(w.looked(undriven, t0 + MS(2), true), (false, false));
        assert_eq!(w.looked(undriven, t0 + RESCUE_AGAIN, true), (true, false));
        // Taken over: the hand-over is counted once.
        let driven = Drivers::Driven { by: Some(1) };
        assert_eq!(w.looked(driven, t0 + MS(60), true), (false, true));
        assert_eq!(w.looked(driven, t0 + MS(62), true), (false, false));
        assert_eq!(w.driven_at, Some(t0 + MS(62)));
        // Nobody asleep to wake (every worker pinned), or the rescue off: no wake-up.
        let mut w = DriverWatch::default();
        assert_eq!(
            w.looked(Drivers::Undriven { asleep: 0 }, t0, true),
            (false, false)
        );
        assert_eq!(w.looked(undriven, t0, false), (false, false));
        assert_eq!(
            w.looked(Drivers::Driven { by: None }, t0, false),
            (false, false)
        );
    }

    #[test]
    fn a_busy_worker_after_a_wake_up_is_not_yet_a_hand_over() {
        let t0 = Instant::now();
        let mut w = DriverWatch::default();
        assert_eq!(
            w.looked(Drivers::Undriven { asleep: 1 }, t0, true),
            (true, false)
        );
        // The woken worker runs the wake-up's task: driven, but nobody is on them yet.
        let busy = Drivers::Driven { by: None };
        assert_eq!(w.looked(busy, t0 + MS(2), true), (false, false));
        assert_eq!((w.driven_at, w.on_drivers_at), (Some(t0 + MS(2)), None));
        assert!(w.woke_at.is_some(), "still waited for");
        assert_eq!(
            w.looked(Drivers::Driven { by: Some(0) }, t0 + MS(4), true),
            (false, true)
        );
        assert_eq!(w.on_drivers_at, Some(t0 + MS(4)));
    }

    #[test]
    fn only_pins_begun_after_a_worker_was_seen_on_the_drivers_are_blamed() {
        let t0 = Instant::now();
        let mut w = DriverWatch::default();
        assert!(w.blames(t0), "nothing seen: every pin may have");
        w.looked(Drivers::Driven { by: Some(1) }, t0 + MS(500), false);
        // Pin A ran on worker 0 while worker 1 drove; pin B took worker 1 after.
        assert!(!w.blames(t0), "A");
        assert!(w.blames(t0 + MS(510)), "B");
        // A busy worker is no sighting: a pin begun before the look may be its own poll.
        w.looked(Drivers::Driven { by: None }, t0 + MS(600), false);
        assert!(w.blames(t0 + MS(550)));
    }

    #[test]
    fn a_stall_s_time_counts_from_its_start_once_then_from_each_look() {
        let t0 = Instant::now();
        let mut w = DriverWatch::default();
        // First found at 22 ms, undriven since the pin's start.
        assert_eq!(w.stall_time(t0 + MS(22), t0), MS(22));
        assert_eq!(w.stall_time(t0 + MS(32), t0), MS(10));
        // Driven again: the next stall counts from its own start.
        w.looked(Drivers::Driven { by: Some(0) }, t0 + MS(40), false);
        assert_eq!(w.stall_time(t0 + MS(100), t0 + MS(70)), MS(30));
        // A stall from before the last count (a pin flagged late): only what is new.
        w.start_over();
        assert_eq!(w.stall_time(t0 + MS(110), t0 + MS(60)), MS(10));
        // A count back in time counts nothing, and moves nothing back.
        assert_eq!(w.stall_time(t0 + MS(105), t0 + MS(60)), MS(0));
        assert_eq!(w.stall_time(t0 + MS(111), t0 + MS(60)), MS(1));
    }

    /// A current-thread pin's poll ends between its look and the drivers' look, which then
    /// finds nothing held and starts over: the look after, which follows the ended pin, counts
    /// its tail from the last count to its end, as its report does.
    #[test]
    fn a_stall_s_tail_is_counted_after_the_watch_starts_over() {
        let t0 = Instant::now();
        let mut w = DriverWatch::default();
        let mut counted = w.stall_time(t0 + MS(22), t0);
        counted += w.stall_time(t0 + MS(30), t0);
        w.start_over();
        counted += w.stall_time(t0 + MS(37), t0);
        assert_eq!(
            counted,
            MS(37),
            "the pin's undriven time, to its end at 37 ms"
        );
        // The next pin's stall, after the first ended: from its own start.
        assert_eq!(w.stall_time(t0 + MS(60), t0 + MS(45)), MS(15));
    }

    #[test]
    fn the_drivers_are_seen_only_once_a_parked_worker_waits_on_an_epoll() {
        let t0 = Instant::now();
        let mut v = DriverView::default();
        assert!(!v.sees());
        assert!(v.learn_due(t0, false), "never tried");
        v.tried_at = Some(t0);
        assert!(!v.learn_due(t0 + MS(10), false));
        assert!(v.learn_due(t0 + MS(10), true), "about to sleep");
        assert!(v.learn_due(t0 + LEARN_EVERY, false));
        // The first epoll a parked worker waits on is the driver's; another is not tokio's park.
        assert_eq!(v.epoll(7), WorkerState::OnDrivers);
        assert!(v.sees());
        assert!(!v.learn_due(t0 + LEARN_EVERY, true), "learnt");
        assert_eq!(v.epoll(7), WorkerState::OnDrivers);
        assert_eq!(v.epoll(9), WorkerState::Busy);
        // A look that cannot read a parked worker's system call does not see.
        v.blind = true;
        assert!(!v.sees());
    }

    #[test]
    fn the_drivers_are_looked_at_every_few_ms_unless_something_is_waited_for() {
        let t0 = Instant::now();
        let mut w = DriverWatch::default();
        assert_eq!(w.skip(t0, false), None, "never looked: look");
        w.last = Some((t0, false));
        assert_eq!(w.skip(t0 + MS(2), false), Some(false));
        assert_eq!(w.skip(t0 + DRIVERS_EVERY, false), None);
        assert_eq!(w.skip(t0 + MS(2), true), None, "a pin just flagged");
        w.woke_at = Some(t0);
        assert_eq!(w.skip(t0 + MS(2), false), None, "a hand-over awaited");
    }

    #[test]
    fn a_stall_that_counts_on_a_sleeper_needs_a_second_look_unless_the_last_saw_it_asleep() {
        let undriven = Drivers::Undriven { asleep: 1 };
        let at = |on_cpu| Asleep {
            worker: 1,
            tid: 42,
            on_cpu,
        };
        let mut w = DriverWatch::default();
        // First seen asleep: a second look tells.
        assert!(w.needs_second_look(undriven, &[at(Some(500))]));
        w.saw_asleep(undriven, vec![at(Some(500))]);
        // Still asleep and has not run since: a stall, with no second look.
        assert!(!w.needs_second_look(undriven, &[at(Some(500))]));
        // It ran between the looks (on its way through the park, or woken and asleep again).
        assert!(w.needs_second_look(undriven, &[at(Some(900))]));
        // Another thread in the worker's place is not the one seen asleep.
        assert!(w.needs_second_look(
            undriven,
            &[Asleep {
                tid: 43,
                ..at(Some(500))
            }]
        ));
        // A look that finds them driven needs none, and forgets who slept.
        assert!(!w.needs_second_look(Drivers::Driven { by: None }, &[]));
        w.saw_asleep(Drivers::Driven { by: None }, vec![at(Some(500))]);
        assert!(w.asleep.is_empty());
        assert!(w.needs_second_look(undriven, &[at(Some(500))]));
        // Every worker pinned: the watchdog's own record, no second look.
        assert!(!w.needs_second_look(Drivers::Undriven { asleep: 0 }, &[]));
        // A sleeper whose time cannot be read is taken at its word.
        assert!(!w.needs_second_look(undriven, &[at(None)]));
        // Starting over forgets it all.
        w.saw_asleep(undriven, vec![at(Some(5))]);
        w.start_over();
        assert!(w.asleep.is_empty());
        assert!(w.needs_second_look(undriven, &[at(Some(5))]));
    }

    #[test]
    fn a_pin_that_leaves_the_drivers_undriven_says_for_how_long_and_who_took_them() {
        let t0 = Instant::now();
        let mut p = pinned(t0);
        // First seen undriven at its first report (22 ms in), nothing seen driven before: from
        // the pin's start.
        assert!(p.undriven(t0 + MS(22), None, true));
        assert!(p.event.runtime_stalled);
        let d = p.event.drivers.clone().unwrap();
        assert_eq!(
            (d.undriven, d.woke_worker, d.taken_over_after),
            (MS(22), true, None)
        );
        assert!(!p.undriven(t0 + MS(24), None, false), "said once");
        // Taken over at 26 ms by worker 1; a later look that knows the worker less changes
        // nothing.
        p.driven(t0 + MS(26), Some(1));
        p.driven(t0 + MS(28), None);
        let d = p.event.drivers.clone().unwrap();
        assert_eq!(
            (d.undriven, d.taken_over_by, d.taken_over_after),
            (MS(26), Some(1), Some(MS(26)))
        );
        // Undriven again later (the woken worker pinned in turn), from the last driven look,
        // then until the pin's end.
        assert!(!p.undriven(t0 + MS(500), Some(t0 + MS(480)), false));
        assert_eq!(p.event.drivers.as_ref().unwrap().taken_over_after, None);
        p.complete(t0 + MS(600), Duration::ZERO);
        let d = p.event.drivers.clone().unwrap();
        assert_eq!(d.undriven, MS(26) + MS(120));
        assert!(d.woke_worker && p.event.runtime_stalled);
    }

    #[test]
    fn a_pin_found_undriven_after_a_driven_look_counts_from_that_look() {
        let t0 = Instant::now();
        let mut p = pinned(t0);
        assert!(p.undriven(t0 + MS(300), Some(t0 + MS(298)), false));
        assert_eq!(p.event.drivers.as_ref().unwrap().undriven, MS(2));
        // A driven look before the pin began does not stretch it back.
        let mut q = pinned(t0 + MS(100));
        assert!(q.undriven(t0 + MS(130), Some(t0 + MS(50)), false));
        assert_eq!(q.event.drivers.as_ref().unwrap().undriven, MS(30));
    }

    #[test]
    fn the_watchdog_sleeps_after_two_idle_scans_with_no_unpark_between() {
        let mut idle = Idle::default();
        assert!(!idle.scanned(true, 5));
        assert!(idle.scanned(true, 5));
        assert!(idle.still(5));
        // After a sleep, two idle scans again.
        assert!(!idle.scanned(true, 5));
        // An unpark between them: not yet.
        let mut idle = Idle::default();
        assert!(!idle.scanned(true, 5));
        assert!(!idle.scanned(true, 6));
        assert!(idle.scanned(true, 6));
        // A worker unparks between the decision and the sleep: it does not sleep.
        assert!(!idle.still(7));
        // A busy scan between idle ones starts over.
        let mut idle = Idle::default();
        assert!(!idle.scanned(true, 1));
        assert!(!idle.scanned(false, 1));
        assert!(!idle.scanned(true, 1));
        assert!(idle.scanned(true, 1));
    }

    #[test]
    fn the_first_probe_is_read_against_the_near_reading_unless_it_is_too_close() {
        let t0 = Instant::now();
        let stat = |on_cpu| SchedStat { on_cpu, waiting: 0 };
        let at = |ms| Reading {
            at: t0 + MS(ms),
            stat: stat(ms * 1_000_000),
            switches: Some(ms),
        };
        let baseline = Baseline {
            at: t0,
            age: MS(5),
            stat: stat(0),
        };
        // Taken at an earlier look: the near reading, switches and all.
        let since = first_since(Some(at(10)), Some(baseline), Some(at(20))).unwrap();
        assert_eq!((since.at, since.switches), (t0 + MS(10), Some(10)));
        // Taken by the look that flagged the poll, µs before the probe: the baseline.
        let since = first_since(Some(at(20)), Some(baseline), Some(at(20))).unwrap();
        assert_eq!((since.at, since.switches), (t0, None));
        // None taken (no schedstat): the baseline, or nothing.
        assert_eq!(
            first_since(None, Some(baseline), Some(at(20))).unwrap().at,
            t0
        );
        assert!(first_since(None, None, Some(at(20))).is_none());
        assert!(first_since(Some(at(10)), None, None).is_none());
    }

    #[test]
    fn a_probe_ran_by_its_accounting_or_else_by_its_switches() {
        let running = Some((true, Some(40)));
        // Computed: ran, though it made switches (short sleeps among the work).
        assert!(ran_since(Between::Computed, running, Some(90)));
        assert!(ran_since(Between::Computed, None, None));
        // Blocked: did not, whatever the switches say.
        assert!(!ran_since(Between::Blocked, running, Some(40)));
        // Not told (no schedstat): the switches decide, as before.
        assert!(ran_since(Between::Unknown, running, Some(40)));
        assert!(!ran_since(Between::Unknown, running, Some(41)));
        assert!(!ran_since(Between::Unknown, None, Some(40)));
    }

    #[test]
    fn a_thread_ran_throughout_when_it_blocked_nowhere_between_two_running_probes() {
        // Running at both probes, no voluntary switch between: it ran (preempted or not).
        assert!(ran_throughout(Some((true, Some(40))), Some(40)));
        // One block between (a sleep, a futex wait, a read that waited): it did not.
        assert!(!ran_throughout(Some((true, Some(40))), Some(41)));
        assert!(!ran_throughout(Some((true, Some(40))), Some(4000)));
        // Asleep at the earlier probe: its switch came before it, and the sleep may have taken
        // most of the time between.
        assert!(!ran_throughout(Some((false, Some(40))), Some(40)));
        // The first probe, or a count that could not be read.
        assert!(!ran_throughout(None, Some(40)));
        assert!(!ran_throughout(Some((true, None)), Some(40)));
        assert!(!ran_throughout(Some((true, Some(40))), None));
        // A count that went back (another thread's, were that possible): not the same.
        assert!(!ran_throughout(Some((true, Some(40))), Some(39)));
    }
}
