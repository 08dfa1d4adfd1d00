//! Why a worker is pinned: JFR's `pinnedReason` and `blockingOperation`, from what `/proc` says
//! the thread is doing and what its stack shows.

pub(crate) use crate::event::is_std_source;
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
#[cfg(test)]
pub(crate) fn classify(
    proc: Option<&ProcState>,
    frames: &[Frame],
    holds_locks: bool,
    waits_lock: bool,
) -> Option<Verdict> {
    classify_stack(proc, &StackFacts::of(frames), holds_locks, waits_lock)
}

/// What a stack says toward a reason, read once per stack: a pin's probes and its later pins at
/// the same line mostly have the same one.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StackFacts {
    /// Inside `LazyLock`, `OnceLock` or `Once` ([`once_reason`]).
    once: Option<Reason>,
    /// Inside a lock's `lock`, above the first application frame.
    lock_frame: bool,
    /// Resolving a host name.
    dns: bool,
    /// Inside a sleep (`std::thread::sleep`, `nanosleep`, …), above the first application frame.
    sleep: bool,
}

impl StackFacts {
    pub(crate) fn of(frames: &[Frame]) -> StackFacts {
        StackFacts {
            once: once_reason(frames),
            lock_frame: in_lock_frame(frames),
            dns: frames.iter().any(is_dns_frame),
            sleep: frames
                .iter()
                .take_while(|f| !is_application(f))
                .any(is_sleep_frame),
        }
    }
}

/// The verdict on a probe that found its thread running as it woke from a block made since the
/// probe before ([`Between::Blocked`]), where no probe of the pin saw a block: the sleep its stack
/// is still in, else `other` (the call was not seen).
///
/// [`Between::Blocked`]: crate::watch::probe::Between::Blocked
pub(crate) fn woken(stack: &StackFacts) -> Verdict {
    let (reason, operation) = if stack.sleep {
        (Reason::Sleep, "clock_nanosleep")
    } else {
        (Reason::Other, "blocked_between_probes")
    };
    Verdict {
        reason,
        operation: operation.to_owned(),
    }
}

/// The tests' `classify` with the stack's [`StackFacts`] (the default for a probe without a
/// stack).
pub(crate) fn classify_stack(
    proc: Option<&ProcState>,
    stack: &StackFacts,
    holds_locks: bool,
    waits_lock: bool,
) -> Option<Verdict> {
    let proc = proc?;
    let operation = proc.syscall.unwrap_or("running");
    let running = proc.syscall.is_none();
    let reason = if let Some(once) = stack.once {
        once
    } else if !running && (waits_lock || (operation == "futex" && stack.lock_frame)) {
        Reason::LockWait
    } else if !running && holds_locks {
        Reason::LockHeld
    } else if stack.dns {
        // A resolver waits in `poll` / `recvfrom` / `connect` on its UDP socket (`io`), or
        // parses `/etc/hosts` on the CPU: what it is doing is resolving a name.
        Reason::Dns
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

/// C resolver entry points (glibc's, musl's, NSS modules'), matched after `__GI_`, `__libc_`
/// and leading `_`s.
const DNS_C_FUNCTIONS: &[&str] = &[
    "getaddrinfo",
    "gaih_inet",
    "gethostbyname",
    "gethostbyaddr",
    "getnameinfo",
    "res_query",
    "res_search",
    "res_send",
    "res_nquery",
    "res_nsearch",
    "res_nsend",
    "res_mkquery",
    "res_nmkquery",
    "res_context_",
    "nss_dns_",
    "nss_resolve_",
    "nss_mdns",
];

/// Whether `f` resolves a host name: a C resolver function, std's `ToSocketAddrs` /
/// `to_socket_addrs`, or std's `lookup_host` / `LookupHost`.
fn is_dns_frame(f: &Frame) -> bool {
    let Some(name) = f.function.as_deref() else {
        return false;
    };
    let base = base_name(name);
    if c_name(&base).is_some_and(|c| DNS_C_FUNCTIONS.iter().any(|p| c.starts_with(p))) {
        return true;
    }
    let last = base.rsplit("::").next().unwrap_or(&base);
    let in_std = base.trim_start_matches('<').starts_with("std::")
        || f.file.as_deref().is_some_and(is_std_source);
    last == "to_socket_addrs"
        || base.contains("ToSocketAddrs>::")
        || (in_std && (last == "lookup_host" || base.contains("LookupHost")))
}

/// A C function's name without glibc's prefixes (`__GI___clock_nanosleep` →
/// `clock_nanosleep`); `None` for a Rust path.
fn c_name(base: &str) -> Option<&str> {
    if base.contains("::") {
        return None;
    }
    let c = base.trim_start_matches('_');
    Some(
        c.strip_prefix("GI_")
            .or_else(|| c.strip_prefix("libc_"))
            .unwrap_or(c)
            .trim_start_matches('_'),
    )
}

/// std's sleeps.
const SLEEP_FRAMES: &[&str] = &[
    "std::thread::sleep",
    "std::thread::functions::sleep",
    "std::sys::pal::unix::thread::Thread::sleep",
    "std::sys::thread::unix::sleep",
];

/// Whether `f` is a sleep: std's, or the C library's.
fn is_sleep_frame(f: &Frame) -> bool {
    function_matches(f, SLEEP_FRAMES)
        || f.function.as_deref().is_some_and(|name| {
            let base = base_name(name);
            c_name(&base).is_some_and(|c| ["nanosleep", "clock_nanosleep", "usleep"].contains(&c))
        })
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

/// Crates whose frames never make a top application frame: the runtime, its plumbing, std and
/// pinwatch. Each entry also covers the crates named after it with `_` (`tokio` covers
/// `tokio_util`, `http` covers `http_body`). Every other crate is application code, a
/// dependency from crates.io included: its blocking line is where the fix goes.
const INTERNAL_CRATES: &[&str] = &[
    "std",
    "core",
    "alloc",
    "proc_macro",
    "tokio",
    "futures",
    "tracing",
    "hyper",
    "tower",
    "axum",
    "h2",
    "http",
    "httparse",
    "want",
    "tonic",
    "prost",
    "mio",
    "socket2",
    "bytes",
    "slab",
    "parking_lot",
    "lock_api",
    "crossbeam",
    "rayon",
    "serde",
    "backtrace",
    "addr2line",
    "gimli",
    "object",
    "rustc_demangle",
    "miniz_oxide",
    "libc",
    "hashbrown",
    "memchr",
    "once_cell",
    "pinwatch",
    "console",
    "opentelemetry",
    "prometheus",
];

/// Crates of [`INTERNAL_CRATES`] whose names a service's own crate may well have (a `console`
/// tool, an `object` store): in a file of the service's own they are the service's, where one
/// of them built from the service's tree is unlikely, and would not block on its own (helper-106:
/// a service crate named `console` lost its line). pinwatch's symbolization and exporters'
/// crates, and small helpers; in a registry or a vendored tree they stay plumbing.
const GENERIC_NAMES: &[&str] = &[
    "addr2line",
    "backtrace",
    "bytes",
    "console",
    "gimli",
    "hashbrown",
    "libc",
    "memchr",
    "miniz_oxide",
    "object",
    "once_cell",
    "opentelemetry",
    "prometheus",
    "rustc_demangle",
    "slab",
    "want",
];

/// The crates of [`INTERNAL_CRATES`]' projects named after them with `_` (`tokio_util`,
/// `parking_lot_core`): what a crate in a file of the service's own is judged against, where
/// [`is_internal`]'s rule by prefix would take the service's `http_gateway` for plumbing.
/// Others of the kind, found in no layout of dependencies, are taken for the service's.
const INTERNAL_FAMILY: &[&str] = &[
    "axum_core",
    "axum_extra",
    "console_api",
    "console_subscriber",
    "crossbeam_channel",
    "crossbeam_deque",
    "crossbeam_epoch",
    "crossbeam_queue",
    "crossbeam_utils",
    "futures_channel",
    "futures_core",
    "futures_executor",
    "futures_io",
    "futures_macro",
    "futures_sink",
    "futures_task",
    "futures_util",
    "http_body",
    "http_body_util",
    "hyper_timeout",
    "hyper_util",
    "opentelemetry_http",
    "opentelemetry_otlp",
    "opentelemetry_proto",
    "opentelemetry_sdk",
    "parking_lot_core",
    "pinwatch_cli",
    "pinwatch_macros",
    "prost_derive",
    "prost_types",
    "rayon_core",
    "serde_core",
    "serde_derive",
    "serde_json",
    "tokio_macros",
    "tokio_metrics",
    "tokio_stream",
    "tokio_util",
    "tonic_prost",
    "tonic_types",
    "tower_http",
    "tower_layer",
    "tower_service",
    "tracing_appender",
    "tracing_attributes",
    "tracing_core",
    "tracing_log",
    "tracing_opentelemetry",
    "tracing_subscriber",
];

/// Whether `krate` (with `_`, not `-`) is one of [`INTERNAL_CRATES`] or named after one.
fn is_internal(krate: &str) -> bool {
    INTERNAL_CRATES.iter().any(|c| {
        krate
            .strip_prefix(c)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('_'))
    })
}

/// Whether `f` is application code: it has a name, and its crate is not the runtime's, std's,
/// pinwatch's or the C library's. A frame's file decides when it is known: std's sources are
/// under `/rustc/`, a dependency's under cargo's registry or git checkouts (its crate is in the
/// path), and anything else (the application, its path dependencies) is the application's. A
/// name is judged by its base, without its generic arguments: `{async_fn#0}<alloc::string::
/// String>` (an inlined `async fn` body) names no crate, only its argument does.
pub(crate) fn is_application(f: &Frame) -> bool {
    let Some(name) = f.function.as_deref() else {
        return false;
    };
    let base = base_name(name);
    // In a source file of the service's own (its workspace, a path dependency): a crate of its
    // named like one of the runtime's (`http_gateway`, `tokio_jobs`) is still its own.
    let mut own_source = false;
    if let Some(file) = f.file.as_deref() {
        if is_std_source(file) || file.contains("/rust/deps/") || is_pinwatch_source(file) {
            return false;
        }
        if let Some(krate) = dependency_crate(file) {
            return !is_internal(&krate);
        }
        if !base.contains("::") || base.starts_with('<') {
            // A C symbol, or an inlined frame named without its path: keep it when it is in
            // the application's own sources and not the C library's.
            return !file.starts_with("./") && !file.contains("glibc") && !file.contains("/libc");
        }
        own_source = !is_vendored(file) && !is_system_path(file) && !packaged_elsewhere(file);
    }
    // A C symbol (no path) is libc or the unwinder.
    if !base.contains("::") {
        return false;
    }
    let krate = owning_crate(&base);
    if krate.is_empty() || !krate.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return false;
    }
    // A generic parameter (`<F as core::future::Future>::poll`) belongs to nobody.
    if krate.len() == 1 && krate.chars().all(|c| c.is_ascii_uppercase()) {
        return false;
    }
    if own_source {
        // Only the runtime's crates themselves, built from a path of the service's (a
        // `[patch]`, a fork, a build system's own layout of dependencies).
        let runtime = INTERNAL_CRATES.contains(&krate) && !GENERIC_NAMES.contains(&krate);
        return !runtime && !INTERNAL_FAMILY.contains(&krate);
    }
    !is_internal(krate)
}

/// Whether `file`, in no registry, checkout or `vendor/` directory, sits under a directory
/// that holds others' code as other build systems lay it out (`third_party/`, `external/`,
/// `/nix/store/`, `vendored/`, `deps/`). Such a file's crate is judged by its name, as one
/// without a file is (helper-85); elsewhere (a versioned release directory, a relative path,
/// `tests/`) only the runtime's own crates are plumbing ([`INTERNAL_FAMILY`], helper-86).
fn packaged_elsewhere(file: &str) -> bool {
    const OTHERS: [&str; 7] = [
        "/third_party/",
        "/third-party/",
        "/external/",
        "/nix/store/",
        "/vendored/",
        "/deps/",
        "cargo-vendor",
    ];
    let rooted = format!("/{file}");
    OTHERS.iter().any(|o| rooted.contains(o))
}

/// Whether `f` is the service's own code: application code (see [`is_application`]) whose
/// source file is known and is none of the dependencies' — not under cargo's registry or git
/// checkouts, not a vendored crate (`…/vendor/<crate>/src/…`), not std's (`/rustc/`), not a
/// system path (`/usr/lib/…`, `/usr/share/…`: a distribution's packaged crates; `/usr/src/` and
/// `/usr/local/src/` are where services are built, as in the `rust` container image) — so a
/// crate of the service's workspace, or a path dependency of its own. A frame without a file (a
/// build without line tables) is nobody's: `None` rather than a guess.
pub(crate) fn is_own_code(f: &Frame) -> bool {
    let Some(file) = f.file.as_deref() else {
        return false;
    };
    is_application(f)
        && dependency_crate(file).is_none()
        && !is_vendored(file)
        && !is_system_path(file)
}

/// Whether `file` is in a vendored crate (`cargo vendor`: `…/vendor/<crate>/src/…`, or a
/// `…/vendor/<crate>/lib.rs` outside any source tree), not the service's own code in a
/// directory called `vendor`: a module (`…/src/vendor/acme.rs`, `…/src/net/vendor/acme/mod.rs`),
/// a workspace member or the project itself (`…/vendor/src/main.rs`), tests (`…/tests/vendor/`).
fn is_vendored(file: &str) -> bool {
    const SOURCE_TREES: [&str; 4] = ["src", "tests", "examples", "benches"];
    file.match_indices("vendor/").any(|(v, _)| {
        let parent = match v.checked_sub(1) {
            None => "",
            Some(slash) if file.as_bytes()[slash] == b'/' => {
                file[..slash].rsplit('/').next().unwrap_or("")
            }
            // `…/avendor/`: not a directory called `vendor`.
            Some(_) => return false,
        };
        let Some((krate, below)) = file[v + "vendor/".len()..].split_once('/') else {
            return false;
        };
        if SOURCE_TREES.contains(&parent) || krate.is_empty() || krate == "src" {
            return false;
        }
        // The crate's own sources, or a file at its root while no source tree holds the
        // `vendor` directory.
        below.starts_with("src/") || (!below.contains('/') && !file[..v].contains("/src/"))
    })
}

/// Whether `file` is a system path, not where a service is built.
fn is_system_path(file: &str) -> bool {
    is_std_source(file)
        || (file.starts_with("/usr/")
            && !file.starts_with("/usr/src/")
            && !file.starts_with("/usr/local/src/"))
}

/// Whether `file` is one of pinwatch's own sources: under this crate's `src/` as it was built
/// (a path or git dependency of the application; from crates.io it is under the registry),
/// also where `--remap-path-prefix` renamed it (as it renames `file!()`).
fn is_pinwatch_source(file: &str) -> bool {
    let here = file!();
    let own_src = here
        .strip_suffix("analyze/reason.rs")
        .filter(|s| s.ends_with("src/"))
        .unwrap_or(here);
    is_under_source(file, own_src, concat!(env!("CARGO_MANIFEST_DIR"), "/src/"))
}

/// Whether `file` is under a crate's sources: `built`, where it was built, or `own_src`, where
/// `file!()` says its sources are. That is relative in a build of the crate's own workspace
/// (`detector/src/`), and stays so under `--remap-path-prefix` while the debug info joins it to
/// the remapped directory: then it is matched as whole parts of the path.
fn is_under_source(file: &str, own_src: &str, built: &str) -> bool {
    file.starts_with(built)
        || file.starts_with(own_src)
        // At least two parts (`detector/src/`): a bare `src/` (the crate built as its own
        // workspace, from its published archive) is every crate's.
        || (!own_src.starts_with('/')
            && own_src.trim_end_matches('/').contains('/')
            && file
                .match_indices(own_src)
                .any(|(i, _)| i > 0 && file.as_bytes()[i - 1] == b'/'))
}

/// The crate (`-` made `_`) of a file in cargo's registry
/// (`…/registry/src/<index>/<crate>-<version>/…`, its package directory versioned) or git
/// checkouts (`…/git/checkouts/<repo>-<hash>/<rev>/[<dir>/]<crate>/src/…`), under any
/// `CARGO_HOME`; `None` for any other file.
pub(crate) fn dependency_crate(file: &str) -> Option<String> {
    use crate::event::CargoSource;
    let name = match crate::event::cargo_source(file)? {
        CargoSource::Registry(package) => crate::event::package_name(package.split('/').next()?)?,
        CargoSource::Checkout { repo, from_rev } => {
            let dir = crate_dir(file)?;
            // A crate at the repository's root has its `src/` in the revision's directory: it
            // is named by the repository (`snmp2-<hash>`).
            if Some(dir) == from_rev.split('/').next() {
                repo.rsplit_once('-').map_or(repo, |(name, _)| name)
            } else {
                dir
            }
        }
    };
    Some(name.replace('-', "_"))
}

/// `futures-util-0.3.31` → `futures-util`: the name before the first `-` that starts a
/// `major.minor.patch` version.
fn strip_version(dir: &str) -> &str {
    crate::event::package_name(dir).unwrap_or(dir)
}

/// The directory that holds a source file's `src/`: the package's (`…/snmp2-0.4.1/src/x.rs` →
/// `snmp2-0.4.1`, `/work/app/dep/src/lib.rs` → `dep`). `None` for a file outside a `src/`, or
/// a relative path that starts with it.
fn crate_dir(file: &str) -> Option<&str> {
    let pos = file.rfind("/src/")?;
    let dir = file[..pos].rsplit('/').next()?;
    (!dir.is_empty() && dir != ".").then_some(dir)
}

/// The crate of a source file as the directory that holds its `src/` names it, without a
/// version (`…/tokio-1.54.1/src/x.rs` → `tokio`, `…/vendor/lock_api/src/x.rs` → `lock_api`,
/// `/work/app/dep/src/lib.rs` → `dep`), whatever holds that directory: cargo's registry, a
/// vendored copy, a distribution's crates, the service's own tree. `None` when it names none.
pub(crate) fn directory_crate(file: &str) -> Option<String> {
    let krate = strip_version(crate_dir(file)?).replace('-', "_");
    (!krate.is_empty() && krate.chars().all(|c| c.is_alphanumeric() || c == '_')).then_some(krate)
}

/// A Rust path for a source file: its crate and module (`…/snmp2-0.4.1/src/asyncsession.rs` →
/// `snmp2::asyncsession`, `…/dep/src/lib.rs` → `dep`, `/rustc/…/library/core/src/ops/
/// function.rs` → `core::ops::function`). What names an inlined closure or `async fn` body
/// whose debug info has no path and no outer frame to borrow one from (a line-tables-only
/// build keeps no namespaces). `None` when the file says nothing usable.
pub(crate) fn module_path(file: &str) -> Option<String> {
    if let Some(path) = target_module_path(file) {
        return Some(path);
    }
    let krate = directory_crate(file)?;
    let pos = file.rfind("/src/")?;
    let rel = file[pos + "/src/".len()..].strip_suffix(".rs")?;
    let mut parts: Vec<&str> = rel.split('/').collect();
    if parts.first() == Some(&"bin") {
        // `src/bin/name.rs` is its own crate.
        parts.remove(0);
        let bin = parts.first().copied()?.to_owned();
        parts.remove(0);
        return Some(join_modules(&bin.replace('-', "_"), &parts));
    }
    if matches!(parts.last(), Some(&"lib" | &"main" | &"mod")) {
        parts.pop();
    }
    Some(join_modules(&krate, &parts))
}

/// [`module_path()`] for an integration test's, an example's or a bench's file, each a crate of
/// its own named after its file or directory: `…/app/tests/pins.rs` → `pins`,
/// `…/examples/load/util.rs` → `load::util` (helper-83: a `#[pinwatch::test]` failure named a
/// bare `{async_fn#0}`). `None` for a file under none of them, or under a `src/` below one (a
/// crate of its own there).
fn target_module_path(file: &str) -> Option<String> {
    let file = format!("/{}", file.trim_start_matches("./"));
    let (pos, dir) = ["/tests/", "/examples/", "/benches/"]
        .iter()
        .filter_map(|d| file.rfind(d).map(|p| (p, d.len())))
        .max()?;
    // A `src/` below it (a package of its own there), a module directory of a crate's
    // (`src/tests/`), or a dependency's: the `src/` rule names it.
    if file.rfind("/src/").is_some_and(|src| src > pos)
        || file[..pos].ends_with("/src")
        || dependency_crate(&file).is_some()
    {
        return None;
    }
    let rel = file[pos + dir..].strip_suffix(".rs")?;
    let mut parts: Vec<&str> = rel.split('/').collect();
    let krate = parts.remove(0).replace('-', "_");
    if krate.is_empty() || !krate.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return None;
    }
    if matches!(parts.last(), Some(&"main" | &"mod")) {
        parts.pop();
    }
    Some(join_modules(&krate, &parts))
}

fn join_modules(krate: &str, modules: &[&str]) -> String {
    let mut path = krate.to_owned();
    for m in modules {
        if !m.chars().all(|c| c.is_alphanumeric() || c == '_') || m.is_empty() {
            break;
        }
        path.push_str("::");
        path.push_str(m);
    }
    path
}

/// A demangled name without its generic argument lists, which may hold any path:
/// `{async_fn#0}<alloc::string::String>` → `{async_fn#0}`,
/// `tokio::task::Harness<T,S>::poll` → `tokio::task::Harness::poll`. A leading qualified
/// self type (`<app::Job as core::future::Future>::poll`) is kept: it names the owner.
pub(crate) fn base_name(name: &str) -> String {
    if name.starts_with('<') {
        if let Some(end) = qualified_end(name) {
            return format!("{}{}", &name[..end], strip_generics(&name[end..]));
        }
    }
    strip_generics(name)
}

/// `s` without any `<…>` (a `->` inside one does not close it), and without the `::` of a
/// turbofish before one (v0 mangling's demangled names: `core::ptr::drop_in_place::<T>` →
/// `core::ptr::drop_in_place`, `f::<T>::{closure#0}` → `f::{closure#0}`).
fn strip_generics(s: &str) -> String {
    if !s.contains('<') {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut depth = 0usize;
    let mut prev = ' ';
    for c in s.chars() {
        match c {
            '<' => {
                if depth == 0 && out.ends_with("::") {
                    out.truncate(out.len() - 2);
                }
                depth += 1;
            }
            '>' if depth > 0 && prev != '-' => depth -= 1,
            _ if depth > 0 => {}
            _ => out.push(c),
        }
        prev = c;
    }
    out
}

/// The end (exclusive) of the leading `<…>` of `name`.
fn qualified_end(name: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut prev = ' ';
    for (i, c) in name.char_indices() {
        match c {
            '<' => depth += 1,
            '>' if prev != '-' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        prev = c;
    }
    None
}

/// The crate a demangled function belongs to: `app::f` → `app`; `<app::T as core::X>::m` →
/// `app`; `<&T as …>` → `T`'s.
pub(crate) fn owning_crate(name: &str) -> &str {
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

    /// What a probe that found its thread running just after a block names: the sleep its
    /// stack is still in (std's or the C library's, above the application's frame), else `other`.
    #[test]
    fn a_woken_thread_names_the_sleep_its_stack_is_in() {
        let woken = |frames: &[Frame]| woken(&StackFacts::of(frames)).reason;
        for sleep in [
            "__GI___clock_nanosleep",
            "__nanosleep",
            "nanosleep",
            "usleep",
            "std::thread::sleep",
            "std::thread::functions::sleep",
            "std::sys::pal::unix::thread::Thread::sleep",
            "std::sys::thread::unix::sleep",
        ] {
            let app = Frame {
                file: Some("src/main.rs".into()),
                ..f("app::handler")
            };
            assert_eq!(woken(&[f(sleep), app]), Reason::Sleep, "{sleep}");
        }
        // Not a sleep: the application's own `sleep`, a sleep below the application's frame
        // (the thread is in the application's code, called from it), a name that only looks
        // alike, nothing sampled.
        let app = |name: &str| Frame {
            file: Some("src/main.rs".into()),
            ..f(name)
        };
        assert_eq!(woken(&[app("app::sleep")]), Reason::Other);
        assert_eq!(
            woken(&[app("app::work"), f("std::thread::sleep")]),
            Reason::Other
        );
        assert_eq!(
            woken(&[f("clock_nanosleep_time64x"), app("app::work")]),
            Reason::Other
        );
        assert_eq!(woken(&[]), Reason::Other);
    }

    fn proc(syscall: Option<&'static str>) -> ProcState {
        ProcState {
            state: if syscall.is_some() { 'S' } else { 'R' },
            syscall,
            ..ProcState::default()
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

    /// Real resolver stacks (glibc 2.39, std 1.9x; innermost first): each is `dns`, whether the
    /// resolver waits on its socket or runs.
    #[test]
    fn dns_reasons() {
        let at = |name: &str, file: &str| Frame {
            function: Some(name.to_owned()),
            file: Some(file.to_owned()),
            line: Some(1),
            locks: 0,
        };
        let glibc_udp = [
            f("__GI___poll"),
            f("send_dg"),
            f("__res_context_send"),
            f("__res_context_query"),
            f("__res_context_search"),
            f("_nss_dns_gethostbyname4_r"),
            f("gaih_inet"),
            f("__GI_getaddrinfo"),
            f("<std::sys::net::connection::socket::LookupHost as core::convert::TryFrom<(&str,u16)>>::try_from::{{closure}}"),
            f("std::sys::pal::common::small_c_string::run_with_cstr_stack"),
            f("<(&str,u16) as std::net::socket_addr::ToSocketAddrs>::to_socket_addrs"),
            f("<str as std::net::socket_addr::ToSocketAddrs>::to_socket_addrs"),
            f("app::connect_db"),
        ];
        for op in ["poll", "recvfrom", "connect", "sendto"] {
            let v = classify(Some(&proc(Some(op))), &glibc_udp, false, false).unwrap();
            assert_eq!((v.reason, v.operation.as_str()), (Reason::Dns, op));
        }
        // Parsing /etc/hosts on the CPU.
        let files = [
            f("__strchr_avx2"),
            f("_nss_files_gethostbyname4_r"),
            f("gaih_inet"),
            f("getaddrinfo"),
            f("app::resolve"),
        ];
        let v = classify(Some(&proc(None)), &files, false, false).unwrap();
        assert_eq!((v.reason, v.operation.as_str()), (Reason::Dns, "running"));
        // Line-tables-only names of std's inlined frames.
        let inlined = [
            f("__GI___poll"),
            f("getaddrinfo"),
            at(
                "to_socket_addrs<alloc::string::String>",
                "/rustc/abc/library/std/src/net/socket_addr.rs",
            ),
            at(
                "{async_fn#0}<alloc::string::String>",
                "/src/snmp2/src/lib.rs",
            ),
        ];
        let v = classify(Some(&proc(Some("poll"))), &inlined[2..], false, false).unwrap();
        assert_eq!(v.reason, Reason::Dns);
        let v = classify(Some(&proc(Some("poll"))), &inlined, false, false).unwrap();
        assert_eq!(v.reason, Reason::Dns);
        let gethost = [
            f("__gethostbyname_r"),
            f("gethostbyname"),
            f("app::c_client"),
        ];
        let v = classify(Some(&proc(Some("recvfrom"))), &gethost, false, false).unwrap();
        assert_eq!(v.reason, Reason::Dns);
        // Not a resolver: plain socket I/O, and names that only look alike.
        let io = [
            f("__GI___poll"),
            f("std::net::tcp::TcpStream::read"),
            f("app::res_count"),
            f("app::lookup_host"),
        ];
        let v = classify(Some(&proc(Some("poll"))), &io, false, false).unwrap();
        assert_eq!(v.reason, Reason::Io);
        // A lock held while resolving stays lock_held: the lock is what to fix first.
        let v = classify(Some(&proc(Some("poll"))), &glibc_udp, true, false).unwrap();
        assert_eq!(v.reason, Reason::LockHeld);
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
    fn names_are_judged_by_their_base_and_dependencies_by_their_crate() {
        let at = |name: &str, file: &str| Frame {
            function: Some(name.to_owned()),
            file: Some(file.to_owned()),
            line: Some(1),
            locks: 0,
        };
        const REG: &str = "/home/me/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f";
        // An inlined generic async fn body of a dependency from crates.io: the dependency's.
        assert!(is_application(&at(
            "{async_fn#0}<alloc::string::String>",
            &format!("{REG}/snmp2-0.4.1/src/asyncsession.rs")
        )));
        // The same in a path dependency, and once qualified.
        assert!(is_application(&at(
            "{async_fn#0}<alloc::string::String>",
            "/work/app/dep/src/lib.rs"
        )));
        assert!(is_application(&at(
            "dep::{async_fn#0}",
            "/work/app/dep/src/lib.rs"
        )));
        // Runtime and plumbing crates, and the crates named after them, are not.
        for krate in [
            "tokio-1.54.1",
            "tokio-util-0.7.15",
            "futures-util-0.3.31",
            "hyper-util-0.1.10",
            "http-body-1.0.1",
            "serde_json-1.0.140",
            "parking_lot_core-0.9.10",
            "lock_api-0.4.14",
            "console-subscriber-0.5.0",
        ] {
            assert!(
                !is_application(&at("{closure#0}", &format!("{REG}/{krate}/src/x.rs"))),
                "{krate}"
            );
        }
        // A crate of the service's own named like one of the runtime's is the service's, in
        // its workspace or as a path dependency (helper-83: `http_gateway` lost its line); the
        // runtime's crate itself built from the service's tree (a `[patch]`), a vendored one and
        // a distribution's are not.
        for (name, file, own) in [
            (
                "http_gateway::main::{async_block#0}",
                "/srv/gw/src/main.rs",
                true,
            ),
            ("tokio_jobs::run", "/work/app/tokio-jobs/src/lib.rs", true),
            // A crate of the service's named like one of pinwatch's own dependencies
            // (helper-106: `console` lost its line); from a registry it is plumbing.
            ("console::main::{closure#0}", "/srv/console/src/main.rs", true),
            ("object::store::put", "/work/app/object/src/store.rs", true),
            (
                "console::term::f",
                "/h/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/console-0.15.11/src/term.rs",
                false,
            ),
            (
                "tokio::runtime::park::park",
                "/work/app/tokio/tokio/src/park.rs",
                false,
            ),
            (
                "tokio_util::codec::f",
                "/work/app/vendor/tokio-util/src/codec.rs",
                false,
            ),
            (
                "tokio_util::codec::f",
                "/usr/share/cargo/registry/tokio-util-0.7.15/src/codec.rs",
                false,
            ),
        ] {
            assert_eq!(is_application(&at(name, file)), own, "{name} in {file}");
        }
        // Dependencies laid out by other build systems keep the rule by name (helper-85).
        for file in [
            "/nix/store/abc-vendor-cargo-deps/c19b/tokio-util-0.7.15/src/codec/mod.rs",
            "/build/cargo-vendor-dir/parking_lot_core-0.9.10/src/parking_lot.rs",
            "external/crates__tracing-subscriber-0.3.19/src/fmt/mod.rs",
            "/b/external/rules_rust~~crate~crates__futures-util-0.3.31/src/lib.rs",
            "/crates/hyper-util-0.1.10/src/client.rs",
            "third_party/rust/crossbeam-channel/src/flavors/list.rs",
            "/srv/app/vendored/tokio-util/src/lib.rs",
            "/opt/deps/tokio-util/src/lib.rs",
            "tokio-stream-0.1.17/src/lib.rs",
            "/h/.cargo/git/checkouts/tokio-abc/1234567/tokio-util/build.rs",
        ] {
            assert!(!is_application(&at("tokio_util::codec::f", file)), "{file}");
            assert!(!is_own_code(&at("tokio_util::codec::f", file)), "{file}");
        }
        // The service's own package, named after its crate, wherever it is built: a release
        // directory, a relative path, its tests and examples (helper-86).
        for file in [
            "/srv/http-gateway/src/main.rs",
            "/root/rpmbuild/BUILD/http-gateway-1.2.3/src/main.rs",
            "src/main.rs",
            "./src/main.rs",
            "/srv/gw/tests/http_api.rs",
            "examples/http_server.rs",
        ] {
            assert!(is_application(&at("http_gateway::main::f", file)), "{file}");
        }
        // A fork of a runtime crate patched in from the service's tree stays plumbing.
        assert!(!is_application(&at(
            "parking_lot_core::parking_lot::park",
            "/work/forks/parking_lot/core/src/parking_lot.rs"
        )));
        // A crate whose name merely starts like an internal one is the application's.
        assert!(is_application(&at(
            "{closure#0}",
            &format!("{REG}/tokioish-1.0.0/src/lib.rs")
        )));
        // std's own dependencies.
        assert!(!is_application(&at(
            "hashbrown::raw::RawTable<T,A>::find",
            "/rust/deps/hashbrown-0.15.2/src/raw/mod.rs"
        )));
        // Without a file, the base decides: a path-less base is no crate's.
        assert!(!is_application(&f("{async_fn#0}<alloc::string::String>")));
        assert!(is_application(&f("app::Job<tokio::sync::Mutex<u8>>::run")));
        assert!(!is_application(&f(
            "tokio_util::codec::Framed<app::C>::poll"
        )));
    }

    /// Whose code a file is, decided by whole parts of its path: a service built under
    /// `/usr/src/`, with a module called `vendor`, in a directory called `registry` or
    /// `detector`, is the service's; a vendored crate, a distribution's packaged crate, a git
    /// dependency under any CARGO_HOME, and pinwatch's own sources are not.
    #[test]
    fn own_code_is_told_by_whole_parts_of_the_path() {
        let at = |name: &str, file: &str| Frame {
            function: Some(name.to_owned()),
            file: Some(file.to_owned()),
            line: Some(1),
            locks: 0,
        };
        for (name, file) in [
            ("app::work", "/usr/src/app/src/main.rs"),
            ("app::work", "/usr/local/src/app/src/main.rs"),
            ("app::vendor::acme::busy", "/app/src/vendor/acme.rs"),
            ("app::vendor::acme::busy", "/app/src/vendor/acme/mod.rs"),
            (
                "app::net::vendor::acme::busy",
                "/app/src/net/vendor/acme/mod.rs",
            ),
            ("vendor::busy", "/app/crates/vendor/src/lib.rs"),
            ("app::busy", "/srv/vendor/src/main.rs"),
            ("app::busy", "/app/tests/vendor/x/y.rs"),
            ("perf::busy", "/usr/src/rustc-perf/src/main.rs"),
            ("perf::busy", "/home/me/rustc-perf/library/src/main.rs"),
            ("lib::busy", "/srv/rustc-tools-src/library/src/lib.rs"),
            // Directories named like a release, holding no std (helper-101).
            ("app::busy", "/home/me/rustc-2/library/src/main.rs"),
            (
                "app::busy",
                "/home/me/rustc-1.80-upgrade/library/src/lib.rs",
            ),
            ("app::busy", "/srv/rustc-3d-engine/library/src/lib.rs"),
            (
                "app::busy",
                "/home/me/rustc-1.78.0-src/library/app/src/lib.rs",
            ),
            ("app::busy", "/home/me/rustc-2.0/library/core/src/main.rs"),
            (
                "app::busy",
                "/home/me/rustc-1.78.0-betax/library/core/src/main.rs",
            ),
            (
                "app::busy",
                "/usr/src/debug/rust-tools-2/library/core/src/main.rs",
            ),
            ("registry::api::get", "/w/registry/src/api/handlers.rs"),
        ] {
            assert!(is_own_code(&at(name, file)), "{file}");
        }
        for (name, file) in [
            ("acme::busy", "/app/vendor/acme/src/lib.rs"),
            ("acme::busy", "/app/vendor/acme/lib.rs"),
            ("acme::busy", "/home/me/src/app/vendor/acme/src/lib.rs"),
            ("acme::busy", "vendor/acme/src/lib.rs"),
            (
                "core::ops::function::FnOnce::call_once",
                "/usr/src/rustc-1.75.0/library/core/src/ops/function.rs",
            ),
            ("foo::x", "/usr/share/cargo/registry/foo-1.0.0/src/lib.rs"),
            (
                "snmp2::get",
                "/opt/cargo/git/checkouts/snmp2-abc/1a2b3c4/src/lib.rs",
            ),
            (
                "snmp2::get",
                "/root/.cargo/git/checkouts/snmp2-abc/1a2b3c4/src/lib.rs",
            ),
        ] {
            assert!(!is_own_code(&at(name, file)), "{file}");
        }
        assert_eq!(
            dependency_crate("/opt/cargo/git/checkouts/snmp2-abc/1a2b3c4/src/lib.rs").as_deref(),
            Some("snmp2")
        );
        assert_eq!(dependency_crate("/w/registry/src/api/handlers.rs"), None);
        assert_eq!(
            crate::event::short_path("/opt/cargo/git/checkouts/snmp2-abc/1a2b3c4/src/lib.rs"),
            "1a2b3c4/src/lib.rs"
        );
        assert_eq!(
            crate::event::short_path("/w/registry/src/api/handlers.rs"),
            "/w/registry/src/api/handlers.rs"
        );
        // pinwatch's own sources, as built here, are nobody's application code.
        assert!(!is_application(&at(
            "{closure#0}",
            concat!(env!("CARGO_MANIFEST_DIR"), "/src/watch/scan.rs")
        )));
        assert!(!is_application(&at(
            "{closure#0}",
            "detector/src/watch/scan.rs"
        )));
        // pinwatch as a dependency (`file!()` absolute): a service's crate in a directory called
        // `detector` is not pinwatch's; in pinwatch's own workspace (`file!()` relative), the
        // same sources under a remapped directory are.
        let dep = "/home/me/.cargo/git/checkouts/pinwatch-abc/1234567/detector/src/";
        assert!(!is_under_source("/work/app/detector/src/lib.rs", dep, dep));
        assert!(is_under_source(&format!("{dep}watch/scan.rs"), dep, dep));
        let built = "/work/main/detector/src/";
        assert!(is_under_source(
            "/build/detector/src/watch/scan.rs",
            "detector/src/",
            built
        ));
        assert!(is_under_source(
            "/work/main/detector/src/watch/scan.rs",
            "detector/src/",
            built
        ));
        assert!(!is_under_source(
            "/work/app/mydetector/src/lib.rs",
            "detector/src/",
            built
        ));
        // Built as its own workspace (a published archive's tests): `file!()` is `src/…`,
        // which names no one crate.
        assert!(!is_under_source(
            "/w/app/src/main.rs",
            "src/",
            "/tmp/pinwatch-0.1.0/src/"
        ));
        // Remapped (`--remap-path-prefix`): the debug info's directory is another.
        assert!(!is_application(&at(
            "{closure#0}",
            "/build/detector/src/watch/scan.rs"
        )));
        // An inlined frame named without a path, in a distribution's std or a rust-src
        // component: std's, not the service's.
        for file in [
            "/usr/src/rustc-1.75.0/library/core/src/ops/function.rs",
            "/root/.rustup/toolchains/x/lib/rustlib/src/rust/library/core/src/ops/function.rs",
            // Built from the source release without remapping (helper-100): Fedora's, Alpine's,
            // Gentoo's, a nightly's.
            "/builddir/build/BUILD/rustc-1.78.0-src/library/core/src/ops/function.rs",
            "/home/buildozer/aports/main/rust/src/rustc-1.78.0-src/library/core/src/ops/function.rs",
            "/var/tmp/portage/dev-lang/rust-1.78.0/work/rustc-1.78.0-src/library/core/src/ops/function.rs",
            "/build/rustc-nightly-src/library/core/src/ops/function.rs",
            "/build/rustc-1.80.0-beta.3-src/library/core/src/ops/function.rs",
            // std's other crates (helper-102), and Fedora's debug sources.
            "/tmp/rustc-1.90.0-src/library/compiler-builtins/compiler-builtins/src/int/mod.rs",
            "/tmp/rustc-1.90.0-src/library/std_detect/src/detect/mod.rs",
            "/usr/src/debug/rust-1.78.0-1.fc40.x86_64/library/core/src/ops/function.rs",
            "/usr/src/debug/rust-1.78.0-1.fc40.x86_64/rustc-1.78.0-src/library/core/src/lib.rs",
        ] {
            assert!(
                !is_application(&at("call_once<app::f::{closure_env#1}, ()>", file)),
                "{file}"
            );
        }
    }

    #[test]
    fn crate_and_module_paths_from_files() {
        assert_eq!(
            module_path("/h/.cargo/registry/src/index.crates.io-x/snmp2-0.4.1/src/asyncsession.rs")
                .as_deref(),
            Some("snmp2::asyncsession")
        );
        assert_eq!(
            module_path("/h/.cargo/registry/src/i/futures-util-0.3.31/src/future/mod.rs")
                .as_deref(),
            Some("futures_util::future")
        );
        assert_eq!(
            module_path("/work/app/dep/src/lib.rs").as_deref(),
            Some("dep")
        );
        assert_eq!(
            module_path("/work/app/src/bin/pin-service.rs").as_deref(),
            Some("pin_service")
        );
        assert_eq!(
            module_path("/rustc/abc/library/core/src/ops/function.rs").as_deref(),
            Some("core::ops::function")
        );
        assert_eq!(module_path("src/main.rs"), None);
        // Integration tests, examples and benches: each a crate of its own.
        for (file, path) in [
            ("/tmp/app/tests/pins.rs", Some("pins")),
            ("/tmp/app/tests/slow-io/main.rs", Some("slow_io")),
            ("/tmp/app/tests/slow-io/db.rs", Some("slow_io::db")),
            ("detector/examples/web_service.rs", Some("web_service")),
            ("./benches/storm.rs", Some("storm")),
            // A crate of its own under a `tests` directory: named as such.
            ("/work/tests/dep/src/lib.rs", Some("dep")),
            // A module directory of a crate's, or a dependency's (helper-86).
            (
                "/work/app/src/tests/helpers.rs",
                Some("app::tests::helpers"),
            ),
            ("/work/app/src/tests/mod.rs", Some("app::tests")),
            (
                "/h/.cargo/registry/src/i/tokio-1.40.0/src/runtime/tests/queue.rs",
                Some("tokio::runtime::tests::queue"),
            ),
            ("/work/app/tests/fixtures/data.txt", None),
        ] {
            assert_eq!(module_path(file).as_deref(), path, "{file}");
        }
        assert_eq!(module_path("./nptl/pthread_create.c"), None);
        assert_eq!(
            dependency_crate("/h/.cargo/registry/src/i/md-5-0.10.6/src/lib.rs").as_deref(),
            Some("md_5")
        );
        assert_eq!(
            dependency_crate("/h/.cargo/git/checkouts/snmp-abc123/f00/snmp2/src/lib.rs").as_deref(),
            Some("snmp2")
        );
        assert_eq!(dependency_crate("/work/app/dep/src/lib.rs"), None);
        assert_eq!(
            base_name("<app::Job<T> as core::future::Future>::poll<u8>"),
            "<app::Job<T> as core::future::Future>::poll"
        );
        assert_eq!(base_name("tokio::X<fn() -> u8, T>::poll"), "tokio::X::poll");
        // v0 mangling's turbofish: the `::` before the arguments goes with them.
        assert_eq!(
            base_name("core::ptr::drop_in_place::<std::collections::hash::map::HashMap<u64, alloc::string::String>>"),
            "core::ptr::drop_in_place"
        );
        assert_eq!(
            base_name("app::handler::<u8>::{closure#0}"),
            "app::handler::{closure#0}"
        );
        assert_eq!(
            base_name("<app::Job as core::future::Future>::poll::<u8>"),
            "<app::Job as core::future::Future>::poll"
        );
        // A name with no arguments, `->` and all, is kept as it is.
        assert_eq!(base_name("app::f -> ::x"), "app::f -> ::x");
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
