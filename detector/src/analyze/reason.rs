//! Why a worker is pinned: JFR's `pinnedReason` and `blockingOperation`, from what `/proc` says
//! the thread is doing and what its stack shows.

use crate::event::{Frame, Reason};
use crate::watch::probe::ProcState;

/// The verdict on one probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub reason: Reason,
    /// The system call name, or `running`.
    pub operation: String,
}

/// Classifies one probe: `proc` from `/proc`, `frames` the resolved stack (innermost first,
/// empty when stacks are off), `holds_locks` whether it held an instrumented lock, `waits_lock`
/// whether it was inside an instrumented lock's `lock`.
pub(crate) fn classify(
    proc: Option<&ProcState>,
    frames: &[Frame],
    holds_locks: bool,
    waits_lock: bool,
) -> Option<Verdict> {
    let proc = proc?;
    let operation = proc.syscall.unwrap_or("running");
    let running = proc.syscall.is_none();
    let reason = if let Some(once) = once_reason(frames) {
        once
    } else if !running && (waits_lock || (operation == "futex" && in_lock_frame(frames))) {
        Reason::LockWait
    } else if !running && holds_locks {
        Reason::LockHeld
    } else if running {
        Reason::Cpu
    } else {
        match operation {
            "nanosleep" | "clock_nanosleep" => Reason::Sleep,
            op if is_io(op) => Reason::Io,
            _ => Reason::Other,
        }
    };
    Some(Verdict {
        reason,
        operation: operation.to_owned(),
    })
}

fn is_io(op: &str) -> bool {
    matches!(
        op,
        "read"
            | "write"
            | "readv"
            | "writev"
            | "pread64"
            | "pwrite64"
            | "preadv"
            | "pwritev"
            | "recvfrom"
            | "sendto"
            | "recvmsg"
            | "sendmsg"
            | "recvmmsg"
            | "sendmmsg"
            | "connect"
            | "accept"
            | "accept4"
            | "poll"
            | "ppoll"
            | "select"
            | "pselect6"
            | "epoll_wait"
            | "epoll_pwait"
            | "fsync"
            | "fdatasync"
            | "sync_file_range"
            | "open"
            | "openat"
            | "close"
            | "sendfile"
            | "splice"
            | "flock"
            | "fcntl"
            | "ioctl"
            | "getdents64"
            | "stat"
            | "lstat"
            | "fstat"
            | "statx"
            | "newfstatat"
            | "unlink"
            | "unlinkat"
            | "rename"
            | "renameat"
            | "mkdir"
            | "mkdirat"
            | "ftruncate"
            | "fallocate"
            | "io_uring_enter"
            | "io_getevents"
    )
}

/// Functions that take a lock and wait for it when it is contended.
const LOCK_FRAMES: &[&str] = &[
    "std::sys::sync::mutex::",
    "std::sys::sync::rwlock::",
    "std::sync::poison::mutex::Mutex",
    "std::sync::poison::rwlock::RwLock",
    "std::sync::mutex::Mutex",
    "std::sync::rwlock::RwLock",
    "parking_lot::raw_mutex::RawMutex::lock_slow",
    "parking_lot::raw_rwlock::RawRwLock::",
    "pinwatch::sync::",
];

fn in_lock_frame(frames: &[Frame]) -> bool {
    // Only the frames above the first application frame: a lock taken further down the stack
    // is not what this thread is blocked in.
    frames
        .iter()
        .take_while(|f| !is_application(f))
        .any(|f| function_matches(f, LOCK_FRAMES))
}

/// `LazyLock`, `OnceLock`, `Once` and their implementation.
const ONCE_FRAMES: &[&str] = &[
    "std::sys::sync::once::",
    "std::sync::once::Once::call",
    "std::sync::poison::once::Once::call",
    "std::sync::once_lock::OnceLock",
    "std::sync::lazy_lock::LazyLock",
];

/// `once_wait` when the innermost once frame is reached through only runtime frames (the thread
/// waits in `Once::call` for another's initializer); `once_init` when an application frame
/// stands above it (the initializer itself is what blocks or spins).
fn once_reason(frames: &[Frame]) -> Option<Reason> {
    let pos = frames
        .iter()
        .position(|f| function_matches(f, ONCE_FRAMES))?;
    if frames[..pos].iter().any(is_application) {
        Some(Reason::OnceInit)
    } else {
        Some(Reason::OnceWait)
    }
}

fn function_matches(f: &Frame, prefixes: &[&str]) -> bool {
    let Some(name) = f.function.as_deref() else {
        return false;
    };
    let name = name.strip_prefix('<').unwrap_or(name);
    prefixes.iter().any(|p| name.starts_with(p))
}

/// Crates whose frames never make a top application frame.
const INTERNAL_CRATES: &[&str] = &[
    "std",
    "core",
    "alloc",
    "tokio",
    "pinwatch",
    "backtrace",
    "libc",
    "futures_executor",
    "futures_util",
    "futures_core",
    "tracing",
    "tracing_core",
    "parking_lot",
    "parking_lot_core",
    "rayon_core",
    "hyper",
    "axum",
    "tower",
    "pinwatch_macros",
];

/// Whether `f` is application code: it has a name, and that name's crate is not the runtime's,
/// std's, pinwatch's or the C library's.
pub(crate) fn is_application(f: &Frame) -> bool {
    let Some(name) = f.function.as_deref() else {
        return false;
    };
    // The file says it best when it is known: std's sources are under /rustc/, dependencies'
    // under cargo's registry; an inlined frame's name (from DWARF) carries no crate path.
    if let Some(file) = f.file.as_deref() {
        if file.starts_with("/rustc/")
            || file.contains("/.cargo/registry/")
            || file.contains("/.cargo/git/")
            || file.contains("/detector/src/")
        {
            return false;
        }
        if !name.contains("::") || name.starts_with('<') {
            // A C symbol, or an inlined frame named without its path: keep it when it is in
            // the application's own sources and not the C library's.
            return !file.starts_with("./") && !file.contains("glibc") && !file.contains("/libc");
        }
    }
    let krate = owning_crate(name);
    if krate.is_empty() || !krate.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return false;
    }
    // A C symbol (no path) is libc or the unwinder.
    if !name.contains("::") {
        return false;
    }
    // A generic parameter (`<F as core::future::Future>::poll`) belongs to nobody.
    if krate.len() == 1 && krate.chars().all(|c| c.is_ascii_uppercase()) {
        return false;
    }
    !INTERNAL_CRATES.contains(&krate)
}

/// The crate a demangled function belongs to: `app::f` → `app`; `<app::T as core::X>::m` →
/// `app`; `<&T as …>` → `T`'s.
fn owning_crate(name: &str) -> &str {
    let mut s = name;
    loop {
        let t = s.trim_start_matches(['<', '&', '*', ' ', '(', '[']);
        let t = t
            .strip_prefix("mut ")
            .or_else(|| t.strip_prefix("dyn "))
            .or_else(|| t.strip_prefix("const "))
            .unwrap_or(t);
        if t.len() == s.len() {
            break;
        }
        s = t;
    }
    let end = s
        .find([':', ' ', '<', '>', ',', '(', ')', '[', ';'])
        .unwrap_or(s.len());
    &s[..end]
}

/// Whether the stack is inside `tokio::task::block_in_place`: the thread has told the runtime it
/// is about to block, and tokio moves its worker to another thread (and records that only once
/// the other thread runs — later, under load).
pub(crate) fn in_block_in_place(frames: &[Frame]) -> bool {
    frames.iter().any(|f| {
        let Some(name) = f.function.as_deref() else {
            return false;
        };
        let from_tokio = name.starts_with("tokio::")
            || f.file
                .as_deref()
                .is_some_and(|file| file.contains("/tokio-"));
        from_tokio
            && name
                .split('<')
                .next()
                .is_some_and(|n| n.ends_with("block_in_place"))
    })
}

/// The first application frame, innermost first: JFR's `topApplicationFrame`.
#[cfg(test)]
pub(crate) fn top_frame(frames: &[Frame]) -> Option<&Frame> {
    frames.iter().find(|f| is_application(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(name: &str) -> Frame {
        Frame::named(name)
    }

    fn proc(syscall: Option<&'static str>) -> ProcState {
        ProcState {
            state: if syscall.is_some() { 'S' } else { 'R' },
            syscall,
        }
    }

    #[test]
    fn application_frames() {
        assert!(is_application(&f("my_app::handler")));
        assert!(is_application(&f("my_app::main::{{closure}}")));
        assert!(is_application(&f(
            "<my_app::Job as core::future::future::Future>::poll"
        )));
        assert!(!is_application(&f("std::thread::sleep")));
        assert!(!is_application(&f(
            "<F as core::future::future::Future>::poll"
        )));
        assert!(!is_application(&f(
            "<alloc::boxed::Box<F,A> as core::ops::function::FnOnce<Args>>::call_once"
        )));
        assert!(!is_application(&f("clock_nanosleep")));
        assert!(!is_application(&f(
            "tokio::runtime::task::harness::Harness<T,S>::poll"
        )));
        assert!(!is_application(&Frame::default()));
    }

    #[test]
    fn reasons() {
        let sleep = [
            f("clock_nanosleep"),
            f("std::thread::sleep"),
            f("app::work"),
        ];
        let v = classify(Some(&proc(Some("clock_nanosleep"))), &sleep, false, false).unwrap();
        assert_eq!(v.reason, Reason::Sleep);
        assert_eq!(v.operation, "clock_nanosleep");
        let v = classify(Some(&proc(Some("clock_nanosleep"))), &sleep, true, false).unwrap();
        assert_eq!(v.reason, Reason::LockHeld);
        let v = classify(Some(&proc(None)), &[f("app::spin")], false, false).unwrap();
        assert_eq!((v.reason, v.operation.as_str()), (Reason::Cpu, "running"));
        let v = classify(Some(&proc(Some("read"))), &[], false, false).unwrap();
        assert_eq!(v.reason, Reason::Io);
        let lock = [
            f("syscall"),
            f("std::sys::pal::unix::futex::futex_wait"),
            f("std::sys::sync::mutex::futex::Mutex::lock_contended"),
            f("std::sync::poison::mutex::Mutex<T>::lock"),
            f("app::work"),
        ];
        let v = classify(Some(&proc(Some("futex"))), &lock, false, false).unwrap();
        assert_eq!(v.reason, Reason::LockWait);
        let recv = [
            f("syscall"),
            f("std::sys::pal::unix::futex::futex_wait"),
            f("std::sync::mpmc::context::Context::wait_until"),
            f("app::work"),
        ];
        let v = classify(Some(&proc(Some("futex"))), &recv, false, false).unwrap();
        assert_eq!(v.reason, Reason::Other);
        let init = [
            f("clock_nanosleep"),
            f("std::thread::sleep"),
            f("app::CONFIG::{{closure}}"),
            f("std::sync::lazy_lock::LazyLock<T,F>::force::{{closure}}"),
            f("std::sys::sync::once::futex::Once::call"),
            f("app::work"),
        ];
        let v = classify(Some(&proc(Some("clock_nanosleep"))), &init, false, false).unwrap();
        assert_eq!(v.reason, Reason::OnceInit);
        let wait = [
            f("syscall"),
            f("std::sys::pal::unix::futex::futex_wait"),
            f("std::sys::sync::once::futex::Once::call"),
            f("std::sync::lazy_lock::LazyLock<T,F>::force"),
            f("app::work"),
        ];
        let v = classify(Some(&proc(Some("futex"))), &wait, false, false).unwrap();
        assert_eq!(v.reason, Reason::OnceWait);
        assert!(classify(None, &[], false, false).is_none());
    }

    #[test]
    fn files_decide_for_inlined_frames() {
        let at = |name: &str, file: &str| Frame {
            function: Some(name.to_owned()),
            file: Some(file.to_owned()),
            line: Some(1),
            locks: 0,
        };
        assert!(!is_application(&at(
            "with_mut<tokio::runtime::task::core::Stage<app::f>>",
            "/root/.cargo/registry/src/index.crates.io-x/tokio-1.54.1/src/loom/std/unsafe_cell.rs"
        )));
        assert!(!is_application(&at(
            "call_once<app::f::{closure_env#1}, ()>",
            "/rustc/abc/library/core/src/ops/function.rs"
        )));
        assert!(is_application(&at("{closure#0}", "sample-apps/src/lib.rs")));
        assert!(is_application(&at("app::work", "/home/me/app/src/main.rs")));
    }

    #[test]
    fn block_in_place_frames() {
        let inlined = Frame {
            function: Some("block_in_place<app::f::{closure_env#0}, ()>".into()),
            file: Some("/root/.cargo/registry/src/x/tokio-1.54.1/src/task/blocking.rs".into()),
            line: Some(80),
            locks: 0,
        };
        assert!(in_block_in_place(&[f("std::thread::sleep"), inlined]));
        assert!(in_block_in_place(&[f(
            "tokio::runtime::scheduler::multi_thread::worker::block_in_place"
        )]));
        assert!(!in_block_in_place(&[f("app::block_in_place")]));
        assert!(!in_block_in_place(&[
            f("std::thread::sleep"),
            f("app::work")
        ]));
    }

    #[test]
    fn top_frame_skips_runtime_frames() {
        let frames = [
            f("clock_nanosleep"),
            f("std::thread::sleep"),
            f("app::work::{{closure}}"),
            f("tokio::runtime::task::core::Core<T,S>::poll"),
        ];
        assert_eq!(
            top_frame(&frames).unwrap().function.as_deref(),
            Some("app::work::{{closure}}")
        );
    }
}
