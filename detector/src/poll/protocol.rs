//! The poll protocol between a worker and the watchdog, on one [`PollCell`].
//!
//! The worker (the cell's owner) marks each poll: [`PollCell::begin`] publishes the task and an
//! odd poll counter, [`PollCell::end`] an even one. The counter never goes back — not even when
//! the slot passes to another thread — so "the same odd counter twice" always means "the same
//! poll, still running".
//!
//! - Reading the running poll's task is a seqlock read ([`PollCell::read`]): the counter, the
//!   data, `fence(Acquire)`, the counter again. The worker's `fence(Release)` before it writes
//!   the data of the next poll makes a torn read visible as a changed counter.
//! - Flagging ([`PollCell::flag`]) and ending a poll form a store-buffering pair; an asymmetric
//!   fence (see [`atomic`](super::atomic)) makes sure that if the watchdog still sees the poll
//!   running after flagging it, the worker sees the flag when it ends it and records the end.
//!
//! This file is compiled twice: in the library, and in the loom model
//! (`detector/tests/loom_poll.rs`), which checks these claims over every interleaving.

use super::atomic::{
    const_with_std, fence, heavy_fence, light_fence, AtomicU64, AtomicUsize, Ordering,
};

/// No poll of the cell is flagged. Odd, like every counter the watchdog flags: never equal to
/// the (even) counter of a cell with no poll running.
pub const NOT_FLAGGED: u64 = u64::MAX;

/// What the watchdog read of a running poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The poll counter (odd).
    pub seq: u64,
    /// The task's id.
    pub task_id: u64,
    /// The task's spawn location, as an address (`&'static Location<'static>`), or 0.
    pub spawned_at: usize,
}

/// One thread's poll state. `repr(C)`: the fields every poll touches come first, together.
#[repr(C)]
pub struct PollCell {
    seq: AtomicU64,
    task_id: AtomicU64,
    spawned_at: AtomicUsize,
    /// Nonzero: the owner stamps each poll's start ([`PollCell::begin`]), under this
    /// generation. Set by the watchdog.
    stamp_on: AtomicU64,
    /// The clock's ticks at the start of the last poll begun while stamping was on.
    stamp: AtomicU64,
    /// The generation (`stamp_on`) that poll saw.
    stamp_gen: AtomicU64,
    flagged: AtomicU64,
    ended_seq: AtomicU64,
    end_nanos: AtomicU64,
}

impl Default for PollCell {
    fn default() -> Self {
        PollCell::new()
    }
}

impl PollCell {
    const_with_std! {
        /// A cell with no poll yet. `const` (with std's atomics), so that a static cell can
        /// stand in for a thread that has no slot.
        pub fn new() -> PollCell {
            PollCell {
                seq: AtomicU64::new(0),
                task_id: AtomicU64::new(0),
                spawned_at: AtomicUsize::new(0),
                stamp_on: AtomicU64::new(0),
                stamp: AtomicU64::new(0),
                stamp_gen: AtomicU64::new(0),
                flagged: AtomicU64::new(NOT_FLAGGED),
                ended_seq: AtomicU64::new(NOT_FLAGGED),
                end_nanos: AtomicU64::new(0),
            }
        }
    }

    // ---- the owner's side: every poll ----

    /// A poll of `task_id` (spawned at `spawned_at`) starts. Owner only. While the watchdog has
    /// stamping on for the cell, the poll's start is stamped with `ticks()` (a cheap clock:
    /// the CPU's time-stamp counter); otherwise `ticks` is not called.
    ///
    /// The counter's next odd value: one more after an end, two more when the last poll did
    /// not end (a poll inside a poll on the same thread, e.g. a runtime run from a task in
    /// `block_in_place` with the same hooks), so that it always moves.
    #[inline(always)]
    pub fn begin(&self, task_id: u64, spawned_at: usize, ticks: impl FnOnce() -> u64) {
        // Order the previous `seq` store (the end of the last poll) before the data stores: a
        // watchdog whose seqlock read sees this poll's data then sees the counter moved.
        fence(Ordering::Release);
        self.task_id.store(task_id, Ordering::Relaxed);
        self.spawned_at.store(spawned_at, Ordering::Relaxed);
        let generation = self.stamp_on.load(Ordering::Relaxed);
        if generation != 0 {
            self.stamp.store(ticks(), Ordering::Relaxed);
            self.stamp_gen.store(generation, Ordering::Relaxed);
        }
        // Only the owner stores `seq`: loading it here or first is the same value.
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store((seq + 1) | 1, Ordering::Release);
    }

    /// The poll ends. Owner only. Returns its counter when the watchdog flagged it: the caller
    /// then reads the clock and calls [`record_end`](Self::record_end).
    ///
    /// Without a branch: the counter becomes the next even value when a poll runs (odd), and
    /// stays as it is when none does (even: an end without a begin leaves it, so the cell never
    /// shows a poll running when none is). `flagged` holds an odd counter or [`NOT_FLAGGED`],
    /// never an even one, so a cell with no poll running never reports a flag.
    #[inline(always)]
    pub fn end(&self) -> Option<u64> {
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store((seq + 1) & !1, Ordering::Release);
        light_fence();
        (self.flagged.load(Ordering::Relaxed) == seq).then_some(seq)
    }

    /// Records when flagged poll `seq` ended (ns on the detector's clock). Owner only.
    pub fn record_end(&self, seq: u64, nanos: u64) {
        // Mark the slot busy first, so that a reader never pairs `seq` with another end time.
        self.ended_seq.store(NOT_FLAGGED, Ordering::Relaxed);
        fence(Ordering::Release);
        self.end_nanos.store(nanos, Ordering::Relaxed);
        self.ended_seq.store(seq, Ordering::Release);
    }

    /// The task of the last poll begun. Owner only (its own last store).
    pub fn task_id_owner(&self) -> u64 {
        self.task_id.load(Ordering::Relaxed)
    }

    /// Makes the counter even if a poll was left open: the owner is going away. Owner only.
    pub fn close(&self) {
        let seq = self.seq.load(Ordering::Relaxed);
        if seq & 1 == 1 {
            self.seq.store(seq + 1, Ordering::Release);
        }
    }

    /// The byte range of the fields every poll touches (`seq`, `task_id`, `spawned_at`,
    /// `stamp_on`, `stamp`, `stamp_gen`, `flagged`), for the layout test.
    #[cfg(test)]
    pub(crate) fn per_poll_bytes() -> (usize, usize) {
        let start = std::mem::offset_of!(PollCell, seq);
        let end = std::mem::offset_of!(PollCell, flagged) + std::mem::size_of::<u64>();
        (start, end)
    }

    // ---- the watchdog's side ----

    /// The poll counter now.
    #[inline]
    pub fn seq(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }

    /// The running poll's task, read consistently; `None` when no poll runs or it changed
    /// during the read.
    pub fn read(&self) -> Option<Snapshot> {
        let seq = self.seq.load(Ordering::Acquire);
        if seq & 1 == 0 {
            return None;
        }
        let task_id = self.task_id.load(Ordering::Relaxed);
        let spawned_at = self.spawned_at.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        (self.seq.load(Ordering::Relaxed) == seq).then_some(Snapshot {
            seq,
            task_id,
            spawned_at,
        })
    }

    /// Flags poll `seq` as pinned. `true`: it was still running once the flag was visible to the
    /// owner, which will then record its end. `false`: it had ended (the owner may not have seen
    /// the flag; the end is then known only as "before now").
    ///
    /// Called from the watchdog's thread (and, in tests, the owner's: it sees its own store). A
    /// poll flagged already (armed at its second look, then found pinned) is not fenced again:
    /// this thread's barrier after its first store of `seq` made it visible to the owner, and
    /// came before this call's load of the counter; a second would cost another interrupt on
    /// every CPU running the process. (A flag from a third thread could find `seq` stored and
    /// skip the barrier before that thread's own load: the promise above would not hold for it.)
    pub fn flag(&self, seq: u64) -> bool {
        if self.flagged.load(Ordering::Relaxed) != seq {
            self.flagged.store(seq, Ordering::Relaxed);
            heavy_fence();
        }
        self.seq.load(Ordering::Relaxed) == seq
    }

    /// The running poll's counter, and the stamp and generation beside it, read consistently;
    /// `None` when no poll runs or it changed during the read. The stamp is this poll's start
    /// only if stamping was on when it began: [`set_stamping`](Self::set_stamping) says how to
    /// tell.
    pub fn read_stamp(&self) -> Option<(u64, u64, u64)> {
        let seq = self.seq.load(Ordering::Acquire);
        if seq & 1 == 0 {
            return None;
        }
        let stamp = self.stamp.load(Ordering::Relaxed);
        let generation = self.stamp_gen.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        (self.seq.load(Ordering::Relaxed) == seq).then_some((seq, stamp, generation))
    }

    /// Turns the stamping of each poll's start on, under `generation` (nonzero, never used
    /// before for this cell), or off (0). A stamp read by [`read_stamp`](Self::read_stamp) is
    /// the running poll's own when its generation is the one stamping was last turned on with
    /// and has stayed on with: a poll that began without a stamp (it saw stamping off) leaves
    /// the last one's stamp and generation in place, but that poll, later than one that saw the
    /// latest generation, cannot have seen it off since (its loads of `stamp_on` never go back
    /// in its order of stores) — so what it left is an earlier generation's. The ticks read
    /// before turning it on make a generation (distinct, and ordered for the reader).
    pub fn set_stamping(&self, generation: u64) {
        self.stamp_on.store(generation, Ordering::Relaxed);
    }

    /// When flagged poll `seq` ended, if the owner has recorded it.
    pub fn ended(&self, seq: u64) -> Option<u64> {
        if self.ended_seq.load(Ordering::Acquire) != seq {
            return None;
        }
        let nanos = self.end_nanos.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        (self.ended_seq.load(Ordering::Relaxed) == seq).then_some(nanos)
    }
}
