//! Per-thread slots: what a worker publishes about its current poll, and what the watchdog reads.
//!
//! Each thread that polls tasks claims one slot from a table preallocated when the runtime is
//! built, the first time it polls (a CAS over the table; no allocation). Afterwards the per-poll
//! path only touches its own slot: a few relaxed stores, no clock read. The slot's `seq` is a
//! poll counter, odd while a poll runs — like Go's per-P `schedtick`, it lets the watchdog tell
//! "the same poll is still running" from "another poll started" without the worker ever reading
//! a clock.

use std::cell::{Cell, RefCell};
use std::panic::Location;
use std::ptr;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Instant;

use crate::runtime::Shared;

const FREE: u8 = 0;
const CLAIMING: u8 = 1;
const ACTIVE: u8 = 2;

/// No poll of this slot is flagged as pinned.
pub(crate) const NOT_FLAGGED: u64 = u64::MAX;

/// What the watchdog knows about the thread that owns a slot. Written once at claim time.
#[derive(Clone, Debug, Default)]
pub(crate) struct ThreadInfo {
    pub thread_id: Option<ThreadId>,
    pub name: String,
}

/// One thread's poll state. Aligned to 128 bytes so that two workers' slots never share a cache
/// line (or an adjacent-line prefetch pair): unpadded slots measured 2× slower here.
#[repr(align(128))]
pub(crate) struct Slot {
    // --- written by the owning thread on every poll ---
    /// Poll counter: odd while a poll runs.
    pub seq: AtomicU64,
    /// tokio task id of the current poll.
    pub task_id: AtomicU64,
    /// `TaskMeta::spawned_at` of the current poll.
    pub spawned_at: AtomicPtr<Location<'static>>,
    // --- rare path ---
    /// The `seq` the watchdog flagged as pinned, or [`NOT_FLAGGED`].
    pub flagged: AtomicU64,
    /// The `seq` whose end time `end_nanos` holds.
    pub ended_seq: AtomicU64,
    /// When the flagged poll returned, in ns since [`SlotTable::base`].
    pub end_nanos: AtomicU64,
    /// FREE, CLAIMING or ACTIVE.
    state: AtomicU8,
    /// Bumped at each claim, so the watchdog can tell a new owner from the old one.
    pub generation: AtomicUsize,
    /// Linux thread id of the owner.
    pub tid: AtomicI32,
    /// Owner's name and `ThreadId`, set at claim time; only the claim and the watchdog's rare
    /// path lock it.
    pub info: Mutex<ThreadInfo>,
    /// Instrumented locks the owner holds ([`crate::sync`]).
    pub locks: crate::sync::HeldLocks,
    /// Where the signal handler leaves a stack sample ([`crate::stack`]).
    pub sample: crate::stack::SampleBuf,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            seq: AtomicU64::new(0),
            task_id: AtomicU64::new(0),
            spawned_at: AtomicPtr::new(ptr::null_mut()),
            flagged: AtomicU64::new(NOT_FLAGGED),
            ended_seq: AtomicU64::new(NOT_FLAGGED),
            end_nanos: AtomicU64::new(0),
            state: AtomicU8::new(FREE),
            generation: AtomicUsize::new(0),
            tid: AtomicI32::new(0),
            info: Mutex::new(ThreadInfo::default()),
            locks: crate::sync::HeldLocks::new(),
            sample: crate::stack::SampleBuf::new(),
        }
    }

    /// Whether a thread owns this slot.
    pub fn is_active(&self) -> bool {
        self.state.load(Ordering::Acquire) == ACTIVE
    }

    /// Marks the start of a poll. Called by the owner only.
    #[inline]
    pub fn begin_poll(&self, task_id: u64, spawned_at: &'static Location<'static>) {
        self.task_id.store(task_id, Ordering::Relaxed);
        self.spawned_at
            .store(spawned_at as *const _ as *mut _, Ordering::Relaxed);
        let seq = self.seq.load(Ordering::Relaxed);
        // Release: the watchdog that sees the odd seq sees the task id and location stored above.
        self.seq.store(seq | 1, Ordering::Release);
    }

    /// Marks the end of a poll; returns the seq of the poll that ended when the watchdog had
    /// flagged it as pinned. Called by the owner only.
    #[inline]
    pub fn end_poll(&self) -> Option<u64> {
        let seq = self.seq.load(Ordering::Relaxed);
        if seq & 1 == 0 {
            // Not in a poll (the slot was claimed in the middle of one): nothing to end.
            return None;
        }
        self.seq.store(seq + 1, Ordering::Release);
        (self.flagged.load(Ordering::Relaxed) == seq).then_some(seq)
    }
}

/// The preallocated slots of one runtime.
pub(crate) struct SlotTable {
    slots: Box<[Slot]>,
    /// Time origin for `end_nanos`.
    pub base: Instant,
}

impl SlotTable {
    pub fn new(capacity: usize) -> SlotTable {
        SlotTable {
            slots: (0..capacity.max(1)).map(|_| Slot::new()).collect(),
            base: Instant::now(),
        }
    }

    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    pub fn nanos_since_base(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.base).as_nanos() as u64
    }

    /// Claims a free slot for the calling thread. Rare path: once per thread.
    fn claim(&self) -> Option<usize> {
        for (i, s) in self.slots.iter().enumerate() {
            if s.state
                .compare_exchange(FREE, CLAIMING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                s.generation.fetch_add(1, Ordering::Relaxed);
                s.seq.store(0, Ordering::Relaxed);
                s.flagged.store(NOT_FLAGGED, Ordering::Relaxed);
                s.ended_seq.store(NOT_FLAGGED, Ordering::Relaxed);
                s.tid.store(current_tid(), Ordering::Relaxed);
                s.locks.clear();
                // `thread::current()` panics once the thread's locals are gone; `claim_slow`
                // checks they are not, and a hook must not panic whatever happens.
                let current = std::panic::catch_unwind(std::thread::current).ok();
                if let Ok(mut info) = s.info.lock() {
                    info.thread_id = current.as_ref().map(|t| t.id());
                    info.name.clear();
                    info.name.push_str(
                        current
                            .as_ref()
                            .and_then(|t| t.name())
                            .unwrap_or("<unnamed>"),
                    );
                }
                s.state.store(ACTIVE, Ordering::Release);
                return Some(i);
            }
        }
        None
    }

    fn release(&self, index: usize) {
        if let Some(s) = self.slots.get(index) {
            let seq = s.seq.load(Ordering::Relaxed);
            s.seq.store((seq + 1) & !1, Ordering::Release);
            s.state.store(FREE, Ordering::Release);
        }
    }
}

/// The Linux thread id of the calling thread.
pub(crate) fn current_tid() -> i32 {
    // SAFETY: gettid takes no arguments, cannot fail and touches no memory.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// Releases the thread's slot when the thread exits (or claims a slot in another runtime).
struct Claim {
    shared: Arc<Shared>,
    index: usize,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let _ = CURRENT.try_with(|c| c.set((0, ptr::null())));
        self.shared.slots.release(self.index);
    }
}

thread_local! {
    /// Which runtime (its `Shared` address) and which slot the calling thread has.
    /// Const-initialised and without a destructor, so reading it on the hot path is a plain
    /// thread-local load (and is async-signal-safe).
    static CURRENT: Cell<(usize, *const Slot)> = const { Cell::new((0, ptr::null())) };
    /// The runtime this thread failed to claim a slot in (table full), so that it is not retried
    /// on every poll.
    static NO_SLOT_IN: Cell<usize> = const { Cell::new(0) };
    /// Keeps the claim alive, and releases it at thread exit.
    static GUARD: RefCell<Option<Claim>> = const { RefCell::new(None) };
}

/// The calling thread's slot in `shared`'s table, claiming one on first use. `None` when the
/// table is full (counted) or the thread is exiting.
#[inline]
pub(crate) fn current_slot(shared: &Arc<Shared>) -> Option<&Slot> {
    let key = Arc::as_ptr(shared) as usize;
    let (owner, p) = CURRENT.get();
    if owner == key && !p.is_null() {
        // SAFETY: `CURRENT` points into the table of the `Shared` at `key`, which the thread's
        // `Claim` keeps alive (it holds an `Arc`); `Claim::drop` nulls `CURRENT` before letting
        // go of it. The caller holds another `Arc` to the same `Shared`, so the returned borrow
        // cannot outlive the table.
        return Some(unsafe { &*p });
    }
    claim_slow(shared, key)
}

#[cold]
#[inline(never)]
fn claim_slow(shared: &Arc<Shared>, key: usize) -> Option<&Slot> {
    if NO_SLOT_IN.get() == key {
        return None;
    }
    // A thread whose locals are being destroyed is exiting: leave it unwatched.
    if GUARD.try_with(|_| ()).is_err() {
        return None;
    }
    let index = match shared.slots.claim() {
        Some(i) => i,
        None => {
            NO_SLOT_IN.set(key);
            shared
                .stats
                .unwatched_threads
                .fetch_add(1, Ordering::Relaxed);
            return None;
        }
    };
    let claim = Claim {
        shared: Arc::clone(shared),
        index,
    };
    let slot: *const Slot = &shared.slots.slots()[index];
    let stored = GUARD.try_with(|g| match g.try_borrow_mut() {
        Ok(mut g) => {
            // Dropping the previous claim (another runtime's) releases it and nulls CURRENT.
            let old = g.replace(claim);
            drop(g);
            drop(old);
            CURRENT.set((key, slot));
            true
        }
        Err(_) => false,
    });
    if stored == Ok(true) {
        // SAFETY: as in `current_slot`: the slot lives in `shared`'s table.
        Some(unsafe { &*slot })
    } else {
        // Thread-local storage is being torn down: do not watch this thread.
        None
    }
}

/// The calling thread's slot, whatever runtime it belongs to: for the instrumented locks and the
/// signal handler. A plain thread-local read, async-signal-safe.
#[inline]
pub(crate) fn current_slot_any() -> *const Slot {
    CURRENT.try_with(|c| c.get().1).unwrap_or(ptr::null())
}
