//! The per-poll path never allocates, locks, makes a system call or panics.
//!
//! - Allocations: pinwatch's hooks are called from hooks of this test's own (the composable
//!   [`pinwatch::PollHooks`]), and a counting allocator counts what is allocated *inside* them:
//!   exactly zero over a million polls on a real runtime.
//! - System calls (and so any lock that would wait, and any allocation that would grow the heap):
//!   a child process runs a million polls through the same hook path under seccomp, where any
//!   system call but `read`, `write`, `exit` and `rt_sigreturn` kills it — with start stamps off
//!   and on. (A filter of those four rather than seccomp's strict mode, which also makes the
//!   time-stamp counter fault: a stamp is `rdtsc`, not a system call.)
//! - Span enter and exit (`pinwatch::tracing_layer()`, inside polls): the same child, entering and
//!   exiting nested spans through a real `tracing_subscriber::registry()`.
//! - Locks and panics: the `layout` test keeps lock types and panicking macros out of `poll/`.

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

static IN_HOOK_ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: forwards to the system allocator; the bookkeeping touches only a const thread-local
// without destructor and an atomic, neither of which allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if IN_HOOK.try_with(|w| w.get()).unwrap_or(false) {
            IN_HOOK_ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const TASKS: usize = 10_000;
const POLLS: usize = 100;

fn workload(rt: &tokio::runtime::Runtime) {
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            rt.spawn(async {
                for _ in 0..POLLS - 1 {
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    rt.block_on(async {
        for t in tasks {
            t.await.unwrap();
        }
    });
}

#[test]
fn hooks_allocate_nothing_on_a_real_runtime() {
    let events = support::Collected::default();
    // No yield poll is reported, on any machine. At the default 20 ms, with CPU hogs beside
    // the suite, about one run in 50 reports one, rightly: a worker blocked 20–44 ms on a
    // futex in `lock_api::Mutex::lock` under `OwnedTasks::remove` (tokio's task list, held by
    // another thread while the hogs keep it from a CPU), its own CPU wait left out. The hooks'
    // path is the same at any threshold.
    let prepared = support::builder(&events)
        .threshold(std::time::Duration::from_secs(10))
        .prepare()
        .unwrap();
    let (before, after) = (prepared.hooks(), prepared.hooks());
    let polls = std::sync::Arc::new(AtomicU64::new(0));
    let counted = std::sync::Arc::clone(&polls);
    let mut tokio = support::multi_thread(2);
    tokio
        .on_before_task_poll(move |meta| {
            IN_HOOK.with(|h| h.set(true));
            before.before_poll(meta);
            IN_HOOK.with(|h| h.set(false));
        })
        .on_after_task_poll(move |meta| {
            IN_HOOK.with(|h| h.set(true));
            after.after_poll(meta);
            IN_HOOK.with(|h| h.set(false));
            counted.fetch_add(1, Ordering::Relaxed);
        });
    let rt = tokio.build().unwrap();
    let detector = prepared.start(rt.handle()).unwrap();
    // Warm up: the first poll on each worker claims its slot (that may allocate: once per
    // thread, not per poll).
    workload(&rt);
    let before_allocs = IN_HOOK_ALLOCS.load(Ordering::Relaxed);
    let polls_before = polls.load(Ordering::Relaxed);
    workload(&rt);
    let allocs = IN_HOOK_ALLOCS.load(Ordering::Relaxed) - before_allocs;
    let polled = polls.load(Ordering::Relaxed) - polls_before;
    drop(rt);
    let stats = detector.shutdown();
    println!("allocations inside pinwatch's hooks over {polled} polls: {allocs}");
    // Every task polled 100 times (the very last after-poll hooks may still be running).
    assert!(polled >= (TASKS * (POLLS - 1)) as u64, "{polled}");
    assert_eq!(allocs, 0);
    let reported = events.all();
    assert!(reported.is_empty(), "{reported:#?}");
    assert_eq!(stats.pinned_polls, 0);
}

#[test]
fn hook_path_makes_no_system_call() {
    let events = support::Collected::default();
    let prepared = support::builder(&events).prepare().unwrap();
    let hooks = prepared.hooks();
    let location = std::panic::Location::caller();
    // The claim (first poll on a thread) may allocate and ask the kernel; take it now.
    hooks.before_poll_raw(1, location);
    hooks.after_poll_raw();

    let allocs = under_seccomp(|| {
        for i in 0..1_000_000u64 {
            hooks.before_poll_raw(i, location);
            hooks.after_poll_raw();
        }
    });
    assert_eq!(allocs, 0, "allocations in the hook path");
    // And with each poll's start stamped (the time-stamp counter, where the watchdog turns
    // stamping on for a thread that polls rarely).
    hooks.__set_stamping(true);
    let allocs = under_seccomp(|| {
        for i in 0..1_000_000u64 {
            hooks.before_poll_raw(i, location);
            hooks.after_poll_raw();
        }
    });
    assert_eq!(allocs, 0, "allocations in the stamping hook path");
    drop(prepared);
}

/// The rare paths around a pin: the end of a poll the watchdog flagged (a clock read, by design:
/// once per pin), the polls after it, which take the cold path to be recorded until eight are,
/// and with `schedule-latency` a poll after a long wait (a clock read when it begins; its record
/// published when it ends). None allocates; past the clock reads, none makes a system call.
#[test]
fn the_paths_around_a_pin_allocate_nothing_and_record_with_no_system_call() {
    let events = support::Collected::default();
    let prepared = support::builder(&events).prepare().unwrap();
    let hooks = prepared.hooks();
    let location = std::panic::Location::caller();
    hooks.before_poll_raw(1, location);
    hooks.after_poll_raw();
    hooks.before_poll_raw(2, location);
    // As the watchdog does (a system call: before the child starts).
    assert!(hooks.__flag_running_poll(), "the running poll is flagged");
    let allocs = under_seccomp_after(
        || {
            // The clock reads.
            hooks.after_poll_raw();
            #[cfg(feature = "schedule-latency")]
            {
                hooks.before_poll_raw(3, location);
                hooks.__waited_raw(true, 3, location, 50_000_000);
            }
        },
        || {
            #[cfg(feature = "schedule-latency")]
            {
                hooks.__waited_raw(false, 3, location, 50_000_000);
                hooks.after_poll_raw();
            }
            // Recorded on the cold path, then the per-poll path again.
            for i in 0..100_000u64 {
                hooks.before_poll_raw(10 + i, location);
                hooks.after_poll_raw();
            }
        },
    );
    assert_eq!(allocs, 0, "allocations around a pin");
    drop(prepared);
}

/// Runs `work` in a forked child under seccomp ([`forbid_system_calls`]: any system call but
/// read, write, exit and rt_sigreturn kills it), with the counting allocator on; the allocations it made. Fails the test
/// if the child was killed.
fn under_seccomp(work: impl FnMut()) -> u64 {
    under_seccomp_after(|| {}, work)
}

/// [`under_seccomp`], with `prelude` run in the child first, counted but before seccomp.
fn under_seccomp_after(prelude: impl FnOnce(), mut work: impl FnMut()) -> u64 {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe() writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child only runs `work` (the hook path and span enter/exit: atomics and this
    // thread's own thread-locals, warmed up before), writes to the pipe and exits; it touches no
    // lock another thread could hold.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let allocs_before = IN_HOOK_ALLOCS.load(Ordering::Relaxed);
        IN_HOOK.with(|h| h.set(true));
        prelude();
        forbid_system_calls();
        work();
        let allocs = IN_HOOK_ALLOCS.load(Ordering::Relaxed) - allocs_before;
        let report = allocs.to_le_bytes();
        // SAFETY: writes 8 bytes from a live buffer to the pipe; then ends this process with
        // the plain exit system call (exit_group is not allowed, and the child has one thread).
        unsafe {
            libc::write(fds[1], report.as_ptr().cast(), report.len());
            libc::syscall(libc::SYS_exit, 0);
        }
        unreachable!();
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    let mut report = [0u8; 8];
    // SAFETY: reads at most 8 bytes into a live buffer; the write end is closed first so a dead
    // child gives end of file instead of a hang.
    let n = unsafe {
        libc::close(fds[1]);
        libc::read(fds[0], report.as_mut_ptr().cast(), report.len())
    };
    assert!(
        !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == FILTER_REFUSED),
        "the kernel refused the seccomp filter"
    );
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the hook path was killed under seccomp (status {status:#x}): it made a system call"
    );
    assert_eq!(n, 8);
    u64::from_le_bytes(report)
}

/// The filter is one: a system call under it kills the child, and the test says so.
#[test]
#[should_panic(expected = "killed under seccomp")]
fn a_system_call_under_the_filter_kills_the_child() {
    under_seccomp(|| {
        // SAFETY: `getppid` takes no arguments and cannot fail.
        unsafe { libc::getppid() };
    });
}

/// The forked child's exit status when the kernel refused the filter.
const FILTER_REFUSED: i32 = 3;

/// From here on, any system call of this thread but `read`, `write`, `exit` and `rt_sigreturn`
/// kills the process: strict seccomp's four, as a filter (strict mode itself also makes
/// `rdtsc` fault).
fn forbid_system_calls() {
    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let allowed = [
        libc::SYS_read,
        libc::SYS_write,
        libc::SYS_exit,
        libc::SYS_rt_sigreturn,
    ];
    let load = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let ret = libc::BPF_RET | libc::BPF_K;
    let jeq = |k: u32, jt: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf: 0,
        k,
    };
    // `seccomp_data`: the call's number at offset 0, the architecture at 4. An array, not a
    // `Vec`: this runs where allocations are counted.
    let kill = stmt(ret, libc::SECCOMP_RET_KILL_PROCESS);
    let mut prog = [kill; 10];
    prog[0] = stmt(load, 4);
    prog[1] = jeq(ARCH, 1);
    prog[3] = stmt(load, 0);
    for (i, nr) in allowed.iter().enumerate() {
        // Past the rest of the list and the kill, to the allow.
        prog[4 + i] = jeq(*nr as u32, (allowed.len() - i) as u8);
    }
    prog[9] = stmt(ret, libc::SECCOMP_RET_ALLOW);
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: `PR_SET_NO_NEW_PRIVS` takes no pointers; `PR_SET_SECCOMP` reads the program
    // `fprog` points at, which lives until the call returns (the kernel copies it). `_exit`
    // ends this forked child at once: a panic would unwind into its copy of the test harness.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &fprog as *const libc::sock_fprog,
            ) != 0
        {
            libc::_exit(FILTER_REFUSED);
        }
    }
}

#[test]
fn span_enter_and_exit_make_no_system_call_and_allocate_nothing() {
    use tracing_subscriber::prelude::*;
    let events = support::Collected::default();
    let prepared = support::builder(&events).prepare().unwrap();
    let hooks = prepared.hooks();
    let location = std::panic::Location::caller();
    let subscriber = tracing_subscriber::registry().with(pinwatch::tracing_layer());
    tracing::subscriber::with_default(subscriber, || {
        let request = tracing::info_span!("request", method = "GET", uri = "/report");
        let inner = tracing::info_span!(parent: &request, "load_report", user = 7);
        let nest = || {
            let _request = request.enter();
            let _inner = inner.enter();
            // The same span twice, and exits out of order.
            let again = inner.enter();
            let other = request.enter();
            drop(again);
            drop(other);
        };
        // The claim (first poll on a thread) and the subscriber's own first use (its per-thread
        // stack) may allocate and ask the kernel; take them now.
        hooks.before_poll_raw(1, location);
        nest();
        hooks.after_poll_raw();
        let allocs = under_seccomp(|| {
            for i in 0..200_000u64 {
                hooks.before_poll_raw(i, location);
                nest();
                hooks.after_poll_raw();
            }
        });
        assert_eq!(allocs, 0, "allocations entering and exiting spans");
    });
    drop(prepared);
}
