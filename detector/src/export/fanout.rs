//! The export thread's loop: every finished event handed to every sink in turn.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::threaded::{wait_all, Threaded, FLUSH_WAIT};
use super::Sink;
use crate::analyze::Analyzer;
use crate::event::PinnedEvent;
use crate::watch::{RawReport, Shared};
use crate::Error;

/// Where the export thread hands an event: a sink it runs itself (the recordings, Prometheus, the
/// `ctl` view), or the queue of a sink on a thread of its own (OTLP, the console, the `tracing`
/// sink, a user's), which takes the event shared.
pub(crate) enum Outlet {
    Inline(Box<dyn Sink>),
    Thread(Threaded),
}

impl Outlet {
    /// Hands `event` on; a sink's panic is contained.
    fn deliver(&mut self, event: &Arc<PinnedEvent>) {
        match self {
            Outlet::Inline(sink) => {
                let _ = catch_unwind(AssertUnwindSafe(|| sink.event(event)));
            }
            Outlet::Thread(t) => t.send(event),
        }
    }
}

/// Every sink, in order. An event is made once and shared by all: the queues hold it, not
/// copies of it.
pub(crate) struct Fanout {
    outlets: Vec<Outlet>,
}

impl Fanout {
    pub(crate) fn new(outlets: Vec<Outlet>) -> Fanout {
        Fanout { outlets }
    }

    /// Hands `event` to every sink.
    pub(crate) fn deliver(&mut self, event: PinnedEvent) {
        let event = Arc::new(event);
        for outlet in self.outlets.iter_mut() {
            outlet.deliver(&event);
        }
    }

    /// Flushes every sink, once, at the end: the queues of the sinks on threads of their own
    /// closed first, all at once (their threads take what is queued meanwhile), the inline
    /// sinks flushed, then the threads waited for together, up to [`FLUSH_WAIT`] in all.
    pub(crate) fn flush(&mut self) {
        for outlet in self.outlets.iter_mut() {
            if let Outlet::Thread(t) = outlet {
                t.close();
            }
        }
        for outlet in self.outlets.iter_mut() {
            if let Outlet::Inline(sink) = outlet {
                let _ = catch_unwind(AssertUnwindSafe(|| sink.flush()));
            }
        }
        let threads = self.outlets.iter().filter_map(|o| match o {
            Outlet::Thread(t) => Some(t),
            Outlet::Inline(_) => None,
        });
        wait_all(threads, Instant::now() + FLUSH_WAIT);
    }
}

/// The export thread: each raw report from the watchdog analysed (with the stack settings in
/// force) and handed to every sink; when the watchdog's sender is gone and the queue drained,
/// the sinks are flushed and the thread ends.
pub(crate) struct ExportThread {
    thread: JoinHandle<()>,
    /// Says when the thread has flushed the sinks.
    done: mpsc::Receiver<()>,
}

impl ExportThread {
    /// Starts it, with `sinks`.
    pub(crate) fn spawn(
        watched: Arc<Shared>,
        reports: crate::handoff::Receiver<Box<RawReport>>,
        sinks: Vec<Outlet>,
    ) -> Result<ExportThread, Error> {
        let (done_tx, done) = mpsc::sync_channel::<()>(1);
        let thread = std::thread::Builder::new()
            .name("pinwatch-export".into())
            .spawn(move || {
                let mut settings = watched.tunables.reader();
                let mut analyzer = Analyzer::new(watched.config.stacks);
                let mut fanout = Fanout::new(sinks);
                for raw in reports {
                    analyzer.stacks = settings.refresh(&watched.tunables).stacks;
                    if let Some(event) = analyzer.filter(*raw, &watched.stats) {
                        fanout.deliver(event);
                        watched.stats.delivered.fetch_add(1, Ordering::Relaxed);
                    }
                }
                fanout.flush();
                let _ = done_tx.send(());
            })
            .map_err(|source| Error::Thread {
                what: "export",
                source,
            })?;
        Ok(ExportThread { thread, done })
    }

    /// Joins it if it has flushed the sinks within `within`, and says whether it did; past
    /// that it is left to run on (one held by a sink that does not return cannot hold up a
    /// stop).
    pub(crate) fn join_within(self, within: Duration) -> bool {
        match self.done.recv_timeout(within) {
            Err(mpsc::RecvTimeoutError::Timeout) => false,
            // Done, or ended without saying so (it panicked).
            _ => self.thread.join().is_ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Reason, State};

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
            (Outlet::Thread(Threaded::bare(tx)), rx)
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
        let threaded = crate::export::on_own_thread(
            "shared",
            move || Box::new(on_thread) as Box<dyn Sink>,
            4,
            &drops,
        )
        .unwrap();
        let mut fanout = Fanout::new(vec![
            first,
            Outlet::Inline(Box::new(inline)),
            second,
            Outlet::Thread(threaded),
        ]);
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
