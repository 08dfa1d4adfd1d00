//! The tokio hooks: the per-poll path.
//!
//! Before a poll: a thread-local load, two relaxed stores and a release store. After a poll: a
//! release store and a relaxed load; only when the watchdog has flagged the poll as pinned does
//! it read the clock. No allocation, no lock, no system call, nothing that can panic — proven by
//! the `hot_path` test with a counting allocator.

use std::hash::{Hash, Hasher};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tokio::runtime::TaskMeta;

use crate::runtime::Shared;
use crate::slot::current_slot;

/// Installs the poll hooks on `builder`. Replaces any poll hooks set before.
pub(crate) fn install(builder: &mut tokio::runtime::Builder, shared: &Arc<Shared>) {
    let before = Arc::clone(shared);
    let after = Arc::clone(shared);
    builder
        .on_before_task_poll(move |meta| before_poll(&before, meta))
        .on_after_task_poll(move |meta| after_poll(&after, meta));
}

#[inline]
fn before_poll(shared: &Arc<Shared>, meta: &TaskMeta<'_>) {
    if let Some(slot) = current_slot(shared) {
        slot.begin_poll(task_id_u64(meta.id()), meta.spawned_at());
    }
}

#[inline]
fn after_poll(shared: &Arc<Shared>, _meta: &TaskMeta<'_>) {
    if let Some(slot) = current_slot(shared) {
        if let Some(seq) = slot.end_poll() {
            pinned_poll_ended(shared, slot, seq);
        }
    }
}

/// Rare path: the poll that just returned was reported as pinned; record its exact end.
#[cold]
#[inline(never)]
fn pinned_poll_ended(shared: &Shared, slot: &crate::slot::Slot, seq: u64) {
    let end = shared.slots.nanos_since_base(Instant::now());
    slot.end_nanos.store(end, Ordering::Relaxed);
    slot.ended_seq.store(seq, Ordering::Release);
}

/// tokio's task `Id` as a number, without formatting: `Id` hashes as its inner `u64`.
#[inline]
pub(crate) fn task_id_u64(id: tokio::task::Id) -> u64 {
    struct Capture(u64);
    impl Hasher for Capture {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for &b in bytes {
                self.0 = (self.0 << 8) | u64::from(b);
            }
        }
        fn write_u64(&mut self, n: u64) {
            self.0 = n;
        }
    }
    let mut h = Capture(0);
    id.hash(&mut h);
    h.0
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn task_id_matches_display() {
        let id = tokio::spawn(async { tokio::task::id() }).await.unwrap();
        assert_eq!(super::task_id_u64(id).to_string(), id.to_string());
    }
}
