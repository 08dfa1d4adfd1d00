//! Stack samples of a pinned worker.
//!
//! The watchdog sends the stuck thread a signal ([`sample_signal`]). The handler finds the
//! thread's slot through a const thread-local, claims the slot's preallocated buffer with one
//! compare-and-swap (if a sample is already in flight it returns at once), copies instruction
//! pointers into it with the unwinder, and publishes it. No allocation, no lock, `errno` saved
//! and restored. Symbols are resolved later, on the sink thread ([`Resolver`]).

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::slot::{current_slot_any, Slot};
use crate::Error;

/// Most frames kept per sample.
pub(crate) const MAX_FRAMES: usize = 128;

const IDLE: u8 = 0;
const REQUESTED: u8 = 1;
const WRITING: u8 = 2;
const DONE: u8 = 3;

/// The signal used to sample a worker's stack: `SIGRTMIN + 6` (a real-time signal nothing in
/// std or tokio uses). Handled with `SA_RESTART`, so interrupted system calls resume.
pub fn sample_signal() -> libc::c_int {
    libc::SIGRTMIN() + 6
}

/// A slot's sample buffer, written by the signal handler on the slot's thread and read by the
/// watchdog.
pub(crate) struct SampleBuf {
    state: AtomicU8,
    len: AtomicUsize,
    /// How long the handler ran for the last sample, in ns: the worker's stall per sample.
    handler_nanos: AtomicUsize,
    ips: [AtomicUsize; MAX_FRAMES],
}

impl SampleBuf {
    pub(crate) fn new() -> SampleBuf {
        SampleBuf {
            state: AtomicU8::new(IDLE),
            len: AtomicUsize::new(0),
            handler_nanos: AtomicUsize::new(0),
            ips: [const { AtomicUsize::new(0) }; MAX_FRAMES],
        }
    }
}

/// Installs the handler, once per process. Fails if another handler owns the signal.
pub(crate) fn install_handler() -> Result<(), Error> {
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            // Run the unwinder once outside a handler, so that anything it sets up lazily is set
            // up here and not inside the handler.
            // SAFETY: no other thread's stack is touched; the closure only counts.
            unsafe { backtrace::trace_unsynchronized(|_| true) };
            let sig = sample_signal();
            // SAFETY: `old` is plain data filled by the kernel; sigaction with a null new action
            // only reads the current one.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0 {
                return Err(std::io::Error::last_os_error().to_string());
            }
            if old.sa_sigaction != libc::SIG_DFL
                && old.sa_sigaction != handler as *const () as usize
            {
                return Err(format!(
                    "signal {sig} (SIGRTMIN+6) already has a handler; pinwatch samples stacks \
                     with it. Set PINWATCH_STACKS=off to run without stack samples"
                ));
            }
            // SAFETY: zeroed sigaction is a valid "no flags, empty mask" starting point.
            let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
            action.sa_sigaction = handler as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            // SAFETY: `action.sa_mask` is a valid sigset_t owned by us.
            unsafe { libc::sigemptyset(&mut action.sa_mask) };
            // SAFETY: `handler` is async-signal-safe (see its comment) and has the signature
            // SA_SIGINFO asks for.
            if unsafe { libc::sigaction(sig, &action, std::ptr::null_mut()) } != 0 {
                return Err(std::io::Error::last_os_error().to_string());
            }
            Ok(())
        })
        .clone()
        .map_err(|reason| Error::InvalidSetting {
            setting: "stacks",
            reason,
        })
}

/// The signal handler. Async-signal-safe: it reads a const thread-local, does atomic operations
/// on memory that lives as long as the thread's slot claim, and runs the unwinder, which on this
/// platform (glibc ≥ 2.35 `_dl_find_object`) neither allocates nor locks. It never blocks.
extern "C" fn handler(_sig: libc::c_int, _info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    let errno = unsafe { *libc::__errno_location() };
    let slot = current_slot_any();
    if !slot.is_null() {
        // SAFETY: `current_slot_any` returns a slot that the thread's claim keeps alive; the
        // claim cannot be dropped while this handler runs on the same thread.
        let buf = unsafe { &(*slot).sample };
        if buf
            .state
            .compare_exchange(REQUESTED, WRITING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            let began = monotonic_nanos();
            let pc = interrupted_pc(ctx);
            let mut n = 0usize;
            let mut seen_pc = pc.is_none();
            // SAFETY: unwinding this thread's own stack from its own signal handler; nothing
            // else unwinds it at the same time (the state CAS above admits one sample).
            unsafe {
                backtrace::trace_unsynchronized(|frame| {
                    let ip = frame.ip() as usize;
                    // Skip the handler's own frames and the signal trampoline: keep from the
                    // interrupted instruction on.
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
            buf.len.store(n, Ordering::Relaxed);
            buf.handler_nanos
                .store(monotonic_nanos().saturating_sub(began), Ordering::Relaxed);
            buf.state.store(DONE, Ordering::Release);
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// CLOCK_MONOTONIC in ns; `clock_gettime` is async-signal-safe.
fn monotonic_nanos() -> usize {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as usize)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as usize)
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

/// How long the watchdog waits for a sample before giving up on it.
const SAMPLE_WAIT: Duration = Duration::from_millis(50);

/// A stack sample and what it cost.
pub(crate) struct Sample {
    /// Instruction pointers, innermost first.
    pub ips: Vec<usize>,
    /// Time the worker spent in the handler.
    pub handler: Duration,
    /// From the signal sent to the sample read, as the watchdog saw it.
    pub round_trip: Duration,
}

/// Samples `slot`'s thread (Linux thread id `tid`). Called by the watchdog only. `None` if the
/// sample did not arrive in time.
pub(crate) fn sample(slot: &Slot, tid: i32) -> Option<Sample> {
    let buf = &slot.sample;
    // A sample that completed after an earlier give-up: discard it.
    let _ = buf
        .state
        .compare_exchange(DONE, IDLE, Ordering::Acquire, Ordering::Relaxed);
    if buf
        .state
        .compare_exchange(IDLE, REQUESTED, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        // The handler is still writing an earlier sample: never wait on it.
        return None;
    }
    // SAFETY: tgkill only sends a signal; a stale tid fails with ESRCH. The handler is installed
    // (build() installs it before the runtime exists when stacks are on).
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, sample_signal()) };
    if rc != 0 {
        let _ = buf
            .state
            .compare_exchange(REQUESTED, IDLE, Ordering::AcqRel, Ordering::Relaxed);
        return None;
    }
    let sent = Instant::now();
    let deadline = sent + SAMPLE_WAIT;
    loop {
        if buf.state.load(Ordering::Acquire) == DONE {
            let n = buf.len.load(Ordering::Relaxed).min(MAX_FRAMES);
            let ips = buf.ips[..n]
                .iter()
                .map(|ip| ip.load(Ordering::Relaxed))
                .collect();
            let handler = Duration::from_nanos(buf.handler_nanos.load(Ordering::Relaxed) as u64);
            buf.state.store(IDLE, Ordering::Release);
            return Some(Sample {
                ips,
                handler,
                round_trip: sent.elapsed(),
            });
        }
        if Instant::now() >= deadline {
            // Withdraw the request if the handler has not started; if it is writing, the next
            // sample discards what it leaves.
            let _ =
                buf.state
                    .compare_exchange(REQUESTED, IDLE, Ordering::AcqRel, Ordering::Relaxed);
            return None;
        }
        std::thread::sleep(Duration::from_micros(20));
    }
}

/// Turns instruction pointers into frames, remembering each address it has resolved. Runs on
/// the sink thread.
#[derive(Default)]
pub(crate) struct Resolver {
    cache: std::collections::HashMap<usize, Vec<crate::event::Frame>>,
}

impl Resolver {
    /// Frames for `ips`, innermost first. One address can give several frames (inlined calls).
    pub(crate) fn resolve(&mut self, ips: &[usize]) -> Vec<crate::event::Frame> {
        let mut out = Vec::with_capacity(ips.len());
        for (i, &ip) in ips.iter().enumerate() {
            // Return addresses point after the call; look up the call itself (the innermost
            // frame's address is where the thread was interrupted, exact).
            let lookup = if i == 0 { ip } else { ip.saturating_sub(1) };
            let frames = self.cache.entry(lookup).or_insert_with(|| {
                let mut frames = Vec::new();
                backtrace::resolve(lookup as *mut std::ffi::c_void, |sym| {
                    frames.push(crate::event::Frame {
                        function: sym.name().map(|n| format!("{n:#}")),
                        file: sym.filename().map(|f| f.display().to_string()),
                        line: sym.lineno(),
                        locks: 0,
                    });
                });
                if frames.is_empty() {
                    frames.push(crate::event::Frame::default());
                }
                frames
            });
            out.extend(frames.iter().cloned());
        }
        qualify_inlined(&mut out);
        out
    }
}

/// An inlined closure or async block is named by its debug info without a path
/// (`{async_block#1}`). The frames that poll it name its environment type with the full path
/// in their generic arguments (`…<app::handler::{async_block_env#1}, …>`): borrow that path.
fn qualify_inlined(frames: &mut [crate::event::Frame]) {
    const KINDS: [(&str, &str); 3] = [
        ("{async_block#", "{async_block_env#"),
        ("{closure#", "{closure_env#"),
        ("{async_fn#", "{async_fn_env#"),
    ];
    for i in 0..frames.len() {
        let Some(name) = frames[i].function.as_deref() else {
            continue;
        };
        let base = name.split('<').next().unwrap_or(name);
        let Some(env) = KINDS
            .iter()
            .find_map(|(kind, env)| base.strip_prefix(kind).map(|rest| format!("{env}{rest}")))
        else {
            continue;
        };
        if base.contains("::") {
            continue;
        }
        let base = base.to_owned();
        let path = frames[i + 1..].iter().find_map(|outer| {
            let outer = outer.function.as_deref()?;
            let pos = outer.find(&format!("::{env}"))?;
            let start = outer[..pos]
                .rfind(['<', ' ', ',', '(', '&', '['])
                .map_or(0, |p| p + 1);
            Some(outer[start..pos].to_owned())
        });
        if let Some(path) = path {
            frames[i].function = Some(format!("{path}::{base}"));
        }
    }
}

/// Marks, in `frames`, the frames that took the held locks (`<== locks:N`). A lock's frame is
/// the frame of its acquisition file that has run the fewest lines past the acquisition line:
/// the function that took the lock and is still inside the guard's scope.
pub(crate) fn mark_lock_frames(frames: &mut [crate::event::Frame], held: &[crate::sync::HeldRaw]) {
    for lock in held {
        let site = lock.site;
        let same_file = |f: &crate::event::Frame| {
            f.file
                .as_deref()
                .is_some_and(|file| file.ends_with(site.file()) || site.file().ends_with(file))
        };
        if let Some(f) = frames
            .iter_mut()
            .filter(|f| same_file(f) && f.line.is_some_and(|l| l >= site.line()))
            .min_by_key(|f| f.line.unwrap_or(u32::MAX) - site.line())
        {
            f.locks += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Frame;

    fn named(n: &str) -> Frame {
        Frame::named(n)
    }

    #[test]
    fn inlined_blocks_borrow_their_path() {
        let mut frames = vec![
            named("std::thread::sleep"),
            named("{async_block#1}"),
            named("{closure#0}<app::lock_sleep::{async_fn#0}::{closure#0}::{async_block_env#1}, alloc::sync::Arc<tokio::X>>"),
            named("{closure#1}"),
            named("call_once<app::lazy::{async_fn#0}::{closure_env#1}, ()>"),
            named("{async_block#7}"),
        ];
        qualify_inlined(&mut frames);
        let names: Vec<_> = frames.iter().map(|f| f.function.clone().unwrap()).collect();
        assert_eq!(
            names[1],
            "app::lock_sleep::{async_fn#0}::{closure#0}::{async_block#1}"
        );
        assert_eq!(names[3], "app::lazy::{async_fn#0}::{closure#1}");
        // Nothing outer names it: left alone.
        assert_eq!(names[5], "{async_block#7}");
        assert_eq!(names[0], "std::thread::sleep");
    }
}
