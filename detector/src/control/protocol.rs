//! What `pinwatch ctl` and a service's control socket say to each other: one JSON request line,
//! one JSON reply line, then the service closes the connection.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::export::RecordStatus;
use crate::recording::SummaryRow;

/// The longest request line a service reads, in bytes; a longer one gets an error.
pub const MAX_REQUEST: usize = 64 * 1024;

/// A request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Request {
    /// Settings, workers, pins running now, top locations, counters.
    Status,
    /// Change settings (`key`, `value`), all or none, validated like their `PINWATCH_*`
    /// variables; see [`Settings::KEYS`](crate::config::Settings::KEYS).
    Set {
        /// In order.
        settings: Vec<(String, String)>,
    },
    /// Start a recording to `path` (absolute: the service's working directory is not the
    /// client's), rotated by size and age; unset limits take the service's `PINWATCH_RECORD_*`.
    RecordStart {
        /// The file.
        path: PathBuf,
        /// Like `PINWATCH_RECORD_MAX_SIZE`.
        #[serde(default)]
        max_size: Option<String>,
        /// Like `PINWATCH_RECORD_MAX_AGE`.
        #[serde(default)]
        max_age: Option<String>,
        /// Like `PINWATCH_RECORD_KEEP`.
        #[serde(default)]
        keep: Option<usize>,
    },
    /// Stop a recording: the one with `id`, or the one writing `path` (absolute); with
    /// neither, the only one running (refused, naming them, when several run).
    RecordStop {
        /// Its id ([`RecordStatus::id`]; 0 is the start-up recording).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<u64>,
        /// Its file.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<PathBuf>,
    },
    /// The recordings running, in the reply's `recordings`.
    RecordList,
    /// Send the flight recording: the reply line has [`Reply::dump_bytes`], and that many
    /// bytes follow it — the dump, a recording whose first line is a
    /// [`DumpInfo`](crate::event::DumpInfo) — all within
    /// [`DUMP_DEADLINE`](super::DUMP_DEADLINE). The client writes the file (see docs/ctl.md).
    Dump,
    /// Report no new pins until `resume` (the hooks keep running; see docs/ctl.md).
    Pause,
    /// Report pins again.
    Resume,
}

impl Request {
    /// Reads a request line as its `Deserialize` does, except that a request that takes no
    /// fields (`status`, `record_list`, `dump`, `pause`, `resume`) is refused with one, as the
    /// others are with a field they do not know: serde's `deny_unknown_fields` does not reach
    /// a unit variant of an internally tagged enum, and `{"cmd":"pause","for":"10s"}` would
    /// otherwise pause for good, saying nothing of the `for`.
    pub fn from_line(line: &str) -> Result<Request, serde_json::Error> {
        let value: serde_json::Value = serde_json::from_str(line)?;
        let fields = value.as_object().map(|o| {
            let cmd = o.get("cmd").and_then(|c| c.as_str()).unwrap_or_default();
            (cmd.to_owned(), o.keys().find(|k| *k != "cmd").cloned())
        });
        let request: Request = serde_json::from_value(value)?;
        match (fields, &request) {
            (
                Some((cmd, Some(field))),
                Request::Status
                | Request::RecordList
                | Request::Dump
                | Request::Pause
                | Request::Resume,
            ) => Err(serde::de::Error::custom(format!(
                "unknown field `{field}`: `{cmd}` takes none"
            ))),
            _ => Ok(request),
        }
    }
}

/// A reply: `ok`, a sentence for people, and for `status` the status.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Reply {
    /// Whether the request was carried out.
    pub ok: bool,
    /// What happened, or what was wrong and what to do.
    #[serde(default)]
    pub message: String,
    /// For [`Request::Status`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Box<Status>>,
    /// For [`Request::RecordList`] (every recording running, oldest first), and for
    /// [`Request::RecordStart`] and [`Request::RecordStop`] (the one started or stopped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recordings: Option<Vec<RecordStatus>>,
    /// For [`Request::Dump`]: the bytes of the dump that follow the reply line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dump_bytes: Option<u64>,
}

impl Reply {
    pub(crate) fn ok(message: impl Into<String>) -> Reply {
        Reply {
            ok: true,
            message: message.into(),
            status: None,
            recordings: None,
            dump_bytes: None,
        }
    }

    pub(crate) fn error(message: impl Into<String>) -> Reply {
        Reply {
            ok: false,
            message: message.into(),
            status: None,
            recordings: None,
            dump_bytes: None,
        }
    }
}

/// A service's state, for `pinwatch ctl <pid> status`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Status {
    /// The service's process id.
    pub pid: u32,
    /// The control socket answering.
    pub socket: PathBuf,
    /// Its command line.
    pub command: String,
    /// pinwatch's version in it.
    pub version: String,
    /// The detector's run id (as in its events' `run_id`).
    pub run_id: String,
    /// Since the detector started, in ms.
    pub uptime_ms: u64,
    /// Where the runtime was built (`file:line`).
    pub built_at: String,
    /// `multi_thread` or `current_thread`.
    pub flavor: String,
    /// The runtime's workers.
    pub workers: usize,
    /// The settings in force, `(key, value)` in [`Settings::KEYS`](crate::config::Settings::KEYS)
    /// order.
    pub settings: Vec<(String, String)>,
    /// The watchdog's scan period in force, where it is shorter than `scan_interval` asks:
    /// never more than a quarter of the threshold
    /// ([`Settings::effective_scan_interval`](crate::config::Settings::effective_scan_interval)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan_interval_in_force: Option<String>,
    /// Whether reporting is paused.
    pub paused: bool,
    /// Why stacks cannot be sampled here whatever the settings, if so.
    pub stacks_unavailable: Option<String>,
    /// The oldest recording running, if any: kept for clients older than several recordings
    /// (which show this one); [`Status::recordings`] has them all.
    pub recording: Option<RecordStatus>,
    /// Every recording running, oldest first (the start-up one, id 0, first while it runs).
    /// Empty from services older than several recordings: then see [`Status::recording`].
    #[serde(default)]
    pub recordings: Vec<RecordStatus>,
    /// The pins running now, longest first.
    pub pinned: Vec<PinnedNow>,
    /// Top functions since start, each with its lines (pins counted once; running ones
    /// included), by total time.
    pub top: Vec<SummaryRow>,
    /// The detector's counters, as [`Stats`](crate::Stats) names them.
    pub counters: Vec<(String, u64)>,
}

/// A pin running now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PinnedNow {
    /// Its event id.
    pub id: u64,
    /// How long it has run, in ms.
    pub for_ms: u64,
    /// The worker it holds (`None`: a `block_on` body on a multi-thread runtime).
    pub worker: Option<usize>,
    /// The thread.
    pub tid: Option<i32>,
    /// tokio's task id (`None` for a `block_on` body).
    pub task_id: Option<u64>,
    /// Where the task was spawned (`file:line`).
    pub spawned_at: Option<String>,
    /// Why (`None` until the analysis of its first report is done).
    pub reason: Option<String>,
    /// The blocking system call or lock.
    pub blocking_operation: Option<String>,
    /// What usually fixes it (the event's `advice`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advice: Option<String>,
    /// The top application frame.
    pub top_frame: Option<String>,
    /// The service's own frame that called the library the top frame is in, when they differ
    /// ([`PinnedEvent::caller_frame`](crate::PinnedEvent::caller_frame)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub called_from: Option<String>,
    /// Instrumented locks it holds.
    pub held_locks: usize,
    /// The whole runtime is stalled now, while it runs (see docs/blast-radius.md).
    #[serde(default)]
    pub runtime_stalled: bool,
    /// What the pin did to the whole runtime, as its latest report says
    /// ([`PinnedEvent::stall_description`](crate::PinnedEvent::stall_description)): how long
    /// nobody drove its timers and I/O, who took them over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall: Option<String>,
    /// What to change in the runtime, as its latest report says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_advice: Option<String>,
    /// The request it pins: the innermost `tracing` span of the pinned poll with its fields
    /// (`request{method=GET uri=/report}`), bounded; `None` outside any span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<String>,
    /// That request's OpenTelemetry trace id (32 hex digits), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Who waited behind it so far, as its latest report says (its `victims`); `None` until
    /// one is known, and from services older than the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delayed: Option<Delayed>,
}

/// The tasks a running pin has delayed so far ([`PinnedNow::delayed`]): the event's
/// [`Victims`](crate::Victims) in brief.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Delayed {
    /// `true`: the waits were measured and `tasks` waited behind the pin; `false`: no wait was
    /// measured, and `tasks` are the tasks its worker ran next.
    pub measured: bool,
    /// Tasks delayed (measured), or run next (not measured).
    pub tasks: usize,
    /// The longest wait, in ms (measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wait_ms: Option<f64>,
    /// Them in words, the longest wait named
    /// ([`Victims::describe`](crate::Victims::describe)), bounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}
