//! Settings, their defaults, and the one explicit call that reads them from the environment.
//!
//! Every setting has a builder setter on [`Builder`](crate::Builder) and a default that is a
//! public constant here. [`Config::from_env`] (and [`Builder::from_env`](crate::Builder::from_env))
//! is the only place the environment is read; a value that does not parse is an
//! [`Error::InvalidEnv`] naming the variable and the value — nothing falls back silently.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::Error;

/// Default pinning threshold: a poll running at least this long is reported. Same as JFR's
/// `jdk.VirtualThreadPinned` default.
pub const DEFAULT_THRESHOLD: Duration = Duration::from_millis(20);

/// Default period at which a poll that is still stuck is reported again.
pub const DEFAULT_REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// Default period of the watchdog's scan of the worker slots. A poll's start is known to within
/// one scan period (see docs/how-it-works.md, "Precision"); the watchdog never scans slower than
/// a quarter of the threshold.
pub const DEFAULT_SCAN_INTERVAL: Duration = Duration::from_millis(2);

/// Default capacity of the queue between the watchdog and the sinks. When it is full, events
/// are dropped and counted ([`Stats::dropped`](crate::Stats::dropped)); the watchdog never waits.
pub const DEFAULT_QUEUE_CAPACITY: usize = 1024;

/// The most events a queue may hold: each queue (the export thread's, and each exporter's or
/// sink's on a thread of its own) takes its room as it fills, a pointer (8 bytes) a place
/// (512 KiB at this bound), and keeps it. What it holds lives while it is queued: about 1 KiB
/// an event with a short stack (~70 MB for a queue full at this bound), more with full stacks.
/// The queues after the export thread share their events: one copy however many of them hold
/// it, freed when the last thread is done with it.
pub const MAX_QUEUE_CAPACITY: usize = 1 << 16;

/// The most threads that can be watched at once: a slot each (about 3 KiB), taken when the
/// detector starts, and scanned every few milliseconds.
pub const MAX_THREADS: usize = 4096;

/// Default number of threads that can be watched at once (workers, plus threads that left a
/// worker in `block_in_place` and still finish their poll).
pub const DEFAULT_MAX_THREADS: usize = 256;

/// Default interval between stack samples of a poll that stays pinned.
pub const DEFAULT_SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// Default bound on distinct `location` label values of
/// `pinwatch_pins_by_location_total`; further locations are counted as `location="other"`.
pub const DEFAULT_PROMETHEUS_MAX_LOCATIONS: usize = 50;

/// Default period of pinwatch's heartbeat on the watched runtime (`PINWATCH_HEARTBEAT`).
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_millis(50);

/// Lowest threshold that the environment (`PINWATCH_THRESHOLD`) and `pinwatch ctl set` accept.
/// Below it ordinary polls count as pins, and tokio's own timer ticks in whole milliseconds.
pub const MIN_THRESHOLD: Duration = Duration::from_millis(1);

/// Lowest report interval that the environment and `pinwatch ctl set` accept: each stuck poll
/// is re-reported at most 10 times a second.
pub const MIN_REPORT_INTERVAL: Duration = Duration::from_millis(100);

/// Lowest sample interval that the environment and `pinwatch ctl set` accept: a pinned worker
/// gets at most 100 stack-sampling signals a second.
pub const MIN_SAMPLE_INTERVAL: Duration = Duration::from_millis(10);

/// Lowest scan interval that the environment and `pinwatch ctl set` accept: the watchdog
/// wakes at most 1,000 times a second for it (a threshold under 4 ms still shortens the scan
/// period to a quarter of itself, see [`Settings::effective_scan_interval`]).
pub const MIN_SCAN_INTERVAL: Duration = Duration::from_millis(1);

/// Lowest heartbeat period that the environment accepts (tokio's timer ticks in whole
/// milliseconds).
pub const MIN_HEARTBEAT: Duration = Duration::from_millis(1);

/// Default size at which the recording is rotated (`PINWATCH_RECORD_MAX_SIZE`): 100 MB.
pub const DEFAULT_RECORD_MAX_SIZE: u64 = 100_000_000;

/// Default number of rotated recording files kept beside the current one
/// (`PINWATCH_RECORD_KEEP`): at most `(1 + 5) × max size` on disk.
pub const DEFAULT_RECORD_KEEP: usize = 5;

/// Default bound of the flight recording (`PINWATCH_FLIGHT_SIZE`): 4 MiB of events, as their
/// JSON lines. Measured on `pin_service`: an event with the default short stacks is about
/// 0.9 KB and a pin shorter than the report interval has two (`in_progress`, `completed`), so
/// this holds the last ~2,000 such pins; with `PINWATCH_STACKS=full` an event was about 12 KB
/// (a debug build's deep stacks), still the last ~170 pins (16.4 KB, 65 frames, in a release
/// build of a small service with line tables: ~120). Enough for the incident just
/// past, little enough to keep in every process.
pub const DEFAULT_FLIGHT_SIZE: u64 = 4 * 1024 * 1024;

/// The largest flight recording `PINWATCH_FLIGHT_SIZE` accepts: 1 GiB (a dump is held in
/// memory twice while it is written, and `pinwatch ctl` reads at most this much).
pub const MAX_FLIGHT_SIZE: u64 = 1024 * 1024 * 1024;

/// How much stack context an event carries (`PINWATCH_STACKS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Stacks {
    /// No stack sampling: no signal is ever sent to a worker.
    Off,
    /// The top application frame and the frames that hold locks.
    #[default]
    Short,
    /// Every frame.
    Full,
}

impl Stacks {
    /// The spelling used by `PINWATCH_STACKS`.
    pub fn as_str(self) -> &'static str {
        match self {
            Stacks::Off => "off",
            Stacks::Short => "short",
            Stacks::Full => "full",
        }
    }

    /// Reads the spelling of `PINWATCH_STACKS`; the error says what is allowed.
    pub fn parse(v: &str) -> Result<Stacks, Error> {
        Stacks::spelled(v).map_err(|reason| Error::InvalidValue {
            key: "stacks".to_owned(),
            value: v.to_owned(),
            reason,
        })
    }

    fn spelled(v: &str) -> Result<Stacks, String> {
        match v.trim().to_ascii_lowercase().as_str() {
            "off" => Ok(Stacks::Off),
            "short" => Ok(Stacks::Short),
            "full" => Ok(Stacks::Full),
            _ => Err("must be one of `off`, `short`, `full`".to_owned()),
        }
    }
}

/// Where the control socket goes (`PINWATCH_CONTROL`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Control {
    /// No control socket.
    Off,
    /// `/tmp/pinwatch-<uid>/<pid>.sock`.
    #[default]
    On,
    /// `<dir>/<pid>.sock`; `dir` is made (mode 0700) if missing.
    Dir(PathBuf),
}

/// What `PINWATCH_CONSOLE` turns on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Console {
    /// No console resources.
    #[default]
    Off,
    /// Install the process's `tracing` subscriber with tokio-console's layer (its server on a
    /// thread of its own, `TOKIO_CONSOLE_BIND`, default `127.0.0.1:6669`) and a `fmt` layer
    /// filtered by `RUST_LOG` (default `warn`), and keep one console resource per worker.
    On,
    /// Only the per-worker resources: the service installs its own subscriber, with
    /// `console_subscriber::spawn()` as one of its layers.
    Resources,
}

impl Console {
    /// The spelling used by `PINWATCH_CONSOLE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Console::Off => "off",
            Console::On => "on",
            Console::Resources => "resources",
        }
    }
}

/// One environment variable pinwatch reads: its name, default and meaning. [`ENV_VARS`] lists
/// them all; docs/configuration.md's table is checked against it by a test.
#[derive(Clone, Copy, Debug)]
pub struct EnvVar {
    /// The variable's name.
    pub name: &'static str,
    /// Its default, as it would be written in the variable.
    pub default: &'static str,
    /// What it does.
    pub doc: &'static str,
}

/// Every environment variable [`Config::from_env`] reads.
pub const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "PINWATCH",
        default: "on",
        doc: "`off` builds a plain tokio runtime: no hooks, no threads, no cost",
    },
    EnvVar {
        name: "PINWATCH_THRESHOLD",
        default: "20ms",
        doc:
            "a poll running at least this long is pinned (humantime: `20ms`, `1s`; at least `1ms`)",
    },
    EnvVar {
        name: "PINWATCH_REPORT_INTERVAL",
        default: "1s",
        doc: "a poll still pinned is reported again this often (at least `100ms`)",
    },
    EnvVar {
        name: "PINWATCH_RECORD",
        default: "",
        doc: "path of a JSON-lines recording, appended to (not `-`: `./-` names a file called \
              `-`); unset: no recording",
    },
    EnvVar {
        name: "PINWATCH_RECORD_MAX_SIZE",
        default: "100MB",
        doc: "the recording rotates when a line would take it past this size (`64KB`, `1GiB`; \
              at least `64KB`); `off`: never",
    },
    EnvVar {
        name: "PINWATCH_RECORD_MAX_AGE",
        default: "off",
        doc: "the recording also rotates when its current file is this old (`1h`; at least \
              `1m`); `off`: never",
    },
    EnvVar {
        name: "PINWATCH_RECORD_KEEP",
        default: "5",
        doc: "rotated files kept (`rec.1.jsonl` newest … `rec.5.jsonl`); older ones are deleted",
    },
    EnvVar {
        name: "PINWATCH_FLIGHT_SIZE",
        default: "4MiB",
        doc: "the flight recording: the last events (every report of each pin) kept in memory, \
              at most this many bytes of their JSON lines, for `pinwatch ctl <pid> dump`; the \
              oldest are dropped (and counted) to make room. An event is about 0.9 KB with \
              short stacks (4 MiB: the last ~2,000 pins), 12–17 KB with full ones (~120–170 \
              pins); from `4KiB` to `1GiB`; `off`: none",
    },
    EnvVar {
        name: "PINWATCH_DUMP_ON_EXIT",
        default: "",
        doc: "write the flight recording to this file (replaced whole, atomically; `%p` is the \
              pid) when the detector stops (the runtime and detector dropped, \
              `Detector::shutdown`) and at a SIGTERM or SIGINT — which then ends the process as \
              it would have, unless a handler installed after pinwatch's (tokio's `signal`) \
              shuts the service down itself; a signal that already had a handler when pinwatch \
              started, or is ignored, is left alone (dump at shutdown only); never on SIGKILL, \
              an abort or the OOM killer; its directory must exist and be writable, checked at \
              start-up (not `-`: `./-` names a file called `-`); unset: no dump",
    },
    EnvVar {
        name: "PINWATCH_CONTROL",
        default: "on",
        doc: "the control socket for `pinwatch ctl` at `/tmp/pinwatch-<uid>/<pid>.sock` (owner \
              only); an absolute directory puts it there instead; `off`: none",
    },
    EnvVar {
        name: "PINWATCH_HEARTBEAT",
        default: "50ms",
        doc: "where pinwatch cannot see who drives the runtime's timers and I/O (a \
              multi-thread runtime without I/O, or given the poll hooks alone): while a pin \
              runs, a timer of \
              pinwatch's fires this often on the runtime (set from pinwatch's own thread when \
              a poll is flagged, which wakes no parked worker, and set a year away once none \
              runs); when it is late past the threshold (and 100 ms), the pin stalled the \
              whole runtime (`runtime_stalled`); at least `1ms`; `off`: no heartbeat",
    },
    EnvVar {
        name: "PINWATCH_RESCUE",
        default: "on",
        doc: "when a pin leaves a multi-thread runtime's I/O and timer drivers undriven (no \
              worker waits on them, the others asleep; where that cannot be seen, the \
              heartbeat is late past its bound), wake a parked worker so that it takes \
              them over — every time, reported in the pin's events (`drivers`); `off`: only \
              report the stall, which then lasts as long as the pin",
    },
    EnvVar {
        name: "PINWATCH_STACKS",
        default: "short",
        doc: "`off` (no signals sent), `short` (top application frame and lock frames), `full`",
    },
    EnvVar {
        name: "PINWATCH_SAMPLE_INTERVAL",
        default: "100ms",
        doc: "a pinned poll's stack is sampled at the threshold, then this often (at least `10ms`)",
    },
    EnvVar {
        name: "PINWATCH_SCAN_INTERVAL",
        default: "2ms",
        doc: "the watchdog's scan period while any worker is busy (set to at least `1ms`; never \
              more than a quarter of the threshold, so shorter under a threshold below `4ms`); \
              while every worker is parked it sleeps until one unparks",
    },
    EnvVar {
        name: "PINWATCH_WATCHDOG_NICE",
        default: "off",
        doc: "the nice value of the watchdog thread (and of the `pinwatch-waker` thread it \
              starts), from `-20` (first to run) to `19`: on a machine whose CPUs are all busy, \
              a watchdog kept from running through a whole blocked poll misses it, and a nice \
              below the service's lets it run when it wakes (a value below the process's own \
              needs `CAP_SYS_NICE` or an `RLIMIT_NICE` of at least 20 minus it; without, the \
              runtime is not built, and the error says so); `off`: the process's own",
    },
    EnvVar {
        name: "PINWATCH_QUEUE_CAPACITY",
        default: "1024",
        doc: "events queued for the sinks before new ones are dropped (and counted)",
    },
    EnvVar {
        name: "PINWATCH_MAX_THREADS",
        default: "256",
        doc: "threads that can be watched at once",
    },
    EnvVar {
        name: "PINWATCH_TRACING",
        default: "on",
        doc: "`off`: no `tracing` WARN event per pinned event, no start-up line, nothing on \
              stderr (on: with no `tracing` subscriber set, reports and the start-up line go to \
              stderr)",
    },
    EnvVar {
        name: "PINWATCH_PROMETHEUS_ADDR",
        default: "",
        doc: "serve Prometheus metrics at `http://ADDR/metrics` from a thread of pinwatch's own \
              (e.g. `127.0.0.1:9464`; a non-loopback address listens beyond this host); unset: \
              no endpoint. Needs the `prometheus` cargo feature (on by default)",
    },
    EnvVar {
        name: "PINWATCH_OTLP",
        default: "off",
        doc: "`on`: send pin reports as OpenTelemetry log records and pinwatch's metrics over \
              OTLP, configured by the standard `OTEL_EXPORTER_OTLP_*`, `OTEL_SERVICE_NAME`, \
              `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_METRIC_EXPORT_INTERVAL`. Needs the `otlp` cargo \
              feature",
    },
    EnvVar {
        name: "PINWATCH_CONSOLE",
        default: "off",
        doc: "`on`: serve tokio-console (installs the process's `tracing` subscriber: the console \
              layer, `TOKIO_CONSOLE_BIND` default `127.0.0.1:6669`, plus a `fmt` layer filtered \
              by `RUST_LOG`, default `warn`) with one resource per worker showing who pins it; \
              `resources`: only the worker resources, for a service whose own subscriber has \
              the console layer. Needs the `console` cargo feature",
    },
    EnvVar {
        name: "PINWATCH_PROMETHEUS_MAX_LOCATIONS",
        default: "50",
        doc: "distinct `location` values of `pinwatch_pins_by_location_total`; later locations \
              count as `other`",
    },
];

/// The variables a test's detector (`#[pinwatch::test]`, [`testing::Check`](crate::testing::Check))
/// takes from the environment: the detection settings. Never the exporters, the control socket
/// or the recording: those are the process's, and tests run in parallel in one process (the
/// second test to bind `PINWATCH_PROMETHEUS_ADDR` would fail, several sinks would rotate one
/// `PINWATCH_RECORD`). A variable not listed here is not a test's, so a new output stays out of
/// tests until it is listed.
pub(crate) const TEST_ENV_VARS: &[&str] = &[
    "PINWATCH",
    "PINWATCH_THRESHOLD",
    "PINWATCH_REPORT_INTERVAL",
    "PINWATCH_STACKS",
    "PINWATCH_SAMPLE_INTERVAL",
    "PINWATCH_SCAN_INTERVAL",
    "PINWATCH_WATCHDOG_NICE",
    "PINWATCH_QUEUE_CAPACITY",
    "PINWATCH_MAX_THREADS",
    "PINWATCH_TRACING",
];

/// The prefix of the variables pinwatch's own tests give their child processes: not settings.
/// (Spelled in two parts, so that the check of docs/configuration.md against the names in the
/// code does not take it for one.)
const TEST_PREFIX: &str = concat!("PINWATCH", "_TEST_");

/// A warning for each variable among `names` (the environment's) that looks like pinwatch's
/// and is not one of [`ENV_VARS`]: the threshold's name misspelled would otherwise leave the
/// default in force without a word. The closest known name is suggested where one is close.
pub(crate) fn unknown_env_vars(names: impl IntoIterator<Item = std::ffi::OsString>) -> Vec<String> {
    let mut unknown: Vec<String> = names
        .into_iter()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| n.starts_with("PINWATCH") && !n.starts_with(TEST_PREFIX))
        .filter(|n| !ENV_VARS.iter().any(|v| v.name == n))
        .collect();
    unknown.sort();
    unknown
        .into_iter()
        .map(|name| {
            // Names of about the same length (in characters, as the distance counts) only: a
            // distance is quadratic in them, and the environment's names may be long.
            let chars = name.chars().count();
            let closest = begun(&name)
                .or_else(|| ended(&name))
                .map(|known| (0, known))
                .or_else(|| {
                    ENV_VARS
                        .iter()
                        .filter(|v| chars.abs_diff(v.name.len()) <= 3)
                        .map(|v| (strsim::levenshtein(&name, v.name), v.name))
                        .min()
                        .filter(|(d, _)| *d <= 3)
                })
                .or_else(|| sharing_words(&name).map(|known| (0, known)));
            let hint = match closest {
                Some((_, known)) => format!("did you mean {known}? "),
                None => String::new(),
            };
            format!(
                "{} is not a pinwatch variable and is ignored; {hint}docs/configuration.md lists \
                 them",
                crate::text::bounded(&name, 80)
            )
        })
        .collect()
}

/// `name`'s words after `PINWATCH` (none for a name that does not begin with that word).
fn words(name: &str) -> Vec<&str> {
    match name.split('_').collect::<Vec<_>>().split_first() {
        Some((&"PINWATCH", rest)) => rest.iter().copied().filter(|w| !w.is_empty()).collect(),
        _ => Vec::new(),
    }
}

/// The first known variable whose words begin with all of `name`'s: a name cut short (the
/// dump's variable without `_ON_EXIT`), even where a misspelling is as close.
fn begun(name: &str) -> Option<&'static str> {
    let theirs = words(name);
    (!theirs.is_empty())
        .then(|| {
            ENV_VARS
                .iter()
                .find(|v| words(v.name).starts_with(&theirs))
                .map(|v| v.name)
        })
        .flatten()
}

/// The one known variable whose words end with all of `name`'s: a name whose first words are
/// left out (`MAX_LOCATIONS` after `PINWATCH` for the Prometheus endpoint's); none where
/// several do (`SIZE`: the flight recording's or the recording's?).
fn ended(name: &str) -> Option<&'static str> {
    let theirs = words(name);
    if theirs.is_empty() {
        return None;
    }
    let mut ending = ENV_VARS
        .iter()
        .filter(|v| words(v.name).ends_with(&theirs))
        .map(|v| v.name);
    match (ending.next(), ending.next()) {
        (Some(known), None) => Some(known),
        _ => None,
    }
}

/// The known variable whose name begins with the most of `name`'s words after `PINWATCH`
/// (the first in [`ENV_VARS`] among equals), where one shares a word that names a setting
/// (not only `MAX`): the Prometheus address's name with `PORT` for its last word is too far
/// from it for a misspelling, and is taken for it here.
fn sharing_words(name: &str) -> Option<&'static str> {
    let theirs = words(name);
    ENV_VARS
        .iter()
        .map(|v| {
            let shared = words(v.name)
                .iter()
                .zip(&theirs)
                .take_while(|(a, b)| a == b)
                .count();
            (shared, v.name)
        })
        .filter(|(shared, _)| *shared > 0 && !(*shared == 1 && theirs[0] == "MAX"))
        .fold(
            None,
            |best: Option<(usize, &str)>, (shared, known)| match best {
                Some((most, _)) if most >= shared => best,
                _ => Some((shared, known)),
            },
        )
        .map(|(_, known)| known)
}

/// The detector's settings. Build one with [`Builder`](crate::Builder) setters or
/// [`Config::from_env`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// `false` builds a plain runtime with no hooks.
    pub enabled: bool,
    /// See [`DEFAULT_THRESHOLD`].
    pub threshold: Duration,
    /// See [`DEFAULT_REPORT_INTERVAL`].
    pub report_interval: Duration,
    /// See [`DEFAULT_SCAN_INTERVAL`].
    pub scan_interval: Duration,
    /// Where the JSON-lines recording goes, if anywhere.
    pub record: Option<PathBuf>,
    /// Rotate the recording before it grows past this many bytes (`None`: never).
    pub record_max_size: Option<u64>,
    /// Rotate the recording's current file once it is this old (`None`: never).
    pub record_max_age: Option<Duration>,
    /// Rotated recording files kept; see [`DEFAULT_RECORD_KEEP`].
    pub record_keep: usize,
    /// The flight recording's bound in bytes (`None`: no flight recording); see
    /// [`DEFAULT_FLIGHT_SIZE`].
    pub flight_size: Option<u64>,
    /// Where the flight recording is written when the detector stops, and at a SIGTERM or
    /// SIGINT (`%p`: the pid); see [`Builder::dump_on_exit`](crate::Builder::dump_on_exit).
    pub dump_on_exit: Option<PathBuf>,
    /// See [`Control`].
    pub control: Control,
    /// See [`DEFAULT_HEARTBEAT`]; `None`: no heartbeat (a runtime whose drivers cannot be
    /// seen gets no stall detection then).
    pub heartbeat: Option<Duration>,
    /// Wake a parked worker when a pin leaves the runtime's drivers undriven (`PINWATCH_RESCUE`).
    pub rescue: bool,
    /// See [`Stacks`].
    pub stacks: Stacks,
    /// See [`DEFAULT_SAMPLE_INTERVAL`].
    pub sample_interval: Duration,
    /// The watchdog thread's nice value (`PINWATCH_WATCHDOG_NICE`), from `-20` to `19`, which
    /// the waker thread it starts takes too; `None` (the default): the process's own. Set as
    /// the thread starts: a value below the
    /// process's needs `CAP_SYS_NICE` or a high enough `RLIMIT_NICE`, else the detector does not
    /// start ([`Error::WatchdogNice`]).
    pub watchdog_nice: Option<i8>,
    /// See [`DEFAULT_QUEUE_CAPACITY`].
    pub queue_capacity: usize,
    /// See [`DEFAULT_MAX_THREADS`].
    pub max_threads: usize,
    /// Emit a `tracing` WARN event (target `pinwatch`) for every pinned event.
    pub tracing: bool,
    /// Where to serve Prometheus metrics (`PINWATCH_PROMETHEUS_ADDR`), if anywhere.
    pub prometheus_addr: Option<std::net::SocketAddr>,
    /// See [`DEFAULT_PROMETHEUS_MAX_LOCATIONS`]; bounds the OTLP `location` attribute too.
    pub prometheus_max_locations: usize,
    /// Send events and metrics over OTLP (`PINWATCH_OTLP`).
    pub otlp: bool,
    /// See [`Console`].
    pub console: Console,
    /// A registry of the service's to register pinwatch's metrics into
    /// ([`Builder::prometheus_registry`](crate::Builder::prometheus_registry)).
    #[cfg(feature = "prometheus")]
    pub(crate) prometheus_registry: Option<prometheus::Registry>,
    /// Tests only: the watchdog sleeps this long before every other scan's slot reads, as a
    /// watchdog preempted or slowed by a probe would.
    pub(crate) late_scans: Option<Duration>,
    /// Tests only: the watchdog thread sleeps this long before it sets itself up, as one the
    /// kernel keeps from running on a loaded machine would.
    pub(crate) late_start: Option<Duration>,
    /// Tests only: each look at a poll in progress computes this long after its check for a
    /// stop, as a watchdog preempted in a look, or slowed there by its reads, would.
    pub(crate) slow_looks: Option<Duration>,
    /// Tests only: the watchdog thread's timer slack (`PR_SET_TIMERSLACK`): its timed waits
    /// end up to this late, as one's under systemd's `TimerSlackNSec=` would.
    pub(crate) watchdog_timer_slack: Option<Duration>,
    /// Where polls are rare, their starts are stamped and the watchdog looks less often
    /// (`watch::stamps`); off for tests that compare with looks every scan interval.
    pub(crate) stamps: bool,
    /// With [`tracing`](Self::tracing) on: the start-up line, and each report on stderr while
    /// no `tracing` subscriber is set. Off for a test's detector, whose failure message shows
    /// its pins.
    pub(crate) announce: bool,
    /// The settings were read from the process's environment ([`Config::from_env`],
    /// [`Builder::with_env`](crate::Builder::with_env)), not from a getter of the caller's: a
    /// `PINWATCH_*` variable pinwatch does not know is then worth a warning
    /// ([`unknown_env_vars`]).
    pub(crate) from_env: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enabled: true,
            threshold: DEFAULT_THRESHOLD,
            report_interval: DEFAULT_REPORT_INTERVAL,
            scan_interval: DEFAULT_SCAN_INTERVAL,
            record: None,
            record_max_size: Some(DEFAULT_RECORD_MAX_SIZE),
            record_max_age: None,
            record_keep: DEFAULT_RECORD_KEEP,
            flight_size: Some(DEFAULT_FLIGHT_SIZE),
            dump_on_exit: None,
            control: Control::On,
            heartbeat: Some(DEFAULT_HEARTBEAT),
            rescue: true,
            stacks: Stacks::default(),
            sample_interval: DEFAULT_SAMPLE_INTERVAL,
            watchdog_nice: None,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            max_threads: DEFAULT_MAX_THREADS,
            tracing: true,
            prometheus_addr: None,
            prometheus_max_locations: DEFAULT_PROMETHEUS_MAX_LOCATIONS,
            otlp: false,
            console: Console::Off,
            #[cfg(feature = "prometheus")]
            prometheus_registry: None,
            late_scans: None,
            late_start: None,
            slow_looks: None,
            watchdog_timer_slack: None,
            stamps: true,
            announce: true,
            from_env: false,
        }
    }
}

impl Config {
    /// Defaults overlaid with the environment ([`ENV_VARS`]).
    pub fn from_env() -> Result<Config, Error> {
        let mut config = Config::default();
        config.apply_process_env()?;
        Ok(config)
    }

    /// [`apply_env`](Self::apply_env) from the process's own environment, which then warns
    /// about `PINWATCH…` variables it does not know ([`from_env`](Self::from_env) and
    /// [`Builder::with_env`](crate::Builder::with_env)).
    pub(crate) fn apply_process_env(&mut self) -> Result<(), Error> {
        self.apply_env(|name| std::env::var_os(name))?;
        self.from_env = true;
        Ok(())
    }

    /// Overlays the variables that `get` returns on `self`. `get` stands for
    /// `std::env::var_os`, so that tests need not touch the process environment. Unlike
    /// [`Config::from_env`], it does not make the detector warn at start-up about `PINWATCH…`
    /// variables it does not know: `get` may read anything but the process's environment.
    pub fn apply_env(
        &mut self,
        get: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<(), Error> {
        let read = |name: &'static str| -> Result<Option<String>, Error> {
            match get(name) {
                None => Ok(None),
                Some(v) => match v.into_string() {
                    Ok(s) => Ok(Some(s)),
                    Err(raw) => Err(Error::invalid_env(
                        name,
                        raw.to_string_lossy().into_owned(),
                        "is not valid UTF-8",
                    )),
                },
            }
        };
        if let Some(v) = read("PINWATCH")? {
            self.enabled = parse_switch("PINWATCH", &v)?;
        }
        if let Some(v) = read("PINWATCH_THRESHOLD")? {
            self.threshold = parse_duration("PINWATCH_THRESHOLD", &v, THRESHOLD)?;
        }
        if let Some(v) = read("PINWATCH_REPORT_INTERVAL")? {
            self.report_interval = parse_duration("PINWATCH_REPORT_INTERVAL", &v, REPORT)?;
        }
        if let Some(v) = read("PINWATCH_RECORD")? {
            if v.trim().is_empty() {
                return Err(Error::invalid_env(
                    "PINWATCH_RECORD",
                    v,
                    "is empty; give the path of a file to append to, or unset the variable",
                ));
            }
            not_dash("PINWATCH_RECORD", &v)?;
            self.record = Some(PathBuf::from(v));
        }
        if let Some(v) = read("PINWATCH_RECORD_MAX_SIZE")? {
            self.record_max_size = env("PINWATCH_RECORD_MAX_SIZE", &v, parse_record_size)?;
        }
        if let Some(v) = read("PINWATCH_RECORD_MAX_AGE")? {
            self.record_max_age = env("PINWATCH_RECORD_MAX_AGE", &v, parse_record_age)?;
        }
        if let Some(v) = read("PINWATCH_RECORD_KEEP")? {
            self.record_keep = parse_count("PINWATCH_RECORD_KEEP", &v, usize::MAX)?;
        }
        if let Some(v) = read("PINWATCH_FLIGHT_SIZE")? {
            self.flight_size = env("PINWATCH_FLIGHT_SIZE", &v, parse_flight_size)?;
        }
        if let Some(v) = read("PINWATCH_DUMP_ON_EXIT")? {
            if v.trim().is_empty() {
                return Err(Error::invalid_env(
                    "PINWATCH_DUMP_ON_EXIT",
                    v,
                    "is empty; give the path of the file to write when the detector stops, or \
                     unset the variable",
                ));
            }
            not_dash("PINWATCH_DUMP_ON_EXIT", &v)?;
            self.dump_on_exit = Some(PathBuf::from(v));
        }
        if let Some(v) = read("PINWATCH_CONTROL")? {
            self.control = match switch(&v) {
                Some(true) => Control::On,
                Some(false) => Control::Off,
                None if Path::new(v.trim()).is_absolute() => Control::Dir(PathBuf::from(v.trim())),
                None => {
                    return Err(Error::invalid_env(
                        "PINWATCH_CONTROL",
                        v,
                        "must be `on`, `off` or an absolute directory",
                    ))
                }
            };
        }
        if let Some(v) = read("PINWATCH_HEARTBEAT")? {
            self.heartbeat = env("PINWATCH_HEARTBEAT", &v, |v| {
                if is_off(v) {
                    return Ok(None);
                }
                duration_at_least(v, HEARTBEAT)
                    .map(Some)
                    .map_err(|e| format!("{e}, or `off`"))
            })?;
        }
        if let Some(v) = read("PINWATCH_RESCUE")? {
            self.rescue = parse_switch("PINWATCH_RESCUE", &v)?;
        }
        if let Some(v) = read("PINWATCH_STACKS")? {
            self.stacks = env("PINWATCH_STACKS", &v, Stacks::spelled)?;
        }
        if let Some(v) = read("PINWATCH_SAMPLE_INTERVAL")? {
            self.sample_interval = parse_duration("PINWATCH_SAMPLE_INTERVAL", &v, SAMPLE)?;
        }
        if let Some(v) = read("PINWATCH_SCAN_INTERVAL")? {
            self.scan_interval = parse_duration("PINWATCH_SCAN_INTERVAL", &v, SCAN)?;
        }
        if let Some(v) = read("PINWATCH_WATCHDOG_NICE")? {
            self.watchdog_nice = env("PINWATCH_WATCHDOG_NICE", &v, parse_nice)?;
        }
        if let Some(v) = read("PINWATCH_QUEUE_CAPACITY")? {
            self.queue_capacity = parse_count("PINWATCH_QUEUE_CAPACITY", &v, MAX_QUEUE_CAPACITY)?;
        }
        if let Some(v) = read("PINWATCH_MAX_THREADS")? {
            self.max_threads = parse_count("PINWATCH_MAX_THREADS", &v, MAX_THREADS)?;
        }
        if let Some(v) = read("PINWATCH_TRACING")? {
            self.tracing = parse_switch("PINWATCH_TRACING", &v)?;
        }
        if let Some(v) = read("PINWATCH_PROMETHEUS_ADDR")? {
            self.prometheus_addr = Some(v.trim().parse().map_err(|e| {
                Error::invalid_env(
                    "PINWATCH_PROMETHEUS_ADDR",
                    v.clone(),
                    format!(
                        "is not an IP address and port ({e}); write it like `127.0.0.1:9464` or \
                         `[::1]:9464` (a host name is not looked up)"
                    ),
                )
            })?);
        }
        if let Some(v) = read("PINWATCH_OTLP")? {
            self.otlp = parse_switch("PINWATCH_OTLP", &v)?;
        }
        if let Some(v) = read("PINWATCH_CONSOLE")? {
            self.console = match (v.trim().eq_ignore_ascii_case("resources"), switch(&v)) {
                (true, _) => Console::Resources,
                (_, Some(true)) => Console::On,
                (_, Some(false)) => Console::Off,
                (_, None) => {
                    return Err(Error::invalid_env(
                        "PINWATCH_CONSOLE",
                        v,
                        "must be `on`, `resources` or `off`",
                    ))
                }
            };
        }
        if let Some(v) = read("PINWATCH_PROMETHEUS_MAX_LOCATIONS")? {
            self.prometheus_max_locations =
                parse_count("PINWATCH_PROMETHEUS_MAX_LOCATIONS", &v, usize::MAX)?;
        }
        Ok(())
    }

    /// Checks the settings before a detector is built: each setting in range, the dump
    /// directory usable, and every exporter asked for built in (its cargo feature).
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |setting, reason: &str| {
            Err(Error::InvalidSetting {
                setting,
                reason: reason.to_owned(),
            })
        };
        let c = self;
        if c.threshold.is_zero() {
            return bad("threshold", "must be greater than zero");
        }
        if c.report_interval.is_zero() {
            return bad("report_interval", "must be greater than zero");
        }
        if c.sample_interval.is_zero() {
            return bad("sample_interval", "must be greater than zero");
        }
        if !(1..=MAX_QUEUE_CAPACITY).contains(&c.queue_capacity) {
            return bad(
                "queue_capacity",
                &format!("must be from 1 to {MAX_QUEUE_CAPACITY}"),
            );
        }
        if !(1..=MAX_THREADS).contains(&c.max_threads) {
            return bad("max_threads", &format!("must be from 1 to {MAX_THREADS}"));
        }
        if c.prometheus_max_locations == 0 {
            return bad("prometheus_max_locations", "must be at least 1");
        }
        if c.heartbeat.is_some_and(|d| d.is_zero()) {
            return bad("heartbeat", "must be greater than zero (or None: off)");
        }
        if c.watchdog_nice.is_some_and(|n| !NICE.contains(&n)) {
            return bad(
                "watchdog_nice",
                "must be from -20 to 19 (or None: the process's own)",
            );
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
            Some(b) if b > MAX_FLIGHT_SIZE => {
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
            if let Err(reason) = crate::files::check_dump_path(path) {
                return Err(Error::invalid_env("PINWATCH_DUMP_ON_EXIT", value, reason));
            }
        }
        if let Control::Dir(d) = &c.control {
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

    /// The settings that can change at run time, as configured at start.
    pub fn settings(&self) -> Settings {
        Settings {
            threshold: self.threshold,
            report_interval: self.report_interval,
            sample_interval: self.sample_interval,
            scan_interval: self.scan_interval,
            stacks: self.stacks,
            paused: false,
        }
    }
}

/// The spellings of on and off every switch variable accepts.
fn switch(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "on" | "1" | "true" | "yes" => Some(true),
        "off" | "0" | "false" | "no" => Some(false),
        _ => None,
    }
}

fn parse_switch(var: &'static str, v: &str) -> Result<bool, Error> {
    switch(v).ok_or_else(|| {
        Error::invalid_env(
            var,
            v.to_owned(),
            "must be `on` or `off` (also `1`/`0`, `true`/`false`, `yes`/`no`)",
        )
    })
}

/// Reads variable `var`'s value `v` with `parse`, whose error says what is wrong with it.
fn env<T>(
    var: &'static str,
    v: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<T, Error> {
    parse(v).map_err(|reason| Error::invalid_env(var, v.to_owned(), reason))
}

/// Count variable `var`'s value `v`, from 1 to `max`; its error's example is the variable's
/// default (`write it like `5`` for `PINWATCH_RECORD_KEEP`).
fn parse_count(var: &'static str, v: &str, max: usize) -> Result<usize, Error> {
    let example = ENV_VARS
        .iter()
        .find(|e| e.name == var)
        .map_or("1024", |e| e.default);
    env(var, v, |v| count_at_most(v, max, example))
}

/// The nice values a thread can have.
const NICE: std::ops::RangeInclusive<i8> = -20..=19;

/// `PINWATCH_WATCHDOG_NICE`: a nice value, or `off` (`None`).
fn parse_nice(v: &str) -> Result<Option<i8>, String> {
    if is_off(v) {
        return Ok(None);
    }
    match v.trim().parse::<i64>() {
        Ok(n) => i8::try_from(n)
            .ok()
            .filter(|n| NICE.contains(n))
            .map(Some)
            .ok_or_else(|| "must be from -20 (first to run) to 19, or `off`".to_owned()),
        Err(_) => Err(
            "is not a nice value; write a whole number from -20 to 19 like `-10`, or `off`"
                .to_owned(),
        ),
    }
}

fn parse_duration(var: &'static str, v: &str, floor: Floor) -> Result<Duration, Error> {
    env(var, v, |v| duration_at_least(v, floor))
}

/// A whole number from 1 to `max`; the error of one that is none says to write it like
/// `example`.
fn count_at_most(v: &str, max: usize, example: &str) -> Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) if n > max => Err(format!("must be at most {max}")),
        Ok(n) => Ok(n),
        // Digits only, too many for a number: too large, not "not a number".
        Err(_)
            if {
                let digits = v.trim().strip_prefix('+').unwrap_or(v.trim());
                !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
            } =>
        {
            Err(format!("must be at most {max}"))
        }
        Err(_) => Err(format!("is not a whole number; write it like `{example}`")),
    }
}

/// A duration greater than zero (humantime).
pub(crate) fn duration(v: &str) -> Result<Duration, String> {
    match humantime::parse_duration(v.trim()) {
        Ok(d) if d.is_zero() => Err("must be greater than zero".to_owned()),
        Ok(d) => Ok(d),
        Err(e) => Err(format!(
            "is not a duration ({e}); write it like `20ms`, `1s` or `1m 30s`"
        )),
    }
}

/// The lowest value a duration setting takes from outside the program (the environment, the
/// control socket), and what a lower one would flood the service with. Code that builds its
/// own [`Config`] or [`Builder`](crate::Builder) may go lower (tests do).
#[derive(Clone, Copy)]
struct Floor {
    min: Duration,
    floods: &'static str,
}

const THRESHOLD: Floor = Floor {
    min: MIN_THRESHOLD,
    floods: "pin reports (ordinary polls would count as pins)",
};
const REPORT: Floor = Floor {
    min: MIN_REPORT_INTERVAL,
    floods: "reports of every stuck poll",
};
const SAMPLE: Floor = Floor {
    min: MIN_SAMPLE_INTERVAL,
    floods: "stack-sampling signals to pinned workers",
};
const SCAN: Floor = Floor {
    min: MIN_SCAN_INTERVAL,
    floods: "watchdog wake-ups",
};
const HEARTBEAT: Floor = Floor {
    min: MIN_HEARTBEAT,
    floods: "timer wake-ups on the watched runtime",
};

/// A duration (humantime) of at least `floor.min`; the error names the floor (a zero's too).
fn duration_at_least(v: &str, floor: Floor) -> Result<Duration, String> {
    let d = duration(v).map_err(|e| match humantime::parse_duration(v.trim()) {
        Ok(_) => format!("{e}: at least {}", humantime::format_duration(floor.min)),
        Err(_) => e,
    })?;
    if d < floor.min {
        let min = humantime::format_duration(floor.min);
        return Err(format!(
            "is below the floor of {min}: a shorter one would flood the service with {}; \
             write `{min}` or more",
            floor.floods
        ));
    }
    Ok(d)
}

/// Whether a size or a duration is `off`. Only the word: `0`, `no` or `false`, which a
/// switch takes for off, would turn a bound off where a zero was meant (a recording that never
/// rotates), so they are refused as the zero they spell.
fn is_off(v: &str) -> bool {
    v.trim().eq_ignore_ascii_case("off")
}

/// A duration greater than zero, or `off`.
pub(crate) fn parse_age(v: &str) -> Result<Option<Duration>, String> {
    if is_off(v) {
        return Ok(None);
    }
    duration(v).map(Some).map_err(|e| format!("{e}, or `off`"))
}

/// Refuses `-` for a file the service writes: it names no standard output here, only a file
/// called `-` in the service's working directory (helper-119).
fn not_dash(name: &'static str, v: &str) -> Result<(), Error> {
    if v.trim() != "-" {
        return Ok(());
    }
    Err(Error::invalid_env(
        name,
        v.to_owned(),
        "is `-`, which the service would take for a file called `-` in its working directory, \
         not its standard output; name the file (`./-` for one called `-`), and read it with \
         `pinwatch print`",
    ))
}

/// A size in bytes (`64KB`, `100MB`, `1GiB`, or a plain number), or `off`.
pub(crate) fn parse_size(v: &str) -> Result<Option<u64>, String> {
    if is_off(v) {
        return Ok(None);
    }
    match v.trim().parse::<bytesize::ByteSize>() {
        Ok(b) if b.as_u64() == 0 => Err("must be greater than zero (or `off`)".to_owned()),
        Ok(b) => Ok(Some(b.as_u64())),
        Err(_) => {
            Err("is not a size; write it like `64KB`, `100MB` or `1GiB`, or `off`".to_owned())
        }
    }
}

/// The smallest size a recording file may rotate at, from outside the program (the
/// environment, `ctl record start --max-size`): a pin's report is 12–17 KB with full stacks,
/// and a smaller bound makes a file of every report, the kept ones a handful of reports.
pub const MIN_RECORD_MAX_SIZE: u64 = 64_000;

/// A recording's rotation size: at least [`MIN_RECORD_MAX_SIZE`], or `off`.
pub(crate) fn parse_record_size(v: &str) -> Result<Option<u64>, String> {
    match parse_size(v)? {
        Some(b) if b < MIN_RECORD_MAX_SIZE => Err(
            "is below the floor of 64KB: a smaller file would rotate at every pin's report \
             and keep only a handful; write `64KB` or more, or `off`"
                .to_owned(),
        ),
        b => Ok(b),
    }
}

/// The shortest age a recording file may rotate at, from outside the program (the
/// environment, `ctl record start --max-age`): a pin is reported again every report interval
/// (a second by default), and a shorter bound makes a file of every few reports, the kept ones
/// the last seconds of the recording (helper-119: `1ms` with `PINWATCH_RECORD_KEEP=2` left 3
/// of 12 events).
pub const MIN_RECORD_MAX_AGE: Duration = Duration::from_secs(60);

/// A recording's rotation age: at least [`MIN_RECORD_MAX_AGE`], or `off`.
pub(crate) fn parse_record_age(v: &str) -> Result<Option<Duration>, String> {
    match parse_age(v)? {
        Some(d) if d < MIN_RECORD_MAX_AGE => Err(
            "is below the floor of 1m: a younger file would rotate every few reports, and the \
             files kept hold only the last seconds; write `1m` or more, or `off`"
                .to_owned(),
        ),
        d => Ok(d),
    }
}

/// The smallest flight recording, from outside the program (the environment): a pin's report
/// is about 0.9 KB with short stacks, and a smaller buffer keeps a report or two, or none
/// (helper-119: `1B` was taken, and every dump was empty).
pub const MIN_FLIGHT_SIZE: u64 = 4_096;

/// A flight recording's bound: a size from [`MIN_FLIGHT_SIZE`] to [`MAX_FLIGHT_SIZE`], or
/// `off`.
pub(crate) fn parse_flight_size(v: &str) -> Result<Option<u64>, String> {
    match parse_size(v)? {
        Some(b) if b < MIN_FLIGHT_SIZE => Err(
            "is below the floor of 4KiB: a smaller buffer would keep a report or two, or none; \
             write `4KiB` or more, or `off`"
                .to_owned(),
        ),
        Some(b) if b > MAX_FLIGHT_SIZE => Err(format!(
            "is more than the largest flight recording, {} (1GiB); give a smaller size, or `off`",
            MAX_FLIGHT_SIZE
        )),
        b => Ok(b),
    }
}

/// The settings that can change while the service runs (`pinwatch ctl <pid> set key=value`);
/// the watchdog and the analysis read them afresh every scan and every event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Settings {
    /// See [`DEFAULT_THRESHOLD`].
    pub threshold: Duration,
    /// See [`DEFAULT_REPORT_INTERVAL`].
    pub report_interval: Duration,
    /// See [`DEFAULT_SAMPLE_INTERVAL`].
    pub sample_interval: Duration,
    /// See [`DEFAULT_SCAN_INTERVAL`].
    pub scan_interval: Duration,
    /// See [`Stacks`].
    pub stacks: Stacks,
    /// No new pins are reported while paused (those already reported are followed to their end).
    pub paused: bool,
}

impl Settings {
    /// The keys [`set`](Self::set) takes, each the name of its `PINWATCH_*` variable in lower
    /// case without the prefix.
    pub const KEYS: &'static [&'static str] = &[
        "threshold",
        "report_interval",
        "sample_interval",
        "scan_interval",
        "stacks",
    ];

    /// Sets `key` from `value`, validated as its environment variable is, with the same floors
    /// ([`MIN_THRESHOLD`], [`MIN_REPORT_INTERVAL`], [`MIN_SAMPLE_INTERVAL`],
    /// [`MIN_SCAN_INTERVAL`]). The error names the key and the value and says what would be
    /// right.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), Error> {
        let bad = |reason: String| Error::InvalidValue {
            key: key.to_owned(),
            value: value.to_owned(),
            reason,
        };
        match key {
            "threshold" => self.threshold = duration_at_least(value, THRESHOLD).map_err(bad)?,
            "report_interval" => {
                self.report_interval = duration_at_least(value, REPORT).map_err(bad)?
            }
            "sample_interval" => {
                self.sample_interval = duration_at_least(value, SAMPLE).map_err(bad)?
            }
            "scan_interval" => self.scan_interval = duration_at_least(value, SCAN).map_err(bad)?,
            "stacks" => self.stacks = Stacks::spelled(value).map_err(bad)?,
            _ => {
                return Err(Error::UnknownSetting {
                    key: key.to_owned(),
                    known: Self::KEYS.join(", "),
                })
            }
        }
        Ok(())
    }

    /// The value of `key` as `set` takes it.
    pub fn get(&self, key: &str) -> Option<String> {
        let d = |d: Duration| humantime::format_duration(d).to_string();
        Some(match key {
            "threshold" => d(self.threshold),
            "report_interval" => d(self.report_interval),
            "sample_interval" => d(self.sample_interval),
            "scan_interval" => d(self.scan_interval),
            "stacks" => self.stacks.as_str().to_owned(),
            _ => return None,
        })
    }

    /// The watchdog's scan period: the configured one, but never more than a quarter of the
    /// threshold (so a pinned poll is seen soon after it crosses it) nor less than 100 µs.
    pub fn effective_scan_interval(&self) -> Duration {
        self.scan_interval
            .min(self.threshold / 4)
            .max(Duration::from_micros(100))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::ffi::OsString;

    fn with(vars: &[(&str, &str)]) -> Result<Config, Error> {
        let map: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        let mut c = Config::default();
        c.apply_env(|n| map.get(n).cloned())?;
        Ok(c)
    }

    #[test]
    fn defaults_match_the_table() {
        let c = Config::default();
        let table: HashMap<_, _> = ENV_VARS.iter().map(|v| (v.name, v.default)).collect();
        assert_eq!(
            humantime::parse_duration(table["PINWATCH_THRESHOLD"]).unwrap(),
            c.threshold
        );
        assert_eq!(
            humantime::parse_duration(table["PINWATCH_REPORT_INTERVAL"]).unwrap(),
            c.report_interval
        );
        assert_eq!(
            humantime::parse_duration(table["PINWATCH_SAMPLE_INTERVAL"]).unwrap(),
            c.sample_interval
        );
        assert_eq!(table["PINWATCH_STACKS"], c.stacks.as_str());
        assert_eq!(
            humantime::parse_duration(table["PINWATCH_SCAN_INTERVAL"]).unwrap(),
            c.scan_interval
        );
        assert_eq!(
            table["PINWATCH_QUEUE_CAPACITY"],
            c.queue_capacity.to_string()
        );
        assert_eq!(table["PINWATCH_MAX_THREADS"], c.max_threads.to_string());
        assert_eq!(
            table["PINWATCH_TRACING"],
            if c.tracing { "on" } else { "off" }
        );
        assert_eq!(table["PINWATCH"], if c.enabled { "on" } else { "off" });
        assert!(c.record.is_none());
        assert_eq!(
            parse_size(table["PINWATCH_RECORD_MAX_SIZE"]).unwrap(),
            c.record_max_size
        );
        assert_eq!(
            parse_age(table["PINWATCH_RECORD_MAX_AGE"]).unwrap(),
            c.record_max_age
        );
        assert_eq!(table["PINWATCH_RECORD_KEEP"], c.record_keep.to_string());
        assert_eq!(
            parse_flight_size(table["PINWATCH_FLIGHT_SIZE"]).unwrap(),
            c.flight_size
        );
        assert_eq!(table["PINWATCH_DUMP_ON_EXIT"], "");
        assert!(c.dump_on_exit.is_none());
        assert_eq!(table["PINWATCH_CONTROL"], "on");
        assert_eq!(parse_age(table["PINWATCH_HEARTBEAT"]).unwrap(), c.heartbeat);
        assert_eq!(
            parse_nice(table["PINWATCH_WATCHDOG_NICE"]).unwrap(),
            c.watchdog_nice
        );
        assert_eq!(c.control, Control::On);
        assert!(c.prometheus_addr.is_none());
        assert_eq!(table["PINWATCH_OTLP"], if c.otlp { "on" } else { "off" });
        assert_eq!(table["PINWATCH_PROMETHEUS_ADDR"], "");
        assert_eq!(table["PINWATCH_CONSOLE"], c.console.as_str());
        assert_eq!(
            table["PINWATCH_PROMETHEUS_MAX_LOCATIONS"],
            c.prometheus_max_locations.to_string()
        );
    }

    #[test]
    fn the_configuration_guide_lists_every_variable_with_its_default() {
        // Read at run time: the guide is the repository's, not the package's.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md");
        let readme = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("{path}: {e} (a test of the repository's docs)"));
        let rows: Vec<(String, String)> = readme
            .lines()
            .filter(|l| l.starts_with("| `PINWATCH"))
            .map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                (
                    cells[1].trim_matches('`').to_owned(),
                    cells[2].trim_matches('`').to_owned(),
                )
            })
            .collect();
        let code: Vec<(String, String)> = ENV_VARS
            .iter()
            .map(|v| (v.name.to_owned(), v.default.to_owned()))
            .collect();
        assert_eq!(
            rows, code,
            "docs/configuration.md's table and config::ENV_VARS differ"
        );
    }

    #[test]
    fn the_test_variables_are_detection_settings_read_by_from_env() {
        for name in TEST_ENV_VARS {
            assert!(
                ENV_VARS.iter().any(|v| v.name == *name),
                "{name} is not in ENV_VARS"
            );
        }
        for output in [
            "PINWATCH_RECORD",
            "PINWATCH_CONTROL",
            "PINWATCH_PROMETHEUS_ADDR",
            "PINWATCH_OTLP",
            "PINWATCH_CONSOLE",
        ] {
            assert!(!TEST_ENV_VARS.contains(&output), "{output}");
        }
    }

    #[test]
    fn parses_good_values() {
        let c = with(&[
            ("PINWATCH_THRESHOLD", "5ms"),
            ("PINWATCH_REPORT_INTERVAL", "250ms"),
            ("PINWATCH_RECORD", "/tmp/x.jsonl"),
            ("PINWATCH_STACKS", "full"),
            ("PINWATCH", "off"),
            ("PINWATCH_SCAN_INTERVAL", "1ms"),
            ("PINWATCH_QUEUE_CAPACITY", "16"),
            ("PINWATCH_MAX_THREADS", "8"),
            ("PINWATCH_TRACING", "off"),
            ("PINWATCH_PROMETHEUS_ADDR", "127.0.0.1:9464"),
            ("PINWATCH_PROMETHEUS_MAX_LOCATIONS", "7"),
            ("PINWATCH_CONSOLE", "resources"),
            ("PINWATCH_RECORD_MAX_SIZE", "64 KiB"),
            ("PINWATCH_RECORD_MAX_AGE", "1h"),
            ("PINWATCH_RECORD_KEEP", "2"),
            ("PINWATCH_CONTROL", "/run/svc/pinwatch"),
            ("PINWATCH_HEARTBEAT", "10ms"),
            ("PINWATCH_WATCHDOG_NICE", " -20 "),
            ("PINWATCH_FLIGHT_SIZE", "64KiB"),
            ("PINWATCH_DUMP_ON_EXIT", "/var/tmp/flight-%p.jsonl"),
        ])
        .unwrap();
        assert_eq!(c.heartbeat, Some(Duration::from_millis(10)));
        assert_eq!(c.watchdog_nice, Some(-20));
        assert_eq!(
            with(&[("PINWATCH_WATCHDOG_NICE", "19")])
                .unwrap()
                .watchdog_nice,
            Some(19)
        );
        assert_eq!(
            with(&[("PINWATCH_WATCHDOG_NICE", "OFF")])
                .unwrap()
                .watchdog_nice,
            None
        );
        assert_eq!(c.flight_size, Some(65536));
        assert_eq!(
            c.dump_on_exit.as_deref(),
            Some(std::path::Path::new("/var/tmp/flight-%p.jsonl"))
        );
        assert_eq!(c.record_max_size, Some(65536));
        assert_eq!(c.record_max_age, Some(Duration::from_secs(3600)));
        assert_eq!(c.record_keep, 2);
        assert_eq!(c.control, Control::Dir(PathBuf::from("/run/svc/pinwatch")));
        let off = with(&[
            ("PINWATCH_RECORD_MAX_SIZE", "off"),
            ("PINWATCH_CONTROL", "off"),
            ("PINWATCH_HEARTBEAT", "off"),
            ("PINWATCH_FLIGHT_SIZE", "off"),
        ])
        .unwrap();
        assert_eq!(
            (off.record_max_size, off.control, off.heartbeat),
            (None, Control::Off, None)
        );
        assert_eq!(off.flight_size, None);
        assert_eq!(c.console, Console::Resources);
        assert_eq!(c.prometheus_addr, Some("127.0.0.1:9464".parse().unwrap()));
        assert_eq!(c.prometheus_max_locations, 7);
        assert_eq!(c.scan_interval, Duration::from_millis(1));
        assert_eq!((c.queue_capacity, c.max_threads, c.tracing), (16, 8, false));
        assert_eq!(c.threshold, Duration::from_millis(5));
        assert_eq!(c.report_interval, Duration::from_millis(250));
        assert_eq!(
            c.record.as_deref(),
            Some(std::path::Path::new("/tmp/x.jsonl"))
        );
        assert_eq!(c.stacks, Stacks::Full);
        assert!(!c.enabled);
    }

    /// A variable that looks like pinwatch's and is not one is named, with the closest known
    /// name where one is close (helper-60: `PINWATCH_TRESHOLD=5ms` started with 20 ms, silently);
    /// known ones, other programs' and the test suite's own are not.
    #[test]
    fn unknown_variables_are_named_with_the_closest_known_one() {
        let names = [
            "PINWATCH_TRESHOLD",
            "PATH",
            "PINWATCH_THRESHOLD",
            "PINWATCH",
            "PINWATCH_TEST_UNWIND_CHILD",
            "PINWATCH_THRESHOLDS",
            "PINWATCH_THRESH😀😀D",
            "PINWATCHER_MODE",
            "PINWATCH_\u{1b}[2J",
            "PINWATCH_PROMETHEUS",
            "PINWATCH_PROMETHEUS_PORT",
            "PINWATCH_OTLP_ENDPOINT",
            "PINWATCH_RECORD_PATH",
            "PINWATCH_DUMP",
            "PINWATCHDOG_CONTROL_DIR",
            "PINWATCH_MAX_WORKERS",
            "PINWATCH__",
            "PINWATCH_MAX_LOCATIONS",
            "PINWATCH_SIZE",
            "PINWATCH_KEEP",
        ]
        .map(std::ffi::OsString::from);
        let said = unknown_env_vars(names);
        assert_eq!(said.len(), 16, "{said:#?}");
        let of = |name: &str| {
            said.iter()
                .find(|w| {
                    w.starts_with(&format!(
                        "{name} is not a pinwatch variable and is ignored; "
                    ))
                })
                .unwrap_or_else(|| panic!("{name}: {said:#?}"))
        };
        assert!(of("PINWATCHER_MODE").ends_with("ignored; docs/configuration.md lists them"));
        // Too far for a misspelling, but the start of a known name, or past it (helper-83:
        // `PINWATCH_PROMETHEUS` left the endpoint off without a hint).
        assert!(of("PINWATCH_PROMETHEUS").contains("; did you mean PINWATCH_PROMETHEUS_ADDR? "));
        assert!(of("PINWATCH_PROMETHEUS_PORT").contains("did you mean PINWATCH_PROMETHEUS_ADDR?"));
        assert!(of("PINWATCH_OTLP_ENDPOINT").contains("; did you mean PINWATCH_OTLP? "));
        assert!(of("PINWATCH_RECORD_PATH").contains("; did you mean PINWATCH_RECORD? "));
        // A name cut short before a misspelling as close (helper-85: `PINWATCH_OTLP`); nothing
        // for another tool's variable that merely begins with the same letters, nor for `MAX`
        // alone.
        assert!(of("PINWATCH_DUMP").contains("; did you mean PINWATCH_DUMP_ON_EXIT? "));
        assert!(
            of("PINWATCHDOG_CONTROL_DIR").ends_with("ignored; docs/configuration.md lists them")
        );
        assert!(of("PINWATCH_MAX_WORKERS").ends_with("ignored; docs/configuration.md lists them"));
        // The end of one known name (helper-86: `PINWATCH_MAX_LOCATIONS` got no hint); the end
        // of several is no hint.
        assert!(of("PINWATCH_MAX_LOCATIONS")
            .contains("; did you mean PINWATCH_PROMETHEUS_MAX_LOCATIONS? "));
        assert!(of("PINWATCH_SIZE").ends_with("ignored; docs/configuration.md lists them"));
        // Before a misspelling as close (helper-89: `KEEP` is three edits from `OTLP`).
        assert!(of("PINWATCH_KEEP").contains("; did you mean PINWATCH_RECORD_KEEP? "));
        assert!(of("PINWATCH__").contains("did you mean PINWATCH? "));
        assert!(of("PINWATCH_THRESHOLDS").contains("; did you mean PINWATCH_THRESHOLD? "));
        assert!(of("PINWATCH_TRESHOLD").contains("; did you mean PINWATCH_THRESHOLD? "));
        // Two characters off, however many bytes they take.
        assert!(of("PINWATCH_THRESH😀😀D").contains("; did you mean PINWATCH_THRESHOLD? "));
        // Escaped: a name is the environment's to choose.
        assert!(of("PINWATCH_\\u{1b}[2J").contains("docs/configuration.md"));
        assert!(said.iter().all(|w| !w.contains('\u{1b}')), "{said:#?}");
        // Every variable of the table is known.
        let known = ENV_VARS.iter().map(|v| std::ffi::OsString::from(v.name));
        assert!(unknown_env_vars(known).is_empty());
    }

    #[test]
    fn bad_values_name_the_variable_and_value() {
        for (var, val) in [
            ("PINWATCH_THRESHOLD", "fast"),
            ("PINWATCH_THRESHOLD", "0ms"),
            ("PINWATCH_REPORT_INTERVAL", "12"),
            ("PINWATCH_STACKS", "medium"),
            ("PINWATCH", "maybe"),
            ("PINWATCH_RECORD", ""),
            ("PINWATCH_SAMPLE_INTERVAL", "-1s"),
            ("PINWATCH_QUEUE_CAPACITY", "lots"),
            ("PINWATCH_MAX_THREADS", "0"),
            ("PINWATCH_MAX_THREADS", "100000000000"),
            ("PINWATCH_QUEUE_CAPACITY", "18446744073709551615"),
            ("PINWATCH_TRACING", "loud"),
            ("PINWATCH_SCAN_INTERVAL", "2 parsecs"),
            ("PINWATCH_PROMETHEUS_ADDR", "localhost"),
            ("PINWATCH_PROMETHEUS_ADDR", "127.0.0.1:99999"),
            ("PINWATCH_PROMETHEUS_MAX_LOCATIONS", "0"),
            ("PINWATCH_OTLP", "grpc"),
            ("PINWATCH_CONSOLE", "loud"),
            ("PINWATCH_RECORD_MAX_SIZE", "big"),
            ("PINWATCH_RECORD_MAX_SIZE", "0KB"),
            ("PINWATCH_RECORD_MAX_AGE", "soon"),
            ("PINWATCH_RECORD_KEEP", "0"),
            ("PINWATCH_CONTROL", "relative/dir"),
            ("PINWATCH_HEARTBEAT", "0ms"),
            ("PINWATCH_HEARTBEAT", "often"),
            ("PINWATCH_WATCHDOG_NICE", "-21"),
            ("PINWATCH_WATCHDOG_NICE", "20"),
            ("PINWATCH_WATCHDOG_NICE", "-300"),
            ("PINWATCH_WATCHDOG_NICE", "high"),
            ("PINWATCH_WATCHDOG_NICE", "-5.5"),
            ("PINWATCH_WATCHDOG_NICE", ""),
            ("PINWATCH_FLIGHT_SIZE", "lots"),
            ("PINWATCH_FLIGHT_SIZE", "0MiB"),
            ("PINWATCH_FLIGHT_SIZE", "2GiB"),
            ("PINWATCH_DUMP_ON_EXIT", " "),
            // A switch's spellings of off are zeros here, not `off`: a bound a user meant to
            // be small must not turn into no bound.
            ("PINWATCH_RECORD_MAX_SIZE", "0"),
            ("PINWATCH_RECORD_MAX_SIZE", "false"),
            ("PINWATCH_RECORD_MAX_AGE", "0"),
            ("PINWATCH_RECORD_MAX_AGE", "no"),
            ("PINWATCH_FLIGHT_SIZE", "0"),
            ("PINWATCH_HEARTBEAT", "0"),
        ] {
            let err = with(&[(var, val)]).unwrap_err().to_string();
            assert!(err.contains(var), "{err}");
            assert!(err.contains(&format!("{val:?}")), "{err}");
        }
        // What to write instead (helper-60): a count's own default as the example, the floor of
        // a duration that is zero, every spelling a switch takes, an address that is no IP.
        for (var, val, what) in [
            ("PINWATCH_RECORD_KEEP", "-1", "write it like `5`"),
            (
                "PINWATCH_PROMETHEUS_MAX_LOCATIONS",
                "abc",
                "write it like `50`",
            ),
            ("PINWATCH_QUEUE_CAPACITY", "lots", "write it like `1024`"),
            // Too many digits for a number is too large (helper-83: "not a whole number").
            (
                "PINWATCH_RECORD_KEEP",
                "99999999999999999999999",
                "must be at most 18446744073709551615",
            ),
            (
                "PINWATCH_QUEUE_CAPACITY",
                "+99999999999999999999999",
                "must be at most 65536",
            ),
            (
                "PINWATCH_THRESHOLD",
                "0ms",
                "must be greater than zero: at least 1ms",
            ),
            ("PINWATCH", "maybe", "`yes`/`no`"),
            (
                "PINWATCH_PROMETHEUS_ADDR",
                "localhost:9464",
                "a host name is not looked up",
            ),
            ("PINWATCH_RECORD_MAX_SIZE", "10", "below the floor of 64KB"),
            ("PINWATCH_RECORD_MAX_AGE", "1ms", "below the floor of 1m"),
            ("PINWATCH_RECORD_MAX_AGE", "59s", "below the floor of 1m"),
            ("PINWATCH_FLIGHT_SIZE", "1B", "below the floor of 4KiB"),
            ("PINWATCH_FLIGHT_SIZE", "4095", "below the floor of 4KiB"),
            ("PINWATCH_RECORD", "-", "a file called `-`"),
            ("PINWATCH_RECORD", " - ", "a file called `-`"),
            ("PINWATCH_DUMP_ON_EXIT", "-", "a file called `-`"),
            (
                "PINWATCH_RECORD_MAX_SIZE",
                "63999",
                "below the floor of 64KB",
            ),
        ] {
            let err = with(&[(var, val)]).unwrap_err().to_string();
            assert!(err.contains(what), "{var}={val}: {err}");
        }
        assert_eq!(
            with(&[("PINWATCH_RECORD_MAX_SIZE", "64KB")])
                .unwrap()
                .record_max_size,
            Some(64_000)
        );
        // The floors themselves are taken, and `./-` is a file called `-`.
        let c = with(&[
            ("PINWATCH_RECORD_MAX_AGE", "1m"),
            ("PINWATCH_FLIGHT_SIZE", "4KiB"),
            ("PINWATCH_RECORD", "./-"),
        ])
        .unwrap();
        assert_eq!(c.record_max_age, Some(Duration::from_secs(60)));
        assert_eq!(c.flight_size, Some(4_096));
        assert_eq!(c.record.as_deref(), Some(std::path::Path::new("./-")));
        // As a switch, a stacks setting in capitals.
        assert_eq!(
            with(&[("PINWATCH_STACKS", "FULL")]).unwrap().stacks,
            Stacks::Full
        );
    }

    #[test]
    fn run_time_settings_are_validated_like_the_environment() {
        let mut s = Config::default().settings();
        s.set("threshold", "50ms").unwrap();
        s.set("stacks", "full").unwrap();
        assert_eq!(
            (s.threshold, s.stacks),
            (Duration::from_millis(50), Stacks::Full)
        );
        assert_eq!(s.get("threshold").as_deref(), Some("50ms"));
        for key in Settings::KEYS {
            let v = s.get(key).unwrap();
            let mut t = s;
            t.set(key, &v).unwrap();
            assert_eq!(t, s, "{key}={v} does not read back");
        }
        let err = s.set("threshold", "0ms").unwrap_err().to_string();
        assert!(
            err.contains("threshold=\"0ms\"") && err.contains("greater than zero"),
            "{err}"
        );
        let err = s.set("stacks", "medium").unwrap_err().to_string();
        assert!(err.contains("`off`, `short`, `full`"), "{err}");
        let err = s.set("max_threads", "4").unwrap_err().to_string();
        assert!(
            err.contains("unknown setting `max_threads`") && err.contains("threshold"),
            "{err}"
        );
        assert_eq!(s.threshold, Duration::from_millis(50));
    }

    #[test]
    fn floors_hold_for_the_environment_and_ctl_set_alike() {
        // (variable, key for `ctl set`, just below the floor, the floor)
        for (var, key, below, floor) in [
            ("PINWATCH_THRESHOLD", Some("threshold"), "1ns", "1ms"),
            ("PINWATCH_THRESHOLD", Some("threshold"), "999us", "1ms"),
            (
                "PINWATCH_SCAN_INTERVAL",
                Some("scan_interval"),
                "1ns",
                "1ms",
            ),
            (
                "PINWATCH_SAMPLE_INTERVAL",
                Some("sample_interval"),
                "9ms",
                "10ms",
            ),
            (
                "PINWATCH_REPORT_INTERVAL",
                Some("report_interval"),
                "99ms",
                "100ms",
            ),
            ("PINWATCH_HEARTBEAT", None, "1ns", "1ms"),
        ] {
            let err = with(&[(var, below)]).unwrap_err().to_string();
            assert!(
                err.contains(&format!("{var}={below:?}"))
                    && err.contains(&format!("floor of {floor}"))
                    && err.contains(&format!("write `{floor}` or more")),
                "{err}"
            );
            // The floor itself is taken.
            with(&[(var, floor)]).unwrap();
            let Some(key) = key else { continue };
            let mut s = Config::default().settings();
            let before = s;
            let err = s.set(key, below).unwrap_err().to_string();
            assert!(
                err.contains(&format!("{key}={below:?}"))
                    && err.contains(&format!("floor of {floor}")),
                "{err}"
            );
            assert_eq!(s, before, "a refused value changed nothing");
            s.set(key, floor).unwrap();
            assert_eq!(s.get(key).as_deref(), Some(floor));
        }
        // The values the tests and the docs use are above the floors.
        let mut s = Config::default().settings();
        for (key, v) in [
            ("threshold", "5ms"),
            ("scan_interval", "1ms"),
            ("sample_interval", "50ms"),
            ("report_interval", "200ms"),
        ] {
            s.set(key, v).unwrap();
        }
    }

    #[test]
    fn scan_interval_follows_small_thresholds() {
        let c = Config {
            threshold: Duration::from_millis(2),
            ..Config::default()
        };
        assert_eq!(
            c.settings().effective_scan_interval(),
            Duration::from_micros(500)
        );
        assert_eq!(
            Config::default().settings().effective_scan_interval(),
            DEFAULT_SCAN_INTERVAL
        );
    }

    /// A nice value a thread cannot have, given to the builder, is refused before anything
    /// starts; the two ends of the range are not.
    #[test]
    fn a_watchdog_nice_out_of_range_is_refused() {
        for (nice, ok) in [
            (-21, false),
            (20, false),
            (i8::MIN, false),
            (-20, true),
            (19, true),
        ] {
            let c = Config {
                watchdog_nice: Some(nice),
                ..Config::default()
            };
            match c.validate() {
                Ok(()) => assert!(ok, "{nice} passed"),
                Err(e) => {
                    assert!(!ok, "{nice} refused: {e}");
                    assert!(e
                        .to_string()
                        .contains("`watchdog_nice` must be from -20 to 19"));
                }
            }
        }
    }

    /// An exporter asked for in a build without its cargo feature fails validation, naming the
    /// variable and the feature; one that is built in passes.
    #[test]
    fn an_exporter_without_its_feature_is_named() {
        for (var, value, feature, built) in [
            ("PINWATCH_OTLP", "on", "otlp", cfg!(feature = "otlp")),
            (
                "PINWATCH_CONSOLE",
                "on",
                "console",
                cfg!(feature = "console"),
            ),
            (
                "PINWATCH_PROMETHEUS_ADDR",
                "127.0.0.1:9464",
                "prometheus",
                cfg!(feature = "prometheus"),
            ),
        ] {
            let mut c = Config::default();
            c.apply_env(|n| (n == var).then(|| value.into())).unwrap();
            match c.validate() {
                Ok(()) => assert!(built, "{var} passed without the `{feature}` feature"),
                Err(e) => {
                    let e = e.to_string();
                    assert!(!built, "{var} refused with `{feature}` built in: {e}");
                    assert!(
                        e.contains(var) && e.contains(&format!("`{feature}` cargo feature")),
                        "{e}"
                    );
                }
            }
        }
    }
}
