//! Who waited behind a pin, as a worker records it in its slot: never on the per-poll path.
//!
//! - [`AfterPin`]: the first tasks a thread polls once a flagged poll has ended (what its LIFO
//!   slot and local run queue held while it was pinned). After a flagged poll ends, the thread's
//!   `Current` owner is marked ([`AFTER_PIN`]) so that its next polls miss the per-poll check
//!   and take the cold path, which records them here; a full record or a park ends it. The
//!   per-poll path is unchanged.
//! - `WaitRing` (the `schedule-latency` feature): tasks tokio says waited at least the
//!   threshold between being woken and being polled, recorded by the after-poll hook of such a
//!   poll (a clock read and a few stores, only for those), read by the watchdog at its next
//!   scan.
//!
//! Both are written by the slot's owner only and read by the watchdog with a stamp per record
//! (seqlock style): a read that overlaps a write sees the stamp change and drops that record.

use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};

/// The bit set in a thread's `Current::owner` (a table's address: 8-aligned, so the bit is
/// free) while it records the tasks it polls after a pin.
pub(crate) const AFTER_PIN: usize = 1;

/// Tasks recorded after a pin.
pub(crate) const AFTER_PIN_MAX: usize = 8;

/// Polls after a pin that take the cold path at most, recorded or not (the pinned task polled
/// again and again, with nothing else to run, is not recorded, and must not keep its thread off
/// the per-poll path for good).
pub(crate) const AFTER_PIN_POLLS: usize = 4 * AFTER_PIN_MAX;

/// A task polled (`task_id`, its spawn location's address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Polled {
    pub task_id: u64,
    pub spawned_at: usize,
}

/// The first tasks polled on a thread after its flagged poll `pin` ended.
pub(crate) struct AfterPin {
    /// The flagged poll whose successors these are (its counter: counters never repeat).
    pin: AtomicU64,
    /// The flagged poll's own task, which is not its own victim.
    pinned_task: AtomicU64,
    /// Records written (release: the records before it are whole).
    len: AtomicUsize,
    /// Polls seen since the pin, recorded or not.
    seen: AtomicUsize,
    tasks: [(AtomicU64, AtomicUsize); AFTER_PIN_MAX],
}

impl AfterPin {
    pub(crate) const fn new() -> AfterPin {
        AfterPin {
            pin: AtomicU64::new(0),
            pinned_task: AtomicU64::new(0),
            len: AtomicUsize::new(0),
            seen: AtomicUsize::new(0),
            tasks: [const { (AtomicU64::new(0), AtomicUsize::new(0)) }; AFTER_PIN_MAX],
        }
    }

    /// Poll `pin` of `task` (flagged) has ended: record its successors from here. Owner only.
    pub(crate) fn start(&self, pin: u64, task: u64) {
        // A reader of the previous pin's records sees `pin` change and drops what it read.
        self.pin.store(0, Ordering::Relaxed);
        fence(Ordering::Release);
        self.len.store(0, Ordering::Relaxed);
        self.seen.store(0, Ordering::Relaxed);
        self.pinned_task.store(task, Ordering::Relaxed);
        self.pin.store(pin, Ordering::Release);
    }

    /// The owner polls `p` next: recorded (the pinned task's own polls and the `block_on`
    /// body's are not). Returns whether to go on recording: room is left, and fewer than
    /// [`AFTER_PIN_POLLS`] polls were seen.
    pub(crate) fn record(&self, p: Polled) -> bool {
        let n = self.len.load(Ordering::Relaxed);
        let seen = self.seen.load(Ordering::Relaxed) + 1;
        self.seen.store(seen, Ordering::Relaxed);
        if n >= AFTER_PIN_MAX || seen >= AFTER_PIN_POLLS {
            return false;
        }
        if p.task_id == self.pinned_task.load(Ordering::Relaxed) || p.task_id == 0 {
            return true;
        }
        let (id, at) = &self.tasks[n];
        id.store(p.task_id, Ordering::Relaxed);
        at.store(p.spawned_at, Ordering::Relaxed);
        self.len.store(n + 1, Ordering::Release);
        n + 1 < AFTER_PIN_MAX
    }

    /// The tasks polled after poll `pin`, in order, as far as recorded, into `out`: how many;
    /// none when the record is another poll's (or was restarted while read). Watchdog side.
    pub(crate) fn read(&self, pin: u64, out: &mut [Polled; AFTER_PIN_MAX]) -> usize {
        if self.pin.load(Ordering::Acquire) != pin {
            return 0;
        }
        let n = self.len.load(Ordering::Acquire).min(AFTER_PIN_MAX);
        for ((id, at), o) in self.tasks[..n].iter().zip(out.iter_mut()) {
            *o = Polled {
                task_id: id.load(Ordering::Relaxed),
                spawned_at: at.load(Ordering::Relaxed),
            };
        }
        fence(Ordering::Acquire);
        if self.pin.load(Ordering::Relaxed) != pin {
            return 0;
        }
        n
    }
}

/// Records of the polls after the last few flagged polls of a thread: a flagged poll that ends
/// soon after another (a short blocking poll the watchdog armed, a second pin) does not take the
/// first one's record before the watchdog has read it.
pub(crate) struct AfterPins {
    recs: [AfterPin; AFTER_PINS],
    /// How many records were started (the current one is `started - 1`).
    started: AtomicUsize,
}

/// Records kept per thread.
const AFTER_PINS: usize = 4;

impl AfterPins {
    pub(crate) const fn new() -> AfterPins {
        AfterPins {
            recs: [const { AfterPin::new() }; AFTER_PINS],
            started: AtomicUsize::new(0),
        }
    }

    /// Poll `pin` of `task` (flagged) has ended: record its successors, in the oldest record.
    /// Owner only.
    pub(crate) fn start(&self, pin: u64, task: u64) {
        let k = self.started.load(Ordering::Relaxed);
        self.recs[k % AFTER_PINS].start(pin, task);
        self.started.store(k.wrapping_add(1), Ordering::Relaxed);
    }

    /// The owner polls `p` next, in the record started last ([`AfterPin::record`]).
    pub(crate) fn record(&self, p: Polled) -> bool {
        let k = self.started.load(Ordering::Relaxed).wrapping_sub(1);
        self.recs[k % AFTER_PINS].record(p)
    }

    /// [`AfterPin::read`] of the record of poll `pin`, if one of them is. Watchdog side.
    pub(crate) fn read(&self, pin: u64, out: &mut [Polled; AFTER_PIN_MAX]) -> usize {
        self.recs
            .iter()
            .map(|r| r.read(pin, out))
            .find(|n| *n > 0)
            .unwrap_or(0)
    }
}

/// Records kept per thread of tasks that waited past the threshold, until the watchdog reads
/// them (it reads every scan interval; more in between are counted lost).
#[cfg(feature = "schedule-latency")]
pub(crate) const WAIT_RING: usize = 16;

/// A task that waited past the threshold before this poll (tokio's schedule latency).
#[cfg(feature = "schedule-latency")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Waited {
    pub task: Polled,
    /// The poll it waited for (the slot's poll counter).
    pub poll: u64,
    /// How long it waited, in ns.
    pub wait: u64,
    /// When its poll began, in ns since the slot table's base.
    pub at: u64,
    /// The innermost span its poll entered (layer, id), once the poll has ended.
    pub span: Option<(u64, u64)>,
}

#[cfg(feature = "schedule-latency")]
struct WaitEntry {
    /// `index + 1` once record `index` is whole here; 0 while it is written.
    stamp: AtomicU64,
    task_id: AtomicU64,
    spawned_at: AtomicUsize,
    poll: AtomicU64,
    wait: AtomicU64,
    at: AtomicU64,
    /// `index + 1` once the poll has ended and its span is written.
    span_stamp: AtomicU64,
    span_layer: AtomicU64,
    span_id: AtomicU64,
}

/// A ring of [`Waited`] records: the owner writes, the watchdog reads. A record is published
/// when its poll begins (a victim that itself runs long is still seen at once); its span is
/// added when the poll ends.
#[cfg(feature = "schedule-latency")]
pub(crate) struct WaitRing {
    /// Records written so far.
    head: AtomicU64,
    entries: [WaitEntry; WAIT_RING],
}

#[cfg(feature = "schedule-latency")]
impl WaitRing {
    pub(crate) const fn new() -> WaitRing {
        WaitRing {
            head: AtomicU64::new(0),
            entries: [const {
                WaitEntry {
                    stamp: AtomicU64::new(0),
                    task_id: AtomicU64::new(0),
                    spawned_at: AtomicUsize::new(0),
                    poll: AtomicU64::new(0),
                    wait: AtomicU64::new(0),
                    at: AtomicU64::new(0),
                    span_stamp: AtomicU64::new(0),
                    span_layer: AtomicU64::new(0),
                    span_id: AtomicU64::new(0),
                }
            }; WAIT_RING],
        }
    }

    /// Poll `w.poll` begins after the wait `w` (its span not known yet). Owner only.
    pub(crate) fn begin(&self, w: Waited) {
        let i = self.head.load(Ordering::Relaxed);
        let e = &self.entries[(i % WAIT_RING as u64) as usize];
        e.stamp.store(0, Ordering::Relaxed);
        e.span_stamp.store(0, Ordering::Relaxed);
        fence(Ordering::Release);
        e.task_id.store(w.task.task_id, Ordering::Relaxed);
        e.spawned_at.store(w.task.spawned_at, Ordering::Relaxed);
        e.poll.store(w.poll, Ordering::Relaxed);
        e.wait.store(w.wait, Ordering::Relaxed);
        e.at.store(w.at, Ordering::Relaxed);
        e.stamp.store(i + 1, Ordering::Release);
        self.head.store(i + 1, Ordering::Release);
    }

    /// Poll `poll` ended, having entered `span` (innermost): added to its record, the last one
    /// begun, if it is that poll's. Owner only.
    pub(crate) fn end(&self, poll: u64, span: Option<(u64, u64)>) {
        let i = self.head.load(Ordering::Relaxed);
        let Some(last) = i.checked_sub(1) else { return };
        let e = &self.entries[(last % WAIT_RING as u64) as usize];
        if e.poll.load(Ordering::Relaxed) != poll {
            return;
        }
        let (layer, id) = span.unwrap_or((0, 0));
        e.span_layer.store(layer, Ordering::Relaxed);
        e.span_id.store(id, Ordering::Relaxed);
        e.span_stamp.store(i, Ordering::Release);
    }

    /// [`begin`](Self::begin) and [`end`](Self::end) at once. Owner only.
    #[cfg(test)]
    pub(crate) fn push(&self, w: Waited) {
        self.begin(w);
        self.end(w.poll, w.span);
    }

    /// The records written since `*next` (the reader's position, moved to the end), into
    /// `out`: how many, and how many were lost (overwritten before they were read, or being
    /// written). A record whose poll has not ended has no span yet. Watchdog side.
    pub(crate) fn read(&self, next: &mut u64, out: &mut [Waited; WAIT_RING]) -> (usize, u64) {
        let head = self.head.load(Ordering::Acquire);
        let (mut n, mut lost) = (0, 0);
        if head.saturating_sub(*next) > WAIT_RING as u64 {
            lost += head - WAIT_RING as u64 - *next;
            *next = head - WAIT_RING as u64;
        }
        for i in *next..head {
            let e = &self.entries[(i % WAIT_RING as u64) as usize];
            if e.stamp.load(Ordering::Acquire) != i + 1 {
                lost += 1;
                continue;
            }
            let ended = e.span_stamp.load(Ordering::Acquire) == i + 1;
            let (layer, id) = (
                e.span_layer.load(Ordering::Relaxed),
                e.span_id.load(Ordering::Relaxed),
            );
            let w = Waited {
                task: Polled {
                    task_id: e.task_id.load(Ordering::Relaxed),
                    spawned_at: e.spawned_at.load(Ordering::Relaxed),
                },
                poll: e.poll.load(Ordering::Relaxed),
                wait: e.wait.load(Ordering::Relaxed),
                at: e.at.load(Ordering::Relaxed),
                span: (ended && id != 0).then_some((layer, id)),
            };
            fence(Ordering::Acquire);
            if e.stamp.load(Ordering::Relaxed) != i + 1 {
                lost += 1;
                continue;
            }
            if let Some(o) = out.get_mut(n) {
                *o = w;
                n += 1;
            }
        }
        *next = head.max(*next);
        (n, lost)
    }
}

/// An empty record, to fill a buffer for [`WaitRing::read`].
#[cfg(feature = "schedule-latency")]
pub(crate) const NO_WAIT: Waited = Waited {
    task: Polled {
        task_id: 0,
        spawned_at: 0,
    },
    poll: 0,
    wait: 0,
    at: 0,
    span: None,
};

#[cfg(test)]
mod tests {
    use super::*;

    fn polled(task_id: u64) -> Polled {
        Polled {
            task_id,
            spawned_at: 0x1000 + task_id as usize,
        }
    }

    fn read(a: &AfterPin, pin: u64) -> Vec<Polled> {
        let mut out = [polled(0); AFTER_PIN_MAX];
        let n = a.read(pin, &mut out);
        out[..n].to_vec()
    }

    #[test]
    fn after_pin_keeps_the_first_tasks_of_its_own_pin_only() {
        let a = AfterPin::new();
        assert!(read(&a, 0).is_empty());
        a.start(7, 3);
        assert!(a.record(polled(3)), "the pinned task itself is skipped");
        assert!(a.record(polled(0)), "the block_on body is skipped");
        assert!(a.record(polled(10)));
        assert!(a.record(polled(11)));
        assert_eq!(read(&a, 7), vec![polled(10), polled(11)]);
        assert!(read(&a, 5).is_empty(), "another pin's record");
        for t in 12..12 + AFTER_PIN_MAX as u64 - 3 {
            assert!(a.record(polled(t)));
        }
        assert!(!a.record(polled(99)), "the last room is taken");
        assert_eq!(read(&a, 7).len(), AFTER_PIN_MAX);
        assert!(!a.record(polled(100)));
        assert_eq!(read(&a, 7).len(), AFTER_PIN_MAX);
        a.start(9, 4);
        assert!(read(&a, 7).is_empty(), "restarted for the next pin");
        assert!(read(&a, 9).is_empty());
        // The pinned task polled again and again: recording stops all the same.
        let polls = (0..100).take_while(|_| a.record(polled(4))).count();
        assert_eq!(polls, AFTER_PIN_POLLS - 1);
        assert!(read(&a, 9).is_empty());
    }

    #[test]
    fn a_second_flagged_poll_keeps_the_first_ones_record() {
        let a = AfterPins::new();
        let mut out = [polled(0); AFTER_PIN_MAX];
        a.start(7, 3);
        assert!(a.record(polled(10)));
        // A short poll the watchdog armed ends next: its own record, the pin's kept.
        a.start(9, 10);
        assert!(a.record(polled(11)));
        assert_eq!(a.read(7, &mut out), 1);
        assert_eq!(out[0], polled(10));
        assert_eq!(a.read(9, &mut out), 1);
        assert_eq!(out[0], polled(11));
        for pin in [11, 13, 15] {
            a.start(pin, 1);
        }
        assert_eq!(
            a.read(7, &mut out),
            0,
            "the oldest record is reused at last"
        );
        assert_eq!(a.read(9, &mut out), 1, "the four newest are kept");
    }

    #[cfg(feature = "schedule-latency")]
    #[test]
    fn the_wait_ring_reads_each_record_once_and_counts_what_it_lost() {
        let r = WaitRing::new();
        let w = |t: u64| Waited {
            task: polled(t),
            poll: 2 * t + 1,
            wait: t * 1000,
            at: t * 10,
            span: t.is_multiple_of(2).then_some((1, t)),
        };
        let (mut next, mut out) = (0, [NO_WAIT; WAIT_RING]);
        assert_eq!(r.read(&mut next, &mut out), (0, 0));
        r.push(w(1));
        r.push(w(2));
        assert_eq!(r.read(&mut next, &mut out), (2, 0));
        assert_eq!(out[..2], [w(1), w(2)]);
        assert_eq!(r.read(&mut next, &mut out), (0, 0), "read once");
        // Read as soon as its poll begins, without a span; the span comes with the poll's own
        // end only.
        r.begin(w(40));
        assert_eq!(r.read(&mut next, &mut out), (1, 0));
        assert_eq!(
            out[0],
            Waited {
                span: None,
                ..w(40)
            }
        );
        r.end(w(39).poll, Some((1, 39)));
        r.end(w(40).poll, w(40).span);
        next -= 1;
        assert_eq!(r.read(&mut next, &mut out), (1, 0));
        assert_eq!(out[0], w(40));
        for t in 3..3 + WAIT_RING as u64 + 4 {
            r.push(w(t));
        }
        assert_eq!(
            r.read(&mut next, &mut out),
            (WAIT_RING, 4),
            "four overwritten unread"
        );
        assert_eq!(out[0], w(7));
        assert_eq!(
            next,
            3 + WAIT_RING as u64 + 4,
            "every record written was passed"
        );
    }

    /// A reader racing the writer never returns a record torn between two writes (each
    /// record's fields are derived from its task id).
    #[cfg(feature = "schedule-latency")]
    #[test]
    fn a_reader_never_sees_a_torn_record() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        let r = Arc::new(WaitRing::new());
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (r, stop) = (r.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut t = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    r.push(Waited {
                        task: polled(t),
                        poll: t,
                        wait: t * 3,
                        at: t * 5,
                        span: Some((t, t * 7)),
                    });
                    t += 1;
                }
            })
        };
        let (mut next, mut seen) = (0, 0usize);
        let start = std::time::Instant::now();
        while seen < 20_000 && start.elapsed() < std::time::Duration::from_secs(60) {
            let mut out = [NO_WAIT; WAIT_RING];
            let (n, _) = r.read(&mut next, &mut out);
            for w in &out[..n] {
                let t = w.task.task_id;
                assert_eq!(
                    (w.task.spawned_at, w.poll, w.wait, w.at),
                    (0x1000 + t as usize, t, t * 3, t * 5)
                );
                // Read before or after its end, never with another record's span.
                assert!(w.span.is_none_or(|s| s == (t, t * 7)), "{w:?}");
            }
            seen += n;
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        assert!(seen > 0, "the writer never ran");
    }
}
