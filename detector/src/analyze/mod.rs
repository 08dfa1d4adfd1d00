//! Analysis, off the hot path and off the watchdog: raw reports (instruction pointers, `/proc`
//! readings, held-lock entries) become finished [`PinnedEvent`]s — frames, a reason, the top
//! application frame and a profile of where a long pin's samples were.

mod advice;
mod dwarf;
mod elf;
pub(crate) mod reason;
mod symbols;

use crate::config::Stacks;
use crate::event::{
    Frame, HeldLock, LockHolder, PinnedEvent, ProfileEntry, Reason, SourceLocation, State, Worker,
};
use crate::watch::probe::Between;
use crate::watch::{RawReport, StatsCounters};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::atomic::Ordering;

/// Turns raw reports into events. Keeps a symbol cache across reports.
pub(crate) struct Analyzer {
    resolver: symbols::Resolver,
    /// How much of the stack events keep (follows the settings in force).
    pub(crate) stacks: Stacks,
    /// Polls whose stack showed `block_in_place`: their later reports are dropped.
    in_block_in_place: HashSet<u64>,
    /// Polls with a report delivered and not yet completed.
    open: HashSet<u64>,
    /// Whether the latest sample of the report just analysed was inside `block_in_place`.
    last_sample_in_block_in_place: bool,
    /// The latest reports' analyses: a pin's later report with the same probes (its completed
    /// report, most often) takes its analysis from here instead of resolving and classifying
    /// them again, which was half of the export thread's work for short pins.
    recent: Vec<Analysed>,
    /// The stacks sampled lately, by their instruction pointers.
    sampled: HashMap<Vec<usize>, Rc<Stack>>,
}

/// How many stacks [`Analyzer`] keeps resolved and read: a service pins at a few lines, over
/// and over. At most this many (cleared when full), of a few kilobytes each.
const STACKS: usize = 16;

/// A sampled stack, resolved and read once ([`Analyzer::stack`]).
struct Stack {
    /// Innermost first.
    frames: Vec<Frame>,
    /// The top application frame's index.
    top: Option<usize>,
    /// The innermost frame of the service's own code.
    own: Option<usize>,
    facts: reason::StackFacts,
    in_block_in_place: bool,
    /// Inside an executor's `block_on`.
    block_on: bool,
}

/// How many analyses [`Analyzer`] keeps: a pin's reports follow one another closely, and few
/// pins run at once.
const RECENT: usize = 8;

/// What [`Analyzer::analyze`] made of a pin's probes: a function of the probes and the stacks
/// setting alone (the watchdog leaves these fields empty).
struct Analysed {
    /// The pin's id, its probe count, and the stacks setting then.
    key: (u64, u64, Stacks),
    reason: Option<Reason>,
    other_reasons: Vec<Reason>,
    blocking_operation: Option<String>,
    advice: Option<String>,
    top_frame: Option<Frame>,
    app_frame: Option<Frame>,
    profile: Vec<ProfileEntry>,
    no_stack: Option<String>,
    stack: Vec<Frame>,
    held_locks: Vec<HeldLock>,
    lock_holder: Option<LockHolder>,
    in_block_in_place: bool,
}

impl Analysed {
    fn of(key: (u64, u64, Stacks), e: &PinnedEvent, in_block_in_place: bool) -> Analysed {
        Analysed {
            key,
            reason: e.reason,
            other_reasons: e.other_reasons.clone(),
            blocking_operation: e.blocking_operation.clone(),
            advice: e.advice.clone(),
            top_frame: e.top_frame.clone(),
            app_frame: e.app_frame.clone(),
            profile: e.profile.clone(),
            no_stack: e.no_stack.clone(),
            stack: e.stack.clone(),
            held_locks: e.held_locks.clone(),
            lock_holder: e.lock_holder.clone(),
            in_block_in_place,
        }
    }

    fn apply(&self, e: &mut PinnedEvent) {
        e.reason = self.reason;
        e.other_reasons.clone_from(&self.other_reasons);
        e.blocking_operation.clone_from(&self.blocking_operation);
        e.advice.clone_from(&self.advice);
        e.top_frame.clone_from(&self.top_frame);
        e.app_frame.clone_from(&self.app_frame);
        e.profile.clone_from(&self.profile);
        e.no_stack.clone_from(&self.no_stack);
        e.stack.clone_from(&self.stack);
        e.held_locks.clone_from(&self.held_locks);
        e.lock_holder.clone_from(&self.lock_holder);
    }
}

impl Analyzer {
    pub(crate) fn new(stacks: Stacks) -> Analyzer {
        Analyzer {
            resolver: symbols::Resolver::default(),
            stacks,
            in_block_in_place: HashSet::new(),
            open: HashSet::new(),
            last_sample_in_block_in_place: false,
            recent: Vec::with_capacity(RECENT),
            sampled: HashMap::new(),
        }
    }

    /// The stack sampled at `ips`: resolved and read the first time it is seen.
    fn stack(&mut self, ips: &[usize]) -> Rc<Stack> {
        if let Some(s) = self.sampled.get(ips) {
            return Rc::clone(s);
        }
        let frames = self.resolver.resolve(ips);
        let stack = Rc::new(Stack {
            top: frames.iter().position(reason::is_application),
            own: frames.iter().position(reason::is_own_code),
            facts: reason::StackFacts::of(&frames),
            in_block_in_place: reason::in_block_in_place(&frames),
            block_on: advice::in_block_on(&frames),
            frames,
        });
        if self.sampled.len() >= STACKS {
            self.sampled.clear();
        }
        self.sampled.insert(ips.to_vec(), Rc::clone(&stack));
        stack
    }

    /// [`analyze`](Self::analyze), except for polls whose stack shows they are inside
    /// `tokio::task::block_in_place` — not pinning, though tokio had not yet recorded the worker's
    /// hand-over when the watchdog checked (it records it only once another thread runs the
    /// worker). Those give no event, or one `retracted` event when an earlier report of theirs
    /// had gone out.
    pub(crate) fn filter(
        &mut self,
        report: RawReport,
        stats: &StatsCounters,
    ) -> Option<PinnedEvent> {
        let id = report.event.id;
        let state = report.event.state;
        if self.in_block_in_place.contains(&id) {
            // Already counted and dealt with.
            if state != State::InProgress {
                self.in_block_in_place.remove(&id);
            }
            return None;
        }
        let not_pinning = |stats: &StatsCounters| {
            stats.block_in_place.fetch_add(1, Ordering::Relaxed);
            stats.pinned_polls.fetch_sub(1, Ordering::Relaxed);
        };
        let in_section = match state {
            State::Retracted => true,
            State::InProgress => self.latest_in_block_in_place(&report),
            State::Completed => false,
        };
        if let Some((ran, looks)) = in_section.then(|| self.before_section(&report)).flatten() {
            // It pinned its worker before it went into the section: that part is a pin, ended
            // where the section began, as far as the looks tell (the last that found it outside).
            // Analysed from those looks only: the section's own are not where it blocked.
            let mut report = report;
            report.probes.truncate(looks);
            let mut event = self.analyze_probes(report);
            event.state = State::Completed;
            event.duration = ran;
            self.open.remove(&id);
            if state == State::InProgress {
                // Its later reports (the section, the retraction) are not this pin's.
                self.in_block_in_place.insert(id);
            }
            return Some(event);
        }
        let mut event = self.analyze(report);
        match state {
            State::Retracted => {
                // The watchdog saw the hand-over in tokio's metrics.
                not_pinning(stats);
                stats.retracted.fetch_add(1, Ordering::Relaxed);
                self.open.remove(&id);
                Some(event)
            }
            State::InProgress if self.last_sample_in_block_in_place => {
                not_pinning(stats);
                self.in_block_in_place.insert(id);
                if !self.open.remove(&id) {
                    return None;
                }
                stats.retracted.fetch_add(1, Ordering::Relaxed);
                event.state = State::Retracted;
                Some(event)
            }
            State::InProgress => {
                self.open.insert(id);
                Some(event)
            }
            State::Completed => {
                self.open.remove(&id);
                Some(event)
            }
        }
    }

    /// Whether the latest sampled look at `report`'s poll found it inside `block_in_place`.
    fn latest_in_block_in_place(&mut self, report: &RawReport) -> bool {
        let latest = report.probes.iter().rev().find_map(|p| p.stack.as_deref());
        latest.is_some_and(|ips| self.stack(ips).in_block_in_place)
    }

    /// For a poll found inside `block_in_place`: how long it had run when the last look before
    /// the section found it outside, and how many looks that is. Looks start at the verdict (the
    /// threshold reached), so such a look shows that the poll pinned its worker before the
    /// section; retracted whole, a 150 ms sleep followed by `block_in_place` went unreported
    /// (helper-106). `None` when no timed look found it outside first.
    fn before_section(&mut self, report: &RawReport) -> Option<(std::time::Duration, usize)> {
        let mut found = None;
        for (i, probe) in report.probes.iter().enumerate() {
            let Some(ips) = probe.stack.as_deref() else {
                continue;
            };
            if self.stack(ips).in_block_in_place {
                break;
            }
            if let Some(reading) = probe.reading {
                found = Some((reading.at.saturating_duration_since(report.start), i + 1));
            }
        }
        found
    }

    /// Resolves the probes' stacks, classifies each probe (the dominant reason wins, the others
    /// are listed), and picks the top frame most samples had.
    pub(crate) fn analyze(&mut self, report: RawReport) -> PinnedEvent {
        let key = (report.event.id, report.probes_taken, self.stacks);
        if let Some(done) = self.recent.iter().find(|a| a.key == key) {
            let mut event = report.event;
            done.apply(&mut event);
            self.last_sample_in_block_in_place = done.in_block_in_place;
            return event;
        }
        let event = self.analyze_probes(report);
        if self.recent.len() == RECENT {
            self.recent.remove(0);
        }
        self.recent.push(Analysed::of(
            key,
            &event,
            self.last_sample_in_block_in_place,
        ));
        event
    }

    fn analyze_probes(&mut self, report: RawReport) -> PinnedEvent {
        let RawReport {
            mut event, probes, ..
        } = report;
        let mut verdicts = Vec::with_capacity(probes.len());
        // Per sampled probe: its stack.
        let mut sampled: Vec<(usize, Rc<Stack>)> = Vec::new();
        for (i, probe) in probes.iter().enumerate() {
            let stack = probe.stack.as_deref().map(|ips| self.stack(ips));
            let facts = stack.as_ref().map_or_else(Default::default, |s| s.facts);
            verdicts.extend(
                reason::classify_stack(
                    probe.proc.as_ref(),
                    &facts,
                    !probe.held.is_empty(),
                    probe.waiting_for.is_some(),
                )
                .map(|v| {
                    let woke = (v.reason == Reason::Cpu && probe.between == Between::Blocked)
                        .then(|| reason::woken(&facts));
                    (v, probe.ran, woke)
                }),
            );
            if let Some(stack) = stack {
                sampled.push((i, stack));
            }
        }
        let verdicts = name_unseen_blocks(verdicts);
        self.last_sample_in_block_in_place =
            sampled.last().is_some_and(|(_, s)| s.in_block_in_place);
        let sampled_frames: Vec<(&[Frame], Option<usize>)> = sampled
            .iter()
            .map(|(_, s)| (s.frames.as_slice(), s.top))
            .collect();
        if let Some((best, others, op)) =
            dominant(&verdicts, crate::watch::probe::mostly_off_cpu(&probes))
        {
            event.reason = Some(best);
            event.other_reasons = others;
            event.blocking_operation = Some(op);
        }
        let last = probes.last();
        if let Some(last) = last {
            event.held_locks = last.held.iter().map(held_lock).collect();
            event.lock_holder =
                last.waiting_for
                    .as_ref()
                    .and_then(|h| h.as_ref())
                    .map(|h| LockHolder {
                        worker: Worker {
                            index: h.index,
                            tid: h.tid,
                            name: h.name.clone(),
                        },
                        acquired_at: SourceLocation::from_std(h.site),
                    });
        }
        let (profile, chosen) = profile(&sampled_frames);
        if let (Some(reason), Some(op)) = (event.reason, event.blocking_operation.as_deref()) {
            let frames: &[Frame] = chosen.map_or(&[], |k| &sampled[k].1.frames);
            // Whether the thread made read or write calls between the first and the last
            // probe that counted them.
            let counts: Vec<(u64, u64)> = probes
                .iter()
                .filter_map(|p| p.proc.as_ref()?.io_calls)
                .collect();
            let io_calls = match (counts.first(), counts.last()) {
                (Some(a), Some(b)) if counts.len() > 1 => Some(a != b),
                _ => None,
            };
            let fd = probes
                .iter()
                .rev()
                .filter_map(|p| p.proc.as_ref())
                .find(|p| p.syscall == Some(op))
                .and_then(|p| p.fd);
            let samples: Vec<&[Frame]> = sampled_frames.iter().map(|s| s.0).collect();
            event.advice = Some(advice::advise(&advice::Evidence {
                reason,
                operation: op,
                fd,
                io_calls,
                frames,
                samples: &samples,
                block_on: sampled.iter().any(|(_, s)| s.block_on),
            }));
        }
        if profile.len() > 1 || profile.first().is_some_and(|p| p.samples > 1) {
            event.profile = profile;
        }
        match chosen {
            Some(k) => {
                let (i, stack) = &sampled[k];
                let (top, own) = (stack.top, stack.own);
                let mut frames = stack.frames.clone();
                symbols::mark_lock_frames(&mut frames, &probes[*i].held);
                event.top_frame = top.map(|t| frames[t].clone());
                // The service's own frame: the innermost of its own code in the same sample,
                // whatever the stacks setting keeps of the rest.
                event.app_frame = own.map(|o| {
                    let mut f = frames[o].clone();
                    f.locks = 0;
                    f
                });
                event.stack = match self.stacks {
                    Stacks::Full => frames,
                    Stacks::Short => frames
                        .into_iter()
                        .enumerate()
                        .filter(|(j, f)| f.locks > 0 || Some(*j) == top || Some(*j) == own)
                        .map(|(_, f)| f)
                        .collect(),
                    Stacks::Off => Vec::new(),
                };
                if top.is_none() && own.is_none() {
                    // Sampled, but in the runtime's or pinwatch's own code only (the poll
                    // caught entering or leaving the task): nothing of the task to name.
                    event.no_stack = Some("no_application_frame".to_owned());
                }
            }
            None => {
                event.no_stack = Some(
                    last.and_then(|p| p.no_stack)
                        .unwrap_or("no_sample")
                        .to_owned(),
                );
            }
        }
        event
    }
}

fn held_lock(h: &crate::poll::locks::HeldEntry) -> HeldLock {
    HeldLock {
        kind: crate::sync::kind_name(h.kind).to_owned(),
        acquired_at: SourceLocation::from_std(h.site),
    }
}

/// Each probe's verdict and whether it ran throughout ([`dominant`]'s input), from the same with
/// what a probe that found the thread running just after a block names ([`reason::woken`]).
/// Where no probe saw a block, yet the accounting says the thread blocked between probes and was
/// off a CPU most of that time — a sleep of 1 ms at a time, each probe landing in a moment
/// between two, or in the wait for a CPU after one on a loaded machine — those probes name the
/// block instead of `cpu`: it is no loop. Where a probe saw the block, it names it, and those
/// probes stay `cpu` that do not count against it ([`Probe::ran`] is false for them).
///
/// [`Probe::ran`]: crate::watch::probe::Probe::ran
fn name_unseen_blocks(
    verdicts: Vec<(reason::Verdict, bool, Option<reason::Verdict>)>,
) -> Vec<(reason::Verdict, bool)> {
    let seen = verdicts.iter().any(|(v, _, _)| v.reason != Reason::Cpu);
    verdicts
        .into_iter()
        .map(|(v, ran, woke)| match woke {
            Some(w) if !seen => (w, false),
            _ => (v, ran),
        })
        .collect()
}

/// The dominant reason (most probes; on a tie the latest), the others seen, and the blocking
/// operation of the latest probe with the dominant reason. Each verdict comes with whether its
/// thread ran throughout since the previous probe ([`Probe::ran`]).
///
/// A probe that saw the thread running counts toward `cpu` against probes that saw it blocked
/// (sleeping, waiting for a lock, in I/O, …) only when the thread's accounting shows it ran
/// throughout since the probe before: a thread that slept and waits for a CPU to run on again
/// reads as running (state `R`, no system call) on a loaded machine, and a handler that sleeps
/// inside a lock spends its few running moments between the two; neither ran throughout. A
/// sleep followed by a long loop is `cpu` once the loop's probes outnumber the sleep's. A pin
/// whose every probe saw it running is `cpu` (unless the accounting says it blocked between
/// them: [`name_unseen_blocks`]); `cpu` stays in the other reasons when it does not win. Where
/// the thread spent more of the pin off a CPU than on one (`mostly_off_cpu`,
/// [`mostly_off_cpu`](crate::watch::probe::mostly_off_cpu)), no probe counts toward `cpu`
/// against a block a probe saw.
///
/// [`Probe::ran`]: crate::watch::probe::Probe::ran
fn dominant(
    verdicts: &[(reason::Verdict, bool)],
    mostly_off_cpu: bool,
) -> Option<(Reason, Vec<Reason>, String)> {
    let blocked = verdicts.iter().any(|(v, _)| v.reason != Reason::Cpu);
    let mut counts: Vec<(Reason, usize, usize)> = Vec::new();
    for (i, (v, ran)) in verdicts.iter().enumerate() {
        let counted = !blocked || v.reason != Reason::Cpu || (*ran && !mostly_off_cpu);
        match counts.iter_mut().find(|(r, _, _)| *r == v.reason) {
            Some((_, n, last)) => {
                if counted {
                    *n += 1;
                    *last = i;
                }
            }
            None => counts.push((v.reason, usize::from(counted), i)),
        }
    }
    let &(best, _, last) = counts
        .iter()
        .filter(|(_, n, _)| *n > 0)
        .max_by_key(|(_, n, last)| (*n, *last))?;
    let others = counts
        .iter()
        .map(|(r, _, _)| *r)
        .filter(|r| *r != best)
        .collect();
    Some((best, others, verdicts[last].0.operation.clone()))
}

/// The samples' top frames with their counts, most first, and which sample to show: the latest
/// one whose top frame is the most common. A frame known to the line beats one without a line
/// on a tie; a sample with no application frame counts under its innermost frame.
fn profile(sampled: &[(&[Frame], Option<usize>)]) -> (Vec<ProfileEntry>, Option<usize>) {
    let mut entries: Vec<(ProfileEntry, usize)> = Vec::new();
    for (k, (frames, top)) in sampled.iter().enumerate() {
        let Some(frame) = top.map(|t| &frames[t]).or(frames.first()) else {
            continue;
        };
        let mut frame = frame.clone();
        frame.locks = 0;
        match entries.iter_mut().find(|(e, _)| e.frame == frame) {
            Some((e, latest)) => {
                e.samples += 1;
                *latest = k;
            }
            None => entries.push((ProfileEntry { frame, samples: 1 }, k)),
        }
    }
    let chosen = entries
        .iter()
        .max_by_key(|(e, latest)| (e.samples, e.frame.line.is_some(), *latest))
        .map(|(_, k)| *k)
        .or_else(|| sampled.len().checked_sub(1));
    entries.sort_by(|a, b| b.0.samples.cmp(&a.0.samples).then(a.1.cmp(&b.1)));
    (entries.into_iter().map(|(e, _)| e).collect(), chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(function: &str, line: Option<u32>) -> Frame {
        Frame {
            function: Some(function.to_owned()),
            file: Some("src/app.rs".to_owned()),
            line,
            locks: 0,
        }
    }

    #[test]
    fn the_top_frame_is_where_most_samples_were() {
        let hot = at("app::hot_loop", Some(10));
        let tail = at("app::hot_loop", Some(14));
        let std = Frame::named("std::time::Instant::now");
        let (a, b, c) = ([std.clone(), hot.clone()], [hot.clone()], [tail.clone()]);
        let sampled: Vec<(&[Frame], Option<usize>)> =
            vec![(&a, Some(1)), (&b, Some(0)), (&b, Some(0)), (&c, Some(0))];
        let (profile, chosen) = profile(&sampled);
        assert_eq!(chosen, Some(2));
        assert_eq!(profile.len(), 2);
        assert_eq!((profile[0].frame.line, profile[0].samples), (Some(10), 3));
        assert_eq!((profile[1].frame.line, profile[1].samples), (Some(14), 1));
    }

    /// A report of pin `id` with `taken` probes, the latest in system call `syscall`.
    fn report(id: u64, taken: u64, syscall: &'static str) -> RawReport {
        let mut event = PinnedEvent::for_test(id, State::InProgress, Reason::Cpu, 30, 1);
        event.reason = None;
        event.top_frame = None;
        let probe = crate::watch::probe::Probe {
            proc: Some(crate::watch::probe::ProcState {
                state: 'S',
                syscall: Some(syscall),
                ..Default::default()
            }),
            ..Default::default()
        };
        RawReport {
            event,
            probes: vec![probe],
            probes_taken: taken,
            start: std::time::Instant::now(),
        }
    }

    #[test]
    fn a_later_report_with_the_same_probes_takes_the_first_ones_analysis() {
        let mut a = Analyzer::new(Stacks::Short);
        let first = a.analyze(report(1, 1, "clock_nanosleep"));
        assert_eq!(first.reason, Some(Reason::Sleep));
        assert_eq!(first.no_stack.as_deref(), Some("no_sample"));
        // The same pin with as many probes carries the same ones: not analysed again (these,
        // made to differ, would say `io`).
        let again = a.analyze(report(1, 1, "read"));
        assert_eq!(again.reason, Some(Reason::Sleep));
        assert_eq!(again.blocking_operation.as_deref(), Some("clock_nanosleep"));
        assert_eq!(again.no_stack.as_deref(), Some("no_sample"));
        // A probe more, another pin, or another stacks setting: analysed.
        assert_eq!(a.analyze(report(1, 2, "read")).reason, Some(Reason::Io));
        assert_eq!(a.analyze(report(2, 1, "read")).reason, Some(Reason::Io));
        a.stacks = Stacks::Full;
        assert_eq!(a.analyze(report(1, 1, "read")).reason, Some(Reason::Io));
        // Bounded, the oldest going first.
        for id in 10..100 {
            a.analyze(report(id, 1, "read"));
        }
        assert_eq!(a.recent.len(), RECENT);
        assert_eq!(a.analyze(report(10, 1, "write")).reason, Some(Reason::Io));
        assert_eq!(
            a.analyze(report(10, 1, "write"))
                .blocking_operation
                .as_deref(),
            Some("write")
        );
    }

    fn verdict(reason: Reason, operation: &str) -> reason::Verdict {
        reason::Verdict {
            reason,
            operation: operation.to_owned(),
        }
    }

    #[test]
    fn cpu_stands_against_a_block_only_where_the_thread_ran_throughout() {
        let v = |reason, operation, ran| (verdict(reason, operation), ran);
        let cpu = |ran| v(Reason::Cpu, "running", ran);
        let sleep = v(Reason::Sleep, "clock_nanosleep", false);
        // A handler sleeping inside a std lock on a loaded machine: most probes found it
        // runnable (woken, waiting for a CPU), the latest among them, and none ran throughout.
        let verdicts = [
            cpu(false),
            sleep.clone(),
            cpu(false),
            v(Reason::LockWait, "futex", false),
            sleep.clone(),
            cpu(false),
            cpu(false),
        ];
        let (best, others, op) = dominant(&verdicts, false).unwrap();
        assert_eq!((best, op.as_str()), (Reason::Sleep, "clock_nanosleep"));
        assert_eq!(others, vec![Reason::Cpu, Reason::LockWait]);
        // A sleep, then a longer loop whose probes ran throughout: cpu, the sleep seen. The
        // first probe of the loop (the sleep before it) does not count.
        let sleep_then_spin = [
            sleep.clone(),
            sleep.clone(),
            sleep.clone(),
            cpu(false),
            cpu(true),
            cpu(true),
            cpu(true),
        ];
        let (best, others, op) = dominant(&sleep_then_spin, false).unwrap();
        assert_eq!((best, op.as_str()), (Reason::Cpu, "running"));
        assert_eq!(others, vec![Reason::Sleep]);
        // As many probes that ran as probes that slept: the latest wins.
        assert_eq!(
            dominant(&sleep_then_spin[1..], false).unwrap().0,
            Reason::Cpu
        );
        let spin_then_sleep = [cpu(true), cpu(true), sleep.clone(), sleep.clone()];
        assert_eq!(dominant(&spin_then_sleep, false).unwrap().0, Reason::Sleep);
        // Probes that did not run throughout do not count toward cpu however many they are.
        let starved = [cpu(true), sleep.clone(), cpu(false), cpu(false), cpu(false)];
        assert_eq!(dominant(&starved, false).unwrap().0, Reason::Sleep);
        // A 40 ms sleep, then a thread kept from a CPU (nice 19 under a busy machine) through
        // probes that found it running, and running between them the little left: they ran
        // throughout, but the pin was mostly off a CPU — the sleep wins (helper-61: 16 of 29 such
        // pins were `cpu`). On a CPU most of the pin, the loop wins as above.
        let woke_late = [sleep.clone(), cpu(false), cpu(true), cpu(true)];
        assert_eq!(dominant(&woke_late, true).unwrap().0, Reason::Sleep);
        assert_eq!(dominant(&woke_late, true).unwrap().1, vec![Reason::Cpu]);
        assert_eq!(dominant(&woke_late, false).unwrap().0, Reason::Cpu);
        // With no block seen, `cpu` stands whatever the accounting said.
        assert_eq!(
            dominant(&[cpu(true), cpu(false)], true).unwrap().0,
            Reason::Cpu
        );
        // A pin whose every probe saw it running is cpu, whatever its accounting said.
        let all_cpu = [cpu(false), cpu(true)];
        let (best, others, op) = dominant(&all_cpu, false).unwrap();
        assert_eq!((best, op.as_str()), (Reason::Cpu, "running"));
        assert!(others.is_empty());
        // ... unless the accounting says it blocked between them (1 ms sleeps, each probe in
        // the moment between two, or woken and waiting for a CPU): helper-61 saw 7 of 40 such
        // pins called `cpu` with ten busy processes on two cores.
        let sleep_stack = reason::woken(&reason::StackFacts::of(&[
            Frame::named("__GI___clock_nanosleep"),
            Frame::named("std::thread::sleep"),
            at("app::work", Some(3)),
        ]));
        let other_stack = reason::woken(&reason::StackFacts::of(&[at("app::work", Some(3))]));
        assert_eq!(
            (sleep_stack.reason, sleep_stack.operation.as_str()),
            (Reason::Sleep, "clock_nanosleep")
        );
        assert_eq!(other_stack.reason, Reason::Other);
        let probe = |ran, woke: Option<&reason::Verdict>| {
            (verdict(Reason::Cpu, "running"), ran, woke.cloned())
        };
        let named = name_unseen_blocks(vec![probe(false, Some(&sleep_stack))]);
        assert_eq!(dominant(&named, false).unwrap().0, Reason::Sleep);
        let named = name_unseen_blocks(vec![
            probe(false, None),
            probe(false, Some(&other_stack)),
            probe(false, None),
        ]);
        let (best, others, op) = dominant(&named, false).unwrap();
        assert_eq!(
            (best, op.as_str()),
            (Reason::Other, "blocked_between_probes")
        );
        assert_eq!(others, vec![Reason::Cpu]);
        // A loop whose probes ran (two of three) still wins against one such probe.
        let named = name_unseen_blocks(vec![
            probe(true, None),
            probe(false, Some(&sleep_stack)),
            probe(true, None),
        ]);
        assert_eq!(dominant(&named, false).unwrap().0, Reason::Cpu);
        // Where a probe saw the block, it names it; a woken probe is a `cpu` that does not count.
        let named = name_unseen_blocks(vec![
            (verdict(Reason::Io, "read"), false, None),
            probe(false, Some(&sleep_stack)),
        ]);
        assert_eq!(named[1].0.reason, Reason::Cpu);
        assert_eq!(dominant(&named, false).unwrap().0, Reason::Io);
        // No woken probe: as before.
        let named = name_unseen_blocks(vec![probe(false, None), probe(true, None)]);
        assert_eq!(dominant(&named, false).unwrap().0, Reason::Cpu);
        // Among blocked reasons the most seen (then the latest) still wins.
        let mixed = [
            v(Reason::LockWait, "futex", false),
            sleep.clone(),
            v(Reason::Sleep, "nanosleep", true),
        ];
        let (best, _, op) = dominant(&mixed, false).unwrap();
        assert_eq!((best, op.as_str()), (Reason::Sleep, "nanosleep"));
        assert!(dominant(&[], false).is_none());
    }

    #[test]
    fn a_stack_is_resolved_once_and_few_are_kept() {
        let mut a = Analyzer::new(Stacks::Full);
        let here = a_stack_is_resolved_once_and_few_are_kept as fn() as usize + 1;
        let s = a.stack(&[here]);
        assert!(Rc::ptr_eq(&s, &a.stack(&[here])));
        assert!(
            s.frames.iter().any(|f| f
                .function
                .as_deref()
                .is_some_and(|n| n.ends_with("a_stack_is_resolved_once_and_few_are_kept"))),
            "{:?}",
            s.frames
        );
        for k in 0..STACKS * 2 {
            a.stack(&[here, k]);
            assert!(a.sampled.len() <= STACKS);
        }
    }

    #[test]
    fn a_frame_with_a_line_wins_a_tie() {
        let lineless = at("app::f", None);
        let known = at("app::f", Some(3));
        let (a, b) = ([known], [lineless]);
        let sampled: Vec<(&[Frame], Option<usize>)> = vec![(&a, Some(0)), (&b, Some(0))];
        assert_eq!(profile(&sampled).1, Some(0));
        assert_eq!(profile(&[]).1, None);
    }
}
