//! The export thread's loop: every finished event handed to every sink in turn.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use super::threaded::{Threaded, FLUSH_WAIT};
use super::Sink;
use crate::analyze::Analyzer;
use crate::event::PinnedEvent;
use crate::watch::{RawReport, Shared};
use crate::Error;

/// Every sink, in order: those the export thread runs itself, then those on threads of their
/// own.
pub(crate) struct Fanout {
    sinks: Vec<Box<dyn Sink>>,
    threaded: Vec<Threaded>,
}

impl Fanout {
    pub(crate) fn new(sinks: Vec<Box<dyn Sink>>, threaded: Vec<Threaded>) -> Fanout {
        Fanout { sinks, threaded }
    }

    /// Hands `event` to every sink; a sink's panic is contained.
    pub(crate) fn deliver(&mut self, event: &PinnedEvent) {
        for sink in self.sinks.iter_mut() {
            let _ = catch_unwind(AssertUnwindSafe(|| sink.event(event)));
        }
        for sink in self.threaded.iter_mut() {
            sink.event(event);
        }
    }

    /// Flushes every sink, once, at the end: the sinks on threads of their own all closed at
    /// once, then waited for together, up to [`FLUSH_WAIT`] in all (not for each).
    pub(crate) fn flush(&mut self) {
        for sink in self.sinks.iter_mut() {
            let _ = catch_unwind(AssertUnwindSafe(|| sink.flush()));
        }
        for sink in self.threaded.iter_mut() {
            sink.close();
        }
        let deadline = Instant::now() + FLUSH_WAIT;
        for sink in &self.threaded {
            sink.wait(deadline);
        }
    }
}

/// Starts the export thread: each raw report from the watchdog analysed (with the stack
/// settings in force) and handed to every sink in `sinks`; when the watchdog's sender is gone
/// and the queue drained, the sinks are flushed and the thread ends.
pub(crate) fn spawn_export_thread(
    watched: Arc<Shared>,
    reports: crate::handoff::Receiver<RawReport>,
    sinks: Vec<Box<dyn Sink>>,
    threaded: Vec<Threaded>,
) -> Result<JoinHandle<()>, Error> {
    std::thread::Builder::new()
        .name("pinwatch-export".into())
        .spawn(move || {
            let mut settings = watched.tunables.reader();
            let mut analyzer = Analyzer::new(watched.config.stacks);
            let mut fanout = Fanout::new(sinks, threaded);
            for raw in reports {
                analyzer.stacks = settings.refresh(&watched.tunables).stacks;
                if let Some(event) = analyzer.filter(raw, &watched.stats) {
                    fanout.deliver(&event);
                    watched.stats.delivered.fetch_add(1, Ordering::Relaxed);
                }
            }
            fanout.flush();
        })
        .map_err(|source| Error::Thread {
            what: "export",
            source,
        })
}
