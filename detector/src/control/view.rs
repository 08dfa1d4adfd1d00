//! What `status` shows that only the analysis knows: the latest report of each pin running now
//! (reason, frame) and the top locations so far. Fed by a sink on the export thread.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::event::{PinnedEvent, State};
use crate::export::Sink;
use crate::recording::{Summary, SummaryRow};

/// Distinct top frames remembered; later ones count as `(other locations)`.
const MAX_LOCATIONS: usize = 1000;

/// Pins remembered as running. Far more than can run at once (one per worker and `block_on`
/// body); the bound is for pins whose `completed` report the queue dropped, which would
/// otherwise stay here for good — about 12 KB each with full stacks, without limit under a pin
/// storm. Past it the one reported longest ago goes; one still running comes back at its
/// next re-report.
const MAX_OPEN: usize = 1024;

#[derive(Default)]
struct Pins {
    /// The latest report of each pin not yet completed, by event id (at most [`MAX_OPEN`]).
    open: HashMap<u64, PinnedEvent>,
    /// When each of `open` was last reported, in events seen.
    reported: HashMap<u64, u64>,
    /// Events seen.
    seen: u64,
    /// Completed pins.
    done: Summary,
}

/// Shared between the export thread (which feeds it) and the control thread (which reads it).
#[derive(Clone)]
pub(crate) struct View(Arc<Mutex<Pins>>);

impl Default for View {
    fn default() -> Self {
        View(Arc::new(Mutex::new(Pins {
            open: HashMap::new(),
            reported: HashMap::new(),
            seen: 0,
            done: Summary::bounded(MAX_LOCATIONS),
        })))
    }
}

impl View {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pins> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The latest report of pin `id`, if it is running and has been analysed.
    pub(crate) fn open(&self, id: u64) -> Option<PinnedEvent> {
        self.lock().open.get(&id).cloned()
    }

    /// The top `n` locations: completed pins plus the running ones at their latest report.
    pub(crate) fn top(&self, n: usize) -> Vec<SummaryRow> {
        let state = self.lock();
        let mut summary = state.done.clone();
        for e in state.open.values() {
            summary.add(e);
        }
        drop(state);
        let mut rows = summary.rows();
        rows.truncate(n);
        rows
    }

    pub(crate) fn sink(&self) -> ViewSink {
        ViewSink(self.clone())
    }
}

/// See [`View`].
pub(crate) struct ViewSink(View);

impl Sink for ViewSink {
    fn event(&mut self, e: &PinnedEvent) {
        let mut state = self.0.lock();
        match e.state {
            State::InProgress => {
                state.seen += 1;
                let seen = state.seen;
                state.open.insert(e.id, e.clone());
                state.reported.insert(e.id, seen);
                if state.open.len() > MAX_OPEN {
                    // Rare (completions dropped): a scan of at most MAX_OPEN + 1.
                    if let Some(oldest) = state.reported.iter().min_by_key(|(_, at)| **at) {
                        let oldest = *oldest.0;
                        state.open.remove(&oldest);
                        state.reported.remove(&oldest);
                    }
                }
            }
            State::Completed => {
                state.open.remove(&e.id);
                state.reported.remove(&e.id);
                state.done.add(e);
            }
            State::Retracted => {
                state.open.remove(&e.id);
                state.reported.remove(&e.id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Reason;

    #[test]
    fn counts_each_pin_once_and_forgets_retracted_ones() {
        let view = View::default();
        let mut sink = view.sink();
        let e = |id, state, ms, line| PinnedEvent::for_test(id, state, Reason::Sleep, ms, line);
        sink.event(&e(1, State::InProgress, 30, 10));
        sink.event(&e(1, State::InProgress, 1030, 10));
        sink.event(&e(2, State::InProgress, 40, 20));
        assert_eq!(view.open(1).unwrap().duration.as_millis(), 1030);
        // One function, at two lines: the longer first.
        let top = view.top(5);
        assert_eq!((top.len(), top[0].lines.len()), (1, 2));
        assert_eq!((top[0].count, top[0].in_progress), (2, 2));
        assert_eq!(
            (top[0].lines[0].at.as_str(), top[0].lines[0].count),
            ("app/src/app.rs:10", 1)
        );
        sink.event(&e(1, State::Completed, 1500, 10));
        sink.event(&e(2, State::Retracted, 45, 20));
        assert!(view.open(1).is_none() && view.open(2).is_none());
        let top = view.top(5);
        assert_eq!((top.len(), top[0].lines.len()), (1, 1));
        assert_eq!((top[0].count, top[0].in_progress), (1, 0));
        assert_eq!(top[0].total_ms, 1500.0);
    }

    /// Pins whose `completed` report never came (the queue dropped it) do not pile up: the
    /// view keeps the MAX_OPEN reported last, and a pin still running comes back at its next
    /// report.
    #[test]
    fn pins_whose_completion_was_dropped_do_not_pile_up() {
        let view = View::default();
        let mut sink = view.sink();
        let n = MAX_OPEN as u64 * 3;
        for id in 1..=n {
            sink.event(&PinnedEvent::for_test(
                id,
                State::InProgress,
                Reason::Sleep,
                30,
                10,
            ));
        }
        assert_eq!(view.lock().open.len(), MAX_OPEN);
        assert!(view.open(1).is_none() && view.open(n).is_some());
        // The oldest, still stuck, is re-reported: it is shown again.
        sink.event(&PinnedEvent::for_test(
            1,
            State::InProgress,
            Reason::Sleep,
            5000,
            10,
        ));
        assert_eq!(view.open(1).unwrap().duration.as_millis(), 5000);
        assert_eq!(view.lock().open.len(), MAX_OPEN);
    }
}
