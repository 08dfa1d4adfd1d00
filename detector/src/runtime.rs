//! The running detector: [`Prepared::start`] starts the watchdog, the export thread, the
//! exporters and the control socket for a built runtime, and returns the [`Detector`] guard,
//! which stops them in order. [`Builder`](crate::Builder) (in `builder`) makes the
//! [`Prepared`].

use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use crate::config::{Config, Settings};
use crate::control;
use crate::export::{self, Parts, Running};
use crate::poll::PollHooks;
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
    /// [`hooks`](Self::hooks): the watchdog thread and the export thread start.
    pub fn start(self, handle: &tokio::runtime::Handle) -> Result<Detector, Error> {
        let Some(pending) = self.rest else {
            return Ok(Detector {
                watched: None,
                dump_on_exit: None,
                control: None,
                stop: None,
                watchdog: None,
                export: None,
                flight: None,
                exporters: Running::none(),
                drops: export::Drops::default(),
            });
        };
        install_panic_hook();
        let Pending {
            watched,
            mut sinks,
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
        let mut inline = std::mem::take(&mut sinks.inline);
        let exporters = export::start_exporters(&parts, &mut inline)?;
        // After the recordings and the exporters: when `status` shows a pin, they have it.
        let view = control::View::default();
        inline.push(Box::new(view.sink()));
        // Last, each behind its own queue: a sink that blocks holds back none of the above.
        let threaded = sinks
            .own_thread
            .into_iter()
            .map(|(name, sink)| {
                export::on_own_thread(name, sink, watched.config.queue_capacity, &parts.drops)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let flight = parts.flight.clone();
        let drops = parts.drops.clone();
        let control = start_control(control::Context {
            parts,
            recorder,
            view,
        })?;
        let (tx, rx) = mpsc::sync_channel::<watch::RawReport>(watched.config.queue_capacity);
        let (stop_tx, stop_rx) = mpsc::channel();
        let export = export::spawn_export_thread(Arc::clone(&watched), rx, inline, threaded)?;
        let workers = handle.metrics().num_workers();
        let watchdog = watch::spawn(Arc::clone(&watched), handle.clone(), tx, stop_rx)?;
        announce(&watched.config, false, || {
            startup_line(
                &watched.config,
                workers,
                control.as_ref().map(|c| c.path()),
                &exporters,
            )
        });
        let dump_on_exit = watched
            .config
            .dump_on_exit
            .as_deref()
            .map(crate::files::with_pid);
        Ok(Detector {
            watched: Some(watched),
            flight,
            dump_on_exit,
            control,
            stop: Some(stop_tx),
            watchdog: Some(watchdog),
            export: Some(export),
            exporters,
            drops,
        })
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
    if !config.tracing || !config.announce {
        return;
    }
    let line = line();
    match (export::no_subscriber(), warn) {
        (true, true) => export::to_stderr("WARN", &line),
        (true, false) => export::to_stderr("INFO", &line),
        (false, true) => tracing::warn!(target: "pinwatch", "{line}"),
        (false, false) => tracing::info!(target: "pinwatch", "{line}"),
    }
}

/// What a detector watches and where its outputs are, in one line: the threshold, the
/// workers, the control socket, the exporters, the recording.
fn startup_line(
    config: &Config,
    workers: usize,
    control: Option<&std::path::Path>,
    exporters: &Running,
) -> String {
    let mut s = format!(
        "watching {workers} worker{} for polls of {} or more",
        if workers == 1 { "" } else { "s" },
        humantime::format_duration(config.threshold)
    );
    match control {
        Some(path) => s.push_str(&format!(
            "; control socket {} (`pinwatch ctl {} status`)",
            path.display(),
            std::process::id()
        )),
        None => s.push_str("; no control socket"),
    }
    s.push_str("; ");
    s.push_str(&exporters.describe());
    match &config.record {
        Some(path) => s.push_str(&format!("; recording to {}", path.display())),
        None => s.push_str("; no recording"),
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
    /// `PINWATCH_DUMP_ON_EXIT`, `%p` replaced; taken when it is written.
    dump_on_exit: Option<PathBuf>,
    control: Option<control::Server>,
    stop: Option<mpsc::Sender<()>>,
    watchdog: Option<JoinHandle<()>>,
    export: Option<JoinHandle<()>>,
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
        let dump = export::Dump::new(flight.snapshot(), who);
        crate::files::write_whole_file(path, replace, |f| dump.write_to(f))
            .map_err(|e| err(e.to_string()))?;
        Ok(dump.info)
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
        drop(self.stop.take());
        if let Some(w) = &self.watched {
            // A watchdog asleep while the runtime idles wakes to stop.
            w.table.parking.stop();
        }
        if let Some(w) = self.watchdog.take() {
            let _ = w.join();
        }
        if let Some(s) = self.export.take() {
            let _ = s.join();
        }
        // Every event is exported: the flight recording holds the last ones.
        if let Some(path) = self.dump_on_exit.take() {
            self.dump_at_exit(&path);
        }
        // After the export thread (its sinks are flushed): each exporter's thread sends
        // what is queued, then stops.
        self.exporters = Running::none();
    }
}

impl Detector {
    /// `PINWATCH_DUMP_ON_EXIT`: the dump, or why it failed, said like the start-up line.
    fn dump_at_exit(&self, path: &std::path::Path) {
        let Some(config) = self.config() else { return };
        match self.write_dump(path, true) {
            Ok(info) => announce(config, false, || {
                format!(
                    "wrote the flight recording to {} ({} events; PINWATCH_DUMP_ON_EXIT)",
                    path.display(),
                    info.events
                )
            }),
            // A lost dump is said even with PINWATCH_TRACING=off: it was asked for.
            Err(e) => {
                let line = format!("PINWATCH_DUMP_ON_EXIT: {e}");
                if export::no_subscriber() {
                    export::to_stderr("ERROR", &line);
                } else {
                    tracing::error!(target: "pinwatch", "{line}");
                }
            }
        }
        export::flush_stderr();
    }
}

impl Drop for Detector {
    fn drop(&mut self) {
        self.stop_threads();
    }
}
