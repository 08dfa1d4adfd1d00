//! Wiring: the only module that knows every stage. [`Builder`] validates the settings, installs
//! the signal handler, makes the slot table and the [`PollHooks`]; [`Prepared::start`] starts the
//! watchdog and the export thread for a built runtime and returns the [`Detector`] guard.
//!
//! poll (hooks → slots) → watch (watchdog, probes) → one bounded queue → analyze → export.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::analyze::Analyzer;
#[allow(unused_imports)]
use crate::config::Console;
use crate::config::{Config, Settings, Stacks};
use crate::control;
use crate::export::{self, Fanout, Sink};
use crate::poll::slot::SlotTable;
use crate::poll::PollHooks;
pub use crate::watch::Stats;
use crate::watch::{self, snapshot, Watched};
use crate::Error;

/// Configures pinwatch and builds a watched tokio runtime.
///
/// ```no_run
/// # fn main() -> Result<(), pinwatch::Error> {
/// let (rt, detector) = pinwatch::Builder::from_env()?
///     .build(tokio::runtime::Builder::new_multi_thread().enable_all())?;
/// rt.block_on(async { /* the service */ });
/// drop(rt); // the runtime first: a poll still running at shutdown is completed
/// drop(detector); // then the detector: last scan, sinks flushed
/// # Ok(()) }
/// ```
pub struct Builder {
    pub(crate) config: Config,
    sinks: Vec<Box<dyn Sink>>,
    unwinder_safe: Option<bool>,
    #[cfg(feature = "prometheus")]
    prometheus_registry: Option<prometheus::Registry>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("config", &self.config)
            .field("sinks", &self.sinks.len())
            .finish()
    }
}

impl Builder {
    /// The defaults ([`crate::config`]'s constants); the environment is not read.
    pub fn new() -> Builder {
        Builder {
            config: Config::default(),
            sinks: Vec::new(),
            unwinder_safe: None,
            #[cfg(feature = "prometheus")]
            prometheus_registry: None,
        }
    }

    /// The defaults overlaid with the environment ([`crate::config::ENV_VARS`]). The only call
    /// that reads the environment.
    pub fn from_env() -> Result<Builder, Error> {
        Builder::new().with_env()
    }

    /// Overlays the environment on the settings made so far: a variable that is set wins.
    pub fn with_env(mut self) -> Result<Builder, Error> {
        self.config.apply_env(|n| std::env::var_os(n))?;
        Ok(self)
    }

    /// Overlays the variables that `get` returns (it stands for `std::env::var_os`): what
    /// [`with_env`](Self::with_env) does, from a filtered environment.
    pub(crate) fn with_env_from(
        mut self,
        get: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<Builder, Error> {
        self.config.apply_env(get)?;
        Ok(self)
    }

    /// Turns the detector on or off (`PINWATCH`). Off builds a plain runtime: no hooks, no
    /// threads.
    pub fn enabled(mut self, on: bool) -> Self {
        self.config.enabled = on;
        self
    }

    /// A poll running at least this long is pinned (`PINWATCH_THRESHOLD`, default
    /// [`DEFAULT_THRESHOLD`](crate::config::DEFAULT_THRESHOLD)).
    pub fn threshold(mut self, d: Duration) -> Self {
        self.config.threshold = d;
        self
    }

    /// A pinned poll is reported again this often while it runs (`PINWATCH_REPORT_INTERVAL`,
    /// default [`DEFAULT_REPORT_INTERVAL`](crate::config::DEFAULT_REPORT_INTERVAL)).
    pub fn report_interval(mut self, d: Duration) -> Self {
        self.config.report_interval = d;
        self
    }

    /// The watchdog's scan period (`PINWATCH_SCAN_INTERVAL`, default
    /// [`DEFAULT_SCAN_INTERVAL`](crate::config::DEFAULT_SCAN_INTERVAL), never more than a
    /// quarter of the threshold).
    pub fn scan_interval(mut self, d: Duration) -> Self {
        self.config.scan_interval = d;
        self
    }

    /// Appends every event to this JSON-lines file (`PINWATCH_RECORD`).
    pub fn record(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.record = Some(path.into());
        self
    }

    /// How much stack context to capture (`PINWATCH_STACKS`, default [`Stacks::Short`]).
    pub fn stacks(mut self, stacks: Stacks) -> Self {
        self.config.stacks = stacks;
        self
    }

    /// Interval between stack samples of a poll that stays pinned (`PINWATCH_SAMPLE_INTERVAL`,
    /// default [`DEFAULT_SAMPLE_INTERVAL`](crate::config::DEFAULT_SAMPLE_INTERVAL)).
    pub fn sample_interval(mut self, d: Duration) -> Self {
        self.config.sample_interval = d;
        self
    }

    /// Capacity of the queue to the sinks (`PINWATCH_QUEUE_CAPACITY`, default
    /// [`DEFAULT_QUEUE_CAPACITY`](crate::config::DEFAULT_QUEUE_CAPACITY)).
    pub fn queue_capacity(mut self, n: usize) -> Self {
        self.config.queue_capacity = n;
        self
    }

    /// How many threads can be watched at once (`PINWATCH_MAX_THREADS`, default
    /// [`DEFAULT_MAX_THREADS`](crate::config::DEFAULT_MAX_THREADS)).
    pub fn max_threads(mut self, n: usize) -> Self {
        self.config.max_threads = n;
        self
    }

    /// Emit a `tracing` WARN event (target `pinwatch`) per pinned event (`PINWATCH_TRACING`,
    /// default on).
    pub fn tracing(mut self, on: bool) -> Self {
        self.config.tracing = on;
        self
    }

    /// Adds a sink that receives every event, on the export thread.
    pub fn sink(mut self, sink: impl Sink) -> Self {
        self.sinks.push(Box::new(sink));
        self
    }

    /// Serves Prometheus metrics at `http://addr/metrics` from a thread of pinwatch's own
    /// (`PINWATCH_PROMETHEUS_ADDR`). It answers while every worker is pinned.
    #[cfg(feature = "prometheus")]
    pub fn prometheus_addr(mut self, addr: std::net::SocketAddr) -> Self {
        self.config.prometheus_addr = Some(addr);
        self
    }

    /// Registers pinwatch's metrics ([`export::prometheus::METRICS`]) into `registry`, for a
    /// service that already serves its own `/metrics`.
    #[cfg(feature = "prometheus")]
    pub fn prometheus_registry(mut self, registry: &prometheus::Registry) -> Self {
        self.prometheus_registry = Some(registry.clone());
        self
    }

    /// Sends pin reports as OpenTelemetry log records, and pinwatch's metrics, over OTLP
    /// (`PINWATCH_OTLP=on`); the standard `OTEL_*` variables configure where and how.
    #[cfg(feature = "otlp")]
    pub fn otlp(mut self, on: bool) -> Self {
        self.config.otlp = on;
        self
    }

    /// Serves tokio-console and keeps one console resource per worker ([`Console::On`]), or
    /// only the resources, for a subscriber of yours with the console layer
    /// ([`Console::Resources`]) (`PINWATCH_CONSOLE`).
    #[cfg(feature = "console")]
    pub fn console(mut self, mode: Console) -> Self {
        self.config.console = mode;
        self
    }

    /// Bound on the distinct `location` values of `pinwatch_pins_by_location_total`
    /// (`PINWATCH_PROMETHEUS_MAX_LOCATIONS`, default
    /// [`DEFAULT_PROMETHEUS_MAX_LOCATIONS`](crate::config::DEFAULT_PROMETHEUS_MAX_LOCATIONS)).
    pub fn prometheus_max_locations(mut self, n: usize) -> Self {
        self.config.prometheus_max_locations = n;
        self
    }

    /// Where the control socket for `pinwatch ctl` goes (`PINWATCH_CONTROL`, default
    /// [`Control::On`](crate::config::Control::On)).
    pub fn control(mut self, control: crate::config::Control) -> Self {
        self.config.control = control;
        self
    }

    /// pinwatch's heartbeat on the watched runtime (`PINWATCH_HEARTBEAT`, default
    /// [`DEFAULT_HEARTBEAT`](crate::config::DEFAULT_HEARTBEAT); `None`: off): while a pin
    /// runs, a task that sleeps this long in a loop, whose lateness tells a pin that stalls the
    /// whole runtime's timers and I/O (`runtime_stalled`) from one that holds only its worker.
    /// It starts when a poll is flagged as pinned and ends when no pin runs: an idle runtime is
    /// never woken by it. It needs tokio's
    /// time driver: [`build`](Self::build) turns it on (`enable_time`); with
    /// [`prepare`](Self::prepare), build your runtime with `enable_time` or `enable_all`.
    pub fn heartbeat(mut self, every: Option<Duration>) -> Self {
        self.config.heartbeat = every;
        self
    }

    /// Rotates the recording before it grows past `bytes` (`PINWATCH_RECORD_MAX_SIZE`,
    /// default [`DEFAULT_RECORD_MAX_SIZE`](crate::config::DEFAULT_RECORD_MAX_SIZE); `None`:
    /// never), or once its current file is `age` old (`PINWATCH_RECORD_MAX_AGE`, default
    /// never), keeping `keep` rotated files (`PINWATCH_RECORD_KEEP`, default
    /// [`DEFAULT_RECORD_KEEP`](crate::config::DEFAULT_RECORD_KEEP)).
    pub fn record_rotation(
        mut self,
        bytes: Option<u64>,
        age: Option<Duration>,
        keep: usize,
    ) -> Self {
        self.config.record_max_size = bytes;
        self.config.record_max_age = age;
        self.config.record_keep = keep;
        self
    }

    /// Keeps the last events in memory, at most `bytes` of their JSON lines, for a dump after
    /// the fact ([`Detector::dump`], `pinwatch ctl <pid> dump`) (`PINWATCH_FLIGHT_SIZE`,
    /// default [`DEFAULT_FLIGHT_SIZE`](crate::config::DEFAULT_FLIGHT_SIZE), at most
    /// [`MAX_FLIGHT_SIZE`](crate::config::MAX_FLIGHT_SIZE); `None`: no flight recording).
    pub fn flight_size(mut self, bytes: Option<u64>) -> Self {
        self.config.flight_size = bytes;
        self
    }

    /// Writes the flight recording to `path` when the detector stops — dropped, or
    /// [`shutdown`](Detector::shutdown) — after the last event is exported
    /// (`PINWATCH_DUMP_ON_EXIT`; `%p` in it is the pid). The file is replaced whole, never left
    /// half written. Its directory must exist and be writable: [`prepare`](Self::prepare)
    /// checks.
    pub fn dump_on_exit(mut self, path: Option<PathBuf>) -> Self {
        self.config.dump_on_exit = path;
        self
    }

    /// Tests only: the watchdog sleeps `d` before every other scan, as a watchdog slowed by a
    /// probe or preempted by the kernel would.
    #[doc(hidden)]
    pub fn __late_watchdog(mut self, d: Duration) -> Self {
        self.config.late_scans = Some(d);
        self
    }

    /// Tests only: take the unwinder to be async-signal-safe or not, instead of asking the
    /// dynamic loader.
    #[doc(hidden)]
    pub fn __assume_unwinder_signal_safe(mut self, safe: bool) -> Self {
        self.unwinder_safe = Some(safe);
        self
    }

    /// The settings so far.
    pub fn config(&self) -> &Config {
        &self.config
    }

    fn validate(&self) -> Result<(), Error> {
        let bad = |setting, reason: &str| {
            Err(Error::InvalidSetting {
                setting,
                reason: reason.to_owned(),
            })
        };
        let c = &self.config;
        if c.threshold.is_zero() {
            return bad("threshold", "must be greater than zero");
        }
        if c.report_interval.is_zero() {
            return bad("report_interval", "must be greater than zero");
        }
        if c.sample_interval.is_zero() {
            return bad("sample_interval", "must be greater than zero");
        }
        if c.queue_capacity == 0 {
            return bad("queue_capacity", "must be at least 1");
        }
        if c.max_threads == 0 {
            return bad("max_threads", "must be at least 1");
        }
        if c.prometheus_max_locations == 0 {
            return bad("prometheus_max_locations", "must be at least 1");
        }
        if c.heartbeat.is_some_and(|d| d.is_zero()) {
            return bad("heartbeat", "must be greater than zero (or None: off)");
        }
        if c.record_keep == 0 {
            return bad("record_keep", "must be at least 1");
        }
        if c.record_max_size == Some(0) {
            return bad(
                "record_max_size",
                "must be greater than zero (or None: never)",
            );
        }
        match c.flight_size {
            Some(0) => return bad("flight_size", "must be greater than zero (or None: off)"),
            Some(b) if b > crate::config::MAX_FLIGHT_SIZE => {
                return bad("flight_size", "must be at most MAX_FLIGHT_SIZE (1 GiB)")
            }
            _ => {}
        }
        if let Some(path) = &c.dump_on_exit {
            let value = path.display().to_string();
            if c.flight_size.is_none() {
                return Err(Error::invalid_env(
                    "PINWATCH_DUMP_ON_EXIT",
                    value,
                    "is set, but the flight recording is off (PINWATCH_FLIGHT_SIZE=off): there \
                     is nothing to dump; turn the flight recording on or unset the variable",
                ));
            }
            if let Err(reason) = export::check_dump_path(path) {
                return Err(Error::invalid_env("PINWATCH_DUMP_ON_EXIT", value, reason));
            }
        }
        if let crate::config::Control::Dir(d) = &c.control {
            if !d.is_absolute() {
                return bad("control", "must be an absolute directory");
            }
        }
        // (asked for, its variable, its cargo feature, built with it)
        for (asked, var, feature, built) in [
            (c.otlp, "PINWATCH_OTLP", "otlp", cfg!(feature = "otlp")),
            (
                c.console != Console::Off,
                "PINWATCH_CONSOLE",
                "console",
                cfg!(feature = "console"),
            ),
            (
                c.prometheus_addr.is_some(),
                "PINWATCH_PROMETHEUS_ADDR",
                "prometheus",
                cfg!(feature = "prometheus"),
            ),
        ] {
            if asked && !built {
                return Err(Error::MissingFeature { var, feature });
            }
        }
        Ok(())
    }

    /// Builds `tokio` with pinwatch watching it: installs the poll hooks (replacing any poll
    /// hooks set on it; see [`prepare`](Self::prepare) to keep yours), builds the runtime, and
    /// starts the detector. With the detector off, builds `tokio` as it is.
    ///
    /// You keep tokio's own `Runtime`. The [`Detector`] is a guard: drop the runtime first, then
    /// the detector (its drop takes a last scan, so that a poll that was still running is
    /// completed, and flushes the sinks).
    #[track_caller]
    pub fn build(
        self,
        tokio: &mut tokio::runtime::Builder,
    ) -> Result<(tokio::runtime::Runtime, Detector), Error> {
        let prepared = self.prepare_on(tokio)?;
        let rt = tokio.build().map_err(Error::Runtime)?;
        let detector = prepared.start(rt.handle())?;
        Ok((rt, detector))
    }

    /// [`build`](Self::build) for a `LocalRuntime` (tokio's `Builder::build_local`; `tokio`
    /// made with `new_current_thread`).
    #[track_caller]
    pub fn build_local(
        self,
        tokio: &mut tokio::runtime::Builder,
        options: tokio::runtime::LocalOptions,
    ) -> Result<(tokio::runtime::LocalRuntime, Detector), Error> {
        let prepared = self.prepare_on(tokio)?;
        let rt = tokio.build_local(options).map_err(Error::Runtime)?;
        let detector = prepared.start(rt.handle())?;
        Ok((rt, detector))
    }

    /// [`prepare`](Self::prepare), and the hooks installed on `tokio` (with its timer for the
    /// heartbeat).
    #[track_caller]
    fn prepare_on(self, tokio: &mut tokio::runtime::Builder) -> Result<Prepared, Error> {
        let heartbeat = self.config.enabled && self.config.heartbeat.is_some();
        let prepared = self.prepare()?;
        prepared.hooks().install(tokio);
        if heartbeat {
            // The heartbeat sleeps on tokio's timer.
            tokio.enable_time();
        }
        Ok(prepared)
    }

    /// Validates the settings, opens the sinks and makes the hooks, without touching a tokio
    /// builder: for code that has poll hooks of its own ([`PollHooks`] shows how to chain them).
    #[track_caller]
    pub fn prepare(self) -> Result<Prepared, Error> {
        let built_at = std::panic::Location::caller();
        self.validate()?;
        let config = self.config;
        if !config.enabled {
            return Ok(Prepared {
                hooks: PollHooks::new(None),
                rest: None,
                built_at,
            });
        }
        let recorder = export::Recorder::default();
        let flight = config.flight_size.map(export::Flight::new);
        let mut sinks = export::builtin(&config, &recorder, flight.as_ref())?;
        sinks.extend(self.sinks);
        let safe = self
            .unwinder_safe
            .unwrap_or_else(crate::signal::unwinder_is_signal_safe_here);
        if config.stacks != Stacks::Off {
            if safe {
                crate::signal::install_handler()?;
            } else {
                warn_unsafe_unwinder();
            }
        }
        let stacks_blocked = (!safe).then_some("unwinder_not_signal_safe");
        crate::poll::register_membarrier();
        let table = Arc::new(SlotTable::new(config.max_threads));
        let watched = Watched::new(Arc::clone(&table), config, stacks_blocked, run_id());
        Ok(Prepared {
            hooks: PollHooks::new(Some(table)),
            built_at,
            rest: Some(Pending {
                watched: Arc::new(watched),
                sinks,
                recorder,
                flight,
                #[cfg(feature = "prometheus")]
                prometheus_registry: self.prometheus_registry,
            }),
        })
    }
}

/// Installs, once per process, a panic hook that marks a watched poll that panics (see
/// [`crate::poll::slot::poll_panics`]), calls the hook that was there before (std's, which
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
            let poll = crate::poll::slot::poll_panics();
            previous(info);
            if let Some(seq) = poll {
                crate::poll::slot::poll_panic_hook_returned(seq);
            }
        }));
    });
}

/// tokio's builder as `#[tokio::main]` and `#[tokio::test]` make it for `flavor`, everything
/// enabled; a multi-thread one with `workers` workers (tokio's default when `None`).
pub(crate) fn tokio_builder(
    flavor: crate::__private::Flavor,
    workers: Option<usize>,
) -> tokio::runtime::Builder {
    use crate::__private::Flavor;
    let mut tokio = match flavor {
        Flavor::CurrentThread | Flavor::Local => tokio::runtime::Builder::new_current_thread(),
        Flavor::MultiThread => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            if let Some(n) = workers {
                b.worker_threads(n);
            }
            b
        }
    };
    tokio.enable_all();
    tokio
}

/// Says once per process why stack samples are off.
fn warn_unsafe_unwinder() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::warn!(
            target: "pinwatch",
            "stack samples are off: the unwinder here is not async-signal-safe (it needs glibc \
             >= 2.35 with libgcc >= 12, for _dl_find_object); pinned polls are still reported, \
             with reasons from /proc and no stack"
        );
    });
}

/// A random id for a detector run: the kernel's UUID generator, or the pid and the time.
fn run_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/uuid")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos();
            format!("{:x}-{nanos:x}", std::process::id())
        })
}

/// A configured detector whose hooks can be installed, not yet watching anything. See
/// [`Builder::prepare`].
pub struct Prepared {
    hooks: PollHooks,
    rest: Option<Pending>,
    /// Where the runtime was built (the console resources' location).
    #[cfg_attr(not(feature = "console"), allow(dead_code))]
    built_at: &'static std::panic::Location<'static>,
}

/// What [`Prepared::start`] starts.
struct Pending {
    watched: Arc<Watched>,
    sinks: Vec<Box<dyn Sink>>,
    recorder: export::Recorder,
    flight: Option<export::Flight>,
    #[cfg(feature = "prometheus")]
    prometheus_registry: Option<prometheus::Registry>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("enabled", &self.rest.is_some())
            .finish()
    }
}

impl Prepared {
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
                flight: None,
                dump_on_exit: None,
                control: None,
                stop: None,
                watchdog: None,
                export: None,
                #[cfg(feature = "prometheus")]
                prometheus: None,
                #[cfg(feature = "otlp")]
                otlp: None,
                #[cfg(feature = "console")]
                console: None,
            });
        };
        install_panic_hook();
        #[allow(unused_mut)]
        let Pending {
            watched,
            mut sinks,
            recorder,
            flight,
            ..
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
        #[cfg(feature = "otlp")]
        let otlp = if watched.config.otlp {
            let o = export::otlp::Otlp::start(
                watched.config.prometheus_max_locations,
                watched.config.queue_capacity,
                live(&watched, handle, None),
            )?;
            sinks.push(Box::new(o.sink()));
            Some(o)
        } else {
            None
        };
        #[cfg(feature = "prometheus")]
        let prometheus = start_prometheus(
            &watched,
            live(
                &watched,
                handle,
                #[cfg(feature = "otlp")]
                otlp.as_ref().map(|o| o.drop_counter()),
                #[cfg(not(feature = "otlp"))]
                None,
            ),
            pending.prometheus_registry.as_ref(),
            flight.as_ref().map(|(f, _)| f.clone()),
            &mut sinks,
        )?;
        #[cfg(feature = "console")]
        let console = if watched.config.console == Console::Off {
            None
        } else {
            if watched.config.console == Console::On {
                export::console::install_server()?;
            }
            let c = export::console::Console::start(
                handle.metrics().num_workers(),
                self.built_at,
                watched.config.queue_capacity,
                live(&watched, handle, None),
            )?;
            sinks.push(Box::new(c.sink()));
            Some(c)
        };
        // Last: when `status` shows a pin, every other sink (the recording) has it.
        let view = control::View::default();
        sinks.push(Box::new(view.sink()));
        let control = start_control(control::Context {
            watched: Arc::clone(&watched),
            handle: handle.clone(),
            recorder,
            view,
            flight: flight.clone(),
            built_at: self.built_at,
        })?;
        let (tx, rx) = mpsc::sync_channel::<watch::RawReport>(watched.config.queue_capacity);
        let (stop_tx, stop_rx) = mpsc::channel();
        let export_w = Arc::clone(&watched);
        let export = std::thread::Builder::new()
            .name("pinwatch-export".into())
            .spawn(move || {
                let mut current = watch::Current::new(&export_w.tunables);
                let mut analyzer = Analyzer::new(export_w.config.stacks);
                let mut fanout = Fanout::new(sinks);
                for raw in rx {
                    analyzer.stacks = current.refresh(&export_w.tunables).stacks;
                    if let Some(event) = analyzer.filter(raw, &export_w.stats) {
                        fanout.deliver(&event);
                        export_w.stats.delivered.fetch_add(1, Ordering::Relaxed);
                    }
                }
                fanout.flush();
            })
            .map_err(|source| Error::Thread {
                what: "export",
                source,
            })?;
        let workers = handle.metrics().num_workers();
        let wd_watched = Arc::clone(&watched);
        let handle = handle.clone();
        let watchdog = std::thread::Builder::new()
            .name("pinwatch-watchdog".into())
            .spawn(move || watch::run(wd_watched, handle, tx, stop_rx))
            .map_err(|source| Error::Thread {
                what: "watchdog",
                source,
            })?;
        announce(&watched.config, false, || {
            startup_line(
                &watched.config,
                workers,
                control.as_ref().map(|c| c.path()),
                #[cfg(feature = "prometheus")]
                prometheus
                    .as_ref()
                    .map(|(_, e)| e.as_ref().map(|e| e.local_addr())),
                #[cfg(not(feature = "prometheus"))]
                None,
            )
        });
        let dump_on_exit = watched.config.dump_on_exit.as_deref().map(export::with_pid);
        Ok(Detector {
            watched: Some(watched),
            flight,
            dump_on_exit,
            control,
            stop: Some(stop_tx),
            watchdog: Some(watchdog),
            export: Some(export),
            #[cfg(feature = "prometheus")]
            prometheus,
            #[cfg(feature = "otlp")]
            otlp,
            #[cfg(feature = "console")]
            console,
        })
    }
}

/// The control socket, when `PINWATCH_CONTROL` is not off. In the default directory a failure
/// is a warning (the service runs on without it); in a directory asked for, an error.
fn start_control(ctx: control::Context) -> Result<Option<control::Server>, Error> {
    let (dir, asked) = match &ctx.watched.config.control {
        crate::config::Control::Off => return Ok(None),
        crate::config::Control::On => (control::default_dir(), false),
        crate::config::Control::Dir(d) => (d.clone(), true),
    };
    let config = ctx.watched.config.clone();
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
/// workers, the control socket, the endpoints, the recording.
fn startup_line(
    config: &Config,
    workers: usize,
    control: Option<&std::path::Path>,
    // `None`: no Prometheus metrics; `Some(None)`: in the service's registry only.
    prometheus: Option<Option<std::net::SocketAddr>>,
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
    match prometheus {
        Some(Some(addr)) => s.push_str(&format!("; Prometheus http://{addr}/metrics")),
        Some(None) => s.push_str("; Prometheus metrics in the service's registry"),
        None => s.push_str("; Prometheus off"),
    }
    if config.otlp {
        let to = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
            .unwrap_or_else(|_| "the OTLP default endpoint".to_owned());
        s.push_str(&format!("; OTLP to {to}"));
    } else {
        s.push_str("; OTLP off");
    }
    match config.console {
        Console::Off => s.push_str("; console off"),
        Console::On => {
            let bind =
                std::env::var("TOKIO_CONSOLE_BIND").unwrap_or_else(|_| "127.0.0.1:6669".into());
            s.push_str(&format!("; tokio-console on {bind}"));
        }
        Console::Resources => s.push_str("; console resources in the service's subscriber"),
    }
    match &config.record {
        Some(path) => s.push_str(&format!("; recording to {}", path.display())),
        None => s.push_str("; no recording"),
    }
    s
}

/// What metrics exporters read live: the watchdog's pins, the runtime's workers, the drops.
#[cfg_attr(
    not(any(feature = "prometheus", feature = "otlp", feature = "console")),
    allow(dead_code)
)]
fn live(
    watched: &Arc<Watched>,
    handle: &tokio::runtime::Handle,
    otlp_dropped: Option<Arc<std::sync::atomic::AtomicU64>>,
) -> export::LiveFn {
    let w = Arc::clone(watched);
    let handle = handle.clone();
    Arc::new(move || {
        let now = w.pinned_now_counted();
        export::Live {
            threshold: w.tunables.get().threshold,
            stall: w.stall(),
            pinned: now.all,
            workers_pinned: now.workers,
            oldest_worker_pin: now.oldest_worker_pin,
            bodies_blocked: now.bodies,
            workers: handle.metrics().num_workers(),
            queue_dropped: w.stats.dropped.load(Ordering::Relaxed),
            otlp_dropped: otlp_dropped.as_ref().map(|d| d.load(Ordering::Relaxed)),
        }
    })
}

/// The Prometheus collector (when asked for), its sink, and its endpoint.
#[cfg(feature = "prometheus")]
type PrometheusParts = Option<(
    export::prometheus::PinwatchCollector,
    Option<export::prometheus::Endpoint>,
)>;

#[cfg(feature = "prometheus")]
fn start_prometheus(
    watched: &Arc<Watched>,
    live: export::LiveFn,
    registry: Option<&prometheus::Registry>,
    flight: Option<export::Flight>,
    sinks: &mut Vec<Box<dyn Sink>>,
) -> Result<PrometheusParts, Error> {
    let addr = watched.config.prometheus_addr;
    if addr.is_none() && registry.is_none() {
        return Ok(None);
    }
    let collector =
        export::prometheus::PinwatchCollector::new(watched.config.prometheus_max_locations, live)
            .map_err(|e| Error::InvalidSetting {
            setting: "prometheus",
            reason: e.to_string(),
        })?;
    if let Some(registry) = registry {
        registry
            .register(Box::new(collector.clone()))
            .map_err(|e| Error::InvalidSetting {
                setting: "prometheus_registry",
                reason: format!("cannot register pinwatch's metrics: {e}"),
            })?;
    }
    sinks.push(Box::new(collector.sink()));
    let endpoint = match addr {
        Some(addr) => Some(export::prometheus::Endpoint::serve(
            addr,
            collector.clone(),
            flight,
        )?),
        None => None,
    };
    Ok(Some((collector, endpoint)))
}

/// A running detector: the watchdog and export threads of one runtime. A guard: dropping it
/// stops them after a last scan, and flushes the sinks. Drop the runtime before it, so that a
/// poll still running at shutdown is completed.
pub struct Detector {
    watched: Option<Arc<Watched>>,
    /// The flight recording and whose it is, when on.
    flight: Option<(export::Flight, export::Identity)>,
    /// `PINWATCH_DUMP_ON_EXIT`, `%p` replaced; taken when it is written.
    dump_on_exit: Option<PathBuf>,
    control: Option<control::Server>,
    stop: Option<mpsc::Sender<()>>,
    watchdog: Option<JoinHandle<()>>,
    export: Option<JoinHandle<()>>,
    #[cfg(feature = "prometheus")]
    prometheus: PrometheusParts,
    #[cfg(feature = "otlp")]
    otlp: Option<export::otlp::Otlp>,
    #[cfg(feature = "console")]
    console: Option<export::console::Console>,
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
        self.watched
            .as_ref()
            .map(|w| snapshot(&w.stats, &w.table))
            .unwrap_or_default()
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
    /// eprintln!("{}", pinwatch::report::describe_dump(&dumped)); // flight recording of pid …
    /// # Ok(()) }
    /// ```
    pub fn dump(&self, path: impl AsRef<std::path::Path>) -> Result<crate::event::DumpInfo, Error> {
        self.dump_(path.as_ref(), false)
    }

    /// [`dump`](Self::dump), replacing a file at `path` (by a rename: never truncated, never
    /// left half written).
    pub fn dump_replacing(
        &self,
        path: impl AsRef<std::path::Path>,
    ) -> Result<crate::event::DumpInfo, Error> {
        self.dump_(path.as_ref(), true)
    }

    fn dump_(
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
        export::write_whole_file(path, replace, |f| dump.write_to(f))
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

    /// pinwatch's Prometheus metrics, when the endpoint or a registry was asked for.
    #[cfg(feature = "prometheus")]
    pub fn prometheus(&self) -> Option<&export::prometheus::PinwatchCollector> {
        self.prometheus.as_ref().map(|(c, _)| c)
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
        #[cfg(feature = "prometheus")]
        if let Some((_, endpoint)) = self.prometheus.as_mut() {
            drop(endpoint.take());
        }
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
        // After the export thread (its sinks are flushed): the OTLP thread sends what is
        // queued, then stops.
        #[cfg(feature = "otlp")]
        drop(self.otlp.take());
        #[cfg(feature = "console")]
        drop(self.console.take());
    }
}

impl Detector {
    /// `PINWATCH_DUMP_ON_EXIT`: the dump, or why it failed, said like the start-up line.
    fn dump_at_exit(&self, path: &std::path::Path) {
        let Some(config) = self.config() else { return };
        match self.dump_(path, true) {
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

#[cfg(test)]
mod tests {
    /// Building with `var=value` in a build without `feature` fails naming both.
    #[cfg_attr(
        all(feature = "console", feature = "otlp", feature = "prometheus"),
        allow(dead_code)
    )]
    fn missing_feature_is_named(var: &str, value: &str, feature: &str) {
        let mut b = super::Builder::new();
        b.config
            .apply_env(|n| (n == var).then(|| value.into()))
            .unwrap();
        let err = b.prepare().unwrap_err().to_string();
        assert!(
            err.contains(var) && err.contains(&format!("`{feature}` cargo feature")),
            "{err}"
        );
    }

    #[cfg(not(feature = "console"))]
    #[test]
    fn the_console_variable_without_the_feature_names_both() {
        missing_feature_is_named("PINWATCH_CONSOLE", "on", "console");
    }

    #[cfg(not(feature = "otlp"))]
    #[test]
    fn the_otlp_variable_without_the_feature_names_both() {
        missing_feature_is_named("PINWATCH_OTLP", "on", "otlp");
    }

    #[cfg(not(feature = "prometheus"))]
    #[test]
    fn the_prometheus_variable_without_the_feature_names_both() {
        missing_feature_is_named("PINWATCH_PROMETHEUS_ADDR", "127.0.0.1:9464", "prometheus");
    }
}
