//! The pinned event: what the watchdog reports and what every sink receives.
//!
//! Its JSON form (one object per line in a recording) is a stable interface: see
//! [`RECORD_SCHEMA`] and docs/recording.md's "Recording format" section.

use std::fmt;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// Version of the JSON-lines recording format. It changes only when a field changes meaning or
/// disappears, or a field gains a value old readers reject; new fields may appear without a bump.
///
/// Schema 2 added the `retracted` state (and, as new fields, `run_id`, `pid`, `profile`,
/// `no_stack`). Schema 1 recordings are still read.
pub const RECORD_SCHEMA: u32 = 2;

/// The oldest schema [`PinnedEvent::from_json_line`] reads.
pub const OLDEST_READABLE_SCHEMA: u32 = 1;

/// Whether the pinned poll was still running when the event was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// The poll is still running: `duration` is how long it has run so far. A poll that stays
    /// stuck is reported again every report interval.
    InProgress,
    /// The poll returned: `duration` is its full length.
    Completed,
    /// The poll turned out not to pin its worker: its thread had handed the worker to another
    /// thread (`tokio::task::block_in_place`), which tokio tells only after a delay. The earlier
    /// reports of this poll (same `run_id` and `id`) are void.
    Retracted,
}

impl State {
    /// `in_progress` or `completed`.
    pub fn as_str(self) -> &'static str {
        match self {
            State::InProgress => "in_progress",
            State::Completed => "completed",
            State::Retracted => "retracted",
        }
    }
}

/// Why the worker was pinned: JFR's `pinnedReason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reason {
    /// Running on a CPU, never yielding.
    Cpu,
    /// In the `nanosleep` family (`std::thread::sleep`, `usleep`).
    Sleep,
    /// In a blocking I/O system call.
    Io,
    /// Resolving a host name on the worker: `getaddrinfo` and its kin, or std's
    /// `ToSocketAddrs` / `to_socket_addrs`, on the stack (its wait on the resolver's socket
    /// would otherwise read as `io`). Needs a stack: with `PINWATCH_STACKS=off` it is `io`.
    Dns,
    /// Waiting for a contended lock.
    LockWait,
    /// Blocked in a system call while holding at least one instrumented lock.
    LockHeld,
    /// Blocking inside a `LazyLock` / `OnceLock` / `Once` initializer.
    OnceInit,
    /// Waiting for another thread's `LazyLock` / `OnceLock` / `Once` initializer.
    OnceWait,
    /// Blocked in something else.
    Other,
}

impl Reason {
    /// Every reason, in declaration order.
    pub const ALL: [Reason; 9] = [
        Reason::Cpu,
        Reason::Sleep,
        Reason::Io,
        Reason::Dns,
        Reason::LockWait,
        Reason::LockHeld,
        Reason::OnceInit,
        Reason::OnceWait,
        Reason::Other,
    ];

    /// The snake_case name used in recordings and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Cpu => "cpu",
            Reason::Sleep => "sleep",
            Reason::Io => "io",
            Reason::Dns => "dns",
            Reason::LockWait => "lock_wait",
            Reason::LockHeld => "lock_held",
            Reason::OnceInit => "once_init",
            Reason::OnceWait => "once_wait",
            Reason::Other => "other",
        }
    }
}

/// The runtime-level advice for a pin on a current-thread runtime (`runtime_advice`).
pub(crate) const CURRENT_THREAD_ADVICE: &str = "a current-thread runtime stops its timers and I/O \
    for as long as any poll runs: the multi-thread runtime (flavor = \"multi_thread\") keeps \
    them running on another worker while one is pinned";

impl Reason {
    /// What usually fixes a pin of this reason, in one short line; `operation` is the event's
    /// `blocking_operation` (it tells a file from a socket for `io`).
    pub fn advice(self, operation: Option<&str>) -> &'static str {
        match self {
            Reason::Cpu => {
                "move the computation to tokio::task::spawn_blocking or rayon, or yield with tokio::task::yield_now().await"
            }
            Reason::Sleep => "use tokio::time::sleep(..).await instead of std::thread::sleep",
            Reason::Dns => {
                "use tokio::net::lookup_host(..).await (or resolve once at start-up), not std's ToSocketAddrs"
            }
            Reason::Io => match operation {
                Some(
                    "recvfrom" | "sendto" | "recvmsg" | "sendmsg" | "recvmmsg" | "sendmmsg"
                    | "connect" | "accept" | "accept4" | "poll" | "ppoll" | "select"
                    | "pselect6" | "epoll_wait" | "epoll_pwait",
                ) => "use tokio::net, or move the call to tokio::task::spawn_blocking",
                Some(
                    "open" | "openat" | "fsync" | "fdatasync" | "sync_file_range" | "stat"
                    | "lstat" | "fstat" | "statx" | "newfstatat" | "unlink" | "unlinkat"
                    | "rename" | "renameat" | "mkdir" | "mkdirat" | "ftruncate" | "fallocate"
                    | "getdents64" | "pread64" | "pwrite64" | "flock",
                ) => "use tokio::fs, or move the call to tokio::task::spawn_blocking",
                _ => "use tokio::fs / tokio::net, or move the call to tokio::task::spawn_blocking",
            },
            Reason::LockWait => {
                "its holder keeps the lock across slow work: shorten that, or use tokio::sync::Mutex (RwLock for a read-write lock)"
            }
            Reason::LockHeld => {
                "don't hold a std lock across blocking work (drop the guard first), or use tokio::sync::Mutex"
            }
            Reason::OnceInit | Reason::OnceWait => {
                "initialize it before the runtime starts, or use tokio::sync::OnceCell"
            }
            Reason::Other => {
                "move the blocking call to tokio::task::spawn_blocking, or use tokio::task::block_in_place if it is unavoidable"
            }
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A place in the source.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SourceLocation {
    /// File as the compiler saw it.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

impl SourceLocation {
    pub(crate) fn from_std(l: &std::panic::Location<'_>) -> Self {
        SourceLocation {
            file: l.file().to_owned(),
            line: l.line(),
            column: l.column(),
        }
    }
}

impl fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// The worker thread that was pinned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worker {
    /// tokio's worker index, when the thread is one of the runtime's workers.
    pub index: Option<usize>,
    /// Linux thread id (as in `/proc/self/task/<tid>`).
    pub tid: i32,
    /// Thread name.
    pub name: String,
}

/// One stack frame.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    /// Demangled function name, without the hash.
    pub function: Option<String>,
    /// Source file.
    pub file: Option<String>,
    /// Source line.
    pub line: Option<u32>,
    /// How many instrumented locks this frame took and still holds (`<== locks:N`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub locks: u32,
}

#[cfg(test)]
impl PinnedEvent {
    /// An event of worker 0 whose task id is its id, with a top frame at `src/app.rs:line`.
    pub(crate) fn for_test(
        id: u64,
        state: State,
        reason: Reason,
        ms: u64,
        line: u32,
    ) -> PinnedEvent {
        PinnedEvent {
            id,
            run_id: "run".into(),
            pid: 1,
            state,
            start: SystemTime::now(),
            duration: Duration::from_millis(ms),
            threshold: Duration::from_millis(20),
            task_id: Some(id),
            block_on: false,
            current_thread: false,
            spawned_at: None,
            worker: Worker {
                index: Some(0),
                tid: 1,
                name: "w".into(),
            },
            reason: Some(reason),
            other_reasons: vec![],
            blocking_operation: None,
            advice: Some(reason.advice(None).to_owned()),
            top_frame: Some(Frame {
                function: Some("app::f".into()),
                file: Some("src/app.rs".into()),
                line: Some(line),
                locks: 0,
            }),
            app_frame: None,
            profile: vec![],
            no_stack: None,
            stack: vec![],
            held_locks: vec![],
            lock_holder: None,
            samples: 1,
            report: 1,
            cpu_wait: Duration::ZERO,
            runtime_stalled: false,
            heartbeat_late: None,
            drivers: None,
            runtime_advice: None,
            tasks_queued_behind: None,
            victims: None,
            spans: Vec::new(),
            trace_id: None,
            span_id: None,
        }
    }
}

#[cfg(test)]
impl Frame {
    /// A frame with just a function name.
    pub(crate) fn named(name: &str) -> Frame {
        Frame {
            function: Some(name.to_owned()),
            ..Frame::default()
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Frame {
    /// Whether `other` is the same function at the same place (lock marks aside).
    pub fn same_place(&self, other: &Frame) -> bool {
        (&self.function, &self.file, self.line) == (&other.function, &other.file, other.line)
    }

    /// The frame with its file as every build machine names it ([`crate_path`]):
    /// `svc::api::orders (svc/src/api.rs:88)`; displays like the frame otherwise.
    pub fn portable(&self) -> Frame {
        Frame {
            file: self.portable_file(),
            ..self.clone()
        }
    }

    /// The frame's file as every build machine names it: [`crate_path`], its crate's directory
    /// named after the crate of the frame's function (`svc/src/api.rs` for `svc::api::orders`,
    /// wherever it was checked out).
    pub fn portable_file(&self) -> Option<String> {
        let file = self.file.as_deref()?;
        let krate = self.function.as_deref().and_then(function_crate);
        Some(crate_named_path(file, krate))
    }

    /// `file:line` (or `file`) with the file as every build machine names it
    /// ([`portable_file`](Self::portable_file)); `None` without a file.
    pub fn portable_location(&self) -> Option<String> {
        let file = self.portable_file()?;
        Some(match self.line {
            Some(line) => format!("{file}:{line}"),
            None => file,
        })
    }

    /// `file:line` with a dependency's file cut to its package (`argon2-0.5.3/src/block.rs`,
    /// from cargo's registry or git checkouts; `library/std/src/…` from std's sources); `None`
    /// without a file.
    pub fn short_location(&self) -> Option<String> {
        let file = self.file.as_deref()?;
        let short = short_path(file);
        Some(match self.line {
            Some(line) => format!("{short}:{line}"),
            None => short.to_owned(),
        })
    }
}

/// `file` without the part that says only where cargo keeps dependencies: from the package's
/// directory on for cargo's registry and git checkouts, from `library/` on for std's sources
/// (`/rustc/<hash>/`, a rust-src component's, a rustc built from its source release).
pub fn short_path(file: &str) -> &str {
    match cargo_source(file) {
        Some(CargoSource::Registry(package)) => return package,
        Some(CargoSource::Checkout { from_rev, .. }) => return from_rev,
        None => {}
    }
    match std_library(file) {
        Some(at) => &file[at..],
        None => file,
    }
}

/// Whether `file` is std's source: `/rustc/<hash>/library/…` as rustup's builds name it, a
/// rust-src component or `-Zbuild-std` (`…/lib/rustlib/src/rust/library/…`), or a rustc built
/// from its source release without remapping its paths ([`std_library`]).
pub(crate) fn is_std_source(file: &str) -> bool {
    file.starts_with("/rustc/") || std_library(file).is_some()
}

/// Where the part of std's source `file` that every build shares begins (`library/…`): past
/// `/rustc/<hash>/`, past a rust-src component's `…/lib/rustlib/src/rust/`, or past the
/// directory of a rustc built from its source release without remapping — a distribution's
/// (`/usr/src/rustc-1.75.0/`; Fedora's `/builddir/build/BUILD/rustc-1.78.0-src/`, or its
/// debug sources' `/usr/src/debug/rust-1.78.0-1.fc40.x86_64/`; Alpine's and Gentoo's under
/// their build directories) or one's own (helper-100) — when one of std's crates follows
/// (`library/std/`, `library/core/`, …): a service's `~/rustc-2/library/src/` or
/// `rustc-1.80-upgrade/` worktree is not std (helper-101). `None` when `file` is not std's.
fn std_library(file: &str) -> Option<usize> {
    const RUST_SRC: &str = "/lib/rustlib/src/rust/";
    const DEBUG_SOURCES: &str = "/usr/src/debug/rust-";
    // The crates of std's workspace, `library/`'s directories (helper-102).
    const CRATES: [&str; 21] = [
        "std",
        "core",
        "alloc",
        "proc_macro",
        "test",
        "panic_unwind",
        "panic_abort",
        "unwind",
        "stdarch",
        "std_detect",
        "compiler-builtins",
        "backtrace",
        "portable-simd",
        "rtstartup",
        "profiler_builtins",
        "windows_targets",
        "sysroot",
        "rustc-std-workspace-core",
        "rustc-std-workspace-alloc",
        "rustc-std-workspace-std",
        "windows_link",
    ];
    if let Some(rest) = file.strip_prefix("/rustc/") {
        return rest.find('/').map(|slash| "/rustc/".len() + slash + 1);
    }
    if let Some(at) = file.find(RUST_SRC) {
        return Some(at + RUST_SRC.len());
    }
    // `1.78.0`, `1.78`, `1.80.0-beta.3`, `nightly`, `beta`, each with `-src` or not.
    let release = |r: &str| {
        let r = r.strip_suffix("-src").unwrap_or(r);
        let (version, pre) = r.split_once('-').unwrap_or((r, ""));
        matches!(r, "nightly" | "beta")
            || (is_version(version)
                && (pre.is_empty() || pre == "nightly" || pre == "beta" || {
                    pre.strip_prefix("beta.")
                        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                }))
    };
    // The directory that holds `library/`, and the rest of the path from `library/` on, when a
    // crate of std's is there.
    let std_below = |start: usize| {
        let (name, below) = file[start..].split_once('/')?;
        let krate = below.strip_prefix("library/")?.split('/').next()?;
        CRATES
            .contains(&krate)
            .then_some((name, start + name.len() + 1))
    };
    if let Some(rest) = file.strip_prefix(DEBUG_SOURCES) {
        // `rust-<version>-<release>.<arch>`.
        let version = rest.split_once('-').is_some_and(|(v, _)| is_version(v));
        if let Some((_, at)) = std_below(DEBUG_SOURCES.len() - "rust-".len()).filter(|_| version) {
            return Some(at);
        }
    }
    file.match_indices("/rustc-").find_map(|(at, _)| {
        let (name, at) = std_below(at + "/rustc-".len())?;
        release(name).then_some(at)
    })
}

/// Whether `v` is a Rust release's version: `1.78` or `1.78.0`.
fn is_version(v: &str) -> bool {
    let numbers: Vec<&str> = v.split('.').collect();
    (2..=3).contains(&numbers.len())
        && numbers[0] == "1"
        && numbers
            .iter()
            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Where cargo keeps a dependency's source file, under any `CARGO_HOME` (`~/.cargo`,
/// `/opt/cargo`, `/usr/local/cargo`).
pub(crate) enum CargoSource<'a> {
    /// `…/registry/src/<index>/<package>-<version>/…`: the path from the package's directory
    /// on. The directory is versioned (`tokio-1.54.1`): a service's own `…/registry/src/api/x.rs`
    /// is none.
    Registry(&'a str),
    /// `…/git/checkouts/<repo>-<hash>/<rev>/…`: the repository's directory, and the path from
    /// the revision's directory on.
    Checkout { repo: &'a str, from_rev: &'a str },
}

/// Whether, and where, `file` is in cargo's registry or git checkouts: what [`short_path`] cuts
/// and the analysis names a dependency's crate from.
pub(crate) fn cargo_source(file: &str) -> Option<CargoSource<'_>> {
    if let Some(pos) = file.find("/registry/src/") {
        if let Some((_, package)) = file[pos + "/registry/src/".len()..].split_once('/') {
            if package
                .split_once('/')
                .is_some_and(|(dir, _)| package_name(dir).is_some())
            {
                return Some(CargoSource::Registry(package));
            }
        }
    }
    let pos = file.find("/git/checkouts/")?;
    let (repo, from_rev) = file[pos + "/git/checkouts/".len()..].split_once('/')?;
    Some(CargoSource::Checkout { repo, from_rev })
}

/// `futures-util-0.3.31` → `futures-util`: a package directory's name, before the first `-` that
/// starts a `major.minor.patch` version; `None` for a directory with no version.
pub(crate) fn package_name(dir: &str) -> Option<&str> {
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    let is_version = |v: &str| {
        let mut parts = v.splitn(3, '.');
        let (Some(major), Some(minor), Some(patch)) = (parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        digits(major) && digits(minor) && patch.starts_with(|c: char| c.is_ascii_digit())
    };
    dir.match_indices('-')
        .find(|(i, _)| is_version(&dir[i + 1..]))
        .map(|(i, _)| &dir[..i])
}

/// `file` as the same source is named on every machine that builds it: a dependency's from its
/// package's directory on ([`short_path`]: `tokio-1.54.1/src/…`), std's from `library/` on, and
/// the service's own from its crate's directory on — the directory that holds its `src/` (the
/// last one; else its `tests/`, `examples/` or `benches/`): `/home/ci/svc/src/api.rs` →
/// `svc/src/api.rs`. Generated code under a `target/` directory, a `build.rs`, or an absolute
/// path with none of those keeps its last two parts (`out/gen.rs`, `svc/build.rs`); a relative
/// path stays as it is. The crate's directory is named as it is on disk: [`Frame::portable`]
/// names it after the frame's crate instead, the same whatever the checkout is called.
pub fn crate_path(file: &str) -> &str {
    let short = short_path(file);
    if short.len() != file.len() || !file.starts_with('/') {
        return short;
    }
    let last_two = || {
        file.rfind('/')
            .and_then(|last| file[..last].rfind('/'))
            .map(|slash| slash + 1)
    };
    // Past a `target/` directory (generated code), the directories are the build's.
    let from = file.rfind("/target/").map_or(0, |t| t + "/target".len());
    let searched = &file[from..];
    let marker = searched.rfind("/src/").or_else(|| {
        ["/tests/", "/examples/", "/benches/"]
            .iter()
            .filter_map(|m| searched.rfind(m))
            .max()
    });
    let cut = match marker {
        _ if file.ends_with("/build.rs") => last_two(),
        // The directory before the marker: the crate's.
        Some(pos) => file[..from + pos].rfind('/').map(|slash| slash + 1),
        None => last_two(),
    };
    match cut {
        Some(cut) if cut < file.len() => &file[cut..],
        _ => file,
    }
}

/// The crate a demangled function's path starts with: `svc::api::orders` → `svc`,
/// `<svc::Job as core::future::Future>::poll` → `svc`, `svc::f<alloc::string::String>` → `svc`;
/// `None` for a name without a path (`db_query`, `{async_block#0}`, a C symbol).
fn function_crate(name: &str) -> Option<&str> {
    let name = name.trim_start_matches(['<', '&', '*', ' ']);
    let name = name.strip_prefix("mut ").unwrap_or(name);
    let name = name.strip_prefix("dyn ").unwrap_or(name);
    let (krate, _) = name.split_once("::")?;
    let ident = !krate.is_empty()
        && !krate.starts_with(|c: char| c.is_ascii_digit())
        && krate.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    ident.then_some(krate)
}

/// `file` ([`crate_path`]) with its crate's directory named after `krate`, the crate the
/// frame's function belongs to: `/app/src/api.rs` in crate `svc` → `svc/src/api.rs`, whether
/// the checkout is `/app`, `/src` or `job@2`. A dependency's or std's file, or a frame whose
/// crate is not known, is [`crate_path`]'s.
fn crate_named_path(file: &str, krate: Option<&str>) -> String {
    let path = crate_path(file);
    let own = short_path(file).len() == file.len() && !is_std_source(file);
    let Some(krate) = krate.filter(|_| own) else {
        return path.to_owned();
    };
    let marked = |p: &str| {
        ["src/", "tests/", "examples/", "benches/"]
            .iter()
            .any(|m| p.starts_with(m))
    };
    match path.split_once('/') {
        // `<the crate's directory>/src/…`.
        Some((_, rest)) if marked(rest) => format!("{krate}/{rest}"),
        // `src/main.rs`: relative, no directory.
        _ if marked(path) => format!("{krate}/{path}"),
        _ => path.to_owned(),
    }
}

impl fmt::Display for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.function.as_deref().unwrap_or("<unknown>"))?;
        if let Some(file) = &self.file {
            write!(f, " ({file}")?;
            if let Some(line) = self.line {
                write!(f, ":{line}")?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// One line of a pinned poll's profile: a top application frame and how many stack samples of
/// the poll had it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileEntry {
    /// The top application frame (the stack's innermost frame when no frame is the
    /// application's).
    pub frame: Frame,
    /// Samples that had it.
    pub samples: u32,
}

/// An instrumented lock (`pinwatch::sync`) the pinned worker held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldLock {
    /// `mutex`, `rwlock_read` or `rwlock_write`.
    pub kind: String,
    /// Where it was acquired.
    pub acquired_at: SourceLocation,
}

/// The worker and site holding the lock a `lock_wait` event waits for, when it is an
/// instrumented lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    /// The holding thread.
    pub worker: Worker,
    /// Where the holder acquired it.
    pub acquired_at: SourceLocation,
}

/// A pinned poll: a task's poll that held its worker for at least the threshold.
///
/// Its JSON form is one line of a recording (see [`RECORD_SCHEMA`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PinnedEvent {
    /// Same for every report of one pinned poll (its `in_progress` reports and its `completed`
    /// one); unique within a run (see `run_id`).
    pub id: u64,
    /// Names the detector run that made the event: a random UUID per detector (one runtime in one
    /// process). `(run_id, id)` names one pinned poll even when several runs append to one
    /// recording.
    #[serde(default)]
    pub run_id: String,
    /// The process that made the event.
    #[serde(default)]
    pub pid: u32,
    /// Still running, or returned.
    pub state: State,
    /// When the poll started (to within one scan interval, never later than it did).
    #[serde(with = "rfc3339")]
    pub start: SystemTime,
    /// How long the poll ran (so far, for `in_progress`). Never shorter than the real
    /// duration; longer by less than one scan interval.
    #[serde(rename = "duration_ms", with = "millis")]
    pub duration: Duration,
    /// The threshold in force.
    #[serde(rename = "threshold_ms", with = "millis")]
    pub threshold: Duration,
    /// tokio's task id (none for a `block_on` body).
    pub task_id: Option<u64>,
    /// The pinned poll was the `block_on` future's own (the body of `#[pinwatch::main]` or of
    /// `#[pinwatch::test]`), not a task's: `spawned_at` is where that body is, `worker.index`
    /// is none (on a multi-thread runtime the body's thread is not one of the workers).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub block_on: bool,
    /// The pin ran on a current-thread runtime, which stops its timers and I/O for as long as
    /// any poll runs: every pin there holds them, stalled or not (see [`held_drivers`]).
    /// Recordings made before the field existed get it from their `runtime_advice` when read.
    ///
    /// [`held_drivers`]: PinnedEvent::held_drivers
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub current_thread: bool,
    /// Where the task was spawned.
    pub spawned_at: Option<SourceLocation>,
    /// The pinned worker.
    pub worker: Worker,
    /// Why it was pinned (`None` when stacks are off and `/proc` could not be read).
    pub reason: Option<Reason>,
    /// Other reasons seen in some of the samples, when they disagreed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_reasons: Vec<Reason>,
    /// The system call the thread was in (`clock_nanosleep`, `futex`, `read`, …) or `running`.
    pub blocking_operation: Option<String>,
    /// What usually fixes this reason and operation, in one short line ([`Reason::advice`]).
    /// Recordings made before the field existed get it from their reason when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advice: Option<String>,
    /// First frame outside std, tokio, pinwatch, libc and the unwinder: JFR's
    /// `topApplicationFrame`. When the poll was sampled more than once, the one most samples
    /// had (where the time went; see `profile`).
    pub top_frame: Option<Frame>,
    /// The innermost frame of the service's own code in the stack the top frame is from: the
    /// line of yours that called the library where the time went (the top frame itself when
    /// that is your code). Own code is code whose file is none of the dependencies' (cargo's
    /// registry and git checkouts, vendored crates, std, system paths): the crates of your
    /// workspace and your path dependencies. Kept whatever `PINWATCH_STACKS` says; needs line
    /// tables (`debug = "line-tables-only"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_frame: Option<Frame>,
    /// Each top frame the samples of this poll had, with how many, most first (only when there
    /// were several samples).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profile: Vec<ProfileEntry>,
    /// Why the event has no stack, when it has none: `stacks_off`, `unwinder_not_signal_safe`,
    /// `signal_blocked` (the thread blocks the sampling signal), `signal_pending` (the thread
    /// has not taken it: e.g. in uninterruptible sleep), `socket_timeout` (in a socket read or
    /// write with a timeout, which the signal would end early: not signalled), `no_sample` (the
    /// thread is gone, or the poll ended before the sample was taken), `empty_stack` (a sample
    /// with no frame to walk), `no_application_frame` (sampled only in the runtime's or
    /// pinwatch's own code).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_stack: Option<String>,
    /// The sampled stack, innermost first (what `PINWATCH_STACKS` asks for).
    pub stack: Vec<Frame>,
    /// Instrumented locks the worker held.
    pub held_locks: Vec<HeldLock>,
    /// For `lock_wait` on an instrumented lock: who holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_holder: Option<LockHolder>,
    /// Stack samples taken of this poll so far.
    #[serde(default)]
    pub samples: u32,
    /// 1 for the first report of a poll, 2 for the next, …
    pub report: u32,
    /// Time the worker spent runnable but waiting for a CPU during the poll (the kernel's
    /// run-queue delay, counted from a quarter of the threshold on). It is part of `duration`
    /// but does not count toward the threshold: a worker the machine preempted is late, not
    /// pinned.
    #[serde(rename = "cpu_wait_ms", with = "millis", default)]
    pub cpu_wait: Duration,
    /// The whole runtime stalled while this pin ran: pinwatch's heartbeat, a task sleeping on
    /// this runtime's timer (`PINWATCH_HEARTBEAT`), was late by more than the threshold. No
    /// timer fired and no I/O readiness was delivered for any task, on any worker — one pinned
    /// worker stopped the whole service (see docs/blast-radius.md).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub runtime_stalled: bool,
    /// How late the heartbeat was at most while this pin ran, when it was late past the
    /// threshold (counted from the pin's start when it began after the beat was due).
    #[serde(
        rename = "heartbeat_late_ms",
        with = "opt_millis",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub heartbeat_late: Option<Duration>,
    /// Nobody drove the runtime's I/O and timer drivers while this pin ran (no worker waited
    /// on them, every other one asleep on its condvar or pinned), seen from the workers'
    /// states: how long, and who took them over. Present from the first report on which the
    /// watchdog saw it; `runtime_stalled` is then true. See docs/blast-radius.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drivers: Option<Drivers>,
    /// What to change in the runtime, beside `advice` (the line's): for a pin that stalled the
    /// runtime, or one on a current-thread runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_advice: Option<String>,
    /// Tasks in the pinned worker's local run queue at the last `in_progress` report (tokio's
    /// `worker_local_queue_depth`): another worker runs them only if it wakes to steal them,
    /// and when the runtime is stalled none does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks_queued_behind: Option<usize>,
    /// Who waited behind this pin: the tasks it delayed, and how long (docs/victims.md). Present
    /// on the completed report (which waits up to [`VICTIM_WINDOW`] after the poll returned for
    /// the tasks it delayed to be polled) and on `in_progress` reports once a victim is known;
    /// absent in recordings made before the field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub victims: Option<Victims>,
    /// The `tracing` spans the pinned poll was in when it was flagged, outermost first (with
    /// `pinwatch::tracing_layer()` in the service's subscriber), bounded in count and size. A pin
    /// that outlives its spans keeps what was captured.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spans: Vec<SpanInfo>,
    /// The OpenTelemetry trace id (32 hex digits) of the innermost span that has one
    /// (`tracing-opentelemetry`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The OpenTelemetry span id (16 hex digits) of that span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
}

/// The runtime's I/O and timer drivers during a pin that left them undriven
/// ([`PinnedEvent::drivers`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Drivers {
    /// How long nobody drove them while the pin ran, so far: from the pin's start (or the last
    /// look that found them driven) to the look that found a worker on them again.
    #[serde(rename = "undriven_ms", with = "millis")]
    pub undriven: Duration,
    /// The worker that took them over, when one did and the watchdog knows which.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taken_over_by: Option<usize>,
    /// How long after the pin began a worker took them over, when one did.
    #[serde(
        rename = "taken_over_after_ms",
        with = "opt_millis",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub taken_over_after: Option<Duration>,
    /// pinwatch woke a parked worker so that it takes them over (`PINWATCH_RESCUE`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub woke_worker: bool,
}

/// How long a completed report waits, after the pinned poll returned, for the tasks that
/// waited behind it to be polled (they are polled only once the worker is free): the report is
/// sent this long after the poll's end, with the victims polled by then.
pub const VICTIM_WINDOW: Duration = Duration::from_millis(50);

/// The most victims an event names when their waits were measured ([`Victims::worst`]).
pub const MAX_VICTIMS_NAMED: usize = 5;

/// The most victims an event lists at all: measured, [`MAX_VICTIMS_NAMED`]; not measured, the
/// tasks the pinned worker ran next, up to 8.
pub const MAX_VICTIMS_LISTED: usize = 8;

/// The tasks that waited behind a pin ([`PinnedEvent::victims`]): who paid for it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Victims {
    /// `true`: tokio measured how long each task waited between being woken and being polled
    /// (pinwatch's `schedule-latency` feature), and these are the tasks polled after waiting at
    /// least the threshold while this pin ran. `false`: nothing was measured; `worst` names the
    /// tasks the pinned worker polled first once the pin ended (what its LIFO slot and local
    /// run queue held: the likeliest to have waited for the whole pin), with no wait claimed.
    pub measured: bool,
    /// Measured: how many tasks were polled after waiting at least the threshold while this pin
    /// ran (a task that waited through several pins counts for each). Not measured: how many of
    /// the service's tasks the pinned worker polled right after the pin (at most 8; pinwatch's
    /// own are left out).
    pub tasks: usize,
    /// Measured: the waits of those tasks, added up.
    #[serde(
        rename = "total_wait_ms",
        with = "opt_millis",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub total_wait: Option<Duration>,
    /// Measured: the longest of those waits.
    #[serde(
        rename = "max_wait_ms",
        with = "opt_millis",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub max_wait: Option<Duration>,
    /// Measured: the tasks that waited longest, longest first (at most
    /// [`MAX_VICTIMS_NAMED`]). Not measured: the first of the service's tasks the pinned worker
    /// polled after the pin, in the order it polled them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub worst: Vec<Victim>,
    /// The most tasks seen in the pinned worker's local run queue while the pin ran (tokio's
    /// `worker_local_queue_depth`; the LIFO slot is not counted in it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_depth_max: Option<usize>,
}

/// One task that waited behind a pin.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Victim {
    /// tokio's task id.
    pub task_id: u64,
    /// Where the task was spawned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawned_at: Option<SourceLocation>,
    /// How long it waited between being woken (or spawned) and being polled, as tokio measured
    /// it; none when not measured.
    #[serde(
        rename = "wait_ms",
        with = "opt_millis",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub wait: Option<Duration>,
    /// The worker that finally polled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<usize>,
    /// It was the first task the pinned worker polled once the pin ended, and it had been woken
    /// while the pin ran: it sat in the worker's LIFO slot, which no other worker may steal
    /// from (tokio#4941), so it waited for the whole pin (measured only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lifo: bool,
    /// The spans its poll entered, outermost first (with `pinwatch::tracing_layer()`; those
    /// still open when the watchdog read them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spans: Vec<SpanInfo>,
}

impl Victim {
    /// `spawned at src/api.rs:88:5 in request{uri=/orders}`, or `task 12` when the spawn place
    /// is unknown.
    pub fn describe(&self) -> String {
        let mut s = match &self.spawned_at {
            Some(at) => format!("spawned at {at}"),
            None => format!("task {}", self.task_id),
        };
        if let Some(chain) = span_chain(&self.spans) {
            s.push_str(&format!(" in {chain}"));
        }
        s
    }
}

impl Victims {
    /// What pinwatch writes, from what a recording says: no wait nor LIFO slot claimed where
    /// nothing was measured, at most [`MAX_VICTIMS_LISTED`] listed (a crafted line may say
    /// anything; every view then shows what pinwatch could have written).
    pub(crate) fn as_written(&mut self) {
        self.worst.truncate(MAX_VICTIMS_LISTED);
        if !self.measured {
            self.total_wait = None;
            self.max_wait = None;
            for w in &mut self.worst {
                w.wait = None;
                w.lifo = false;
            }
        }
    }

    /// The headline's words for them: `delayed 11 tasks, the longest 300.0 ms: spawned at
    /// src/api.rs:88:5 in request{uri=/orders}`; not measured: `the worker then ran task 12
    /// spawned at … and 2 more (not measured: …)`. `None` when there is nothing to say.
    pub fn describe(&self) -> Option<String> {
        let first = self.worst.first();
        if self.measured {
            if self.tasks == 0 {
                return None;
            }
            let mut s = format!(
                "delayed {} task{}",
                self.tasks,
                if self.tasks == 1 { "" } else { "s" }
            );
            if let Some(max) = self.max_wait {
                s.push_str(&format!(", the longest {:.1} ms", max.as_secs_f64() * 1e3));
            }
            if let Some(v) = first {
                s.push_str(&format!(": {}", v.describe()));
                if v.lifo {
                    s.push_str(" (in the worker's LIFO slot)");
                }
            }
            Some(s)
        } else {
            let v = first?;
            let mut s = format!("the worker then ran task {} {}", v.task_id, v.describe());
            if self.worst.len() > 1 {
                s.push_str(&format!(" and {} more", self.worst.len() - 1));
            }
            s.push_str(" (not measured: pinwatch's schedule-latency feature measures waits)");
            Some(s)
        }
    }
}

/// `spans` (outermost first) as one bounded line, innermost kept: what
/// [`PinnedEvent::span_context`] and [`Victim::describe`] show.
fn span_chain(spans: &[SpanInfo]) -> Option<String> {
    const LEFT_OUT: &str = "…:";
    let mut parts: Vec<String> = Vec::new();
    let mut len = 0;
    let mut cut_outer = false;
    for (i, span) in spans.iter().rev().enumerate() {
        let d = span.display();
        let n = d.len() + usize::from(i > 0);
        // Room kept for the mark when an outer span is left out.
        if i > 0 && len + n + LEFT_OUT.len() > MAX_SPAN_TEXT {
            cut_outer = true;
            break;
        }
        len += n;
        parts.push(d);
    }
    if parts.is_empty() {
        return None;
    }
    parts.reverse();
    let chain = parts.join(":");
    Some(if cut_outer {
        format!("{LEFT_OUT}{chain}")
    } else {
        chain
    })
}

/// One `tracing` span a pinned poll was in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpanInfo {
    /// The span's name (`request`, an `#[instrument]`ed function's name).
    pub name: String,
    /// Its target (usually the module path: `tower_http::trace::make_span`).
    pub target: String,
    /// Its fields as recorded, values formatted as `tracing` shows them (strings without
    /// quotes), in name order.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub fields: std::collections::BTreeMap<String, String>,
}

/// The longest text of a span chain ([`PinnedEvent::span_context`]) and of one span
/// ([`SpanInfo::display`]), in bytes after escaping (see [`text`](crate::text)): a WARN line,
/// a status row or an attribute stays one readable line whatever a service records in its
/// spans.
pub const MAX_SPAN_TEXT: usize = 256;

/// The `span` label (metrics, summaries, profiles) of a pin outside any span.
pub const NO_SPAN: &str = "none";

impl SpanInfo {
    /// A span named `name` from `target` with `fields`, for tests.
    #[cfg(test)]
    pub(crate) fn for_test(name: &str, target: &str, fields: &[(&str, &str)]) -> SpanInfo {
        SpanInfo {
            name: name.to_owned(),
            target: target.to_owned(),
            fields: fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// The span as `tracing`'s own formatter shows it in a context: `request{method=GET
    /// uri=/report}` (fields in name order; no braces without fields), at most
    /// [`MAX_SPAN_TEXT`] bytes.
    ///
    /// Field values come from requests (a header, a user name, an `#[instrument]`ed argument):
    /// they are escaped ([`text`](crate::text)), so that the WARN line (on stderr too), `ctl
    /// status` and the OTLP body stay the one line they are.
    pub fn display(&self) -> String {
        let mut s = self.name.clone();
        if !self.fields.is_empty() {
            s.push('{');
            for (i, (k, v)) in self.fields.iter().enumerate() {
                if i > 0 {
                    s.push(' ');
                }
                s.push_str(k);
                s.push('=');
                s.push_str(v);
            }
            s.push('}');
        }
        crate::text::bounded(&s, MAX_SPAN_TEXT)
    }

    /// What metrics and tables group by: the name, with OpenTelemetry's `http.route` when the
    /// span has one (`request GET /users/{id}` style: `request /users/{id}`), escaped
    /// ([`crate::text`]: a route is the peer's text, and a label reaches terminals raw).
    pub fn label(&self) -> String {
        match self.fields.get("http.route") {
            Some(route) => crate::text::escape(&format!("{} {route}", self.name)),
            None => crate::text::escape(&self.name),
        }
    }
}

/// Fields that carry a request's HTTP method: OpenTelemetry's, then tower-http's.
const METHOD_FIELDS: &[&str] = &["http.request.method", "method", "http.method"];
/// Fields that carry a request's path: OpenTelemetry's, then tower-http's (`uri`).
const PATH_FIELDS: &[&str] = &["url.path", "uri", "http.target"];

/// The longest [`SpanInfo::request_label`], in bytes after escaping.
pub const MAX_REQUEST_LABEL: usize = 128;

/// Path segments a [`route_of_path`] keeps at most; the rest are one `…`.
const MAX_ROUTE_SEGMENTS: usize = 6;

impl SpanInfo {
    /// The first of `names` this span has a field of.
    fn field(&self, names: &[&str]) -> Option<&str> {
        names
            .iter()
            .find_map(|n| self.fields.get(*n).map(String::as_str))
    }

    /// How much this span looks like a request's: 2 with OpenTelemetry's `http.route`, 1 with a
    /// method and a path (`method` + `uri` as tower-http records them, or
    /// `http.request.method` + `url.path`), 0 otherwise.
    pub fn request_rank(&self) -> u8 {
        if self.fields.contains_key("http.route") {
            2
        } else if self.field(METHOD_FIELDS).is_some() && self.field(PATH_FIELDS).is_some() {
            1
        } else {
            0
        }
    }

    /// What requests are grouped by (metrics, tables, `ctl status`): `GET /users/{id}` — the
    /// method (when recorded) and the route. The route is `http.route` when the span has one
    /// (a router's template: ids are not in it); else the path of `uri`/`url.path` with what
    /// looks like an id made `{id}` ([`route_of_path`]); else the span's [`label`](Self::label).
    /// Escaped, at most [`MAX_REQUEST_LABEL`] bytes.
    pub fn request_label(&self) -> String {
        self.request_label_with(None)
    }

    /// [`request_label`](Self::request_label), with `method` (an outer span's) when the span
    /// has none of its own.
    fn request_label_with(&self, method: Option<&str>) -> String {
        let route = match self.fields.get("http.route") {
            Some(r) => Some(r.clone()),
            None => self
                .field(METHOD_FIELDS)
                .and(self.field(PATH_FIELDS))
                .map(route_of_path),
        };
        let label = match (route, self.field(METHOD_FIELDS).or(method)) {
            (Some(route), Some(method)) => format!("{} {route}", method_label(method)),
            (Some(route), None) => format!("{} {route}", self.name),
            (None, _) => self.name.clone(),
        };
        crate::text::bounded(&label, MAX_REQUEST_LABEL)
    }
}

/// A request's path as a route: `https://h/users/42/orders?x=1` → `/users/{id}/orders`. The
/// query and fragment go first, then the scheme and host of an absolute URI (only at its start:
/// a `://` in a query names no route); a segment that looks like an id — all digits, mostly
/// digits (`2026-12-02`), hex of 8 characters or more with a digit (`a1b2c3d4`, a UUID), longer
/// than 32 characters, or with characters a route word does not have (`%`, non-ASCII) — is
/// `{id}`; past 6 segments, `…`. Ids vary per request; what stays is the
/// shape a router would match. A word that is an id without being shaped like one
/// (`/users/alice`, `/users/bob7`) stays: record `http.route` to group those (the label set is
/// bounded either way).
pub fn route_of_path(uri: &str) -> String {
    let uri = uri.split(['?', '#']).next().unwrap_or_default();
    let path = match scheme_end(uri) {
        // `scheme://authority/path`: from the path on.
        Some(end) => {
            let rest = &uri[end..];
            rest.find('/').map_or("/", |i| &rest[i..])
        }
        None => uri,
    };
    let mut out = String::new();
    for (i, seg) in path.split('/').skip(1).enumerate() {
        out.push('/');
        if i == MAX_ROUTE_SEGMENTS {
            out.push('…');
            break;
        }
        out.push_str(if is_id_segment(seg) { "{id}" } else { seg });
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// Where the authority of an absolute URI starts (after `scheme://`), when `uri` begins with a
/// scheme (`[A-Za-z][A-Za-z0-9+.-]*://`).
fn scheme_end(uri: &str) -> Option<usize> {
    let colon = uri.find("://")?;
    let scheme = &uri[..colon];
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-')))
    .then_some(colon + 3)
}

/// Whether a path segment looks like an id rather than a route's word ([`route_of_path`]).
fn is_id_segment(seg: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~');
    let digits = seg.bytes().filter(u8::is_ascii_digit).count();
    let all_digits = digits > 0 && digits == seg.len();
    // `v2`, `v1.1`: a version, part of the route.
    let version = seg.len() <= 8
        && seg
            .strip_prefix('v')
            .is_some_and(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit() || b == b'.'));
    let mostly_digits = digits * 2 > seg.len() && !version;
    let hex =
        seg.len() >= 8 && digits > 0 && seg.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    seg.len() > 32 || !seg.chars().all(word) || all_digits || mostly_digits || hex
}

/// HTTP methods a request label keeps as they are; any other (HTTP lets a client send any
/// token) is `_OTHER`, as OpenTelemetry's conventions say, so that a client cannot make labels
/// of its own with methods.
const KNOWN_METHODS: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
];

/// `method` as a request label has it ([`KNOWN_METHODS`]).
fn method_label(method: &str) -> &str {
    KNOWN_METHODS
        .iter()
        .find(|m| m.eq_ignore_ascii_case(method))
        .copied()
        .unwrap_or("_OTHER")
}

/// One line of a recording: the event plus the `schema` and `event` fields.
#[derive(Serialize, Deserialize)]
pub(crate) struct RecordLine<E> {
    pub schema: u32,
    pub event: String,
    #[serde(flatten)]
    pub pinned: E,
}

impl<E: Serialize> RecordLine<E> {
    /// `body` as a recording line of kind `event` (`pinned`, `dump`), newline included.
    fn line(event: &str, body: E) -> String {
        let line = RecordLine {
            schema: RECORD_SCHEMA,
            event: event.to_owned(),
            pinned: body,
        };
        // Serialising plain data into a String cannot fail.
        let mut s = serde_json::to_string(&line).unwrap_or_default();
        s.push('\n');
        s
    }
}

impl PinnedEvent {
    /// Times the report: the pin has lasted `duration`, of which its thread waited `cpu_wait`
    /// for a CPU — never more than `duration` (a panic hook whose accounting could not be read
    /// has its waits in the thread's, and its wall time out of the duration: helper-112, 575–729
    /// ms of a 153–195 ms pin).
    pub(crate) fn timed(&mut self, duration: Duration, cpu_wait: Duration) {
        self.duration = duration;
        self.cpu_wait = cpu_wait.min(duration);
    }

    /// The event as one line of a recording, newline included.
    pub fn to_json_line(&self) -> String {
        RecordLine::line("pinned", self)
    }

    /// Reads one line of a recording.
    pub fn from_json_line(line: &str) -> Result<PinnedEvent, ParseLineError> {
        let value = parse_json(line)?;
        check_schema(&value)?;
        PinnedEvent::from_value(value)
    }

    /// A `pinned` line, parsed as JSON and its schema checked.
    fn from_value(value: serde_json::Value) -> Result<PinnedEvent, ParseLineError> {
        match value.get("event").and_then(|v| v.as_str()) {
            Some("pinned") => {}
            Some(other) => {
                return Err(ParseLineError::NotAnEvent(format!(
                    "`event` is {other:?}, expected \"pinned\""
                )))
            }
            None => {
                return Err(ParseLineError::NotAnEvent(
                    "no `event` field (a string), expected \"pinned\"".into(),
                ))
            }
        }
        let line: RecordLine<PinnedEvent> =
            serde_json::from_value(value).map_err(|e| ParseLineError::Json(e.to_string()))?;
        let mut e = line.pinned;
        if let Some(v) = &mut e.victims {
            v.as_written();
        }
        if !e.current_thread
            && e.runtime_advice
                .as_deref()
                .is_some_and(|a| a.starts_with(CURRENT_THREAD_ADVICE))
        {
            // Written before events said their runtime's flavor: the advice was the only sign.
            e.current_thread = true;
        }
        if e.advice.is_none() {
            // Written before events carried advice.
            e.advice = e
                .reason
                .map(|r| r.advice(e.blocking_operation.as_deref()).to_owned());
        }
        Ok(e)
    }

    /// The innermost span the pinned poll was in (the request, or the `#[instrument]`ed
    /// function inside it), if any.
    pub fn innermost_span(&self) -> Option<&SpanInfo> {
        self.spans.last()
    }

    /// The request the pinned poll served: the outermost span that has `http.route`, else the
    /// outermost with a method and a path ([`SpanInfo::request_rank`]), else the outermost
    /// span (of the [`MAX_SPANS`](crate::spans::MAX_SPANS) innermost an event keeps). `None`
    /// without spans.
    pub fn request_span(&self) -> Option<&SpanInfo> {
        let best = self.spans.iter().map(SpanInfo::request_rank).max()?;
        self.spans.iter().find(|s| s.request_rank() == best)
    }

    /// What a pin is grouped by in metrics and tables: its [`request_span`](Self::request_span)'s
    /// [`SpanInfo::request_label`]; [`NO_SPAN`] outside any span.
    ///
    /// A route recorded without a method (a handler's span with `http.route` inside
    /// tower-http's, which has the method) takes the method of the nearest span outside it. A
    /// label that would read as one of the metrics' own values (`none`, `other`) is marked
    /// `none (span)`, so it is never counted with them.
    pub fn request_label(&self) -> String {
        let Some(request) = self.request_span() else {
            return NO_SPAN.to_owned();
        };
        let outer_method = self
            .spans
            .iter()
            .take_while(|s| !std::ptr::eq(*s, request))
            .filter_map(|s| s.field(METHOD_FIELDS))
            .last();
        let label = request.request_label_with(outer_method);
        if label == NO_SPAN || label == "other" {
            format!("{label} (span)")
        } else {
            label
        }
    }

    /// The span chain as `tracing`'s formatter prints a context, outermost first and the
    /// innermost last: `request{method=GET uri=/report}:render{id=7}`. At most
    /// [`MAX_SPAN_TEXT`] bytes: outer spans that do not fit are left out, `…:` marking them.
    /// `None` without spans.
    pub fn span_context(&self) -> Option<String> {
        span_chain(&self.spans)
    }

    /// A one-line summary, like the first line of `jdk.tracePinnedThreads` output. It leads with
    /// where the worker is held (the top frame: `file:line function`), why, and what usually
    /// fixes it; the task, its spawn site and the worker follow (for a service the spawn site is
    /// the same for every request: the server's accept loop), then the spans the poll was in
    /// ([`PinnedEvent::span_context`]) — which request pinned.
    ///
    /// `pinned in_progress for 23.7 ms at src/main.rs:16 svc::slow_report: reason=sleep
    /// (clock_nanosleep) — use tokio::time::sleep(..).await instead of std::thread::sleep;
    /// task 3 spawned at src/main.rs:30:5 in request{method=GET uri=/report}, worker 1
    /// (tokio-rt-worker, tid 11329)`
    pub fn headline(&self) -> String {
        let mut s = format!(
            "pinned {} for {:.1} ms",
            self.state.as_str(),
            self.duration.as_secs_f64() * 1e3,
        );
        let at = |f: &Frame| {
            let function = f.function.as_deref().unwrap_or("<unknown>");
            match (&f.file, f.line) {
                (Some(file), Some(line)) => format!("{file}:{line} {function}"),
                (Some(file), None) => format!("{file} {function}"),
                (None, _) => function.to_owned(),
            }
        };
        match (&self.top_frame, self.caller_frame()) {
            // Where the time went is a library's: its function first, then the line of yours
            // that called it.
            (Some(top), Some(app)) => s.push_str(&format!(
                " in {} ({}), called from {}",
                top.function.as_deref().unwrap_or("<unknown>"),
                top.short_location().unwrap_or_else(|| "?".to_owned()),
                at(app)
            )),
            (Some(top), None) if top.file.is_some() => s.push_str(&format!(" at {}", at(top))),
            (Some(top), None) => s.push_str(&format!(" in {}", at(top))),
            (None, Some(app)) => s.push_str(&format!(" at {}", at(app))),
            (None, None) => {}
        }
        s.push(':');
        if let Some(r) = self.reason {
            s.push_str(&format!(" reason={r}"));
            if let Some(op) = &self.blocking_operation {
                s.push_str(&format!(" ({op})"));
            }
        } else if let Some(op) = &self.blocking_operation {
            s.push_str(&format!(" blocking_operation={op}"));
        } else {
            // Nothing read of the thread yet, or nothing readable (helper-119: a `/proc` the
            // process may not read left "ms:; task 5").
            s.push_str(" reason unknown");
        }
        if let Some(advice) = &self.advice {
            s.push_str(&format!(" — {advice}"));
        }
        s.push_str("; ");
        if self.block_on {
            s.push_str("the block_on body");
            if let Some(at) = &self.spawned_at {
                s.push_str(&format!(" (at {at})"));
            }
        } else {
            s.push_str(&format!(
                "task {}",
                self.task_id
                    .map_or_else(|| "?".to_owned(), |t| t.to_string())
            ));
            if let Some(at) = &self.spawned_at {
                s.push_str(&format!(" spawned at {at}"));
            }
        }
        if let Some(chain) = self.span_context() {
            s.push_str(&format!(" in {chain}"));
        }
        match self.worker.index {
            Some(i) => s.push_str(&format!(", worker {i}")),
            // A multi-thread runtime's body runs on a thread of its own, not on a worker.
            None if self.block_on => s.push_str(", blocked its thread, holding no worker"),
            None => s.push_str(", worker ?"),
        }
        s.push_str(&format!(" ({}, tid {})", self.worker.name, self.worker.tid));
        if let Some(n) = self.tasks_queued_behind.filter(|n| *n > 0) {
            s.push_str(&format!(" tasks_queued_behind={n}"));
        }
        if let Some(v) = self.victims.as_ref().and_then(Victims::describe) {
            s.push_str(&format!("; {v}"));
        }
        if self.held_drivers() && self.victims.as_ref().is_some_and(|v| v.measured) {
            // tokio measures a wait from the wake-up: a task whose timer or socket the pin
            // kept from firing was never woken, and waited uncounted.
            s.push_str(if self.victims.as_ref().is_some_and(|v| v.tasks > 0) {
                " (not counting tasks whose timers or I/O the pin held back)"
            } else {
                "; no woken task counted as its victim (tasks whose timers or I/O the pin held \
                 back are not counted)"
            });
        }
        if let Some(stall) = self.stall_description() {
            s.push_str(" — ");
            s.push_str(&stall);
        }
        s
    }

    /// Whether this pin held the runtime's timers and I/O: it stalled the runtime, or it ran on
    /// a current-thread runtime, which stops them during every poll (every such pin is reported
    /// a stall now; a recording made before said so only past the heartbeat's bound,
    /// docs/blast-radius.md). The tasks waiting on them were never woken, and their wait is in
    /// no measure of the victims'.
    pub fn held_drivers(&self) -> bool {
        self.runtime_stalled || self.current_thread
    }

    /// Whether the pinned poll held one of the runtime's workers: all do but a multi-thread
    /// runtime's `block_on` body, which runs on a thread of its own.
    pub fn holds_worker(&self) -> bool {
        !self.block_on || self.worker.index.is_some()
    }

    /// The service's own frame when it is not the top frame itself: the line of yours that
    /// called the library where the time went.
    pub fn caller_frame(&self) -> Option<&Frame> {
        self.app_frame
            .as_ref()
            .filter(|a| self.top_frame.as_ref().is_none_or(|t| !t.same_place(a)))
    }

    /// What this pin did to the whole runtime, in one sentence, when it stalled it
    /// (`runtime_stalled`): for how long nobody drove its timers and I/O and who took them
    /// over (`drivers`), or how late the heartbeat was. What every view shows of it.
    pub fn stall_description(&self) -> Option<String> {
        if !self.runtime_stalled {
            return None;
        }
        let Some(d) = &self.drivers else {
            return Some(format!(
                "timers of the whole runtime stalled for {:.1} s",
                self.heartbeat_late.unwrap_or_default().as_secs_f64()
            ));
        };
        let shown = |t: Duration| {
            if t < Duration::from_secs(1) {
                format!("{:.1} ms", t.as_secs_f64() * 1e3)
            } else {
                format!("{:.1} s", t.as_secs_f64())
            }
        };
        let undriven = shown(d.undriven);
        // A pin the heartbeat found late and the drivers' look then found undriven (the drivers
        // seen meanwhile) has both: the look's words where pinwatch woke nobody, or where the
        // look saw who took them over (the heartbeat never does).
        if self.heartbeat_late.is_some() && d.woke_worker && d.taken_over_by.is_none() {
            // Where the drivers cannot be seen: the heartbeat was late, and pinwatch woke a
            // worker for it; when the heartbeat beat again, a worker had taken them over.
            return Some(match d.taken_over_after {
                Some(after) => format!(
                    "timers of the whole runtime stalled (the heartbeat {undriven} late) until a \
                     worker pinwatch woke took them over, {} after the pin began",
                    shown(after)
                ),
                None if self.state != State::InProgress => format!(
                    "timers of the whole runtime stalled (the heartbeat {undriven} late): \
                     pinwatch woke a worker to take them over, in vain"
                ),
                None => format!(
                    "timers of the whole runtime stalled (the heartbeat {undriven} late so far): \
                     pinwatch woke a worker to take them over"
                ),
            });
        }
        Some(match d.taken_over_after {
            Some(after) => format!(
                "timers and I/O of the whole runtime stalled for {undriven}: nobody drove them \
                 until {} took them over, {} after the pin began{}",
                d.taken_over_by
                    .map_or_else(|| "a worker".to_owned(), |w| format!("worker {w}")),
                shown(after),
                if d.woke_worker {
                    " (woken by pinwatch)"
                } else {
                    ""
                }
            ),
            None if self.state != State::InProgress => format!(
                "timers and I/O of the whole runtime stalled for {undriven}: nobody drove them \
                 while it ran{}",
                if d.woke_worker {
                    " (pinwatch woke a worker to take them over, in vain)"
                } else {
                    ""
                }
            ),
            None if d.woke_worker => format!(
                "timers and I/O of the whole runtime stalled for {undriven} so far: nobody \
                 drives them (pinwatch woke a worker to take them over)"
            ),
            None => format!(
                "timers and I/O of the whole runtime stalled for {undriven} so far: nobody \
                 drives them"
            ),
        })
    }
}

/// The first line of a flight recording's dump (`"event": "dump"`, see
/// [`Detector::dump`](crate::Detector::dump)): whose events follow, and what the in-memory
/// buffer had dropped for space before they were dumped. The events after it are ordinary
/// `pinned` lines.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DumpInfo {
    /// The process the events are from.
    pub pid: u32,
    /// Its executable (`/proc/self/exe`), empty when it could not be read.
    #[serde(default)]
    pub exe: String,
    /// The detector's run id (as in each event's `run_id`).
    #[serde(default)]
    pub run_id: String,
    /// When the process started (from `/proc`), if known.
    #[serde(default, with = "opt_rfc3339", skip_serializing_if = "Option::is_none")]
    pub process_started: Option<SystemTime>,
    /// When the detector started.
    #[serde(with = "rfc3339")]
    pub detector_started: SystemTime,
    /// When the dump was taken.
    #[serde(with = "rfc3339")]
    pub dumped_at: SystemTime,
    /// The buffer's bound in bytes (`PINWATCH_FLIGHT_SIZE`).
    pub flight_size: u64,
    /// Events in the dump (the lines after this one).
    pub events: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Events the buffer dropped, oldest first, to make room for newer ones.
    pub dropped_events: u64,
    /// Pins whose first report was among them (the dump may still hold their later reports).
    pub dropped_pins: u64,
    /// When the first event in the dump was reported (its `start` plus its `duration_ms`).
    #[serde(default, with = "opt_rfc3339", skip_serializing_if = "Option::is_none")]
    pub first_event_at: Option<SystemTime>,
}

impl DumpInfo {
    /// The line, newline included.
    pub fn to_json_line(&self) -> String {
        RecordLine::line("dump", self)
    }
}

/// One line of a recording, read: an event, or a dump's header.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Line {
    /// A `pinned` event.
    Pinned(Box<PinnedEvent>),
    /// A flight recording dump's first line.
    Dump(DumpInfo),
}

impl Line {
    /// Reads one line of a recording: a `pinned` event or a `dump` line.
    pub fn parse(line: &str) -> Result<Line, ParseLineError> {
        let value = parse_json(line)?;
        check_schema(&value)?;
        match value.get("event").and_then(|v| v.as_str()) {
            Some("dump") => {
                let line: RecordLine<DumpInfo> = serde_json::from_value(value)
                    .map_err(|e| ParseLineError::Json(e.to_string()))?;
                Ok(Line::Dump(line.pinned))
            }
            _ => PinnedEvent::from_value(value).map(|e| Line::Pinned(Box::new(e))),
        }
    }
}

/// The most JSON values (numbers, strings, arrays, objects, at any depth) a line read back
/// may hold. The largest event pinwatch writes holds a few thousand (128 frames, 8 spans of 16
/// fields, a profile, victims); a line of a bare `0,` repeated would otherwise cost 16 times
/// its length as parsed values (a crafted 66 MB line took 2.1 GB).
pub const MAX_JSON_VALUES: usize = 200_000;

/// `line` parsed as JSON, refused unread when it holds more than [`MAX_JSON_VALUES`] values.
fn parse_json(line: &str) -> Result<serde_json::Value, ParseLineError> {
    if json_values_over(line.as_bytes(), MAX_JSON_VALUES) {
        return Err(ParseLineError::NotAnEvent(format!(
            "more than {MAX_JSON_VALUES} JSON values, far more than any line pinwatch writes"
        )));
    }
    serde_json::from_str(line).map_err(|e| ParseLineError::Json(e.to_string()))
}

/// Whether `json` may hold more than `max` values, counted from above: every value but the
/// first follows a `,` or opens an array or object (an empty one counts one too), outside
/// strings. Reads nothing of a text shorter than `max` bytes, which cannot reach it, so an
/// ordinary line costs nothing.
fn json_values_over(json: &[u8], max: usize) -> bool {
    if json.len() < max {
        return false;
    }
    let (mut values, mut in_string, mut escaped) = (1usize, false, false);
    for &b in json {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b',' | b'[' | b'{' => {
                    values += 1;
                    if values > max {
                        return true;
                    }
                }
                _ => {}
            }
        }
    }
    false
}

fn check_schema(value: &serde_json::Value) -> Result<(), ParseLineError> {
    match value.get("schema").and_then(|v| v.as_u64()) {
        Some(v) if (OLDEST_READABLE_SCHEMA as u64..=RECORD_SCHEMA as u64).contains(&v) => Ok(()),
        // Another version's only when it is a kind of line pinwatch writes, or a newer
        // pinwatch's (a kind it added carries the run's id): another tool's JSON with a
        // `schema` of its own is no pinwatch line at all.
        Some(v)
            if matches!(
                value.get("event").and_then(|e| e.as_str()),
                Some("pinned" | "dump")
            ) || (v > RECORD_SCHEMA as u64 && value.get("run_id").is_some()) =>
        {
            Err(ParseLineError::Schema(v))
        }
        Some(v) => Err(ParseLineError::NotAnEvent(format!(
            "`schema` {v} on a line whose `event` is not \"pinned\" nor \"dump\""
        ))),
        None => Err(ParseLineError::NotAnEvent("no `schema` field".into())),
    }
}

/// Why a recording line could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ParseLineError {
    /// Not JSON, or a field of the wrong type.
    #[error("not a pinwatch event: {0}")]
    Json(String),
    /// A recording made by a pinwatch with another format.
    #[error(
        "recording schema {0} is not supported (this pinwatch reads schemas \
         {OLDEST_READABLE_SCHEMA} to {RECORD_SCHEMA}); read it with the pinwatch version that wrote it"
    )]
    Schema(u64),
    /// JSON, but not a pinned event.
    #[error("not a pinwatch event: {0}")]
    NotAnEvent(String),
}

mod rfc3339 {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::SystemTime;

    pub fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_rfc3339_micros(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_rfc3339(&s).map_err(serde::de::Error::custom)
    }
}

mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        // Three decimals: microsecond resolution, readable.
        let ms = (d.as_secs_f64() * 1e6).round() / 1e3;
        s.serialize_f64(ms)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        from_ms(f64::deserialize(d)?).map_err(serde::de::Error::custom)
    }

    /// `ms` milliseconds as a duration, or why it is none: a line from another machine may
    /// hold any number, and `Duration::from_secs_f64` panics on one out of its range.
    pub(super) fn from_ms(ms: f64) -> Result<Duration, String> {
        if ms.is_finite() && ms >= 0.0 {
            if let Ok(d) = Duration::try_from_secs_f64(ms / 1e3) {
                return Ok(d);
            }
        }
        Err(format!(
            "{ms:?} is not a duration in milliseconds: it must be a number from 0 to {:e}",
            Duration::MAX.as_secs_f64() * 1e3
        ))
    }
}

/// `Option<SystemTime>` as RFC 3339, like [`rfc3339`].
mod opt_rfc3339 {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::SystemTime;

    pub fn serialize<S: Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => super::rfc3339::serialize(t, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SystemTime>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(s) => humantime::parse_rfc3339(&s)
                .map(Some)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// `Option<Duration>` as milliseconds, like [`millis`].
mod opt_millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::millis::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        match Option::<f64>::deserialize(d)? {
            None => Ok(None),
            Some(ms) => super::millis::from_ms(ms)
                .map(Some)
                .map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Reason::ALL` is every reason, once, in declaration order, each written in recordings
    /// as `as_str` says (the attribute crate and the report page are checked against it in
    /// their own tests).
    #[test]
    fn reason_all_is_every_reason_by_its_recorded_name() {
        // Exhaustive: a new reason does not compile here until it has its place, the next
        // one; then it must be in `ALL` at that place, and the count below moves with it.
        let place = |r: Reason| match r {
            Reason::Cpu => 0,
            Reason::Sleep => 1,
            Reason::Io => 2,
            Reason::Dns => 3,
            Reason::LockWait => 4,
            Reason::LockHeld => 5,
            Reason::OnceInit => 6,
            Reason::OnceWait => 7,
            Reason::Other => 8,
        };
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(place(*r), i, "{r}");
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
        }
        assert_eq!(Reason::ALL.len(), 9);
    }

    fn sample() -> PinnedEvent {
        PinnedEvent {
            id: 7,
            run_id: "0b6c1f0e-2f0a-4c55-9a55-3b8e7f1d2c10".into(),
            pid: 4200,
            state: State::Completed,
            start: SystemTime::UNIX_EPOCH + Duration::from_micros(1_780_000_000_123_456),
            duration: Duration::from_micros(100_250),
            threshold: Duration::from_millis(20),
            task_id: Some(12),
            block_on: false,
            current_thread: false,
            spawned_at: Some(SourceLocation {
                file: "src/main.rs".into(),
                line: 10,
                column: 5,
            }),
            worker: Worker {
                index: Some(1),
                tid: 4242,
                name: "tokio-runtime-worker".into(),
            },
            reason: Some(Reason::LockHeld),
            other_reasons: vec![],
            blocking_operation: Some("clock_nanosleep".into()),
            advice: Some(Reason::LockHeld.advice(Some("clock_nanosleep")).to_owned()),
            top_frame: Some(Frame {
                function: Some("app::handler".into()),
                file: Some("src/main.rs".into()),
                line: Some(12),
                locks: 1,
            }),
            app_frame: None,
            profile: vec![ProfileEntry {
                frame: Frame {
                    function: Some("app::handler".into()),
                    file: Some("src/main.rs".into()),
                    line: Some(12),
                    locks: 0,
                },
                samples: 2,
            }],
            no_stack: None,
            stack: vec![],
            held_locks: vec![HeldLock {
                kind: "mutex".into(),
                acquired_at: SourceLocation {
                    file: "src/main.rs".into(),
                    line: 11,
                    column: 9,
                },
            }],
            lock_holder: None,
            samples: 1,
            report: 2,
            cpu_wait: Duration::from_micros(1_500),
            runtime_stalled: false,
            heartbeat_late: None,
            drivers: None,
            runtime_advice: None,
            tasks_queued_behind: None,
            victims: None,
            spans: Vec::new(),
            trace_id: None,
            span_id: None,
        }
    }

    /// A line holding more JSON values than any pinwatch writes is refused before it is
    /// parsed: a crafted 66 MB line of `0,` repeated took 2.1 GB as parsed values. The largest
    /// event pinwatch writes is read, far under the bound.
    #[test]
    fn a_line_of_more_values_than_any_event_is_refused_unparsed() {
        let mut e = sample();
        let frame = Frame {
            function: Some("f".repeat(300)),
            file: Some("src/f.rs".into()),
            line: Some(1),
            locks: 8,
        };
        e.stack = vec![frame.clone(); crate::poll::sample::MAX_FRAMES];
        e.profile = vec![ProfileEntry { frame, samples: 1 }; crate::poll::sample::MAX_FRAMES];
        let fields: Vec<(String, String)> = (0..crate::spans::MAX_FIELDS)
            .map(|i| {
                (
                    format!("field{i}"),
                    "v".repeat(crate::spans::MAX_VALUE_BYTES),
                )
            })
            .collect();
        let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (&**k, &**v)).collect();
        e.spans = vec![SpanInfo::for_test("request", "app", &fields); crate::spans::MAX_SPANS];
        let largest = e.to_json_line();
        assert!(largest.len() > MAX_JSON_VALUES / 20, "{}", largest.len());
        assert!(!json_values_over(largest.as_bytes(), MAX_JSON_VALUES / 20));
        assert_eq!(PinnedEvent::from_json_line(&largest).unwrap(), e);

        let head = r#"{"schema":2,"event":"pinned","x":["#;
        let crafted = |n: usize| format!("{head}{}0]}}", "0,".repeat(n - 5));
        // `n` values: the object, `schema`, `event`, the array and its `n - 4` elements.
        let (at, past) = (crafted(MAX_JSON_VALUES), crafted(MAX_JSON_VALUES + 1));
        assert!(!json_values_over(at.as_bytes(), MAX_JSON_VALUES));
        assert!(json_values_over(past.as_bytes(), MAX_JSON_VALUES));
        for refused in [
            Line::parse(&past).map(|_| ()),
            PinnedEvent::from_json_line(&past).map(|_| ()),
        ] {
            let e = refused.unwrap_err().to_string();
            assert!(e.contains("more than 200000 JSON values"), "{e}");
        }
        // At the bound it is parsed: refused by its fields, not its size.
        let e = Line::parse(&at).unwrap_err().to_string();
        assert!(e.contains("missing field"), "{e}");
    }

    /// What is inside a string is no value, however it is escaped; and a text shorter than the
    /// bound is not read.
    #[test]
    fn json_values_are_counted_outside_strings_only() {
        assert!(json_values_over(b"[0,0,0]", 3));
        assert!(!json_values_over(b"[0,0,0]", 4));
        assert!(!json_values_over(br#"["a,b,[c,{d}]",0]"#, 3));
        assert!(json_values_over(br#"["a,b,[c,{d}]",0,0]"#, 3));
        // An escaped quote does not end the string; an escaped backslash before a quote does.
        assert!(!json_values_over(br#"["a\",[,,,",0]"#, 3));
        assert!(json_values_over(br#"["a\\",0,0,0]"#, 4));
        assert!(!json_values_over(b"[[[[", 5));
        assert!(json_values_over(b"[[[[", 4));
    }

    #[test]
    fn a_recordings_victims_are_read_as_pinwatch_writes_them() {
        let mut e = sample();
        let victim = Victim {
            task_id: 3,
            wait: Some(Duration::from_millis(99)),
            lifo: true,
            ..Victim::default()
        };
        e.victims = Some(Victims {
            measured: false,
            tasks: usize::MAX,
            total_wait: Some(Duration::from_millis(5)),
            max_wait: Some(Duration::from_millis(5)),
            worst: vec![victim.clone(); 1000],
            queue_depth_max: None,
        });
        let read = PinnedEvent::from_json_line(&e.to_json_line()).unwrap();
        let v = read.victims.unwrap();
        assert_eq!(v.worst.len(), MAX_VICTIMS_LISTED);
        assert!(v.worst.iter().all(|w| w.wait.is_none() && !w.lifo), "{v:?}");
        assert_eq!((v.total_wait, v.max_wait), (None, None));
        // Measured: the waits stand.
        e.victims.as_mut().unwrap().measured = true;
        let v = PinnedEvent::from_json_line(&e.to_json_line())
            .unwrap()
            .victims
            .unwrap();
        assert_eq!(v.worst[0], victim);
        // Older recordings have none.
        assert_eq!(
            PinnedEvent::from_json_line(&sample().to_json_line())
                .unwrap()
                .victims,
            None
        );
    }

    #[test]
    fn json_line_round_trips() {
        let ev = sample();
        let line = ev.to_json_line();
        assert!(line.ends_with('\n'));
        assert_eq!(line.matches('\n').count(), 1);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        for key in [
            "schema",
            "event",
            "state",
            "start",
            "duration_ms",
            "threshold_ms",
            "task_id",
            "spawned_at",
            "worker",
            "reason",
            "blocking_operation",
            "top_frame",
            "stack",
            "held_locks",
            "advice",
            "run_id",
            "pid",
            "profile",
        ] {
            assert!(v.get(key).is_some(), "missing {key} in {line}");
        }
        assert_eq!(v["duration_ms"], 100.25);
        assert_eq!(v["reason"], "lock_held");
        assert_eq!(v["start"], "2026-05-28T20:26:40.123456Z");
        let back = PinnedEvent::from_json_line(line.trim_end()).unwrap();
        assert_eq!(back, ev);
    }

    /// The `dump` line of a flight recording's dump: the fields docs/recording.md lists, read
    /// back as a [`Line::Dump`], and refused (not taken for an event) by `from_json_line`.
    #[test]
    fn dump_line_round_trips() {
        let t = |us| SystemTime::UNIX_EPOCH + Duration::from_micros(us);
        let d = DumpInfo {
            pid: 42,
            exe: "/usr/bin/svc".into(),
            run_id: "r".into(),
            process_started: Some(t(1_780_000_000_000_000)),
            detector_started: t(1_780_000_000_500_000),
            dumped_at: t(1_780_000_100_000_000),
            flight_size: 4 << 20,
            events: 3,
            bytes: 2700,
            dropped_events: 120,
            dropped_pins: 50,
            first_event_at: Some(t(1_780_000_050_000_000)),
        };
        let line = d.to_json_line();
        assert_eq!(line.matches('\n').count(), 1);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            (v["schema"].as_u64(), v["event"].as_str()),
            (Some(2), Some("dump"))
        );
        for key in [
            "pid",
            "exe",
            "run_id",
            "process_started",
            "detector_started",
            "dumped_at",
            "flight_size",
            "events",
            "bytes",
            "dropped_events",
            "dropped_pins",
            "first_event_at",
        ] {
            assert!(v.get(key).is_some(), "missing {key} in {line}");
        }
        assert_eq!(v["dumped_at"], "2026-05-28T20:28:20.000000Z");
        assert_eq!(Line::parse(line.trim_end()).unwrap(), Line::Dump(d.clone()));
        assert!(matches!(
            PinnedEvent::from_json_line(&line),
            Err(ParseLineError::NotAnEvent(_))
        ));
        // An event line is still an event.
        let e = sample().to_json_line();
        assert_eq!(Line::parse(&e).unwrap(), Line::Pinned(Box::new(sample())));
    }

    #[test]
    fn rejects_other_schemas_and_non_events() {
        let line = sample()
            .to_json_line()
            .replace("\"schema\":2", "\"schema\":99");
        assert!(matches!(
            PinnedEvent::from_json_line(&line),
            Err(ParseLineError::Schema(99))
        ));
        assert!(matches!(
            PinnedEvent::from_json_line("{\"schema\":1,\"event\":\"other\"}"),
            Err(ParseLineError::NotAnEvent(_))
        ));
        assert!(matches!(
            PinnedEvent::from_json_line("{\"schema\":1,"),
            Err(ParseLineError::Json(_))
        ));
    }

    /// Every duration field: a number out of a `Duration`'s range, negative or not finite is
    /// an error naming the number (`Duration::from_secs_f64` panicked on `1e300`).
    #[test]
    fn durations_out_of_range_are_errors_not_panics() {
        let line = sample().to_json_line();
        let mut v: serde_json::Value = serde_json::from_str(&line).unwrap();
        v["heartbeat_late_ms"] = 1.0.into();
        for field in [
            "duration_ms",
            "threshold_ms",
            "cpu_wait_ms",
            "heartbeat_late_ms",
        ] {
            for bad in ["1e300", "1.8446744073709552e22", "-1", "-1e-300", "1e400"] {
                let mut v = v.clone();
                v[field] = 0.into();
                let text = serde_json::to_string(&v)
                    .unwrap()
                    .replace(&format!("\"{field}\":0"), &format!("\"{field}\":{bad}"));
                match PinnedEvent::from_json_line(&text) {
                    Err(ParseLineError::Json(msg)) => assert!(
                        msg.contains("duration in milliseconds") || msg.contains("out of range"),
                        "{field}={bad}: {msg}"
                    ),
                    other => panic!("{field}={bad}: {other:?}"),
                }
            }
        }
        // The largest duration there is still reads.
        let mut v = v.clone();
        v["duration_ms"] = 1.8446744073709e22.into();
        let e = PinnedEvent::from_json_line(&serde_json::to_string(&v).unwrap()).unwrap();
        assert!(e.duration > Duration::from_secs(u64::MAX / 2));
    }

    fn span(name: &str, fields: &[(&str, &str)]) -> SpanInfo {
        SpanInfo::for_test(name, "svc", fields)
    }

    #[test]
    fn crate_paths_are_the_same_on_every_build_machine() {
        for (file, path) in [
            ("/home/ci/svc/src/api.rs", "svc/src/api.rs"),
            (
                "/work/main/sample-apps/src/traced.rs",
                "sample-apps/src/traced.rs",
            ),
            (
                "/home/me/src/svc/src/handlers/orders.rs",
                "svc/src/handlers/orders.rs",
            ),
            ("/w/svc/tests/load.rs", "svc/tests/load.rs"),
            ("/w/svc/examples/demo.rs", "svc/examples/demo.rs"),
            ("/w/svc/build.rs", "svc/build.rs"),
            ("/src/main.rs", "/src/main.rs"),
            ("sample-apps/src/lib.rs", "sample-apps/src/lib.rs"),
            ("src/main.rs", "src/main.rs"),
            (
                "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/tokio-1.54.1/src/a.rs",
                "tokio-1.54.1/src/a.rs",
            ),
            (
                "/rustc/5980/library/std/src/thread/mod.rs",
                "library/std/src/thread/mod.rs",
            ),
            (
                "/root/.rustup/toolchains/x/lib/rustlib/src/rust/library/std/src/thread/mod.rs",
                "library/std/src/thread/mod.rs",
            ),
            (
                "/builddir/build/BUILD/rustc-1.78.0-src/library/std/src/thread/mod.rs",
                "library/std/src/thread/mod.rs",
            ),
            // A service's crate called `library`, not std's.
            ("/home/me/rustc-perf/library/src/x.rs", "library/src/x.rs"),
            // std's `library/`, not a parent's (helper-101).
            (
                "/home/library/x/rustc-1.78.0-src/library/std/src/thread/mod.rs",
                "library/std/src/thread/mod.rs",
            ),
            (
                "/opt/library/rust/toolchains/x/lib/rustlib/src/rust/library/std/src/lib.rs",
                "library/std/src/lib.rs",
            ),
            (
                "/usr/src/rustc-1.75.0/library/core/src/lib.rs",
                "library/core/src/lib.rs",
            ),
            ("/x.c", "/x.c"),
            ("", ""),
            // A `tests/` inside `src/`: the crate is the `src/`'s.
            (
                "/home/ci/svc/src/parser/tests/mod.rs",
                "svc/src/parser/tests/mod.rs",
            ),
            // A checkout under a `src/` directory, and generated code: no user name, no hash.
            ("/home/alice/src/svc/build.rs", "svc/build.rs"),
            (
                "/home/alice/src/svc/target/debug/build/svc-0123abcd/out/gen.rs",
                "out/gen.rs",
            ),
            ("/srv/app/src/café/ünï.rs", "app/src/café/ünï.rs"),
        ] {
            assert_eq!(crate_path(file), path, "{file}");
        }
        // Named after the function's crate, whatever the checkout is called.
        let frame = |function: &str, file: &str| Frame {
            function: Some(function.to_owned()),
            file: Some(file.to_owned()),
            line: Some(8),
            locks: 0,
        };
        for checkout in ["/app", "/src", "/var/lib/jenkins/job@2", "/home/ci/repo"] {
            let f = frame("svc::api::orders", &format!("{checkout}/src/api.rs"));
            assert_eq!(f.portable_location().as_deref(), Some("svc/src/api.rs:8"));
        }
        for (function, file, portable) in [
            // A workspace member, and a relative path.
            (
                "pinwatch::watch::scan",
                "/w/main/detector/src/watch/scan.rs",
                "pinwatch/src/watch/scan.rs",
            ),
            ("app::f", "src/main.rs", "app/src/main.rs"),
            // A dependency's file, and a frame whose crate is unknown, as crate_path has them.
            (
                "tokio::time::sleep",
                "/r/.cargo/registry/src/index.crates.io-x/tokio-1.54.1/src/time/sleep.rs",
                "tokio-1.54.1/src/time/sleep.rs",
            ),
            ("{async_block#0}", "/app/src/api.rs", "app/src/api.rs"),
        ] {
            let f = frame(function, file);
            assert_eq!(f.portable_file().as_deref(), Some(portable), "{file}");
        }
        for (name, krate) in [
            ("svc::api::orders", Some("svc")),
            ("<svc::Job as core::future::Future>::poll", Some("svc")),
            ("svc::f<alloc::string::String>", Some("svc")),
            ("<&mut svc::T as x::Y>::m", Some("svc")),
            ("db_query", None),
            ("{async_block#0}", None),
            ("{closure#0}::x", None),
        ] {
            assert_eq!(function_crate(name), krate, "{name}");
        }
    }

    #[test]
    fn a_path_becomes_a_route_without_its_ids() {
        for (uri, route) in [
            ("/users/42/orders", "/users/{id}/orders"),
            ("/users/42/orders?page=3#top", "/users/{id}/orders"),
            (
                "https://api.example.com:8443/v2/items/a1b2c3d4",
                "/v2/items/{id}",
            ),
            ("/f/3fa85f64-5717-4562-b3fc-2c963f66afa6", "/f/{id}"),
            ("/day/2026-12-02/report", "/day/{id}/report"),
            ("/v1.1/s3/x9", "/v1.1/s3/x9"),
            ("/api/oauth2/token", "/api/oauth2/token"),
            ("/hash/sha256/i18n/ipv6", "/hash/sha256/i18n/ipv6"),
            ("/v123456789012345", "/{id}"),
            // A `://` past the path's start is no scheme: the route is the path's.
            ("/login?next=https://evil.example/admin/delete", "/login"),
            ("/r#https://x/y/z", "/r"),
            ("http://h?r=/a/b", "/"),
            (
                "/proxy/http://evil.example/x",
                "/proxy/{id}//evil.example/x",
            ),
            ("http://u:p@h:80/users/7", "/users/{id}"),
            ("/search/caf%C3%A9", "/search/{id}"),
            ("/t/café", "/t/{id}"),
            (&format!("/k/{}", "a".repeat(40)), "/k/{id}"),
            ("/a/b/c/d/e/f/g/h", "/a/b/c/d/e/f/…"),
            ("", "/"),
            ("*", "/"),
            ("http://h", "/"),
            ("/", "/"),
            ("/health", "/health"),
        ] {
            assert_eq!(route_of_path(uri), route, "{uri}");
        }
    }

    #[test]
    fn a_pin_s_request_is_its_outermost_request_like_span() {
        let mut e = sample();
        assert_eq!(e.request_span(), None);
        assert_eq!(e.request_label(), NO_SPAN);
        // No request-like span: the outermost.
        e.spans = vec![span("conn", &[]), span("db_query", &[])];
        assert_eq!(e.request_label(), "conn");
        // tower-http's default span: method and uri, ids made {id}.
        e.spans = vec![
            span("conn", &[("peer", "10.0.0.1:5000")]),
            span(
                "request",
                &[
                    ("method", "GET"),
                    ("uri", "/users/42?x=1"),
                    ("version", "HTTP/1.1"),
                ],
            ),
            span("db_query", &[("sql", "select 1")]),
        ];
        assert_eq!(e.request_span().unwrap().name, "request");
        assert_eq!(e.request_label(), "GET /users/{id}");
        // `http.route` wins over an outer method+uri span; the innermost stays in the chain.
        e.spans.insert(
            2,
            span(
                "handler",
                &[
                    ("http.route", "/users/{id}"),
                    ("http.request.method", "PUT"),
                ],
            ),
        );
        assert_eq!(e.request_label(), "PUT /users/{id}");
        assert!(e
            .span_context()
            .unwrap()
            .ends_with(":db_query{sql=select 1}"));
        // A route without a method: the span's name says what it is.
        e.spans = vec![span("rpc", &[("http.route", "/orders")])];
        assert_eq!(e.request_label(), "rpc /orders");
        // ... unless a span outside it has the method (tower-http's, around a handler's).
        e.spans = vec![
            span("request", &[("method", "GET"), ("uri", "/orders/7")]),
            span("handler", &[("http.route", "/orders/{id}")]),
        ];
        assert_eq!(e.request_label(), "GET /orders/{id}");
        // A method of the client's own making is `_OTHER`: no label of its choosing.
        e.spans = vec![span("request", &[("method", "XYZZY7"), ("uri", "/a")])];
        assert_eq!(e.request_label(), "_OTHER /a");
        e.spans = vec![span("request", &[("method", "get"), ("uri", "/a")])];
        assert_eq!(e.request_label(), "GET /a");
        // A span named like the metrics' own values is never counted with them.
        e.spans = vec![span("other", &[])];
        assert_eq!(e.request_label(), "other (span)");
        e.spans = vec![span("none", &[])];
        assert_eq!(e.request_label(), "none (span)");
        // A crafted route: escaped and bounded.
        let long = format!("/x\u{1b}[2J{}", "y".repeat(500));
        e.spans = vec![span("r", &[("http.route", long.as_str())])];
        let l = e.request_label();
        assert!(l.len() <= MAX_REQUEST_LABEL && !l.contains('\u{1b}'), "{l}");
    }

    #[test]
    fn the_headline_says_which_request_innermost_span_last_and_bounded() {
        let mut e = sample();
        e.spans = vec![
            span("request", &[("uri", "/report"), ("method", "GET")]),
            span("render", &[]),
        ];
        assert_eq!(
            e.span_context().as_deref(),
            Some("request{method=GET uri=/report}:render")
        );
        assert!(
            e.headline().contains(
                "task 12 spawned at src/main.rs:10:5 in request{method=GET uri=/report}:render, \
                 worker 1"
            ),
            "{}",
            e.headline()
        );
        // Many big spans: the innermost ones kept, the outer ones marked as left out.
        let big = "v".repeat(100);
        e.spans = (0..20)
            .map(|i| span(&format!("s{i}"), &[("k", big.as_str())]))
            .collect();
        let chain = e.span_context().unwrap();
        assert!(chain.len() <= MAX_SPAN_TEXT, "{}", chain.len());
        assert!(
            chain.starts_with("…:s1") && chain.ends_with(&format!("s19{{k={big}}}")),
            "{chain}"
        );
        // One span too big on its own: cut.
        e.spans = vec![span("request", &[("uri", "x".repeat(5000).as_str())])];
        let chain = e.span_context().unwrap();
        assert_eq!(chain.len(), MAX_SPAN_TEXT);
        assert!(chain.starts_with("request{uri=xx") && chain.ends_with('…'));
        e.spans.clear();
        assert!(e.span_context().is_none() && e.headline().contains("src/main.rs:10:5, worker 1"));
    }

    /// A field from a request with a terminal escape, a newline (a forged log line) and a
    /// bidirectional override: the headline (the WARN line) stays one line, nothing raw.
    #[test]
    fn span_fields_from_a_request_are_escaped_in_the_headline() {
        let mut e = sample();
        e.spans = vec![span(
            "request",
            &[(
                "user",
                "\u{1b}]0;owned\u{7}\u{1b}[2J\nWARN pinwatch: fake\u{202e}x",
            )],
        )];
        let h = e.headline();
        assert!(
            !h.chars().any(|c| c.is_control() || c == '\u{202e}'),
            "{h:?}"
        );
        assert!(
            h.contains(
                r"request{user=\u{1b}]0;owned\u{7}\u{1b}[2J\u{a}WARN pinwatch: fake\u{202e}x}"
            ),
            "{h}"
        );
    }

    /// The headline leads with the blocking line, the reason and the advice; the task, spawn
    /// site and worker follow.
    #[test]
    fn the_headline_leads_with_the_top_frame_and_the_advice() {
        let mut e = sample();
        e.reason = Some(Reason::Sleep);
        e.advice = Some(Reason::Sleep.advice(Some("clock_nanosleep")).to_owned());
        assert_eq!(
            e.headline(),
            "pinned completed for 100.2 ms at src/main.rs:12 app::handler: reason=sleep \
             (clock_nanosleep) — use tokio::time::sleep(..).await instead of std::thread::sleep; \
             task 12 spawned at src/main.rs:10:5, worker 1 (tokio-runtime-worker, tid 4242)"
        );
        e.top_frame = None;
        e.block_on = true;
        e.worker.index = None;
        assert!(
            e.headline()
                .starts_with("pinned completed for 100.2 ms: reason=sleep"),
            "{}",
            e.headline()
        );
        assert!(
            e.headline().ends_with(
                "; the block_on body (at src/main.rs:10:5), blocked its thread, holding no \
                 worker (tokio-runtime-worker, tid 4242)"
            ),
            "{}",
            e.headline()
        );
        // Nothing known of where or why: said so, not left blank.
        e.reason = None;
        e.advice = None;
        e.blocking_operation = None;
        assert!(
            e.headline()
                .starts_with("pinned completed for 100.2 ms: reason unknown; the block_on body"),
            "{}",
            e.headline()
        );
    }

    /// The heartbeat's words ("pinwatch woke a worker…") only for a pin pinwatch woke a worker
    /// for: one the heartbeat found late and the drivers' look found undriven with nobody to
    /// wake says what the look saw.
    #[test]
    fn a_stall_says_pinwatch_woke_a_worker_only_when_it_did() {
        let mut e = sample();
        e.state = State::Completed;
        e.runtime_stalled = true;
        e.heartbeat_late = Some(Duration::from_millis(180));
        e.drivers = Some(Drivers {
            undriven: Duration::from_millis(240),
            ..Default::default()
        });
        let said = e.stall_description().unwrap();
        assert_eq!(
            said,
            "timers and I/O of the whole runtime stalled for 240.0 ms: nobody drove them while \
             it ran"
        );
        e.drivers.as_mut().unwrap().woke_worker = true;
        assert_eq!(
            e.stall_description().unwrap(),
            "timers of the whole runtime stalled (the heartbeat 240.0 ms late): pinwatch woke a \
             worker to take them over, in vain"
        );
        // Woken by the look, which saw worker 3 take them over.
        let d = e.drivers.as_mut().unwrap();
        d.taken_over_by = Some(3);
        d.taken_over_after = Some(Duration::from_millis(300));
        assert_eq!(
            e.stall_description().unwrap(),
            "timers and I/O of the whole runtime stalled for 240.0 ms: nobody drove them until \
             worker 3 took them over, 300.0 ms after the pin began (woken by pinwatch)"
        );
    }

    /// Measured victims of a pin that stalled the runtime leave out the tasks whose timers or
    /// I/O it held back (never woken, so never measured): the headline says so, and says so
    /// when no woken task is counted at all, rather than saying nothing.
    #[test]
    fn the_victims_of_a_stall_say_what_they_leave_out() {
        let mut e = sample();
        let measured = |tasks| Victims {
            measured: true,
            tasks,
            total_wait: Some(Duration::ZERO),
            max_wait: Some(Duration::from_millis(300)),
            worst: if tasks > 0 {
                vec![Victim {
                    task_id: 3,
                    ..Victim::default()
                }]
            } else {
                Vec::new()
            },
            queue_depth_max: None,
        };
        e.victims = Some(measured(0));
        assert!(!e.headline().contains("held back"), "{}", e.headline());
        e.runtime_stalled = true;
        assert!(
            e.headline().contains(
                "; no woken task counted as its victim (tasks whose timers or I/O the pin held \
                 back are not counted)"
            ),
            "{}",
            e.headline()
        );
        e.victims = Some(measured(1));
        assert!(
            e.headline().contains(
                "delayed 1 task, the longest 300.0 ms: task 3 (not counting tasks whose timers \
                 or I/O the pin held back)"
            ),
            "{}",
            e.headline()
        );
        // On a current-thread runtime every pin holds them, stalled or not (helper-60: a ticker
        // frozen 80 ms behind a pin said to have no victims).
        e.runtime_stalled = false;
        e.victims = Some(measured(0));
        e.current_thread = true;
        assert!(e.held_drivers());
        assert!(
            e.headline()
                .contains("; no woken task counted as its victim"),
            "{}",
            e.headline()
        );
        // The flavor is the event's, whatever its advice says.
        e.runtime_advice = Some("worded by another version".to_owned());
        assert!(e.held_drivers());
        e.current_thread = false;
        assert!(!e.held_drivers());
        e.victims = Some(measured(1));
        // Not measured: nothing is claimed either way.
        e.victims.as_mut().unwrap().measured = false;
        assert!(!e.headline().contains("held back"), "{}", e.headline());
    }

    #[test]
    fn reads_schema_1_lines() {
        let line = sample()
            .to_json_line()
            .replace("\"schema\":2", "\"schema\":1");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        let mut v = v.as_object().unwrap().clone();
        v.remove("run_id");
        v.remove("pid");
        v.remove("profile");
        v.remove("advice");
        let e = PinnedEvent::from_json_line(&serde_json::to_string(&v).unwrap()).unwrap();
        assert_eq!((e.id, e.run_id.as_str(), e.pid), (7, "", 0));
        // Advice comes from the reason for lines written before events carried it.
        assert_eq!(
            e.advice.as_deref(),
            Some(Reason::LockHeld.advice(Some("clock_nanosleep")))
        );
    }

    #[test]
    fn lines_written_before_the_runtime_flavor_get_it_from_their_advice() {
        let mut e = sample();
        e.current_thread = true;
        let line = e.to_json_line();
        assert!(line.contains("\"current_thread\":true"), "{line}");
        assert!(PinnedEvent::from_json_line(&line).unwrap().current_thread);
        e.current_thread = false;
        assert!(!e.to_json_line().contains("current_thread"));
        // A line from before the field: its advice says a current-thread runtime, alone or
        // with more advice after it.
        for advice in [
            CURRENT_THREAD_ADVICE.to_owned(),
            format!("{CURRENT_THREAD_ADVICE}; and more"),
        ] {
            e.runtime_advice = Some(advice);
            let read = PinnedEvent::from_json_line(&e.to_json_line()).unwrap();
            assert!(read.current_thread && read.held_drivers());
        }
        for advice in [None, Some("move the code to spawn_blocking".to_owned())] {
            e.runtime_advice = advice;
            let read = PinnedEvent::from_json_line(&e.to_json_line()).unwrap();
            assert!(!read.current_thread && !read.held_drivers());
        }
    }
}
