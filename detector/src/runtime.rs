//! The running detector: [`Prepared::start`] starts the watchdog, the export thread, the
//! exporters and the control socket for a built runtime, and returns the [`Detector`] guard,
//! which stops them in order. [`Builder`](crate::Builder) (in `builder`) makes the
//! [`Prepared`].

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::config::{Config, Settings};
use crate::control;
use crate::export::{self, Parts, Running};
use crate::poll::PollHooks;
use crate::signal::exit::{self as exit_signal, Disposition, EXIT_SIGNALS};
pub use crate::watch::Stats;
use crate::watch::{self, snapshot, Shared};
use crate::Error;

/// Installs, once per process, a panic hook that marks a watched poll that panics (see
/// [`crate::poll::claim::poll_panics`]), calls the hook that was there before (std's, which
/// prints the message and, with `RUST_BACKTRACE`, symbolizes a backtrace inside the poll:
/// hundreds of milliseconds the first time, which are not a pin of the code under test), then
/// marks when that returned: a poll that catches the panic is timed again from there. A hook set after it replaces it: polls that panic are then timed to their end,
/// as without it. Not installed from a thread that is panicking (`set_hook` would panic).
fn install_panic_hook() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    if std::thread::panicking() {
        return;
    }
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let poll = crate::poll::claim::poll_panics();
            previous(info);
            if let Some(seq) = poll {
                crate::poll::claim::poll_panic_hook_returned(seq);
            }
        }));
    });
}

/// A configured detector whose hooks can be installed, not yet watching anything. See
/// [`Builder::prepare`](crate::Builder::prepare).
pub struct Prepared {
    hooks: PollHooks,
    rest: Option<Pending>,
    /// Where the runtime was built (the console resources' location).
    built_at: &'static std::panic::Location<'static>,
}

/// What [`Prepared::start`] starts.
pub(crate) struct Pending {
    pub watched: Arc<Shared>,
    pub sinks: export::Sinks,
    pub recorder: export::Recorder,
    pub flight: Option<export::Flight>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("enabled", &self.rest.is_some())
            .finish()
    }
}

impl Prepared {
    pub(crate) fn new(
        hooks: PollHooks,
        built_at: &'static std::panic::Location<'static>,
        pending: Pending,
    ) -> Prepared {
        Prepared {
            hooks,
            rest: Some(pending),
            built_at,
        }
    }

    /// A detector that is off: no-op hooks, nothing to start.
    pub(crate) fn off(built_at: &'static std::panic::Location<'static>) -> Prepared {
        Prepared {
            hooks: PollHooks::new(None),
            rest: None,
            built_at,
        }
    }

    /// The poll hooks (no-ops when pinwatch is off).
    pub fn hooks(&self) -> PollHooks {
        self.hooks.clone()
    }

    /// Starts watching the runtime `handle` belongs to — the one whose builder got
    /// [`hooks`](Self::hooks): the watchdog thread and the export thread start. Where the hooks
    /// were installed with [`PollHooks::install`], it waits for a multi-thread runtime's workers
    /// to park once, as [`Builder::build`](crate::Builder::build) does: call it before the
    /// runtime runs tasks (a runtime whose workers stay busy holds it up to 250 ms).
    pub fn start(self, handle: &tokio::runtime::Handle) -> Result<Detector, Error> {
        let Some(pending) = self.rest else {
            return Ok(Detector {
                watched: None,
                dump_on_exit: None,
                control: None,
                watchdog: None,
                export: None,
                export_wait: EXPORT_WAIT,
                flight: None,
                exporters: Running::none(),
                drops: export::Drops::default(),
            });
        };
        install_panic_hook();
        let Pending {
            watched,
            sinks,
            recorder,
            flight,
        } = pending;
        let flight = flight.map(|f| {
            (
                f,
                export::Identity {
                    run_id: watched.run_id.clone(),
                    detector_started: std::time::SystemTime::now(),
                },
            )
        });
        let parts = Parts {
            watched: Arc::clone(&watched),
            handle: handle.clone(),
            flight,
            built_at: self.built_at,
            drops: export::Drops::default(),
        };
        // Events the recordings could not write; pinwatch's own lines that its log thread
        // could not take.
        parts.drops.add("recording", recorder.unwritten());
        parts.drops.add("log", export::log_dropped());
        let mut outlets: Vec<export::Outlet> = sinks
            .inline
            .into_iter()
            .map(export::Outlet::Inline)
            .collect();
        let exporters = export::start_exporters(&parts, &mut outlets)?;
        // After the recordings and the exporters: when `status` shows a pin, they have it.
        let view = control::View::default();
        outlets.push(export::Outlet::Inline(Box::new(view.sink())));
        // Last, each behind its own queue: a sink that blocks holds back none of the above.
        for (name, sink) in sinks.own_thread {
            let capacity = watched.config.queue_capacity;
            outlets.push(export::Outlet::Thread(export::on_own_thread(
                name,
                move || sink,
                capacity,
                &parts.drops,
            )?));
        }
        let flight = parts.flight.clone();
        let drops = parts.drops.clone();
        let control = start_control(control::Context {
            parts,
            recorder,
            view,
        })?;
        let (tx, rx) =
            crate::handoff::bounded::<Box<watch::RawReport>>(watched.config.queue_capacity);
        let export = export::ExportThread::spawn(Arc::clone(&watched), rx, outlets)?;
        let workers = handle.metrics().num_workers();
        let watchdog = watch::spawn(Arc::clone(&watched), handle.clone(), tx)?;
        // Until the detector holds it: an unwind from here (a subscriber that panics at the
        // start-up line) stops it, as the stop channel's sender did when dropped.
        let stop = StopOnUnwind(&watched.table.parking);
        let dump_on_exit = match (&watched.config.dump_on_exit, &flight) {
            (Some(path), Some((flight, who))) => Some(ExitDump::register({
                // Made absolute now: the directory checked at start-up is the one written to,
                // whatever the working directory is at exit, and the lines name it in full.
                let path = crate::files::with_pid(path);
                let path = std::path::absolute(&path).unwrap_or(path);
                ExitDump {
                    dir: ExitDump::dir_of(&path),
                    path,
                    flight: flight.clone(),
                    who: who.clone(),
                    config: watched.config.clone(),
                    stopped: Mutex::new(false),
                }
            })),
            _ => None,
        };
        // Until the detector holds it: an unwind from here takes it out again, so that no
        // signal writes the dump of a detector that never started.
        let mut unregister = UnregisterOnUnwind(dump_on_exit.as_ref().map(|(d, _)| Arc::clone(d)));
        announce(&watched.config, false, || {
            let ctl = control.as_ref().map(|c| {
                // In a directory of its own, `pinwatch ctl` takes the socket's path.
                let target = match watched.config.control {
                    crate::config::Control::On => c.target(),
                    _ => crate::text::shell_word(c.path()),
                };
                (c.path(), target)
            });
            let mut line = startup_line(&watched.config, workers, ctl, &exporters);
            if let Some((dump, signals)) = &dump_on_exit {
                line.push_str("; ");
                line.push_str(&describe_exit_dump(&dump.path, signals));
            }
            line
        });
        if watched.config.from_env && says(&watched.config) {
            // Once a process: every detector of it reads the same environment. One that says
            // nothing (a test's) leaves the warning to the next that does.
            static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                let vars = std::env::vars_os().map(|(name, _)| name);
                for warning in crate::config::unknown_env_vars(vars) {
                    announce(&watched.config, true, || warning);
                }
            }
        }
        // Threads past `max_threads` poll unwatched: say so before any is lost, not after.
        let polling = match handle.runtime_flavor() {
            tokio::runtime::RuntimeFlavor::MultiThread => workers + 1,
            _ => 1,
        };
        if watched.config.max_threads < polling {
            announce(&watched.config, true, || {
                format!(
                    "max_threads (PINWATCH_MAX_THREADS) is {}, fewer than the {polling} threads \
                     that poll this runtime's tasks (its {workers} workers, and `block_on`'s \
                     thread when its body is watched): the polls of those past it go unwatched \
                     and their pins unreported (`unwatched_threads` in `pinwatch ctl PID \
                     status` counts them); raise it to {polling} or more",
                    watched.config.max_threads
                )
            });
        }
        let dump_on_exit = dump_on_exit.map(|(dump, _)| dump);
        // The detector stops it, and takes its dump out, from here.
        std::mem::forget(stop);
        unregister.0 = None;
        Ok(Detector {
            watched: Some(watched),
            flight,
            dump_on_exit,
            control,
            watchdog: Some(watchdog),
            export: Some(export),
            export_wait: EXPORT_WAIT,
            exporters,
            drops,
        })
    }
}

/// Takes an exit dump that no [`Detector`] holds yet out of [`EXIT_DUMPS`] when dropped
/// holding it: [`Prepared::start`] empties it once the detector is made.
struct UnregisterOnUnwind(Option<Arc<ExitDump>>);

impl Drop for UnregisterOnUnwind {
    fn drop(&mut self) {
        if let Some(dump) = self.0.take() {
            ExitDump::unregister(&dump);
        }
    }
}

/// Stops a watchdog that no [`Detector`] holds yet when dropped: [`Prepared::start`] forgets
/// it once the detector is made.
struct StopOnUnwind<'a>(&'a crate::poll::park::Parking);

impl Drop for StopOnUnwind<'_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// The control socket, when `PINWATCH_CONTROL` is not off. In the default directory a failure
/// is a warning (the service runs on without it); in a directory asked for, an error.
fn start_control(ctx: control::Context) -> Result<Option<control::Server>, Error> {
    let (dir, asked) = match &ctx.parts.watched.config.control {
        crate::config::Control::Off => return Ok(None),
        crate::config::Control::On => (control::default_dir(), false),
        crate::config::Control::Dir(d) => (d.clone(), true),
    };
    let config = ctx.parts.watched.config.clone();
    match control::Server::start(&dir, ctx) {
        Ok(server) => Ok(Some(server)),
        Err(reason) if asked => Err(Error::Control(reason)),
        Err(reason) => {
            announce(&config, true, || {
                format!(
                    "no control socket, `pinwatch ctl` cannot reach this process: {reason} \
                     (PINWATCH_CONTROL=off turns it off)"
                )
            });
            Ok(None)
        }
    }
}

/// Says `line` — a warning or the start-up line (INFO) — as a `tracing` event with target
/// `pinwatch`, or on stderr while the process has no `tracing` subscriber; nothing with
/// `PINWATCH_TRACING=off` or in a test's detector.
fn announce(config: &Config, warn: bool, line: impl FnOnce() -> String) {
    if !says(config) {
        return;
    }
    // One line, whatever the paths in it hold (a control directory named with an escape
    // sequence or a newline: helper-91).
    let line = crate::text::escape(&line());
    match (export::no_subscriber(), warn) {
        (true, true) => export::to_stderr("WARN", &line),
        (true, false) => export::to_stderr("INFO", &line),
        (false, true) => tracing::warn!(target: "pinwatch", "{line}"),
        (false, false) => tracing::info!(target: "pinwatch", "{line}"),
    }
}

/// Whether a detector with this configuration says anything ([`announce`]).
fn says(config: &Config) -> bool {
    config.tracing && config.announce
}

/// What a detector watches and where its outputs are, in one line: the threshold, the
/// workers, the control socket, the exporters, the recording.
fn startup_line(
    config: &Config,
    workers: usize,
    control: Option<(&std::path::Path, String)>,
    exporters: &Running,
) -> String {
    let mut s = format!(
        "watching {workers} worker{} for polls of {} or more",
        if workers == 1 { "" } else { "s" },
        humantime::format_duration(config.threshold)
    );
    match control {
        Some((path, target)) => s.push_str(&format!(
            "; control socket {} (`pinwatch ctl {target} status`)",
            path.display(),
        )),
        None => s.push_str("; no control socket"),
    }
    s.push_str("; ");
    s.push_str(&exporters.describe());
    match &config.record {
        // Absolute, as the recording opens it (and `ctl status` names it): whoever reads the
        // line need not know the service's working directory.
        Some(path) => s.push_str(&format!(
            "; recording to {}",
            std::path::absolute(path)
                .as_deref()
                .unwrap_or(path)
                .display()
        )),
        None => s.push_str("; no recording"),
    }
    if let Some(nice) = config.watchdog_nice {
        s.push_str(&format!("; watchdog at nice {nice}"));
    }
    s
}

/// A running detector: the watchdog and export threads of one runtime. A guard: dropping it
/// stops them after a last scan, and flushes the sinks. Drop the runtime before it, so that a
/// poll still running at shutdown is completed.
pub struct Detector {
    watched: Option<Arc<Shared>>,
    /// The flight recording and whose it is, when on.
    flight: Option<(export::Flight, export::Identity)>,
    /// `PINWATCH_DUMP_ON_EXIT`; taken when it is written at the stop.
    dump_on_exit: Option<Arc<ExitDump>>,
    control: Option<control::Server>,
    watchdog: Option<JoinHandle<()>>,
    export: Option<export::ExportThread>,
    /// How long the stop waits for the export thread: [`EXPORT_WAIT`] (a test's is shorter).
    export_wait: Duration,
    /// In start order; dropped after the export thread has handed them the last event.
    pub(crate) exporters: Running,
    /// The drops of the sinks with a queue of their own.
    drops: export::Drops,
}

impl std::fmt::Debug for Detector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detector")
            .field("enabled", &self.is_enabled())
            .field("stats", &self.stats())
            .finish()
    }
}

impl Detector {
    /// Whether pinwatch is watching (false when it was built off).
    pub fn is_enabled(&self) -> bool {
        self.watched.is_some()
    }

    /// Counters so far (all zero when off).
    pub fn stats(&self) -> Stats {
        let mut stats = self
            .watched
            .as_ref()
            .map(|w| snapshot(&w.stats, &w.table))
            .unwrap_or_default();
        stats.sink_dropped = self
            .drops
            .totals()
            .iter()
            .filter(|(sink, _)| *sink != "log")
            .map(|(_, n)| n)
            .sum();
        stats
    }

    /// The settings at start (`None` when off); see [`settings`](Self::settings) for those in
    /// force now.
    pub fn config(&self) -> Option<&Config> {
        self.watched.as_ref().map(|w| &w.config)
    }

    /// The settings in force now: those at start, as `pinwatch ctl <pid> set` and `pause`
    /// have changed them since (`None` when off).
    pub fn settings(&self) -> Option<Settings> {
        self.watched.as_ref().map(|w| w.tunables.get())
    }

    /// The control socket `pinwatch ctl` talks to (`None` when off or when it could not be
    /// made).
    pub fn control_socket(&self) -> Option<&std::path::Path> {
        self.control.as_ref().map(|c| c.path())
    }

    /// The file the flight recording is written to when the detector stops or at an exit
    /// signal ([`Builder::dump_on_exit`](crate::Builder::dump_on_exit), `%p` replaced, and
    /// numbered when another running detector writes to that file; `None` when not asked for).
    pub fn exit_dump(&self) -> Option<&Path> {
        self.dump_on_exit.as_ref().map(|d| d.path.as_path())
    }

    /// This detector's run id, as in every event's `run_id` (`None` when off).
    pub fn run_id(&self) -> Option<&str> {
        self.watched.as_ref().map(|w| w.run_id.as_str())
    }

    /// Watches `fut`, the future you hand to `Runtime::block_on`: tokio's task hooks never see
    /// it (`#[pinwatch::main]` and `#[pinwatch::test]` wrap their bodies with it). Its polls are
    /// timed like a task's, in the calling thread's slot, and reported with `block_on: true`
    /// and this call's location. Poll it on one thread (as `block_on` does).
    #[track_caller]
    pub fn watch_block_on<F: std::future::Future>(
        &self,
        fut: F,
    ) -> impl std::future::Future<Output = F::Output> {
        self.watch_block_on_at(std::panic::Location::caller(), fut)
    }

    pub(crate) fn watch_block_on_at<F: std::future::Future>(
        &self,
        at: &'static std::panic::Location<'static>,
        fut: F,
    ) -> crate::poll::WatchBody<F> {
        crate::poll::WatchBody::new(self.watched.as_ref().map(|w| Arc::clone(&w.table)), at, fut)
    }

    /// Writes the flight recording — the last events the detector exported, every report of
    /// each pin, as far as `PINWATCH_FLIGHT_SIZE` holds them — to a new file at `path`: a
    /// recording (`pinwatch print`, `summary` and `report` read it) whose first line says
    /// whose events they are and what was dropped for space. An existing file is not
    /// replaced (see [`dump_replacing`](Self::dump_replacing)); the file appears whole or
    /// not at all (it is written beside `path` and then linked into place). Returns what the
    /// dump's first line says.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), pinwatch::Error> {
    /// let (rt, detector) = pinwatch::Builder::from_env()?
    ///     .build(tokio::runtime::Builder::new_multi_thread().enable_all())?;
    /// rt.block_on(async { /* the service, until something looks wrong */ });
    /// let dumped = detector.dump("/var/tmp/pins.jsonl")?;
    /// eprintln!("{}", pinwatch::recording::describe_dump(&dumped)); // flight recording of pid …
    /// # Ok(()) }
    /// ```
    pub fn dump(&self, path: impl AsRef<std::path::Path>) -> Result<crate::event::DumpInfo, Error> {
        self.write_dump(path.as_ref(), false)
    }

    /// [`dump`](Self::dump), replacing a file at `path` (by a rename: never truncated, never
    /// left half written).
    pub fn dump_replacing(
        &self,
        path: impl AsRef<std::path::Path>,
    ) -> Result<crate::event::DumpInfo, Error> {
        self.write_dump(path.as_ref(), true)
    }

    fn write_dump(
        &self,
        path: &std::path::Path,
        replace: bool,
    ) -> Result<crate::event::DumpInfo, Error> {
        let err = |reason: String| Error::Dump {
            path: path.to_owned(),
            reason,
        };
        let Some((flight, who)) = &self.flight else {
            return Err(err(if self.watched.is_none() {
                "pinwatch is off (PINWATCH=off): nothing was recorded".to_owned()
            } else {
                "the flight recording is off (PINWATCH_FLIGHT_SIZE=off); turn it on to dump it"
                    .to_owned()
            }));
        };
        write_flight(flight, who, path, replace).map_err(|e| err(e.to_string()))
    }

    /// The pinned-time profile (the pprof format, gzipped: [`profile`](crate::profile)) of
    /// the pins the flight recording holds that ran in the `last` stretch of time before now,
    /// or of all it holds (`None`) — what `/debug/pprof/pinned?seconds=N` serves on the
    /// Prometheus endpoint, for a service that serves its own HTTP (see docs/profiling.md).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), pinwatch::Error> {
    /// let (rt, detector) = pinwatch::Builder::from_env()?
    ///     .build(tokio::runtime::Builder::new_multi_thread().enable_all())?;
    /// rt.block_on(async { /* … */ });
    /// let body = detector.profile(Some(std::time::Duration::from_secs(60)))?;
    /// std::fs::write("/var/tmp/pinned.pb.gz", body).expect("write the profile");
    /// # Ok(()) }
    /// ```
    pub fn profile(&self, last: Option<std::time::Duration>) -> Result<Vec<u8>, Error> {
        match &self.flight {
            Some((flight, _)) => Ok(flight.profile(last)),
            None => Err(Error::InvalidSetting {
                setting: "flight_size",
                reason: if self.watched.is_none() {
                    "pinwatch is off (PINWATCH=off): there are no pins to profile".to_owned()
                } else {
                    "the flight recording is off (PINWATCH_FLIGHT_SIZE=off), and the profile is \
                     made from the pins it holds; turn it on"
                        .to_owned()
                },
            }),
        }
    }

    /// Stops the watchdog after one last scan, lets the sinks handle what is queued, flushes
    /// them, and returns the final [`Stats`]. Dropping the detector does the same.
    pub fn shutdown(mut self) -> Stats {
        self.stop_threads();
        self.stats()
    }

    fn stop_threads(&mut self) {
        // First: no request may reach a detector that is stopping.
        drop(self.control.take());
        self.exporters.close();
        if let Some(w) = &self.watched {
            // The watchdog, asleep while the runtime idles or waiting for its next scan, wakes
            // for a last scan and returns.
            w.table.parking.stop();
        }
        if let Some(w) = self.watchdog.take() {
            let _ = w.join();
        }
        if let Some(s) = self.export.take() {
            join_export(s, self.export_wait);
        }
        // Every event is exported: the flight recording holds the last ones.
        if let Some(dump) = self.dump_on_exit.take() {
            dump.write(None);
            export::flush_stderr();
            ExitDump::unregister(&dump);
        }
        // After the export thread, which has flushed the sinks, the exporters' clients among
        // them: an endpoint stops, the collector leaves the service's registry. None waits.
        self.exporters = Running::none();
    }
}

/// The flight recording `flight` of `who`, written whole to `path`; what its first line says.
fn write_flight(
    flight: &export::Flight,
    who: &export::Identity,
    path: &Path,
    replace: bool,
) -> std::io::Result<crate::event::DumpInfo> {
    let dump = export::Dump::new(flight.snapshot(), who);
    crate::files::write_whole_file(path, replace, |f| dump.write_to(f))?;
    Ok(dump.info)
}

/// How long a detector's stop waits for its export thread to take what is queued and flush
/// the sinks: one held by a recording's write that does not return (a frozen or hung file
/// system) cannot keep a service alive that is stopping.
pub(crate) const EXPORT_WAIT: Duration = Duration::from_secs(30);

/// Joins the export thread `t`, waiting `within` at most; past that, says so and goes on
/// without it.
fn join_export(t: export::ExportThread, within: Duration) {
    if t.join_within(within) {
        return;
    }
    say_error(&format!(
        "pinwatch's export thread did not finish within {} (a recording on a file system that \
         does not answer?); the detector stops without it: the reports it still held, and what \
         the exporters behind it had not sent, are lost",
        humantime::format_duration(within)
    ));
    export::flush_stderr();
}

/// How long the exit signals' thread waits for the dumps at a signal before the process dies
/// of it without them (a hung file system cannot keep a service alive that was asked to stop;
/// a second signal ends it at once).
pub(crate) const EXIT_DUMP_WAIT: Duration = Duration::from_secs(10);

/// One detector's `PINWATCH_DUMP_ON_EXIT`: what to write where, shared with the exit
/// signals' thread while the detector runs.
struct ExitDump {
    /// `%p` replaced.
    path: PathBuf,
    /// Its directory's device and inode (read before the dump is registered): two spellings of
    /// one file (`pins.jsonl` and `/srv/pins.jsonl`, `a/../pins.jsonl`) are one file.
    dir: Option<(u64, u64)>,
    flight: export::Flight,
    who: export::Identity,
    /// Its detector's settings: how to say what happened.
    config: Config,
    /// Held while the dump is written, so that a signal's dump and the stop's never overlap;
    /// true once the stop has written it (a signal's dump after that would hold less).
    stopped: Mutex<bool>,
}

/// The dumps of every running detector with `PINWATCH_DUMP_ON_EXIT`: a SIGTERM or SIGINT
/// writes them all (two runtimes in one process: both files).
static EXIT_DUMPS: Mutex<Vec<Arc<ExitDump>>> = Mutex::new(Vec::new());

/// What [`exit_signal::arm`] found, to say in the start-up line: each signal's disposition,
/// or why none is caught.
type ExitSignals = Result<[Disposition; 2], String>;

impl ExitDump {
    /// Adds `dump` to [`EXIT_DUMPS`] and catches the exit signals (when they have their
    /// default action).
    ///
    /// A file another running detector dumps to (two `Builder::from_env()` with one
    /// `PINWATCH_DUMP_ON_EXIT`) is numbered instead, the lowest number free: `pins-42.2.jsonl`.
    fn register(mut dump: ExitDump) -> (Arc<ExitDump>, ExitSignals) {
        let mut all = EXIT_DUMPS.lock().unwrap_or_else(PoisonError::into_inner);
        let asked = dump.path.clone();
        let mut n = 1;
        while all.iter().any(|d| d.same_file(&dump)) {
            n += 1;
            dump.path = crate::files::numbered(&asked, n);
        }
        let dump = Arc::new(dump);
        let signals = exit_signal::arm(on_exit_signal);
        all.push(Arc::clone(&dump));
        (dump, signals)
    }

    /// The device and inode of the directory `path` is in (the working directory for a bare
    /// name).
    fn dir_of(path: &Path) -> Option<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(crate::files::dir_of(path))
            .ok()
            .map(|m| (m.dev(), m.ino()))
    }

    /// Whether `other` writes the file this one does, however either is spelt.
    fn same_file(&self, other: &ExitDump) -> bool {
        self.path == other.path
            || (self.dir.is_some()
                && self.dir == other.dir
                && self.path.file_name() == other.path.file_name())
    }

    /// Takes `dump` out of [`EXIT_DUMPS`]; with the last one, the exit signals get their
    /// default action back (where pinwatch's handler is still the installed one).
    fn unregister(dump: &Arc<ExitDump>) {
        let mut all = EXIT_DUMPS.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|d| !Arc::ptr_eq(d, dump));
        if all.is_empty() {
            exit_signal::disarm();
        }
    }

    /// Writes the dump, replacing the file, and says so — or why it failed, even with
    /// `PINWATCH_TRACING=off` (it was asked for). `signal`: the exit signal it is written at;
    /// `None`: at the detector's stop, after which a signal writes it no more.
    fn write(&self, signal: Option<libc::c_int>) {
        let mut stopped = self.stopped.lock().unwrap_or_else(PoisonError::into_inner);
        if *stopped {
            return;
        }
        *stopped = signal.is_none();
        let at = signal
            .and_then(|sig| EXIT_SIGNALS.iter().find(|(s, _)| *s == sig))
            .map(|(_, name)| format!(" at {name}"))
            .unwrap_or_default();
        match write_flight(&self.flight, &self.who, &self.path, true) {
            Ok(info) => announce(&self.config, false, || {
                format!(
                    "wrote the flight recording to {} ({} events; PINWATCH_DUMP_ON_EXIT{at})",
                    self.path.display(),
                    info.events
                )
            }),
            Err(e) => say_error(&format!(
                "PINWATCH_DUMP_ON_EXIT{at}: {}",
                Error::Dump {
                    path: self.path.clone(),
                    reason: e.to_string(),
                }
            )),
        }
    }
}

/// An ERROR line of pinwatch's, whatever `PINWATCH_TRACING` says.
fn say_error(line: &str) {
    if export::no_subscriber() {
        export::to_stderr("ERROR", line);
    } else {
        tracing::error!(target: "pinwatch", "{line}");
    }
}

/// The exit signals' thread got `sig`: every running detector's dump, written on a thread of
/// its own and waited for at most [`EXIT_DUMP_WAIT`]; then pinwatch's lines are flushed (the
/// process may die of the signal next).
fn on_exit_signal(sig: libc::c_int) {
    let dumps: Vec<Arc<ExitDump>> = EXIT_DUMPS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    if dumps.is_empty() {
        return;
    }
    let (tx, rx) = mpsc::channel();
    let writer = {
        let dumps = dumps.clone();
        std::thread::Builder::new()
            .name("pinwatch-exit-dump".into())
            .spawn(move || {
                for d in &dumps {
                    d.write(Some(sig));
                }
                let _ = tx.send(());
            })
    };
    match writer {
        Ok(_) => {
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(EXIT_DUMP_WAIT) {
                let name = EXIT_SIGNALS
                    .iter()
                    .find(|(s, _)| *s == sig)
                    .map_or("the signal", |(_, n)| n);
                let paths: Vec<String> =
                    dumps.iter().map(|d| d.path.display().to_string()).collect();
                say_error(&format!(
                    "PINWATCH_DUMP_ON_EXIT at {name}: the dump to {} did not finish within {} \
                     (a file system that does not answer?); not waiting for it any longer",
                    paths.join(", "),
                    humantime::format_duration(EXIT_DUMP_WAIT)
                ));
            }
        }
        // No thread to spare: written here, unbounded (a second signal still ends the process).
        Err(_) => {
            for d in &dumps {
                d.write(Some(sig));
            }
        }
    }
    export::flush_stderr();
}

/// The start-up line's part about `PINWATCH_DUMP_ON_EXIT`: where, and whether a SIGTERM or
/// SIGINT writes it too (pinwatch's handler installed) or only the detector's stop does (a
/// handler the service installed first, `SIG_IGN`, or no handler could be installed).
fn describe_exit_dump(path: &Path, signals: &ExitSignals) -> String {
    let mut s = format!("dump on exit to {}", path.display());
    let dispositions = match signals {
        Ok(d) => d,
        Err(reason) => {
            s.push_str(&format!(
                " (at shutdown only: SIGTERM and SIGINT are not caught: {reason})"
            ));
            return s;
        }
    };
    let named = |want: Disposition| -> Vec<&str> {
        EXIT_SIGNALS
            .iter()
            .zip(dispositions)
            .filter(|(_, d)| **d == want)
            .map(|(&(_, name), _)| name)
            .collect()
    };
    let (caught, ignored, handled) = (
        named(Disposition::Caught),
        named(Disposition::Ignored),
        named(Disposition::Handled),
    );
    let mut parts = Vec::new();
    if !caught.is_empty() {
        parts.push(format!("also on {}", caught.join("/")));
    }
    match handled.as_slice() {
        [] => {}
        [one] => parts.push(format!(
            "{one} has a handler already: the dump is written at shutdown only"
        )),
        _ => parts.push(format!(
            "{} have handlers already: the dump is written at shutdown only",
            handled.join(" and ")
        )),
    }
    match ignored.as_slice() {
        [] => {}
        [one] => parts.push(format!("{one} is ignored")),
        _ => parts.push(format!("{} are ignored", ignored.join(" and "))),
    }
    s.push_str(&format!(" ({})", parts.join("; ")));
    s
}

impl Drop for Detector {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `tracing` subscriber whose every event panics.
    struct Panics;

    impl tracing::Subscriber for Panics {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, _: &tracing::Event<'_>) {
            panic!("the subscriber panics at an event");
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    /// A recording's write that does not return (a frozen or hung file system) held the
    /// export thread, and the detector's stop joined it: a service asked to stop never ended.
    /// The stop now waits [`EXPORT_WAIT`] for it (here 1 s, the same code), then goes on
    /// without it.
    #[test]
    fn a_recording_that_does_not_return_holds_the_stop_a_bounded_time() {
        let dir = tempfile::tempdir().unwrap();
        // No start-up line: its callsite, first hit here while another test sets up a
        // subscriber, would be cached as of no interest to it.
        let builder = quiet().tracing(false).record(dir.path().join("rec.jsonl"));
        let (prepared, _, rt) = prepared_from(builder);
        let recorder = prepared.rest.as_ref().unwrap().recorder.clone();
        let mut detector = prepared.start(rt.handle()).unwrap();
        let wait = Duration::from_secs(1);
        detector.export_wait = wait;
        // As a write on a frozen file system holds them: the export thread's last flush waits.
        let writing = recorder.hold();
        let (tx, rx) = mpsc::channel();
        let stopping = std::time::Instant::now();
        std::thread::spawn(move || {
            detector.shutdown();
            let _ = tx.send(());
        });
        // Generous: a loaded machine is slow to start and join threads.
        rx.recv_timeout(60 * wait)
            .expect("the stop waited for the export thread");
        let took = stopping.elapsed();
        assert!(took >= wait, "{took:?}: the export thread was not held");
        drop(writing);
    }

    /// A detector prepared with no control socket, heartbeat or stacks, what it watches, and a
    /// runtime for it to start on.
    fn prepared() -> (Prepared, Arc<Shared>, tokio::runtime::Runtime) {
        prepared_from(quiet())
    }

    /// A detector with no control socket, heartbeat or stacks.
    fn quiet() -> crate::Builder {
        crate::Builder::new()
            .control(crate::config::Control::Off)
            .heartbeat(None)
            .stacks(crate::config::Stacks::Off)
    }

    /// [`prepared`] from `builder`.
    fn prepared_from(builder: crate::Builder) -> (Prepared, Arc<Shared>, tokio::runtime::Runtime) {
        let prepared = builder.prepare().unwrap();
        let watched = Arc::clone(&prepared.rest.as_ref().unwrap().watched);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        (prepared, watched, rt)
    }

    #[test]
    fn a_start_that_unwinds_after_the_watchdog_started_stops_it() {
        // The start-up line is the only event `start` says on its own thread, after the
        // watchdog's spawn: nothing before it (no control socket, no exporter) says anything.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("unwound.jsonl");
        let (prepared, watched, rt) = prepared_from(dumping(&path));
        let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            tracing::subscriber::with_default(Panics, || prepared.start(rt.handle()))
        }));
        assert!(
            started.is_err(),
            "the start-up line's event unwinds out of start"
        );
        // No detector holds the watchdog: unless the unwind stopped it, it scans on for the
        // life of the process, and keeps the export thread (and its sinks) alive with it.
        assert!(
            watched.table.parking.stopping(),
            "the watchdog of a start that unwound is stopped"
        );
        assert!(
            !dumps_to(&path),
            "a signal would write the dump of a detector that never started"
        );
    }

    /// [`quiet`], with `dump_on_exit` to `path`.
    fn dumping(path: &Path) -> crate::Builder {
        quiet().dump_on_exit(Some(path.to_owned()))
    }

    /// Whether a running detector (or one that failed to start) dumps to `path` at a signal.
    fn dumps_to(path: &Path) -> bool {
        EXIT_DUMPS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|d| d.path == path)
    }

    /// Two detectors running at once with one dump file (two `Builder::from_env()`): each
    /// writes its own, the second numbered; once both stopped, the name is free again.
    #[test]
    fn two_detectors_with_one_exit_dump_file_write_two() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("exit-%p.jsonl");
        let start = |path: &Path| {
            dumping(path)
                .tracing(false)
                .build(&mut tokio::runtime::Builder::new_current_thread())
                .unwrap()
        };
        let ((rt_a, a), (rt_b, b)) = (start(&path), start(&path));
        let runs = [
            a.run_id().unwrap().to_owned(),
            b.run_id().unwrap().to_owned(),
        ];
        let first = crate::files::with_pid(&path);
        let second = crate::files::numbered(&first, 2);
        assert!(dumps_to(&first) && dumps_to(&second));
        assert_eq!(
            (a.exit_dump(), b.exit_dump()),
            (Some(first.as_path()), Some(second.as_path()))
        );
        drop((rt_a, rt_b));
        a.shutdown();
        b.shutdown();
        for (file, run) in [(&first, &runs[0]), (&second, &runs[1])] {
            let text =
                std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let head = text.lines().next().unwrap_or_default();
            assert!(head.contains(run.as_str()), "{}: {head}", file.display());
        }
        assert!(!dumps_to(&first) && !dumps_to(&second), "both stopped");
        // The same file spelt another way.
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let other = dir.path().join("sub/../exit-%p.jsonl");
        let ((rt_a, a), (rt_c, c)) = (start(&path), start(&other));
        let third = crate::files::numbered(&crate::files::with_pid(&other), 2);
        assert!(dumps_to(&third), "one file under two names is numbered too");
        drop((rt_a, rt_c));
        a.shutdown();
        c.shutdown();
        let (rt, again) = start(&path);
        assert!(
            dumps_to(&first),
            "a detector started again dumps to the name"
        );
        drop(rt);
        again.shutdown();
    }

    /// An exporter with a sink on a thread of its own (as OTLP's and the console's are);
    /// `true`: its `describe` panics.
    struct Threaded(bool);

    impl export::Exporter for Threaded {
        fn describe(&self) -> String {
            if self.0 {
                panic!("the exporter panics as it describes itself");
            }
            "threaded".to_owned()
        }
    }

    fn start_threaded(parts: &Parts) -> Result<Option<export::Started>, Error> {
        threaded(parts, false)
    }

    fn start_threaded_describe_panics(parts: &Parts) -> Result<Option<export::Started>, Error> {
        threaded(parts, true)
    }

    fn threaded(parts: &Parts, describe_panics: bool) -> Result<Option<export::Started>, Error> {
        let sink = || Box::new(|_: &crate::PinnedEvent| {}) as Box<dyn export::Sink>;
        Ok(Some(export::Started {
            exporter: Box::new(Threaded(describe_panics)),
            sink: export::Outlet::Thread(export::on_own_thread("first", sink, 1, &parts.drops)?),
        }))
    }

    fn start_fails(_: &Parts) -> Result<Option<export::Started>, Error> {
        Err(Error::Control("the second exporter does not start".into()))
    }

    fn start_panics(_: &Parts) -> Result<Option<export::Started>, Error> {
        panic!("the second exporter panics as it starts")
    }

    /// Runs `f` on a thread of its own; its result, or `None` if it has not returned within a
    /// minute (hung). A panic in `f` fails the test as one.
    fn returns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(v) => Some(v),
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the start's thread panicked"),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
        }
    }

    /// What `Running::start` returned (its description or its error) or its panic's message,
    /// and how many sinks it left.
    type Outcome = (Result<Result<String, String>, String>, usize);

    /// Starts `first`, then `second`, after a sink of the detector's own (`None`: the start
    /// hung).
    fn start_two(first: export::StartFn, second: export::StartFn) -> Option<Outcome> {
        returns(move || {
            let (_prepared, watched, rt) = prepared();
            let parts = Parts {
                watched,
                handle: rt.handle().clone(),
                flight: None,
                built_at: std::panic::Location::caller(),
                drops: export::Drops::default(),
            };
            let entries = [
                export::Entry {
                    name: "first",
                    start: Some(first),
                },
                export::Entry {
                    name: "second",
                    start: Some(second),
                },
            ];
            let own: Box<dyn export::Sink> = Box::new(|_: &crate::PinnedEvent| {});
            let mut sinks = vec![export::Outlet::Inline(own)];
            let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                Running::start(&parts, &entries, &mut sinks)
            }));
            // How many sinks it left: one for each exporter that started.
            let left = sinks.len();
            drop(sinks);
            let started = started
                .map(|r| r.map(|r| r.describe()).map_err(|e| e.to_string()))
                .map_err(|p| {
                    p.downcast_ref::<&str>()
                        .map(|m| m.to_string())
                        .or_else(|| p.downcast_ref::<String>().cloned())
                        .unwrap_or_default()
                });
            (started, left)
        })
    }

    /// An exporter that starts after one with a thread of its own fails, or panics, or the one
    /// started panics in its `describe`: the error or the panic comes back, and nothing waits
    /// (the started one's thread ends once its sink is dropped, on its own).
    #[test]
    fn an_exporter_that_fails_after_another_started_returns_its_error() {
        let (started, _) = start_two(start_threaded, start_fails).expect("the start hung");
        let error = started.expect("no panic").expect_err("the start succeeded");
        assert!(error.contains("does not start"), "{error}");
        let (started, _) =
            start_two(start_threaded, start_panics).expect("the start hung as it unwound");
        let panic = started.expect_err("no panic");
        assert!(panic.contains("panics as it starts"), "{panic}");
        let (started, sinks) = start_two(start_threaded_describe_panics, start_fails)
            .expect("the start hung as it unwound from describe");
        let panic = started.expect_err("no panic");
        assert!(panic.contains("describes itself"), "{panic}");
        assert_eq!(
            sinks, 1,
            "a sink was added for an exporter that did not start"
        );
    }

    /// A start that fails after the exporters started (here the control socket's directory
    /// cannot be made) returns its error, and does not wait for the exporters' threads.
    #[cfg(feature = "otlp")]
    #[test]
    fn a_start_that_fails_after_otlp_started_returns_its_error() {
        let error = returns(|| {
            let (prepared, _, rt) = prepared_from(
                quiet()
                    .otlp(true)
                    .control(crate::config::Control::Dir("/dev/null/pinwatch".into())),
            );
            prepared.start(rt.handle()).err().map(|e| e.to_string())
        });
        let error = error.expect("the start hung").expect("the start succeeded");
        assert!(error.contains("/dev/null/pinwatch"), "{error}");
    }

    #[test]
    fn the_start_up_line_says_when_the_dump_is_written() {
        let path = Path::new("/var/tmp/pins-7.jsonl");
        let (caught, ignored, handled) = (
            Disposition::Caught,
            Disposition::Ignored,
            Disposition::Handled,
        );
        let said = |d: ExitSignals| describe_exit_dump(path, &d);
        assert_eq!(
            said(Ok([caught, caught])),
            "dump on exit to /var/tmp/pins-7.jsonl (also on SIGTERM/SIGINT)"
        );
        assert_eq!(
            said(Ok([caught, handled])),
            "dump on exit to /var/tmp/pins-7.jsonl (also on SIGTERM; SIGINT has a handler \
             already: the dump is written at shutdown only)"
        );
        assert_eq!(
            said(Ok([handled, handled])),
            "dump on exit to /var/tmp/pins-7.jsonl (SIGTERM and SIGINT have handlers already: \
             the dump is written at shutdown only)"
        );
        // A background job of a non-interactive shell ignores SIGINT.
        assert_eq!(
            said(Ok([caught, ignored])),
            "dump on exit to /var/tmp/pins-7.jsonl (also on SIGTERM; SIGINT is ignored)"
        );
        assert_eq!(
            said(Err("cannot make a pipe: too many open files".into())),
            "dump on exit to /var/tmp/pins-7.jsonl (at shutdown only: SIGTERM and SIGINT are \
             not caught: cannot make a pipe: too many open files)"
        );
    }
}
