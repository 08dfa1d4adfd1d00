//! The calling thread's claim on a slot, and the hooks' side of the per-poll path: a poll
//! begins and ends in the thread's own slot, claimed on its first poll and released when the
//! thread exits. Nothing here allocates or locks on the per-poll path; the claim (once per
//! thread) takes a slot from the table.

use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::current::{self, Current, NO_CLAIM};
use super::slot::{Slot, SlotTable};
use super::waits::{Polled, AFTER_PIN};

/// Releases the thread's slot when the thread exits (or claims a slot in another table).
struct Claim {
    table: Arc<SlotTable>,
    index: usize,
    /// Dropped as the thread exits (not replaced by a claim in another table): its accounting
    /// is recorded then ([`Exited`](super::slot::Exited)).
    exiting: bool,
    /// The slot's poll counter when the thread claimed it.
    claimed: u64,
}

impl Drop for Claim {
    fn drop(&mut self) {
        current::set(NO_CLAIM);
        if let Some(slot) = self.table.slots().get(self.index).filter(|_| self.exiting) {
            // The thread's accounting, while its `/proc` files are still there.
            let tid = slot.tid.load(Ordering::Relaxed);
            slot.exited.record_own(tid, self.claimed, slot.poll.seq());
        }
        self.table.release(self.index);
    }
}

thread_local! {
    /// The table this thread failed to claim a slot in (table full), so that it is not retried
    /// on every poll. Weak, not the table's address: the address of a table that is gone may
    /// be a new table's (a detector started again), which the thread would then never be
    /// watched in, and the weak reference keeps the old one's memory, so that it cannot be.
    static NO_SLOT_IN: Cell<Option<std::sync::Weak<SlotTable>>> = const { Cell::new(None) };
    /// Keeps the claim alive, and releases it at thread exit.
    static GUARD: RefCell<Option<Claim>> = const { RefCell::new(None) };
}

/// A poll starts on the calling thread: marks it in the thread's slot in `table` (`key` is
/// [`SlotTable::key`]), claiming one on first use. Nothing is marked when the table is full
/// (counted) or the thread is exiting.
#[inline(always)]
pub(crate) fn begin_poll(
    table: &Arc<SlotTable>,
    key: &usize,
    task_id: u64,
    spawned_at: &'static std::panic::Location<'static>,
) {
    let (owner, cell) = current::owner_and_cell();
    let spawned_at = spawned_at as *const std::panic::Location<'static> as usize;
    // Read only now, so that the compare takes it from memory.
    if owner == *key {
        // SAFETY: `owner == key` (never 0) means `cell` is the poll cell of a slot the thread
        // claimed in the table at `key`, which the thread's `Claim` keeps alive (it holds an
        // `Arc`); `Claim::drop` resets the thread's `Current` before letting go of it.
        unsafe { &*cell }.begin(task_id, spawned_at, super::atomic::ticks);
    } else {
        claim_and_begin(table, spawned_at, task_id);
    }
}

/// The poll that [`begin_poll`] marked ends. Does not look at the table: the thread's cell is
/// whichever slot it has (or [`NO_CELL`](super::current::NO_CELL)), and ending a cell where no
/// poll runs changes nothing. When another table's slot is current (this thread's slot in the
/// hook's table was given up for it during the poll, or that table was full), that slot's poll,
/// if one runs, ends early: its rest goes unwatched, and nothing is reported that did not
/// happen. Needs nothing from its caller: the after-poll hook is the thread-local load and the
/// cell's [`end`](super::protocol::PollCell::end).
#[inline(always)]
pub(crate) fn end_poll() {
    // SAFETY: `cell` is `NO_CELL` or the cell of the slot the thread's `Claim` keeps alive
    // (see `begin_poll`); nothing else runs on this thread between the load and the use.
    if let Some(seq) = unsafe { &*current::cell() }.end() {
        flagged_poll_ended(seq);
    }
}

/// Rare path: poll `seq` of the thread's slot, flagged as pinned, just ended; records when, on
/// the clock of the slot's table (the one whose watchdog flagged it).
#[cold]
#[inline(never)]
fn flagged_poll_ended(seq: u64) {
    let now = Instant::now();
    let current = current::get();
    if current.owner != 0 {
        // SAFETY: a nonzero `owner` is the address of the table holding the thread's slot
        // (`SlotTable::key`, perhaps with the `AFTER_PIN` bit), which the thread's `Claim`
        // keeps alive, and `cell` is that slot's cell (see `begin_poll`).
        let (table, cell) = unsafe { (&*table_of(current.owner), &*current.cell) };
        // SAFETY: the slot of that cell, kept alive by the same `Claim`.
        let slot = (!current.slot.is_null()).then(|| unsafe { &*current.slot });
        if let Some(slot) = slot {
            // Its panic mark, before the end the watchdog reads first.
            slot.unwinding.ended(seq);
        }
        cell.record_end(seq, table.nanos_since_base(now));
        if let Some(slot) = slot {
            // Who runs next on this thread is who waited behind the poll: the next polls miss
            // the per-poll check (the owner's bit) and are recorded on the cold path.
            slot.after_pin.start(seq, cell.task_id_owner());
            current::set(Current {
                owner: current.owner | AFTER_PIN,
                ..current
            });
        }
    }
}

/// Rare path (`schedule-latency`): the poll of task `task_id` that begins on this thread
/// (its counter just made odd) comes after it waited `wait` ns, at or past the threshold:
/// recorded in the thread's slot with the time, published when the poll ends
/// ([`wait_ends`] adds its span). Only a thread whose slot is in `table`.
#[cfg(feature = "schedule-latency")]
#[cold]
#[inline(never)]
pub(crate) fn wait_begins(
    table: &Arc<SlotTable>,
    task_id: u64,
    spawned_at: &'static std::panic::Location<'static>,
    wait: u64,
) {
    let current = current::get();
    if current.owner & !AFTER_PIN != SlotTable::key(table) || current.slot.is_null() {
        return;
    }
    // SAFETY: the thread's slot in `table`, kept alive by its `Claim` (see `begin_poll`).
    let slot = unsafe { &*current.slot };
    slot.waits.begin(super::waits::Waited {
        task: Polled {
            task_id,
            spawned_at: spawned_at as *const std::panic::Location<'static> as usize,
        },
        poll: slot.poll.seq(),
        wait,
        at: table.nanos_since_base(Instant::now()),
        span: None,
    });
}

/// Rare path (`schedule-latency`): the poll [`wait_begins`] recorded has ended; its record gets
/// the innermost span the poll entered.
#[cfg(feature = "schedule-latency")]
#[cold]
#[inline(never)]
pub(crate) fn wait_ends(table: &Arc<SlotTable>) {
    let current = current::get();
    if current.owner & !AFTER_PIN != SlotTable::key(table) || current.slot.is_null() {
        return;
    }
    // SAFETY: as in `wait_begins`.
    let slot = unsafe { &*current.slot };
    // The poll that just ended: the counter is even now, one past the poll's.
    let poll = slot.poll.seq().wrapping_sub(1);
    slot.waits
        .end(poll, slot.spans.last_entered(poll).map(|e| (e.layer, e.id)));
}

/// The table whose address a thread's `Current::owner` holds, without the [`AFTER_PIN`] bit.
#[inline]
fn table_of(owner: usize) -> *const SlotTable {
    (owner & !AFTER_PIN) as *const SlotTable
}

/// Stops recording the polls after a pin: the thread's polls take the per-poll path again.
#[inline]
fn after_pin_done(current: Current) {
    current::set(Current {
        owner: current.owner & !AFTER_PIN,
        ..current
    });
}

/// The calling thread panics (called from pinwatch's panic hook, before the hook it chains):
/// if it is running a watched poll, marks that poll panicking from now, so that the watchdog
/// counts none of the time the panic hook takes, nor the thread's accounting meanwhile (read
/// from `/proc` here and as the hook returns: an open, a read and a close each, only for a
/// watched poll that panics); returns that poll's counter, for [`poll_panic_hook_returned`].
/// Locks nothing, allocates nothing, cannot panic; a thread without a slot, or between polls,
/// changes nothing.
pub(crate) fn poll_panics() -> Option<u64> {
    let current = current::get();
    if current.owner == 0 || current.slot.is_null() {
        return None;
    }
    // SAFETY: a nonzero `owner` is the address of the table holding the thread's slot, and
    // `slot` that slot, both kept alive by the thread's `Claim` (see `flagged_poll_ended`).
    let (table, slot) = unsafe { (&*table_of(current.owner), &*current.slot) };
    let seq = slot.poll.seq();
    if seq & 1 == 0 {
        return None;
    }
    // The clock first, the accounting after, and the other way round as the hook returns: the
    // wall time left out holds the accounting left out. A wait for a CPU between the two is
    // then left out of the wall time and not of the accounting: a wait of the poll's, which
    // counts for no pin. The other way round, it would count as time the poll was blocked.
    let nanos = table.nanos_since_base(Instant::now());
    slot.unwinding
        .mark(seq, nanos, super::slot::own_schedstat());
    Some(seq)
}

/// The panic hook that pinwatch's chains returned, on the thread whose poll `seq` panicked
/// ([`poll_panics`]): the unwinding begins, and the poll may catch it and go on; the watchdog
/// times it again from here, the hook's time and accounting left out. Locks nothing, allocates
/// nothing, cannot panic.
pub(crate) fn poll_panic_hook_returned(seq: u64) {
    let current = current::get();
    if current.owner == 0 || current.slot.is_null() {
        return;
    }
    // SAFETY: as in `poll_panics`: the thread's own slot and table, kept alive by its `Claim`.
    let (table, slot) = unsafe { (&*table_of(current.owner), &*current.slot) };
    // (The accounting first: see `poll_panics`.)
    let stat = super::slot::own_schedstat();
    slot.unwinding
        .resume(seq, table.nanos_since_base(Instant::now()), stat);
}

/// Rare path of [`begin_poll`]: claims a slot, then marks the poll. (`spawned_at` first: the
/// before-poll hook then loads both arguments straight into their registers.)
#[cold]
#[inline(never)]
fn claim_and_begin(table: &Arc<SlotTable>, spawned_at: usize, task_id: u64) {
    let key = SlotTable::key(table);
    let current = current::get();
    if current.owner == key | AFTER_PIN && !current.slot.is_null() {
        // SAFETY: `owner` is this table's key with the bit: `slot` is the thread's slot in it,
        // kept alive by its `Claim` (see `begin_poll`).
        let slot = unsafe { &*current.slot };
        slot.poll.begin(task_id, spawned_at, super::atomic::ticks);
        let room = slot.after_pin.record(Polled {
            task_id,
            spawned_at,
        });
        if !room {
            after_pin_done(current);
        }
        return;
    }
    if let Some(slot) = claim_slow(table, key) {
        slot.poll.begin(task_id, spawned_at, super::atomic::ticks);
    }
}

/// Whether `table` is the one this thread failed to claim a slot in last.
fn refused_by(table: &Arc<SlotTable>) -> bool {
    NO_SLOT_IN
        .try_with(|no| {
            let refused = no.take();
            let same = refused
                .as_ref()
                .is_some_and(|r| std::ptr::eq(r.as_ptr(), Arc::as_ptr(table)));
            no.set(refused);
            same
        })
        .unwrap_or(false)
}

fn claim_slow(table: &Arc<SlotTable>, key: usize) -> Option<&Slot> {
    if refused_by(table) {
        return None;
    }
    // A thread whose locals are being destroyed is exiting: leave it unwatched.
    if GUARD.try_with(|_| ()).is_err() {
        return None;
    }
    let index = match table.claim() {
        Some(i) => i,
        None => {
            let _ = NO_SLOT_IN.try_with(|no| no.set(Some(Arc::downgrade(table))));
            table.unwatched_threads.fetch_add(1, Ordering::Relaxed);
            return None;
        }
    };
    let slot: &Slot = &table.slots()[index];
    let claim = Claim {
        table: Arc::clone(table),
        index,
        exiting: true,
        claimed: slot.poll.seq(),
    };
    let stored = GUARD.try_with(|g| match g.try_borrow_mut() {
        Ok(mut g) => {
            // Dropping the previous claim (another table's) releases it and resets `Current`;
            // the thread goes on (helper-109: three system calls a switch between runtimes).
            let mut old = g.replace(claim);
            drop(g);
            if let Some(old) = old.as_mut() {
                old.exiting = false;
            }
            drop(old);
            current::set(Current {
                owner: key,
                cell: &slot.poll,
                slot,
            });
            true
        }
        Err(_) => false,
    });
    // Otherwise thread-local storage is being torn down: do not watch this thread.
    if stored != Ok(true) {
        return None;
    }
    // The watchdog may be waiting out a long gap (start stamps: up to one scan interval short
    // of the threshold, for polls of threads whose accounting it read before they began); this
    // thread's first poll has no such reading, and needs a look within a quarter of the
    // threshold. Once per claim: a thread's first poll or park on this runtime.
    table.parking.nudge();
    Some(slot)
}

/// The calling thread enters (`parked`) or leaves tokio's park on the runtime of `table` (`key`
/// is [`SlotTable::key`]): marks it in the thread's slot, claiming one on first use (a worker
/// that has polled nothing yet has none), so that the watchdog knows which workers sit in the
/// park while a pin runs. Once per park and unpark, not per poll: a thread-local load and a
/// store.
#[inline]
pub(crate) fn mark_parked(table: &Arc<SlotTable>, key: usize, parked: bool) {
    let current = current::get();
    let slot = if current.owner & !AFTER_PIN == key && !current.slot.is_null() {
        if current.owner != key {
            // The worker runs out of tasks: what waited behind the pin has run.
            after_pin_done(current);
        }
        // SAFETY: `owner == key` (with or without the bit) means `slot` is the thread's slot in
        // the table at `key`, which its `Claim` keeps alive (see `begin_poll`).
        unsafe { &*current.slot }
    } else {
        match claim_slow(table, key) {
            Some(slot) => slot,
            None => return,
        }
    };
    slot.parked.store(parked, Ordering::Relaxed);
    // How long it parks, by the time-stamp counter (a few cycles; 0 where there is none): the
    // park's ticks are added as it ends, and then its start cleared. A reader that finds the
    // same start on both sides of its load of the sum takes that park as not in it; if its
    // loads fell between the two stores the park is in the sum and counted twice, which only
    // makes the parks after the reading look shorter than they were.
    if parked {
        slot.park_since
            .store(super::atomic::ticks().max(1), Ordering::Release);
    } else {
        let since = slot.park_since.load(Ordering::Relaxed);
        if since != 0 {
            let sum = slot.parked_ticks.load(Ordering::Relaxed);
            let spent = super::atomic::ticks().saturating_sub(since);
            slot.parked_ticks
                .store(sum.wrapping_add(spent), Ordering::Release);
            slot.park_since.store(0, Ordering::Release);
        }
    }
}

/// The calling thread's slot, whatever table it belongs to: for the instrumented locks and the
/// signal handler. A plain thread-local read, async-signal-safe.
#[inline]
pub(crate) fn current_slot_any() -> *const Slot {
    current::slot()
}
