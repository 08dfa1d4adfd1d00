//! Start stamps: where polls are rare, each one's start is stamped by the before-poll hook with
//! the CPU's time-stamp counter, so that the watchdog knows it exactly and need not look every
//! scan interval to bound it. It looks at a stamped poll closely once it is old enough to
//! matter, and then every interval as before. When it read the thread's accounting before the
//! poll began (it does at every look at a stamped slot: one `pread`), that is two scan
//! intervals short of the threshold: the reading bounds what the poll did before its first
//! close look ([`Tracked::baseline_since`](super::judge::Tracked::baseline_since)). Without one (a
//! thread new since the last look, a `/proc` it cannot read) at a quarter of the threshold, so
//! at most a quarter of the threshold plus one scan interval, the most of a poll's age its
//! second look credits ([`Tracked::baseline`](super::judge::Tracked::baseline)). With nothing
//! that old running, it wakes about every eighteen milliseconds at the defaults (seven without
//! the readings) instead of every two.
//!
//! A stamp costs its poll a few cycles, which a thread polling millions of times a second (a
//! yield storm) would notice: stamping is turned on per slot while its thread polls fewer than
//! [`ON_RATE`] times a second, off once it polls more than [`OFF_RATE`]. Only where the kernel
//! itself keeps time with the counter (its clock source is `tsc`, on x86-64), so that it runs at
//! one rate on every core. Everything here is a function of the times and counts it is given.

use std::time::{Duration, Instant};

/// Stamping is turned on for a slot whose thread polled fewer times a second than this over a
/// [`WINDOW`].
pub(super) const ON_RATE: u64 = 50_000;

/// Stamping is turned off for a slot whose thread polls more often than this: at ~10 ns a stamp,
/// 1 ms of its CPU a second at most.
pub(super) const OFF_RATE: u64 = 100_000;

/// How long a slot's poll rate is watched before stamping is turned on.
pub(super) const WINDOW: Duration = Duration::from_millis(100);

/// How long the counter is watched beside the clock before its rate is trusted: the watchdog's
/// start waits for it. Each later reading refines the rate (from the first). A reading's error
/// (a few microseconds at most: [`reading`]) over this is a rate within 0.2 %: 40 µs of a 20 ms
/// poll's age, the first time.
pub(super) const CALIBRATION: Duration = Duration::from_millis(5);

/// Whether stamps can be trusted here: the kernel keeps its clock with the time-stamp counter
/// (it has checked that the counter is constant, and the same on every core).
pub(super) fn counter_trusted() -> bool {
    crate::poll::TICKS
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|s| s.trim() == "tsc")
}

/// Most ticks apart that the counter's two reads around a clock read may be for the pair to be
/// taken at once (a few microseconds at any rate the counter runs at; tens of nanoseconds when
/// nothing comes between).
const CLOSE_TICKS: u64 = 20_000;

/// A reading of the clock and the counter as one instant: the counter read on both sides of the
/// clock, its midpoint taken, from the first of at most four tries whose two counter reads are
/// close. A reading taken by reading one and then the other would be off by however long the
/// thread was preempted between the two, and every stamp placed by it as much too early: a poll
/// would be taken as that much older than it is. `None` when no try was close (the watchdog
/// keeps its last reading).
pub(super) fn reading(
    mut now: impl FnMut() -> Instant,
    mut ticks: impl FnMut() -> u64,
) -> Option<(Instant, u64)> {
    (0..4).find_map(|_| {
        let before = ticks();
        let at = now();
        let gap = ticks().saturating_sub(before);
        (gap <= CLOSE_TICKS).then_some((at, before + gap / 2))
    })
}

/// The counter's rate, from two readings of it beside the clock: the watchdog's first close one,
/// and the latest.
#[derive(Clone, Copy, Debug)]
pub(super) struct TickClock {
    first: (Instant, u64),
    /// The latest reading, and nanoseconds per tick, once [`CALIBRATION`] has passed.
    now: (Instant, u64),
    ns_per_tick: Option<f64>,
}

impl TickClock {
    pub fn new(at: Instant, ticks: u64) -> TickClock {
        TickClock {
            first: (at, ticks),
            now: (at, ticks),
            ns_per_tick: None,
        }
    }

    /// A reading of the counter, `ticks`, taken beside `at`.
    pub fn observe(&mut self, at: Instant, ticks: u64) {
        self.now = (at, ticks);
        let elapsed = at.saturating_duration_since(self.first.0);
        let counted = ticks.saturating_sub(self.first.1);
        if elapsed >= CALIBRATION && counted > 0 {
            self.ns_per_tick = Some(elapsed.as_nanos() as f64 / counted as f64);
        }
    }

    /// How long `ticks` of the counter are, by its rate; `None` before calibration.
    pub fn duration(&self, ticks: u64) -> Option<Duration> {
        let ns = ticks as f64 * self.ns_per_tick?;
        // Saturates: a difference of garbage is at most forever, never a panic.
        Some(Duration::from_nanos(ns.min(u64::MAX as f64) as u64))
    }

    /// Whether stamps can be turned into times yet.
    pub fn ready(&self) -> bool {
        self.ns_per_tick.is_some()
    }

    /// The instant of `stamp`, by the latest reading and the counter's rate: before the
    /// reading or after it (a poll that began after the scan's reading, which may be
    /// milliseconds before the slot's look when the scan is held up — a stack sample of another
    /// slot waits up to 50 ms), never after `not_after` (the look: a stamp read after the
    /// reading, from a core a few ticks ahead, or garbage), never before the first reading.
    /// `None` before calibration.
    pub fn instant(&self, stamp: u64, not_after: Instant) -> Option<Instant> {
        let ns_per_tick = self.ns_per_tick?;
        let (at, ticks) = self.now;
        let first = self.first.0;
        let placed = if stamp >= ticks {
            let ahead = (stamp - ticks) as f64 * ns_per_tick;
            at.checked_add(Duration::from_nanos(ahead as u64))
                .unwrap_or(not_after)
        } else {
            let back = (ticks - stamp) as f64 * ns_per_tick;
            at.checked_sub(Duration::from_nanos(back as u64))
                .map_or(first, |i| i.max(first))
        };
        Some(placed.min(not_after))
    }
}

/// One slot's stamping, as the watchdog decides it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Stamping {
    /// The ticks read just before stamping was last turned on, while it stays on: the
    /// generation it was turned on with; a stamp of this generation is the running poll's own
    /// ([`PollCell::set_stamping`]).
    ///
    /// [`PollCell::set_stamping`]: crate::poll::protocol::PollCell::set_stamping
    pub generation: Option<u64>,
    /// The counter and the time at the start of the window the poll rate is measured over.
    window: (u64, Instant),
}

/// What [`Stamping::look`] decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Switch {
    On,
    Off,
}

impl Stamping {
    pub fn new(seq: u64, at: Instant) -> Stamping {
        Stamping {
            generation: None,
            window: (seq, at),
        }
    }

    /// A look found the slot's counter at `seq` at `at`: whether to turn stamping on (the
    /// thread polled fewer than [`ON_RATE`] times a second over a whole [`WINDOW`]) or off (more
    /// than [`OFF_RATE`] since the window began, over a millisecond at least).
    pub fn look(&mut self, seq: u64, at: Instant) -> Option<Switch> {
        let elapsed = at.saturating_duration_since(self.window.1);
        // Two counts a poll (begin and end).
        let polls = seq.saturating_sub(self.window.0) / 2;
        let over =
            |rate: u64| u128::from(polls) * 1_000_000_000 > u128::from(rate) * elapsed.as_nanos();
        if self.generation.is_some() {
            if elapsed >= Duration::from_millis(1) && over(OFF_RATE) {
                self.window = (seq, at);
                return Some(Switch::Off);
            }
            if elapsed >= WINDOW {
                self.window = (seq, at);
            }
            return None;
        }
        if elapsed < WINDOW {
            return None;
        }
        self.window = (seq, at);
        (!over(ON_RATE)).then_some(Switch::On)
    }

    /// Whether a stamp of `generation`, read beside the running poll's counter, is that poll's
    /// start.
    pub fn valid(&self, generation: u64) -> bool {
        self.generation == Some(generation)
    }
}

/// How old a stamped poll must be before the watchdog looks at it closely: a quarter of the
/// threshold, one scan interval short of the most of its age a second look credits. Scans are
/// at least an interval apart ([`due`]), so the first look after this age lands within the
/// credit while the watchdog is on time; a look any later would lose the difference (its
/// baseline credits no more), and a CPU-bound poll would be flagged only past the threshold plus
/// one interval.
pub(super) fn first_look(threshold: Duration) -> Duration {
    threshold / 4
}

/// How old a stamped poll whose thread's accounting was read before it began must be before
/// the watchdog looks at it closely: the threshold less two scan intervals (16 ms of 20), and
/// at least half the threshold. The reading bounds what the poll did before that look, so it
/// need not come within a second look's credit; it comes early enough (at most one interval
/// short of the threshold while the watchdog is on time; the interval is at most a quarter of
/// the threshold) that the looks every interval after it find the poll at the threshold, as
/// for a poll looked at every interval from its start.
pub(super) fn late_look(threshold: Duration, interval: Duration) -> Duration {
    threshold.saturating_sub(interval * 2).max(threshold / 2)
}

/// A slot in use, as [`due`] sees it after a scan.
#[derive(Clone, Copy, Debug)]
pub(super) enum Slot {
    /// Free, or its thread gone. A thread that takes it wakes the watchdog.
    Free,
    /// Between polls, stamping on: its next poll will be stamped; `read`: its thread's
    /// accounting was read before the counter's load that showed it between polls.
    Between { read: bool },
    /// Running a stamped poll that started at `start`, not looked at closely yet; `read`: its
    /// thread's accounting was read before it began.
    Stamped { start: Instant, read: bool },
    /// Running a stamped poll looked at closely (its baseline taken), not pinned, stamping on:
    /// no look can flag it before its start plus the threshold (its age is exact, and a poll
    /// is pinned only once that old), nor need one come more than a tick after the last (a
    /// runnable thread's unaccounted time counts up to a tick): `at`, by [`young_due`]. The
    /// poll after it, if it ends, needs what a slot between polls needs.
    Young { at: Instant },
    /// Anything else: a poll not stamped, or looked at closely and past the threshold, a pin
    /// not followed, a worker handed over, a slot not stamped between polls.
    Looked,
    /// A pin followed while it runs, whose next look is due at `next`, stamping on: the poll
    /// after it may begin as soon as the scan is over, and is looked at as for a slot between
    /// polls whose thread was not read at the latest (the reading taken while a pin ran does
    /// not bound that poll: `scan::before_of`).
    Following { next: Instant },
    /// Not a slot: a completed pin held for the tasks it delayed, to be sent at `until` (its
    /// end plus `VICTIM_WINDOW`).
    Held { until: Instant },
}

/// When the next scan is due, from a scan that began at `scan_start`, if no slot needs a look
/// every `interval`: each stamped poll's first close look (at `late_look` of age where its
/// thread was read before it, `first_look` elsewhere), and that age plus one interval after the
/// scan for a slot between polls (its next poll starts after the look, and is at most that old
/// at the next: without a reading, the most a second look credits), and when a held completed
/// pin is to be sent, and each followed pin's next look. Never sooner than one interval.
/// `None`: one interval after the scan.
pub(super) fn due(
    slots: impl IntoIterator<Item = Slot>,
    scan_start: Instant,
    interval: Duration,
    first_look: Duration,
    late_look: Duration,
) -> Option<Instant> {
    let look = |read: bool| if read { late_look } else { first_look };
    let after_scan = |d: Duration| later(scan_start, d.saturating_add(interval));
    let mut due = after_scan(late_look);
    for slot in slots {
        match slot {
            Slot::Free => {}
            Slot::Between { read } => due = due.min(after_scan(look(read))),
            Slot::Stamped { start, read } => due = due.min(later(start, look(read))),
            Slot::Following { next } => due = due.min(next).min(after_scan(first_look)),
            Slot::Held { until } => due = due.min(until),
            Slot::Young { at } => due = due.min(at).min(after_scan(first_look)),
            Slot::Looked => return None,
        }
    }
    Some(due.max(later(scan_start, interval)))
}

/// When a poll looked at closely in a scan that began at `scan_start`, and not flagged, is to be
/// looked at next (a [`Slot::Young`]): at `threshold_at`, its start plus the threshold (no look
/// can flag it sooner), where that is at most `tick` away; else a tick after the scan, but never
/// later than an `interval` before `threshold_at`, so that the look after it (scans are at least
/// an interval apart) can still come at `threshold_at`.
pub(super) fn young_due(
    threshold_at: Instant,
    scan_start: Instant,
    interval: Duration,
    tick: Duration,
) -> Instant {
    let tick_after = later(scan_start, tick);
    if threshold_at <= tick_after {
        return threshold_at;
    }
    tick_after.min(threshold_at.checked_sub(interval).unwrap_or(threshold_at))
}

/// `at` plus `d`; where that is past what an `Instant` holds (a huge setting: a threshold or a
/// heartbeat of 10¹⁹ s), [`FAR`] after `at` instead, later than anything the watchdog waits
/// for. Never a panic on the watchdog's thread.
pub(super) fn later(at: Instant, d: Duration) -> Instant {
    at.checked_add(d)
        .or_else(|| at.checked_add(FAR))
        .unwrap_or(at)
}

/// What [`later`] takes for "never": about 136 years.
const FAR: Duration = Duration::from_secs(1 << 32);

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn stamping_goes_on_after_a_whole_window_of_rare_polls() {
        let t0 = Instant::now();
        let mut s = Stamping::new(0, t0);
        // 40,000 polls a second (4,000 in 100 ms): under the rate, but not a window yet.
        assert_eq!(s.look(2 * 3_000, t0 + ms(75)), None);
        assert_eq!(s.look(2 * 4_000, t0 + ms(100)), Some(Switch::On));
        s.generation = Some(1);
        // Only this generation's stamps: not an earlier one's, nor a later one's.
        assert!(s.valid(1) && !s.valid(5) && !s.valid(0));
        // On: nothing more to decide while the rate stays low.
        assert_eq!(s.look(2 * 4_500, t0 + ms(150)), None);
    }

    #[test]
    fn stamping_stays_off_where_polls_are_frequent() {
        let t0 = Instant::now();
        let mut s = Stamping::new(0, t0);
        // 60,000 a second over the window: above the rate that turns it on.
        assert_eq!(s.look(2 * 6_000, t0 + ms(100)), None);
        assert!(!s.valid(u64::MAX));
        // The next window starts there.
        assert_eq!(
            s.look(2 * 6_000 + 2 * 1_000, t0 + ms(200)),
            Some(Switch::On)
        );
    }

    #[test]
    fn stamping_goes_off_within_a_few_ms_of_a_storm() {
        let t0 = Instant::now();
        let mut s = Stamping::new(0, t0);
        assert_eq!(s.look(0, t0 + ms(100)), Some(Switch::On));
        s.generation = Some(1);
        // A yield storm starts: 10 million polls a second.
        assert_eq!(
            s.look(2 * 10_000, t0 + ms(100) + Duration::from_micros(999)),
            None
        );
        assert_eq!(s.look(2 * 30_000, t0 + ms(103)), Some(Switch::Off));
    }

    #[test]
    fn a_stamp_is_placed_by_the_counters_rate_and_never_after_the_reading() {
        let t0 = Instant::now();
        let mut c = TickClock::new(t0, 1_000);
        // Not calibrated yet: no instants.
        c.observe(t0 + ms(1), 1_000 + 3_000_000);
        assert!(!c.ready() && c.instant(1_000, t0 + ms(1)).is_none());
        // 3 ticks a nanosecond.
        c.observe(t0 + ms(100), 1_000 + 300_000_000);
        assert!(c.ready());
        let at = |stamp| c.instant(stamp, t0 + ms(101)).unwrap().duration_since(t0);
        assert_eq!(at(1_000 + 240_000_000), ms(80));
        // Later than the look (another core, or garbage): the look's time.
        assert_eq!(at(u64::MAX), ms(101));
        assert_eq!(at(1_000 + 306_000_000), ms(101));
        // Before the first reading (a stamp from before the watchdog): never before that.
        assert_eq!(at(0), Duration::ZERO);
    }

    /// A poll that began after the scan's clock reading (the scan held up between the reading and
    /// this slot's look: another slot's stack sample alone may wait 50 ms) must be placed at its
    /// stamp, not at the reading, or it is taken as that much older than it is.
    #[test]
    fn a_stamp_after_the_reading_is_placed_by_the_rate() {
        let t0 = Instant::now();
        let mut c = TickClock::new(t0, 1_000);
        c.observe(t0 + ms(100), 1_000 + 300_000_000);
        // Began 30 ms after the reading.
        let start = c.instant(1_000 + 390_000_000, t0 + ms(131)).unwrap();
        assert_eq!(start.duration_since(t0), ms(130));
        // Never after the look.
        let start = c.instant(1_000 + 390_000_000, t0 + ms(120)).unwrap();
        assert_eq!(start.duration_since(t0), ms(120));
    }

    #[test]
    fn a_reading_preempted_between_its_two_halves_is_tried_again() {
        let t0 = Instant::now();
        // The first try's thread is preempted for 2 ms after reading the clock; the second
        // comes through in 30 ticks.
        let clocks = [t0, t0 + ms(3)];
        let counts = [1_000, 1_000 + 6_000_000, 9_000_000, 9_000_030];
        let (mut c, mut k) = (0, 0);
        let (at, ticks) = reading(
            || {
                c += 1;
                clocks[c - 1]
            },
            || {
                k += 1;
                counts[k - 1]
            },
        )
        .unwrap();
        assert_eq!((at, ticks), (t0 + ms(3), 9_000_015));
        assert_eq!((c, k), (2, 4));
        // Never a close pair in four tries: no reading.
        let mut n = 0u64;
        let none = reading(Instant::now, || {
            n += 1;
            n * 1_000_000
        });
        assert_eq!((n, none), (8, None));
    }

    #[test]
    fn the_next_scan_is_the_first_stamped_polls_first_look() {
        let t0 = Instant::now();
        let due = |slots: &[Slot]| {
            due(slots.iter().copied(), t0 + ms(10), ms(2), ms(5), ms(10))
                .map(|d| d.duration_since(t0))
        };
        let between = Slot::Between { read: false };
        let stamped = |at: Duration| Slot::Stamped {
            start: t0 + at,
            read: false,
        };
        // Nothing runs: a poll starting now is looked at first when 7 ms old at most.
        assert_eq!(due(&[Slot::Free, between]), Some(ms(17)));
        // The oldest stamped poll decides.
        assert_eq!(
            due(&[between, stamped(ms(9)), stamped(ms(8))]),
            Some(ms(13))
        );
        // A poll too young at this scan and too old for its first look to wait: the next
        // interval, at 5 to 7 ms of age.
        assert_eq!(
            due(&[stamped(ms(6) + Duration::from_micros(500))]),
            Some(ms(12))
        );
        // Never sooner than an interval, even for a poll whose first look is past.
        assert_eq!(due(&[stamped(ms(0))]), Some(ms(12)));
        // One slot that needs looks every interval: every interval.
        assert_eq!(due(&[between, Slot::Looked]), None);

        // Read before their polls: looked at first at half the threshold.
        let read = Slot::Between { read: true };
        assert_eq!(due(&[Slot::Free, read]), Some(ms(22)));
        let stamped_read = |at: Duration| Slot::Stamped {
            start: t0 + at,
            read: true,
        };
        assert_eq!(due(&[read, stamped_read(ms(9))]), Some(ms(19)));
        // One slot not read keeps the sooner look.
        assert_eq!(due(&[read, between]), Some(ms(17)));
        assert_eq!(due(&[stamped_read(ms(9)), stamped(ms(9))]), Some(ms(14)));
        // Nothing in use: as late as a read slot would allow (a thread that takes a slot wakes
        // the watchdog).
        assert_eq!(due(&[Slot::Free]), Some(ms(22)));

        // A completed pin held for its victims: sent when due, not looked for every interval.
        let held = |at: Duration| Slot::Held { until: t0 + at };
        assert_eq!(due(&[read, held(ms(40))]), Some(ms(22)));
        assert_eq!(due(&[read, held(ms(15))]), Some(ms(15)));
        assert_eq!(
            due(&[held(ms(15)), held(ms(13)), stamped(ms(9))]),
            Some(ms(13))
        );
        // Due now or past (released at the next scan): still an interval away at the soonest.
        assert_eq!(due(&[held(ms(10)), Slot::Free]), Some(ms(12)));
        // A slot that needs looks every interval still has them.
        assert_eq!(due(&[held(ms(40)), Slot::Looked]), None);

        // A pin followed while it runs: looked at when its next look is due, no sooner.
        let following = |at: Duration| Slot::Following { next: t0 + at };
        assert_eq!(due(&[read, following(ms(15))]), Some(ms(15)));
        assert_eq!(
            due(&[following(ms(16)), held(ms(30)), following(ms(14))]),
            Some(ms(14))
        );
        assert_eq!(due(&[following(ms(40)), stamped(ms(8))]), Some(ms(13)));
        assert_eq!(due(&[following(ms(1))]), Some(ms(12)));
        // And no later than the poll after it, which may start as the scan ends (with no
        // reading before it), needs: a quarter of the threshold and an interval.
        assert_eq!(due(&[following(ms(40))]), Some(ms(17)));
        assert_eq!(due(&[read, following(ms(40))]), Some(ms(17)));

        // A poll looked at closely, younger than the threshold: when due, no later than the
        // poll after it needs.
        let young = |at: Duration| Slot::Young { at: t0 + at };
        assert_eq!(due(&[read, young(ms(13))]), Some(ms(13)));
        assert_eq!(due(&[read, young(ms(30))]), Some(ms(17)));
        assert_eq!(due(&[young(ms(11))]), Some(ms(12)));
        assert_eq!(due(&[young(ms(13)), stamped(ms(7))]), Some(ms(12)));
        assert_eq!(due(&[young(ms(13)), Slot::Looked]), None);
    }

    /// The looks after a poll's first close look, `first` ms after its start, with scans at
    /// least `interval` apart: the last lands at the threshold (20 ms).
    fn young_looks(first: f64, interval: f64) -> Vec<f64> {
        let t0 = Instant::now();
        let at = |ms: f64| t0 + Duration::from_secs_f64(ms / 1000.0);
        let ms = |i: Instant| (i.duration_since(t0).as_secs_f64() * 1e6).round() / 1000.0;
        let interval_d = Duration::from_secs_f64(interval / 1000.0);
        let mut looks = vec![first];
        while *looks.last().unwrap() < 20.0 {
            let scan = at(*looks.last().unwrap());
            let due = young_due(at(20.0), scan, interval_d, ms4()).max(later(scan, interval_d));
            looks.push(ms(due));
        }
        looks
    }

    fn ms4() -> Duration {
        Duration::from_millis(4)
    }

    #[test]
    fn a_young_polls_looks_land_at_the_threshold_at_any_interval() {
        // The defaults: the close look at 16 ms, the next at 20.
        assert_eq!(young_looks(16.0, 2.0), vec![16.0, 20.0]);
        // Intervals between 2 ms and a tick: a look an interval before the threshold, then at
        // it (a look a tick after each one came up to 1.5 ms late: 15, 19, 21.5).
        assert_eq!(young_looks(15.0, 2.5), vec![15.0, 17.5, 20.0]);
        assert_eq!(young_looks(14.0, 3.0), vec![14.0, 17.0, 20.0]);
        assert_eq!(young_looks(13.0, 3.5), vec![13.0, 16.5, 20.0]);
        // A tick at a time while the threshold is far.
        assert_eq!(young_looks(10.0, 1.0), vec![10.0, 14.0, 18.0, 20.0]);
        assert_eq!(young_looks(10.0, 5.0), vec![10.0, 15.0, 20.0]);
    }

    #[test]
    fn a_huge_threshold_or_interval_is_a_far_due_time_not_a_panic() {
        let t0 = Instant::now();
        let slots = [
            Slot::Between { read: false },
            Slot::Stamped {
                start: t0,
                read: true,
            },
        ];
        let due = due(slots, t0, Duration::MAX, Duration::MAX, Duration::MAX).unwrap();
        assert!(due >= t0 + FAR, "{:?}", due.duration_since(t0));
        assert_eq!(later(t0, ms(5)), t0 + ms(5));
        assert_eq!(later(t0, Duration::MAX), t0 + FAR);
    }

    #[test]
    fn the_first_look_lands_within_what_a_second_look_credits() {
        // A look an interval after the first look's age at the latest (scans are an interval
        // apart): within the credit of a quarter of the threshold plus one interval.
        assert_eq!(first_look(ms(20)) + ms(2), ms(7));
        assert_eq!(first_look(ms(100)) + ms(10), ms(35));
    }

    /// The age at which a stamped poll starting at `phase` past 100 ms gets its first close
    /// look (at `first_look` of age, or `late_look` where its thread was `read` before it), the
    /// watchdog making every scan on time as `due` says from 0, between polls until then.
    fn first_close_look(phase: Duration, read: bool) -> Duration {
        let (threshold, interval) = (ms(20), ms(2));
        let (first, late) = (first_look(threshold), late_look(threshold, interval));
        let close = if read { late } else { first };
        let t0 = Instant::now();
        let start = t0 + ms(100) + phase;
        let mut scan = t0;
        loop {
            let slot = if scan < start {
                Slot::Between { read }
            } else if scan.duration_since(start) >= close {
                return scan.duration_since(start);
            } else {
                Slot::Stamped { start, read }
            };
            scan = due([slot], scan, interval, first, late).unwrap_or(scan + interval);
        }
    }

    /// Every phase of a stamped poll's start against the scans: the look that takes its
    /// baseline finds it no older than what the baseline credits (a quarter of the threshold
    /// plus an interval), so none of its age is lost.
    #[test]
    fn a_stamped_polls_first_close_look_is_within_the_credit_at_every_phase() {
        for phase_us in (0..7_000).step_by(50) {
            let age = first_close_look(Duration::from_micros(phase_us), false);
            assert!(
                age <= ms(20) / 4 + ms(2),
                "started {phase_us} us in: first close look at {age:?}"
            );
        }
    }

    /// The same for a poll whose thread was read before it: its first close look comes one
    /// interval short of the threshold at the latest, so that the looks every interval after it
    /// reach the threshold on time.
    #[test]
    fn a_read_polls_first_close_look_is_an_interval_short_of_the_threshold() {
        assert_eq!(late_look(ms(20), ms(2)), ms(16));
        // Never sooner than half the threshold: the interval is at most a quarter of it.
        assert_eq!(late_look(ms(2), Duration::from_micros(500)), ms(1));
        assert_eq!(late_look(ms(100), ms(30)), ms(50));
        let latest = (0..18_000)
            .step_by(50)
            .map(|phase_us| first_close_look(Duration::from_micros(phase_us), true))
            .max()
            .unwrap();
        assert!(latest <= ms(20) - ms(2), "{latest:?}");
        // Later than the look without a reading could be.
        assert!(
            latest > ms(16) && ms(16) > first_look(ms(20)) + ms(2),
            "{latest:?}"
        );
    }
}
