//! What `status` shows that only the analysis knows: the latest report of each pin running now
//! (reason, frame) and the top locations so far. Fed by a sink on the export thread.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::event::{PinnedEvent, State};
use crate::export::Sink;
use crate::report::{Summary, SummaryRow};

/// Distinct top frames remembered; later ones count as `(other locations)`.
const MAX_LOCATIONS: usize = 1000;

#[derive(Default)]
struct State_ {
    /// The latest report of each pin not yet completed, by event id.
    open: HashMap<u64, PinnedEvent>,
    /// Completed pins.
    done: Summary,
}

/// Shared between the export thread (which feeds it) and the control thread (which reads it).
#[derive(Clone)]
pub(crate) struct View(Arc<Mutex<State_>>);

impl Default for View {
    fn default() -> Self {
        View(Arc::new(Mutex::new(State_ {
            open: HashMap::new(),
            done: Summary::bounded(MAX_LOCATIONS),
        })))
    }
}

impl View {
    fn lock(&self) -> std::sync::MutexGuard<'_, State_> {
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
                state.open.insert(e.id, e.clone());
            }
            State::Completed => {
                state.open.remove(&e.id);
                state.done.add(e);
            }
            State::Retracted => {
                state.open.remove(&e.id);
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
            ("src/app.rs:10", 1)
        );
        sink.event(&e(1, State::Completed, 1500, 10));
        sink.event(&e(2, State::Retracted, 45, 20));
        assert!(view.open(1).is_none() && view.open(2).is_none());
        let top = view.top(5);
        assert_eq!((top.len(), top[0].lines.len()), (1, 1));
        assert_eq!((top[0].count, top[0].in_progress), (1, 0));
        assert_eq!(top[0].total_ms, 1500.0);
    }
}
