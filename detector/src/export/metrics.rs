//! What the metrics exporters (Prometheus, OTLP) share: the duration buckets, counting each pin
//! once under bounded labels, and the worker-seconds of pins as a counter that never goes back.

use crate::event::PinnedEvent;
use std::time::Duration;

/// Pin-duration histogram buckets, in seconds: from 25 ms (just past the default threshold) to a
/// minute. Prometheus and OTLP use the same.
pub const DURATION_BUCKETS: &[f64] =
    &[0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// What the metrics exporters share about counting pins: each pin counts once, at its first
/// report that is not a retraction, under a `location` label drawn from a bounded set
/// ([`location_label`]; past the bound, `other`). A metrics exporter serves one detector, so a pin is named by its
/// event id alone.
pub(crate) struct PinCounter {
    /// Pins already counted and not yet completed: at most [`MAX_OPEN_PINS`] ([`Self::bound`]).
    counted: std::collections::BTreeSet<u64>,
    locations: Bounded,
    requests: Bounded,
}

/// The labels a pin is counted under, once, at its first report.
#[derive(Debug, PartialEq)]
pub(crate) struct PinLabels {
    /// Its function ([`location_label`]), bounded.
    pub location: String,
    /// Its request: [`PinnedEvent::request_label`] ([`NO_SPAN`](crate::event::NO_SPAN) outside
    /// any span), bounded.
    pub request: String,
}

/// A label's values: the first `max - 1` seen, then `other` (one of the `max`).
struct Bounded {
    seen: std::collections::HashSet<String>,
    max: usize,
}

impl Bounded {
    fn label(&mut self, value: String) -> String {
        if self.seen.contains(&value) || self.seen.len() < self.max.saturating_sub(1) {
            self.seen.insert(value.clone());
            value
        } else {
            "other".to_owned()
        }
    }
}

impl PinCounter {
    /// Counts at most `max_labels` values of each label (`location`, `request`), `other` among
    /// them.
    pub(crate) fn new(max_labels: usize) -> PinCounter {
        PinCounter {
            counted: std::collections::BTreeSet::new(),
            locations: Bounded {
                seen: std::collections::HashSet::new(),
                max: max_labels,
            },
            requests: Bounded {
                seen: std::collections::HashSet::new(),
                max: max_labels,
            },
        }
    }

    /// The labels when `e` is the first countable report of its pin, `None` otherwise.
    /// A completed or retracted pin is forgotten.
    pub(crate) fn first_report(&mut self, e: &PinnedEvent) -> Option<PinLabels> {
        let first = e.state != crate::event::State::Retracted && self.counted.insert(e.id);
        if e.state != crate::event::State::InProgress {
            self.counted.remove(&e.id);
        }
        first.then(|| {
            let location = location_label(e);
            PinLabels {
                location: self.locations.label(location),
                request: self.requests.label(e.request_label()),
            }
        })
    }

    /// Keeps at most [`MAX_OPEN_PINS`] counted pins: forgets the oldest (lowest ids) not in
    /// `running` (sorted), as [`PinTime`] does. Such a pin's completion was dropped or is very
    /// late; a report of it after all counts it again.
    fn bound(&mut self, running: &[u64]) {
        for old in past_bound(self.counted.iter().copied(), self.counted.len(), running) {
            self.counted.remove(&old);
        }
    }
}

/// Of the `len` open pins `open` (their ids, lowest first: ids are handed out in order), the
/// oldest to forget to keep [`MAX_OPEN_PINS`]: those not in `running` (sorted), as many as are
/// past the bound, or all there are. Nothing (and no allocation) within the bound.
fn past_bound(open: impl Iterator<Item = u64>, len: usize, running: &[u64]) -> Vec<u64> {
    open.filter(|id| running.binary_search(id).is_err())
        .take(len.saturating_sub(MAX_OPEN_PINS))
        .collect()
}

/// The `location` a pin is counted under: the function of the service's own frame (the one to
/// change), else of the top frame, with its file as every build machine names it —
/// `svc::api::orders (svc/src/api.rs)`, one series per function whichever of its lines pinned
/// and wherever it was built ([`crate_path`](crate::event::crate_path)). Without a function,
/// the file and line; without either, `unknown`. Escaped, bounded.
pub(crate) fn location_label(e: &PinnedEvent) -> String {
    let Some(f) = e.app_frame.as_ref().or(e.top_frame.as_ref()) else {
        return "unknown".to_owned();
    };
    let file = f.portable_file();
    let label = match (&f.function, file) {
        (Some(function), Some(file)) => {
            format!("{} ({file})", crate::analyze::reason::base_name(function))
        }
        (Some(function), None) => crate::analyze::reason::base_name(function),
        (None, Some(_)) => f.portable_location().unwrap_or_default(),
        (None, None) => "unknown".to_owned(),
    };
    crate::text::bounded(&label, MAX_LOCATION_LABEL)
}

/// The longest `location` label, in bytes after escaping.
pub(crate) const MAX_LOCATION_LABEL: usize = 256;

/// What one pin's victims add to the victim counters (`pinwatch_victim_tasks_total`,
/// `pinwatch_victim_wait_seconds_total`), under its reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct VictimCount {
    /// The pin's reason (`other` when it has none), as `pinwatch_pins_total` labels it.
    pub reason: crate::event::Reason,
    /// Tasks polled after waiting at least the threshold while the pin ran.
    pub tasks: u64,
    /// Their waits, added up.
    pub wait: Duration,
}

/// What `e` adds to the victim counters, counting each pin once: only its completed report
/// counts (it carries the final victims; an `in_progress` one may carry partial ones, and a pin
/// has one completed report), and only victims tokio measured (`schedule-latency`). Unmeasured
/// victims name the tasks the worker polled after the pin, with no wait known: they are no
/// evidence of a delay, and count nothing.
pub(crate) fn victim_count(e: &PinnedEvent) -> Option<VictimCount> {
    if e.state != crate::event::State::Completed {
        return None;
    }
    let v = e.victims.as_ref().filter(|v| v.measured)?;
    Some(VictimCount {
        reason: e.reason.unwrap_or(crate::event::Reason::Other),
        tasks: v.tasks as u64,
        wait: v.total_wait.unwrap_or_default(),
    })
}

/// How long a pin runs on after its hand-over, at least, for the rescue to count it
/// (`pinwatch_driver_rescued_pins_total`): without the rescue the whole runtime would have stood
/// still that long. A hand-over for a pin of tens of milliseconds is the rescue at work; many of
/// them add up to no second of anyone's stall (helper-64, helper-68).
pub(crate) const LONG_RESCUE: Duration = Duration::from_secs(1);

/// How long pin `e` has run since pinwatch handed the runtime's timers and I/O, which it left
/// undriven, to a worker that pinwatch woke (`PINWATCH_RESCUE`; [`Drivers`]): the stall the
/// rescue spared the service, for without it nobody would have driven them until the pin
/// ended. Zero for a pin whose drivers were never undriven, or taken over with no wake-up of
/// pinwatch's during the pin, or undriven again (until the next hand-over; a pin handed over
/// twice counts from the latest), or retracted (its worker was not held; a report before the
/// retraction may have counted it already, and a counter does not go back).
///
/// [`Drivers`]: crate::event::Drivers
pub(crate) fn rescued(e: &PinnedEvent) -> Duration {
    let Some(d) = e.drivers.as_ref().filter(|d| d.woke_worker) else {
        return Duration::ZERO;
    };
    match (e.state, d.taken_over_after) {
        (crate::event::State::Retracted, _) | (_, None) => Duration::ZERO,
        (_, Some(after)) => e.duration.saturating_sub(after),
    }
}

/// Pins still open in [`PinTime`] and [`PinCounter`] at most; past it, the oldest that are not
/// running any more (their completion was dropped) are forgotten.
pub(crate) const MAX_OPEN_PINS: usize = 4096;

/// The worker-seconds of pins, as a counter by reason must see them: only ever increments. Each
/// pin seen and not yet completed keeps how much of its time is accounted; a report or the live
/// age of a running pin adds only what goes past that, under the pin's latest reason (time
/// already accounted under an earlier reason stays there). So the series never go back: not when
/// the reason changes between reports, not when a pin has ended but its completion is still on
/// its way (the live age is gone, the accounted time stays), not when the completion is dropped.
/// A metrics exporter serves one detector, so a pin is named by its event id alone.
///
/// It also tells, once a pin, when a report first shows it [`rescued`] for [`LONG_RESCUE`].
pub(crate) struct PinTime {
    /// By event id.
    open: std::collections::BTreeMap<u64, OpenPin>,
    /// The pins running at the last [`advance`](Self::advance), sorted: never forgotten.
    running: Vec<u64>,
}

/// What [`PinTime`] keeps of a pin seen and not yet completed.
struct OpenPin {
    /// The reason the pin's latest time went to.
    reason: crate::event::Reason,
    /// The time accounted.
    accounted: Duration,
    /// Whether a report has shown it [`rescued`] for [`LONG_RESCUE`].
    rescue_told: bool,
}

impl PinTime {
    pub(crate) fn new() -> PinTime {
        PinTime {
            open: std::collections::BTreeMap::new(),
            running: Vec::new(),
        }
    }

    /// Accounts the report `e`: calls `add(reason, increment)` for the time it has beyond what
    /// its pin has accounted (a pin never seen before: all of it), and returns true when it is
    /// the first report of its pin to show it [`rescued`] for [`LONG_RESCUE`] or more (one pin,
    /// however many pins the same hand-over freed, or reports it has). A completed or retracted
    /// pin is closed; a retraction adds no time. A pin that holds no worker (a
    /// multi-thread runtime's `block_on` body) costs no worker time and is never accounted, nor
    /// advanced while it runs: a `main` blocked for an hour lost the service none of its
    /// workers (helper-64: it read as half the worker time of two workers, and paged).
    pub(crate) fn report(
        &mut self,
        e: &PinnedEvent,
        mut add: impl FnMut(crate::event::Reason, Duration),
    ) -> bool {
        use crate::event::{Reason, State};
        if !e.holds_worker() {
            return false;
        }
        let reason = e.reason.unwrap_or(Reason::Other);
        let (accounted, told) = self
            .open
            .get(&e.id)
            .map_or((Duration::ZERO, false), |o| (o.accounted, o.rescue_told));
        // A retraction voids the pin (its poll held no worker): no more time, though what its
        // earlier reports and live age accounted stays, as a counter does not go back.
        if e.duration > accounted && e.state != State::Retracted {
            add(reason, e.duration - accounted);
        }
        let long = rescued(e) >= LONG_RESCUE;
        match e.state {
            State::InProgress => {
                let open = OpenPin {
                    reason,
                    accounted: e.duration.max(accounted),
                    rescue_told: told || long,
                };
                self.open.insert(e.id, open);
                self.bound();
            }
            State::Completed | State::Retracted => {
                self.open.remove(&e.id);
            }
        }
        long && !told
    }

    /// Advances each open pin that is running (`pinned`: event id and age, as [`Live`] has
    /// them) to its age: `add(reason, increment)` for what goes past its accounted time. A
    /// running pin not yet reported is left for its report, which carries its reason.
    ///
    /// [`Live`]: super::live::Live
    pub(crate) fn advance(
        &mut self,
        pinned: &[(u64, Duration)],
        mut add: impl FnMut(crate::event::Reason, Duration),
    ) {
        for (id, age) in pinned {
            if let Some(open) = self.open.get_mut(id) {
                if *age > open.accounted {
                    add(open.reason, *age - open.accounted);
                    open.accounted = *age;
                }
            }
        }
        self.running.clear();
        self.running.extend(pinned.iter().map(|(id, _)| *id));
        // Looked up for each of the oldest open pins at every report past the bound: with
        // hundreds of pins stuck, a scan of the list each time took milliseconds a report.
        self.running.sort_unstable();
        self.bound();
    }

    /// Keeps at most [`MAX_OPEN_PINS`]: forgets the oldest (lowest ids: they are handed out in
    /// order) that were not running at the last `advance`. Such a pin's completion was dropped
    /// or is very late; if it arrives after all, its time is counted again from zero (more,
    /// never less), and its rescue again if it was counted (helper-69).
    fn bound(&mut self) {
        for old in past_bound(self.open.keys().copied(), self.open.len(), &self.running) {
            self.open.remove(&old);
        }
    }

    /// Pins open (seen, not completed).
    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.open.len()
    }
}

/// The one step both metrics exporters take for each report and each scrape: what a report adds
/// to the pin metrics ([`PinTally::report`]) and what running pins add to the worker time
/// ([`PinTally::advance`]). An exporter only applies the [`Added`] to its own instruments, so
/// Prometheus and OTLP count the same pins under the same gates.
pub(crate) struct PinTally {
    seen: PinCounter,
    time: PinTime,
}

/// What one report adds to the pin metrics.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Added {
    /// The labels of a pin's first countable report (`pinwatch_pins_by_location_total`,
    /// `pinwatch_pins_by_request_total`): every pin, a `block_on` body's too.
    pub labels: Option<PinLabels>,
    /// The reason to count a pin of a worker under (`pinwatch_pins_total`), at its first
    /// countable report: `other` when it has none.
    pub pin: Option<crate::event::Reason>,
    /// Worker time past what the pin had accounted, and the reason it goes to
    /// (`pinwatch_pinned_seconds_total`).
    pub time: Option<(crate::event::Reason, Duration)>,
    /// The first report to show the pin [`rescued`] for [`LONG_RESCUE`]
    /// (`pinwatch_driver_rescued_pins_total`).
    pub rescued: bool,
    /// A completed worker pin's duration and reason (`pinwatch_pin_duration_seconds`).
    pub duration: Option<(crate::event::Reason, Duration)>,
    /// Its victims ([`victim_count`]).
    pub victims: Option<VictimCount>,
}

impl PinTally {
    /// Counts at most `max_labels` values of each label, `other` among them ([`PinCounter`]).
    pub(crate) fn new(max_labels: usize) -> PinTally {
        PinTally {
            seen: PinCounter::new(max_labels),
            time: PinTime::new(),
        }
    }

    /// What the report `e` adds. A pin that holds no worker (a multi-thread runtime's
    /// `block_on` body) is a pin of its location and request, not of the workers' counts, time
    /// or durations. The reason can sharpen with more samples: later time goes to the latest.
    pub(crate) fn report(&mut self, e: &PinnedEvent) -> Added {
        let reason = e.reason.unwrap_or(crate::event::Reason::Other);
        let worker = e.holds_worker();
        let labels = self.seen.first_report(e);
        self.seen.bound(&self.time.running);
        let mut time = None;
        let rescued = self.time.report(e, |r, more| time = Some((r, more)));
        Added {
            pin: (worker && labels.is_some()).then_some(reason),
            labels,
            time,
            rescued,
            duration: (worker && e.state == crate::event::State::Completed)
                .then_some((reason, e.duration)),
            victims: victim_count(e),
        }
    }

    /// Advances the running pins to their ages ([`PinTime::advance`]).
    pub(crate) fn advance(
        &mut self,
        pinned: &[(u64, Duration)],
        add: impl FnMut(crate::event::Reason, Duration),
    ) {
        self.time.advance(pinned, add);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Reason, State};
    use std::time::Duration;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// Feeds `steps` to a `PinTime` and returns the cumulative series by reason after each.
    fn series(steps: &[Step]) -> Vec<[Duration; Reason::ALL.len()]> {
        let mut time = PinTime::new();
        let mut totals = [Duration::ZERO; Reason::ALL.len()];
        let mut out = Vec::new();
        let index = |r: Reason| Reason::ALL.iter().position(|x| *x == r).unwrap();
        for step in steps {
            match step {
                Step::Report(id, state, reason, ms) => {
                    let e = PinnedEvent::for_test(*id, *state, *reason, *ms, 1);
                    time.report(&e, |r, d| totals[index(r)] += d);
                }
                Step::Live(pinned) => {
                    let pinned: Vec<(u64, Duration)> =
                        pinned.iter().map(|(id, ms)| (*id, MS(*ms))).collect();
                    time.advance(&pinned, |r, d| totals[index(r)] += d);
                }
            }
            out.push(totals);
        }
        out
    }

    enum Step {
        Report(u64, State, Reason, u64),
        Live(&'static [(u64, u64)]),
    }
    use Step::{Live, Report};

    fn assert_never_back(s: &[[Duration; Reason::ALL.len()]]) {
        for (i, w) in s.windows(2).enumerate() {
            for (r, reason) in Reason::ALL.iter().enumerate() {
                assert!(
                    w[1][r] >= w[0][r],
                    "{} went back at step {}: {:?} -> {:?}",
                    reason.as_str(),
                    i + 1,
                    w[0][r],
                    w[1][r]
                );
            }
        }
    }

    fn with_victims(mut e: PinnedEvent, measured: bool, tasks: usize, wait_ms: u64) -> PinnedEvent {
        e.victims = Some(crate::event::Victims {
            measured,
            tasks,
            total_wait: measured.then(|| MS(wait_ms)),
            max_wait: measured.then(|| MS(wait_ms / tasks.max(1) as u64)),
            ..Default::default()
        });
        e
    }

    /// A pin counts as rescued once, at the first report that shows it ran on a second or more
    /// after a hand-over that pinwatch woke a worker for: not before, not again at its later
    /// reports or its completion, and not when the drivers are undriven again. Two pins freed
    /// by the same hand-over are two pins. A hand-over pinwatch did not cause, a pin that ran
    /// on less than a second and a body that holds no worker count nothing; a retracted pin
    /// stays counted if a report before counted it (a counter does not go back).
    #[test]
    fn a_pin_counts_as_rescued_once_when_it_ran_on_a_second_after_its_hand_over() {
        use crate::event::Drivers;
        let pin = |id, state, ms, after: Option<u64>, woke_worker| {
            let mut e = PinnedEvent::for_test(id, state, Reason::Sleep, ms, 1);
            e.runtime_stalled = true;
            e.drivers = Some(Drivers {
                undriven: MS(20),
                taken_over_after: after.map(MS),
                woke_worker,
                ..Default::default()
            });
            e
        };
        let mut body = pin(6, State::Completed, 4_000, Some(30), true);
        body.block_on = true;
        body.worker.index = None;
        let steps = [
            // Undriven, not taken over yet.
            (pin(1, State::InProgress, 25, None, true), 0),
            // Taken over 30 ms in; 970 ms since at the 1 s report: not yet.
            (pin(1, State::InProgress, 1_000, Some(30), true), 0),
            (pin(1, State::InProgress, 2_000, Some(30), true), 1),
            // Undriven again, then handed over again: already counted.
            (pin(1, State::InProgress, 2_500, None, true), 1),
            (pin(1, State::InProgress, 4_000, Some(2_600), true), 1),
            (pin(1, State::Completed, 5_000, Some(2_600), true), 1),
            // Freed by the same hand-over as pin 1: a pin of its own; its completion is the
            // first report it has past the second.
            (pin(2, State::Completed, 3_000, Some(30), true), 2),
            // A worker took the drivers over with no wake-up of pinwatch's.
            (pin(3, State::Completed, 3_000, Some(30), false), 2),
            // 36 short pins a minute, each handed over (helper-64's): nothing.
            (pin(4, State::Completed, 45, Some(23), true), 2),
            (pin(5, State::InProgress, 2_000, Some(30), true), 3),
            (pin(5, State::Retracted, 2_100, Some(30), true), 3),
            (body, 3),
        ];
        let mut time = PinTime::new();
        let mut rescued = 0;
        for (i, (e, want)) in steps.iter().enumerate() {
            rescued += usize::from(time.report(e, |_, _| {}));
            assert_eq!(rescued, *want, "after step {i}: {e:?}");
        }
        assert_eq!(time.open(), 0);
    }

    /// What each report of a pin adds, as both exporters apply it: the labels and the pin at
    /// its first report only, the time past what was accounted at each, the duration and the
    /// victims at its completion; a body that holds no worker only its labels; a retraction
    /// nothing.
    #[test]
    fn a_tally_adds_each_part_of_a_pin_once_and_a_body_only_its_labels() {
        let mut tally = PinTally::new(8);
        let labels = |location: &str| {
            Some(PinLabels {
                location: location.to_owned(),
                request: crate::event::NO_SPAN.to_owned(),
            })
        };
        let first = tally.report(&PinnedEvent::for_test(
            1,
            State::InProgress,
            Reason::Cpu,
            25,
            3,
        ));
        let location = first.labels.as_ref().map(|l| l.location.clone()).unwrap();
        assert_eq!(
            first,
            Added {
                labels: labels(&location),
                pin: Some(Reason::Cpu),
                time: Some((Reason::Cpu, MS(25))),
                ..Added::default()
            }
        );
        assert_eq!(
            tally.report(&PinnedEvent::for_test(
                1,
                State::InProgress,
                Reason::Sleep,
                300,
                3
            )),
            Added {
                time: Some((Reason::Sleep, MS(275))),
                ..Added::default()
            }
        );
        let done = with_victims(
            PinnedEvent::for_test(1, State::Completed, Reason::Sleep, 320, 3),
            true,
            2,
            80,
        );
        assert_eq!(
            tally.report(&done),
            Added {
                time: Some((Reason::Sleep, MS(20))),
                duration: Some((Reason::Sleep, MS(320))),
                victims: Some(VictimCount {
                    reason: Reason::Sleep,
                    tasks: 2,
                    wait: MS(80),
                }),
                ..Added::default()
            }
        );
        let mut body = PinnedEvent::for_test(2, State::Completed, Reason::Io, 900, 3);
        body.block_on = true;
        body.worker.index = None;
        assert_eq!(
            tally.report(&body),
            Added {
                labels: labels(&location),
                ..Added::default()
            }
        );
        // A retraction voids its poll's time past what earlier reports accounted.
        tally.report(&PinnedEvent::for_test(
            4,
            State::InProgress,
            Reason::Cpu,
            25,
            3,
        ));
        let retracted = PinnedEvent::for_test(4, State::Retracted, Reason::Cpu, 200, 3);
        assert_eq!(tally.report(&retracted), Added::default());
        let mut e = PinnedEvent::for_test(3, State::Retracted, Reason::Cpu, 30, 3);
        e.reason = None;
        assert_eq!(tally.report(&e), Added::default());
        // No reason: counted under `other`.
        e.state = State::Completed;
        let added = tally.report(&e);
        assert_eq!(
            (added.pin, added.duration),
            (Some(Reason::Other), Some((Reason::Other, MS(30))))
        );
    }

    /// A multi-thread runtime's `block_on` body holds no worker: its time is no worker time,
    /// reported or running. A current-thread runtime's body is its worker: counted.
    #[test]
    fn a_body_that_holds_no_worker_costs_no_worker_time() {
        let mut time = PinTime::new();
        let mut total = Duration::ZERO;
        let mut body = PinnedEvent::for_test(1, State::InProgress, Reason::Sleep, 500, 1);
        body.block_on = true;
        body.worker.index = None;
        time.report(&body, |_, d| total += d);
        time.advance(&[(1, MS(3_000))], |_, d| total += d);
        body.state = State::Completed;
        body.duration = MS(3_600);
        time.report(&body, |_, d| total += d);
        assert_eq!((total, time.open()), (Duration::ZERO, 0));
        body.worker.index = Some(0);
        body.state = State::InProgress;
        time.report(&body, |_, d| total += d);
        time.advance(&[(1, MS(4_000))], |_, d| total += d);
        assert_eq!(total, MS(4_000));
    }

    /// A pin's victims count once, from its completed report, and only when measured.
    #[test]
    fn victims_count_once_from_the_completed_report_and_only_when_measured() {
        let report = |state, measured, tasks, wait| {
            victim_count(&with_victims(
                PinnedEvent::for_test(1, state, Reason::LockWait, 300, 1),
                measured,
                tasks,
                wait,
            ))
        };
        // Partial victims on the in_progress reports: not counted (the completed one has all).
        assert_eq!(report(State::InProgress, true, 3, 90), None);
        assert_eq!(report(State::InProgress, true, 7, 700), None);
        assert_eq!(
            report(State::Completed, true, 11, 1_500),
            Some(VictimCount {
                reason: Reason::LockWait,
                tasks: 11,
                wait: MS(1_500),
            })
        );
        // A retracted pin delayed nobody; unmeasured victims claim no wait.
        assert_eq!(report(State::Retracted, true, 11, 1_500), None);
        assert_eq!(report(State::Completed, false, 8, 0), None);
        // No victims at all (a recording made before the field existed).
        assert_eq!(
            victim_count(&PinnedEvent::for_test(
                2,
                State::Completed,
                Reason::Cpu,
                30,
                1
            )),
            None
        );
        // No reason: counted under `other`, as pinwatch_pins_total counts it.
        let mut e = with_victims(
            PinnedEvent::for_test(3, State::Completed, Reason::Cpu, 30, 1),
            true,
            2,
            60,
        );
        e.reason = None;
        assert_eq!(victim_count(&e).map(|c| c.reason), Some(Reason::Other));
    }

    #[test]
    fn pin_time_never_goes_back_when_the_reason_changes() {
        let s = series(&[
            Report(1, State::InProgress, Reason::Cpu, 25),
            Live(&[(1, 400)]),
            Report(1, State::Completed, Reason::Sleep, 500),
            Live(&[]),
        ]);
        assert_never_back(&s);
        let last = s.last().unwrap();
        // The 400 ms seen under cpu stay there; only the rest goes to sleep.
        assert_eq!(last[0], MS(400));
        assert_eq!(last[1], MS(100));
    }

    /// A retracted poll held no worker: its retraction adds no time, whether its earlier
    /// reports were seen (what they and its live age accounted stays) or dropped.
    #[test]
    fn a_retraction_adds_no_worker_time() {
        let s = series(&[
            Report(1, State::InProgress, Reason::Cpu, 25),
            Live(&[(1, 60)]),
            Report(1, State::Retracted, Reason::Cpu, 200),
            Report(2, State::Retracted, Reason::Cpu, 300),
        ]);
        assert_never_back(&s);
        assert_eq!(s.last().unwrap()[0], MS(60));
    }

    #[test]
    fn pin_time_never_goes_back_between_a_pins_end_and_its_completion() {
        let s = series(&[
            Report(1, State::InProgress, Reason::Sleep, 25),
            Live(&[(1, 300)]),
            // The pin has ended: it is gone from the live list, its completion still queued.
            Live(&[]),
            Live(&[]),
            Report(1, State::Completed, Reason::Sleep, 320),
        ]);
        assert_never_back(&s);
        assert_eq!(s.last().unwrap()[1], MS(320));
    }

    #[test]
    fn pin_time_never_goes_back_when_the_completion_is_dropped() {
        let mut steps = vec![
            Report(1, State::InProgress, Reason::Io, 25),
            Live(&[(1, 900), (2, 10)]),
        ];
        // Completion dropped: the pin never comes back, nor does its report; a later pin runs.
        for _ in 0..5 {
            steps.push(Live(&[(2, 30)]));
        }
        steps.push(Report(2, State::InProgress, Reason::Io, 30));
        steps.push(Live(&[(2, 60)]));
        let s = series(&steps);
        assert_never_back(&s);
        assert_eq!(s.last().unwrap()[2], MS(960));
    }

    /// Pins whose completions are dropped are forgotten past the bound, the oldest first, by
    /// the pin counter as by the time: its memory stays bounded (it kept every id), and a pin
    /// still running is kept, so that its next report does not count it again.
    #[test]
    fn a_tally_forgets_the_oldest_dropped_completions_past_its_bound() {
        let mut tally = PinTally::new(8);
        let stuck = PinnedEvent::for_test(1, State::InProgress, Reason::Cpu, 25, 3);
        assert!(tally.report(&stuck).pin.is_some());
        for id in 2..(3 * MAX_OPEN_PINS as u64) {
            tally.advance(&[(1, MS(id))], |_, _| {});
            let e = PinnedEvent::for_test(id, State::InProgress, Reason::Sleep, 25, 3);
            assert!(tally.report(&e).pin.is_some(), "pin {id}");
            assert!(tally.seen.counted.len() <= MAX_OPEN_PINS);
            assert!(tally.time.open() <= MAX_OPEN_PINS);
        }
        let again = PinnedEvent::for_test(1, State::InProgress, Reason::Cpu, 9_000, 3);
        assert_eq!(tally.report(&again).pin, None);
    }

    #[test]
    fn pin_time_forgets_the_oldest_dropped_completions_past_its_bound() {
        let mut time = PinTime::new();
        let mut total = Duration::ZERO;
        // Pin 1 stays stuck; thousands of others lose their completions.
        time.report(
            &PinnedEvent::for_test(1, State::InProgress, Reason::Other, 25, 1),
            |_, d| total += d,
        );
        for id in 2..(MAX_OPEN_PINS as u64 + 100) {
            time.advance(&[(1, MS(id))], |_, d| total += d);
            let e = PinnedEvent::for_test(id, State::InProgress, Reason::Sleep, 25, 1);
            time.report(&e, |_, d| total += d);
            assert!(time.open() <= MAX_OPEN_PINS);
        }
        // The stuck pin was kept: its live age still counts.
        let before = total;
        time.advance(&[(1, MS(10_000))], |_, d| total += d);
        assert_eq!(total - before, MS(10_000) - MS(MAX_OPEN_PINS as u64 + 99));
    }
}
