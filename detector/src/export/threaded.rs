//! A sink that can block — the `tracing` one writes through the service's subscriber, whose
//! writer may wait for good on a full pipe; a user's may do anything; OTLP's client waits for a
//! collector; the console's — runs on a thread of its own behind a bounded queue, so that it
//! holds back no other sink: the recordings, the flight recording and the other exporters get
//! every event whatever it does. What its queue cannot take is dropped and counted under its
//! name (`pinwatch_events_dropped_total{sink}`, `ctl status`). The detector's stop waits for
//! them all together a bounded time, then leaves behind those that do not finish.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::{Drops, Sink};
use crate::event::PinnedEvent;
use crate::handoff::Waited;
use crate::Error;

/// How long the detector's shutdown waits for such sinks to take what is queued and flush (all
/// of them together: their queues are closed at once): one that is blocked for good is left
/// behind, not waited for.
pub(crate) const FLUSH_WAIT: Duration = Duration::from_secs(5);

/// What runs on a thread of its own behind a queue: a [`Sink`] that may block (the `tracing`
/// one, a user's), or an exporter's client (OTLP's, whose sends wait for a collector; the
/// console's, which also wakes on its own to keep its resources current).
pub(crate) trait OwnThread: Send + 'static {
    /// One event.
    fn event(&mut self, event: &PinnedEvent);

    /// How long it may wait for an event before [`tick`](Self::tick); `None`: for good.
    fn every(&self) -> Option<Duration> {
        None
    }

    /// No event came for [`every`](Self::every).
    fn tick(&mut self) {}

    /// Every event queued so far has been handed to [`event`](Self::event), and the queue is
    /// empty: one that keeps events to send them together (OTLP's client) sends them now, so
    /// that none waits for more to come.
    fn caught_up(&mut self) {}

    /// How many of the events handed to [`event`](Self::event) it keeps, not yet sent
    /// ([`caught_up`](Self::caught_up) sends them).
    fn kept(&self) -> u64 {
        0
    }

    /// Once, after the last event, unless the detector's stop has stopped waiting for it.
    fn flush(&mut self) {}
}

impl OwnThread for Box<dyn Sink> {
    fn event(&mut self, event: &PinnedEvent) {
        (**self).event(event);
    }

    fn flush(&mut self) {
        (**self).flush();
    }
}

/// The sink that `make` makes on its own thread (so that what it makes there, a span say, is
/// made against the process's dispatcher, not a default of the starting thread's), named `name`
/// (its thread `pinwatch-sink-<name>`, its drop counter's label), behind a queue of `capacity`
/// events.
pub(crate) fn on_own_thread<S: OwnThread>(
    name: &'static str,
    make: impl FnOnce() -> S + Send + 'static,
    capacity: usize,
    drops: &Drops,
) -> Result<Threaded, Error> {
    on_own_thread_counted(name, make, capacity, Arc::default(), drops)
}

/// [`on_own_thread`], its drops counted in `dropped`, which the sink may count its own losses
/// in too (OTLP's records that the collector did not take).
pub(crate) fn on_own_thread_counted<S: OwnThread>(
    name: &'static str,
    make: impl FnOnce() -> S + Send + 'static,
    capacity: usize,
    dropped: Arc<AtomicU64>,
    drops: &Drops,
) -> Result<Threaded, Error> {
    let (tx, rx) = crate::handoff::bounded::<Arc<PinnedEvent>>(capacity);
    let (done_tx, done) = mpsc::sync_channel::<()>(1);
    let taken = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicU64::new(0));
    let (lost, took, done_with) = (
        Arc::clone(&dropped),
        Arc::clone(&taken),
        Arc::clone(&finished),
    );
    std::thread::Builder::new()
        .name(format!("pinwatch-sink-{name}"))
        .spawn(move || {
            // A sink that panics loses that event (counted) or tick only; one that cannot be
            // made, every event, counted.
            let mut sink = catch_unwind(AssertUnwindSafe(make)).ok();
            let every = sink.as_ref().and_then(|s| s.every());
            let mut next = every.and_then(|d| Instant::now().checked_add(d));
            // Events taken since the queue was last found empty; taken in all.
            let mut behind = false;
            let mut handled = 0u64;
            // What the stop may call finished: every event taken but those kept to be sent.
            let settle = |sink: &Option<S>, handled: u64| {
                let kept = sink.as_ref().map_or(0, |s| s.kept());
                done_with.store(handled.saturating_sub(kept), Ordering::SeqCst);
            };
            loop {
                // Due, whether or not events are waiting: a queue that never empties does not
                // put the ticks off.
                if next.is_some_and(|at| Instant::now() >= at) {
                    next = every.and_then(|d| Instant::now().checked_add(d));
                    if let Some(s) = sink.as_mut() {
                        let _ = catch_unwind(AssertUnwindSafe(|| s.tick()));
                    }
                }
                let got = match rx.recv_timeout(Duration::ZERO) {
                    // Nothing queued: the events taken go before the thread waits for more.
                    Err(waited) => {
                        if std::mem::take(&mut behind) {
                            if let Some(s) = sink.as_mut() {
                                let _ = catch_unwind(AssertUnwindSafe(|| s.caught_up()));
                            }
                            settle(&sink, handled);
                        }
                        match (waited, next) {
                            (Waited::Closed, _) => Err(Waited::Closed),
                            (_, Some(at)) => {
                                rx.recv_timeout(at.saturating_duration_since(Instant::now()))
                            }
                            (_, None) => rx.recv().ok_or(Waited::Closed),
                        }
                    }
                    got => got,
                };
                match got {
                    // Left behind by the stop, which counted it dropped: no more sends of
                    // seconds each.
                    Ok(_) if !take(&took) => {}
                    Ok(e) => {
                        behind = true;
                        let ok = sink.as_mut().is_some_and(|s| {
                            catch_unwind(AssertUnwindSafe(|| s.event(&e))).is_ok()
                        });
                        // Never made, or it panicked in this event: lost, and counted.
                        if !ok {
                            lost.fetch_add(1, Ordering::Relaxed);
                        }
                        handled += 1;
                        settle(&sink, handled);
                    }
                    // The tick is due: above.
                    Err(Waited::TimedOut) => {}
                    Err(Waited::Closed) => break,
                }
            }
            if let Some(s) = sink.as_mut().filter(|_| flushing(&took)) {
                let _ = catch_unwind(AssertUnwindSafe(|| s.flush()));
            }
            // The sink goes here, on its thread (an exporter's client runtime, say, is never
            // dropped under the thread that uses it, nor in async code), before the stop goes
            // on (a console resource is closed when `shutdown` returns).
            drop(catch_unwind(AssertUnwindSafe(move || drop(sink))));
            let _ = done_tx.send(());
        })
        .map_err(|source| Error::Thread { what: name, source })?;
    drops.add(name, Arc::clone(&dropped));
    Ok(Threaded {
        name,
        tx: Some(tx),
        queued: 0,
        dropped,
        done,
        taken,
        finished,
        capacity,
        warned: None,
    })
}

/// The warning for a report that the queue of the sink `name` (of `capacity` reports) could
/// not take, at `now`, with `dropped` dropped so far: at the first, then at most every
/// [`WARN_EVERY`](super::WARN_EVERY) (`last`: when one last went out). Without it a sink that
/// keeps up with fewer reports than come — an OTLP collector that hangs, or one far away under
/// a storm of pins — loses them with nothing but a counter to say so.
fn full_queue_warning(
    last: &mut Option<Instant>,
    now: Instant,
    name: &str,
    capacity: usize,
    dropped: u64,
) -> Option<String> {
    if !super::warning_due(last, now) {
        return None;
    }
    let why = match name {
        "otlp" => {
            "its collector takes reports more slowly than they come (one that refuses or \
             hangs takes none; one far away, one batch a round trip)"
        }
        "tracing" => "the subscriber's writer is slow or blocked",
        "console" => "the console's thread is behind",
        _ => "the sink is slow or blocked",
    };
    Some(format!(
        "pinwatch's `{name}` sink is behind: {why}; its queue of {capacity} reports \
         (PINWATCH_QUEUE_CAPACITY) is full; {dropped} of its reports dropped so far in all, \
         counted in pinwatch_events_dropped_total{{sink=\"{name}\"}} (at most one such warning \
         a minute)"
    ))
}

/// The bit of [`Threaded::taken`] that says the stop has left the sink behind.
const LEFT: u64 = 1 << 63;

/// The bit of [`Threaded::taken`] that says the sink's thread has begun its flush.
const FLUSHING: u64 = 1 << 62;

/// The sink's thread takes the event it has received, unless the stop has left it behind (then
/// the stop has counted it dropped).
fn take(taken: &AtomicU64) -> bool {
    taken
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
            (t & LEFT == 0).then_some(t + 1)
        })
        .is_ok()
}

/// The sink's thread begins its flush, unless the stop has left it behind.
fn flushing(taken: &AtomicU64) -> bool {
    taken
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
            (t & LEFT == 0).then_some(t | FLUSHING)
        })
        .is_ok()
}

/// What a sink the stop left behind loses ([`Threaded::leave`]).
#[derive(Debug, PartialEq, Eq)]
struct Left {
    /// Events still queued: counted dropped.
    lost: u64,
    /// Events it had taken and was not done with.
    unfinished: u64,
    /// Whether its flush had begun.
    flushing: bool,
}

/// The export thread's side of a sink on a thread of its own.
pub(crate) struct Threaded {
    name: &'static str,
    /// Its queue, until it is closed. The event goes shared, not copied: every queue holds the
    /// one the export thread made, and it is freed when the last thread is done with it.
    tx: Option<crate::handoff::Sender<Arc<PinnedEvent>>>,
    /// Events put in its queue.
    queued: u64,
    /// Events its queue could not take (and those it counts itself, and those left behind).
    dropped: Arc<AtomicU64>,
    /// Says when the sink's thread has flushed and dropped it.
    done: mpsc::Receiver<()>,
    /// Events its thread has taken from the queue, and [`LEFT`]: one word, so that each queued
    /// event is either taken or counted dropped by the stop, never both or neither.
    taken: Arc<AtomicU64>,
    /// Events its thread has taken and is done with: handled, and sent if it kept them
    /// ([`OwnThread::kept`]).
    finished: Arc<AtomicU64>,
    /// The queue's size, and when a full queue was last said ([`full_queue_warning`]).
    capacity: usize,
    warned: Option<Instant>,
}

impl Threaded {
    /// Queues `event` for the sink, or counts it dropped: never waits.
    pub(crate) fn send(&mut self, event: &Arc<PinnedEvent>) {
        if let Some(tx) = &self.tx {
            match tx.try_send(Arc::clone(event)) {
                Ok(()) => self.queued += 1,
                Err(_) => {
                    let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                    if let Some(line) = full_queue_warning(
                        &mut self.warned,
                        Instant::now(),
                        self.name,
                        self.capacity,
                        dropped,
                    ) {
                        super::say(tracing::Level::WARN, line);
                    }
                }
            }
        }
    }

    /// No more events: the sink's thread takes what is queued, flushes the sink and ends.
    pub(crate) fn close(&mut self) {
        drop(self.tx.take());
    }

    /// The stop stops waiting for it: what its thread has not taken yet is counted dropped now
    /// (its thread will not take it), and it is not flushed unless its flush has begun. How
    /// many; how many it had taken and was not done with (in a send or a write that had not
    /// returned, or kept for one: delivered only if it returns, and not counted, as the sink
    /// counts it if it fails); and whether its flush had begun (it then did not return, or its
    /// drop did not).
    fn leave(&self) -> Left {
        let word = self.taken.fetch_or(LEFT, Ordering::SeqCst);
        let took = word & !(LEFT | FLUSHING);
        let lost = self.queued.saturating_sub(took);
        self.dropped.fetch_add(lost, Ordering::Relaxed);
        Left {
            lost,
            unfinished: took.saturating_sub(self.finished.load(Ordering::SeqCst)),
            flushing: word & FLUSHING != 0,
        }
    }

    /// A queue with no thread behind it: what the sink would get comes out of `tx`'s receiver,
    /// and it is done at once. For tests of what goes into the queue.
    #[cfg(test)]
    pub(crate) fn bare(tx: crate::handoff::Sender<Arc<PinnedEvent>>) -> Threaded {
        Threaded {
            name: "bare",
            tx: Some(tx),
            queued: 0,
            dropped: Arc::default(),
            done: mpsc::sync_channel(1).1,
            taken: Arc::default(),
            finished: Arc::default(),
            capacity: 0,
            warned: None,
        }
    }

    /// Waits until the sink's thread has flushed it, or `deadline`; whether it did.
    pub(crate) fn wait(&self, deadline: Instant) -> bool {
        !matches!(
            self.done
                .recv_timeout(deadline.saturating_duration_since(Instant::now())),
            Err(mpsc::RecvTimeoutError::Timeout)
        )
    }
}

/// Waits for the closed `sinks` together, until `deadline` in all (not for each). Those not done
/// by then are left behind ([`Threaded::leave`]), each said in a line with what it loses.
pub(crate) fn wait_all<'a>(sinks: impl Iterator<Item = &'a Threaded>, deadline: Instant) {
    let left: Vec<_> = sinks
        .filter(|s| !s.wait(deadline))
        .map(|s| (s.name, s.leave()))
        .collect();
    if left.is_empty() {
        return;
    }
    for (name, left) in left {
        super::say(tracing::Level::WARN, left_behind_line(name, &left));
    }
    super::flush_stderr();
}

/// The line that says the stop left the sink `name` behind, and what that loses.
fn left_behind_line(name: &str, left: &Left) -> String {
    format!(
        "pinwatch stopped waiting for its `{name}` sink after {} (a collector or a writer that \
         does not answer?): {}{}; {}",
        humantime::format_duration(FLUSH_WAIT),
        match left.lost {
            0 => "nothing was still queued for it".to_owned(),
            1 => "the event still queued for it is dropped and counted".to_owned(),
            n => format!("the {n} events still queued for it are dropped and counted"),
        },
        match left.unfinished {
            0 => String::new(),
            1 => "; one it had taken was not yet delivered (lost unless its send or write \
                  returns)"
                .to_owned(),
            n => format!(
                "; {n} it had taken were not yet delivered (lost unless its send or write returns)"
            ),
        },
        if left.flushing {
            "its flush (or its drop) had not returned"
        } else {
            "it is not flushed"
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full queue is said at its first drop, then at most once a minute, naming the sink, why
    /// it may be behind and the counter; the times are given, not waited for.
    #[test]
    fn a_full_queue_is_said_at_most_once_a_minute() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut last = None;
        let first = full_queue_warning(&mut last, at(0), "otlp", 8, 1).unwrap();
        assert_eq!(
            first,
            "pinwatch's `otlp` sink is behind: its collector takes reports more slowly than they \
             come (one that refuses or hangs takes none; one far away, one batch a round trip); \
             its queue of 8 reports (PINWATCH_QUEUE_CAPACITY) is full; 1 of its reports dropped \
             so far in all, counted in pinwatch_events_dropped_total{sink=\"otlp\"} (at most one such warning a minute)"
        );
        assert_eq!(full_queue_warning(&mut last, at(59), "otlp", 8, 40), None);
        let again = full_queue_warning(&mut last, at(60), "otlp", 8, 41).unwrap();
        assert!(
            again.contains("41 of its reports dropped so far"),
            "{again}"
        );
        let user = full_queue_warning(&mut None, at(0), "sink", 4, 2).unwrap();
        assert!(user.starts_with("pinwatch's `sink` sink is behind: the sink is slow or blocked"));
    }
    use crate::event::{Reason, State};
    use crate::export::Outlet;
    use std::sync::atomic::Ordering;

    /// A completed pin's event, shared as the fan-out shares it.
    fn event(id: u64) -> Arc<PinnedEvent> {
        Arc::new(PinnedEvent::for_test(
            id,
            State::Completed,
            Reason::Sleep,
            30,
            1,
        ))
    }

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
        let sink =
            on_own_thread(name, move || Box::new(blocking) as Box<dyn Sink>, 4, drops).unwrap();
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
        let mut fanout = crate::export::fanout::Fanout::new(vec![
            Outlet::Inline(Box::new(fast)),
            Outlet::Thread(slow),
            Outlet::Thread(stuck),
        ]);
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
        // Left behind: the four each still had queued are counted with the rest.
        assert_eq!(drops.totals(), vec![("slow", 99), ("stuck", 99)]);
    }

    /// A sink the stop left behind handles nothing more once it returns: what it still held is
    /// counted dropped (no send of seconds each), it is not flushed, and it is dropped on its
    /// thread. One with no event for [`OwnThread::every`] ticks.
    #[test]
    fn a_sink_left_behind_counts_what_it_held_as_dropped() {
        struct Held {
            entered: mpsc::Sender<()>,
            blocked: mpsc::Receiver<()>,
            handled: Arc<AtomicU64>,
            flushed: Arc<AtomicU64>,
            gone: mpsc::Sender<std::thread::ThreadId>,
        }
        impl OwnThread for Held {
            fn event(&mut self, _: &PinnedEvent) {
                self.handled.fetch_add(1, Ordering::Relaxed);
                let _ = self.entered.send(());
                let _ = self.blocked.recv();
            }
            fn every(&self) -> Option<Duration> {
                Some(Duration::from_millis(1))
            }
            fn tick(&mut self) {
                let _ = self.entered.send(());
            }
            fn flush(&mut self) {
                self.flushed.fetch_add(1, Ordering::Relaxed);
            }
        }
        impl Drop for Held {
            fn drop(&mut self) {
                let _ = self.gone.send(std::thread::current().id());
            }
        }
        let (entered_tx, entered) = mpsc::channel();
        let (release, blocked) = mpsc::channel();
        let (gone_tx, gone) = mpsc::channel();
        let (handled, flushed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let held = Held {
            entered: entered_tx,
            blocked,
            handled: Arc::clone(&handled),
            flushed: Arc::clone(&flushed),
            gone: gone_tx,
        };
        let drops = Drops::default();
        let mut t = on_own_thread("held", move || held, 8, &drops).unwrap();
        // A tick, with no event yet.
        entered
            .recv_timeout(Duration::from_secs(60))
            .expect("no tick");
        t.send(&event(1));
        // Ticks and the event's entry: until `handled` says the event is being handled.
        while handled.load(Ordering::Relaxed) == 0 {
            entered
                .recv_timeout(Duration::from_secs(60))
                .expect("the event was not taken");
        }
        for id in 2..=5 {
            t.send(&event(id));
        }
        t.close();
        wait_all(std::iter::once(&t), Instant::now());
        // The four still queued, counted as the stop leaves it (not when, or if, it returns).
        assert_eq!(drops.totals(), vec![("held", 4)]);
        drop(release);
        let on = gone
            .recv_timeout(Duration::from_secs(60))
            .expect("the sink was not dropped");
        assert_ne!(
            on,
            std::thread::current().id(),
            "dropped on the stopping thread"
        );
        assert_eq!(
            handled.load(Ordering::Relaxed),
            1,
            "handled after it was left"
        );
        assert_eq!(
            flushed.load(Ordering::Relaxed),
            0,
            "flushed after it was left"
        );
        assert_eq!(drops.totals(), vec![("held", 4)]);
    }

    /// A sink that keeps what it takes to send it together, left behind in that send: the
    /// events still queued are counted dropped, and the one in the send is said apart (not
    /// "nothing was queued"), uncounted: the sink counts it if the send fails. The send comes
    /// only once the queue is empty.
    #[test]
    fn what_a_sink_kept_for_a_send_that_never_returns_is_said() {
        struct Keeps {
            kept: u64,
            sending: mpsc::Sender<u64>,
            blocked: mpsc::Receiver<()>,
        }
        impl OwnThread for Keeps {
            fn event(&mut self, _: &PinnedEvent) {
                self.kept += 1;
            }
            fn caught_up(&mut self) {
                let _ = self.sending.send(self.kept);
                let _ = self.blocked.recv();
                self.kept = 0;
            }
            fn kept(&self) -> u64 {
                self.kept
            }
        }
        let (sending_tx, sending) = mpsc::channel();
        let (release, blocked) = mpsc::channel();
        let keeps = Keeps {
            kept: 0,
            sending: sending_tx,
            blocked,
        };
        let drops = Drops::default();
        let mut t = on_own_thread("keeps", move || keeps, 8, &drops).unwrap();
        t.send(&event(1));
        let in_send = sending
            .recv_timeout(Duration::from_secs(60))
            .expect("the kept event was not sent once the queue was empty");
        assert_eq!(in_send, 1);
        t.send(&event(2));
        t.send(&event(3));
        t.close();
        let left = t.leave();
        assert_eq!(
            left,
            Left {
                lost: 2,
                unfinished: 1,
                flushing: false
            }
        );
        assert_eq!(drops.totals(), vec![("keeps", 2)]);
        let line = left_behind_line("keeps", &left);
        assert!(
            line.contains(
                "the 2 events still queued for it are dropped and counted; one it had \
                 taken was not yet delivered"
            ),
            "{line}"
        );
        drop(release);
        assert!(t.wait(Instant::now() + Duration::from_secs(60)));
    }

    /// A tick that falls due while events wait runs before the next of them: a queue that
    /// never empties (the console's, in a storm of pins) does not put the ticks off for good.
    #[test]
    fn a_due_tick_runs_before_the_events_waiting() {
        struct Order {
            seen: mpsc::Sender<&'static str>,
            release: mpsc::Receiver<()>,
            first: bool,
        }
        impl OwnThread for Order {
            fn event(&mut self, _: &PinnedEvent) {
                let _ = self.seen.send("event");
                if std::mem::take(&mut self.first) {
                    let _ = self.release.recv();
                    // Past the tick's due time, whenever the thread last ticked.
                    std::thread::sleep(3 * TEST_TICK);
                }
            }
            fn every(&self) -> Option<Duration> {
                Some(TEST_TICK)
            }
            fn tick(&mut self) {
                let _ = self.seen.send("tick");
            }
        }
        const TEST_TICK: Duration = Duration::from_millis(2);
        let (seen_tx, seen) = mpsc::channel();
        let (release, blocked) = mpsc::channel();
        let order = Order {
            seen: seen_tx,
            release: blocked,
            first: true,
        };
        let drops = Drops::default();
        let mut t = on_own_thread("order", move || order, 8, &drops).unwrap();
        for id in 1..=3 {
            t.send(&event(id));
        }
        release.send(()).unwrap();
        t.close();
        assert!(
            t.wait(Instant::now() + Duration::from_secs(60)),
            "it did not end"
        );
        let seen: Vec<&str> = seen.try_iter().skip_while(|s| *s == "tick").collect();
        assert_eq!(&seen[..3], &["event", "tick", "event"], "{seen:?}");
    }

    /// An event a sink panics in is lost, and counted; a sink left behind after its flush began
    /// (its drop does not return) lost nothing queued, and is said to have begun it.
    #[test]
    fn panics_are_counted_and_a_begun_flush_is_not_called_missing() {
        let drops = Drops::default();
        let panics = |_: &PinnedEvent| panic!("the sink panics in every event");
        let mut t = on_own_thread(
            "panics",
            move || Box::new(panics) as Box<dyn Sink>,
            8,
            &drops,
        )
        .unwrap();
        for id in 1..=5 {
            t.send(&event(id));
        }
        t.close();
        assert!(t.wait(Instant::now() + Duration::from_secs(60)));
        assert_eq!(drops.totals(), vec![("panics", 5)]);
        struct Stuck(mpsc::Sender<()>, mpsc::Receiver<()>);
        impl OwnThread for Stuck {
            fn event(&mut self, _: &PinnedEvent) {}
        }
        impl Drop for Stuck {
            fn drop(&mut self) {
                let _ = self.0.send(());
                let _ = self.1.recv();
            }
        }
        let (dropping_tx, dropping) = mpsc::channel();
        let (release, held) = mpsc::channel();
        let stuck = Stuck(dropping_tx, held);
        let mut t = on_own_thread("stuck", move || stuck, 8, &drops).unwrap();
        t.send(&event(1));
        t.close();
        dropping
            .recv_timeout(Duration::from_secs(60))
            .expect("not dropped");
        assert!(!t.wait(Instant::now()), "done before its drop returned");
        assert_eq!(
            t.leave(),
            Left {
                lost: 0,
                unfinished: 0,
                flushing: true
            }
        );
        drop(release);
    }

    /// A sink that is only slow gets everything queued at the flush, and is flushed itself.
    #[test]
    fn a_slow_sink_gets_what_is_queued_before_the_detector_stops() {
        struct Slow(Arc<AtomicU64>, Arc<AtomicU64>, Arc<AtomicU64>);
        impl Drop for Slow {
            fn drop(&mut self) {
                self.2.fetch_add(1, Ordering::Relaxed);
            }
        }
        impl Sink for Slow {
            fn event(&mut self, _: &PinnedEvent) {
                std::thread::sleep(Duration::from_millis(5));
                self.0.fetch_add(1, Ordering::Relaxed);
            }
            fn flush(&mut self) {
                self.1.fetch_add(1, Ordering::Relaxed);
            }
        }
        let (got, flushed, dropped) = (Arc::default(), Arc::default(), Arc::default());
        let drops = Drops::default();
        let slow = Slow(Arc::clone(&got), Arc::clone(&flushed), Arc::clone(&dropped));
        let mut s =
            on_own_thread("slow", move || Box::new(slow) as Box<dyn Sink>, 64, &drops).unwrap();
        for id in 1..=20 {
            s.send(&event(id));
        }
        s.close();
        assert!(
            s.wait(Instant::now() + FLUSH_WAIT),
            "the slow sink was not waited for"
        );
        assert_eq!(got.load(Ordering::Relaxed), 20);
        assert_eq!(flushed.load(Ordering::Relaxed), 1);
        // Dropped too, before the stop goes on (a console resource is closed by then).
        assert_eq!(dropped.load(Ordering::Relaxed), 1);
        assert_eq!(drops.totals(), vec![("slow", 0)]);
    }
}
