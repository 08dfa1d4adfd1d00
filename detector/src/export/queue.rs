//! The queue in front of a thread of pinwatch's own that takes events from the export thread:
//! an exporter's (OTLP, console) or a sink's that may block.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::event::PinnedEvent;

/// Hands each event to a thread through a bounded queue, and never waits: what does not fit is
/// dropped and counted. The event goes shared, not copied: every queue holds the one the export
/// thread made, a pointer a place, and it is freed when the last thread is done with it.
pub(crate) struct QueueSink {
    tx: Option<crate::handoff::Sender<Arc<PinnedEvent>>>,
    dropped: Arc<AtomicU64>,
}

impl QueueSink {
    pub(crate) fn new(
        tx: Option<crate::handoff::Sender<Arc<PinnedEvent>>>,
        dropped: Arc<AtomicU64>,
    ) -> QueueSink {
        QueueSink { tx, dropped }
    }

    /// Queues `event`, or counts it dropped.
    pub(crate) fn send(&self, event: &Arc<PinnedEvent>) {
        if let Some(tx) = &self.tx {
            if tx.try_send(Arc::clone(event)).is_err() {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// No more events: the queue closes, which ends the thread's loop once it is drained.
    pub(crate) fn close(&mut self) {
        drop(self.tx.take());
    }
}
