//! Drop-in instrumented locks: [`Mutex`] and [`RwLock`] wrap the std locks (same API, same
//! poisoning) and record, on the current worker's slot, which locks the worker holds and where
//! they were taken — the `<== monitors:1` of `jdk.tracePinnedThreads`. A worker pinned while it
//! holds one is reported with reason `lock_held`; a worker waiting for one is `lock_wait`, with
//! the holder named.
//!
//! The cost over the std lock is a thread-local read and a few relaxed stores; on a thread that
//! is not a watched worker, just the thread-local read.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::panic::Location;
use std::sync::{LockResult, PoisonError, TryLockError, TryLockResult};

use crate::poll::claim::current_slot_any;
use crate::poll::slot::Slot;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    Mutex = 1,
    Read = 2,
    Write = 3,
}

/// The name of a lock kind as stored in a slot's lock table (`mutex`, `rwlock_read`,
/// `rwlock_write`).
pub(crate) fn kind_name(kind: u8) -> &'static str {
    match kind {
        1 => "mutex",
        2 => "rwlock_read",
        3 => "rwlock_write",
        _ => "lock",
    }
}

fn with_slot(f: impl FnOnce(&Slot)) {
    let p = current_slot_any();
    if !p.is_null() {
        // SAFETY: the pointer comes from this thread's live claim, which cannot end while this
        // thread runs this function.
        f(unsafe { &*p })
    }
}

fn note_acquired(lock: usize, kind: Kind, site: &'static Location<'static>) {
    with_slot(|s| s.locks.push(lock, kind as u8, site));
}

fn note_released(lock: usize, kind: Kind) {
    with_slot(|s| s.locks.remove(lock, kind as u8));
}

fn note_waiting(lock: usize) {
    with_slot(|s| s.locks.set_waiting(lock));
}

fn note_done_waiting() {
    with_slot(|s| s.locks.set_waiting(0));
}

fn map_result<G, H>(r: LockResult<G>, f: impl FnOnce(G) -> H) -> LockResult<H> {
    match r {
        Ok(g) => Ok(f(g)),
        Err(p) => Err(PoisonError::new(f(p.into_inner()))),
    }
}

/// Takes a lock through `try_lock` first; when that would block, records the wait (for
/// `lock_wait` and its holder) around `lock`. Records the acquisition and wraps the std guard.
fn acquire<G, H>(
    lock: usize,
    kind: Kind,
    site: &'static Location<'static>,
    try_lock: impl FnOnce() -> TryLockResult<G>,
    block: impl FnOnce() -> LockResult<G>,
    wrap: impl FnOnce(G) -> H,
) -> LockResult<H> {
    let r = match try_lock() {
        Ok(g) => Ok(g),
        Err(TryLockError::Poisoned(p)) => Err(p),
        Err(TryLockError::WouldBlock) => {
            note_waiting(lock);
            let r = block();
            note_done_waiting();
            r
        }
    };
    note_acquired(lock, kind, site);
    map_result(r, wrap)
}

/// `try_lock` that records the acquisition when it succeeds (poisoned or not).
fn try_acquire<G, H>(
    lock: usize,
    kind: Kind,
    site: &'static Location<'static>,
    try_lock: impl FnOnce() -> TryLockResult<G>,
    wrap: impl FnOnce(G) -> H,
) -> TryLockResult<H> {
    match try_lock() {
        Ok(g) => {
            note_acquired(lock, kind, site);
            Ok(wrap(g))
        }
        Err(TryLockError::Poisoned(p)) => {
            note_acquired(lock, kind, site);
            Err(TryLockError::Poisoned(PoisonError::new(wrap(
                p.into_inner(),
            ))))
        }
        Err(TryLockError::WouldBlock) => Err(TryLockError::WouldBlock),
    }
}

/// A `std::sync::Mutex` that tells pinwatch when it is held. Same API and poisoning.
#[derive(Default)]
pub struct Mutex<T: ?Sized> {
    inner: std::sync::Mutex<T>,
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl<T> Mutex<T> {
    /// A new unlocked mutex.
    pub const fn new(value: T) -> Mutex<T> {
        Mutex {
            inner: std::sync::Mutex::new(value),
        }
    }

    /// Consumes the mutex, returning the data.
    pub fn into_inner(self) -> LockResult<T> {
        self.inner.into_inner()
    }
}

impl<T: ?Sized> Mutex<T> {
    fn addr(&self) -> usize {
        self as *const Self as *const () as usize
    }

    /// Like [`std::sync::Mutex::lock`]; records the caller as the acquisition site.
    #[track_caller]
    pub fn lock(&self) -> LockResult<MutexGuard<'_, T>> {
        let lock = self.addr();
        acquire(
            lock,
            Kind::Mutex,
            Location::caller(),
            || self.inner.try_lock(),
            || self.inner.lock(),
            |inner| MutexGuard { inner, lock },
        )
    }

    /// Like [`std::sync::Mutex::try_lock`].
    #[track_caller]
    pub fn try_lock(&self) -> TryLockResult<MutexGuard<'_, T>> {
        let lock = self.addr();
        try_acquire(
            lock,
            Kind::Mutex,
            Location::caller(),
            || self.inner.try_lock(),
            |inner| MutexGuard { inner, lock },
        )
    }

    /// Like [`std::sync::Mutex::is_poisoned`].
    pub fn is_poisoned(&self) -> bool {
        self.inner.is_poisoned()
    }

    /// Like [`std::sync::Mutex::clear_poison`].
    pub fn clear_poison(&self) {
        self.inner.clear_poison()
    }

    /// Like [`std::sync::Mutex::get_mut`].
    pub fn get_mut(&mut self) -> LockResult<&mut T> {
        self.inner.get_mut()
    }
}

/// Guard of a [`Mutex`]; releasing it tells pinwatch.
pub struct MutexGuard<'a, T: ?Sized + 'a> {
    inner: std::sync::MutexGuard<'a, T>,
    lock: usize,
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        note_released(self.lock, Kind::Mutex);
    }
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

/// A `std::sync::RwLock` that tells pinwatch when it is held. Same API and poisoning.
#[derive(Default)]
pub struct RwLock<T: ?Sized> {
    inner: std::sync::RwLock<T>,
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl<T> RwLock<T> {
    /// A new unlocked lock.
    pub const fn new(value: T) -> RwLock<T> {
        RwLock {
            inner: std::sync::RwLock::new(value),
        }
    }

    /// Consumes the lock, returning the data.
    pub fn into_inner(self) -> LockResult<T> {
        self.inner.into_inner()
    }
}

impl<T: ?Sized> RwLock<T> {
    fn addr(&self) -> usize {
        self as *const Self as *const () as usize
    }

    /// Like [`std::sync::RwLock::read`].
    #[track_caller]
    pub fn read(&self) -> LockResult<RwLockReadGuard<'_, T>> {
        let lock = self.addr();
        acquire(
            lock,
            Kind::Read,
            Location::caller(),
            || self.inner.try_read(),
            || self.inner.read(),
            |inner| RwLockReadGuard { inner, lock },
        )
    }

    /// Like [`std::sync::RwLock::write`].
    #[track_caller]
    pub fn write(&self) -> LockResult<RwLockWriteGuard<'_, T>> {
        let lock = self.addr();
        acquire(
            lock,
            Kind::Write,
            Location::caller(),
            || self.inner.try_write(),
            || self.inner.write(),
            |inner| RwLockWriteGuard { inner, lock },
        )
    }

    /// Like [`std::sync::RwLock::try_read`].
    #[track_caller]
    pub fn try_read(&self) -> TryLockResult<RwLockReadGuard<'_, T>> {
        let lock = self.addr();
        try_acquire(
            lock,
            Kind::Read,
            Location::caller(),
            || self.inner.try_read(),
            |inner| RwLockReadGuard { inner, lock },
        )
    }

    /// Like [`std::sync::RwLock::try_write`].
    #[track_caller]
    pub fn try_write(&self) -> TryLockResult<RwLockWriteGuard<'_, T>> {
        let lock = self.addr();
        try_acquire(
            lock,
            Kind::Write,
            Location::caller(),
            || self.inner.try_write(),
            |inner| RwLockWriteGuard { inner, lock },
        )
    }

    /// Like [`std::sync::RwLock::is_poisoned`].
    pub fn is_poisoned(&self) -> bool {
        self.inner.is_poisoned()
    }

    /// Like [`std::sync::RwLock::get_mut`].
    pub fn get_mut(&mut self) -> LockResult<&mut T> {
        self.inner.get_mut()
    }
}

/// Read guard of a [`RwLock`].
pub struct RwLockReadGuard<'a, T: ?Sized + 'a> {
    inner: std::sync::RwLockReadGuard<'a, T>,
    lock: usize,
}

impl<T: ?Sized> Drop for RwLockReadGuard<'_, T> {
    fn drop(&mut self) {
        note_released(self.lock, Kind::Read);
    }
}

impl<T: ?Sized> Deref for RwLockReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

/// Write guard of a [`RwLock`].
pub struct RwLockWriteGuard<'a, T: ?Sized + 'a> {
    inner: std::sync::RwLockWriteGuard<'a, T>,
    lock: usize,
}

impl<T: ?Sized> Drop for RwLockWriteGuard<'_, T> {
    fn drop(&mut self) {
        note_released(self.lock, Kind::Write);
    }
}

impl<T: ?Sized> Deref for RwLockWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T: ?Sized> DerefMut for RwLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_like_std() {
        let m = Mutex::new(1);
        *m.lock().unwrap() += 1;
        assert!(m.try_lock().is_ok());
        {
            let _g = m.lock().unwrap();
            assert!(matches!(m.try_lock(), Err(TryLockError::WouldBlock)));
        }
        let r = std::panic::catch_unwind(|| {
            let _g = m.lock().unwrap();
            panic!("poison it");
        });
        assert!(r.is_err());
        assert!(m.is_poisoned());
        assert_eq!(*m.lock().unwrap_err().into_inner(), 2);
        m.clear_poison();
        assert_eq!(m.into_inner().unwrap(), 2);

        let l = RwLock::new(5);
        {
            let a = l.read().unwrap();
            let b = l.read().unwrap();
            assert_eq!(*a + *b, 10);
            assert!(matches!(l.try_write(), Err(TryLockError::WouldBlock)));
        }
        *l.write().unwrap() = 6;
        assert_eq!(*l.try_read().unwrap(), 6);
    }

    #[test]
    fn held_locks_are_recorded_on_the_slot() {
        let held = crate::poll::locks::LockTable::new();
        let site = Location::caller();
        held.push(10, Kind::Mutex as u8, site);
        held.push(20, Kind::Read as u8, site);
        held.push(20, Kind::Read as u8, site);
        let snapshot = |t: &crate::poll::locks::LockTable| {
            let mut v = Vec::new();
            t.for_each(|e| v.push(e));
            v
        };
        assert_eq!(snapshot(&held).len(), 3);
        held.remove(20, Kind::Read as u8);
        held.remove(10, Kind::Mutex as u8);
        let left = snapshot(&held);
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].lock, 20);
        assert_eq!(kind_name(left[0].kind), "rwlock_read");
    }
}
