//! Stack samples by signal: the handler (async-signal-safe code only) and the request protocol
//! the watchdog follows. And the exit signals, SIGTERM and SIGINT, caught for
//! `PINWATCH_DUMP_ON_EXIT` (`exit.rs`).
//!
//! The watchdog sends the stuck thread [`sample_signal`]. The handler finds the thread's slot
//! through a const thread-local, claims the slot's preallocated buffer with one compare-and-swap
//! (a request that is not outstanding is ignored, so it never waits), notes which poll it
//! interrupted, copies instruction pointers into the buffer with the unwinder, and publishes
//! them. No allocation, no lock, `errno` saved and restored. Symbols are resolved later, off the
//! watchdog ([`crate::analyze`]).
//!
//! One request per slot is outstanding at a time: a thread that has not taken the signal yet (in
//! uninterruptible sleep, or with the signal blocked) is not signalled again until it does, so
//! real-time signals never pile up against `RLIMIT_SIGPENDING`.

#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
use std::ffi::CStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::poll::sample::{SampleArea, IDLE, MAX_FRAMES};
use crate::poll::slot::Slot;
use crate::Error;

pub(crate) mod exit;
mod handler;

use handler::handler;

/// A request is outstanding: the handler may take it.
const REQUESTED: u32 = 1;
/// The handler is writing the sample.
const WRITING: u32 = 2;
/// A sample is ready for the watchdog.
const DONE: u32 = 3;

/// The signal used to sample a worker's stack: `SIGRTMIN + 6` (a real-time signal nothing in
/// std or tokio uses). Handled with `SA_RESTART`, so interrupted system calls resume.
pub fn sample_signal() -> libc::c_int {
    libc::SIGRTMIN() + 6
}

/// Whether the unwinder can run inside a signal handler here. libgcc's unwinder finds a frame's
/// unwind tables with glibc's lock-free `_dl_find_object` (glibc ≥ 2.35, libgcc ≥ 12 built
/// against it); older ones call `dl_iterate_phdr`, which takes the loader lock — a worker
/// interrupted while it holds that lock (in `dlopen`, or in the unwinder itself) would deadlock in
/// the handler. musl has no `_dl_find_object` at all. Asks the dynamic loader of this process:
/// does glibc export `_dl_find_object`, and does the loaded unwinder (libgcc_s, or the program
/// itself when it carries the unwinder) import it?
pub(crate) fn unwinder_is_signal_safe_here() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
    {
        // SAFETY: dlsym only looks a name up; the string is NUL-terminated.
        let glibc_has =
            !unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_dl_find_object".as_ptr()) }.is_null();
        glibc_has && unwinder_imports(c"_dl_find_object")
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64")))]
    {
        false
    }
}

/// Whether the object that holds the unwinder (libgcc_s when it is loaded, else the program)
/// names `symbol` in its dynamic string table. Reads the loaded objects' own dynamic sections
/// through `dl_iterate_phdr`, once, at install time (never in the handler).
#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
fn unwinder_imports(symbol: &CStr) -> bool {
    struct Search<'a> {
        symbol: &'a [u8],
        libgcc: Option<bool>,
        program: Option<bool>,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the `Search` passed below; `info` is valid for this call.
        let (search, info) = unsafe { (&mut *(data as *mut Search<'_>), &*info) };
        // SAFETY: dlpi_name is a NUL-terminated string (empty for the program).
        let name = unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes();
        let is_libgcc = name.windows(8).any(|w| w == b"libgcc_s");
        if !is_libgcc && !name.is_empty() {
            return 0;
        }
        // SAFETY: the loader's program headers of a loaded object, `dlpi_phnum` of them.
        let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
        let found = phdrs
            .iter()
            .find(|p| p.p_type == libc::PT_DYNAMIC)
            .map(|p| {
                /// An `Elf64_Dyn` entry.
                #[repr(C)]
                struct Dyn {
                    d_tag: i64,
                    d_un: u64,
                }
                let dynamic = (info.dlpi_addr + p.p_vaddr) as *const Dyn;
                let (mut strtab, mut strsz) = (0u64, 0u64);
                let mut i = 0;
                loop {
                    // SAFETY: the dynamic section is an array ended by DT_NULL.
                    let d = unsafe { &*dynamic.add(i) };
                    match d.d_tag {
                        0 => break,
                        5 => strtab = d.d_un, // DT_STRTAB (relocated by glibc)
                        10 => strsz = d.d_un, // DT_STRSZ
                        _ => {}
                    }
                    i += 1;
                }
                if strtab == 0 || strsz == 0 {
                    return false;
                }
                // SAFETY: the string table of a loaded object, `strsz` bytes long.
                let table =
                    unsafe { std::slice::from_raw_parts(strtab as *const u8, strsz as usize) };
                table.split(|&b| b == 0).any(|s| s == search.symbol)
            })
            .unwrap_or(false);
        if is_libgcc {
            search.libgcc = Some(found);
        } else {
            search.program = Some(found);
        }
        0
    }
    let mut search = Search {
        symbol: symbol.to_bytes(),
        libgcc: None,
        program: None,
    };
    // SAFETY: `each` follows dl_iterate_phdr's contract and only reads loader data.
    unsafe {
        libc::dl_iterate_phdr(
            Some(each),
            &mut search as *mut Search<'_> as *mut libc::c_void,
        )
    };
    search.libgcc.or(search.program).unwrap_or(false)
}

/// Whether the handler is installed; none of pinwatch's signals goes out before it is.
static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();

/// Whether [`install_handler`] has installed the handler in this process.
pub(crate) fn handler_installed() -> bool {
    matches!(INSTALLED.get(), Some(Ok(())))
}

/// A handler as `SA_SIGINFO` calls it.
pub(super) type SigInfoHandler =
    extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

/// Installs `handler` for `sig` (`SA_SIGINFO | SA_RESTART`, nothing else blocked while it runs):
/// the sampling signal's and the exit signals' handlers.
///
/// # Safety
///
/// `handler` must be async-signal-safe: it runs in whatever the interrupted thread was doing.
pub(super) unsafe fn install_siginfo(
    sig: libc::c_int,
    handler: SigInfoHandler,
) -> Result<(), String> {
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" starting point.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler as *const () as usize;
    action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // SAFETY: `action.sa_mask` is a valid sigset_t owned here.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: `handler` has the signature SA_SIGINFO asks for, and is async-signal-safe (this
    // function's contract).
    if unsafe { libc::sigaction(sig, &action, std::ptr::null_mut()) } != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    Ok(())
}

/// Installs the handler, once per process. Fails if another handler owns the signal.
pub(crate) fn install_handler() -> Result<(), Error> {
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
            // SAFETY: `handler` is async-signal-safe (see its comment).
            unsafe { install_siginfo(sig, handler) }
        })
        .clone()
        .map_err(|reason| Error::InvalidSetting {
            setting: "stacks",
            reason,
        })
}

/// How long the watchdog waits for a sample it has just asked for.
pub(crate) const SAMPLE_WAIT: Duration = Duration::from_millis(50);

/// A stack sample and what it cost.
#[derive(Clone, Debug)]
pub(crate) struct Sample {
    /// The poll counter when the handler ran.
    pub seq: u64,
    /// Instruction pointers, innermost first.
    pub ips: Vec<usize>,
    /// Time the worker spent in the handler.
    pub handler: Duration,
    /// From the signal sent to the sample read, as the watchdog saw it (zero for a sample that
    /// arrived after the watchdog stopped waiting).
    pub round_trip: Duration,
}

/// What asking for a sample gave.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// A sample (of whatever poll was running when the handler ran: check `seq`).
    Sample(Sample),
    /// A request is outstanding and the thread has not taken the signal yet: nothing sent.
    Pending,
    /// The request was sent now and not answered within [`SAMPLE_WAIT`]; it stays outstanding.
    Sent,
    /// The signal could not be sent (the thread is gone).
    Failed,
}

/// Asks `slot`'s thread (Linux thread id `tid`) for a stack sample, and waits up to
/// [`SAMPLE_WAIT`] for it. Watchdog only. A sample that an earlier request left is returned at
/// once, without a new signal; an outstanding request is never repeated.
pub(crate) fn request(slot: &Slot, tid: i32) -> Outcome {
    let buf = &slot.sample;
    match buf.state.load(Ordering::Acquire) {
        DONE => return Outcome::Sample(take(buf, Duration::ZERO)),
        REQUESTED | WRITING => return Outcome::Pending,
        _ => {}
    }
    if buf
        .state
        .compare_exchange(IDLE, REQUESTED, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return Outcome::Pending;
    }
    // SAFETY: tgkill only sends a signal; a stale tid fails with ESRCH. The handler is installed
    // (the detector installs it before the runtime exists when stacks are on).
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, sample_signal()) };
    if rc != 0 {
        let _ = buf
            .state
            .compare_exchange(REQUESTED, IDLE, Ordering::AcqRel, Ordering::Relaxed);
        return Outcome::Failed;
    }
    let sent = Instant::now();
    let deadline = sent + SAMPLE_WAIT;
    loop {
        let state = buf.state.load(Ordering::Acquire);
        if state == DONE {
            return Outcome::Sample(take(buf, sent.elapsed()));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Outcome::Sent;
        }
        // One sleep, which the handler's answer ends: a loop of 20 µs sleeps woke the watchdog
        // 600–650 times while a thread could not answer, and found an answer only as a sleep
        // ended, up to the watchdog's timer slack late (helper-115).
        wait_while(&buf.state, state, left);
    }
}

/// Sleeps while `word` holds `seen`, for `within` at most, until woken (the handler's
/// [`answer`](handler::answer)) or interrupted: the caller reads `word` again.
fn wait_while(word: &AtomicU32, seen: u32, within: Duration) {
    let timeout = libc::timespec {
        tv_sec: within.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: within.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT reads the aligned 32-bit word behind `word`, live for the call, and
    // sleeps while it holds `seen`; `timeout` is a valid relative timeout that outlives the
    // call. It writes no memory of ours; its result (woken, changed, timed out, interrupted)
    // is what the caller reads from `word` next.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            seen,
            &timeout as *const libc::timespec,
        )
    };
}

/// Where a slot's sample request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// None is outstanding, and no sample waits.
    Idle,
    /// Sent, and not yet taken by the thread's handler.
    Requested,
    /// The handler has taken it and is writing the sample.
    Writing,
    /// A sample is ready.
    Done,
}

/// Where `slot`'s sample request stands now.
pub(crate) fn request_state(slot: &Slot) -> Request {
    match slot.sample.state.load(Ordering::Acquire) {
        REQUESTED => Request::Requested,
        WRITING => Request::Writing,
        DONE => Request::Done,
        _ => Request::Idle,
    }
}

/// Withdraws a request the thread has not taken, when the slot is being let go of. Returns
/// whether one was withdrawn.
pub(crate) fn withdraw(slot: &Slot) -> bool {
    slot.sample
        .state
        .compare_exchange(REQUESTED, IDLE, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
}

/// Leaves a sample of poll `seq` in `slot`, as the handler does before it returns.
#[cfg(test)]
pub(crate) fn leave_sample(slot: &Slot, seq: u64, ips: &[usize]) {
    let buf = &slot.sample;
    for (to, &ip) in buf.ips.iter().zip(ips) {
        to.store(ip, Ordering::Relaxed);
    }
    buf.len.store(ips.len(), Ordering::Relaxed);
    buf.seq.store(seq, Ordering::Relaxed);
    handler::answer(buf);
}

fn take(buf: &SampleArea, round_trip: Duration) -> Sample {
    let n = buf.len.load(Ordering::Relaxed).min(MAX_FRAMES);
    let sample = Sample {
        seq: buf.seq.load(Ordering::Relaxed),
        ips: buf.ips[..n]
            .iter()
            .map(|ip| ip.load(Ordering::Relaxed))
            .collect(),
        handler: Duration::from_nanos(buf.handler_nanos.load(Ordering::Relaxed)),
        round_trip,
    };
    buf.state.store(IDLE, Ordering::Release);
    sample
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unwinder_is_asked_what_it_imports() {
        // libgcc_s (or the program) imports the unwinder's own entry points' helpers; nothing
        // imports a made-up name.
        assert!(!unwinder_imports(c"pinwatch_no_such_symbol"));
        assert!(unwinder_imports(c"dl_iterate_phdr") || unwinder_imports(c"_dl_find_object"));
    }

    #[test]
    fn this_machine_has_a_signal_safe_unwinder() {
        // Debian 12: glibc 2.36, libgcc 12. If this fails here, stacks would be off by default.
        assert!(unwinder_is_signal_safe_here());
    }
}
