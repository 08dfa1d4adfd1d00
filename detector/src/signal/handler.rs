//! The signal handler: async-signal-safe code only (the `layout` test keeps allocation, locks
//! and panicking macros out of this file).

use std::sync::atomic::Ordering;

use super::{DONE, REQUESTED, WRITING};
use crate::poll::claim::current_slot_any;
use crate::poll::sample::{SampleArea, MAX_FRAMES};
use crate::poll::slot::Slot;

/// The signal handler. Async-signal-safe: it reads a const thread-local, does atomic operations
/// on memory that lives as long as the thread's slot claim, reads the monotonic clock, and runs
/// the unwinder, which neither allocates nor locks where [`unwinder_is_signal_safe`] holds (the
/// handler is installed only there). It never blocks.
pub(super) extern "C" fn handler(
    _sig: libc::c_int,
    _info: *mut libc::siginfo_t,
    ctx: *mut libc::c_void,
) {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    let errno = unsafe { *libc::__errno_location() };
    let slot = current_slot_any();
    if !slot.is_null() {
        // SAFETY: `current_slot_any` returns a slot that the thread's claim keeps alive; the
        // claim cannot be dropped while this handler runs on the same thread.
        let slot: &Slot = unsafe { &*slot };
        let buf = &slot.sample;
        if buf
            .state
            .compare_exchange(REQUESTED, WRITING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            let began = monotonic_nanos();
            // The poll this stack belongs to: read on the owning thread, so exact.
            buf.seq.store(slot.poll.seq(), Ordering::Relaxed);
            let n = unwind_into(buf, interrupted_pc(ctx));
            buf.len.store(n, Ordering::Relaxed);
            buf.handler_nanos
                .store(monotonic_nanos().saturating_sub(began), Ordering::Relaxed);
            buf.state.store(DONE, Ordering::Release);
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Copies this thread's frames, from the interrupted instruction `pc` outwards, into `buf`.
fn unwind_into(buf: &SampleArea, pc: Option<usize>) -> usize {
    let mut n = 0usize;
    let mut seen_pc = pc.is_none();
    // SAFETY: unwinding this thread's own stack from its own signal handler; nothing else
    // unwinds it at the same time (the state CAS admits one sample).
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            let ip = frame.ip() as usize;
            // Skip the handler's own frames and the signal trampoline.
            if !seen_pc {
                if Some(ip) == pc {
                    seen_pc = true;
                } else {
                    return true;
                }
            }
            buf.ips[n].store(ip, Ordering::Relaxed);
            n += 1;
            n < MAX_FRAMES
        });
    }
    n
}

/// CLOCK_MONOTONIC in ns; `clock_gettime` is async-signal-safe.
fn monotonic_nanos() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// The program counter the signal interrupted, from the `ucontext_t`.
fn interrupted_pc(ctx: *mut libc::c_void) -> Option<usize> {
    if ctx.is_null() {
        return None;
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        // SAFETY: with SA_SIGINFO the third argument is a valid `ucontext_t`.
        let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
        Some(uc.uc_mcontext.gregs[libc::REG_RIP as usize] as usize)
    }
    #[cfg(all(target_os = "linux", target_arch = "aarch64"))]
    {
        // SAFETY: with SA_SIGINFO the third argument is a valid `ucontext_t`.
        let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
        Some(uc.uc_mcontext.pc as usize)
    }
    #[cfg(not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    {
        None
    }
}
