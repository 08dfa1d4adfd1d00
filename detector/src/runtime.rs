//! The runtime wrapper: [`Builder`] installs the hooks on a `tokio::runtime::Builder`, starts the
//! watchdog and the sink thread, and returns a [`Runtime`] that stops them when dropped.

use std::ops::Deref;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::config::{Config, Stacks};
use crate::sink::{self, Sink};
use crate::slot::SlotTable;
use crate::{hooks, watchdog, Error};

/// State shared by the hooks, the watchdog and the [`Detector`] handle.
pub(crate) struct Shared {
    pub slots: SlotTable,
    pub config: Config,
    pub stats: StatsCounters,
}

/// Counters behind [`Stats`]. Relaxed: they are totals, read for reporting only.
#[derive(Default)]
pub(crate) struct StatsCounters {
    pub pinned_polls: AtomicU64,
    pub events: AtomicU64,
    pub dropped: AtomicU64,
    pub block_in_place: AtomicU64,
    pub unwatched_threads: AtomicU64,
    pub samples: AtomicU64,
    pub samples_missed: AtomicU64,
    pub sample_handler_ns: AtomicU64,
    pub sample_round_trip_ns: AtomicU64,
}

/// What the detector has done so far. See [`Detector::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Polls found running past the threshold.
    pub pinned_polls: u64,
    /// Events handed to the sinks (`in_progress` reports and `completed` ones).
    pub events: u64,
    /// Events dropped because the queue to the sinks was full.
    pub dropped: u64,
    /// Long polls not reported because their thread had handed its worker over in
    /// `block_in_place`.
    pub block_in_place: u64,
    /// Threads that polled tasks but found no free slot (raise [`Builder::max_threads`]).
    pub unwatched_threads: u64,
    /// Stack samples taken.
    pub samples: u64,
    /// Stack samples asked for that did not arrive in time.
    pub samples_missed: u64,
    /// Total time workers spent in the sampling signal handler (the stall samples cost them).
    pub sample_handler_time: Duration,
    /// Total time from sending a sampling signal to reading the sample, on the watchdog.
    pub sample_round_trip_time: Duration,
}

impl StatsCounters {
    fn snapshot(&self) -> Stats {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            pinned_polls: r(&self.pinned_polls),
            events: r(&self.events),
            dropped: r(&self.dropped),
            block_in_place: r(&self.block_in_place),
            unwatched_threads: r(&self.unwatched_threads),
            samples: r(&self.samples),
            samples_missed: r(&self.samples_missed),
            sample_handler_time: Duration::from_nanos(r(&self.sample_handler_ns)),
            sample_round_trip_time: Duration::from_nanos(r(&self.sample_round_trip_ns)),
        }
    }
}

/// Configures pinwatch and builds an instrumented tokio runtime.
///
/// ```no_run
/// # fn main() -> Result<(), pinwatch::Error> {
/// let rt = pinwatch::Builder::from_env()?
///     .build(tokio::runtime::Builder::new_multi_thread().enable_all())?;
/// rt.block_on(async { /* the service */ });
/// # Ok(()) }
/// ```
pub struct Builder {
    config: Config,
    sinks: Vec<Box<dyn Sink>>,
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

    /// Turns the detector on or off (`PINWATCH`). Off builds a plain runtime.
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

    /// Adds a sink that receives every event, on the sink thread.
    pub fn sink(mut self, sink: impl Sink) -> Self {
        self.sinks.push(Box::new(sink));
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
        Ok(())
    }

    /// Installs the hooks on `tokio` (replacing any poll hooks set on it), builds the runtime and
    /// starts the watchdog. With the detector off, builds `tokio` as it is.
    pub fn build(self, tokio: &mut tokio::runtime::Builder) -> Result<Runtime, Error> {
        self.validate()?;
        if !self.config.enabled {
            return Ok(Runtime {
                rt: Some(tokio.build().map_err(Error::Runtime)?),
                detector: None,
            });
        }
        let mut sinks = sink::builtin(&self.config)?;
        sinks.extend(self.sinks);
        if self.config.stacks != Stacks::Off {
            crate::stack::install_handler()?;
        }
        let shared = Arc::new(Shared {
            slots: SlotTable::new(self.config.max_threads),
            config: self.config,
            stats: StatsCounters::default(),
        });
        hooks::install(tokio, &shared);
        let rt = tokio.build().map_err(Error::Runtime)?;
        let detector = Detector::start(shared, rt.handle().clone(), sinks)?;
        Ok(Runtime {
            rt: Some(rt),
            detector: Some(detector),
        })
    }
}

/// A running detector: the watchdog and sink threads of one runtime. Dropping it stops them
/// after a last scan, and flushes the sinks.
pub struct Detector {
    shared: Arc<Shared>,
    stop: Option<mpsc::Sender<()>>,
    watchdog: Option<JoinHandle<()>>,
    sinks: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Detector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detector")
            .field("stats", &self.stats())
            .finish()
    }
}

impl Detector {
    fn start(
        shared: Arc<Shared>,
        handle: tokio::runtime::Handle,
        sinks: Vec<Box<dyn Sink>>,
    ) -> Result<Detector, Error> {
        let (event_tx, event_rx) = mpsc::sync_channel(shared.config.queue_capacity);
        let stacks = shared.config.stacks;
        let (stop_tx, stop_rx) = mpsc::channel();
        let sinks = std::thread::Builder::new()
            .name("pinwatch-sinks".into())
            .spawn(move || sink::run(event_rx, sinks, stacks))
            .map_err(|source| Error::Thread {
                what: "sink",
                source,
            })?;
        let wd_shared = Arc::clone(&shared);
        let watchdog = std::thread::Builder::new()
            .name("pinwatch-watchdog".into())
            .spawn(move || watchdog::run(wd_shared, handle, event_tx, stop_rx))
            .map_err(|source| Error::Thread {
                what: "watchdog",
                source,
            })?;
        Ok(Detector {
            shared,
            stop: Some(stop_tx),
            watchdog: Some(watchdog),
            sinks: Some(sinks),
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        self.shared.stats.snapshot()
    }

    /// The settings in force.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// Stops the watchdog after one last scan, lets the sinks write what is queued, and waits for
    /// both threads. Called by `Drop`.
    pub fn shutdown(&mut self) {
        drop(self.stop.take());
        if let Some(w) = self.watchdog.take() {
            let _ = w.join();
        }
        if let Some(s) = self.sinks.take() {
            let _ = s.join();
        }
    }
}

impl Drop for Detector {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A tokio runtime with pinwatch watching it. Derefs to [`tokio::runtime::Runtime`]; dropping it
/// drops the runtime first (the watchdog keeps reporting while tokio waits for stuck workers),
/// then stops the detector.
pub struct Runtime {
    rt: Option<tokio::runtime::Runtime>,
    detector: Option<Detector>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("detector", &self.detector)
            .finish()
    }
}

impl Runtime {
    /// The detector, `None` when pinwatch is off.
    pub fn detector(&self) -> Option<&Detector> {
        self.detector.as_ref()
    }

    /// [`Stats`] so far (all zero when pinwatch is off).
    pub fn stats(&self) -> Stats {
        self.detector
            .as_ref()
            .map(Detector::stats)
            .unwrap_or_default()
    }

    /// Shuts the runtime down, waiting at most `timeout` for its blocking threads (see
    /// [`tokio::runtime::Runtime::shutdown_timeout`]); then stops the detector and returns its
    /// final [`Stats`].
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Stats {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(timeout);
        }
        self.finish()
    }

    /// Drops the runtime, then stops the detector (flushing every sink), and returns the final
    /// [`Stats`].
    pub fn shutdown(mut self) -> Stats {
        drop(self.rt.take());
        self.finish()
    }

    fn finish(&mut self) -> Stats {
        match self.detector.take() {
            Some(mut d) => {
                d.shutdown();
                d.stats()
            }
            None => Stats::default(),
        }
    }
}

impl Deref for Runtime {
    type Target = tokio::runtime::Runtime;

    fn deref(&self) -> &tokio::runtime::Runtime {
        // `rt` is `None` only inside `shutdown*`, which take `self`.
        self.rt
            .as_ref()
            .expect("pinwatch::Runtime used after shutdown (this is a bug)")
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        drop(self.rt.take());
        self.finish();
    }
}
