//! Where the signal handler leaves a stack sample ([`crate::signal`] holds the protocol).
//! Plain atomic storage, preallocated with the slot.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize};

/// The request state of an area with no request outstanding.
pub(crate) const IDLE: u32 = 0;

/// Most frames kept per sample.
pub(crate) const MAX_FRAMES: usize = 128;

/// A slot's sample buffer.
pub(crate) struct SampleArea {
    /// The request state (see [`crate::signal`]): a futex word, which the handler wakes once
    /// the sample is written.
    pub state: AtomicU32,
    /// Frames written.
    pub len: AtomicUsize,
    /// The poll counter when the handler ran: which poll the stack belongs to.
    pub seq: AtomicU64,
    /// How long the handler ran, in ns: the worker's stall for this sample.
    pub handler_nanos: AtomicU64,
    /// Instruction pointers, innermost first.
    pub ips: [AtomicUsize; MAX_FRAMES],
}

impl SampleArea {
    pub(crate) fn new() -> SampleArea {
        SampleArea {
            state: AtomicU32::new(IDLE),
            len: AtomicUsize::new(0),
            seq: AtomicU64::new(0),
            handler_nanos: AtomicU64::new(0),
            ips: [const { AtomicUsize::new(0) }; MAX_FRAMES],
        }
    }
}
