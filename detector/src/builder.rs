//! [`Builder`]: the settings of a detector, and how it is built into a tokio runtime.
//! [`Builder::prepare`] validates the settings ([`Config::validate`]), opens the sinks,
//! installs the signal handler and makes the slot table and the [`PollHooks`];
//! [`Prepared::start`] (in `runtime`) starts watching.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{Config, Stacks};
use crate::export::{self, Sink};
use crate::poll::slot::SlotTable;
use crate::poll::PollHooks;
use crate::runtime::{Detector, Pending, Prepared};
use crate::watch::Shared;
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
        }
    }

    /// The defaults overlaid with the environment ([`crate::config::ENV_VARS`]). The only call
    /// that reads the environment.
    pub fn from_env() -> Result<Builder, Error> {
        Builder::new().with_env()
    }

    /// Overlays the environment on the settings made so far: a variable that is set wins.
    pub fn with_env(mut self) -> Result<Builder, Error> {
        self.config.apply_process_env()?;
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
    /// [`DEFAULT_QUEUE_CAPACITY`](crate::config::DEFAULT_QUEUE_CAPACITY); 1 to
    /// [`MAX_QUEUE_CAPACITY`](crate::config::MAX_QUEUE_CAPACITY)).
    pub fn queue_capacity(mut self, n: usize) -> Self {
        self.config.queue_capacity = n;
        self
    }

    /// The watchdog thread's nice value (`PINWATCH_WATCHDOG_NICE`, from `-20` to `19`; `None`,
    /// the default: the process's own), which the `pinwatch-waker` thread it starts (the
    /// heartbeat's timer, the rescue's wake-ups) takes too. On a machine whose CPUs are all busy, a watchdog kept
    /// from running through the whole of a blocked poll cannot tell the block from a wait for
    /// a CPU and misses it; a nice below the service's threads' lets it run when it wakes. A
    /// value below the process's own needs `CAP_SYS_NICE` or an `RLIMIT_NICE` of at least 20
    /// minus it: without, building the runtime fails with
    /// [`Error::WatchdogNice`].
    pub fn watchdog_nice(mut self, nice: Option<i8>) -> Self {
        self.config.watchdog_nice = nice;
        self
    }

    /// How many threads can be watched at once (`PINWATCH_MAX_THREADS`, default
    /// [`DEFAULT_MAX_THREADS`](crate::config::DEFAULT_MAX_THREADS); 1 to
    /// [`MAX_THREADS`](crate::config::MAX_THREADS)): the workers, `block_on`'s thread and any
    /// thread of yours that polls. A thread past it runs unwatched, its pins unreported: counted
    /// ([`Stats::unwatched_threads`](crate::Stats::unwatched_threads)), and said at start-up in
    /// a WARN line when the setting is below the workers and `block_on`'s thread.
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

    /// Adds a sink of yours. It runs on a thread of its own (`pinwatch-sink-sink`), behind a
    /// queue of [`queue_capacity`](Self::queue_capacity) events: what the queue cannot hold
    /// while the sink is slow is dropped and counted (`pinwatch_events_dropped_total{sink="sink"}`),
    /// and at shutdown the sinks get up to 5 s in all to take what is queued and flush. One that
    /// has not finished by then is left behind: what is still queued for it is dropped and
    /// counted, and it is not flushed if its flush has not begun (docs/builder.md).
    pub fn sink(mut self, sink: impl Sink) -> Self {
        self.sinks.push(Box::new(sink));
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
    /// [`DEFAULT_HEARTBEAT`](crate::config::DEFAULT_HEARTBEAT); `None`: off), where pinwatch
    /// cannot see who drives the runtime's timers and I/O (a multi-thread runtime without I/O,
    /// or given the poll hooks alone; see [`rescue`](Self::rescue)): while a pin runs, a timer
    /// that fires this often, whose lateness tells a pin that stalls the whole runtime's timers
    /// and I/O (`runtime_stalled`) from one that holds only its worker. On a multi-thread
    /// runtime only: a current-thread runtime gets neither the timer's task nor pinwatch's
    /// `pinwatch-waker` thread (its one thread drives its timers and I/O between polls, and
    /// every pin there stalls them). A task of pinwatch's waits on the timer for the detector's
    /// life; pinwatch sets it when a poll is flagged as pinned (which wakes no parked worker: it
    /// observes, it does not end the stall) and the task sets it a year away once no pin runs:
    /// an idle runtime is never woken by it. On a multi-thread runtime it needs tokio's time
    /// driver: [`build`](Self::build) turns it on (`enable_time`); with
    /// [`prepare`](Self::prepare), build your runtime with `enable_time` or `enable_all`, or
    /// turn the heartbeat off (without a time driver tokio panics as the timer is made, at
    /// start on pinwatch's `pinwatch-waker` thread, and there is no heartbeat).
    pub fn heartbeat(mut self, every: Option<Duration>) -> Self {
        self.config.heartbeat = every;
        self
    }

    /// When a pin leaves a multi-thread runtime's I/O and timer drivers undriven — no worker
    /// waits on them and the free ones sleep on their condvars, so no timer fires and no socket
    /// is read anywhere — wake a parked worker so that it takes them over (`PINWATCH_RESCUE`,
    /// default on). Every event of such a pin says so ([`PinnedEvent::drivers`](crate::PinnedEvent::drivers)). Off, the stall is only
    /// reported, and lasts as long as the pin. See docs/blast-radius.md.
    pub fn rescue(mut self, on: bool) -> Self {
        self.config.rescue = on;
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
    /// checks. A detector started while another running one dumps to the same file (two
    /// runtimes built with [`from_env`](Self::from_env)) dumps to it numbered:
    /// `pins-42.2.jsonl` (the start-up line says where, and [`Detector::exit_dump`]).
    ///
    /// Also at a SIGTERM or SIGINT, for a service that does not shut down gracefully (its
    /// runtime is never dropped): when the detector starts, pinwatch installs a handler for each
    /// of the two whose action is the default one (never over a handler of the service's, nor
    /// over `SIG_IGN`; the start-up line says which it caught). At the signal a thread of
    /// pinwatch's writes the dump of every running detector (waiting at most 10 s for it; a
    /// second signal meanwhile ends the process at once), then, if pinwatch's handler is still
    /// the installed one, puts the default action back and raises the signal: the process dies
    /// of it, as it would have. A handler installed after pinwatch's (tokio's `signal`, which
    /// calls the one before it) handles the signal instead: the service shuts down as it
    /// means to, and the dump is written again, replaced whole, when its detector stops. When
    /// the last such detector stops, the default action is put back where pinwatch's handler
    /// is still installed. Not on SIGKILL, an abort or the OOM killer.
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

    /// Tests only: the watchdog thread sleeps `d` before it sets itself up, as one kept from
    /// running by a loaded machine would.
    #[doc(hidden)]
    pub fn __late_watchdog_start(mut self, d: Duration) -> Self {
        self.config.late_start = Some(d);
        self
    }

    /// Tests only: each look of the watchdog's at a poll in progress computes `d` after its
    /// check for a stop, as one preempted there, or slowed by its reads of `/proc`, would.
    #[doc(hidden)]
    pub fn __slow_looks(mut self, d: Duration) -> Self {
        self.config.slow_looks = Some(d);
        self
    }

    /// Tests only: the watchdog thread's timer slack is `d` (`PR_SET_TIMERSLACK`): its timed
    /// waits end up to `d` late, while it neither runs nor waits for a CPU.
    #[doc(hidden)]
    pub fn __watchdog_timer_slack(mut self, d: Duration) -> Self {
        self.config.watchdog_timer_slack = Some(d);
        self
    }

    /// Tests only: no start stamps; the watchdog looks every scan interval while a worker runs.
    #[doc(hidden)]
    pub fn __no_stamps(mut self) -> Self {
        self.config.stamps = false;
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

    /// Builds `tokio` with pinwatch watching it: installs the poll hooks (replacing any poll
    /// hooks set on it; see [`prepare`](Self::prepare) to keep yours), builds the runtime, and
    /// starts the detector. With the detector off, builds `tokio` as it is.
    ///
    /// On a multi-thread runtime the start waits for its workers, which have nothing to run
    /// yet, to park once, and sees which of them waits on the I/O driver (1.4 ms at most for two
    /// workers on a busy machine here; 15–20 ms for 1,024 workers without I/O driver; it gives
    /// up after 250 ms): so that a first task that pins every worker is told a stall of the
    /// whole runtime ([`PinnedEvent::runtime_stalled`]).
    ///
    /// [`PinnedEvent::runtime_stalled`]: crate::PinnedEvent::runtime_stalled
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
        self.config.validate()?;
        let config = self.config;
        if !config.enabled {
            return Ok(Prepared::off(built_at));
        }
        let recorder = export::Recorder::default();
        let flight = config.flight_size.map(export::Flight::new);
        let mut sinks = export::builtin(&config, &recorder, flight.as_ref())?;
        // A sink of the user's may block: on a thread of its own.
        sinks
            .own_thread
            .extend(self.sinks.into_iter().map(|s| ("sink", s)));
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
        let watched = Shared::new(Arc::clone(&table), config, stacks_blocked, run_id());
        Ok(Prepared::new(
            PollHooks::new(Some(table)),
            built_at,
            Pending {
                watched: Arc::new(watched),
                sinks,
                recorder,
                flight,
            },
        ))
    }
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
