//! Probing a pinned thread from the watchdog: its scheduler state and system call from `/proc`,
//! whether it blocks the sampling signal, and a stack sample ([`crate::signal`]). Runs on the
//! watchdog thread, never on a worker.

use std::sync::atomic::Ordering;

use super::{Shared, StatsCounters};
use crate::config::Stacks;
use crate::poll::locks::HeldEntry;
use crate::poll::slot::{NameBuf, Slot, NAME_MAX};
use crate::signal;

/// The thread's state as `/proc/self/task/<tid>/stat`, `syscall` and `io` tell it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ProcState {
    /// `R` running, `S` sleeping, `D` disk sleep, …
    pub state: char,
    /// `None` while running in user space; `Some(name)` while in a system call.
    pub syscall: Option<&'static str>,
    /// For a read or write family call: its file descriptor, and what that is now.
    pub fd: Option<(i32, FdKind)>,
    /// Read and write system calls the thread has made so far (`syscr`, `syscw`), when the
    /// kernel counts them: two probes that see the same counts saw none between them.
    pub io_calls: Option<(u64, u64)>,
}

/// What a file descriptor is (`/proc/self/fd/<fd>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FdKind {
    Pipe,
    Terminal,
    Socket,
    /// A regular file, a device, anything else.
    Other,
}

impl FdKind {
    /// From the link `/proc/self/fd/<fd>` points at.
    fn of_link(link: &str) -> FdKind {
        if link.starts_with("pipe:") {
            FdKind::Pipe
        } else if link.starts_with("socket:") {
            FdKind::Socket
        } else if link.starts_with("/dev/pts/") || link.starts_with("/dev/tty") {
            FdKind::Terminal
        } else {
            FdKind::Other
        }
    }
}

/// The holder of an instrumented lock another thread waits for.
#[derive(Clone, Debug)]
pub(crate) struct Holder {
    pub tid: i32,
    pub name: String,
    pub site: &'static std::panic::Location<'static>,
    /// Its thread, as tokio's metrics name worker threads.
    pub thread: u64,
    /// The worker it runs, when it runs one (filled in by the watchdog, which asks tokio).
    pub index: Option<usize>,
}

/// One look at a pinned thread.
#[derive(Clone, Debug, Default)]
pub(crate) struct Probe {
    pub proc: Option<ProcState>,
    /// Instruction pointers, innermost first, when a stack sample of this poll arrived.
    pub stack: Option<Vec<usize>>,
    /// Why there is no stack, when there is none.
    pub no_stack: Option<&'static str>,
    /// Instrumented locks held, see [`crate::sync`].
    pub held: Vec<HeldEntry>,
    /// The thread waits for an instrumented lock: `Some(holder)`, the holder when a watched
    /// thread of this detector holds it.
    pub waiting_for: Option<Option<Holder>>,
    /// Whether a signal was sent for this probe.
    pub signalled: bool,
    /// The thread's voluntary context switches so far (`voluntary_ctxt_switches`), read just
    /// before this probe's look: each time it blocked (a sleep, a lock's wait, a read that
    /// waited), never a preemption.
    pub switches: Option<u64>,
    /// The thread ran from the previous probe to this one: on a CPU more than off one
    /// ([`Between::Computed`]), or, where the accounting does not tell, never blocked since a
    /// probe that found it running ([`super::judge::ran_throughout`]).
    pub ran: bool,
    /// The thread's accounting at this probe, read just before its look.
    pub reading: Option<Reading>,
    /// The reading `between` compared this one's with: the previous probe's (the first
    /// probe's: its pin's baseline).
    pub since: Option<Reading>,
    /// What the thread did since then.
    pub between: Between,
}

/// Takes one probe of `slot`'s thread, running poll `seq`. A thread still blocked in the same
/// system call as at the `previous` probe is not signalled again — its stack has not moved, and
/// each signal interrupts the call (see docs/how-it-works.md, "Signals") — the previous stack stands.
///
/// `None` when the poll ended before its thread was read: such a look says nothing of the poll,
/// and kept as the latest it would hide what the earlier ones found (why there is no stack, the
/// locks held).
pub(crate) fn take(
    w: &Shared,
    slot: &Slot,
    seq: u64,
    previous: Option<&Probe>,
    stacks: Stacks,
) -> Option<Probe> {
    let tid = slot.tid.load(Ordering::Relaxed);
    // Read /proc before the signal: the sample interrupts the system call for a moment.
    let proc = read_proc(tid);
    let unchanged = match (previous, &proc) {
        (Some(prev), Some(now)) => {
            now.syscall.is_some()
                && prev.proc.as_ref().map(|p| p.syscall) == Some(now.syscall)
                && prev.stack.is_some()
        }
        _ => false,
    };
    let mut probe = Probe {
        proc,
        held: held_by(slot),
        waiting_for: waiting_for(w, slot),
        ..Probe::default()
    };
    if slot.poll.seq() != seq {
        // The poll ended before (or while) its thread was read: what `/proc` and the lock
        // table said is about what the thread did next — waiting in the park's `epoll_wait`,
        // another poll — never this poll's.
        return None;
    }
    // The handler is installed before stacks are turned on (at start or by `ctl set`); a
    // signal without it would kill the process, so check rather than trust the order.
    let no_stack = match (stacks, w.stacks_blocked) {
        (Stacks::Off, _) => Some("stacks_off"),
        (_, Some(why)) => Some(why),
        _ if !signal::handler_installed() => Some("stacks_off"),
        _ => None,
    };
    if let Some(why) = no_stack {
        probe.no_stack = Some(why);
        return Some(probe);
    }
    if unchanged {
        probe.stack = previous.and_then(|p| p.stack.clone());
        return Some(probe);
    }
    if probe.proc.as_ref().is_some_and(cut_short_by_signal) {
        probe.no_stack = Some("socket_timeout");
        return Some(probe);
    }
    // Read last, right before the signal goes out: the masks as they are now.
    let status = signal_status(tid, signal::sample_signal());
    let mut next = next_step(signal::request_state(slot), status);
    if next == Next::AskAgain {
        // Idle now, or (the handler took it meanwhile) writing or done: chosen again from that.
        signal::withdraw(slot);
        next = next_step(signal::request_state(slot), status);
    }
    match next {
        Next::Sample => sample(w, slot, tid, seq, &mut probe, true),
        Next::TakeWaiting => sample(w, slot, tid, seq, &mut probe, false),
        Next::NoStack(why) => probe.no_stack = Some(why),
        // Only this thread sends requests, so a withdrawn one is not outstanding again.
        Next::AskAgain => probe.no_stack = Some("signal_pending"),
    }
    Some(probe)
}

/// What a probe does for a stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// Ask for a sample, or take the one that is ready or being written.
    Sample,
    /// Take the sample that is ready, and ask for none: the thread blocks the signal.
    TakeWaiting,
    /// Withdraw the outstanding request, then choose again.
    AskAgain,
    /// No stack this time, and why.
    NoStack(&'static str),
}

/// The probe's choice, from where the slot's sample request stands and the thread's view of
/// the sampling signal (`None`: its status could not be read).
fn next_step(request: signal::Request, status: Option<SignalStatus>) -> Next {
    use signal::Request;
    let blocked = status.is_some_and(|s| s.blocked);
    match request {
        // The handler has taken the signal: its sample is ready, or being written. The mask
        // `/proc` shows now may be the handler's own, which holds the signal back until it
        // returns: the sample is taken whatever the mask. A sample of an earlier poll is
        // thrown away; then only a thread that does not block the signal is asked again.
        Request::Done if blocked => Next::TakeWaiting,
        Request::Writing | Request::Done => Next::Sample,
        // Outstanding, yet no longer pending: the thread took the signal without running the
        // handler (`sigwait`), or is about to run it. Either way a new request may go out,
        // unless the thread blocks the signal (the handler's mask looks the same, for the
        // moment before it runs: then this one probe says `signal_blocked`, the next samples).
        Request::Requested if status.is_some_and(|s| !s.pending) => Next::AskAgain,
        Request::Requested if blocked => Next::NoStack("signal_blocked"),
        Request::Requested => Next::NoStack("signal_pending"),
        Request::Idle if blocked => Next::NoStack("signal_blocked"),
        Request::Idle => Next::Sample,
    }
}

/// Asks for a stack sample of poll `seq` (the first try may take one an earlier request left
/// behind); with `may_signal` false, only takes one left behind, and says `signal_blocked`
/// when that is not this poll's.
fn sample(w: &Shared, slot: &Slot, tid: i32, seq: u64, probe: &mut Probe, may_signal: bool) {
    let stats: &StatsCounters = &w.stats;
    if !may_signal && signal::request_state(slot) != signal::Request::Done {
        probe.no_stack = Some("signal_blocked");
        return;
    }
    // Two tries at most: the first may return a sample an earlier request left behind.
    for _ in 0..1 + usize::from(may_signal) {
        match signal::request(slot, tid) {
            signal::Outcome::Sample(s) => {
                let fresh = !s.round_trip.is_zero();
                if fresh {
                    probe.signalled = true;
                }
                if s.seq != seq {
                    // It belongs to another poll (it ran after this one ended, or is left over
                    // from an earlier request): never attach it.
                    stats.samples_discarded.fetch_add(1, Ordering::Relaxed);
                    if fresh {
                        probe.no_stack = Some("no_sample");
                        return;
                    }
                    continue;
                }
                stats.samples.fetch_add(1, Ordering::Relaxed);
                let ns = |d: std::time::Duration| d.as_nanos() as u64;
                stats
                    .sample_handler_ns
                    .fetch_add(ns(s.handler), Ordering::Relaxed);
                stats
                    .sample_round_trip_ns
                    .fetch_add(ns(s.round_trip), Ordering::Relaxed);
                if s.ips.is_empty() {
                    // The unwinder found no frame to walk (a thread in code without unwind
                    // information): a sample, but nothing to say where.
                    probe.no_stack = Some("empty_stack");
                    return;
                }
                probe.stack = Some(s.ips);
                return;
            }
            signal::Outcome::Pending => {
                probe.no_stack = Some("signal_pending");
                return;
            }
            signal::Outcome::Sent => {
                probe.signalled = true;
                stats.samples_missed.fetch_add(1, Ordering::Relaxed);
                probe.no_stack = Some("signal_pending");
                return;
            }
            signal::Outcome::Failed => {
                probe.no_stack = Some("no_sample");
                return;
            }
        }
    }
    probe.no_stack = Some(if may_signal {
        "no_sample"
    } else {
        "signal_blocked"
    });
}

fn held_by(slot: &Slot) -> Vec<HeldEntry> {
    let mut v = Vec::new();
    slot.locks.for_each(|e| v.push(e));
    v
}

/// The instrumented lock `slot`'s thread waits for, with its holder when a watched thread of
/// this detector holds it.
fn waiting_for(w: &Shared, slot: &Slot) -> Option<Option<Holder>> {
    let lock = slot.locks.waiting();
    if lock == 0 {
        return None;
    }
    let holder = w.table.slots().iter().find_map(|other| {
        if !other.is_active() || std::ptr::eq(other, slot) {
            return None;
        }
        let mut site = None;
        other.locks.for_each(|e| {
            if e.lock == lock && site.is_none() {
                site = Some(e.site);
            }
        });
        let mut name: NameBuf = [0; NAME_MAX];
        let n = other.name_into(&mut name);
        Some(Holder {
            tid: other.tid.load(Ordering::Relaxed),
            name: String::from_utf8_lossy(&name[..n]).into_owned(),
            site: site?,
            thread: other.thread.load(Ordering::Relaxed),
            index: None,
        })
    });
    Some(holder)
}

/// A thread's view of one signal (`/proc/self/task/<tid>/status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SignalStatus {
    /// In the thread's mask (`SigBlk`).
    pub blocked: bool,
    /// Sent to the thread and not yet taken (`SigPnd`).
    pub pending: bool,
}

/// Whether thread `tid` blocks signal `sig`, and whether one is pending for it. `None` if the
/// status cannot be read.
pub(crate) fn signal_status(tid: i32, sig: libc::c_int) -> Option<SignalStatus> {
    signal_status_in(tid, sig, &mut [0u8; 4096])
}

/// [`signal_status`], reading into `buf` first ([`read_status`]).
fn signal_status_in(tid: i32, sig: libc::c_int, buf: &mut [u8]) -> Option<SignalStatus> {
    let status = read_status(tid, buf)?;
    let field = |name: &[u8]| status_field(&status, name).map(|v| mask_has(v, sig));
    Some(SignalStatus {
        blocked: field(b"SigBlk:")?,
        pending: field(b"SigPnd:")?,
    })
}

/// Thread `tid`'s voluntary context switches so far (`voluntary_ctxt_switches` in its
/// `status`): one each time it blocked. `None` if the status cannot be read.
pub(crate) fn voluntary_switches(tid: i32) -> Option<u64> {
    voluntary_switches_in(tid, &mut [0u8; 4096])
}

/// The calling thread's voluntary context switches so far (`getrusage(RUSAGE_THREAD)`: one
/// system call, no file). `None` if the call fails.
pub(crate) fn own_voluntary_switches() -> Option<u64> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: `usage` is valid for writes of a `rusage`, which the call fills when it returns
    // 0; it is read only then.
    let done = unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) } == 0;
    // SAFETY: filled by the successful call above.
    done.then(|| unsafe { usage.assume_init() }.ru_nvcsw as u64)
}

fn voluntary_switches_in(tid: i32, buf: &mut [u8]) -> Option<u64> {
    status_field(&read_status(tid, buf)?, b"voluntary_ctxt_switches:")?
        .parse()
        .ok()
}

/// Thread `tid`'s `status`, read into `buf`; a file that fills it is read again whole, on the
/// heap: `Groups:` comes before the masks and the counts and has no bound (hundreds of
/// ten-digit groups, as a directory service maps them, put `SigBlk` past 4 KiB), and a field
/// cut short would be read wrong, not just missed. Bytes, not text: the thread's name on the
/// first line may be any bytes.
fn read_status(tid: i32, buf: &mut [u8]) -> Option<std::borrow::Cow<'_, [u8]>> {
    let room = buf.len();
    match read_task_bytes(tid, "status", buf)? {
        s if s.len() < room => Some(std::borrow::Cow::Borrowed(s)),
        _ => std::fs::read(format!("/proc/self/task/{tid}/status"))
            .ok()
            .map(std::borrow::Cow::Owned),
    }
}

/// The value of the line of `status` that begins with `name`, trimmed.
fn status_field<'s>(status: &'s [u8], name: &[u8]) -> Option<&'s str> {
    status
        .split(|&b| b == b'\n')
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::trim)
}

/// Whether the hexadecimal signal mask `mask` (as `/proc` prints it) has signal `sig`.
fn mask_has(mask: &str, sig: libc::c_int) -> bool {
    let bit = (sig - 1) as usize;
    // Least significant digit last; each digit holds four signals.
    let digits = mask.as_bytes();
    let Some(&d) = digits.len().checked_sub(1 + bit / 4).map(|i| &digits[i]) else {
        return false;
    };
    (d as char)
        .to_digit(16)
        .is_some_and(|v| v & (1 << (bit % 4)) != 0)
}

/// Reads the thread's state, its current system call (with the descriptor of a read or write)
/// and its read and write call counts. `None` if the thread is gone.
pub(crate) fn read_proc(tid: i32) -> Option<ProcState> {
    let state = read_state(tid)?;
    let mut buf = [0u8; SYSCALL_BYTES];
    let file = read_task(tid, "syscall", &mut buf);
    let syscall = file.and_then(parse_syscall_file);
    let fd = syscall
        .filter(|s| FD_CALLS.contains(s))
        .and_then(|_| first_argument(file?))
        .and_then(|fd| i32::try_from(fd).ok())
        .map(|fd| {
            let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok();
            let kind = link
                .as_deref()
                .and_then(|l| l.to_str())
                .map_or(FdKind::Other, FdKind::of_link);
            (fd, kind)
        });
    Some(ProcState {
        state,
        syscall,
        fd,
        io_calls: read_io_calls(tid),
    })
}

/// Room for `/proc/self/task/<tid>/syscall`: a number and eight hexadecimal words of at most 18
/// characters each (`0x` and 16 digits), separated by spaces.
const SYSCALL_BYTES: usize = 192;

/// Reads `/proc/self/task/<tid>/<name>` into `buf` as text: what [`read_task_bytes`] read, up to
/// its first byte that is not UTF-8 (a thread's name may hold any byte but NUL; text cut
/// by `buf` may end in part of a character).
fn read_task<'b>(tid: i32, name: &str, buf: &'b mut [u8]) -> Option<&'b str> {
    let text = read_task_bytes(tid, name, buf)?;
    Some(match std::str::from_utf8(text) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&text[..e.valid_up_to()]).unwrap_or(""),
    })
}

/// Reads `/proc/self/task/<tid>/<name>` into `buf`, as [`files::read_small`] reads a file: 3
/// system calls for `status` where `read_to_string` makes 11. `None` if the file cannot be
/// opened or read.
///
/// [`files::read_small`]: crate::files::read_small
fn read_task_bytes<'b>(tid: i32, name: &str, buf: &'b mut [u8]) -> Option<&'b [u8]> {
    use std::io::Write;
    // "/proc/self/task/" (16), an `i32` (at most 11), "/" and a name of at most 9 bytes.
    let mut path = [0u8; 48];
    let room = path.len();
    let mut rest = &mut path[..];
    write!(rest, "/proc/self/task/{tid}/{name}").ok()?;
    let len = room - rest.len();
    crate::files::read_small(std::str::from_utf8(&path[..len]).ok()?, buf)
}

/// The read and write family calls whose first argument is a file descriptor.
const FD_CALLS: &[&str] = &[
    "read",
    "write",
    "readv",
    "writev",
    "pread64",
    "pwrite64",
    "preadv",
    "pwritev",
    "recvfrom",
    "sendto",
    "recvmsg",
    "sendmsg",
    "recvmmsg",
    "sendmmsg",
    "connect",
    "accept",
    "accept4",
    "fsync",
    "fdatasync",
];

/// Whether a signal would cut short the system call `proc` found the thread in: a receive, an
/// accept, a send or a connect on a socket with a timeout (`SO_RCVTIMEO`, `SO_SNDTIMEO`: what
/// std's `set_read_timeout` and `set_write_timeout` set; socket2 sets them before a `connect`),
/// which `SA_RESTART` does not restart (signal(7); helper-107: a `connect` failed after 20 ms).
/// std's `read` then returns `Interrupted` to the service, where without pinwatch it would have
/// waited out its timeout (helper-106: a 500 ms read failed after 20 ms). Such a
/// thread is not signalled; it is sampled once it has left the call. Not seen: a thread that
/// enters such a call between `proc`'s read and the signal.
fn cut_short_by_signal(proc: &ProcState) -> bool {
    let Some((fd, FdKind::Socket)) = proc.fd else {
        return false;
    };
    let option = match proc.syscall {
        Some("read" | "readv" | "recvfrom" | "recvmsg" | "recvmmsg" | "accept" | "accept4") => {
            libc::SO_RCVTIMEO
        }
        Some("write" | "writev" | "sendto" | "sendmsg" | "sendmmsg" | "connect") => {
            libc::SO_SNDTIMEO
        }
        _ => return false,
    };
    let mut timeout = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    let mut len = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `timeout`, a timeval as the option
    // takes. The descriptor is the thread's, read from /proc: closed since, the call fails;
    // reused since, it answers for that socket, and only whether to signal is decided by it.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            std::ptr::addr_of_mut!(timeout).cast(),
            &mut len,
        )
    };
    rc == 0 && (timeout.tv_sec != 0 || timeout.tv_usec != 0)
}

/// The first argument of `/proc/<tid>/syscall`'s call (`NR 0xARG1 …`).
fn first_argument(s: &str) -> Option<u64> {
    let arg = s.split_whitespace().nth(1)?;
    u64::from_str_radix(arg.strip_prefix("0x")?, 16).ok()
}

/// `syscr` and `syscw` from `/proc/self/task/<tid>/io`.
fn read_io_calls(tid: i32) -> Option<(u64, u64)> {
    let mut buf = [0u8; 512];
    let s = read_task(tid, "io", &mut buf)?;
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
    };
    Some((field("syscr:")?, field("syscw:")?))
}

/// The thread's scheduler accounting, in ns: time on a CPU and time runnable but waiting for
/// one (`/proc/self/task/<tid>/schedstat`). The kernel adds a stint to either only when it
/// ends; a thread waiting for a CPU right now shows none of that wait yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SchedStat {
    pub on_cpu: u64,
    pub waiting: u64,
}

impl SchedStat {
    /// The accounting moved on by what panic hooks took: read against it, a later reading
    /// counts none of their time on a CPU or waiting for one.
    pub fn past(self, hooks: crate::poll::slot::HookTime) -> SchedStat {
        SchedStat {
            on_cpu: self.on_cpu.saturating_add(hooks.on_cpu),
            waiting: self.waiting.saturating_add(hooks.waiting),
        }
    }

    /// Time on a CPU and time waiting for one since the accounting `then` (none where it went
    /// back).
    pub fn since(&self, then: SchedStat) -> (std::time::Duration, std::time::Duration) {
        let d = |now: u64, then: u64| std::time::Duration::from_nanos(now.saturating_sub(then));
        (d(self.on_cpu, then.on_cpu), d(self.waiting, then.waiting))
    }
}

/// A thread's accounting at a probe (or at its pin's baseline): what it did between two
/// probes is read from two of these ([`between`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reading {
    pub at: std::time::Instant,
    pub stat: SchedStat,
    /// Its voluntary context switches then, when read.
    pub switches: Option<u64>,
}

/// What a thread did between two readings, for a probe that found it running: on a loaded
/// machine a thread woken from a block waits for a CPU and reads as running (`R`, no system
/// call) — a sleep of 1 ms at a time, probed in the moment between two, is no loop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Between {
    /// On a CPU at least as long as it was off one and not waiting for one.
    Computed,
    /// It blocked (a voluntary switch), and was off a CPU, not waiting for one, longer than on
    /// one: found running as it woke.
    Blocked,
    /// Not told: no readings, or mostly off a CPU without a block counted (a wait for a CPU
    /// still going on, which no account shows yet).
    #[default]
    Unknown,
}

/// What a thread did from reading `from` to reading `to` ([`Between`]).
pub(crate) fn between(from: Option<Reading>, to: Option<Reading>) -> Between {
    let (Some(from), Some(to)) = (from, to) else {
        return Between::Unknown;
    };
    let (on_cpu, off) = on_and_off(from, to);
    let blocked = matches!((from.switches, to.switches), (Some(a), Some(b)) if b > a);
    if !on_cpu.is_zero() && on_cpu >= off {
        Between::Computed
    } else if blocked && off > on_cpu {
        Between::Blocked
    } else {
        Between::Unknown
    }
}

/// A stint on a CPU is accounted only when it ends (at the latest at the next tick): this much
/// unaccounted time is allowed to a runnable thread.
pub(crate) const TICK: std::time::Duration = std::time::Duration::from_millis(4);

/// How much of a thread's time off a CPU that no account shows yet (`unaccounted`) counts as
/// blocked, by its state then: all of it for a thread asleep or in a blocking call (`S`, `D`);
/// otherwise at most a [`TICK`], since for a runnable thread it may be a wait for a CPU still
/// going on. The threshold's judgement ([`Baseline::pinned_time`]) and the reason's
/// ([`mostly_off_cpu`]) count it alike.
///
/// [`Baseline::pinned_time`]: super::judge::Baseline::pinned_time
pub(crate) fn blocked_part(
    unaccounted: std::time::Duration,
    state: Option<char>,
) -> std::time::Duration {
    match state {
        Some('S' | 'D') => unaccounted,
        _ => unaccounted.min(TICK),
    }
}

/// The time a thread spent on a CPU from reading `from` to reading `to`, and the time it spent
/// neither on one nor waiting for one (blocked; or a wait for a CPU going on at `to`, which no
/// account shows yet).
fn on_and_off(from: Reading, to: Reading) -> (std::time::Duration, std::time::Duration) {
    let (on_cpu, waited) = to.stat.since(from.stat);
    let off = to
        .at
        .saturating_duration_since(from.at)
        .saturating_sub(on_cpu + waited);
    (on_cpu, off)
}

/// Whether a pin's thread, over its probes' intervals (each from the reading before it: the
/// first's, its baseline), was off a CPU and not waiting for one longer than it was on one:
/// `cpu` then does not win against a block a probe saw, however many probes caught the thread
/// running (on a loaded machine a thread woken from a 40 ms sleep can wait for a CPU through
/// several probes, and run between them the little it has left). An interval's unaccounted
/// time counts by the state the probe found ([`blocked_part`]): for a runnable thread only up
/// to a tick, since it may be a wait for a CPU that has not ended (a starved loop is no block).
pub(crate) fn mostly_off_cpu(probes: &[Probe]) -> bool {
    let (mut on, mut off) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
    for p in probes {
        let (Some(from), Some(to)) = (p.since, p.reading) else {
            continue;
        };
        let (on_cpu, unaccounted) = on_and_off(from, to);
        on += on_cpu;
        off += blocked_part(unaccounted, p.proc.as_ref().map(|s| s.state));
    }
    off > on
}

use crate::poll::slot::SCHEDSTAT_BYTES;

/// Room for the start of `stat` that holds the state: "tid (comm) S ...", the state within the
/// first 40 bytes (a comm is at most 15); the rest of the line is not needed.
const STAT_HEAD_BYTES: usize = 128;

pub(crate) fn read_schedstat(tid: i32) -> Option<SchedStat> {
    let mut buf = [0u8; SCHEDSTAT_BYTES];
    parse_schedstat(read_task(tid, "schedstat", &mut buf)?)
}

fn parse_schedstat(s: &str) -> Option<SchedStat> {
    let (on_cpu, waiting) = crate::poll::slot::parse_schedstat(s)?;
    Some(SchedStat { on_cpu, waiting })
}

/// One slot's thread's `schedstat` and `stat`, kept open: the watchdog reads a stamped slot's
/// thread at every look ([`Before`](super::judge::Before)), and a long poll's thread at each of
/// its close looks, one `pread` and no allocation each time. A file is opened again when the
/// slot's thread changes, and after a read fails (the thread is gone; its id may come back as
/// another thread's); a thread whose file cannot be opened is not tried again.
#[derive(Default)]
pub(super) struct SchedStatReader {
    open: Option<(i32, Option<Kept>)>,
    stat: Option<(i32, Option<Kept>)>,
}

impl SchedStatReader {
    /// Thread `tid`'s accounting now.
    pub fn read(&mut self, tid: i32) -> Option<SchedStat> {
        let mut buf = [0u8; SCHEDSTAT_BYTES];
        let text = kept_read(&mut self.open, tid, "schedstat", &mut buf)?;
        let stat = std::str::from_utf8(text).ok().and_then(parse_schedstat);
        if stat.is_none() {
            self.open = None;
        }
        stat
    }

    /// Thread `tid`'s scheduler state letter, as [`read_state`].
    pub fn state(&mut self, tid: i32) -> Option<char> {
        let mut buf = [0u8; STAT_HEAD_BYTES];
        let text = kept_read(&mut self.stat, tid, "stat", &mut buf)?;
        let state = state_of(text);
        if state.is_none() {
            self.stat = None;
        }
        state
    }
}

/// Reads `/proc/self/task/<tid>/<name>` into `buf` from a file kept open in `open` (opened
/// there when it holds another thread's, or none). A failed read forgets the file.
fn kept_read<'b>(
    open: &mut Option<(i32, Option<Kept>)>,
    tid: i32,
    name: &str,
    buf: &'b mut [u8],
) -> Option<&'b [u8]> {
    use std::os::unix::fs::FileExt;
    if open.as_ref().is_none_or(|(t, _)| *t != tid) {
        // Opened before the old file is dropped, so it may get the number a program freed
        // under the old one: harmless, since the old one is closed only if its descriptor
        // is still its own file (another thread's file is another inode, and the same
        // thread's is reopened only after `open` is cleared below).
        let path = format!("/proc/self/task/{tid}/{name}");
        *open = Some((tid, Kept::open(&path)));
    }
    let kept = open.as_ref()?.1.as_ref()?;
    match kept.file.read_at(buf, 0) {
        Ok(n) => Some(&buf[..n]),
        Err(_) => {
            *open = None;
            None
        }
    }
}

/// A file the watchdog keeps open, with what it is (device and inode): the program may close
/// descriptors it did not open (a `close_range` over all of them), and the number then belongs
/// to whatever file it opens next. Dropped, it is closed only if it is still that file: never
/// someone else's.
struct Kept {
    file: std::mem::ManuallyDrop<std::fs::File>,
    id: (u64, u64),
}

impl Kept {
    fn open(path: &str) -> Option<Kept> {
        let file = std::fs::File::open(path).ok()?;
        let id = Kept::id(&file)?;
        Some(Kept {
            file: std::mem::ManuallyDrop::new(file),
            id,
        })
    }

    fn id(file: &std::fs::File) -> Option<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        file.metadata().ok().map(|m| (m.dev(), m.ino()))
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        if Kept::id(&self.file) == Some(self.id) {
            // SAFETY: dropped once, here, and never used after.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.file) };
        }
        // Otherwise the number is another file's now (or closed): it is left as it is. (A
        // program thread that closes and reopens it between the check and the close would
        // still lose its file: nothing can tell that apart.)
    }
}

/// The thread's scheduler state letter (`R`, `S`, `D`, …).
pub(crate) fn read_state(tid: i32) -> Option<char> {
    let mut buf = [0u8; STAT_HEAD_BYTES];
    state_of(read_task_bytes(tid, "stat", &mut buf)?)
}

/// The state letter in the start of a `stat` line.
fn state_of(stat: &[u8]) -> Option<char> {
    // "tid (comm) S ...": comm may hold spaces and parentheses; the state follows the last ')'
    // (no later field holds one).
    let close = stat.iter().rposition(|&b| b == b')')?;
    let state = *stat[close + 1..]
        .iter()
        .find(|b| !b.is_ascii_whitespace())?;
    state.is_ascii_alphabetic().then_some(char::from(state))
}

/// What a thread waits in, as far as telling who drives a runtime's drivers goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// An `epoll_wait` (or `epoll_pwait`, `epoll_pwait2`) on this epoll file descriptor.
    Epoll(i32),
    /// A `futex` wait.
    Futex,
    /// Another system call, or none (running, or between calls).
    Other,
}

/// What thread `tid` waits in now; `None` if the thread is gone.
pub(crate) fn read_wait(tid: i32) -> Option<Wait> {
    let mut buf = [0u8; SYSCALL_BYTES];
    Some(parse_wait(read_task(tid, "syscall", &mut buf)?))
}

/// `/proc/<tid>/syscall`'s number and first argument, as a [`Wait`].
fn parse_wait(s: &str) -> Wait {
    let mut fields = s.split_whitespace();
    let Some(nr) = fields.next().and_then(|f| f.parse::<libc::c_long>().ok()) else {
        return Wait::Other;
    };
    let epoll = [
        #[cfg(target_arch = "x86_64")]
        libc::SYS_epoll_wait,
        libc::SYS_epoll_pwait,
        libc::SYS_epoll_pwait2,
    ];
    if nr == libc::SYS_futex {
        return Wait::Futex;
    }
    if epoll.contains(&nr) {
        let fd = fields
            .next()
            .and_then(|a| i64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
            .and_then(|fd| i32::try_from(fd).ok());
        if let Some(fd) = fd {
            return Wait::Epoll(fd);
        }
    }
    Wait::Other
}

/// `/proc/<tid>/syscall` holds `running`, or `-1 sp pc` (blocked, not in a system call), or the
/// system call number and its arguments.
fn parse_syscall_file(s: &str) -> Option<&'static str> {
    let first = s.split_whitespace().next()?;
    if first == "running" {
        return None;
    }
    let nr: i64 = first.parse().ok()?;
    if nr < 0 {
        return None;
    }
    Some(syscall_name(nr))
}

/// The name of system call `nr` on this architecture, for the ones a pinned worker is found in.
pub(crate) fn syscall_name(nr: i64) -> &'static str {
    macro_rules! names {
        ($($name:ident),* $(,)?) => {
            $( if nr == libc::$name as i64 { return &stringify!($name)[4..]; } )*
        };
    }
    names!(
        SYS_read,
        SYS_write,
        SYS_readv,
        SYS_writev,
        SYS_pread64,
        SYS_pwrite64,
        SYS_preadv,
        SYS_pwritev,
        SYS_recvfrom,
        SYS_sendto,
        SYS_recvmsg,
        SYS_sendmsg,
        SYS_recvmmsg,
        SYS_sendmmsg,
        SYS_connect,
        SYS_accept,
        SYS_accept4,
        SYS_ppoll,
        SYS_pselect6,
        SYS_epoll_pwait,
        SYS_fsync,
        SYS_fdatasync,
        SYS_sync_file_range,
        SYS_openat,
        SYS_close,
        SYS_sendfile,
        SYS_splice,
        SYS_getrandom,
        SYS_flock,
        SYS_fcntl,
        SYS_ioctl,
        SYS_nanosleep,
        SYS_clock_nanosleep,
        SYS_futex,
        SYS_wait4,
        SYS_waitid,
        SYS_rt_sigsuspend,
        SYS_rt_sigtimedwait,
        SYS_sched_yield,
        SYS_mmap,
        SYS_munmap,
        SYS_madvise,
        SYS_getdents64,
        SYS_statx,
        SYS_newfstatat,
        SYS_unlinkat,
        SYS_renameat,
        SYS_mkdirat,
        SYS_ftruncate,
        SYS_fallocate,
        SYS_io_uring_enter,
        SYS_io_getevents,
    );
    #[cfg(target_arch = "x86_64")]
    {
        names!(
            SYS_open,
            SYS_poll,
            SYS_select,
            SYS_epoll_wait,
            SYS_pause,
            SYS_stat,
            SYS_lstat,
            SYS_fstat,
            SYS_unlink,
            SYS_rename,
            SYS_mkdir,
        );
    }
    "unknown"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The device and inode of the file open at `fd`, if one is, as [`Kept`] tells its own.
    fn file_id(fd: i32) -> Option<(u64, u64)> {
        use std::os::fd::FromRawFd;
        // SAFETY: only asked about (`fstat`), never closed through this `File`: `ManuallyDrop`.
        let file = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
        Kept::id(&file)
    }

    /// The descriptor `reader` keeps open.
    fn kept_fd(reader: &SchedStatReader) -> i32 {
        use std::os::fd::AsRawFd;
        let (_, kept) = reader.open.as_ref().expect("a thread read");
        kept.as_ref().expect("its file open").file.as_raw_fd()
    }

    #[test]
    fn a_descriptor_another_file_took_over_is_left_open() {
        use std::os::fd::AsRawFd;
        let me = crate::poll::slot::current_tid();
        let mut reader = SchedStatReader::default();
        assert!(reader.read(me).is_some());
        let fd = kept_fd(&reader);
        // The program closes descriptors it did not open, and another file gets the number.
        let other = std::fs::File::open("/proc/self/comm").unwrap();
        // SAFETY: both are open descriptors; `dup2` makes `fd` a copy of `other`'s, atomically.
        assert_eq!(unsafe { libc::dup2(other.as_raw_fd(), fd) }, fd);
        assert_eq!(reader.read(me), None);
        // Still open, and still that file: the reader did not close what is now somebody
        // else's. (Not merely open: another test's file could have taken a closed number.)
        assert_eq!(file_id(fd), Kept::id(&other), "closed");
        // SAFETY: the reader forgot it; this test made it (checked just above).
        unsafe { libc::close(fd) };
        // And it reads the thread again, from a file of its own.
        assert!(reader.read(me).is_some());

        // A pipe, where a read at an offset fails (`ESPIPE`) instead of reading garbage; and a
        // reader dropped (its slot's thread gone) or moved to another thread while the number
        // is somebody else's.
        for how in ["read", "drop", "another thread"] {
            let mut reader = SchedStatReader::default();
            assert!(reader.read(me).is_some());
            let fd = kept_fd(&reader);
            let mut pipe = [0; 2];
            // SAFETY: `pipe` has room for the two descriptors it writes.
            assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
            // SAFETY: open descriptors; `fd` becomes a copy of the pipe's read end.
            assert_eq!(unsafe { libc::dup2(pipe[0], fd) }, fd);
            match how {
                "read" => assert_eq!(reader.read(me), None),
                "drop" => drop(reader),
                _ => {
                    let _ = reader.read(-1);
                }
            }
            assert_eq!(file_id(fd), file_id(pipe[0]), "{how}: closed");
            for d in [fd, pipe[0], pipe[1]] {
                // SAFETY: this test's own descriptors (`fd` checked just above), each closed
                // once.
                unsafe { libc::close(d) };
            }
        }
    }

    #[test]
    fn a_kept_open_schedstat_reads_what_a_fresh_read_does_and_follows_the_thread() {
        let me = crate::poll::slot::current_tid();
        let mut reader = SchedStatReader::default();
        let kept = reader.read(me).unwrap();
        // 20 ms on a CPU, five ticks: the kernel accounts some of it, whatever the load.
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(20) {
            std::hint::spin_loop();
        }
        let fresh = read_schedstat(me).unwrap();
        assert!(fresh.on_cpu > kept.on_cpu, "{fresh:?} {kept:?}");
        // The file kept open reads the thread's accounting now, not what it read first.
        let again = reader.read(me).unwrap();
        assert!(again.on_cpu >= fresh.on_cpu, "{again:?} {fresh:?}");
        // Another thread's, once it is the slot's.
        with_another_thread(|tid| {
            let theirs = reader.read(tid).unwrap();
            let later = read_schedstat(tid).unwrap();
            assert!(
                theirs.on_cpu <= later.on_cpu && theirs.waiting <= later.waiting,
                "{theirs:?} {later:?}"
            );
            // Not this thread's, which has run 20 ms more than it.
            assert!(theirs.on_cpu < again.on_cpu, "{theirs:?} {again:?}");
        });
        // No such thread: no reading. (Not the joined one's: its `/proc` entry may outlive the
        // join for a moment.)
        assert_eq!(reader.read(-1), None);
    }

    /// A task file is read whole in one read when it fits, cut where it does not (text ends at
    /// its last whole character), and a thread whose name is not UTF-8 is still read.
    #[test]
    fn a_task_file_is_read_in_one_go_whole_or_cut() {
        let me = crate::poll::slot::current_tid();
        // Room for any status: hundreds of supplementary groups put one past 4 KiB.
        let mut big = vec![0u8; 1 << 20];
        let whole = read_task(me, "status", &mut big).unwrap().to_owned();
        assert!(
            whole.len() < big.len() && whole.ends_with('\n') && whole.contains("\nSigBlk:\t"),
            "{whole}"
        );
        let mut small = [0u8; 24];
        let cut = read_task(me, "status", &mut small).unwrap();
        assert_eq!(cut, &whole[..24]);
        assert!(signal_status(me, libc::SIGUSR1).is_some());
        assert_eq!(read_task(-1, "status", &mut big), None);
        // A name with a byte that is not UTF-8 (`pthread_setname_np` and the `comm` file take
        // any byte but NUL): `read_to_string` failed on its `stat` and `status`.
        with_another_thread(|tid| {
            std::fs::write(format!("/proc/self/task/{tid}/comm"), b"bad\xffname").unwrap();
            let mut stat = [0u8; STAT_HEAD_BYTES];
            let raw = read_task_bytes(tid, "stat", &mut stat).unwrap();
            assert!(raw.windows(4).any(|w| w == b"\xffnam"), "{raw:?}");
            // Asleep on a channel most likely, but any state will do (`D` on a page fault, `t`
            // under a tracer): that it is read at all is the point.
            assert!(read_state(tid).is_some());
            assert!(read_proc(tid).is_some());
            assert!(signal_status(tid, libc::SIGUSR1).is_some());
            // As text, `status` stops before the name's bad byte.
            let status = read_task(tid, "status", &mut big).unwrap();
            assert_eq!(status, "Name:\tbad");
        });
    }

    #[test]
    fn the_state_is_the_letter_after_the_last_parenthesis() {
        assert_eq!(state_of(b"42 (tokio-rt-worker) S 1 42"), Some('S'));
        // A comm of spaces and parentheses, and a line cut short after the state.
        assert_eq!(state_of(b"7 (a) R (b)) D"), Some('D'));
        assert_eq!(state_of(b"7 (x)  R"), Some('R'));
        // Nothing after the comm, no comm, or no letter: no state.
        assert_eq!(state_of(b"7 (x) "), None);
        assert_eq!(state_of(b"7 x S"), None);
        assert_eq!(state_of(b"7 (x) 1 2"), None);
    }

    #[test]
    fn a_kept_open_stat_reads_the_threads_state_now() {
        let me = crate::poll::slot::current_tid();
        let mut reader = SchedStatReader::default();
        // Running, as a fresh read says.
        assert_eq!(reader.state(me), Some('R'));
        assert_eq!(read_state(me), Some('R'));
        // Another thread, asleep on a channel: read from the same reader, now its file.
        with_another_thread(|tid| {
            // It may not be asleep yet: a state it may be in on its way there.
            let theirs = reader.state(tid).unwrap();
            assert!("RS".contains(theirs), "{theirs}");
        });
        assert_eq!(reader.state(-1), None);
    }

    /// Runs `f` with the id of another thread, which waits on a channel until `f` returns.
    fn with_another_thread(f: impl FnOnce(i32)) {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            tx.send(crate::poll::slot::current_tid()).unwrap();
            let _ = done_rx.recv();
        });
        f(rx.recv().unwrap());
        drop(done_tx);
        other.join().unwrap();
    }

    #[test]
    fn waits_are_read_from_the_syscall_file() {
        let epoll = format!(
            "{} 0x7 0x7f00 0x400 0xffffffff 0x0 0x8 0x7ff 0x7f0\n",
            libc::SYS_epoll_pwait
        );
        assert_eq!(parse_wait(&epoll), Wait::Epoll(7));
        let futex = format!(
            "{} 0x7f00 0x189 0x0 0x0 0x0 0xffffffff 0x7ff 0x7f0\n",
            libc::SYS_futex
        );
        assert_eq!(parse_wait(&futex), Wait::Futex);
        assert_eq!(parse_wait("running\n"), Wait::Other);
        assert_eq!(parse_wait("-1 0x7ffd 0x7f00\n"), Wait::Other);
        let read = format!("{} 0x3 0x0\n", libc::SYS_read);
        assert_eq!(parse_wait(&read), Wait::Other);
        // A thread parked in a real epoll_wait is seen in it, on its own descriptor.
        // SAFETY: a plain system call; the descriptor it returns is closed below.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        assert!(ep >= 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            tx.send(crate::poll::slot::current_tid()).unwrap();
            let mut ev = libc::epoll_event { events: 0, u64: 0 };
            // SAFETY: a valid epoll descriptor and one event of room; returns after 3 s.
            unsafe { libc::epoll_wait(ep, &mut ev, 1, 3000) };
        });
        let tid = rx.recv().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        let mut seen = read_wait(tid);
        while seen != Some(Wait::Epoll(ep)) && std::time::Instant::now() < deadline {
            std::thread::yield_now();
            seen = read_wait(tid);
        }
        assert_eq!(seen, Some(Wait::Epoll(ep)));
        waiter.join().unwrap();
        // SAFETY: closes the descriptor made above, used by no one now.
        unsafe { libc::close(ep) };
    }

    #[test]
    fn syscall_file_forms() {
        assert_eq!(parse_syscall_file("running\n"), None);
        assert_eq!(parse_syscall_file("-1 0x7ffd 0x7f00\n"), None);
        let line = format!("{} 0x0 0x1 0x2 0x3 0x4 0x5 0x7ff 0x7f0\n", libc::SYS_futex);
        assert_eq!(parse_syscall_file(&line), Some("futex"));
        let line = format!("{} 0x0\n", libc::SYS_clock_nanosleep);
        assert_eq!(parse_syscall_file(&line), Some("clock_nanosleep"));
        assert_eq!(syscall_name(100_000), "unknown");
    }

    /// Blocks (`SIG_BLOCK`) or unblocks (`SIG_UNBLOCK`) the sampling signal on this thread.
    fn mask_sample_signal(how: libc::c_int) {
        // SAFETY: a zeroed sigset is valid input for sigemptyset; the mask changed is this
        // thread's only.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, signal::sample_signal());
            libc::pthread_sigmask(how, &set, std::ptr::null_mut());
        }
    }

    /// A worker blocked in a socket read with a timeout is not signalled: the signal would end
    /// the read with `Interrupted` (`SA_RESTART` does not restart it), where it would have
    /// waited. Without a timeout it is signalled and sampled, and the read goes on. Set up for
    /// certain: the probe runs once the thread is seen in the read, and the read ends when the
    /// test writes to the socket.
    #[test]
    fn a_read_with_a_timeout_is_not_cut_short_by_a_sample() {
        use std::io::{Read, Write};
        use std::sync::mpsc;
        crate::signal::install_handler().unwrap();
        for timeout in [Some(std::time::Duration::from_secs(60)), None] {
            let (table, hooks, watched) = watched_table();
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (mut server, _) = listener.accept().unwrap();
            client.set_read_timeout(timeout).unwrap();
            let (to_test, test_rx) = mpsc::channel::<()>();
            let worker = std::thread::spawn(move || {
                hooks.before_poll_raw(1, std::panic::Location::caller());
                to_test.send(()).unwrap();
                let read = client.read(&mut [0u8; 8]).map_err(|e| e.kind());
                hooks.after_poll_raw();
                read
            });
            test_rx.recv().unwrap();
            let slot = table.slots().iter().find(|s| s.is_active()).unwrap();
            let seq = slot.poll.seq();
            let tid = slot.tid.load(Ordering::Relaxed);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !read_proc(tid)
                .and_then(|p| p.syscall)
                .is_some_and(|s| matches!(s, "read" | "recvfrom"))
            {
                assert!(std::time::Instant::now() < deadline, "never in the read");
                std::thread::yield_now();
            }
            let probe = take(&watched, slot, seq, None, Stacks::Short).unwrap();
            if timeout.is_some() {
                assert_eq!(probe.no_stack, Some("socket_timeout"), "{probe:?}");
                assert!(!probe.signalled, "{probe:?}");
            } else {
                assert!(probe.stack.is_some(), "{probe:?}");
            }
            server.write_all(b"x").unwrap();
            assert_eq!(worker.join().unwrap(), Ok(1), "timeout {timeout:?}");
        }
    }

    /// Which calls on which sockets a signal would cut short: a receive or an accept where the
    /// socket has a receive timeout, a send or a connect where it has a send timeout; never a
    /// socket without one, nor a file.
    #[test]
    fn calls_on_sockets_with_timeouts_are_the_ones_cut_short() {
        use std::os::fd::AsRawFd;
        let set = |fd: i32, option: libc::c_int| {
            let t = libc::timeval {
                tv_sec: 3,
                tv_usec: 0,
            };
            // SAFETY: sets a timeval option of a socket of this test's, from a live timeval.
            let rc = unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    option,
                    std::ptr::addr_of!(t).cast(),
                    std::mem::size_of::<libc::timeval>() as libc::socklen_t,
                )
            };
            assert_eq!(rc, 0);
        };
        let at = |syscall: &'static str, fd: i32, kind: FdKind| ProcState {
            state: 'S',
            syscall: Some(syscall),
            fd: Some((fd, kind)),
            io_calls: None,
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let l = listener.as_raw_fd();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let c = client.as_raw_fd();
        for call in ["accept", "accept4", "recvfrom", "connect", "sendto"] {
            assert!(!cut_short_by_signal(&at(call, l, FdKind::Socket)), "{call}");
            assert!(!cut_short_by_signal(&at(call, c, FdKind::Socket)), "{call}");
        }
        set(l, libc::SO_RCVTIMEO);
        set(c, libc::SO_SNDTIMEO);
        for call in ["accept", "accept4", "recvmmsg", "read"] {
            assert!(cut_short_by_signal(&at(call, l, FdKind::Socket)), "{call}");
            assert!(!cut_short_by_signal(&at(call, c, FdKind::Socket)), "{call}");
        }
        for call in ["connect", "sendmmsg", "write"] {
            assert!(cut_short_by_signal(&at(call, c, FdKind::Socket)), "{call}");
            assert!(!cut_short_by_signal(&at(call, l, FdKind::Socket)), "{call}");
        }
        // Not a socket, or a call no timeout ends early.
        assert!(!cut_short_by_signal(&at("read", l, FdKind::Pipe)));
        assert!(!cut_short_by_signal(&at("fsync", l, FdKind::Socket)));
    }

    /// A slot table of four, its hooks, and the watchdog's view of it.
    fn watched_table() -> (
        std::sync::Arc<crate::poll::slot::SlotTable>,
        crate::poll::PollHooks,
        Shared,
    ) {
        use std::sync::Arc;
        let table = Arc::new(crate::poll::slot::SlotTable::new(4));
        let hooks = crate::poll::PollHooks::new(Some(Arc::clone(&table)));
        let watched = Shared::new(
            Arc::clone(&table),
            crate::Config::default(),
            None,
            "test".into(),
        );
        (table, hooks, watched)
    }

    /// A sample that arrives after its poll ended — the thread took the signal only in its next
    /// poll — is never attached to the earlier poll.
    #[test]
    fn a_sample_of_another_poll_is_never_attached() {
        use std::sync::mpsc;
        crate::signal::install_handler().unwrap();
        let (table, hooks, watched) = watched_table();
        let (to_worker, worker_rx) = mpsc::channel::<()>();
        let (to_test, test_rx) = mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            let here = std::panic::Location::caller();
            mask_sample_signal(libc::SIG_BLOCK);
            hooks.before_poll_raw(1, here); // poll 1: the signal cannot reach it
            to_test.send(()).unwrap();
            worker_rx.recv().unwrap();
            hooks.after_poll_raw();
            hooks.before_poll_raw(2, here); // poll 2 takes the signal
            mask_sample_signal(libc::SIG_UNBLOCK); // the handler runs now
            to_test.send(()).unwrap();
            worker_rx.recv().unwrap();
            hooks.after_poll_raw();
        });
        test_rx.recv().unwrap();
        let slot = table.slots().iter().find(|s| s.is_active()).unwrap();
        let seq1 = slot.poll.seq();
        // Asked while poll 1 runs (bypassing the SigBlk check, as a race with the mask would):
        // no answer, and the request stays outstanding. Waited for in one sleep, on a futex the
        // handler wakes: a loop of 20 µs sleeps woke the watchdog 600–650 times in the 50 ms.
        let switches = own_voluntary_switches().unwrap();
        let asked = signal::request(slot, slot.tid.load(Ordering::Relaxed));
        let slept = own_voluntary_switches().unwrap() - switches;
        assert!(matches!(asked, signal::Outcome::Sent), "{asked:?}");
        assert!(slept <= 3, "{slept} sleeps in one wait for a sample");
        to_worker.send(()).unwrap();
        test_rx.recv().unwrap();
        // The handler has run in poll 2: a probe for poll 1 must not take its stack.
        // Nor what `/proc` says of its thread now: that is poll 2's state. No probe at all.
        let probe = take(&watched, slot, seq1, None, Stacks::Short);
        assert!(probe.is_none(), "{probe:?}");
        // The same probe for the poll that is running does get a stack.
        let seq2 = slot.poll.seq();
        assert_ne!(seq1, seq2);
        let probe = take(&watched, slot, seq2, None, Stacks::Short).unwrap();
        assert!(probe.stack.is_some(), "{probe:?}");
        to_worker.send(()).unwrap();
        worker.join().unwrap();
    }

    /// An answer ends the watchdog's wait for a sample at once, whatever its timer slack: it
    /// sleeps once, on a futex the handler wakes (200 ms of slack here; in a loop of 20 µs
    /// sleeps, the first could end that late on an idle CPU). The thread computes, so that its
    /// handler runs while the watchdog waits (asleep, it could run while the signal's sender
    /// waited for a CPU, and be done before the wait began).
    #[test]
    fn an_answer_ends_the_wait_for_a_sample_whatever_the_timer_slack() {
        use std::sync::atomic::AtomicBool;
        use std::sync::{mpsc, Arc};
        crate::signal::install_handler().unwrap();
        let (table, hooks, _watched) = watched_table();
        let (to_test, test_rx) = mpsc::channel::<()>();
        let done = Arc::new(AtomicBool::new(false));
        let worker = std::thread::spawn({
            let done = Arc::clone(&done);
            move || {
                hooks.before_poll_raw(1, std::panic::Location::caller());
                to_test.send(()).unwrap();
                while !done.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
                hooks.after_poll_raw();
            }
        });
        test_rx.recv().unwrap();
        let slot = table.slots().iter().find(|s| s.is_active()).unwrap();
        let seq = slot.poll.seq();
        // SAFETY: PR_SET_TIMERSLACK takes one integer and sets this thread's timer slack.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 200_000_000 as libc::c_ulong) };
        let asked = signal::request(slot, slot.tid.load(Ordering::Relaxed));
        // SAFETY: as above; 0 puts back the thread's default slack.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 0 as libc::c_ulong) };
        done.store(true, Ordering::Relaxed);
        worker.join().unwrap();
        match asked {
            signal::Outcome::Sample(s) => {
                assert_eq!(s.seq, seq, "{s:?}");
                assert!(
                    s.round_trip < std::time::Duration::from_millis(100),
                    "{s:?}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    /// The race behind a wrong `io` (`epoll_wait`) verdict: a probe for a poll that has just
    /// ended, its worker already parked in the runtime's `epoll_wait`. Set up for certain: the
    /// poll ends, the thread is seen waiting in `epoll_wait`, then the probe runs. It is no
    /// probe at all: nothing of the thread (no system call, no stack, so no reason) is kept.
    #[test]
    fn a_probe_after_the_poll_ended_says_nothing_of_what_the_thread_does_next() {
        use std::sync::mpsc;
        let (table, hooks, watched) = watched_table();
        // SAFETY: plain system calls on descriptors made here (closed below); the event names
        // the eventfd, which wakes the waiter when written.
        let (ep, wake) = unsafe {
            let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
            let wake = libc::eventfd(0, libc::EFD_CLOEXEC);
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: 0,
            };
            assert_eq!(libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, wake, &mut ev), 0);
            (ep, wake)
        };
        assert!(ep >= 0 && wake >= 0);
        let (to_test, test_rx) = mpsc::channel::<()>();
        let (to_worker, worker_rx) = mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            hooks.before_poll_raw(1, std::panic::Location::caller());
            to_test.send(()).unwrap();
            worker_rx.recv().unwrap();
            hooks.after_poll_raw();
            let mut ev = libc::epoll_event { events: 0, u64: 0 };
            // SAFETY: a valid epoll descriptor and one event of room; returns after 5 s.
            unsafe { libc::epoll_wait(ep, &mut ev, 1, 5000) };
        });
        test_rx.recv().unwrap();
        let slot = table.slots().iter().find(|s| s.is_active()).unwrap();
        let seq = slot.poll.seq();
        let tid = slot.tid.load(Ordering::Relaxed);
        // While the poll runs, a probe reads its thread.
        let running = take(&watched, slot, seq, None, Stacks::Off).unwrap();
        assert!(running.proc.is_some(), "{running:?}");
        to_worker.send(()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while read_wait(tid) != Some(Wait::Epoll(ep)) {
            assert!(std::time::Instant::now() < deadline, "never in epoll_wait");
            std::thread::yield_now();
        }
        // Nothing of the thread: no system call, no stack, so no reason.
        let late = take(&watched, slot, seq, None, Stacks::Short);
        assert!(late.is_none(), "{late:?}");
        // SAFETY: writes 8 bytes to the eventfd (its counter), which ends the wait.
        unsafe { libc::write(wake, [1u8, 0, 0, 0, 0, 0, 0, 0].as_ptr().cast(), 8) };
        worker.join().unwrap();
        // SAFETY: closes the descriptors made above, used by no one now.
        unsafe {
            libc::close(ep);
            libc::close(wake);
        }
    }

    #[test]
    fn signal_masks() {
        assert!(mask_has("0000000000000001", 1));
        assert!(!mask_has("0000000000000001", 2));
        // SIGRTMIN+6 is 40 with glibc: bit 39, digit 9 from the right, value 8.
        assert!(mask_has("0000008000000000", 40));
        assert!(!mask_has("0000004000000000", 40));
        assert!(!mask_has("", 40));
    }

    /// Every state of the request against every view of the signal. The one that matters:
    /// a thread inside the handler (writing, or done and not yet returned) shows the signal
    /// blocked — by the handler's own mask — and must be sampled, not called `signal_blocked`.
    #[test]
    fn the_probe_chooses_from_the_request_and_the_masks() {
        use signal::Request::*;
        let st = |blocked, pending| Some(SignalStatus { blocked, pending });
        let cases = [
            (Idle, st(false, false), Next::Sample),
            (Idle, st(true, false), Next::NoStack("signal_blocked")),
            (Idle, st(true, true), Next::NoStack("signal_blocked")),
            (Idle, None, Next::Sample),
            (Requested, st(false, true), Next::NoStack("signal_pending")),
            (Requested, st(true, true), Next::NoStack("signal_blocked")),
            (Requested, st(false, false), Next::AskAgain),
            (Requested, st(true, false), Next::AskAgain),
            (Requested, None, Next::NoStack("signal_pending")),
            (Writing, st(true, false), Next::Sample),
            (Writing, st(false, false), Next::Sample),
            (Done, st(true, false), Next::TakeWaiting),
            (Done, st(false, false), Next::Sample),
            (Done, None, Next::Sample),
        ];
        for (request, status, want) in cases {
            assert_eq!(next_step(request, status), want, "{request:?} {status:?}");
        }
    }

    /// A thread between the handler's `DONE` and its return shows the signal blocked, by the
    /// handler's own mask. Set up for certain: the thread blocks the signal as that mask does,
    /// and its sample waits, as the handler leaves it. The probe takes the sample.
    #[test]
    fn a_sample_left_by_a_handler_is_taken_though_the_mask_blocks_the_signal() {
        use std::sync::mpsc;
        crate::signal::install_handler().unwrap();
        let (table, hooks, watched) = watched_table();
        let (to_worker, worker_rx) = mpsc::channel::<()>();
        let (to_test, test_rx) = mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            mask_sample_signal(libc::SIG_BLOCK);
            hooks.before_poll_raw(1, std::panic::Location::caller());
            to_test.send(()).unwrap();
            worker_rx.recv().unwrap();
            hooks.after_poll_raw();
        });
        test_rx.recv().unwrap();
        let slot = table.slots().iter().find(|s| s.is_active()).unwrap();
        let seq = slot.poll.seq();
        let tid = slot.tid.load(Ordering::Relaxed);
        assert!(signal_status(tid, signal::sample_signal()).is_some_and(|s| s.blocked));
        signal::leave_sample(slot, seq, &[0x1234, 0x5678]);
        let probe = take(&watched, slot, seq, None, Stacks::Short).unwrap();
        assert_eq!(probe.stack, Some(vec![0x1234, 0x5678]), "{probe:?}");
        assert_eq!(probe.no_stack, None);
        // With no sample waiting, the same mask is the thread's own: `signal_blocked`.
        let probe = take(&watched, slot, seq, None, Stacks::Short).unwrap();
        assert_eq!(probe.no_stack, Some("signal_blocked"), "{probe:?}");
        // A sample an earlier poll left: thrown away, and no signal sent to a thread that
        // blocks it (it would wait the whole SAMPLE_WAIT, and count a missed sample).
        signal::leave_sample(slot, seq - 1, &[0x1234]);
        let probe = take(&watched, slot, seq, None, Stacks::Short).unwrap();
        assert_eq!(probe.no_stack, Some("signal_blocked"), "{probe:?}");
        assert!(!probe.signalled, "{probe:?}");
        assert_eq!(signal::request_state(slot), signal::Request::Idle);
        to_worker.send(()).unwrap();
        worker.join().unwrap();
    }

    #[test]
    fn sees_a_thread_that_blocks_the_sampling_signal() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            mask_sample_signal(libc::SIG_BLOCK);
            tx.send(crate::poll::slot::current_tid()).unwrap();
            done_rx.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        // The handler does nothing without a request; without it the signal would kill us.
        crate::signal::install_handler().unwrap();
        let sig = crate::signal::sample_signal();
        assert!(signal_status(tid, sig).is_some_and(|s| s.blocked && !s.pending));
        // SAFETY: sends the (blocked, so pending) signal to that thread.
        unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, sig) };
        assert!(signal_status(tid, sig).is_some_and(|s| s.blocked && s.pending));
        let me = crate::poll::slot::current_tid();
        assert!(signal_status(me, sig).is_some_and(|s| !s.blocked));
        // A status longer than the buffer (many groups come before the masks) is read whole:
        // neither the masks missing (16 bytes) nor `SigBlk`'s line cut after 8 of its 16
        // digits, which read from the right would put the blocked signal's bit past the end.
        let status = std::fs::read(format!("/proc/self/task/{tid}/status")).unwrap();
        let at = status.windows(8).position(|w| w == b"SigBlk:\t").unwrap();
        for room in [16, at + 8 + 8] {
            let st = signal_status_in(tid, sig, &mut vec![0u8; room]);
            assert!(st.is_some_and(|s| s.blocked && s.pending), "{room}: {st:?}");
        }
        done_tx.send(()).unwrap();
        t.join().unwrap();
    }

    /// `between` as a function of the readings it is given.
    #[test]
    fn between_tells_a_block_from_a_loop_and_from_a_wait_for_a_cpu() {
        let t0 = std::time::Instant::now();
        let ms = std::time::Duration::from_millis;
        let r = |at: u64, on_cpu: u64, waiting: u64, switches: Option<u64>| Reading {
            at: t0 + ms(at),
            stat: SchedStat {
                on_cpu: on_cpu * 1_000_000,
                waiting: waiting * 1_000_000,
            },
            switches,
        };
        let start = Some(r(0, 100, 50, Some(7)));
        // On a CPU for most of the time not spent waiting for one: computed.
        assert_eq!(
            between(start, Some(r(100, 160, 90, Some(7)))),
            Between::Computed
        );
        assert_eq!(
            between(start, Some(r(100, 150, 50, Some(9)))),
            Between::Computed
        );
        // Blocked, and off a CPU (not waiting for one) longer than on one: woken.
        assert_eq!(
            between(start, Some(r(40, 101, 52, Some(42)))),
            Between::Blocked
        );
        // Off a CPU with no block counted: a wait for a CPU not yet accounted — not told.
        assert_eq!(
            between(start, Some(r(100, 100, 50, Some(7)))),
            Between::Unknown
        );
        // No switch counts, or no reading: not told.
        assert_eq!(between(start, Some(r(40, 101, 52, None))), Between::Unknown);
        assert_eq!(
            between(None, Some(r(40, 101, 52, Some(42)))),
            Between::Unknown
        );
        assert_eq!(between(start, None), Between::Unknown);
        // A pin, from its first probe's baseline to its last probe: mostly off a CPU, or not.
        let probe = |since: Option<Reading>, reading: Option<Reading>| Probe {
            since,
            reading,
            ..Probe::default()
        };
        let state = |p: Probe, state: char| Probe {
            proc: Some(ProcState {
                state,
                ..ProcState::default()
            }),
            ..p
        };
        let (b, at40) = (start, Some(r(40, 101, 60, Some(8))));
        // A 40 ms sleep seen by the first probe (30 ms of its 40 since the baseline off a
        // CPU), then a thread runnable, waiting for a CPU, running 2 ms in 260: mostly off.
        let slept = [
            state(probe(b, at40), 'S'),
            state(probe(at40, Some(r(300, 103, 310, Some(8)))), 'R'),
        ];
        assert!(mostly_off_cpu(&slept));
        // A loop: on a CPU most of the time.
        let looped = [
            state(probe(b, at40), 'S'),
            state(probe(at40, Some(r(300, 290, 110, Some(8)))), 'R'),
        ];
        assert!(!mostly_off_cpu(&looped));
        // A starved loop whose last probe came in a wait for a CPU not yet accounted (40 ms on
        // a CPU, 210 ms unaccounted): that wait is no block.
        let at40 = Some(r(40, 130, 60, Some(7)));
        let starved = [
            state(probe(b, at40), 'R'),
            state(probe(at40, Some(r(300, 140, 70, Some(7)))), 'R'),
        ];
        assert!(!mostly_off_cpu(&starved));
        assert!(!mostly_off_cpu(&[probe(
            None,
            Some(r(300, 103, 310, None))
        )]));
        assert!(!mostly_off_cpu(&[]));
    }

    /// `between` on real threads: one that sleeps 1 ms at a time blocked; one that spins
    /// computed — however busy the machine (a wait for a CPU is accounted once it ends, and
    /// each is read after it has ended).
    #[test]
    fn between_reads_real_threads() {
        let read = |tid: i32| Reading {
            at: std::time::Instant::now(),
            stat: read_schedstat(tid).unwrap(),
            switches: voluntary_switches(tid),
        };
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<bool>();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            let me = crate::poll::slot::current_tid();
            tid_tx.send(me).unwrap();
            while let Ok(spin) = go_rx.recv() {
                if spin {
                    // 30 ms on a CPU, by its own accounting.
                    let start = read_schedstat(me).unwrap().on_cpu;
                    while read_schedstat(me).unwrap().on_cpu < start + 30_000_000 {
                        for _ in 0..10_000 {
                            std::hint::spin_loop();
                        }
                    }
                } else {
                    for _ in 0..30 {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
                done_tx.send(read(me)).unwrap();
            }
        });
        let tid = tid_rx.recv().unwrap();
        for (spin, expected) in [(false, Between::Blocked), (true, Between::Computed)] {
            let from = read(tid);
            go_tx.send(spin).unwrap();
            let to = done_rx.recv().unwrap();
            assert_eq!(between(Some(from), Some(to)), expected, "{from:?} {to:?}");
        }
        drop(go_tx);
        t.join().unwrap();
    }

    #[test]
    fn voluntary_switches_count_blocks_and_not_time_on_the_cpu() {
        let me = crate::poll::slot::current_tid();
        let before = voluntary_switches(me).unwrap();
        // A spin with no system call: nothing blocks (a preemption is not voluntary).
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(5) {
            std::hint::spin_loop();
        }
        let spun = voluntary_switches(me).unwrap();
        assert_eq!(spun, before);
        // A sleep blocks: one switch at least.
        std::thread::sleep(std::time::Duration::from_millis(1));
        let slept = voluntary_switches(me).unwrap();
        assert!(slept > spun, "{spun} then {slept}");
        // Read whole when the status does not fit (the count is on one of its last lines).
        assert_eq!(voluntary_switches_in(me, &mut [0u8; 64]), Some(slept));
        assert_eq!(voluntary_switches(-1), None);
    }

    #[test]
    fn reads_a_sleeping_thread() {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            tx.send(crate::poll::slot::current_tid()).unwrap();
            std::thread::sleep(std::time::Duration::from_secs(2));
        });
        let tid = rx.recv().unwrap();
        // Until the thread is in its sleep (bounded: a loaded machine may take a while).
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(1900);
        let p = loop {
            let p = read_proc(tid).expect("/proc entry of a live thread");
            if p.syscall.is_some() || std::time::Instant::now() > deadline {
                break p;
            }
            std::thread::yield_now();
        };
        assert_eq!(p.state, 'S');
        assert_eq!(p.syscall, Some("clock_nanosleep"));
        t.join().unwrap();
        assert!(read_proc(i32::MAX).is_none());
    }
}
