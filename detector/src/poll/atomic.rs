//! The atomics the poll protocol uses, and the two sides of an asymmetric fence.
//!
//! [`protocol`](super::protocol) names its atomics through this module so that the loom model
//! (`detector/tests/loom_poll.rs`) can compile the same file against loom's atomics, where both
//! fences are modelled as `fence(SeqCst)`.
//!
//! The store-buffering pair of the protocol — the worker stores the end of a poll and then loads
//! the flag, the watchdog stores the flag and then loads the poll counter — needs a full fence on
//! both sides, or each side can miss the other's store. A full fence on the worker would cost
//! every poll; instead the worker issues only a compiler fence ([`light_fence`]) and the watchdog,
//! on its rare flagging path, issues `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`
//! ([`heavy_fence`]), which makes every running thread of the process execute a full barrier.

pub(crate) use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};

use std::sync::atomic::{compiler_fence, AtomicU8};

/// Makes the `fn` it wraps a `const fn`: std's atomics have `const` constructors (the loom
/// model's version of this macro leaves the `fn` as it is: loom's have none).
macro_rules! const_with_std {
    ($(#[$m:meta])* $v:vis fn $($rest:tt)*) => {
        $(#[$m])* $v const fn $($rest)*
    };
}
pub(crate) use const_with_std;

/// The worker's side: keeps the compiler from reordering; the CPU is fenced by [`heavy_fence`].
#[inline(always)]
pub(crate) fn light_fence() {
    compiler_fence(Ordering::SeqCst);
}

/// Whether [`ticks`] reads a clock here: the CPU's time-stamp counter, on x86-64.
pub(crate) const TICKS: bool = cfg!(target_arch = "x86_64");

/// The CPU's time-stamp counter (`rdtsc`): no system call, a few cycles, and the same on every
/// core where the kernel uses it as its own clock (`/sys/devices/system/clocksource`). 0 where
/// there is none ([`TICKS`]).
#[inline(always)]
pub(crate) fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` reads the time-stamp counter into registers; it touches no memory
        // and every x86-64 CPU has it.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

const UNKNOWN: u8 = 0;
const EXPEDITED: u8 = 1;
const UNAVAILABLE: u8 = 2;
static MEMBARRIER: AtomicU8 = AtomicU8::new(UNKNOWN);

// From linux/membarrier.h.
const MEMBARRIER_CMD_QUERY: libc::c_long = 0;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

fn membarrier(cmd: libc::c_long) -> libc::c_long {
    // SAFETY: membarrier takes two integer arguments and touches no memory of ours.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            cmd,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    }
}

/// Registers the process for expedited private membarriers (Linux ≥ 4.14). Called once when a
/// detector is built; returns whether the heavy fence is a real process-wide barrier.
pub(crate) fn register() -> bool {
    match MEMBARRIER.load(Ordering::Acquire) {
        EXPEDITED => return true,
        UNAVAILABLE => return false,
        _ => {}
    }
    let supported = membarrier(MEMBARRIER_CMD_QUERY);
    let ok = supported >= 0
        && supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED != 0
        && membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
    MEMBARRIER.store(if ok { EXPEDITED } else { UNAVAILABLE }, Ordering::Release);
    ok
}

/// The watchdog's side: a barrier on every running thread of the process. Without membarrier
/// (old kernels, some sandboxes) it is a plain `fence(SeqCst)`, and the rare store-buffering miss
/// it leaves costs precision only: the end of that poll is then bounded by the next scan.
pub(crate) fn heavy_fence() {
    if MEMBARRIER.load(Ordering::Relaxed) != EXPEDITED
        || membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0
    {
        fence(Ordering::SeqCst);
    }
}
