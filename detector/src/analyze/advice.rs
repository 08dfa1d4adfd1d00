//! What to do about a pin, from what was seen of it — not only its reason: the system call and
//! what its file descriptor is, whether the thread made any read or write call while it ran,
//! and the functions on its stack. The rules, in the order they are tried (the first that fits
//! wins; docs/reasons.md has the table):
//!
//! 1. `futures::executor::block_on` (or `pollster`'s) on the stack: `.await` the future.
//! 2. Time that went inside glibc's malloc, above the service's code: running (`cpu`) in
//!    `malloc_consolidate` (merging the small blocks freed earlier, all at once), in
//!    `malloc_trim`, or in frames it gives no name (no debug symbols for glibc) above one of its
//!    entry points, in at least half the samples; or waiting in a futex for one of its arena
//!    locks (`__lll_lock_wait_private` under an entry point). `GLIBC_TUNABLES=
//!    glibc.malloc.mxfast=0` has frees merge as they happen; `malloc_trim` goes off the worker.
//!    Before the drop's rule: a drop that frees a large block merges what was freed before.
//! 3. Running (`cpu`), dropping a value (`drop_in_place`) between where the time went and the
//!    service's code: a large value, dropped on a worker; drop it in `spawn_blocking`.
//! 4. A write blocked on standard output or error, or on a pipe or terminal by a log writer
//!    (std's stdio, a logging crate's) on the stack: a log writer that blocks; a non-blocking
//!    one (`tracing_appender::non_blocking`).
//! 5. Waiting for std's stdout or stderr lock: another thread holds it while its write blocks;
//!    the same non-blocking writer (it is not a lock of the service's, no `tokio::sync::Mutex`).
//! 6. Waiting for a mutex of tokio's own (the first frame past the lock's — std's,
//!    `parking_lot`'s, `lock_api`'s — is tokio's): tokio holds its locks briefly, so the holder
//!    was kept from a CPU; not a lock of the service's, no `tokio::sync::Mutex`.
//! 7. Running, in an async read or a `select!` (in any sample), with no read or write call
//!    made while the pin ran: a loop on a read that returns at once (end of file); stop
//!    looping on `Ok(0)` (`yield_now` would hide it). A synchronous `Read::read` is not this:
//!    a decoder reading a buffer is computation.
//! 8. Waiting for a child process of std's (`std::process`: `output`, `status`, `wait`,
//!    `spawn`) above the service's code: tokio's `tokio::process::Command` (the reason's own
//!    advice said `tokio::net` for the `poll` on the child's pipes: helper-106).
//! 9. Otherwise the reason's own advice ([`Reason::advice`]).

use super::reason::{
    base_name, dependency_crate, directory_crate, is_own_code, is_std_source, owning_crate,
};
use crate::event::{Frame, Reason};
use crate::watch::probe::FdKind;

/// What the rules look at.
pub(crate) struct Evidence<'a> {
    pub reason: Reason,
    /// The blocking system call, or `running`.
    pub operation: &'a str,
    /// The call's file descriptor and what it is, for a read or write.
    pub fd: Option<(i32, FdKind)>,
    /// Whether the thread made read or write calls between the pin's first and last probes
    /// (`None`: one probe, or the kernel does not count them).
    pub io_calls: Option<bool>,
    /// The stack the top frame is from, innermost first.
    pub frames: &'a [Frame],
    /// Every sample's stack (the one above among them).
    pub samples: &'a [&'a [Frame]],
    /// Whether any of them is inside an executor's `block_on` ([`in_block_on`]), found once
    /// per stack.
    pub block_on: bool,
}

pub(crate) const BLOCK_ON: &str = "it blocks the worker in an executor's block_on inside a task: \
    .await the future instead (or run the blocking wait in tokio::task::spawn_blocking)";
pub(crate) const DROP: &str = "it drops a large value on the worker: move it into \
    tokio::task::spawn_blocking and drop it there (or drop it in pieces); with glibc's malloc, \
    also run with GLIBC_TUNABLES=glibc.malloc.mxfast=0, or its freed blocks are merged later, \
    all at once, by a worker that allocates in their arena";
pub(crate) const ALLOCATOR: &str = "glibc's malloc merges, in this call, the small blocks freed \
    into this arena since it last did (a large drop, here, on another thread or in \
    spawn_blocking): run with GLIBC_TUNABLES=glibc.malloc.mxfast=0, so that frees merge as \
    they happen; building or dropping such values off the workers helps only where those \
    threads do not share the worker's arena (MALLOC_ARENA_MAX)";
pub(crate) const ALLOCATOR_UNNAMED: &str = "the time went inside glibc's malloc itself (its \
    own functions are not named here; glibc's debug symbols, libc6-dbg, name them): most often \
    it is merging, all at once, the small blocks freed into this arena since it last did; if \
    so, run with GLIBC_TUNABLES=glibc.malloc.mxfast=0, so that frees merge as they happen";
pub(crate) const ALLOCATOR_TRIM: &str = "malloc_trim merges and hands back the free memory of \
    every arena, on the worker: call it in tokio::task::spawn_blocking";
pub(crate) const ALLOCATOR_LOCK: &str = "it waits for a lock of glibc's malloc (an arena's), \
    which another thread holds while it merges or hands back the blocks freed into that arena \
    (a large drop or malloc_trim, in spawn_blocking too): run with \
    GLIBC_TUNABLES=glibc.malloc.mxfast=0, and call malloc_trim where no worker allocates";
pub(crate) const BLOCKED_WRITE: &str = "a write to standard output or error (a pipe or a \
    terminal) blocks while its reader is slow or gone: log through a non-blocking writer \
    (tracing_appender::non_blocking), or keep logs off the workers";
pub(crate) const STDIO_LOCK: &str = "it waits for std's stdout/stderr lock, which another \
    thread holds while its write blocks (a full pipe): log through a non-blocking writer \
    (tracing_appender::non_blocking); the lock is std's, not one of yours";
pub(crate) const TOKIO_LOCK: &str = "it waits for a lock of tokio's own (its task list, a run \
    queue, a driver), which tokio holds only briefly: the thread holding it was kept from a CPU \
    (every CPU busy, a CPU quota, swapping); not a lock of yours: give the service CPU to spare";
pub(crate) const CHILD_PROCESS: &str = "it waits for a child process on the worker \
    (std::process): use tokio::process::Command and .await it, or run it in \
    tokio::task::spawn_blocking";
pub(crate) const SPIN_READ: &str = "it spins on a read that returns at once without waiting \
    (Ok(0): end of file, the peer closed): stop the loop on Ok(0); yield_now would only hide \
    the spin and keep a core busy";

/// The advice for a pin seen as `e` says.
pub(crate) fn advise(e: &Evidence<'_>) -> String {
    if e.block_on {
        return BLOCK_ON.to_owned();
    }
    let all = || std::iter::once(e.frames).chain(e.samples.iter().copied());
    // Before the drop's: a drop that frees a large block merges what was freed before it,
    // whatever its own size (helper-120: a 100 KB buffer's was "a large value").
    if let Some(advice) = allocator(e) {
        return advice.to_owned();
    }
    // Most samples (the top frame's among them) inside a drop, above the service's own frame.
    let dropping = |s: &[Frame]| {
        let own = s.iter().position(is_own_code);
        own.is_some() && s[..own.unwrap_or(0)].iter().any(is_drop)
    };
    let drops = e.samples.iter().filter(|s| dropping(s)).count();
    if e.reason == Reason::Cpu && dropping(e.frames) && drops * 2 >= e.samples.len() {
        return DROP.to_owned();
    }
    let is_write = matches!(e.operation, "write" | "writev" | "pwrite64" | "pwritev");
    let logging = || above_own(e.frames).iter().any(is_log_writer);
    if is_write
        && e.fd.is_some_and(|(fd, kind)| {
            fd == 1 || fd == 2 || (matches!(kind, FdKind::Pipe | FdKind::Terminal) && logging())
        })
    {
        return BLOCKED_WRITE.to_owned();
    }
    if matches!(e.reason, Reason::LockWait | Reason::Other)
        && e.operation == "futex"
        && above_own(e.frames).iter().any(is_stdio)
    {
        return STDIO_LOCK.to_owned();
    }
    if matches!(e.reason, Reason::LockWait | Reason::Other)
        && e.operation == "futex"
        && in_tokio_mutex(e.frames)
    {
        return TOKIO_LOCK.to_owned();
    }
    if e.reason == Reason::Cpu
        && e.io_calls != Some(true)
        && all().any(|s| above_own(s).iter().any(is_spin_frame))
    {
        return SPIN_READ.to_owned();
    }
    if matches!(e.reason, Reason::Io | Reason::Other)
        && above_own(e.frames).iter().any(is_child_process)
        && !above_own(e.frames).iter().any(is_tokio_process)
    {
        return CHILD_PROCESS.to_owned();
    }
    e.reason.advice(Some(e.operation)).to_owned()
}

/// The frames of `s` between where the time went and the service's own code (all of them when
/// it has none).
fn above_own(s: &[Frame]) -> &[Frame] {
    &s[..s.iter().position(is_own_code).unwrap_or(s.len())]
}

/// Whether a stack waits in a mutex (or an `RwLock`) of tokio's runtime: past the innermost
/// frames that are the lock's own — std's or the C library's, `parking_lot`'s, `lock_api`'s,
/// one of them a mutex's — and tokio's wrappers of them (`tokio::loom`), the first frame is
/// the runtime's (`tokio::runtime`, `tokio::util`: its task list, run queues, drivers), which
/// holds its locks briefly. Not `tokio::sync`'s: a `watch` channel's `borrow()` guard, or a
/// `broadcast` value's slow `Clone`, holds the lock in the service's own code (helper-96). A
/// frame's crate is its file's: as cargo's registry or a git checkout names it, else (a vendored
/// copy, `cargo vendor`'s, Nix's, a distribution's crates, or the service's own tree) the
/// directory that holds the file's `src/`, never `std` or `core` (a workspace member of that
/// name is the service's: helper-98). Its name does not say it: an extension trait's method on
/// tokio's `Handle` is named `<tokio::runtime::Handle as svc::Ext>::…` (helper-98, helper-99).
/// With no file (no debug info), its name's first segment.
fn in_tokio_mutex(frames: &[Frame]) -> bool {
    let mut mutex = false;
    for f in frames {
        let base = names(f).map(|(base, _)| base);
        let file = f.file.as_deref();
        let krate = match file {
            Some(file) if is_std_source(file) => Some("std".to_owned()),
            // The C library's, with its debug info (`…/glibc-2.39/nptl/pthread_mutex_lock.c`,
            // `…/sysdeps/unix/sysv/linux/x86_64/syscall.S`): no crate's.
            Some(file) if is_c_source(file) => None,
            Some(file) => dependency_crate(file)
                .or_else(|| directory_crate(file).filter(|c| c != "std" && c != "core")),
            None => base
                .as_deref()
                .filter(|b| b.contains("::"))
                .map(|b| owning_crate(b).to_owned()),
        };
        // Where in tokio: its module path, or the file's directory under the crate's `src/`
        // (not a parent's: `/home/u/src/runtime/…/tokio/src/sync/watch.rs`, helper-100).
        let in_tokio = |module: &str| {
            base.as_deref()
                .is_some_and(|b| b.starts_with(&format!("tokio::{module}::")))
                || file
                    .and_then(|p| p.rfind("/src/").map(|at| &p[at..]))
                    .is_some_and(|below| below.starts_with(&format!("/src/{module}/")))
        };
        let lock_own = match krate.as_deref() {
            Some("parking_lot" | "parking_lot_core" | "lock_api" | "std" | "core") => true,
            Some("tokio") => in_tokio("loom"),
            // The C library's frames (`syscall`, `__lll_lock_wait`): no path, and no file or a
            // C one.
            None => file.is_none_or(is_c_source),
            Some(_) => false,
        };
        if lock_own {
            mutex |= base
                .as_deref()
                .is_some_and(|b| b.contains("Mutex") || b.contains("RwLock"));
            continue;
        }
        return mutex
            && krate.as_deref() == Some("tokio")
            && (in_tokio("runtime") || in_tokio("util"));
    }
    false
}

/// Whether `file` is C or assembly (the C library's sources), not Rust: a service's Rust
/// included from a file of another name (`include!("routes.rs.in")`) is still its own.
fn is_c_source(file: &str) -> bool {
    [".c", ".h", ".S", ".s"].iter().any(|e| file.ends_with(e))
}

/// A frame's function without generic arguments, and its last path segment. An inlined frame
/// is often named by its last segment alone (`block_on<F>`); its file says whose it is.
fn names(f: &Frame) -> Option<(String, String)> {
    let base = base_name(f.function.as_deref()?);
    let base = base.trim_start_matches('<').to_owned();
    let last = base.rsplit("::").next().unwrap_or(&base).to_owned();
    Some((base, last))
}

fn file_has(f: &Frame, part: &str) -> bool {
    f.file.as_deref().is_some_and(|p| p.contains(part))
}

/// Whether a stack is inside an executor's `block_on` (`futures`, `pollster`).
pub(crate) fn in_block_on(frames: &[Frame]) -> bool {
    frames.iter().any(is_executor_block_on)
}

/// `futures::executor::block_on` (`futures_executor::local_pool::block_on`, its
/// `run_executor`), `pollster::block_on`.
fn is_executor_block_on(f: &Frame) -> bool {
    // Most frames of most samples are neither: their names are not worked out (the rule looks at
    // every frame of every sample, and was a fifth of the export thread's time).
    let named = |n: &str| n.contains("block_on") || n.contains("run_executor");
    if !f.function.as_deref().is_some_and(named) {
        return false;
    }
    let Some((base, last)) = names(f) else {
        return false;
    };
    let futures = base.starts_with("futures_executor::")
        || base.starts_with("futures::executor::")
        || file_has(f, "/futures-executor-");
    let pollster = base.starts_with("pollster::") || file_has(f, "/pollster-");
    (futures && matches!(last.as_str(), "block_on" | "run_executor"))
        || (pollster && last == "block_on")
}

/// std's child processes waited for or started: `std::process::Command::{output, status,
/// spawn}`, `std::process::Child::{wait, wait_with_output}`, or a frame inlined from
/// `std/src/process.rs`.
fn is_child_process(f: &Frame) -> bool {
    names(f).is_some_and(|(base, last)| {
        base.starts_with("std::process::")
            && matches!(
                last.as_str(),
                "output" | "status" | "spawn" | "wait" | "wait_with_output"
            )
    }) || file_has(f, "/std/src/process.rs")
}

/// tokio's `tokio::process`, which starts its children with std's `Command::spawn`: already what
/// the child-process advice would say (helper-107).
fn is_tokio_process(f: &Frame) -> bool {
    names(f).is_some_and(|(base, _)| base.starts_with("tokio::process::"))
        || file_has(f, "/tokio/src/process/")
        || f.file
            .as_deref()
            .is_some_and(|p| p.contains("/tokio-") && p.contains("/src/process/"))
}

/// `core::ptr::drop_in_place`: a value being dropped.
fn is_drop(f: &Frame) -> bool {
    names(f).is_some_and(|(_, last)| last == "drop_in_place")
}

/// Where glibc's malloc took a pin's time, above the service's frame.
#[derive(Clone, Copy, PartialEq, Eq)]
enum InMalloc {
    /// Merging what was freed before ([`is_malloc_consolidate`]).
    Merging,
    /// In `malloc_trim`, called on the worker.
    Trim,
    /// In frames it gives no name (no debug symbols for glibc) above its entry point.
    Unnamed,
}

/// Where in glibc's malloc `frames` (innermost first) are, if they are.
fn in_malloc(frames: &[Frame]) -> Option<InMalloc> {
    if frames
        .iter()
        .any(|f| matches!(f.function.as_deref(), Some("malloc_trim" | "__malloc_trim")))
    {
        return Some(InMalloc::Trim);
    }
    if frames.iter().any(is_malloc_consolidate) {
        return Some(InMalloc::Merging);
    }
    // An allocation's entry only: unnamed time in `free` is a large drop's too (the drop's
    // rule says so), and in `calloc` or `realloc` may be their zeroing or copying.
    let entry = frames.iter().position(|f| is_malloc_entry(f, false))?;
    (entry > 0 && frames[..entry].iter().all(|f| f.function.is_none())).then_some(InMalloc::Unnamed)
}

/// The advice for time that went inside glibc's malloc: a pin running there in at least half
/// its samples, or one waiting for one of its arena locks.
fn allocator(e: &Evidence<'_>) -> Option<&'static str> {
    let frames = above_own(e.frames);
    match e.reason {
        Reason::Cpu => {
            let at = in_malloc(frames)?;
            let inside = e
                .samples
                .iter()
                .filter(|s| in_malloc(above_own(s)).is_some())
                .count();
            (inside * 2 >= e.samples.len()).then_some(match at {
                InMalloc::Merging => ALLOCATOR,
                InMalloc::Trim => ALLOCATOR_TRIM,
                InMalloc::Unnamed => ALLOCATOR_UNNAMED,
            })
        }
        Reason::LockWait | Reason::Other
            if e.operation == "futex"
                && frames
                    .iter()
                    .any(|f| f.function.as_deref() == Some("__lll_lock_wait_private"))
                && frames.iter().any(|f| is_malloc_entry(f, true)) =>
        {
            Some(ALLOCATOR_LOCK)
        }
        _ => None,
    }
}

/// One of glibc's allocation functions, as its dynamic symbol table names it (named without
/// glibc's debug symbols too), that neither zeroes nor copies; with `any`, also `calloc`,
/// `realloc` and `free`.
fn is_malloc_entry(f: &Frame, any: bool) -> bool {
    let Some(name) = f.function.as_deref() else {
        return false;
    };
    let name = name.trim_start_matches("__libc_").trim_start_matches("__");
    matches!(
        name,
        "malloc" | "posix_memalign" | "aligned_alloc" | "memalign" | "valloc" | "pvalloc"
    ) || (any && matches!(name, "calloc" | "realloc" | "free" | "cfree"))
}

/// glibc's `malloc_consolidate`: its allocator merging the small blocks freed since it last did
/// (kept aside unmerged, in its "fastbins"), all of them at once, on an allocation of a large
/// block, a free that leaves one, or a trim. A million freed strings take it 200 ms of CPU
/// (sample-apps' `large_drop`, then a task spawned on a fresh runtime's worker).
fn is_malloc_consolidate(f: &Frame) -> bool {
    // With the suffix of a compiler's copy, as another build of glibc may name it
    // (`malloc_consolidate.part.0`, as `unlink_chunk.constprop.0` beside it here).
    f.function
        .as_deref()
        .and_then(|name| name.strip_prefix("malloc_consolidate"))
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// std's stdout/stderr (`std::io::stdio::…`, or a frame inlined from `std/src/io/stdio.rs`).
fn is_stdio(f: &Frame) -> bool {
    names(f).is_some_and(|(base, _)| base.starts_with("std::io::stdio::"))
        || file_has(f, "/std/src/io/stdio.rs")
}

/// A log writer's frame: std's stdout/stderr, or a logging crate's writer (`tracing_subscriber`'s
/// fmt layer, `tracing_appender`, `log`, `env_logger`, `slog`).
fn is_log_writer(f: &Frame) -> bool {
    is_stdio(f)
        || names(f).is_some_and(|(base, _)| {
            [
                "tracing_subscriber::fmt::",
                "tracing_appender::",
                "log::",
                "env_logger::",
                "slog",
            ]
            .iter()
            .any(|p| base.starts_with(p))
        })
}

/// Where a loop that never waits spins: an async read (`AsyncRead::poll_read`, tokio's read
/// futures and `AsyncReadExt::read`, which makes one), or a `select!` polling its branches
/// (`tokio::future::poll_fn`).
fn is_spin_frame(f: &Frame) -> bool {
    let Some((base, last)) = names(f) else {
        return false;
    };
    let tokio_file = |p: &str| {
        f.file
            .as_deref()
            .is_some_and(|file| file.contains("/tokio-") && file.ends_with(p))
    };
    matches!(last.as_str(), "poll_read" | "poll_read_buf")
        || base.contains("AsyncRead>::")
        || base.starts_with("tokio::io::util::read")
        || ((is_read_ext(&base) || tokio_file("/src/io/util/async_read_ext.rs"))
            && matches!(last.as_str(), "read" | "read_buf"))
        || base.contains("tokio::future::poll_fn::PollFn")
        || tokio_file("/src/io/util/read.rs")
        || tokio_file("/src/io/util/read_buf.rs")
        || tokio_file("/src/future/poll_fn.rs")
}

/// tokio's or the futures crates' `AsyncReadExt` (`…::AsyncReadExt::read`, or in v0 mangling
/// `<R as …::AsyncReadExt>::read`), not another crate's trait of a similar name.
fn is_read_ext(base: &str) -> bool {
    [
        "tokio::io::util::async_read_ext::AsyncReadExt",
        "futures_util::io::AsyncReadExt",
        "futures::io::AsyncReadExt",
        "futures_lite::io::AsyncReadExt",
    ]
    .iter()
    .any(|t| {
        base.match_indices(t).any(|(i, _)| {
            let before = &base[..i];
            let after = &base[i + t.len()..];
            (before.is_empty() || before.ends_with(' ') || before.ends_with('<'))
                && (after.starts_with("::") || after.starts_with(">::"))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crate's sources as an unoptimized build's debug info names them.
    const REG: &str = "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f";

    fn f(name: &str) -> Frame {
        Frame::named(name)
    }

    fn own(name: &str) -> Frame {
        Frame {
            function: Some(name.to_owned()),
            file: Some("/work/svc/src/main.rs".to_owned()),
            line: Some(7),
            locks: 0,
        }
    }

    fn evidence<'a>(reason: Reason, operation: &'a str, frames: &'a [Frame]) -> Evidence<'a> {
        Evidence {
            reason,
            operation,
            fd: None,
            io_calls: None,
            frames,
            samples: &[],
            block_on: in_block_on(frames),
        }
    }

    #[test]
    fn an_executor_block_on_is_to_be_awaited() {
        let frames = [
            f("std::thread::park"),
            f("futures_executor::local_pool::block_on<F>"),
            own("svc::Conn::drop"),
        ];
        let e = evidence(Reason::Other, "futex", &frames);
        assert_eq!(advise(&e), BLOCK_ON);
        for (name, is) in [
            ("futures_executor::local_pool::run_executor<T,F>", true),
            // v0 mangling's demangled form.
            ("futures_executor::local_pool::block_on::<svc::Fut>", true),
            ("futures::executor::block_on", true),
            ("pollster::block_on<F>", true),
            ("<pollster::Signal as std::task::Wake>::wake", false),
            ("tokio::runtime::Runtime::block_on<F>", false),
            ("futures_executor::local_pool::LocalPool::run", false),
        ] {
            let frames = [f("std::thread::park"), f(name), own("svc::Conn::drop")];
            let e = evidence(Reason::Other, "futex", &frames);
            assert_eq!(advise(&e) == BLOCK_ON, is, "{name}");
        }
    }

    #[test]
    fn a_large_drop_goes_to_spawn_blocking() {
        let frames = [
            f("__libc_free"),
            f("core::ptr::drop_in_place<hashbrown::map::HashMap<u64,alloc::string::String>>"),
            own("svc::evict"),
        ];
        assert_eq!(advise(&evidence(Reason::Cpu, "running", &frames)), DROP);
        // The same in a binary built with v0 symbol mangling.
        let frames = [
            f("__libc_free"),
            f("core::ptr::drop_in_place::<std::collections::hash::map::HashMap<u64, alloc::string::String>>"),
            own("svc::evict"),
        ];
        assert_eq!(advise(&evidence(Reason::Cpu, "running", &frames)), DROP);
        // A drop inside the service's own code, past its frame, is not what the time went to.
        let frames = [
            f("svc_lib::hash"),
            own("svc::run"),
            f("core::ptr::drop_in_place<X>"),
        ];
        assert_ne!(advise(&evidence(Reason::Cpu, "running", &frames)), DROP);
        // A drop that blocks (a writer flushing to a socket in its Drop) is the blocking
        // call's, not a large value's.
        let frames = [
            f("std::net::UdpSocket::send_to"),
            f("<std::io::BufWriter<W> as core::ops::drop::Drop>::drop"),
            f("core::ptr::drop_in_place<std::io::BufWriter<svc::Sock>>"),
            own("svc::report"),
        ];
        assert_ne!(advise(&evidence(Reason::Io, "sendto", &frames)), DROP);
    }

    #[test]
    fn time_inside_glibc_s_malloc_is_told_apart_from_computing() {
        // Sampled in a task's spawn on a worker, after another thread freed a million strings.
        let merging = [
            f("unlink_chunk.constprop.0"),
            f("malloc_consolidate"),
            f("_int_malloc"),
            f("__posix_memalign"),
            f("std::sys::alloc::unix::aligned_malloc"),
            own("svc::spawn_workers"),
        ];
        let computing = [f("svc_lib::hash"), own("svc::run")];
        let advice = |frames: &[Frame], samples: &[&[Frame]]| {
            advise(&Evidence {
                samples,
                ..evidence(Reason::Cpu, "running", frames)
            })
        };
        assert_eq!(
            advice(&merging, &[&merging, &merging, &computing]),
            ALLOCATOR
        );
        // In fewer than half the samples, it is the computation's.
        assert_ne!(
            advice(&merging, &[&merging, &computing, &computing]),
            ALLOCATOR
        );
        // A compiler's copy of it; not another function of a like name.
        let copy = [
            f("malloc_consolidate.part.0"),
            f("_int_malloc"),
            own("svc::run"),
        ];
        assert_eq!(advice(&copy, &[]), ALLOCATOR);
        let other = [f("malloc_consolidated_stats"), own("svc::run")];
        assert_ne!(advice(&other, &[]), ALLOCATOR);
        // Inside a drop too: the drop freed a large block, which merged what was freed before.
        let dropping = [
            f("malloc_consolidate"),
            f("_int_free"),
            f("__libc_free"),
            f("core::ptr::drop_in_place<alloc::vec::Vec<u8>>"),
            own("svc::evict"),
        ];
        assert_eq!(advice(&dropping, &[]), ALLOCATOR);
        // Without glibc's debug symbols: frames with no name above its entry point.
        let unnamed = [
            Frame::default(),
            Frame::default(),
            f("__posix_memalign"),
            own("svc::spawn_workers"),
        ];
        assert_eq!(advice(&unnamed, &[&unnamed, &computing]), ALLOCATOR_UNNAMED);
        // A named frame above the entry (memcpy of a realloc, say) is not that; nor unnamed
        // time in a realloc (its copy), a calloc (its zeroing) or a free: a large drop's frees
        // are the drop's.
        let copying = [
            f("__memmove_avx_unaligned_erms"),
            f("realloc"),
            own("svc::grow"),
        ];
        assert_ne!(advice(&copying, &[]), ALLOCATOR_UNNAMED);
        for entry in ["__libc_realloc", "__libc_calloc"] {
            let frames = [Frame::default(), f(entry), own("svc::grow")];
            assert_ne!(advice(&frames, &[]), ALLOCATOR_UNNAMED, "{entry}");
        }
        let large_drop = [
            Frame::default(),
            f("__libc_free"),
            f("core::ptr::drop_in_place<hashbrown::map::HashMap<u64,alloc::string::String>>"),
            own("svc::evict"),
        ];
        assert_eq!(advice(&large_drop, &[&large_drop]), DROP);
        // malloc_trim on the worker goes off it.
        let trimming = [
            f("malloc_consolidate"),
            f("mtrim"),
            f("malloc_trim"),
            own("svc::give_back"),
        ];
        assert_eq!(advice(&trimming, &[]), ALLOCATOR_TRIM);
        // Waiting for an arena's lock (helper-120: 703 ms in calloc while a drop in
        // spawn_blocking merged the worker's arena).
        let waiting = [
            f("__lll_lock_wait_private"),
            f("__libc_calloc"),
            own("svc::alloc_buffers"),
        ];
        assert_eq!(
            advise(&evidence(Reason::Other, "futex", &waiting)),
            ALLOCATOR_LOCK
        );
        // Past the service's own frame, or blocked elsewhere, it is not what the time went to.
        let past = [f("svc_lib::hash"), own("svc::run"), f("malloc_consolidate")];
        assert_ne!(advice(&past, &[]), ALLOCATOR);
        assert_ne!(
            advise(&evidence(Reason::LockWait, "futex", &merging)),
            ALLOCATOR
        );
        let std_lock = [
            f("std::sys::sync::mutex::futex::Mutex::lock_contended"),
            own("svc::run"),
        ];
        assert_ne!(
            advise(&evidence(Reason::LockWait, "futex", &std_lock)),
            ALLOCATOR_LOCK
        );
    }

    #[test]
    fn a_write_blocked_on_stdout_or_a_pipe_wants_a_non_blocking_writer() {
        let frames = [
            f("std::io::stdio::StdoutRaw::write_all"),
            own("svc::handler"),
        ];
        for (fd, kind) in [(1, FdKind::Pipe), (2, FdKind::Terminal), (9, FdKind::Pipe)] {
            let mut e = evidence(Reason::Io, "write", &frames);
            e.fd = Some((fd, kind));
            assert_eq!(advise(&e), BLOCKED_WRITE, "{fd} {kind:?}");
        }
        // A write to a child's stdin (a pipe, no log writer on the stack) is no log's.
        let child = [
            f("<std::process::ChildStdin as std::io::Write>::write"),
            own("svc::feed"),
        ];
        let mut e = evidence(Reason::Io, "write", &child);
        e.fd = Some((9, FdKind::Pipe));
        assert_ne!(advise(&e), BLOCKED_WRITE);
        // A write to a file or a socket keeps the io advice.
        let mut e = evidence(Reason::Io, "write", &frames);
        e.fd = Some((7, FdKind::Other));
        assert_eq!(advise(&e), Reason::Io.advice(Some("write")));
        e.fd = Some((8, FdKind::Socket));
        assert_ne!(advise(&e), BLOCKED_WRITE);
    }

    #[test]
    fn waiting_for_stdout_s_lock_is_not_a_lock_of_the_service_s() {
        let frames = [
            f("std::sys::sync::mutex::futex::Mutex::lock_contended"),
            f("std::io::stdio::Stdout::lock"),
            own("svc::handler"),
        ];
        let advice = advise(&evidence(Reason::LockWait, "futex", &frames));
        assert_eq!(advice, STDIO_LOCK);
        assert!(!advice.contains("tokio::sync::Mutex"));
    }

    /// A worker waiting for tokio's own lock (its task list's shard, as a task completes):
    /// the stack of a real pin beside CPU hogs, cut short. Not the service's lock.
    #[test]
    fn waiting_for_a_lock_of_tokio_s_is_not_the_service_s() {
        let at = |name: &str, file: &str| inlined(name, &format!("{REG}/{file}"));
        let mut frames = vec![
            f("syscall"),
            at(
                "parking_lot_core::thread_parker::imp::ThreadParker::futex_wait",
                "parking_lot_core-0.9.12/src/thread_parker/linux.rs",
            ),
            at(
                "with_thread_data<parking_lot_core::parking_lot::ParkResult>",
                "parking_lot_core-0.9.12/src/parking_lot.rs",
            ),
            at(
                "parking_lot::raw_mutex::RawMutex::lock_slow",
                "parking_lot-0.12.5/src/raw_mutex.rs",
            ),
            at(
                "lock_api::mutex::Mutex<R,T>::lock",
                "lock_api-0.4.14/src/mutex.rs",
            ),
            at(
                "tokio::loom::std::parking_lot::Mutex<T>::lock",
                "tokio-1.54.1/src/loom/std/parking_lot.rs",
            ),
            at(
                "tokio::runtime::task::list::OwnedTasks<S>::remove",
                "tokio-1.54.1/src/runtime/task/list.rs",
            ),
        ];
        let advice = advise(&evidence(Reason::LockWait, "futex", &frames));
        assert_eq!(advice, TOKIO_LOCK);
        assert!(!advice.contains("tokio::sync::Mutex"));
        // The same through std's mutex (tokio without parking_lot), under the service's spawn.
        let std_mutex = [
            f("std::sys::sync::mutex::futex::Mutex::lock_contended"),
            f("std::sync::poison::mutex::Mutex<T>::lock"),
            at(
                "tokio::runtime::task::list::OwnedTasks<S>::bind",
                "tokio-1.54.1/src/runtime/task/list.rs",
            ),
            own("svc::fan_out"),
        ];
        assert_eq!(
            advise(&evidence(Reason::LockWait, "futex", &std_mutex)),
            TOKIO_LOCK
        );
        // A lock of the service's, or of another crate's, under the same lock frames: not this.
        frames.truncate(5);
        for holder in [
            own("svc::cache::get"),
            at("moka::sync::Cache::get", "moka-0.12.0/src/sync/cache.rs"),
        ] {
            let mut frames = frames.clone();
            frames.push(holder);
            assert_eq!(
                advise(&evidence(Reason::LockWait, "futex", &frames)),
                Reason::LockWait.advice(Some("futex"))
            );
        }
        // A vendored copy (`cargo vendor`, Nix's vendor directory): the same, by the frames'
        // names, or, for one named by its last segment alone, by the directory of its `src/`.
        for vendor in [
            "/build/app/vendor",
            // crane's layout, a distribution's crates, a directory of the project's choosing.
            "/nix/store/0a1b-vendor-cargo-deps/c19b7c6f923b580ac259164a89f2577984ad5ab0",
            "/usr/share/cargo/registry",
            "/src/app/third_party/rust_crates",
        ] {
            let at = |name: &str, dir: &str, file: &str| {
                inlined(name, &format!("{vendor}/{dir}/src/{file}"))
            };
            let vendored = [
                f("syscall"),
                at(
                    "parking_lot::raw_mutex::RawMutex::lock_slow",
                    "parking_lot",
                    "raw_mutex.rs",
                ),
                at(
                    "lock<tokio::runtime::task::list::Shard>",
                    "lock_api-0.4.14",
                    "mutex.rs",
                ),
                at(
                    "tokio::loom::std::parking_lot::Mutex<T>::lock",
                    "tokio-1.54.1",
                    "loom/std/parking_lot.rs",
                ),
                at(
                    "tokio::runtime::task::list::OwnedTasks<S>::remove",
                    "tokio",
                    "runtime/task/list.rs",
                ),
            ];
            assert_eq!(
                advise(&evidence(Reason::LockWait, "futex", &vendored)),
                TOKIO_LOCK,
                "{vendor}"
            );
            let mut theirs = vendored[..3].to_vec();
            theirs.push(at("moka::sync::Cache::get", "moka", "sync/cache.rs"));
            assert_eq!(
                advise(&evidence(Reason::LockWait, "futex", &theirs)),
                Reason::LockWait.advice(Some("futex")),
                "{vendor}"
            );
        }
        // The service's own code, wherever it is built (a directory named `vendor` among its
        // parents too): a workspace member in `core/` or `std/` whose frames are named by their
        // last segment, or an extension trait's method on tokio's `Handle` (here, or in a
        // vendored crate), under a std lock (helper-98, helper-99).
        for (root, member) in [
            ("/build/app", "core"),
            ("/build/app", "std"),
            ("/home/u/vendor/app", "core"),
            ("/srv/acme-vendor/app", "core"),
        ] {
            let own_lock = [
                f("std::sys::sync::mutex::futex::Mutex::lock_contended"),
                f("std::sync::poison::mutex::Mutex<T>::lock"),
                inlined("get<u64>", &format!("{root}/{member}/src/cache.rs")),
                inlined("{async_block#0}", &format!("{root}/{member}/src/worker.rs")),
                at(
                    "tokio::runtime::task::core::Core<T,S>::poll",
                    "tokio-1.54.1/src/runtime/task/core.rs",
                ),
            ];
            assert_ne!(
                advise(&evidence(Reason::LockWait, "futex", &own_lock)),
                TOKIO_LOCK,
                "{root}/{member}"
            );
        }
        for file in [
            "/build/svc/src/ext.rs",
            "/home/u/vendor/svc/src/ext.rs",
            "/build/app/vendor/acme-0.1.0/src/ext.rs",
        ] {
            let extension = [
                f("std::sys::sync::mutex::futex::Mutex::lock_contended"),
                f("std::sync::poison::mutex::Mutex<T>::lock"),
                inlined(
                    "<tokio::runtime::Handle as svc::HandleExt>::with_state",
                    file,
                ),
            ];
            assert_ne!(
                advise(&evidence(Reason::LockWait, "futex", &extension)),
                TOKIO_LOCK,
                "{file}"
            );
        }
        // std built from its source release without remapping (helper-100), and the C library
        // with its debug info: still the lock's own frames.
        let source_built = [
            inlined(
                "__GI___lll_lock_wait",
                "/usr/src/debug/glibc-2.39-22.fc40.x86_64/nptl/lowlevellock.c",
            ),
            inlined(
                "lock_contended",
                "/builddir/build/BUILD/rustc-1.78.0-src/library/std/src/sys/sync/mutex/futex.rs",
            ),
            inlined(
                "std::sync::poison::mutex::Mutex<T>::lock",
                "/builddir/build/BUILD/rustc-1.78.0-src/library/std/src/sync/poison/mutex.rs",
            ),
            at(
                "tokio::runtime::task::list::OwnedTasks<S>::bind",
                "tokio-1.54.1/src/runtime/task/list.rs",
            ),
        ];
        assert_eq!(
            advise(&evidence(Reason::LockWait, "futex", &source_built)),
            TOKIO_LOCK
        );
        // The service's Rust in a file of another name (`include!`), or in generated code, under
        // std's lock: its own (helper-101).
        for file in [
            "/home/me/svc/src/handlers.rs.in",
            "/home/me/svc/src/generated",
            "/home/me/svc/target/debug/build/svc-1/out/routes.inc",
        ] {
            let own = [
                f("std::sys::sync::mutex::futex::Mutex::lock_contended"),
                f("std::sync::poison::mutex::Mutex<T>::lock"),
                inlined("svc::handler::{{closure}}", file),
                at(
                    "tokio::runtime::task::core::Core<T,S>::poll",
                    "tokio-1.54.1/src/runtime/task/core.rs",
                ),
            ];
            assert_ne!(
                advise(&evidence(Reason::LockWait, "futex", &own)),
                TOKIO_LOCK,
                "{file}"
            );
        }
        // Without debug info (names only), the same.
        let bare = [
            f("syscall"),
            f("parking_lot::raw_mutex::RawMutex::lock_slow"),
            f("tokio::runtime::task::list::OwnedTasks<S>::remove"),
        ];
        assert_eq!(
            advise(&evidence(Reason::LockWait, "futex", &bare)),
            TOKIO_LOCK
        );
        // tokio's `watch`, in a tree whose parents are named `src/runtime` or `src/util`: not
        // the runtime's (helper-100).
        for file in [
            "/home/u/src/runtime/vendor/tokio/src/sync/watch.rs",
            "/home/u/src/util/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/\
             tokio-1.54.1/src/sync/watch.rs",
        ] {
            let watch = [
                f("std::sys::sync::rwlock::futex::RwLock::write_contended"),
                f("std::sync::poison::rwlock::RwLock<T>::write"),
                inlined("send_replace<u64>", file),
            ];
            assert_ne!(
                advise(&evidence(Reason::LockWait, "futex", &watch)),
                TOKIO_LOCK,
                "{file}"
            );
        }
        // A `watch` channel's lock, held by the service's `borrow()` guard: not this.
        let watch = [
            f("std::sys::sync::rwlock::futex::RwLock::write_contended"),
            f("std::sync::poison::rwlock::RwLock<T>::write"),
            at(
                "tokio::loom::std::rwlock::RwLock<T>::write",
                "tokio-1.54.1/src/loom/std/rwlock.rs",
            ),
            at(
                "tokio::sync::watch::Sender<T>::send_replace",
                "tokio-1.54.1/src/sync/watch.rs",
            ),
            own("svc::publish"),
        ];
        assert_ne!(
            advise(&evidence(Reason::LockWait, "futex", &watch)),
            TOKIO_LOCK
        );
        // tokio parked on a condition variable is no lock of its.
        let condvar = [
            f("std::sys::sync::condvar::futex::Condvar::wait"),
            at(
                "tokio::runtime::park::Inner::park",
                "tokio-1.54.1/src/runtime/park.rs",
            ),
        ];
        assert_ne!(
            advise(&evidence(Reason::Other, "futex", &condvar)),
            TOKIO_LOCK
        );
    }

    #[test]
    fn a_spin_on_a_read_that_returns_at_once_is_told_to_stop_on_eof() {
        let frames = [
            f("<&[u8] as tokio::io::async_read::AsyncRead>::poll_read"),
            f("<tokio::io::util::read::Read<R> as core::future::future::Future>::poll"),
            own("svc::read_loop::{{closure}}"),
        ];
        let mut e = evidence(Reason::Cpu, "running", &frames);
        e.io_calls = Some(false);
        assert_eq!(advise(&e), SPIN_READ);
        // A read loop that does make read calls is not this case (it reads a socket at EOF:
        // the generic cpu advice stands, as no rule can say more).
        e.io_calls = Some(true);
        assert_eq!(advise(&e), Reason::Cpu.advice(Some("running")));
        // A computation is told to move to spawn_blocking, not this; nor is a decoder that
        // reads a buffer with a synchronous `Read::read`.
        let compute = [f("svc_lib::hash"), own("svc::login")];
        assert_eq!(
            advise(&evidence(Reason::Cpu, "running", &compute)),
            Reason::Cpu.advice(Some("running"))
        );
        let decode = [
            f("miniz_oxide::inflate::core::decompress"),
            f("<flate2::read::GzDecoder<R> as std::io::Read>::read"),
            own("svc::unpack"),
        ];
        assert_eq!(
            advise(&evidence(Reason::Cpu, "running", &decode)),
            Reason::Cpu.advice(Some("running"))
        );
        // The sample behind the top frame landed in the loop's own code; another in the read
        // (or in a `select!`): still the spin.
        let in_loop = [own("svc::read_loop::{{closure}}")];
        let in_select = [
            f("<tokio::future::poll_fn::PollFn<F> as core::future::future::Future>::poll"),
            own("svc::pump::{{closure}}"),
        ];
        let samples: [&[Frame]; 2] = [&in_loop, &in_select];
        let mut e = evidence(Reason::Cpu, "running", &in_loop);
        e.samples = &samples;
        e.io_calls = Some(false);
        assert_eq!(advise(&e), SPIN_READ);
        // A sample caught making the next read's future (an unoptimized build spends a share of
        // the loop there) is in the read too: by its name, in v0 mangling, or inlined (named by
        // its last segment, its file tokio's). Beside only the loop's own code, it is not.
        let beside_loop = |sample: &[Frame]| {
            let samples: [&[Frame]; 2] = [&in_loop, sample];
            let mut e = evidence(Reason::Cpu, "running", &in_loop);
            e.samples = &samples;
            e.io_calls = Some(false);
            advise(&e)
        };
        assert_eq!(beside_loop(&in_loop), Reason::Cpu.advice(Some("running")));
        for making in [
            f("tokio::io::util::async_read_ext::AsyncReadExt::read"),
            f("<&[u8] as tokio::io::util::async_read_ext::AsyncReadExt>::read"),
            f("<futures_util::io::cursor::Cursor<T> as futures_util::io::AsyncReadExt>::read"),
            inlined(
                "read<&[u8]>",
                &format!("{REG}/tokio-1.54.1/src/io/util/async_read_ext.rs"),
            ),
        ] {
            let making = [making, own("svc::read_loop::{{closure}}")];
            assert_eq!(beside_loop(&making), SPIN_READ, "{:?}", making[0]);
        }
        // Not another crate's trait of a similar name, nor the ext's other reads.
        for other in [
            f("msgcodec::FramedAsyncReadExt::read"),
            f("<S as msgcodec::FramedAsyncReadExt>::read"),
            f("tokio::io::util::async_read_ext::AsyncReadExt::read_exact"),
            inlined(
                "read_to_end<&[u8]>",
                &format!("{REG}/tokio-1.54.1/src/io/util/async_read_ext.rs"),
            ),
        ] {
            let other = [other, own("svc::read_loop::{{closure}}")];
            assert_eq!(
                beside_loop(&other),
                Reason::Cpu.advice(Some("running")),
                "{:?}",
                other[0]
            );
        }
    }

    /// A frame inlined into its caller, named by its last segment, its file saying whose.
    fn inlined(name: &str, file: &str) -> Frame {
        Frame {
            function: Some(name.to_owned()),
            file: Some(file.to_owned()),
            line: Some(1),
            locks: 0,
        }
    }

    #[test]
    fn the_rules_know_frames_inlined_under_their_last_name() {
        let block_on = [
            f("std::thread::functions::park"),
            inlined(
                "block_on<tokio::sync::oneshot::Receiver<()>>",
                &format!("{REG}/futures-executor-0.3.34/src/local_pool.rs"),
            ),
            own("drop"),
        ];
        assert_eq!(
            advise(&evidence(Reason::Other, "futex", &block_on)),
            BLOCK_ON
        );
        // Another crate's block_on is not an executor's.
        let other = [
            inlined("block_on<F>", &format!("{REG}/svc-db-1.0.0/src/lib.rs")),
            own("drop"),
        ];
        assert_ne!(advise(&evidence(Reason::Other, "futex", &other)), BLOCK_ON);
        let dropping = [
            f("__free"),
            inlined(
                "drop_in_place<(u64, alloc::string::String)>",
                "/rustc/5980/library/core/src/ptr/mod.rs",
            ),
            own("svc::evict::{async_block#0}"),
        ];
        assert_eq!(advise(&evidence(Reason::Cpu, "running", &dropping)), DROP);
        let spinning = [
            inlined(
                "poll<&[u8]>",
                &format!("{REG}/tokio-1.54.1/src/io/util/read.rs"),
            ),
            own("svc::read_loop::{async_block#0}"),
        ];
        let mut e = evidence(Reason::Cpu, "running", &spinning);
        e.io_calls = Some(false);
        assert_eq!(advise(&e), SPIN_READ);
    }

    #[test]
    fn one_sample_in_a_small_drop_does_not_make_a_computation_a_drop() {
        let in_drop = [
            f("__free"),
            f("core::ptr::drop_in_place<alloc::string::String>"),
            own("svc::crunch"),
        ];
        let computing = [f("svc_lib::hash"), own("svc::crunch")];
        let samples: [&[Frame]; 3] = [&in_drop, &computing, &computing];
        let mut e = evidence(Reason::Cpu, "running", &in_drop);
        e.samples = &samples;
        assert_eq!(advise(&e), Reason::Cpu.advice(Some("running")));
    }

    /// A wait for a child process of std's is told to use tokio's (it was told `tokio::net`
    /// for the `poll` on the child's pipes: helper-106); the same `poll` elsewhere is not.
    #[test]
    fn waiting_for_a_child_process_wants_tokio_process() {
        let output = [
            f("__GI___poll"),
            f("std::sys::pal::unix::pipe::read2"),
            f("std::process::Command::output"),
            own("svc::run_tool"),
        ];
        assert_eq!(
            advise(&evidence(Reason::Io, "poll", &output)),
            CHILD_PROCESS
        );
        let wait = [
            f("__GI___wait4"),
            f("std::process::Child::wait"),
            own("svc::run_tool"),
        ];
        assert_eq!(
            advise(&evidence(Reason::Other, "wait4", &wait)),
            CHILD_PROCESS
        );
        // Inlined into the service's frame, known by std's file.
        let mut inlined = f("svc::run_tool");
        inlined.file = Some("/rustc/abc/library/std/src/process.rs".into());
        let inlined = [f("__GI___wait4"), inlined, own("svc::run_tool")];
        assert_eq!(
            advise(&evidence(Reason::Other, "wait4", &inlined)),
            CHILD_PROCESS
        );
        // tokio's own spawn of a child (std's spawn under it) already is what it would say.
        let tokio_spawn = [
            f("__GI___clone3"),
            f("std::process::Command::spawn"),
            f("tokio::process::Command::spawn"),
            own("svc::run_tool"),
        ];
        assert_eq!(
            advise(&evidence(Reason::Other, "clone3", &tokio_spawn)),
            Reason::Other.advice(Some("clone3"))
        );
        // Below the service's code only: the service's own `output` is not std's.
        let own_poll = [f("__GI___poll"), own("svc::process::output")];
        assert_eq!(
            advise(&evidence(Reason::Io, "poll", &own_poll)),
            Reason::Io.advice(Some("poll"))
        );
    }

    #[test]
    fn otherwise_the_reason_s_own_advice() {
        let frames = [own("svc::handler")];
        assert_eq!(
            advise(&evidence(Reason::Sleep, "clock_nanosleep", &frames)),
            Reason::Sleep.advice(Some("clock_nanosleep"))
        );
    }
}
