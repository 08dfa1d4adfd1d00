//! A sink that hands each event to an exporter thread of pinwatch's own through a bounded queue.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::Sink;
use crate::event::PinnedEvent;

/// Hands each event to an exporter thread through a bounded queue, and never waits: what does
/// not fit is dropped and counted. `flush` closes the queue, which ends the thread's loop.
pub(crate) struct QueueSink {
    tx: Option<crate::handoff::Sender<PinnedEvent>>,
    dropped: Arc<AtomicU64>,
}

impl QueueSink {
    pub(crate) fn new(
        tx: Option<crate::handoff::Sender<PinnedEvent>>,
        dropped: Arc<AtomicU64>,
    ) -> QueueSink {
        QueueSink { tx, dropped }
    }
}

impl Sink for QueueSink {
    fn event(&mut self, event: &PinnedEvent) {
        if let Some(tx) = &self.tx {
            if tx.try_send(event.clone()).is_err() {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn flush(&mut self) {
        drop(self.tx.take());
    }
}
