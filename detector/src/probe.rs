//! Probing a pinned thread from the watchdog: its scheduler state and system call from `/proc`,
//! and a stack sample (see [`crate::stack`]). Runs on the watchdog thread, never on a worker.

use crate::runtime::Shared;
use crate::slot::Slot;

/// The thread's state as `/proc/self/task/<tid>/stat` and `syscall` tell it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ProcState {
    /// `R` running, `S` sleeping, `D` disk sleep, …
    pub state: char,
    /// `None` while running in user space; `Some(name)` while in a system call.
    pub syscall: Option<&'static str>,
}

/// One look at a pinned thread.
#[derive(Clone, Debug, Default)]
pub(crate) struct Probe {
    pub proc: Option<ProcState>,
    /// Instruction pointers, innermost first, when a stack sample arrived.
    pub stack: Option<Vec<usize>>,
    /// Instrumented locks held (kind, acquisition site), see [`crate::sync`].
    pub held: Vec<crate::sync::HeldRaw>,
    /// The instrumented lock the thread is waiting for, and who holds it.
    pub waiting_for: Option<crate::sync::WaitRaw>,
    /// Whether a signal was sent for this probe (false: the previous stack was reused).
    pub signalled: bool,
}

/// Takes one probe of `slot`'s thread. A thread still blocked in the same system call as at the
/// `previous` probe is not signalled again — its stack has not moved, and each signal interrupts
/// the call (see the README's "Signals") — the previous stack stands.
pub(crate) fn take(shared: &Shared, slot: &Slot, previous: Option<&Probe>) -> Probe {
    let tid = slot.tid.load(std::sync::atomic::Ordering::Relaxed);
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
    let stacks_on = shared.config.stacks != crate::Stacks::Off;
    let stack = if !stacks_on {
        None
    } else if unchanged {
        previous.and_then(|p| p.stack.clone())
    } else {
        crate::stack::sample(slot, tid).map(|sample| {
            let stats = &shared.stats;
            let ns = |d: std::time::Duration| d.as_nanos() as u64;
            let relaxed = std::sync::atomic::Ordering::Relaxed;
            stats
                .sample_handler_ns
                .fetch_add(ns(sample.handler), relaxed);
            stats
                .sample_round_trip_ns
                .fetch_add(ns(sample.round_trip), relaxed);
            sample.ips
        })
    };
    let held = crate::sync::held_by(slot);
    let waiting_for = crate::sync::waiting_for(shared, slot);
    Probe {
        proc,
        stack,
        held,
        waiting_for,
        signalled: stacks_on && !unchanged,
    }
}

/// Reads the thread's state and current system call. `None` if the thread is gone.
pub(crate) fn read_proc(tid: i32) -> Option<ProcState> {
    let state = read_state(tid)?;
    let syscall = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).ok();
    Some(ProcState {
        state,
        syscall: syscall.as_deref().and_then(parse_syscall_file),
    })
}

/// The thread's scheduler accounting, in ns: time on a CPU and time runnable but waiting for
/// one (`/proc/self/task/<tid>/schedstat`). The kernel adds a stint to either only when it
/// ends; a thread waiting for a CPU right now shows none of that wait yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SchedStat {
    pub on_cpu: u64,
    pub waiting: u64,
}

pub(crate) fn read_schedstat(tid: i32) -> Option<SchedStat> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    let mut f = s.split_whitespace();
    Some(SchedStat {
        on_cpu: f.next()?.parse().ok()?,
        waiting: f.next()?.parse().ok()?,
    })
}

/// The thread's scheduler state letter (`R`, `S`, `D`, …).
pub(crate) fn read_state(tid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // "tid (comm) S ...": comm may hold spaces and parentheses; the state follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
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

    #[test]
    fn reads_a_sleeping_thread() {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            tx.send(crate::slot::current_tid()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(500));
        });
        let tid = rx.recv().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let p = read_proc(tid).expect("/proc entry of a live thread");
        assert_eq!(p.state, 'S');
        assert_eq!(p.syscall, Some("clock_nanosleep"));
        t.join().unwrap();
        assert!(read_proc(i32::MAX).is_none());
    }
}
