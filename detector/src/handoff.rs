//! A bounded queue from pinwatch's threads to one thread that waits for what they hand it: the
//! watchdog's reports to the export thread, the export thread's events to each sink and exporter
//! on a thread of its own.
//!
//! `std::sync::mpsc` wakes its receiver while holding the lock of its list of waiting threads;
//! on two cores the receiver runs at once, handles the event and comes back for the next (to put
//! itself on that list) before the sender has let go, blocks on that lock and is woken once
//! more: two wake-ups where one would do, for every event and every sink (`strace -f` of a
//! service pinning 8 times a second showed the pair at each sink). Here the sender lets go of
//! the lock before it wakes the receiver, and wakes it only when it is waiting. Senders never
//! wait: a full queue hands the value back.
//!
//! One thread receives: the [`Receiver`] can move to another thread but not be shared (one
//! `waiting` flag stands for one waiting thread; a second would miss its wake-up).

use std::cell::Cell;
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

struct State<T> {
    queue: VecDeque<T>,
    senders: usize,
    receiver: bool,
    /// The receiver is waiting (or about to): a sender that queues something wakes it.
    waiting: bool,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
    capacity: usize,
}

impl<T> Shared<T> {
    /// The lock; a thread that panicked holding it left the queue whole (nothing under it can
    /// panic half-way), so its poisoning is ignored.
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Why [`Sender::try_send`] handed its value back.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused<T> {
    /// The queue holds its capacity.
    Full(T),
    /// The receiver is gone.
    Closed(T),
}

/// The sending side; cloned, every clone counts: the queue closes when the last is dropped.
pub(crate) struct Sender<T> {
    shared: Arc<Shared<T>>,
}

/// The receiving side: [`recv`](Receiver::recv), or iterate until every sender is gone and the
/// queue is empty. `Send`, not `Sync`: one thread waits on it.
pub(crate) struct Receiver<T> {
    shared: Arc<Shared<T>>,
    one_thread: PhantomData<Cell<()>>,
}

/// A queue that holds at most `capacity` values (at least one).
pub(crate) fn bounded<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    let capacity = capacity.max(1);
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            // Grown as used: a large capacity costs nothing until the queue fills.
            queue: VecDeque::new(),
            senders: 1,
            receiver: true,
            waiting: false,
        }),
        ready: Condvar::new(),
        capacity,
    });
    (
        Sender {
            shared: Arc::clone(&shared),
        },
        Receiver {
            shared,
            one_thread: PhantomData,
        },
    )
}

impl<T> Sender<T> {
    /// Queues `value`, never waiting; wakes the receiver if it waits, after letting go of the
    /// lock.
    pub fn try_send(&self, value: T) -> Result<(), Refused<T>> {
        let wake = {
            let mut state = self.shared.lock();
            if !state.receiver {
                return Err(Refused::Closed(value));
            }
            if state.queue.len() >= self.shared.capacity {
                return Err(Refused::Full(value));
            }
            state.queue.push_back(value);
            std::mem::take(&mut state.waiting)
        };
        if wake {
            self.shared.ready.notify_one();
        }
        Ok(())
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Sender<T> {
        self.shared.lock().senders += 1;
        Sender {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let wake = {
            let mut state = self.shared.lock();
            state.senders -= 1;
            state.senders == 0 && std::mem::take(&mut state.waiting)
        };
        if wake {
            self.shared.ready.notify_one();
        }
    }
}

/// Why [`Receiver::recv_timeout`] returned nothing.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Waited {
    /// Nothing came in time.
    TimedOut,
    /// Every sender is gone and the queue is empty.
    Closed,
}

impl<T> Receiver<T> {
    /// The next value, waiting for it; `None` once every sender is gone and the queue is empty.
    pub fn recv(&self) -> Option<T> {
        self.wait(None).ok()
    }

    /// As [`recv`](Self::recv), waiting `wait` at most.
    pub fn recv_timeout(&self, wait: Duration) -> Result<T, Waited> {
        // A wait too long to name is no limit.
        self.wait(Instant::now().checked_add(wait))
    }

    /// The next value, waiting until `deadline` at most (`None`: no limit).
    fn wait(&self, deadline: Option<Instant>) -> Result<T, Waited> {
        let mut state = self.shared.lock();
        loop {
            if let Some(value) = state.queue.pop_front() {
                return Ok(value);
            }
            if state.senders == 0 {
                return Err(Waited::Closed);
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return Err(Waited::TimedOut);
            }
            state.waiting = true;
            state = match left {
                None => self
                    .shared
                    .ready
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(left) => {
                    self.shared
                        .ready
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
            // Woken (or spuriously, or timed out): a sender that queues from here on need not
            // wake this thread until it waits again.
            state.waiting = false;
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let dropped = {
            let mut state = self.shared.lock();
            state.receiver = false;
            std::mem::take(&mut state.queue)
        };
        // Whatever the values' drops do, they do it outside the lock.
        drop(dropped);
    }
}

impl<T> Iterator for Receiver<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.recv()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_come_out_in_order_and_the_queue_ends_with_its_last_sender() {
        let (tx, rx) = bounded(4);
        let tx2 = tx.clone();
        tx.try_send(1).unwrap();
        tx2.try_send(2).unwrap();
        drop(tx);
        tx2.try_send(3).unwrap();
        drop(tx2);
        assert_eq!(rx.collect::<Vec<_>>(), vec![1, 2, 3]);
    }

    #[test]
    fn a_full_queue_hands_the_value_back_and_so_does_a_closed_one() {
        let (tx, rx) = bounded(2);
        tx.try_send(1).unwrap();
        tx.try_send(2).unwrap();
        assert_eq!(tx.try_send(3), Err(Refused::Full(3)));
        assert_eq!(rx.recv(), Some(1));
        tx.try_send(4).unwrap();
        drop(rx);
        assert_eq!(tx.try_send(5), Err(Refused::Closed(5)));
        // A capacity of 0 is taken as 1: a queue that could hold nothing would drop all.
        let (tx, _rx) = bounded(0);
        tx.try_send(1).unwrap();
        assert_eq!(tx.try_send(2), Err(Refused::Full(2)));
    }

    /// A receiver waiting on another thread is woken by each value, and by the last sender's
    /// drop; no value is lost between the two threads (they are ordered by the queue alone).
    #[test]
    fn a_waiting_receiver_gets_every_value_and_the_end() {
        let (tx, rx) = bounded::<u64>(8);
        let (got_tx, got) = std::sync::mpsc::channel::<u64>();
        let receiver = std::thread::spawn(move || {
            let mut n = 0;
            for v in rx {
                assert_eq!(v, n, "out of order");
                n += 1;
                let _ = got_tx.send(v);
            }
            n
        });
        for v in 0..10_000u64 {
            // The receiver has taken every value before this one: the queue is never full, and
            // each value finds the receiver waiting or about to.
            tx.try_send(v).unwrap();
            assert_eq!(got.recv().unwrap(), v);
        }
        drop(tx);
        assert_eq!(receiver.join().unwrap(), 10_000);
    }

    #[test]
    fn a_bounded_wait_ends_at_its_deadline_or_with_a_value_or_the_end() {
        let (tx, rx) = bounded::<u8>(1);
        let start = Instant::now();
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(20)),
            Err(Waited::TimedOut)
        );
        assert!(start.elapsed() >= Duration::from_millis(20));
        tx.try_send(7).unwrap();
        // A value queued is taken even with no time to wait.
        assert_eq!(rx.recv_timeout(Duration::ZERO), Ok(7));
        assert_eq!(rx.recv_timeout(Duration::ZERO), Err(Waited::TimedOut));
        // A wait too long to name is no limit; the last sender's drop ends it.
        let receiver = std::thread::spawn(move || rx.recv_timeout(Duration::MAX));
        drop(tx);
        assert_eq!(receiver.join().unwrap(), Err(Waited::Closed));
    }
}
