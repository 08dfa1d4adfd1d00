//! The signal handlers — the sampling signal's and the exit signals' (SIGTERM, SIGINT, for
//! `PINWATCH_DUMP_ON_EXIT`): async-signal-safe code only (the `layout` test keeps allocation,
//! locks and panicking macros out of this file).

use std::sync::atomic::{AtomicI32, Ordering};

use super::{DONE, REQUESTED, WRITING};
use crate::poll::claim::current_slot_any;
use crate::poll::sample::{SampleArea, MAX_FRAMES};
use crate::poll::slot::Slot;

/// The signal handler. Async-signal-safe: it reads a const thread-local, does atomic operations
/// on memory that lives as long as the thread's slot claim, reads the monotonic clock, runs the
/// unwinder, which neither allocates nor locks where [`unwinder_is_signal_safe_here`] holds
/// (the handler is installed only there), and wakes the watchdog's futex. It never blocks.
///
/// [`unwinder_is_signal_safe_here`]: super::unwinder_is_signal_safe_here
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
            answer(buf);
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Publishes the sample written in `buf`, and wakes the watchdog if it waits for it (its futex
/// wait on the state word, [`super::request`]): one system call, async-signal-safe.
pub(super) fn answer(buf: &SampleArea) {
    buf.state.store(DONE, Ordering::Release);
    // SAFETY: FUTEX_WAKE wakes at most one thread waiting on the aligned 32-bit word behind
    // `state` (live as long as the slot table); it reads and writes no memory of ours.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            buf.state.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        )
    };
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

/// The write end of the exit pipe, which the exit signals' thread reads (`-1`: not made yet).
pub(super) static EXIT_PIPE: AtomicI32 = AtomicI32::new(-1);
/// The process the exit handler was installed in: a child forked without `exec` inherits the
/// handler and the pipe, which leads to its parent's thread.
pub(super) static EXIT_PID: AtomicI32 = AtomicI32::new(0);
/// The exit signal whose dump is being written (0: none).
pub(super) static EXIT_PENDING: AtomicI32 = AtomicI32::new(0);

/// Whether the action `installed` (a `sa_sigaction` value) is [`exit_handler`].
pub(super) fn is_exit_handler(installed: usize) -> bool {
    installed == exit_handler as *const () as usize
}

/// The handler of SIGTERM and SIGINT while pinwatch holds them (`PINWATCH_DUMP_ON_EXIT`).
/// Async-signal-safe: atomics, `getpid`, `write` to a non-blocking pipe, `sigaction` and
/// `raise`; it never blocks. The first signal writes its number to the exit pipe, which wakes
/// the exit signals' thread to write the dumps. A signal that comes while a dump is being written
/// (or in a forked child, which has no such thread) ends the process as the default action
/// would, while this handler is the installed one: the user can always stop it. Called by a
/// handler installed after it (tokio's, through `signal-hook-registry`, calls the one before
/// it), it does nothing more than wake the thread: whoever installed that handler decides.
pub(super) extern "C" fn exit_handler(
    sig: libc::c_int,
    _info: *mut libc::siginfo_t,
    _ctx: *mut libc::c_void,
) {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: getpid has no preconditions and is async-signal-safe.
    let here = unsafe { libc::getpid() } == EXIT_PID.load(Ordering::Relaxed);
    let woke = here
        && EXIT_PENDING
            .compare_exchange(0, sig, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        && wake(sig);
    if !woke && is_exit_handler(installed(sig)) {
        default_and_raise(sig);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Writes `sig` to the exit pipe; false when it could not be written.
fn wake(sig: libc::c_int) -> bool {
    let byte = sig as u8;
    let fd = EXIT_PIPE.load(Ordering::Acquire);
    // SAFETY: `fd` is the pipe's write end, open for the life of the process (non-blocking:
    // never waits); `byte` is one readable byte.
    let n = unsafe { libc::write(fd, &byte as *const u8 as *const libc::c_void, 1) };
    if n != 1 {
        EXIT_PENDING.store(0, Ordering::Release);
    }
    n == 1
}

/// The `sa_sigaction` installed for `sig` now (0, `SIG_DFL`, when it cannot be read).
pub(super) fn installed(sig: libc::c_int) -> usize {
    // SAFETY: a zeroed sigaction is plain data for the kernel to fill.
    let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: sigaction with a null new action only reads the current one; async-signal-safe.
    if unsafe { libc::sigaction(sig, std::ptr::null(), &mut now) } != 0 {
        return libc::SIG_DFL;
    }
    now.sa_sigaction
}

/// Puts `sig` back to its default action (what pinwatch found: it takes over only that) and
/// raises it on this thread. In a handler of `sig` the signal is blocked: it is delivered, and
/// ends the process, as the handler returns.
pub(super) fn default_and_raise(sig: libc::c_int) {
    // SAFETY: a zeroed sigaction is SIG_DFL (0) with no flags; its mask is emptied below.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = libc::SIG_DFL;
    // SAFETY: `action.sa_mask` is a valid sigset_t owned here; sigaction and raise are
    // async-signal-safe.
    unsafe {
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(sig, &action, std::ptr::null_mut());
        libc::raise(sig);
    }
}
