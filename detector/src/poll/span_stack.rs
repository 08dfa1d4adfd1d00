//! The spans a thread has entered, in its slot: written by the thread in `on_enter`/`on_exit`
//! (inside polls: a few relaxed stores, no allocation, lock or system call), read by the watchdog
//! when it flags a poll (a seqlock-like read, like
//! [`PollCell::read`](super::protocol::PollCell::read)).
//!
//! Each entry carries the poll counter of the slot when the span was entered, so that the
//! watchdog takes only the spans entered during the poll it flags: never a span left on the
//! stack by an earlier poll (a guard held across an `.await` and dropped on another thread), nor
//! one entered before the poll began on the same thread (a `block_on` caller's span), nor one of
//! the slot's previous owner (counters never repeat).
//!
//! The depth and a generation share one word, `state`, which every change of the stack stores
//! anew (the generation one higher): an enter writes the entry above the top, which no reader of
//! the current state reads, then stores the state; an exit only stores the state. An entry a
//! reader may be reading is overwritten only after a state store (an exit before the enter that
//! reuses its place, or the rare paths that store one first), so a reader that saw the new entry
//! sees a new state too, and reads again. One store per enter and per exit, instead of a
//! sequence counter made odd then even around each change.

use std::sync::atomic::{fence, AtomicU64, Ordering};

/// Entries kept per thread. Deeper nesting is counted (exits stay balanced) but not stored.
pub(crate) const STACK_MAX: usize = 16;

/// The depth's bits in [`SpanStack::state`] (the low 16); the generation is the high 48 bits,
/// so that a reader preempted between its two loads of the state cannot see the same word again
/// before 2^48 changes of the stack (32 bits came round after 2^32, seconds of enters and exits).
const DEPTH: u64 = u16::MAX as u64;
/// One generation.
const GENERATION: u64 = DEPTH + 1;

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
    /// The depth (low 16 bits: spans entered and not exited, which may exceed [`STACK_MAX`];
    /// it saturates) and a generation (high 48 bits) one higher at every change of the stack.
    state: AtomicU64,
    /// The poll counter of the latest push. Every push either goes on entries of its own poll
    /// or first drops them all (stale), so while the stack is not empty every entry on it was
    /// pushed during this poll: what tells that it is all left over from an earlier one, with
    /// one load, however deep the stack (deeper than kept, the top is not stored).
    last: AtomicU64,
    entries: [Entry; STACK_MAX],
}

/// The innermost span entered during a poll, as the watchdog read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entered {
    pub layer: u64,
    pub id: u64,
}

/// The depth `state` says.
#[inline(always)]
fn depth(state: u64) -> usize {
    (state & DEPTH) as usize
}

/// The state after `state` with depth `depth`: the next generation.
#[inline(always)]
fn next(state: u64, depth: usize) -> u64 {
    (state & !DEPTH).wrapping_add(GENERATION) | (depth as u64).min(DEPTH)
}

impl SpanStack {
    pub(crate) const fn new() -> SpanStack {
        SpanStack {
            state: AtomicU64::new(0),
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

    /// The owner enters span `id` of layer `layer` during poll `poll` (the slot's poll counter).
    #[inline]
    pub(crate) fn push(&self, layer: u64, id: u64, poll: u64) {
        let mut state = self.state.load(Ordering::Relaxed);
        let mut depth = depth(state);
        // Entries on the stack are all of the latest push's poll (`last`): when it is another
        // poll, nothing of theirs can be reported any more. (Deeper than kept, the top is not
        // stored: without this, spans entered and never exited here, 17 deep, would leave the
        // thread with no span on any later pin.)
        if depth != 0 && self.last.load(Ordering::Relaxed) != poll {
            state = self.emptied(state);
            depth = 0;
        }
        self.last.store(poll, Ordering::Relaxed);
        // The state stores before this (an exit that freed this entry's place) are visible to
        // a reader that sees the entry's new contents.
        fence(Ordering::Release);
        if let Some(e) = self.entries.get(depth) {
            e.id.store(id, Ordering::Relaxed);
            e.layer.store(layer, Ordering::Relaxed);
            e.poll.store(poll, Ordering::Relaxed);
        }
        // The next generation, one deeper (at most `DEPTH`: then the same depth).
        let step = if depth < DEPTH as usize {
            GENERATION + 1
        } else {
            GENERATION
        };
        self.state
            .store(state.wrapping_add(step), Ordering::Release);
    }

    /// An empty stack, stored before entries a reader may be reading are overwritten (a push
    /// over stale entries); returns the new state. Inlined: a call would make the push keep
    /// its values across it, in registers saved and restored on every push.
    #[inline(always)]
    fn emptied(&self, state: u64) -> u64 {
        let state = next(state, 0);
        self.state.store(state, Ordering::Release);
        state
    }

    /// The owner exits span `id`: the innermost entry with that id goes, wherever it is (tracing
    /// allows exits out of order). A span this thread did not enter (entered on another thread,
    /// or while the thread had another slot) changes nothing.
    #[inline]
    pub(crate) fn pop(&self, layer: u64, id: u64) {
        let state = self.state.load(Ordering::Relaxed);
        let depth = depth(state);
        if let Some(e) = depth.checked_sub(1).and_then(|i| self.entries.get(i)) {
            if e.id.load(Ordering::Relaxed) == id && e.layer.load(Ordering::Relaxed) == layer {
                // The usual exit, the innermost: the entry stays as it was until a push
                // overwrites it, after this store.
                // The next generation, one less deep (`depth` is at least 1).
                self.state
                    .store(state.wrapping_add(GENERATION - 1), Ordering::Release);
                return;
            }
        }
        self.pop_other(state, layer, id);
    }

    /// [`pop`](Self::pop) of an entry not on top, or of a stack deeper than kept or empty.
    #[cold]
    #[inline(never)]
    fn pop_other(&self, state: u64, layer: u64, id: u64) {
        let depth = depth(state);
        if depth == 0 {
            return;
        }
        if depth > STACK_MAX {
            // The innermost spans are not stored: assume the innermost exits (the usual order).
            self.state.store(next(state, depth - 1), Ordering::Release);
            return;
        }
        let Some(at) = (0..depth).rev().find(|&i| {
            let e = &self.entries[i];
            e.id.load(Ordering::Relaxed) == id && e.layer.load(Ordering::Relaxed) == layer
        }) else {
            return;
        };
        // Entries below the top move: a new state first (its depth unchanged), as a push over
        // stale entries does.
        let state = next(state, depth);
        self.state.store(state, Ordering::Relaxed);
        fence(Ordering::Release);
        for i in at..depth - 1 {
            let (to, from) = (&self.entries[i], &self.entries[i + 1]);
            to.id
                .store(from.id.load(Ordering::Relaxed), Ordering::Relaxed);
            to.layer
                .store(from.layer.load(Ordering::Relaxed), Ordering::Relaxed);
            to.poll
                .store(from.poll.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        self.state.store(next(state, depth - 1), Ordering::Release);
    }

    /// Forgets everything: the slot has a new owner. Owner only.
    pub(crate) fn clear(&self) {
        let state = self.state.load(Ordering::Relaxed);
        self.state.store(next(state, 0), Ordering::Release);
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
            let state = self.state.load(Ordering::Acquire);
            let depth = depth(state).min(STACK_MAX);
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
            if self.state.load(Ordering::Relaxed) == state {
                return found;
            }
            std::hint::spin_loop();
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

    /// A reader that loaded the state before an exit and the enter that reuses the exited
    /// entry's place (it may have read the new entry) sees another state after: it reads again.
    /// So do the rare paths that move entries below the top.
    #[test]
    fn every_change_that_may_overwrite_a_read_entry_changes_the_state() {
        let st = SpanStack::new();
        let state = || st.state.load(Ordering::Relaxed);
        st.push(1, 10, 1);
        st.push(1, 20, 1);
        let before = state();
        st.pop(1, 20);
        st.push(1, 30, 1);
        assert_eq!(depth(state()), 2);
        assert_ne!(state(), before);
        // Out of order: entries move down.
        let before = state();
        st.pop(1, 10);
        assert_ne!(state(), before);
        assert_eq!(st.innermost(1), Some(Entered { layer: 1, id: 30 }));
        // Over stale entries: emptied first.
        let before = state();
        st.push(1, 40, 2);
        assert_ne!(state(), before);
        assert_eq!(depth(state()), 1);
        // Every store is a new generation, even back to an earlier depth.
        let states: Vec<u64> = (0..4)
            .map(|i| {
                if i % 2 == 0 {
                    st.push(1, 50, 2);
                } else {
                    st.pop(1, 50);
                }
                state()
            })
            .collect();
        assert_eq!(depth(states[1]), depth(states[3]));
        assert_ne!(states[1], states[3]);
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

/// Review: a real second thread reads while the owner pushes and pops in a tight loop; every
/// entry the reader accepts must be the top the writer actually had at some moment within the
/// read (checked against a log of the model's tops, after the run).
#[cfg(test)]
mod review_stress {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Barrier};

    /// SpanStack's semantics, single-threaded: what a reader must see.
    struct Model {
        entries: [(u64, u64, u64); STACK_MAX],
        depth: usize,
        last: u64,
    }

    impl Model {
        fn push(&mut self, layer: u64, id: u64, poll: u64) {
            if self.depth != 0 && self.last != poll {
                self.depth = 0;
            }
            self.last = poll;
            if self.depth < STACK_MAX {
                self.entries[self.depth] = (layer, id, poll);
            }
            self.depth += 1;
        }
        fn pop(&mut self, layer: u64, id: u64) {
            if self.depth == 0 {
                return;
            }
            if self.depth > STACK_MAX {
                self.depth -= 1;
                return;
            }
            if let Some(at) = (0..self.depth)
                .rev()
                .find(|&i| self.entries[i].1 == id && self.entries[i].0 == layer)
            {
                for i in at..self.depth - 1 {
                    self.entries[i] = self.entries[i + 1];
                }
                self.depth -= 1;
            }
        }
        /// The top (layer, id, poll), whatever its poll; (0, 0, 0) when empty.
        fn top(&self) -> (u64, u64, u64) {
            match self.depth.min(STACK_MAX) {
                0 => (0, 0, 0),
                d => self.entries[d - 1],
            }
        }
    }

    fn layer_of(id: u64) -> u64 {
        id.rotate_left(29) ^ 0x5555_AAAA_1234_5678
    }

    #[test]
    fn a_concurrent_reader_accepts_only_tops_the_writer_had() {
        const OPS: usize = 1_500_000;
        let st = Arc::new(SpanStack::new());
        let done = Arc::new(AtomicU64::new(0));
        let poll_now = Arc::new(AtomicU64::new(1));
        let finished = Arc::new(AtomicBool::new(false));
        let barrier = Arc::new(Barrier::new(2));

        let writer = {
            let (st, done, poll_now, finished, barrier) = (
                st.clone(),
                done.clone(),
                poll_now.clone(),
                finished.clone(),
                barrier.clone(),
            );
            std::thread::spawn(move || {
                let mut m = Model {
                    entries: [(0, 0, 0); STACK_MAX],
                    depth: 0,
                    last: 0,
                };
                let mut log = Vec::with_capacity(OPS);
                let mut seed = 0x9E37_79B9_7F4A_7C15u64;
                let mut rnd = move || {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed
                };
                let mut poll = 1u64;
                barrier.wait();
                for op in 0..OPS {
                    let r = rnd() % 100;
                    let d = m.depth;
                    if r < 2 {
                        poll += 1;
                        poll_now.store(poll, Ordering::SeqCst);
                    }
                    // ids: the op's number and the depth pushed at: unique per push.
                    let push = (d < 4 || r < 48) && d < 22;
                    if push {
                        let id = ((op as u64 + 1) << 8) | d as u64;
                        st.push(layer_of(id), id, poll);
                        m.push(layer_of(id), id, poll);
                    } else if r < 85 || d > STACK_MAX {
                        // The innermost exits (deeper than kept: any id does).
                        let (l, id, _) = m.top();
                        st.pop(l, id);
                        m.pop(l, id);
                    } else if r < 97 {
                        // Out of order: one below the top.
                        let i = (rnd() as usize) % d.min(STACK_MAX);
                        let (l, id, _) = m.entries[i];
                        st.pop(l, id);
                        m.pop(l, id);
                    } else {
                        // Never entered here.
                        st.pop(7, 0xdead_0000 + op as u64);
                        m.pop(7, 0xdead_0000 + op as u64);
                    }
                    log.push(m.top());
                    done.store(op as u64 + 1, Ordering::SeqCst);
                }
                finished.store(true, Ordering::SeqCst);
                log
            })
        };

        let reader = {
            let (st, done, poll_now, finished, barrier) = (
                st.clone(),
                done.clone(),
                poll_now.clone(),
                finished.clone(),
                barrier.clone(),
            );
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                let mut nones = 0u64;
                barrier.wait();
                while !finished.load(Ordering::SeqCst) {
                    let a = done.load(Ordering::SeqCst);
                    let q = poll_now.load(Ordering::SeqCst);
                    let r = st.innermost(q);
                    let b = done.load(Ordering::SeqCst);
                    match r {
                        Some(e) => seen.push((a, b, q, e)),
                        None => nones += 1,
                    }
                }
                (seen, nones)
            })
        };

        let log = writer.join().unwrap();
        let (seen, nones) = reader.join().unwrap();
        let mut bad = Vec::new();
        for &(a, b, q, e) in &seen {
            assert_eq!(e.layer, layer_of(e.id), "torn entry: {e:?}");
            // States after op j for j in [a-1, b] (a-1 = -1: the empty start).
            let lo = a.saturating_sub(1) as usize;
            let hi = (b as usize).min(log.len() - 1);
            let ok = (lo..=hi).any(|j| log[j] == (e.layer, e.id, q));
            if !ok {
                bad.push((a, b, q, e));
            }
        }
        eprintln!(
            "{} accepted snapshots, {} None, {} inconsistent",
            seen.len(),
            nones,
            bad.len()
        );
        assert!(
            bad.is_empty(),
            "first inconsistent: {:?}",
            &bad[..bad.len().min(5)]
        );
        assert!(
            seen.len() > 100,
            "the reader must have overlapped the writer"
        );
    }

    /// The generation is 32 bits: 2^32 changes bring a stack back to the very same state word,
    /// which a reader preempted between its two loads cannot tell from no change at all. The
    /// old protocol's sequence counter was 64 bits. (White-box: what 2^31 enter/exit pairs at
    /// the same depth do to `state`.)
    #[test]
    fn the_state_word_repeats_after_two_to_the_32_changes() {
        let st = SpanStack::new();
        st.push(1, 10, 1);
        let before = st.state.load(Ordering::Relaxed);
        // 2^31 (push, pop) pairs: each pair adds 2 generations and leaves the depth.
        let mut s = before;
        for _ in 0..2 {
            // Each step: what `push` then `pop` store, 2^30 times, folded.
            s = s.wrapping_add((1u64 << 30).wrapping_mul(2 * GENERATION));
        }
        assert_ne!(
            s, before,
            "after 2^32 changes of the stack the state word is the same: a reader \
             preempted for that long accepts a torn entry"
        );
    }
}

#[cfg(test)]
mod review_saturation {
    use super::*;

    /// Nesting past what the depth field holds (65,535 with a 16-bit depth) and back out:
    /// balanced again at the end, and the next poll's spans show.
    #[test]
    fn nesting_past_the_depth_field_comes_back_balanced() {
        let st = SpanStack::new();
        let n = DEPTH + 5_000;
        for i in 1..=n {
            st.push(1, i, 1);
        }
        assert_eq!(depth(st.state.load(Ordering::Relaxed)), DEPTH as usize);
        for i in (1..=n).rev() {
            st.pop(1, i);
        }
        assert_eq!(depth(st.state.load(Ordering::Relaxed)), 0);
        assert_eq!(st.innermost(1), None);
        st.push(1, 42, 2);
        assert_eq!(st.innermost(2), Some(Entered { layer: 1, id: 42 }));
    }
}
