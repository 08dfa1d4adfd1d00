//! Which of the runtime's workers a thread runs now, from tokio's runtime metrics.

use tokio::runtime::{Handle, RuntimeFlavor};

/// What a watched thread is to the runtime right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    /// It runs worker `i`.
    Worker(usize),
    /// It runs no worker: it handed its worker to another thread in
    /// `tokio::task::block_in_place` (tokio records the new owner only once that thread runs),
    /// or it waits for a current-thread runtime's core in its `block_on`.
    HandedOff,
}

/// `thread` is the thread's `ThreadId` as a number ([`crate::poll::id_u64`]), 0 if unknown.
pub(crate) fn owner(handle: &Handle, thread: u64) -> Owner {
    match handle.runtime_flavor() {
        RuntimeFlavor::MultiThread => {
            if thread == 0 {
                return Owner::HandedOff;
            }
            let metrics = handle.metrics();
            (0..metrics.num_workers())
                .find(|&i| {
                    metrics
                        .worker_thread_id(i)
                        .is_some_and(|t| crate::poll::id_u64(&t) == thread)
                })
                .map_or(Owner::HandedOff, Owner::Worker)
        }
        // A current-thread runtime's one worker is the thread holding its core: tokio records
        // it as worker 0's thread whenever a thread takes the core. Another thread in the
        // runtime's `block_on` meanwhile polls only its own future, waiting for the core: it
        // holds nothing (as a multi-thread runtime's `block_on` body), and the runtime runs on.
        _ => match handle.metrics().worker_thread_id(0) {
            Some(t) if crate::poll::id_u64(&t) != thread => Owner::HandedOff,
            _ => Owner::Worker(0),
        },
    }
}
