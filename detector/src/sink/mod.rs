//! Sinks: where events go. The watchdog hands each report to one bounded queue (never waiting:
//! a full queue drops and counts); the sink thread turns the raw probes into frames and a reason
//! (symbol resolution is slow and allocates, so it happens here, off the watchdog's path) and
//! gives the finished event to every sink in turn.

mod record;
mod tracing_sink;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;

use crate::config::{Config, Stacks};
use crate::event::PinnedEvent;
use crate::watchdog::Report;
use crate::{reason, stack, Error};

pub use record::RecordSink;
pub use tracing_sink::TracingSink;

/// Receives finished events, one at a time, on pinwatch's sink thread.
///
/// Any `FnMut(&PinnedEvent) + Send + 'static` closure is a sink. A sink that panics loses that
/// event only; the others still get it.
pub trait Sink: Send + 'static {
    /// One event.
    fn event(&mut self, event: &PinnedEvent);

    /// Called once when the detector stops, after the last event.
    fn flush(&mut self) {}
}

impl<F: FnMut(&PinnedEvent) + Send + 'static> Sink for F {
    fn event(&mut self, event: &PinnedEvent) {
        self(event)
    }
}

/// The sinks the configuration turns on.
pub(crate) fn builtin(config: &Config) -> Result<Vec<Box<dyn Sink>>, Error> {
    let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
    if config.tracing {
        sinks.push(Box::new(TracingSink::new(config.stacks)));
    }
    if let Some(path) = &config.record {
        sinks.push(Box::new(RecordSink::open(path)?));
    }
    Ok(sinks)
}

/// The sink thread's loop: until the watchdog hangs up.
pub(crate) fn run(rx: mpsc::Receiver<Report>, mut sinks: Vec<Box<dyn Sink>>, stacks: Stacks) {
    let mut resolver = stack::Resolver::default();
    for report in rx {
        let event = finish(report, &mut resolver, stacks);
        for sink in sinks.iter_mut() {
            let _ = catch_unwind(AssertUnwindSafe(|| sink.event(&event)));
        }
    }
    for sink in sinks.iter_mut() {
        let _ = catch_unwind(AssertUnwindSafe(|| sink.flush()));
    }
}

/// Resolves the probes' stacks and decides the reason. Each probe is classified on its own; the
/// dominant reason wins and the others are listed.
fn finish(report: Report, resolver: &mut stack::Resolver, stacks: Stacks) -> PinnedEvent {
    let Report { mut event, probes } = report;
    let mut verdicts = Vec::with_capacity(probes.len());
    let mut last_frames = Vec::new();
    for probe in &probes {
        let frames = match &probe.stack {
            Some(ips) => resolver.resolve(ips),
            None => Vec::new(),
        };
        verdicts.extend(reason::classify(
            probe.proc.as_ref(),
            &frames,
            !probe.held.is_empty(),
            probe.waiting_for.is_some(),
        ));
        if probe.stack.is_some() {
            last_frames = frames;
        }
    }
    // Dominant reason: most samples; on a tie, the latest seen.
    let mut counts: Vec<(crate::Reason, usize, usize)> = Vec::new();
    for (i, v) in verdicts.iter().enumerate() {
        match counts.iter_mut().find(|(r, _, _)| *r == v.reason) {
            Some((_, n, last)) => {
                *n += 1;
                *last = i;
            }
            None => counts.push((v.reason, 1, i)),
        }
    }
    if let Some(&(best, _, last)) = counts.iter().max_by_key(|(_, n, last)| (*n, *last)) {
        event.reason = Some(best);
        event.other_reasons = counts
            .iter()
            .map(|(r, _, _)| *r)
            .filter(|r| *r != best)
            .collect();
        event.blocking_operation = Some(verdicts[last].operation.clone());
    }
    if let Some(last) = probes.last() {
        event.held_locks = last.held.iter().map(|h| h.to_event()).collect();
        event.lock_holder = last.waiting_for.as_ref().and_then(|w| w.to_event());
        stack::mark_lock_frames(&mut last_frames, &last.held);
    }
    event.top_frame = reason::top_frame(&last_frames).cloned();
    event.stack = match stacks {
        Stacks::Full => last_frames,
        Stacks::Short => last_frames
            .into_iter()
            .filter(|f| f.locks > 0 || Some(f) == event.top_frame.as_ref())
            .collect(),
        Stacks::Off => Vec::new(),
    };
    event
}
