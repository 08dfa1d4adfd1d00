//! Where a thread's instrumented locks are noted ([`crate::sync`] writes, the watchdog reads).
//! Plain atomic storage: nothing here allocates or locks.

use std::panic::Location;
use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering};

/// How many held locks a slot records; more are not listed.
pub(crate) const MAX_HELD: usize = 8;

struct Entry {
    lock: AtomicUsize,
    kind: AtomicU8,
    site: AtomicPtr<Location<'static>>,
}

/// One held lock, as stored: the lock's address, its kind (see [`crate::sync`]) and where it
/// was taken.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeldEntry {
    pub lock: usize,
    pub kind: u8,
    pub site: &'static Location<'static>,
}

/// The locks a slot's thread holds, and the one it waits for. Written by that thread only.
pub(crate) struct LockTable {
    entries: [Entry; MAX_HELD],
    waiting: AtomicUsize,
}

impl LockTable {
    pub(crate) fn new() -> LockTable {
        LockTable {
            entries: [const {
                Entry {
                    lock: AtomicUsize::new(0),
                    kind: AtomicU8::new(0),
                    site: AtomicPtr::new(std::ptr::null_mut()),
                }
            }; MAX_HELD],
            waiting: AtomicUsize::new(0),
        }
    }

    pub(crate) fn clear(&self) {
        for e in &self.entries {
            e.lock.store(0, Ordering::Relaxed);
        }
        self.waiting.store(0, Ordering::Relaxed);
    }

    pub(crate) fn push(&self, lock: usize, kind: u8, site: &'static Location<'static>) {
        if let Some(e) = self
            .entries
            .iter()
            .find(|e| e.lock.load(Ordering::Relaxed) == 0)
        {
            e.kind.store(kind, Ordering::Relaxed);
            e.site.store(site as *const _ as *mut _, Ordering::Relaxed);
            // Release: a reader that sees the address sees kind and site.
            e.lock.store(lock, Ordering::Release);
        }
    }

    pub(crate) fn remove(&self, lock: usize, kind: u8) {
        // The latest matching entry (a read lock can be taken twice).
        if let Some(e) = self.entries.iter().rev().find(|e| {
            e.lock.load(Ordering::Relaxed) == lock && e.kind.load(Ordering::Relaxed) == kind
        }) {
            e.lock.store(0, Ordering::Release);
        }
    }

    pub(crate) fn set_waiting(&self, lock: usize) {
        self.waiting.store(lock, Ordering::Release);
    }

    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// Calls `f` with each held lock.
    pub(crate) fn for_each(&self, mut f: impl FnMut(HeldEntry)) {
        for e in &self.entries {
            let lock = e.lock.load(Ordering::Acquire);
            if lock == 0 {
                continue;
            }
            let site = e.site.load(Ordering::Relaxed);
            if site.is_null() {
                continue;
            }
            // SAFETY: stored from a `&'static Location<'static>` by `push`.
            let site = unsafe { &*site };
            f(HeldEntry {
                lock,
                kind: e.kind.load(Ordering::Relaxed),
                site,
            });
        }
    }
}
