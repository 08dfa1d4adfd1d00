//! The spans a thread has entered, in its slot: written by the thread in `on_enter`/`on_exit`
//! (inside polls: a few relaxed stores, no allocation, lock or system call), read by the watchdog
//! when it flags a poll (a seqlock read, like [`PollCell::read`](super::protocol::PollCell::read)).
//!
//! Each entry carries the poll counter of the slot when the span was entered, so that the
//! watchdog takes only the spans entered during the poll it flags: never a span left on the
//! stack by an earlier poll (a guard held across an `.await` and dropped on another thread), nor
//! one entered before the poll began on the same thread (a `block_on` caller's span), nor one of
//! the slot's previous owner (counters never repeat).

use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};

/// Entries kept per thread. Deeper nesting is counted (exits stay balanced) but not stored.
pub(crate) const STACK_MAX: usize = 16;

struct Entry {
    /// The span's id (`tracing::span::Id::into_u64`).
    id: AtomicU64,
    /// Which layer instance entered it (span ids are per subscriber).
    layer: AtomicU64,
    /// The slot's poll counter when it was entered.
    poll: AtomicU64,
}

/// One thread's entered spans, innermost last.
pub(crate) struct SpanStack {
    /// Seqlock counter: odd while the owner writes.
    seq: AtomicU64,
    /// Spans entered and not exited; may exceed [`STACK_MAX`].
    depth: AtomicUsize,
    /// The poll counter of the latest push: what tells, when the stack is deeper than kept
    /// (the top entries not stored), that it is all left over from an earlier poll.
    last: AtomicU64,
    entries: [Entry; STACK_MAX],
}

/// The innermost span entered during a poll, as the watchdog read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entered {
    pub layer: u64,
    pub id: u64,
}

impl SpanStack {
    pub(crate) const fn new() -> SpanStack {
        SpanStack {
            seq: AtomicU64::new(0),
            depth: AtomicUsize::new(0),
            last: AtomicU64::new(0),
            entries: [const {
                Entry {
                    id: AtomicU64::new(0),
                    layer: AtomicU64::new(0),
                    poll: AtomicU64::new(0),
                }
            }; STACK_MAX],
        }
    }

    // ---- the owner's side ----

    #[inline(always)]
    fn write_begin(&self) -> u64 {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s | 1, Ordering::Relaxed);
        // The odd counter is visible before any entry changes.
        fence(Ordering::Release);
        s | 1
    }

    #[inline(always)]
    fn write_end(&self, s: u64) {
        self.seq.store(s + 1, Ordering::Release);
    }

    /// The owner enters span `id` of layer `layer` during poll `poll` (the slot's poll counter).
    #[inline]
    pub(crate) fn push(&self, layer: u64, id: u64, poll: u64) {
        let s = self.write_begin();
        let mut depth = self.depth.load(Ordering::Relaxed);
        // Entries are pushed in time order and poll counters only grow: when the top one is
        // from another poll, all are. Nothing of theirs can be reported any more. Deeper than
        // kept, the top is not stored: the latest push says (else spans entered and never
        // exited here, 17 deep, would leave the thread with no span on any later pin).
        let stale = match depth {
            0 => false,
            1..=STACK_MAX => self.entries[depth - 1].poll.load(Ordering::Relaxed) != poll,
            _ => self.last.load(Ordering::Relaxed) != poll,
        };
        if stale {
            depth = 0;
        }
        self.last.store(poll, Ordering::Relaxed);
        if let Some(e) = self.entries.get(depth) {
            e.id.store(id, Ordering::Relaxed);
            e.layer.store(layer, Ordering::Relaxed);
            e.poll.store(poll, Ordering::Relaxed);
        }
        self.depth.store(depth.saturating_add(1), Ordering::Relaxed);
        self.write_end(s);
    }

    /// The owner exits span `id`: the innermost entry with that id goes, wherever it is (tracing
    /// allows exits out of order). A span this thread did not enter (entered on another thread,
    /// or while the thread had another slot) changes nothing.
    #[inline]
    pub(crate) fn pop(&self, layer: u64, id: u64) {
        let depth = self.depth.load(Ordering::Relaxed);
        if depth == 0 {
            return;
        }
        if depth > STACK_MAX {
            // The innermost spans are not stored: assume the innermost exits (the usual order).
            self.depth.store(depth - 1, Ordering::Relaxed);
            return;
        }
        let Some(at) = (0..depth).rev().find(|&i| {
            let e = &self.entries[i];
            e.id.load(Ordering::Relaxed) == id && e.layer.load(Ordering::Relaxed) == layer
        }) else {
            return;
        };
        if at == depth - 1 {
            // The usual exit, the innermost: the entry stays as it was, so a reader that loaded
            // the old depth still reads an entry that was on the stack then.
            self.depth.store(depth - 1, Ordering::Relaxed);
            return;
        }
        let s = self.write_begin();
        for i in at..depth - 1 {
            let (to, from) = (&self.entries[i], &self.entries[i + 1]);
            to.id
                .store(from.id.load(Ordering::Relaxed), Ordering::Relaxed);
            to.layer
                .store(from.layer.load(Ordering::Relaxed), Ordering::Relaxed);
            to.poll
                .store(from.poll.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        self.depth.store(depth - 1, Ordering::Relaxed);
        self.write_end(s);
    }

    /// Forgets everything: the slot has a new owner. Owner only.
    pub(crate) fn clear(&self) {
        let s = self.write_begin();
        self.depth.store(0, Ordering::Relaxed);
        self.write_end(s);
    }

    /// The innermost span entered during poll `poll`, exited since or not (an exited entry
    /// stays as it was until the next push): what a poll that has just ended was in. Owner
    /// only.
    #[cfg_attr(not(feature = "schedule-latency"), allow(dead_code))]
    pub(crate) fn last_entered(&self, poll: u64) -> Option<Entered> {
        self.entries.iter().rev().find_map(|e| {
            (e.poll.load(Ordering::Relaxed) == poll && poll != 0).then(|| Entered {
                layer: e.layer.load(Ordering::Relaxed),
                id: e.id.load(Ordering::Relaxed),
            })
        })
    }

    // ---- the watchdog's side ----

    /// The innermost span entered during poll `poll`, read consistently; `None` when there is
    /// none or the owner kept changing the stack (a few tries).
    pub(crate) fn innermost(&self, poll: u64) -> Option<Entered> {
        for _ in 0..4 {
            let s = self.seq.load(Ordering::Acquire);
            if s & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let depth = self.depth.load(Ordering::Relaxed).min(STACK_MAX);
            let mut found = None;
            if let Some(e) = depth.checked_sub(1).map(|i| &self.entries[i]) {
                if e.poll.load(Ordering::Relaxed) == poll {
                    found = Some(Entered {
                        layer: e.layer.load(Ordering::Relaxed),
                        id: e.id.load(Ordering::Relaxed),
                    });
                }
            }
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s {
                return found;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_repeats_and_exits_out_of_order() {
        let st = SpanStack::new();
        assert_eq!(st.innermost(1), None);
        st.push(1, 10, 1);
        st.push(1, 20, 1);
        st.push(1, 20, 1);
        assert_eq!(st.innermost(1), Some(Entered { layer: 1, id: 20 }));
        st.pop(1, 20);
        assert_eq!(st.innermost(1), Some(Entered { layer: 1, id: 20 }));
        // Out of order: the outer one exits first.
        st.pop(1, 10);
        assert_eq!(st.innermost(1), Some(Entered { layer: 1, id: 20 }));
        st.pop(1, 20);
        assert_eq!(st.innermost(1), None);
        // Exiting a span never entered here changes nothing.
        st.push(1, 30, 1);
        st.pop(1, 99);
        st.pop(2, 30);
        assert_eq!(st.innermost(1), Some(Entered { layer: 1, id: 30 }));
    }

    #[test]
    fn only_the_polls_own_spans() {
        let st = SpanStack::new();
        // Entered between polls (counter 2), then poll 3 runs.
        st.push(1, 10, 2);
        assert_eq!(st.innermost(3), None);
        // Left over from poll 3; poll 5 enters another: the leftover goes.
        st.push(1, 11, 3);
        st.push(1, 12, 5);
        assert_eq!(st.innermost(5), Some(Entered { layer: 1, id: 12 }));
        st.pop(1, 12);
        assert_eq!(st.innermost(5), None);
        assert_eq!(st.innermost(3), None);
    }

    #[test]
    fn deeper_than_kept_stays_balanced() {
        let st = SpanStack::new();
        for i in 0..STACK_MAX as u64 + 5 {
            st.push(1, i + 1, 1);
        }
        assert_eq!(
            st.innermost(1),
            Some(Entered {
                layer: 1,
                id: STACK_MAX as u64
            })
        );
        for i in (0..STACK_MAX as u64 + 5).rev() {
            st.pop(1, i + 1);
        }
        assert_eq!(st.innermost(1), None);
        st.push(1, 7, 1);
        st.clear();
        assert_eq!(st.innermost(1), None);
    }

    /// Spans entered deeper than kept and never exited on this thread (exited on another, or a
    /// guard forgotten) do not blind the thread: the next poll's spans show.
    #[test]
    fn a_deep_leftover_does_not_hide_later_polls_spans() {
        let st = SpanStack::new();
        for i in 0..STACK_MAX as u64 + 1 {
            st.push(1, i + 1, 1);
        }
        st.push(1, 99, 2);
        assert_eq!(st.innermost(2), Some(Entered { layer: 1, id: 99 }));
        st.pop(1, 99);
        assert_eq!(st.innermost(2), None);
        st.push(1, 100, 3);
        assert_eq!(st.innermost(3), Some(Entered { layer: 1, id: 100 }));
    }
}
