//! The export thread's loop: every finished event handed to every sink in turn.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use super::threaded::{Threaded, FLUSH_WAIT};
use super::{QueueSink, Sink};
use crate::analyze::Analyzer;
use crate::event::PinnedEvent;
use crate::watch::{RawReport, Shared};
use crate::Error;

/// Where the export thread hands an event: a sink it runs itself (the recordings, Prometheus, the
/// `ctl` view), or the queue of a thread of an exporter's own (OTLP, console), which takes the
/// event shared.
pub(crate) enum Outlet {
    Inline(Box<dyn Sink>),
    #[cfg_attr(not(any(feature = "otlp", feature = "console")), allow(dead_code))]
    Queue(QueueSink),
}

impl Outlet {
    /// Hands `event` on; a sink's panic is contained.
    fn deliver(&mut self, event: &Arc<PinnedEvent>) {
        match self {
            Outlet::Inline(sink) => {
                let _ = catch_unwind(AssertUnwindSafe(|| sink.event(event)));
            }
            Outlet::Queue(queue) => queue.send(event),
        }
    }

    /// No more events: a sink flushed, a queue closed.
    fn flush(&mut self) {
        match self {
            Outlet::Inline(sink) => {
                let _ = catch_unwind(AssertUnwindSafe(|| sink.flush()));
            }
            Outlet::Queue(queue) => queue.close(),
        }
    }
}

/// Every sink, in order: the outlets, then the sinks on threads of their own. An event is made
/// once and shared by all: the queues hold it, not copies of it.
pub(crate) struct Fanout {
    outlets: Vec<Outlet>,
    threaded: Vec<Threaded>,
}

impl Fanout {
    pub(crate) fn new(outlets: Vec<Outlet>, threaded: Vec<Threaded>) -> Fanout {
        Fanout { outlets, threaded }
    }

    /// Hands `event` to every sink.
    pub(crate) fn deliver(&mut self, event: PinnedEvent) {
        let event = Arc::new(event);
        for outlet in self.outlets.iter_mut() {
            outlet.deliver(&event);
        }
        for sink in &self.threaded {
            sink.send(&event);
        }
    }

    /// Flushes every sink, once, at the end: the sinks on threads of their own all closed at
    /// once, then waited for together, up to [`FLUSH_WAIT`] in all (not for each).
    pub(crate) fn flush(&mut self) {
        for outlet in self.outlets.iter_mut() {
            outlet.flush();
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
    reports: crate::handoff::Receiver<Box<RawReport>>,
    sinks: Vec<Outlet>,
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
                if let Some(event) = analyzer.filter(*raw, &watched.stats) {
                    fanout.deliver(event);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Reason, State};
    use std::sync::atomic::AtomicU64;

    /// The queues get the one event the export thread made, not copies of it, in order after
    /// the inline sinks before them; closed at the flush.
    #[test]
    fn queues_share_the_event_and_close_at_the_flush() {
        let queue = || {
            let (tx, rx) = crate::handoff::bounded::<Arc<PinnedEvent>>(4);
            let q = QueueSink::new(Some(tx), Arc::new(AtomicU64::new(0)));
            (Outlet::Queue(q), rx)
        };
        let ((first, a), (second, b)) = (queue(), queue());
        let seen = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&seen);
        let inline = move |e: &PinnedEvent| {
            counter.store(e.id, std::sync::atomic::Ordering::Relaxed);
        };
        let mut fanout = Fanout::new(
            vec![first, Outlet::Inline(Box::new(inline)), second],
            vec![],
        );
        fanout.deliver(PinnedEvent::for_test(
            7,
            State::Completed,
            Reason::Sleep,
            30,
            1,
        ));
        let (x, y) = (a.recv().unwrap(), b.recv().unwrap());
        assert!(Arc::ptr_eq(&x, &y), "each queue got a copy of its own");
        assert_eq!(x.id, 7);
        assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), 7);
        drop((x, y));
        fanout.flush();
        assert!(
            a.recv().is_none() && b.recv().is_none(),
            "a queue stayed open"
        );
    }
}
