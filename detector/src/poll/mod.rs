//! The per-poll side: tokio's poll hooks and the per-thread slots they write. Nothing in this
//! module allocates, locks or makes a system call on the per-poll path; it depends on no other
//! module of the crate (the `layout` test checks both).

mod atomic;
pub(crate) mod claim;
mod current;
mod hooks;
pub(crate) mod locks;
pub(crate) mod park;
pub(crate) mod protocol;
pub(crate) mod sample;
pub(crate) mod slot;
pub(crate) mod span_stack;
pub(crate) mod waits;

pub(crate) use atomic::register as register_membarrier;
pub(crate) use atomic::{ticks, TICKS};
pub use hooks::PollHooks;
pub(crate) use hooks::WatchBody;

/// The task id a watched `block_on` body's polls carry in their slot (tokio's ids start at 1).
pub(crate) const BODY_TASK_ID: u64 = 0;

use std::hash::{Hash, Hasher};

/// An id that hashes as one `u64` (tokio's task `Id`, std's `ThreadId`) as that number, without
/// formatting or allocating.
#[inline(always)]
pub(crate) fn id_u64<T: Hash>(id: &T) -> u64 {
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
        assert_eq!(super::id_u64(&id).to_string(), id.to_string());
    }

    #[test]
    fn thread_ids_differ() {
        let a = super::id_u64(&std::thread::current().id());
        let b = std::thread::spawn(|| super::id_u64(&std::thread::current().id()))
            .join()
            .unwrap();
        assert_ne!(a, b);
        assert_ne!(a, 0);
    }
}
