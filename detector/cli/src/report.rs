//! `pinwatch report`: a recording as one self-contained HTML page — header, a timeline with a
//! lane per worker, hot locations, a flame graph of the pinned stacks weighted by pinned time,
//! and the reasons. No network: styles, script and SVG are inline.
//!
//! The page stays usable on big recordings: pins closer together than a pixel of the timeline
//! are drawn as one bar (with their count), and only single-pin bars carry the event's details.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pinwatch::profile::within_depth;
use pinwatch::recording::{latest_reports, summarize, SummaryRow, WhoWaited};
use pinwatch::{PinnedEvent, State};
use serde::Serialize;

/// Width of the timeline's plot, in SVG units (pixels at 100 %).
pub const PLOT_WIDTH: f64 = 1200.0;
/// Width of the lane labels left of the plot.
const LABEL_WIDTH: f64 = 230.0;
const LANE_HEIGHT: f64 = 22.0;
/// Frames of a stack kept in a pin's details.
pub const DETAIL_FRAMES: usize = 40;

/// What the page shows, computed from the events; serialised, it is the golden tests' input.
#[derive(Debug, Serialize)]
pub struct PageData {
    /// The file(s) it came from.
    pub source: String,
    /// Runs (detectors) in the recording, in order of their first event.
    pub runs: Vec<RunInfo>,
    /// First pin start to last pin end, ms since the epoch.
    pub span_start_ms: u64,
    /// See `span_start_ms`.
    pub span_end_ms: u64,
    /// From the first pin's start to the last pin's end, in ms (0.1 ms): what the timeline's
    /// width stands for. `span_end_ms - span_start_ms`, whole milliseconds each, was up to 1 ms
    /// off: the time span read 112.0 ms for a 112.3 ms pin, whose bar ran past the plot
    /// (helper-105).
    pub span_ms: f64,
    /// Pins (each counted once, by its last report) per state.
    pub completed: usize,
    /// See `completed`.
    pub in_progress: usize,
    /// See `completed`.
    pub retracted: usize,
    /// Worker time pinned, summed over pins that were not retracted, in ms.
    pub total_pinned_ms: f64,
    /// One lane per worker (per run).
    pub lanes: Vec<Lane>,
    /// Details of the pins drawn as bars of their own, by index.
    pub pins: Vec<PinView>,
    /// Hot locations (`pinwatch summary`'s rows).
    pub locations: Vec<SummaryRow>,
    /// Per reason: pins and total time, most time first.
    pub reasons: Vec<ReasonRow>,
    /// Per request (the outermost request-like span: method and route): pins, time and the
    /// innermost spans, most time first (`pinwatch summary`'s "by request" table); empty when
    /// no pin has spans.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<pinwatch::recording::RequestRow>,
    /// Who waited behind the completed pins, by where the tasks were spawned (`pinwatch
    /// summary`'s "who waited" table); left out when no pin says (a recording made before
    /// victims were recorded).
    #[serde(skip_serializing_if = "WhoWaited::is_empty")]
    pub most_delayed: WhoWaited,
    /// Warnings from reading the recording.
    pub warnings: Vec<String>,
}

/// A run: one detector's events.
#[derive(Debug, Serialize)]
pub struct RunInfo {
    /// The run id.
    pub run_id: String,
    /// The process.
    pub pid: u32,
    /// Pins.
    pub pins: usize,
    /// Thresholds its events were reported under, in ms.
    pub thresholds_ms: Vec<f64>,
}

/// A worker's lane.
#[derive(Debug, Serialize)]
pub struct Lane {
    /// `worker 0`, `block_on (tid 42)`, `thread 42`.
    pub label: String,
    /// The run's id, first 8 characters.
    pub run: String,
    /// Pins in it.
    pub pins: usize,
    /// Its bars, in time order.
    pub bars: Vec<Bar>,
}

/// One bar of a lane: a pin, or pins too close together to tell apart at this scale.
#[derive(Debug, Serialize)]
pub struct Bar {
    /// Start, ms after the span's start.
    pub start_ms: f64,
    /// End, ms after the span's start.
    pub end_ms: f64,
    /// The reason (of most pinned time, when several).
    pub reason: String,
    /// Pins in it.
    pub count: usize,
    /// The pin's index in [`PageData::pins`] when it is one pin.
    pub pin: Option<usize>,
    /// Still running at the end of the recording.
    pub open: bool,
}

/// A pin's details, shown when its bar is clicked.
#[derive(Debug, Serialize)]
pub struct PinView {
    /// Event id within its run.
    pub id: u64,
    /// Its run, first 8 characters.
    pub run: String,
    /// `completed` or `in_progress`.
    pub state: String,
    /// Start, RFC 3339.
    pub start: String,
    /// Duration at its last report, ms.
    pub duration_ms: f64,
    /// Task id (none for a `block_on` body).
    pub task: Option<u64>,
    /// Where the task was spawned.
    pub spawned_at: Option<String>,
    /// The worker.
    pub worker: String,
    /// Reason.
    pub reason: String,
    /// Blocking system call or lock.
    pub blocking_operation: Option<String>,
    /// What usually fixes it.
    pub advice: Option<String>,
    /// Top application frame.
    pub top_frame: Option<String>,
    /// The service's own frame, when it is not the top frame: the line that called the
    /// library where the time went.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub called_from: Option<String>,
    /// Locks held.
    pub held_locks: Vec<String>,
    /// Stack, innermost first (cut at [`DETAIL_FRAMES`]), or why there is none.
    pub stack: Vec<String>,
    /// The whole runtime stalled while it ran: for how long (nobody drove its drivers, or the
    /// heartbeat was late), in ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_stalled_ms: Option<f64>,
    /// What the pin did to the whole runtime ([`PinnedEvent::stall_description`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stall: Option<String>,
    /// What to change in the runtime ([`PinnedEvent::runtime_advice`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_advice: Option<String>,
    /// Tasks queued behind it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks_queued_behind: Option<usize>,
    /// The `tracing` spans it was in, outermost first, each as `name{field=value …}`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub spans: Vec<String>,
    /// Its request's OpenTelemetry trace id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The tasks that waited behind it ([`PinnedEvent::victims`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub victims: Option<VictimsView>,
}

/// The tasks that waited behind a pin, for its details.
#[derive(Debug, Serialize)]
pub struct VictimsView {
    /// Their waits were measured; else `worst` are the tasks the worker ran right after, with
    /// no wait.
    pub measured: bool,
    /// Measured: tasks delayed; not measured: tasks the worker ran right after.
    pub tasks: usize,
    /// Their waits added up (measured), as people read durations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_wait: Option<String>,
    /// The longest wait (measured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_wait: Option<String>,
    /// The most tasks in the worker's local run queue while the pin ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_depth_max: Option<usize>,
    /// The tasks named: the longest waits (measured), or the worker's next tasks.
    pub worst: Vec<VictimView>,
    /// Tasks counted but not named.
    pub unnamed: usize,
    /// Measured, but the pin held the runtime's timers and I/O
    /// ([`PinnedEvent::held_drivers`]): the tasks waiting on them were never woken, and are not
    /// counted.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub held_back: bool,
}

/// One task that waited behind a pin.
#[derive(Debug, Serialize)]
pub struct VictimView {
    /// tokio's task id.
    pub task: u64,
    /// How long it waited (measured only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait: Option<String>,
    /// Where it was spawned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spawned_at: Option<String>,
    /// The worker that polled it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<usize>,
    /// It waited in the pinned worker's LIFO slot.
    pub lifo: bool,
    /// Its spans, outermost first, each as `name{field=value …}`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub spans: Vec<String>,
}

fn victims_view(v: &pinwatch::Victims, held_drivers: bool) -> VictimsView {
    let human_d = |d: Duration| human(d.as_secs_f64() * 1e3);
    VictimsView {
        measured: v.measured,
        tasks: v.tasks,
        total_wait: v.total_wait.map(human_d),
        max_wait: v.max_wait.map(human_d),
        queue_depth_max: v.queue_depth_max,
        worst: v
            .worst
            .iter()
            .map(|w| VictimView {
                task: w.task_id,
                wait: w.wait.map(human_d),
                spawned_at: w.spawned_at.as_ref().map(ToString::to_string),
                worker: w.worker,
                lifo: w.lifo,
                spans: w.spans.iter().map(|s| s.display()).collect(),
            })
            .collect(),
        unnamed: if v.measured {
            v.tasks.saturating_sub(v.worst.len())
        } else {
            0
        },
        held_back: v.measured && held_drivers,
    }
}

/// A reason's share.
#[derive(Debug, Serialize)]
pub struct ReasonRow {
    /// Reason.
    pub reason: String,
    /// Pins.
    pub pins: usize,
    /// Total pinned time, ms.
    pub total_ms: f64,
}

fn ms_since_epoch(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs_f64()
        * 1e3
}

fn short(run: &str) -> String {
    run.chars().take(8).collect()
}

fn reason_of(e: &PinnedEvent) -> String {
    e.reason
        .map_or_else(|| "unknown".to_owned(), |r| r.to_string())
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// The page's data from a recording's events.
pub fn data(events: &[PinnedEvent], source: &str, warnings: &[String]) -> PageData {
    let pins = latest_reports(events);
    let mut runs: Vec<RunInfo> = Vec::new();
    // Where each run is in `runs`, and the thresholds it has: a crafted recording of many runs
    // or thresholds took a search of them all per pin (helper-105: 50,000 runs took 49 s).
    let mut run_at: HashMap<&str, usize> = HashMap::new();
    let mut thresholds: HashSet<(usize, u64)> = HashSet::new();
    for e in &pins {
        let i = *run_at.entry(e.run_id.as_str()).or_insert_with(|| {
            runs.push(RunInfo {
                run_id: e.run_id.clone(),
                pid: e.pid,
                pins: 0,
                thresholds_ms: Vec::new(),
            });
            runs.len() - 1
        });
        let run = &mut runs[i];
        run.pins += 1;
        let t = round1(e.threshold.as_secs_f64() * 1e3);
        if thresholds.insert((i, t.to_bits())) {
            run.thresholds_ms.push(t);
        }
    }
    let shown: Vec<&PinnedEvent> = pins
        .iter()
        .copied()
        .filter(|e| e.state != State::Retracted)
        .collect();
    let start = |e: &PinnedEvent| ms_since_epoch(e.start);
    let end = |e: &PinnedEvent| start(e) + e.duration.as_secs_f64() * 1e3;
    let span_start = shown.iter().map(|e| start(e)).fold(f64::INFINITY, f64::min);
    let span_end = shown.iter().map(|e| end(e)).fold(0.0, f64::max);
    let (span_start, span_end) = if shown.is_empty() {
        (0.0, 0.0)
    } else {
        (span_start, span_end)
    };
    // One pixel of the plot, in ms: pins closer than that merge into one bar.
    let pixel = ((span_end - span_start) / PLOT_WIDTH).max(1e-9);
    // Where each run's last pin ended: a pin still running at its run's last report (the
    // process killed) is drawn to there, not into the runs after it (helper-105: a 26 ms pin of
    // a killed run filled the timeline of a recording two hours long).
    let mut run_end: HashMap<&str, f64> = HashMap::new();
    for e in &shown {
        let t = run_end
            .entry(e.run_id.as_str())
            .or_insert(f64::NEG_INFINITY);
        *t = t.max(end(e));
    }

    // One lane per worker of each run (a `block_on` body, or a thread that is no worker, has
    // its own), ordered by run (in order of first appearance), worker index, then thread.
    let run_index: HashMap<&str, usize> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| (r.run_id.as_str(), i))
        .collect();
    // (run, not a worker, worker index, thread of a non-worker, block_on body)
    type LaneKey = (usize, bool, Option<usize>, i32, bool);
    let mut by_lane: BTreeMap<LaneKey, Vec<&PinnedEvent>> = BTreeMap::new();
    for e in &shown {
        let run = run_index
            .get(e.run_id.as_str())
            .copied()
            .unwrap_or(usize::MAX);
        let key = match e.worker.index {
            Some(i) => (run, false, Some(i), 0, false),
            None => (run, true, None, e.worker.tid, e.block_on),
        };
        by_lane.entry(key).or_default().push(e);
    }
    let mut lanes: Vec<Lane> = Vec::new();
    let mut details: Vec<PinView> = Vec::new();
    for mut pins in by_lane.into_values() {
        let first = pins[0];
        let mut lane = Lane {
            label: match (first.worker.index, first.block_on) {
                (Some(i), _) => format!("worker {i}"),
                (None, true) => format!("block_on (tid {})", first.worker.tid),
                (None, false) => format!("thread {}", first.worker.tid),
            },
            run: short(&first.run_id),
            pins: pins.len(),
            bars: Vec::new(),
        };
        pins.sort_by(|a, b| start(a).total_cmp(&start(b)));
        // Runs of pins closer than a pixel, then one bar per run.
        let mut group: Vec<&PinnedEvent> = Vec::new();
        let mut group_end = f64::NEG_INFINITY;
        let mut flush = |group: &mut Vec<&PinnedEvent>, bars: &mut Vec<Bar>| {
            if group.is_empty() {
                return;
            }
            let s = group.iter().map(|e| start(e)).fold(f64::INFINITY, f64::min);
            let t = group.iter().map(|e| end(e)).fold(0.0, f64::max);
            let mut by_reason: BTreeMap<String, f64> = BTreeMap::new();
            for e in group.iter() {
                *by_reason.entry(reason_of(e)).or_default() += e.duration.as_secs_f64();
            }
            let reason = by_reason
                .iter()
                .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(a.0)))
                .map(|(r, _)| r.clone())
                .unwrap_or_default();
            let open = group.iter().any(|e| e.state == State::InProgress);
            let open_to = run_end.get(group[0].run_id.as_str()).copied().unwrap_or(t);
            let pin = (group.len() == 1).then(|| {
                details.push(view(group[0]));
                details.len() - 1
            });
            bars.push(Bar {
                start_ms: round1(s - span_start),
                end_ms: round1(if open { open_to.max(t) } else { t } - span_start),
                reason,
                count: group.len(),
                pin,
                open,
            });
            group.clear();
        };
        for e in pins {
            if !group.is_empty() && start(e) - group_end >= pixel {
                flush(&mut group, &mut lane.bars);
                group_end = f64::NEG_INFINITY;
            }
            group_end = group_end.max(end(e));
            group.push(e);
        }
        flush(&mut group, &mut lane.bars);
        lanes.push(lane);
    }

    let mut reasons: BTreeMap<String, (usize, f64)> = BTreeMap::new();
    for e in &shown {
        let r = reasons.entry(reason_of(e)).or_default();
        r.0 += 1;
        r.1 += e.duration.as_secs_f64() * 1e3;
    }
    let mut reasons: Vec<ReasonRow> = reasons
        .into_iter()
        .map(|(reason, (pins, total))| ReasonRow {
            reason,
            pins,
            total_ms: round1(total),
        })
        .collect();
    reasons.sort_by(|a, b| {
        b.total_ms
            .total_cmp(&a.total_ms)
            .then(a.reason.cmp(&b.reason))
    });
    let count = |s: State| pins.iter().filter(|e| e.state == s).count();
    PageData {
        source: source.to_owned(),
        runs,
        span_start_ms: span_start as u64,
        span_end_ms: span_end as u64,
        span_ms: round1(span_end - span_start),
        completed: count(State::Completed),
        in_progress: count(State::InProgress),
        retracted: count(State::Retracted),
        total_pinned_ms: round1(
            shown
                .iter()
                .map(|e| e.duration.as_secs_f64() * 1e3)
                .sum::<f64>(),
        ),
        lanes,
        pins: details,
        locations: summarize(events),
        reasons,
        requests: pinwatch::recording::summarize_requests(events),
        most_delayed: pinwatch::recording::who_waited(events),
        warnings: warnings.to_vec(),
    }
}

fn view(e: &PinnedEvent) -> PinView {
    let stack = if e.stack.is_empty() {
        vec![pinwatch::recording::no_stack(e)]
    } else {
        let mut s: Vec<String> = e
            .stack
            .iter()
            .take(DETAIL_FRAMES)
            .map(|f| {
                if f.locks > 0 {
                    format!("{f}  <== locks:{}", f.locks)
                } else {
                    f.to_string()
                }
            })
            .collect();
        if e.stack.len() > DETAIL_FRAMES {
            s.push(format!("… {} more", e.stack.len() - DETAIL_FRAMES));
        }
        s
    };
    PinView {
        id: e.id,
        run: short(&e.run_id),
        state: e.state.as_str().to_owned(),
        start: pinwatch::recording::format_time(e.start),
        duration_ms: round1(e.duration.as_secs_f64() * 1e3),
        task: e.task_id,
        spawned_at: e.spawned_at.as_ref().map(|l| l.to_string()),
        worker: match e.worker.index {
            Some(i) => format!("worker {i} (tid {}, {})", e.worker.tid, e.worker.name),
            None => format!("tid {} ({})", e.worker.tid, e.worker.name),
        },
        reason: reason_of(e),
        blocking_operation: e.blocking_operation.clone(),
        advice: e.advice.clone(),
        called_from: e.caller_frame().map(|f| f.to_string()),
        top_frame: Some(
            e.top_frame
                .as_ref()
                .map_or_else(|| pinwatch::recording::no_top_frame(e), |f| f.to_string()),
        ),
        runtime_stalled_ms: e.runtime_stalled.then(|| {
            round1(
                e.drivers
                    .as_ref()
                    .map_or(e.heartbeat_late.unwrap_or_default(), |d| d.undriven)
                    .as_secs_f64()
                    * 1e3,
            )
        }),
        stall: e.stall_description(),
        runtime_advice: e.runtime_advice.clone(),
        tasks_queued_behind: e.tasks_queued_behind,
        spans: e.spans.iter().map(|s| s.display()).collect(),
        trace_id: e.trace_id.clone(),
        victims: e
            .victims
            .as_ref()
            .map(|v| victims_view(v, e.held_drivers())),
        held_locks: e
            .held_locks
            .iter()
            .map(|l| format!("{} acquired at {}", l.kind, l.acquired_at))
            .collect(),
        stack,
    }
}

/// The folded stacks of the flame graph: one line per distinct stack, outermost frame first,
/// weighted by pinned time in µs. A pin with no stack counts under its top frame, or under
/// `[no stack]`, so that all pinned time is there. When the weights add up past what inferno
/// sums (a `u64`; only a crafted recording gets there: 292,000 years), they are all divided by
/// one factor, keeping their proportions.
pub fn folded(events: &[PinnedEvent]) -> Vec<String> {
    // u128: no sum of `Duration`s in µs can overflow it.
    let mut weights: BTreeMap<String, u128> = BTreeMap::new();
    for e in latest_reports(events) {
        if e.state == State::Retracted {
            continue;
        }
        let frame = |f: &pinwatch::event::Frame| folded_frame(&f.to_string());
        let stack = if !e.stack.is_empty() {
            // At most as deep as a profile's: pinwatch never writes deeper stacks, and a
            // crafted one (a million frames in 3 MB) made a page of 227 MB (helper-105).
            let (kept, outer) = within_depth(&e.stack);
            outer
                .into_iter()
                .chain(kept.iter().rev().map(frame))
                .collect::<Vec<_>>()
                .join(";")
        } else {
            let why = format!(
                "[no stack: {}]",
                folded_frame(e.no_stack.as_deref().unwrap_or("not sampled"))
            );
            match &e.top_frame {
                Some(f) => format!("{why};{}", frame(f)),
                None => format!("{why};[{}]", reason_of(e)),
            }
        };
        *weights.entry(stack).or_default() += e.duration.as_micros().max(1);
    }
    let total: u128 = weights.values().sum();
    // Headroom for the `max(1)` of each line.
    let limit = u128::from(u64::MAX / 2);
    let divisor = if total > limit { total / limit + 1 } else { 1 };
    weights
        .into_iter()
        .map(|(stack, us)| format!("{stack} {}", (us / divisor).max(1)))
        .collect()
}

/// A frame's text as a folded stack's element: a `;` would split it into two frames, and a
/// space before a number at the end of a line would be read as a sample count (inferno reads
/// `stack N M` as a differential line), so `;` is written `:`, line breaks and tabs are
/// spaces, and a space before a digit or `.` is a no-break space. Then escaped, as all of the
/// recording's text on the page ([`pinwatch::text::escape`]: no `;` or space comes of it).
fn folded_frame(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let c = match c {
            ';' => ':',
            c if c.is_whitespace() => {
                if chars
                    .peek()
                    .is_some_and(|n| n.is_ascii_digit() || *n == '.')
                {
                    '\u{a0}'
                } else {
                    ' '
                }
            }
            c => c,
        };
        out.push(c);
    }
    pinwatch::text::escape(&out)
}

/// The flame graph as an `<svg>` element (inferno's, without its script: each frame's title
/// says its time).
pub fn flame_graph(events: &[PinnedEvent]) -> Result<String, String> {
    let lines = folded(events);
    if lines.is_empty() {
        return Ok("<p class=\"empty\">No pinned stacks.</p>".to_owned());
    }
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = "Pinned time by stack".to_owned();
    opts.count_name = "µs pinned".to_owned();
    opts.no_javascript = true;
    opts.image_width = Some(1400);
    opts.deterministic = true;
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut svg)
        .map_err(|e| format!("cannot draw the flame graph: {e}"))?;
    let svg = String::from_utf8_lossy(&svg);
    // Inline in HTML: from the <svg> element on (no XML prologue, no DOCTYPE).
    let at = svg.find("<svg").ok_or("inferno made no <svg>")?;
    let svg = &svg[at..];
    // inferno's head, before the frames (the only part that holds a recording's text), still
    // calls and labels its script when told to leave the script out: `onload="init(evt)"`
    // (an error in every page), a script of settings, and "Search", "Reset Zoom" and the
    // details line, which nothing would answer. Taken out.
    let frames = svg
        .find("<svg id=\"frames\"")
        .ok_or("inferno made no frames")?;
    let mut head = svg[..frames].replacen(" onload=\"init(evt)\"", "", 1);
    if let (Some(a), Some(b)) = (head.find("<script"), head.find("</script>")) {
        head.replace_range(a..b + "</script>".len(), "");
    }
    for id in ["details", "unzoom", "search", "matched"] {
        let open = format!("<text id=\"{id}\"");
        if let Some(a) = head.find(&open) {
            if let Some(len) = head[a..].find("</text>") {
                head.replace_range(a..a + len + "</text>".len(), "");
            }
        }
    }
    Ok(format!(
        "{}{}",
        head.replacen("<svg", "<svg id=\"flamegraph\"", 1),
        &svg[frames..]
    ))
}

/// JSON text safe to embed in a `<script>` element ([`pinwatch::text::script_json`]).
pub fn script_json(json: &str) -> String {
    pinwatch::text::script_json(json)
}

/// Text from the recording for element content and attribute values: escaped as pinwatch
/// shows such text everywhere ([`pinwatch::text::escape`]: no control or bidirectional
/// character reaches the page), then HTML-escaped ([`pinwatch::text::html`]).
fn esc(s: &str) -> String {
    pinwatch::text::html(&pinwatch::text::escape(s))
}

/// A reason's colour, the same everywhere on the page.
pub fn color(reason: &str) -> &'static str {
    match reason {
        "cpu" => "#e15759",
        "sleep" => "#4e79a7",
        "io" => "#f28e2b",
        "dns" => "#d37295",
        "lock_wait" => "#59a14f",
        "lock_held" => "#76b7b2",
        "once_init" => "#edc948",
        "once_wait" => "#ff9da7",
        "other" => "#b07aa1",
        _ => "#9c755f",
    }
}

fn human(ms: f64) -> String {
    pinwatch::recording::human_ms(ms)
}

/// The whole page.
pub fn render(events: &[PinnedEvent], source: &str, warnings: &[String]) -> Result<String, String> {
    let d = data(events, source, warnings);
    let flame = flame_graph(events)?;
    let mut h = String::new();
    let span = d.span_ms;
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>pinwatch report — {}</title><style>{STYLE}</style></head><body>\n",
        esc(source)
    );
    // Header.
    let _ = write!(
        h,
        "<header><h1>pinwatch report</h1><p class=\"sub\">{}</p><dl id=\"summary\">",
        esc(source)
    );
    let fmt_time = |ms: u64| match UNIX_EPOCH.checked_add(Duration::from_millis(ms)) {
        Some(t) => pinwatch::recording::format_time(t),
        None => format!("{ms} ms after the epoch"),
    };
    let item = |h: &mut String, k: &str, v: String| {
        let _ = write!(h, "<div><dt>{}</dt><dd>{v}</dd></div>", esc(k));
    };
    item(
        &mut h,
        "runs",
        d.runs
            .iter()
            .map(|r| {
                format!(
                    "<span class=\"run\">{} (pid {}, {} pin{}, threshold {} ms)</span>",
                    esc(&short(&r.run_id)),
                    r.pid,
                    r.pins,
                    if r.pins == 1 { "" } else { "s" },
                    r.thresholds_ms
                        .iter()
                        .map(|t| t.to_string())
                        .collect::<Vec<_>>()
                        .join(" / ")
                )
            })
            .collect::<Vec<_>>()
            .join(" "),
    );
    if d.lanes.is_empty() {
        item(&mut h, "time span", "no pins".to_owned());
    } else {
        item(
            &mut h,
            "time span",
            format!(
                "{} → {} ({})",
                fmt_time(d.span_start_ms),
                fmt_time(d.span_end_ms),
                human(span)
            ),
        );
    }
    // The lanes: the threads that pinned, each run's apart (not the runtime's worker count).
    item(&mut h, "threads with pins", d.lanes.len().to_string());
    item(
        &mut h,
        "pins",
        format!(
            "{} completed, {} in progress, {} retracted (block_in_place)",
            d.completed, d.in_progress, d.retracted
        ),
    );
    item(
        &mut h,
        "worker time pinned",
        format!("<b id=\"total\">{}</b>", human(d.total_pinned_ms)),
    );
    h.push_str("</dl>");
    for w in &d.warnings {
        let _ = write!(h, "<p class=\"warning\">warning: {}</p>", esc(w));
    }
    h.push_str("</header>\n");

    // Timeline.
    let height = d.lanes.len() as f64 * LANE_HEIGHT + 30.0;
    let _ = write!(
        h,
        "<section id=\"timeline\"><h2>Timeline</h2><p class=\"hint\">One lane per worker; a bar \
         per pin, from its start to its end (a pin still running at the end of the recording \
         runs to the edge, striped). Pins closer than a pixel share a bar (its count shows). \
         Click a bar.</p><div class=\"legend\">"
    );
    for r in &d.reasons {
        let _ = write!(
            h,
            "<span><i style=\"background:{}\"></i>{}</span>",
            color(&r.reason),
            esc(&r.reason)
        );
    }
    let _ = write!(
        h,
        "</div><svg id=\"lanes\" viewBox=\"0 0 {} {height}\" width=\"100%\" \
         preserveAspectRatio=\"xMinYMin meet\" xmlns=\"http://www.w3.org/2000/svg\">\
         <defs><pattern id=\"open\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" \
         patternTransform=\"rotate(45)\"><rect width=\"3\" height=\"6\" fill=\"#fff\" \
         opacity=\"0.5\"/></pattern></defs>",
        LABEL_WIDTH + PLOT_WIDTH + 10.0
    );
    // Time axis: five ticks.
    for k in 0..=4 {
        let x = LABEL_WIDTH + PLOT_WIDTH * k as f64 / 4.0;
        let _ = write!(
            h,
            "<line class=\"tick\" x1=\"{x}\" x2=\"{x}\" y1=\"0\" y2=\"{}\"/>\
             <text class=\"axis\" x=\"{x}\" y=\"{}\">+{}</text>",
            height - 16.0,
            height - 4.0,
            esc(&human(span * k as f64 / 4.0))
        );
    }
    let scale = if span > 0.0 { PLOT_WIDTH / span } else { 0.0 };
    for (i, lane) in d.lanes.iter().enumerate() {
        let y = i as f64 * LANE_HEIGHT;
        let _ = write!(
            h,
            "<g class=\"lane\" data-run=\"{}\" data-worker=\"{}\"><text class=\"label\" x=\"4\" \
             y=\"{}\">{} · {}</text>",
            esc(&lane.run),
            esc(&lane.label),
            y + 15.0,
            esc(&lane.run),
            esc(&lane.label)
        );
        for b in &lane.bars {
            let x = LABEL_WIDTH + b.start_ms * scale;
            let w = ((b.end_ms - b.start_ms) * scale).max(1.5);
            let pin = b
                .pin
                .map_or(String::new(), |p| format!(" data-pin=\"{p}\""));
            let title = if b.count == 1 {
                format!("{} · {}", b.reason, human(b.end_ms - b.start_ms))
            } else {
                format!("{} pins, mostly {}", b.count, b.reason)
            };
            let _ = write!(
                h,
                "<rect class=\"bar\" x=\"{x:.2}\" y=\"{}\" width=\"{w:.2}\" height=\"{}\" \
                 fill=\"{}\" data-count=\"{}\" data-reason=\"{}\" data-start=\"{}\" \
                 data-end=\"{}\"{pin}><title>{}</title></rect>",
                y + 3.0,
                LANE_HEIGHT - 6.0,
                color(&b.reason),
                b.count,
                esc(&b.reason),
                b.start_ms,
                b.end_ms,
                esc(&title)
            );
            if b.open {
                let _ = write!(
                    h,
                    "<rect class=\"open\" x=\"{x:.2}\" y=\"{}\" width=\"{w:.2}\" height=\"{}\" \
                     fill=\"url(#open)\" pointer-events=\"none\"/>",
                    y + 3.0,
                    LANE_HEIGHT - 6.0
                );
            }
        }
        h.push_str("</g>");
    }
    h.push_str(
        "</svg><div id=\"detail\" class=\"detail\">Click a bar to see its pin.</div></section>\n",
    );

    // Hot locations.
    h.push_str(
        "<section id=\"locations\"><h2>Hot locations</h2><p class=\"hint\">By the function of \
         your code that pinned (its own frame, else the top application frame), its lines under \
         it with the library each called; click a column to sort.</p><table id=\"hot\" class=\"sortable\"><thead><tr>\
         <th data-type=\"num\">Pins</th><th data-type=\"num\">Total</th>\
         <th data-type=\"num\">Longest</th><th>Reasons</th><th>Location</th></tr></thead>",
    );
    // A function's row and its lines' rows make one <tbody>: the script sorts the functions
    // (and each one's lines) and a line never leaves its function.
    let row = |h: &mut String, r: &SummaryRow, class: &str, name: String| {
        let reasons: Vec<String> = r
            .reasons
            .iter()
            .map(|(name, n)| {
                format!(
                    "<span class=\"tag\" style=\"border-color:{}\">{} {n}</span>",
                    color(name),
                    esc(name)
                )
            })
            .collect();
        let _ = write!(
            h,
            "<tr class=\"{class}\"><td data-v=\"{}\">{}{}</td><td data-v=\"{}\">{}</td>\
             <td data-v=\"{}\">{}</td><td>{}</td><td class=\"frame\">{}{}</td></tr>",
            r.count,
            r.count,
            if r.in_progress > 0 {
                format!(" ({} running)", r.in_progress)
            } else {
                String::new()
            },
            r.total_ms,
            human(r.total_ms),
            r.longest_ms,
            human(r.longest_ms),
            reasons.join(" "),
            esc(&name),
            if class == "fn" {
                std::iter::once(&r.advice)
                    .chain(&r.more_advice)
                    .filter(|a| !a.is_empty())
                    .map(|a| format!("<div class=\"hint\">{}</div>", esc(a)))
                    .collect::<String>()
            } else {
                String::new()
            }
        );
    };
    for r in &d.locations {
        h.push_str("<tbody class=\"fn\">");
        row(&mut h, r, "fn", r.frame.clone());
        for l in &r.lines {
            let at = if l.via.is_empty() {
                l.at.clone()
            } else {
                format!("{} {}", l.at, l.via)
            };
            row(&mut h, l, "line", at);
        }
        h.push_str("</tbody>");
    }
    h.push_str("</table></section>\n");

    // Flame graph.
    let _ = writeln!(
        h,
        "<section id=\"flame\"><h2>Where the workers' time went</h2><p class=\"hint\">Pinned \
         stacks, outermost frame at the bottom, widths by pinned time; hover a frame for its \
         time. Pins without a stack count under <code>[no stack: …]</code>.</p>{flame}</section>"
    );

    // Reasons.
    h.push_str("<section id=\"reasons\"><h2>Reasons</h2><table id=\"reason-table\"><thead><tr><th>Reason</th><th>Pins</th><th>Total</th><th></th></tr></thead><tbody>");
    let max = d.reasons.iter().map(|r| r.total_ms).fold(0.0, f64::max);
    for r in &d.reasons {
        let pct = if max > 0.0 {
            r.total_ms / max * 100.0
        } else {
            0.0
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"barcell\"><div style=\"width:{pct:.1}%;background:{}\"></div></td></tr>",
            esc(&r.reason),
            r.pins,
            human(r.total_ms),
            color(&r.reason)
        );
    }
    h.push_str("</tbody></table></section>\n");

    // By request: which route pinned (only with spans in the recording).
    if !d.requests.is_empty() {
        h.push_str("<section id=\"requests\"><h2>By request</h2><p class=\"hint\">Pins by the request they served: the outermost request-like <code>tracing</code> span, as method and route (<code>http.route</code>, else the <code>uri</code>'s path with ids made <code>{id}</code>), and the innermost spans the pins were in: which route pins most, and where in it.</p><table id=\"request-table\"><thead><tr><th>Request</th><th>Pins</th><th>Longest</th><th>Total</th><th>Innermost spans</th></tr></thead><tbody>");
        for r in &d.requests {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&r.request),
                r.count,
                human(r.longest_ms),
                human(r.total_ms),
                esc(&pinwatch::recording::innermost_cell(&r.innermost))
            );
        }
        h.push_str("</tbody></table></section>\n");
    }

    // Most delayed: who waited behind the pins.
    h.push_str(
        "<section id=\"delayed\"><h2>Most delayed</h2><p class=\"hint\">The tasks that waited \
         behind the completed pins, by where they were spawned (and the outermost span they \
         ran in): how many times one waited, for how long, behind how many pins, and how often \
         in the pinned worker's LIFO slot (which no other worker may steal from).</p>",
    );
    let who = &d.most_delayed;
    match pinwatch::recording::who_waited_note(who) {
        Some(note) => {
            let _ = write!(
                h,
                "<p class=\"empty\" id=\"delayed-note\">{}.</p>",
                esc(&note)
            );
        }
        None => {
            h.push_str(
                "<table id=\"delayed-table\"><thead><tr><th>Spawned at</th><th>Outermost \
                 span</th><th>Tasks</th><th>Total wait</th><th>Max wait</th><th>Pins</th>\
                 <th>LIFO</th></tr></thead><tbody>",
            );
            for r in &who.rows {
                let _ = write!(
                    h,
                    "<tr><td class=\"frame\">{}</td><td>{}</td><td>{}</td><td>{}</td>\
                     <td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&r.spawned_at),
                    if r.span.is_empty() {
                        "-".to_owned()
                    } else {
                        esc(&r.span)
                    },
                    r.tasks,
                    human(r.total_wait_ms),
                    human(r.max_wait_ms),
                    r.pins,
                    r.lifo
                );
            }
            h.push_str("</tbody></table>");
            if who.unnamed_tasks > 0 {
                let _ = write!(
                    h,
                    "<p class=\"hint\">And {} more delayed tasks, {} of waiting, not named (a \
                     pin names its longest waits only).</p>",
                    who.unnamed_tasks,
                    human(who.unnamed_wait_ms)
                );
            }
            if who.unmeasured_pins > 0 {
                let _ = write!(
                    h,
                    "<p class=\"hint\">{} completed pin{} did not measure waits: not counted \
                     here.</p>",
                    who.unmeasured_pins,
                    if who.unmeasured_pins == 1 { "" } else { "s" }
                );
            }
        }
    }
    h.push_str("</section>\n");

    // The pins' details, for the script: its strings escaped as everywhere else (the script
    // shows them as text, and JSON would carry a control or bidirectional character through).
    let mut pins = serde_json::to_value(&d.pins).map_err(|e| e.to_string())?;
    pinwatch::text::escape_json_strings(&mut pins);
    let pins = script_json(&serde_json::to_string(&pins).map_err(|e| e.to_string())?);
    let _ = write!(
        h,
        "<script type=\"application/json\" id=\"pins\">{pins}</script>\n<script>{SCRIPT}</script>\n</body></html>\n"
    );
    Ok(h)
}

const STYLE: &str = r#"
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 24px 40px;color:#222}
h1{margin:16px 0 0;font-size:22px}h2{font-size:17px;margin:28px 0 6px;border-bottom:1px solid #ddd}
.sub{color:#666;margin:2px 0 8px}.hint{color:#666;margin:2px 0 8px;font-size:13px}
dl#summary{display:flex;flex-wrap:wrap;gap:6px 28px;margin:8px 0}dl#summary div{min-width:120px}
dt{color:#666;font-size:12px}dd{margin:0}.run{display:inline-block;margin-right:10px;font-family:monospace}
.warning{color:#a40;background:#fff3e0;padding:4px 8px}
.legend span{margin-right:14px;font-size:12px}.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-2px}
svg#lanes{border:1px solid #eee;background:#fafafa}svg#lanes .label{font:11px monospace;fill:#333}
svg#lanes .axis{font:10px sans-serif;fill:#777;text-anchor:middle}svg#lanes .tick{stroke:#e4e4e4}
svg#lanes .bar{cursor:pointer}svg#lanes .bar:hover,svg#lanes .bar.selected{stroke:#000;stroke-width:1.5}
.detail{font:12px/1.45 monospace;white-space:pre-wrap;background:#f6f8fa;border:1px solid #e1e4e8;padding:8px 10px;margin-top:8px;min-height:40px}
table{border-collapse:collapse;font-size:13px}th,td{padding:3px 10px;text-align:left;border-bottom:1px solid #eee}
th{background:#f3f3f3;cursor:pointer;user-select:none}th.asc:after{content:" ▲"}th.desc:after{content:" ▼"}
td.frame{font-family:monospace;font-size:12px}tbody.fn{border-top:2px solid #ddd}
tr.line td{color:#555;font-size:12px}tr.line td.frame{padding-left:32px}.tag{border-left:4px solid;padding:0 4px;margin-right:4px;background:#f7f7f7}
td.barcell{width:300px}td.barcell div{height:12px}
svg#flamegraph{width:100%;height:auto}.empty{color:#666}
"#;

const SCRIPT: &str = r#"
(function(){
var pins=JSON.parse(document.getElementById('pins').textContent);
var detail=document.getElementById('detail');
function show(bar){
  document.querySelectorAll('.bar.selected').forEach(function(b){b.classList.remove('selected');});
  bar.classList.add('selected');
  var p=bar.getAttribute('data-pin');
  var lane=bar.parentNode;
  var head=lane.getAttribute('data-run')+' · '+lane.getAttribute('data-worker');
  if(p===null){
    detail.textContent=head+'\n'+bar.getAttribute('data-count')+' pins too close together to draw apart, from +'+
      bar.getAttribute('data-start')+' ms to +'+bar.getAttribute('data-end')+' ms; mostly '+bar.getAttribute('data-reason')+
      '.\nSee the hot locations and the flame graph for them.';
    return;
  }
  var e=pins[+p];
  var lines=[head,
    'pin '+e.id+' ('+e.state+'), '+e.duration_ms+' ms from '+e.start,
    'task:      '+(e.task===null?'the block_on body':e.task)+(e.spawned_at?'  spawned at '+e.spawned_at:''),
    'worker:    '+e.worker,
    'reason:    '+e.reason+(e.blocking_operation?'  ('+e.blocking_operation+')':''),
    'top frame: '+(e.top_frame||'-')];
  if(e.called_from){lines.push('called from: '+e.called_from);}
  if(e.advice){lines.push('advice:    '+e.advice);}
  if(e.held_locks.length){lines.push('holds:     '+e.held_locks.join('; '));}
  if(e.stall){lines.push('STALLED:   '+e.stall);}
  if(e.runtime_advice){lines.push('runtime:   '+e.runtime_advice);}
  if(e.tasks_queued_behind){lines.push('queued:    '+e.tasks_queued_behind+' tasks behind it');}
  if(e.spans&&e.spans.length){lines.push('spans:     '+e.spans.join(' > '));}
  if(e.trace_id){lines.push('trace:     '+e.trace_id);}
  var v=e.victims;
  if(v){
    var head;
    if(v.measured){
      head=v.tasks+' task'+(v.tasks===1?'':'s')+' waited behind it (measured'+(v.held_back?'; not counting tasks whose timers or I/O the pin held back':'')+')';
      var waits=[];
      if(v.total_wait){waits.push(v.total_wait+' in all');}
      if(v.max_wait){waits.push('the longest '+v.max_wait);}
      if(waits.length){head+=': '+waits.join(', ');}
    }else{
      head='not measured: the worker ran '+v.tasks+' of the service\'s tasks right after it (no wait known)';
    }
    if(v.queue_depth_max!==undefined){head+='; local run queue up to '+v.queue_depth_max;}
    lines.push('victims:   '+head);
    v.worst.forEach(function(w){
      var l='  '+(w.wait?'waited '+w.wait+': ':'')+'task '+w.task;
      if(w.spawned_at){l+=' spawned at '+w.spawned_at;}
      if(w.worker!==undefined){l+=', polled by worker '+w.worker;}
      if(w.lifo){l+=' [LIFO slot]';}
      if(w.spans){l+='  in '+w.spans.join(' > ');}
      lines.push(l);
    });
    if(v.unnamed){lines.push('  … and '+v.unnamed+' more, not named');}
  }
  lines.push('stack:');
  e.stack.forEach(function(f){lines.push('  '+f);});
  detail.textContent=lines.join('\n');
}
document.querySelectorAll('#lanes .bar').forEach(function(b){b.addEventListener('click',function(){show(b);});});
function sortBy(table,col,dir){
  var th=table.tHead.rows[0].cells[col];
  var num=th.getAttribute('data-type')==='num';
  function cmp(a,b){
    var x=a.cells[col],y=b.cells[col];
    var u=num?parseFloat(x.getAttribute('data-v')):x.textContent;
    var v=num?parseFloat(y.getAttribute('data-v')):y.textContent;
    return (u<v?-1:u>v?1:0)*dir;
  }
  // Each <tbody> is a function (its first row) and its lines: the functions are sorted, and
  // each one's lines among themselves.
  var groups=Array.prototype.slice.call(table.tBodies);
  groups.forEach(function(g){
    var lines=Array.prototype.slice.call(g.rows,1);
    lines.sort(cmp);
    lines.forEach(function(r){g.appendChild(r);});
  });
  groups.sort(function(a,b){return cmp(a.rows[0],b.rows[0]);});
  groups.forEach(function(g){table.appendChild(g);});
  Array.prototype.forEach.call(table.tHead.rows[0].cells,function(c){c.classList.remove('asc','desc');});
  th.classList.add(dir>0?'asc':'desc');
}
document.querySelectorAll('table.sortable').forEach(function(t){
  Array.prototype.forEach.call(t.tHead.rows[0].cells,function(th,i){
    th.addEventListener('click',function(){sortBy(t,i,th.classList.contains('desc')?1:-1);});
  });
});
// Deep links: #pin=N opens the details of pin N (the id its details and `pinwatch print` show;
// in a recording of several runs, the first run's, or run R's with &run=R as the lanes name
// it); #sort=COL,asc|desc sorts the hot locations.
var hash=new URLSearchParams(location.hash.slice(1));
// The hash is anyone's text: it is only compared with the pins' ids and runs, never put in a
// selector; only a column that exists is sorted.
var pin=hash.get('pin'),run=hash.get('run');
if(pin!==null&&/^[0-9]{1,19}$/.test(pin)){
  // A bar's data-pin is its pin's index in the details, not the pin's id.
  var found=Array.prototype.find.call(document.querySelectorAll('#lanes .bar[data-pin]'),function(b){
    var e=pins[+b.getAttribute('data-pin')];
    return e.id===+pin&&(run===null||e.run===run);
  });
  if(found){show(found);}
}
if(hash.has('sort')){
  var s=hash.get('sort').split(','),hot=document.getElementById('hot');
  var col=/^[0-9]{1,3}$/.test(s[0])?+s[0]:-1;
  if(col>=0&&col<hot.tHead.rows[0].cells.length){sortBy(hot,col,s[1]==='asc'?1:-1);}
}
})();
"#;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every reason has a colour of its own, not the fallback's.
    #[test]
    fn every_reason_has_its_own_colour() {
        let mut seen = std::collections::BTreeSet::new();
        for r in pinwatch::Reason::ALL {
            let c = color(r.as_str());
            assert_ne!(c, color("no such reason"), "{r} has the fallback colour");
            assert!(seen.insert(c), "{r} shares its colour {c}");
        }
    }

    fn events() -> Vec<PinnedEvent> {
        let text = include_str!("../tests/data/report-small.jsonl");
        pinwatch::recording::parse_recording(text, "report-small.jsonl")
            .unwrap()
            .events
    }

    /// The page's data for a small recording (two runs, a `block_on` body, a pin still running,
    /// a retracted one, one without a stack, one without file:line) is the golden file's.
    /// `UPDATE_GOLDEN=1` rewrites it.
    #[test]
    fn page_data_matches_the_golden_file() {
        let d = data(&events(), "report-small.jsonl", &[]);
        let got = serde_json::to_string_pretty(&d).unwrap() + "\n";
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/report-small.page.json"
        );
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(path, &got).unwrap();
        }
        let want = std::fs::read_to_string(path).unwrap();
        assert_eq!(
            got, want,
            "page data differs from {path} (UPDATE_GOLDEN=1 rewrites it)"
        );
    }

    /// A pin still running at its run's last report (the process killed), in a recording with
    /// a later run: its bar ends with its run, not with the recording (helper-105: a 26 ms pin
    /// was drawn two hours long); and the time span is not cut to whole milliseconds.
    #[test]
    fn a_killed_run_s_open_pin_ends_with_its_run() {
        let all = events();
        let mut killed = all
            .iter()
            .find(|e| e.state == State::InProgress && e.reason == Some(pinwatch::Reason::Cpu))
            .unwrap()
            .clone();
        killed.duration = Duration::from_micros(26_500);
        let mut later = all
            .iter()
            .find(|e| e.run_id.starts_with('b'))
            .unwrap()
            .clone();
        later.start = killed.start + Duration::from_secs(7200);
        later.duration = Duration::from_micros(112_300);
        let d = data(&[killed, later], "x", &[]);
        let bars: Vec<&Bar> = d.lanes.iter().flat_map(|l| &l.bars).collect();
        let open = bars.iter().find(|b| b.open).unwrap();
        assert_eq!((open.start_ms, open.end_ms), (0.0, 26.5), "{bars:?}");
        assert_eq!(d.span_ms, 7_200_112.3);
    }

    #[test]
    fn aggregation_of_the_small_recording() {
        let d = data(&events(), "x", &[]);
        assert_eq!((d.completed, d.in_progress, d.retracted), (5, 1, 1));
        let labels: Vec<String> = d
            .lanes
            .iter()
            .map(|l| format!("{} {}", l.run, l.label))
            .collect();
        assert_eq!(
            labels,
            [
                "aaaaaaaa worker 0",
                "aaaaaaaa worker 1",
                "bbbbbbbb block_on (tid 2000)"
            ]
        );
        // Every pin not retracted is a bar of its own at this scale, with its details.
        let bars: Vec<&Bar> = d.lanes.iter().flat_map(|l| &l.bars).collect();
        assert_eq!(bars.len(), 6);
        assert!(bars.iter().all(|b| b.count == 1 && b.pin.is_some()));
        // The running cpu pin is open to the end of its run.
        let cpu = bars.iter().find(|b| b.reason == "cpu").unwrap();
        assert!(cpu.open);
        assert_eq!(cpu.end_ms, 500.0);
        assert_eq!(d.span_ms, 500.0);
        assert_eq!(d.total_pinned_ms, 100.0 + 50.0 + 300.0 + 40.0 + 60.0 + 30.0);
        let reasons: Vec<(&str, usize)> = d
            .reasons
            .iter()
            .map(|r| (r.reason.as_str(), r.pins))
            .collect();
        assert_eq!(
            reasons,
            [
                ("cpu", 1),
                ("sleep", 2),
                ("io", 1),
                ("lock_held", 1),
                ("other", 1)
            ]
        );
        let no_stack = d.pins.iter().find(|p| p.reason == "other").unwrap();
        assert_eq!(no_stack.stack, ["[no stack: stacks_off]"]);
        let locked = d.pins.iter().find(|p| p.reason == "lock_held").unwrap();
        assert_eq!(locked.held_locks, ["mutex acquired at src/update.rs:29:21"]);
        // The header counts the lanes as what they are, and a run's one pin in the singular.
        let page = render(&events(), "x", &[]).unwrap();
        assert!(
            page.contains("<dt>threads with pins</dt><dd>3</dd>") && page.contains(" 1 pin, "),
            "{}",
            &page[..page.find("</header>").unwrap()]
        );
    }

    fn victim_events() -> Vec<PinnedEvent> {
        let text = include_str!("../tests/data/victims.jsonl");
        pinwatch::recording::parse_recording(text, "victims.jsonl")
            .unwrap()
            .events
    }

    /// A pin's details carry its victims (measured: waits; not measured: none claimed), and
    /// the page has the "most delayed" table of the completed pins' victims.
    #[test]
    fn a_pins_victims_and_the_most_delayed_table() {
        let d = data(&victim_events(), "x", &[]);
        let pin = |id: u64| d.pins.iter().find(|p| p.id == id).unwrap();
        let v = pin(1).victims.as_ref().unwrap();
        assert!(v.measured);
        assert_eq!((v.tasks, v.unnamed, v.queue_depth_max), (11, 6, Some(10)));
        assert_eq!(
            (v.total_wait.as_deref(), v.max_wait.as_deref()),
            (Some("1.52 s"), Some("300.2 ms"))
        );
        assert_eq!(v.worst.len(), 5);
        let w = &v.worst[0];
        assert_eq!(
            (
                w.task,
                w.wait.as_deref(),
                w.spawned_at.as_deref(),
                w.worker,
                w.lifo
            ),
            (14, Some("300.2 ms"), Some("src/api.rs:88:5"), Some(0), true)
        );
        assert_eq!(w.spans, ["request{uri=/orders}"]);
        let not = pin(3).victims.as_ref().unwrap();
        assert!(!not.measured && not.total_wait.is_none() && not.max_wait.is_none());
        assert!(not.worst.iter().all(|w| w.wait.is_none()));
        assert!(pin(4).victims.is_none());
        assert!(!v.held_back);
        // A pin that held the timers and I/O (here: on a current-thread runtime) says the
        // measure leaves out the tasks waiting on them, as `print` does (helper-60).
        let mut held = victim_events();
        held.iter_mut().for_each(|e| e.current_thread = true);
        let held = data(&held, "x", &[]);
        let held_pin = |id: u64| held.pins.iter().find(|p| p.id == id).unwrap();
        assert!(held_pin(1).victims.as_ref().unwrap().held_back);
        // Not measured: nothing is claimed either way.
        assert!(!held_pin(3).victims.as_ref().unwrap().held_back);
        // The most delayed: the summary's "who waited".
        assert_eq!(
            d.most_delayed,
            pinwatch::recording::who_waited(&victim_events())
        );
        assert_eq!(d.most_delayed.rows.len(), 4);
        let page = render(&victim_events(), "x", &[]).unwrap();
        let table = page
            .split("<table id=\"delayed-table\">")
            .nth(1)
            .and_then(|t| t.split("</table>").next())
            .expect("a most delayed table");
        assert!(
            table.contains(
                "<tr><td class=\"frame\">src/api.rs:88:5</td><td>request</td><td>3</td>\
                 <td>800.2 ms</td><td>300.2 ms</td><td>2</td><td>2</td></tr>"
            ),
            "{table}"
        );
        assert!(page.contains("And 6 more delayed tasks, 390.3 ms of waiting"));
        assert!(page.contains("1 completed pin did not measure waits"));
        // A recording from before victims: the section says waits were not measured.
        let old = render(&events(), "x", &[]).unwrap();
        assert!(!old.contains("delayed-table"));
        assert!(old.contains("id=\"delayed-note\">waits were not measured"));
    }

    /// A victim's spawn place and spans come from the service: in the table and the pins'
    /// JSON they are escaped like all of the recording's text, and no markup comes of them.
    #[test]
    fn victims_cannot_break_out_of_the_page() {
        let evil = "</script><img src=x onerror=alert(1)>\u{1b}[2J\u{202e}";
        let mut events = victim_events();
        for e in &mut events {
            if let Some(v) = e.victims.as_mut() {
                for w in &mut v.worst {
                    if let Some(at) = w.spawned_at.as_mut() {
                        at.file = evil.to_owned();
                    }
                    for s in &mut w.spans {
                        s.name = evil.to_owned();
                        s.fields.insert(evil.to_owned(), evil.to_owned());
                    }
                }
            }
        }
        let page = render(&events, "x", &[]).unwrap();
        assert!(!page.contains("<img"), "markup from a victim");
        // The page's own scripts only (its two).
        let plain = render(&victim_events(), "x", &[]).unwrap();
        assert_eq!(
            page.matches("</script>").count(),
            plain.matches("</script>").count()
        );
        let bad: Vec<char> = page
            .chars()
            .filter(|c| pinwatch::text::is_escaped(*c) && !matches!(c, '\n' | '\t'))
            .collect();
        assert!(bad.is_empty(), "{bad:?} reached the page");
        assert!(
            page.contains("<td class=\"frame\">&lt;/script&gt;&lt;img"),
            "the table"
        );
    }

    #[test]
    fn folded_stacks_weigh_pinned_time_and_keep_pins_without_stacks() {
        let lines = folded(&events());
        let total: u64 = lines
            .iter()
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum();
        let d = data(&events(), "x", &[]);
        assert!(
            (total as f64 / 1e3 - d.total_pinned_ms).abs() < 1.0,
            "{total} vs {}",
            d.total_pinned_ms
        );
        assert!(
            lines.iter().any(|l| l.starts_with("[no stack")),
            "{lines:?}"
        );
    }

    /// The flame graph without inferno's script keeps nothing that calls or names it (its
    /// `onload` threw in every page), and its frames; the page's tables close as they open.
    #[test]
    fn the_flame_graph_calls_no_script_it_does_not_have() {
        let svg = flame_graph(&events()).unwrap();
        assert!(svg.starts_with("<svg id=\"flamegraph\""), "{}", &svg[..80]);
        for gone in [
            "onload",
            "<script",
            "init(",
            ">Search<",
            ">Reset Zoom<",
            "id=\"details\"",
        ] {
            assert!(!svg.contains(gone), "{gone}");
        }
        assert!(svg.contains("<svg id=\"frames\"") && svg.contains("<title>"));
        assert!(svg.contains(">Pinned time by stack<"));
        let page = render(&events(), "x", &[]).unwrap();
        // The markup, before the page's script (whose comments name `<tbody>`).
        let page = &page[..page.find("<script").unwrap()];
        assert_eq!(
            page.matches("<tbody").count(),
            page.matches("</tbody>").count()
        );
        assert_eq!(
            page.matches("<table").count(),
            page.matches("</table>").count()
        );
        assert!(!page.contains("onload="));
    }

    /// Pins that end past the year 9999, and durations whose sum overflows every integer: the
    /// page is drawn (humantime's formatter failed on the span's end, the flame graph's weights
    /// overflowed).
    #[test]
    fn extreme_times_and_durations_make_a_page() {
        let mut evs = events();
        for (i, e) in evs.iter_mut().enumerate() {
            e.duration = Duration::MAX - Duration::from_secs(i as u64);
            e.start = UNIX_EPOCH + Duration::from_secs(253_402_300_799);
            e.stack.clear();
            e.top_frame = None;
        }
        let page = render(&evs, "x", &[]).unwrap();
        assert!(page.contains("s after the epoch"), "the span's end");
        // The weights are what inferno can sum, in proportion.
        let weights: Vec<u64> = folded(&evs)
            .iter()
            .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
            .collect();
        assert!(weights.len() > 1, "{weights:?}");
        let sum = weights.iter().try_fold(0u64, |s, w| s.checked_add(*w));
        assert!(sum.is_some(), "{weights:?}");
    }

    /// A crafted stack deeper than any pinwatch writes is cut to a profile's depth, innermost
    /// frames kept, the rest counted in one frame (a million frames made a 227 MB page).
    #[test]
    fn a_stack_deeper_than_a_profile_s_is_cut_to_its_depth() {
        use pinwatch::profile::MAX_DEPTH;
        let mut evs = events();
        for e in evs.iter_mut().filter(|e| !e.stack.is_empty()) {
            let frame = e.stack[0].clone();
            e.stack = (0..10_000)
                .map(|i| {
                    let mut f = frame.clone();
                    f.function = Some(format!("f{i}"));
                    f
                })
                .collect();
        }
        let deep = folded(&evs)
            .into_iter()
            .find(|l| l.contains(";f0"))
            .unwrap();
        let (stack, _) = deep.rsplit_once(' ').unwrap();
        let frames: Vec<&str> = stack.split(';').collect();
        assert_eq!(frames.len(), MAX_DEPTH, "{:?}", &frames[..3]);
        assert!(
            frames[0].contains(&format!(
                "{} outer frames left out",
                10_000 - (MAX_DEPTH - 1)
            )),
            "{}",
            frames[0]
        );
        assert!(frames[MAX_DEPTH - 1].starts_with("f0"), "innermost last");
        assert!(frames[1].starts_with(&format!("f{}", MAX_DEPTH - 2)));
    }

    /// Runs are told by their id, each once, with each threshold once, in the order first seen.
    #[test]
    fn runs_and_their_thresholds_are_counted_once_each() {
        let mut evs = Vec::new();
        for (k, (run, ms)) in [("a", 20), ("b", 20), ("a", 30), ("a", 20), ("b", 20)]
            .into_iter()
            .enumerate()
        {
            let mut e = events()[0].clone();
            e.id = 1000 + k as u64;
            e.run_id = run.into();
            e.threshold = Duration::from_millis(ms);
            evs.push(e);
        }
        let d = data(&evs, "x", &[]);
        let runs: Vec<(&str, usize, &[f64])> = d
            .runs
            .iter()
            .map(|r| (r.run_id.as_str(), r.pins, &r.thresholds_ms[..]))
            .collect();
        assert_eq!(
            runs,
            [("a", 3, &[20.0, 30.0][..]), ("b", 2, &[20.0][..])],
            "{runs:?}"
        );
    }

    /// A frame's text cannot split a folded stack or pose as its sample count.
    #[test]
    fn frames_cannot_forge_folded_stacks() {
        let mut evs = events();
        for e in &mut evs {
            for f in e.stack.iter_mut().chain(e.top_frame.as_mut()) {
                f.function = Some("a;b\nc 12 34".into());
                f.file = None;
            }
            e.no_stack = e.no_stack.as_ref().map(|_| "x;y 5".into());
        }
        for line in folded(&evs) {
            let (stack, n) = line.rsplit_once(' ').unwrap();
            n.parse::<u64>().unwrap();
            assert!(!stack.contains('\n'), "{line:?}");
            assert!(
                stack.contains("a:b c\u{a0}12\u{a0}34")
                    || stack.starts_with("[no stack: x:y\u{a0}5]"),
                "{line:?}"
            );
            assert!(!stack.contains("x;y"), "{line:?}");
        }
    }

    #[test]
    fn the_page_s_text_and_data_carry_no_control_or_bidirectional_character() {
        let evil = "a\u{1b}]0;x\u{7}\u{202e}b<";
        assert_eq!(esc(evil), "a\\u{1b}]0;x\\u{7}\\u{202e}b&lt;");
        let mut v = serde_json::json!({"frame": evil, "n": 1, "list": [evil]});
        pinwatch::text::escape_json_strings(&mut v);
        let text = serde_json::to_string(&v).unwrap();
        let back: serde_json::Value = serde_json::from_str(&script_json(&text)).unwrap();
        let shown = back.to_string();
        assert!(!shown.chars().any(pinwatch::text::is_escaped), "{shown}");
        assert_eq!(back["frame"], "a\\u{1b}]0;x\\u{7}\\u{202e}b<");
        assert_eq!(back["n"], 1);
    }

    /// The whole page of a recording whose every text carries control and bidirectional
    /// characters: none of them reaches the page, the flame graph's frames included.
    #[test]
    fn no_control_or_bidirectional_character_reaches_any_part_of_the_page() {
        let evil = "f\u{1b}[31m\u{7}\u{202e}\u{9b}x";
        let mut events = pinwatch::recording::parse_recording(
            include_str!("../tests/data/report-small.jsonl"),
            "x",
        )
        .unwrap()
        .events;
        for e in &mut events {
            for f in e
                .top_frame
                .iter_mut()
                .chain(e.app_frame.iter_mut())
                .chain(&mut e.stack)
            {
                f.function = Some(evil.to_owned());
                f.file = Some(evil.to_owned());
            }
            e.worker.name = evil.to_owned();
        }
        assert!(
            events.iter().any(|e| !e.stack.is_empty()),
            "no stack to draw"
        );
        let page = render(&events, evil, &[evil.to_owned()]).unwrap();
        assert!(page.contains("id=\"flamegraph\""), "no flame graph drawn");
        let bad: Vec<char> = page
            .chars()
            .filter(|c| pinwatch::text::is_escaped(*c) && !matches!(c, '\n' | '\t'))
            .collect();
        assert!(bad.is_empty(), "{bad:?} reached the page");
    }

    #[test]
    fn json_in_a_script_has_no_markup_characters() {
        let s = serde_json::to_string("<!--<script></script>&\u{2028}\u{2029}>").unwrap();
        let safe = script_json(&s);
        assert_eq!(
            safe,
            "\"\\u003c!--\\u003cscript\\u003e\\u003c/script\\u003e\\u0026\\u2028\\u2029\\u003e\""
        );
        assert_eq!(
            serde_json::from_str::<String>(&safe).unwrap(),
            serde_json::from_str::<String>(&s).unwrap()
        );
    }

    /// 100,000 pins on 4 workers: every pin counted, but a bounded number of bars.
    #[test]
    fn big_recordings_are_drawn_with_bounded_bars() {
        let base = pinwatch::recording::parse_recording(
            include_str!("../tests/data/report-small.jsonl"),
            "x",
        )
        .unwrap()
        .events
        .into_iter()
        .find(|e| e.state == State::Completed)
        .unwrap();
        let mut events = Vec::new();
        for i in 0..100_000u64 {
            let mut e = base.clone();
            e.id = i + 1;
            e.worker.index = Some((i % 4) as usize);
            e.start =
                UNIX_EPOCH + Duration::from_secs(1_700_000_000) + Duration::from_millis(i * 7);
            e.duration = Duration::from_millis(25);
            events.push(e);
        }
        let d = data(&events, "big", &[]);
        assert_eq!(d.completed, 100_000);
        assert_eq!(d.lanes.len(), 4);
        let bars: usize = d.lanes.iter().map(|l| l.bars.len()).sum();
        let pins: usize = d.lanes.iter().flat_map(|l| &l.bars).map(|b| b.count).sum();
        assert_eq!(pins, 100_000);
        assert!(bars <= 4 * PLOT_WIDTH as usize, "{bars} bars");
        assert!(d.pins.len() <= bars);
        let page = render(&events, "big", &[]).unwrap();
        assert!(page.len() < 8_000_000, "{} bytes", page.len());
    }
}
