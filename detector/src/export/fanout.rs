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

    /// The queues and the sinks on threads of their own get the one event the export thread
    /// made, not copies of it, the queues in order with the inline sinks (the first queue has it
    /// when the inline sink runs, the second not yet); closed at the flush.
    #[test]
    fn queues_share_the_event_and_close_at_the_flush() {
        use crate::handoff::Waited;
        use std::sync::Mutex;
        use std::time::Duration;
        let queue = || {
            let (tx, rx) = crate::handoff::bounded::<Arc<PinnedEvent>>(4);
            let q = QueueSink::new(Some(tx), Arc::new(AtomicU64::new(0)));
            (Outlet::Queue(q), rx)
        };
        let ((first, a), (second, b)) = (queue(), queue());
        let rxs = Arc::new(Mutex::new((a, b)));
        let seen = Arc::new(Mutex::new(None));
        let (at_inline, queues) = (Arc::clone(&seen), Arc::clone(&rxs));
        let inline = move |e: &PinnedEvent| {
            let q = queues.lock().unwrap();
            let x = q.0.recv_timeout(Duration::ZERO).ok();
            let second_had_it = q.1.recv_timeout(Duration::ZERO).is_ok();
            *at_inline.lock().unwrap() = Some((e.id, x, second_had_it));
        };
        // A sink on a thread of its own says where the event it got is.
        let (at_tx, at) = std::sync::mpsc::channel::<usize>();
        let on_thread = move |e: &PinnedEvent| {
            let _ = at_tx.send(e as *const PinnedEvent as usize);
        };
        let drops = crate::export::Drops::default();
        let threaded =
            crate::export::on_own_thread("shared", Box::new(on_thread), 4, &drops).unwrap();
        let mut fanout = Fanout::new(
            vec![first, Outlet::Inline(Box::new(inline)), second],
            vec![threaded],
        );
        fanout.deliver(PinnedEvent::for_test(
            7,
            State::Completed,
            Reason::Sleep,
            30,
            1,
        ));
        let (id, x, second_had_it) = seen.lock().unwrap().take().expect("the inline sink ran");
        let x = x.expect("the first queue had the event when the inline sink after it ran");
        assert!(
            !second_had_it,
            "the second queue had it before the inline sink before it"
        );
        let (a, b) = &*rxs.lock().unwrap();
        let y = b
            .recv_timeout(Duration::ZERO)
            .expect("the second queue got it");
        assert!(Arc::ptr_eq(&x, &y), "each queue got a copy of its own");
        let on_thread_at = at
            .recv_timeout(Duration::from_secs(60))
            .expect("the sink ran");
        assert_eq!(
            on_thread_at,
            Arc::as_ptr(&x) as usize,
            "the sink on its own thread got a copy"
        );
        assert_eq!((id, x.id), (7, 7));
        drop((x, y));
        fanout.flush();
        // A queue left open would make `recv` wait for good: the test fails instead.
        let closed = |rx: &crate::handoff::Receiver<Arc<PinnedEvent>>| {
            matches!(rx.recv_timeout(Duration::from_secs(5)), Err(Waited::Closed))
        };
        assert!(closed(a) && closed(b), "a queue stayed open");
    }
}
