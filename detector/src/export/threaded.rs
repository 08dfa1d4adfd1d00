//! A sink that can block — the `tracing` one writes through the service's subscriber, whose
//! writer may wait for good on a full pipe; a user's may do anything — runs on a thread of its
//! own behind a bounded queue, so that it holds back no other sink: the recordings, the flight
//! recording and the exporters get every event whatever it does. What its queue cannot take is
//! dropped and counted under its name (`pinwatch_events_dropped_total{sink}`, `ctl status`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::{Drops, QueueSink, Sink};
use crate::event::PinnedEvent;
use crate::Error;

/// How long the detector's shutdown waits for such sinks to take what is queued and flush (all
/// of them together: their queues are closed at once): one that is blocked for good is left
/// behind, not waited for.
pub(crate) const FLUSH_WAIT: Duration = Duration::from_secs(5);

/// Joins `t` if it ends within `within`, and says whether it did; past that it is left to run
/// on (a thread held by a sink that does not return cannot hold up a stop).
pub(crate) fn join_within(t: std::thread::JoinHandle<()>, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    // A thread's end is not signalled otherwise; this waits a few milliseconds at most more
    // than the thread takes.
    while !t.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    t.is_finished() && t.join().is_ok()
}

/// `sink`, named `name` (its thread `pinwatch-sink-<name>`, its drop counter's label), behind a
/// queue of `capacity` events.
pub(crate) fn on_own_thread(
    name: &'static str,
    mut sink: Box<dyn Sink>,
    capacity: usize,
    drops: &Drops,
) -> Result<Threaded, Error> {
    let (tx, rx) = crate::handoff::bounded::<Arc<PinnedEvent>>(capacity);
    let (done_tx, done) = mpsc::sync_channel::<()>(1);
    std::thread::Builder::new()
        .name(format!("pinwatch-sink-{name}"))
        .spawn(move || {
            for e in rx {
                // A sink that panics loses that event only.
                let _ = catch_unwind(AssertUnwindSafe(|| sink.event(&e)));
            }
            let _ = catch_unwind(AssertUnwindSafe(|| sink.flush()));
            let _ = done_tx.send(());
        })
        .map_err(|source| Error::Thread {
            what: "sink",
            source,
        })?;
    let dropped = Arc::new(AtomicU64::new(0));
    drops.add(name, Arc::clone(&dropped));
    Ok(Threaded {
        queue: QueueSink::new(Some(tx), dropped),
        done,
    })
}

/// The export thread's side of a sink on a thread of its own.
pub(crate) struct Threaded {
    queue: QueueSink,
    /// Says when the sink's thread has flushed it and ended.
    done: mpsc::Receiver<()>,
}

impl Threaded {
    /// Queues `event` for the sink, or counts it dropped.
    pub(crate) fn send(&self, event: &Arc<PinnedEvent>) {
        self.queue.send(event);
    }

    /// No more events: the sink's thread takes what is queued, flushes the sink and ends.
    pub(crate) fn close(&mut self) {
        self.queue.close();
    }

    /// Waits until the sink's thread has ended, or `deadline`.
    pub(crate) fn wait(&self, deadline: Instant) {
        let _ = self
            .done
            .recv_timeout(deadline.saturating_duration_since(Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Reason, State};
    use crate::export::Outlet;
    use std::sync::atomic::Ordering;

    /// A sink named `name` on a thread of its own, with a queue of 4, that blocks in its first
    /// event until the returned sender is dropped; the receiver says when it has blocked.
    fn blocked_for_good(
        name: &'static str,
        drops: &Drops,
    ) -> (Threaded, mpsc::Receiver<()>, mpsc::Sender<()>) {
        let (entered_tx, entered) = mpsc::channel::<()>();
        let (release, blocked) = mpsc::channel::<()>();
        let blocking = move |_: &PinnedEvent| {
            let _ = entered_tx.send(());
            let _ = blocked.recv();
        };
        let sink = on_own_thread(name, Box::new(blocking), 4, drops).unwrap();
        (sink, entered, release)
    }

    /// A sink blocked for good holds nothing back: the next sink in the fan-out gets every
    /// event, the blocked one's queue drops what it cannot hold and counts it, and the flush
    /// does not wait for it past the bound.
    #[test]
    fn a_blocked_sink_loses_its_own_events_only() {
        let drops = Drops::default();
        // Two sinks blocked for good from their first event on.
        let (slow, entered, _release) = blocked_for_good("slow", &drops);
        let (stuck, entered_too, _release_too) = blocked_for_good("stuck", &drops);
        let seen = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&seen);
        let fast = move |_: &PinnedEvent| {
            counter.fetch_add(1, Ordering::Relaxed);
        };
        let mut fanout = crate::export::fanout::Fanout::new(
            vec![Outlet::Inline(Box::new(fast))],
            vec![slow, stuck],
        );
        fanout.deliver(PinnedEvent::for_test(
            1,
            State::InProgress,
            Reason::Sleep,
            25,
            1,
        ));
        // Each has taken the first event and is blocked in it.
        entered.recv().unwrap();
        entered_too.recv().unwrap();
        for id in 2..=100 {
            fanout.deliver(PinnedEvent::for_test(
                id,
                State::Completed,
                Reason::Sleep,
                30,
                1,
            ));
        }
        assert_eq!(
            seen.load(Ordering::Relaxed),
            100,
            "the other sink missed events"
        );
        // One taken (blocked in it), four queued, the rest dropped.
        assert_eq!(drops.totals(), vec![("slow", 95), ("stuck", 95)]);
        let flushing = std::time::Instant::now();
        fanout.flush();
        let took = flushing.elapsed();
        assert!(took >= FLUSH_WAIT, "the flush waited for nobody");
        assert!(
            took < 2 * FLUSH_WAIT,
            "{took:?}: the blocked sinks were waited for one after the other"
        );
    }

    /// A sink that is only slow gets everything queued at the flush, and is flushed itself.
    #[test]
    fn a_slow_sink_gets_what_is_queued_before_the_detector_stops() {
        struct Slow(Arc<AtomicU64>, Arc<AtomicU64>);
        impl Sink for Slow {
            fn event(&mut self, _: &PinnedEvent) {
                std::thread::sleep(Duration::from_millis(5));
                self.0.fetch_add(1, Ordering::Relaxed);
            }
            fn flush(&mut self) {
                self.1.fetch_add(1, Ordering::Relaxed);
            }
        }
        let (got, flushed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let drops = Drops::default();
        let mut s = on_own_thread(
            "slow",
            Box::new(Slow(Arc::clone(&got), Arc::clone(&flushed))),
            64,
            &drops,
        )
        .unwrap();
        for id in 1..=20 {
            s.send(&Arc::new(PinnedEvent::for_test(
                id,
                State::Completed,
                Reason::Sleep,
                30,
                1,
            )));
        }
        s.close();
        s.wait(Instant::now() + FLUSH_WAIT);
        assert_eq!(got.load(Ordering::Relaxed), 20);
        assert_eq!(flushed.load(Ordering::Relaxed), 1);
        assert_eq!(drops.totals(), vec![("slow", 0)]);
    }
}
