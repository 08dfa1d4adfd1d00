//! A pinned-time profile in the pprof format (`profile.proto`, gzipped): what `go tool pprof`,
//! Grafana Pyroscope, Parca and other continuous profilers read.
//!
//! [`pprof`] turns events — a recording's, or a snapshot of an in-memory buffer — into the
//! gzipped bytes of one profile; [`Options::since`] keeps the pins of a time window, so that an
//! endpoint is one call: `pprof(&snapshot, &Options::default().since(now - seconds))`.
//!
//! ## What is in it
//!
//! - Two sample types: `pins/count` (how many pinned polls) and `pinned/nanoseconds` (how long
//!   they held their workers), the default. The period type is `pins/count` with period 1:
//!   every pin is in it, none is sampled (Go's block and mutex profiles do the same).
//! - One pin counts once, by its **last report** ([`crate::recording::latest_reports`]): a
//!   `completed` one with the poll's full duration, an `in_progress` one (a poll still running
//!   when the recording or buffer was read) with its duration so far. A **retracted** poll (its
//!   thread handed the worker on with `block_in_place`) did not pin and counts nothing.
//! - Its stack is the event's `stack`, innermost first, as pprof's samples are. With
//!   `PINWATCH_STACKS=short` (the default) that is the top application frame and the frames
//!   holding locks; `full` gives every frame. A pin without a stack counts under its top frame
//!   (or `[<reason>]`) inside a `[no stack: <why>]` root, like the HTML report's flame graph.
//! - **Several sampled stacks.** A long pin sampled more than once keeps one full stack (the
//!   samples' most common top frame's) and, in `profile`, how many samples had each top frame.
//!   Its pinned time is split between those top frames in proportion to their samples (the
//!   remainder of the integer division goes to the shown stack); the pin's count goes to the
//!   shown stack alone, so that `pins/count` still sums to the number of pins. A top frame that
//!   is another line of the shown stack's top function gets that stack's callers; a top frame of
//!   another function stands alone (the recording keeps no callers for it).
//! - Labels: `reason` (`sleep`, `io`, …; `unknown` when the event has none), `request`, the
//!   request it served as metrics group it
//!   ([`PinnedEvent::request_label`](crate::PinnedEvent::request_label): `GET /users/{id}`),
//!   and `span`, the innermost `tracing` span's [`SpanInfo::label`](crate::SpanInfo::label); a
//!   pin in no span has `spawned_at` (`file:line:column`) instead. One sample per distinct
//!   (stack, reason, request, span), with the values summed.
//! - Functions with their names and files; a location per distinct (function, file, line),
//!   with one `Line`. The events' frames keep no addresses and do not mark which frames were
//!   inlined into which (each inlined call is a frame of its own), so there are no `Mapping`s
//!   and each location has one line; pprof shows the same call chain either way.
//! - `time_nanos` is the earliest start of the pins in it, `duration_nanos` runs to the latest
//!   end.
//!
//! ## Bounds
//!
//! A crafted or huge recording gives a bounded profile: strings are interned once, their control
//! and bidirectional characters escaped (`\u{1b}`), and cut to [`MAX_STRING_BYTES`]; the string
//! table holds at most [`MAX_STRING_TABLE_BYTES`], a stack at most [`MAX_DEPTH`] frames (the
//! innermost), the profile at most [`MAX_LOCATIONS`] locations and [`MAX_SAMPLES`] samples.
//! Past a bound, what does not fit counts under a frame that says so (`[pinwatch: …]`): every
//! pin and all pinned time stay in the totals.

use std::collections::HashMap;
use std::io::Write as _;
use std::time::{Duration, SystemTime};

use crate::event::{Frame, PinnedEvent, State};

/// The longest string (function name, file name, label value) kept, in bytes; a longer one is
/// cut at a character boundary and ends with `…`.
pub const MAX_STRING_BYTES: usize = 1024;
/// The most bytes of strings in the string table, besides the profile's one-line description; a
/// new string past it is written as `[pinwatch: string table full]`.
pub const MAX_STRING_TABLE_BYTES: usize = 8 << 20;
/// The most frames of one stack: the innermost ones, under a frame saying how many outer frames
/// were left out.
pub const MAX_DEPTH: usize = 128;
/// The most distinct locations (frames); a new frame past it is written as one more location
/// saying so (and the samples past [`MAX_SAMPLES`] have one more of their own).
pub const MAX_LOCATIONS: usize = 32_768;
/// The most samples (distinct stack, reason, span); a pin whose sample would be a new one past
/// it counts in one sample per reason whose stack says so.
pub const MAX_SAMPLES: usize = 16_384;

/// What [`pprof`] and [`build`] put in the profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// Only the pins that ran at or after this time (their end, `start + duration`, is not
    /// before it): `/debug/pprof/pinned?seconds=N` is `since(now - N s)`. `None`: every pin.
    pub since: Option<SystemTime>,
}

impl Options {
    /// Only the pins that ran at or after `t` (see [`Options::since`](field@Options::since)).
    pub fn since(mut self, t: SystemTime) -> Options {
        self.since = Some(t);
        self
    }
}

/// Whether `event` ran at or after `since`: its end (`start + duration`) is not before it.
pub fn ran_since(event: &PinnedEvent, since: SystemTime) -> bool {
    match event.start.checked_add(event.duration) {
        Some(end) => end >= since,
        // Past what a `SystemTime` holds: later than anything.
        None => true,
    }
}

/// The pinned-time profile of `events`, gzipped: the bytes of a `.pb.gz` file, or of a
/// `/debug/pprof/…` response. See the [module docs](self) for what is in it.
pub fn pprof(events: &[PinnedEvent], options: &Options) -> Vec<u8> {
    encode(&build(events, options))
}

/// `profile` serialised and gzipped.
pub fn encode(profile: &proto::Profile) -> Vec<u8> {
    use prost::Message as _;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a `Vec` cannot fail.
    gz.write_all(&profile.encode_to_vec())
        .and_then(|()| gz.finish())
        .expect("gzip into a Vec cannot fail (this is a bug)")
}

/// Reads a profile [`encode`] (or any pprof tool) wrote: gzipped or not.
pub fn decode(bytes: &[u8]) -> Result<proto::Profile, std::io::Error> {
    use prost::Message as _;
    use std::io::Read as _;
    let mut raw = Vec::new();
    let bytes = if bytes.starts_with(&[0x1f, 0x8b]) {
        flate2::read::GzDecoder::new(bytes).read_to_end(&mut raw)?;
        &raw[..]
    } else {
        bytes
    };
    proto::Profile::decode(bytes)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// The profile of `events` as a message (what [`pprof`] encodes).
pub fn build(events: &[PinnedEvent], options: &Options) -> proto::Profile {
    // Every report of a pin ends no later than its last one: a pin whose last report is in the
    // window keeps it.
    let kept: Vec<&PinnedEvent> = match options.since {
        Some(t) => events.iter().filter(|e| ran_since(e, t)).collect(),
        None => events.iter().collect(),
    };
    build_from(crate::recording::latest_reports(kept))
}

fn build_from(pins: Vec<&PinnedEvent>) -> proto::Profile {
    let mut b = Builder::default();
    b.string(""); // string_table[0] is always "".
    let pins_t = b.string("pins");
    let count = b.string("count");
    let pinned = b.string("pinned");
    let nanos = b.string("nanoseconds");
    b.profile.sample_type = vec![
        proto::ValueType {
            ty: pins_t,
            unit: count,
        },
        proto::ValueType {
            ty: pinned,
            unit: nanos,
        },
    ];
    b.profile.period_type = Some(proto::ValueType {
        ty: pins_t,
        unit: count,
    });
    b.profile.period = 1;
    b.profile.default_sample_type = pinned;

    let mut first: Option<SystemTime> = None;
    let mut last: Option<SystemTime> = None;
    let (mut counted, mut in_progress) = (0u64, 0u64);
    for e in pins {
        if e.state == State::Retracted {
            continue;
        }
        counted += 1;
        in_progress += u64::from(e.state == State::InProgress);
        first = Some(first.map_or(e.start, |f| f.min(e.start)));
        let end = e.start.checked_add(e.duration).unwrap_or(e.start);
        last = Some(last.map_or(end, |l| l.max(end)));
        b.add_pin(e);
    }
    if let (Some(first), Some(last)) = (first, last) {
        b.profile.time_nanos = nanos_i64(first.duration_since(SystemTime::UNIX_EPOCH).ok());
        b.profile.duration_nanos = nanos_i64(last.duration_since(first).ok());
    }
    // Past the table's bound too: it says what the profile is, and a full table had put
    // "[pinwatch: string table full]" in its place (helper-105).
    let comment = b.profile.string_table.len() as i64;
    b.profile.string_table.push(format!(
        "pinwatch pinned-time profile: {counted} pins ({in_progress} still in progress), the \
         last report of each; retracted polls left out"
    ));
    b.profile.comment = vec![comment];
    b.profile
}

/// A stack (innermost first) cut to [`MAX_DEPTH`] frames: the innermost `MAX_DEPTH - 1` of a
/// deeper one, and the text of the frame that stands for the outer ones, saying how many; a
/// stack no deeper whole, and no such frame. The profile's stacks and the report's flame graph
/// are cut alike.
pub fn within_depth<T>(frames: &[T]) -> (&[T], Option<String>) {
    if frames.len() <= MAX_DEPTH {
        return (frames, None);
    }
    (&frames[..MAX_DEPTH - 1], Some(outer_frames(frames.len())))
}

/// The text of the frame that stands for the outer frames of a stack `depth` deep, past
/// [`MAX_DEPTH`] ([`within_depth`]).
fn outer_frames(depth: usize) -> String {
    let left_out = depth - (MAX_DEPTH - 1);
    format!("[pinwatch: {left_out} outer frames left out]")
}

fn nanos_i64(d: Option<Duration>) -> i64 {
    d.map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// A frame as the profile writes it: function, file (escaped and cut), line.
struct FrameKey {
    function: String,
    file: String,
    line: u32,
}

impl FrameKey {
    fn of(f: &Frame) -> FrameKey {
        FrameKey {
            function: cut(f.function.as_deref().unwrap_or("<unknown>")),
            file: cut(f.file.as_deref().unwrap_or("")),
            line: f.line.unwrap_or(0),
        }
    }

    fn synthetic(text: &str) -> FrameKey {
        FrameKey {
            function: cut(text),
            file: String::new(),
            line: 0,
        }
    }
}

/// `s` as the profile holds it: escaped (a crafted recording's names reach the terminal of
/// whoever reads the profile with `go tool pprof`) and bounded to [`MAX_STRING_BYTES`]
/// ([`text::bounded`](crate::text::bounded)).
fn cut(s: &str) -> String {
    crate::text::bounded(s, MAX_STRING_BYTES)
}

/// A sample as the profile keys it: its locations, and its label strings' indices.
#[derive(PartialEq, Eq, Hash)]
struct SampleKey {
    locations: Vec<u64>,
    labels: Vec<(i64, i64)>,
}

/// A frame of a stack being added: one of the events' (borrowed: looking it up allocates
/// nothing), or one the profile makes (`[no stack: …]`).
#[derive(Clone)]
enum StackFrame<'a> {
    Event(&'a Frame),
    Made(String),
}

/// An event frame's key: function, file, line (its lock marks left out).
fn key(f: &Frame) -> (&str, &str, u32) {
    (
        f.function.as_deref().unwrap_or("<unknown>"),
        f.file.as_deref().unwrap_or(""),
        f.line.unwrap_or(0),
    )
}

#[derive(Default)]
struct Builder<'a> {
    profile: proto::Profile,
    strings: HashMap<String, i64>,
    string_bytes: usize,
    functions: HashMap<(i64, i64), u64>,
    /// The locations of the events' frames, by [`key`].
    locations: HashMap<(&'a str, &'a str, u32), u64>,
    /// The locations of the frames the profile makes, by text.
    made: HashMap<String, u64>,
    samples: HashMap<SampleKey, usize>,
    /// Per reason string: the sample that pins past [`MAX_SAMPLES`] count in.
    overflow_samples: HashMap<i64, usize>,
    /// The location that frames past [`MAX_LOCATIONS`] become.
    overflow_location: Option<u64>,
    /// The location of the samples past [`MAX_SAMPLES`].
    overflow_sample_location: Option<u64>,
}

impl<'a> Builder<'a> {
    /// The index of `s` in the string table (cut to [`MAX_STRING_BYTES`]), added when new.
    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let s = cut(s);
        if let Some(&i) = self.strings.get(&s) {
            return i;
        }
        const FULL: &str = "[pinwatch: string table full]";
        if self.string_bytes + s.len() > MAX_STRING_TABLE_BYTES && s != FULL {
            return self.string(FULL);
        }
        let i = self.profile.string_table.len() as i64;
        self.string_bytes += s.len();
        self.profile.string_table.push(s.clone());
        self.strings.insert(s, i);
        i
    }

    fn function(&mut self, name: &str, file: &str) -> u64 {
        let key = (self.string(name), self.string(file));
        if let Some(&id) = self.functions.get(&key) {
            return id;
        }
        let id = self.profile.function.len() as u64 + 1;
        self.profile.function.push(proto::Function {
            id,
            name: key.0,
            system_name: key.0,
            filename: key.1,
            start_line: 0,
        });
        self.functions.insert(key, id);
        id
    }

    fn location(&mut self, frame: &StackFrame<'a>) -> u64 {
        let known = match frame {
            StackFrame::Event(f) => self.locations.get(&key(f)),
            StackFrame::Made(text) => self.made.get(text),
        };
        if let Some(&id) = known {
            return id;
        }
        if self.locations.len() + self.made.len() >= MAX_LOCATIONS {
            if let Some(id) = self.overflow_location {
                return id;
            }
            let text = format!("[pinwatch: more than {MAX_LOCATIONS} distinct frames]");
            let id = self.push_location(&FrameKey::synthetic(&text));
            self.overflow_location = Some(id);
            return id;
        }
        match frame {
            StackFrame::Event(f) => {
                let id = self.push_location(&FrameKey::of(f));
                self.locations.insert(key(f), id);
                id
            }
            StackFrame::Made(text) => {
                let id = self.push_location(&FrameKey::synthetic(text));
                self.made.insert(text.clone(), id);
                id
            }
        }
    }

    fn push_location(&mut self, frame: &FrameKey) -> u64 {
        let function_id = self.function(&frame.function, &frame.file);
        let id = self.profile.location.len() as u64 + 1;
        self.profile.location.push(proto::Location {
            id,
            mapping_id: 0,
            address: 0,
            line: vec![proto::Line {
                function_id,
                line: i64::from(frame.line),
                column: 0,
            }],
            is_folded: false,
        });
        id
    }

    /// The location ids of `frames` (innermost first), at most [`MAX_DEPTH`].
    fn stack(&mut self, frames: &[StackFrame<'a>]) -> Vec<u64> {
        let (kept, outer) = within_depth(frames);
        let mut ids: Vec<u64> = Vec::with_capacity(kept.len() + 1);
        for f in kept {
            ids.push(self.location(f));
        }
        if let Some(outer) = outer {
            ids.push(self.location(&StackFrame::Made(outer)));
        }
        ids
    }

    /// Adds `pins` and `nanos` to the sample of `frames` with `labels` (key, value).
    fn add(&mut self, frames: &[StackFrame<'a>], labels: &[(&str, &str)], pins: i64, nanos: u128) {
        let locations = self.stack(frames);
        let labels: Vec<(i64, i64)> = labels
            .iter()
            .map(|(k, v)| (self.string(k), self.string(v)))
            .collect();
        let key = SampleKey { locations, labels };
        let index = match self.samples.get(&key) {
            Some(&i) => i,
            None if self.samples.len() < MAX_SAMPLES => {
                let i = self.new_sample(key.locations.clone(), &key.labels);
                self.samples.insert(key, i);
                i
            }
            None => {
                // The reason label is the first one.
                let reason = key.labels.first().copied();
                let reason_value = reason.map_or(0, |(_, v)| v);
                match self.overflow_samples.get(&reason_value) {
                    Some(&i) => i,
                    None => {
                        let loc = match self.overflow_sample_location {
                            Some(id) => id,
                            None => {
                                let text =
                                    format!("[pinwatch: more than {MAX_SAMPLES} distinct stacks]");
                                // Past the location bound too: this one location more.
                                let id = self.push_location(&FrameKey::synthetic(&text));
                                self.overflow_sample_location = Some(id);
                                id
                            }
                        };
                        let labels: Vec<(i64, i64)> = reason.into_iter().collect();
                        let i = self.new_sample(vec![loc], &labels);
                        self.overflow_samples.insert(reason_value, i);
                        i
                    }
                }
            }
        };
        let s = &mut self.profile.sample[index];
        s.value[0] = s.value[0].saturating_add(pins);
        let nanos = i64::try_from(nanos).unwrap_or(i64::MAX);
        s.value[1] = s.value[1].saturating_add(nanos);
    }

    fn new_sample(&mut self, location_id: Vec<u64>, labels: &[(i64, i64)]) -> usize {
        self.profile.sample.push(proto::Sample {
            location_id,
            value: vec![0, 0],
            label: labels
                .iter()
                .map(|&(key, str)| proto::Label {
                    key,
                    str,
                    num: 0,
                    num_unit: 0,
                })
                .collect(),
        });
        self.profile.sample.len() - 1
    }

    fn add_pin(&mut self, e: &'a PinnedEvent) {
        let reason = e.reason.map_or("unknown", |r| r.as_str());
        let request = e.request_span().map(|_| e.request_label());
        let span = e.innermost_span().map(|s| s.label());
        let spawned = e.spawned_at.as_ref().map(|s| s.to_string());
        let mut labels: Vec<(&str, &str)> = vec![("reason", reason)];
        match (&request, &span, &spawned) {
            (Some(request), Some(span), _) => {
                labels.push(("request", request));
                labels.push(("span", span));
            }
            (None, _, Some(at)) => labels.push(("spawned_at", at)),
            _ => {}
        }
        let nanos = e.duration.as_nanos();
        let stack: Vec<StackFrame<'a>> = if !e.stack.is_empty() {
            e.stack.iter().map(StackFrame::Event).collect()
        } else {
            let why = format!(
                "[no stack: {}]",
                e.no_stack.as_deref().unwrap_or("not sampled")
            );
            let top = match &e.top_frame {
                Some(f) => StackFrame::Event(f),
                None => StackFrame::Made(format!("[{reason}]")),
            };
            vec![top, StackFrame::Made(why)]
        };
        if e.profile.len() < 2 {
            self.add(&stack, &labels, 1, nanos);
            return;
        }
        // Several top frames: split the time by samples.
        let shown_top = e.top_frame.as_ref().map(key);
        let top_index = shown_top.and_then(|t| {
            stack
                .iter()
                .position(|f| matches!(f, StackFrame::Event(f) if key(f) == t))
        });
        let total: u128 = e.profile.iter().map(|p| u128::from(p.samples)).sum();
        let total = total.max(1);
        let shown_entry = e
            .profile
            .iter()
            .position(|p| Some(key(&p.frame)) == shown_top)
            .unwrap_or(0);
        let mut given: u128 = 0;
        let shares: Vec<u128> = e
            .profile
            .iter()
            .map(|p| {
                let share = nanos * u128::from(p.samples) / total;
                given += share;
                share
            })
            .collect();
        let remainder = nanos - given.min(nanos);
        for (i, (entry, share)) in e.profile.iter().zip(shares).enumerate() {
            let share = if i == shown_entry {
                share + remainder
            } else {
                share
            };
            if i == shown_entry {
                self.add(&stack, &labels, 1, share);
                continue;
            }
            let mut frames = vec![StackFrame::Event(&entry.frame)];
            if let (Some(top), Some(k)) = (shown_top, top_index) {
                if top.0 == key(&entry.frame).0 {
                    // Only what `add` keeps of it ([`within_depth`]): a pin's work is its
                    // entries times the depth, not times its stack (helper-108: a crafted line
                    // of 50,000 frames and 19,000 entries took 3.4 s).
                    let callers = &stack[k + 1..];
                    if callers.len() < MAX_DEPTH {
                        frames.extend(callers.iter().cloned());
                    } else {
                        frames.extend(callers[..MAX_DEPTH - 2].iter().cloned());
                        frames.push(StackFrame::Made(outer_frames(1 + callers.len())));
                    }
                }
            }
            self.add(&frames, &labels, 0, share);
        }
    }
}

/// The messages of pprof's `profile.proto` (package `perftools.profiles`), as `prost` structs,
/// with the field numbers of github.com/google/pprof's `proto/profile.proto` (cited on each
/// field). Written by hand with `#[derive(prost::Message)]`: generating them needs `protoc`,
/// which building pinwatch must not. Fields pinwatch does not write are left out; a decoder
/// skips them.
pub mod proto {
    /// `message Profile`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        /// `repeated ValueType sample_type = 1`.
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        /// `repeated Sample sample = 2`.
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        /// `repeated Mapping mapping = 3`.
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        /// `repeated Location location = 4`.
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        /// `repeated Function function = 5`.
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        /// `repeated string string_table = 6`; `string_table[0]` is `""`.
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        /// `int64 drop_frames = 7` (string index).
        #[prost(int64, tag = "7")]
        pub drop_frames: i64,
        /// `int64 keep_frames = 8` (string index).
        #[prost(int64, tag = "8")]
        pub keep_frames: i64,
        /// `int64 time_nanos = 9`: nanoseconds since the Unix epoch.
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        /// `int64 duration_nanos = 10`.
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        /// `ValueType period_type = 11`.
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        /// `int64 period = 12`.
        #[prost(int64, tag = "12")]
        pub period: i64,
        /// `repeated int64 comment = 13` (string indices).
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        /// `int64 default_sample_type = 14` (string index).
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    /// `message ValueType`.
    #[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
    pub struct ValueType {
        /// `int64 type = 1` (string index).
        #[prost(int64, tag = "1")]
        pub ty: i64,
        /// `int64 unit = 2` (string index).
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    /// `message Sample`.
    #[derive(Clone, PartialEq, Eq, prost::Message)]
    pub struct Sample {
        /// `repeated uint64 location_id = 1`: the leaf first.
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        /// `repeated int64 value = 2`: one per `Profile.sample_type`.
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        /// `repeated Label label = 3`.
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    /// `message Label`.
    #[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
    pub struct Label {
        /// `int64 key = 1` (string index).
        #[prost(int64, tag = "1")]
        pub key: i64,
        /// `int64 str = 2` (string index).
        #[prost(int64, tag = "2")]
        pub str: i64,
        /// `int64 num = 3`.
        #[prost(int64, tag = "3")]
        pub num: i64,
        /// `int64 num_unit = 4` (string index).
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }

    /// `message Mapping`.
    #[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
    pub struct Mapping {
        /// `uint64 id = 1`.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// `uint64 memory_start = 2`.
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        /// `uint64 memory_limit = 3`.
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        /// `uint64 file_offset = 4`.
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        /// `int64 filename = 5` (string index).
        #[prost(int64, tag = "5")]
        pub filename: i64,
        /// `int64 build_id = 6` (string index).
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        /// `bool has_functions = 7`.
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        /// `bool has_filenames = 8`.
        #[prost(bool, tag = "8")]
        pub has_filenames: bool,
        /// `bool has_line_numbers = 9`.
        #[prost(bool, tag = "9")]
        pub has_line_numbers: bool,
        /// `bool has_inline_frames = 10`.
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }

    /// `message Location`.
    #[derive(Clone, PartialEq, Eq, prost::Message)]
    pub struct Location {
        /// `uint64 id = 1`: unique, non-zero.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// `uint64 mapping_id = 2`: 0 for none.
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        /// `uint64 address = 3`.
        #[prost(uint64, tag = "3")]
        pub address: u64,
        /// `repeated Line line = 4`: several when calls were inlined, the innermost first.
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
        /// `bool is_folded = 5`.
        #[prost(bool, tag = "5")]
        pub is_folded: bool,
    }

    /// `message Line`.
    #[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
    pub struct Line {
        /// `uint64 function_id = 1`.
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        /// `int64 line = 2`.
        #[prost(int64, tag = "2")]
        pub line: i64,
        /// `int64 column = 3`.
        #[prost(int64, tag = "3")]
        pub column: i64,
    }

    /// `message Function`.
    #[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
    pub struct Function {
        /// `uint64 id = 1`: unique, non-zero.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// `int64 name = 2` (string index).
        #[prost(int64, tag = "2")]
        pub name: i64,
        /// `int64 system_name = 3` (string index).
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        /// `int64 filename = 4` (string index).
        #[prost(int64, tag = "4")]
        pub filename: i64,
        /// `int64 start_line = 5`.
        #[prost(int64, tag = "5")]
        pub start_line: i64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{ProfileEntry, SourceLocation};
    use crate::{Reason, SpanInfo};
    use std::collections::HashSet;

    fn frame(function: &str, line: u32) -> Frame {
        Frame {
            function: Some(function.to_owned()),
            file: Some("src/app.rs".to_owned()),
            line: Some(line),
            locks: 0,
        }
    }

    /// A completed pin with a full stack: `std::thread::sleep` in `app::handler` at `line`,
    /// called from `app::main`.
    fn pin(id: u64, reason: Reason, ms: u64, line: u32) -> PinnedEvent {
        let mut e = PinnedEvent::for_test(id, State::Completed, reason, ms, line);
        e.stack = vec![
            Frame {
                function: Some("std::thread::sleep".into()),
                file: Some("library/std/src/thread/mod.rs".into()),
                line: Some(800),
                locks: 0,
            },
            frame("app::handler", line),
            frame("app::main", 3),
        ];
        e.top_frame = Some(frame("app::handler", line));
        e.spawned_at = Some(SourceLocation {
            file: "src/main.rs".into(),
            line: 9,
            column: 5,
        });
        e
    }

    /// The profile's invariants, as pprof's `CheckValid` and the proto's comments state them.
    fn check_valid(p: &proto::Profile) {
        let strings = p.string_table.len() as i64;
        assert_eq!(p.string_table.first().map(String::as_str), Some(""));
        let s = |i: i64| {
            assert!((0..strings).contains(&i), "string index {i} of {strings}");
            &p.string_table[i as usize]
        };
        let types: Vec<(&str, &str)> = p
            .sample_type
            .iter()
            .map(|t| (s(t.ty).as_str(), s(t.unit).as_str()))
            .collect();
        assert_eq!(types, [("pins", "count"), ("pinned", "nanoseconds")]);
        assert_eq!(s(p.default_sample_type), "pinned");
        let period = p.period_type.unwrap();
        assert_eq!((s(period.ty).as_str(), p.period), ("pins", 1));
        let functions: HashSet<u64> = p.function.iter().map(|f| f.id).collect();
        assert_eq!(functions.len(), p.function.len(), "function ids unique");
        for f in &p.function {
            assert_ne!(f.id, 0);
            s(f.name);
            s(f.system_name);
            s(f.filename);
        }
        let locations: HashSet<u64> = p.location.iter().map(|l| l.id).collect();
        assert_eq!(locations.len(), p.location.len(), "location ids unique");
        for l in &p.location {
            assert_ne!(l.id, 0);
            assert_eq!(l.mapping_id, 0, "no mappings: frames have no addresses");
            assert!(!l.line.is_empty());
            for line in &l.line {
                assert!(functions.contains(&line.function_id), "{line:?}");
            }
        }
        assert!(p.mapping.is_empty());
        for sample in &p.sample {
            assert_eq!(sample.value.len(), 2);
            assert!(!sample.location_id.is_empty());
            for id in &sample.location_id {
                assert!(locations.contains(id), "sample's location {id} exists");
            }
            for l in &sample.label {
                s(l.key);
                s(l.str);
            }
        }
        for c in &p.comment {
            s(*c);
        }
    }

    fn decoded(events: &[PinnedEvent], options: &Options) -> proto::Profile {
        let bytes = pprof(events, options);
        assert_eq!(&bytes[..2], &[0x1f, 0x8b], "gzipped");
        let p = decode(&bytes).unwrap();
        assert_eq!(
            p,
            build(events, options),
            "encode then decode gives it back"
        );
        check_valid(&p);
        p
    }

    fn totals(p: &proto::Profile) -> (i64, i64) {
        p.sample
            .iter()
            .fold((0, 0), |(n, t), s| (n + s.value[0], t + s.value[1]))
    }

    /// `(function names leaf first, labels as key=value)` of each sample, with its values.
    fn samples(p: &proto::Profile) -> Vec<(Vec<String>, Vec<String>, [i64; 2])> {
        let s = |i: i64| p.string_table[i as usize].clone();
        p.sample
            .iter()
            .map(|sample| {
                let names = sample
                    .location_id
                    .iter()
                    .map(|id| {
                        let l = &p.location[*id as usize - 1];
                        assert_eq!(l.id, *id);
                        let f = &p.function[l.line[0].function_id as usize - 1];
                        format!("{}:{}", s(f.name), l.line[0].line)
                    })
                    .collect();
                let labels = sample
                    .label
                    .iter()
                    .map(|l| format!("{}={}", s(l.key), s(l.str)))
                    .collect();
                (names, labels, [sample.value[0], sample.value[1]])
            })
            .collect()
    }

    #[test]
    fn each_pin_counts_once_by_its_last_report_and_a_retracted_one_not_at_all() {
        let mut first = pin(1, Reason::Sleep, 30, 10);
        first.state = State::InProgress;
        let mut second = first.clone();
        second.duration = Duration::from_millis(60);
        second.report = 2;
        let done = pin(1, Reason::Sleep, 100, 10);
        let mut retracted = pin(2, Reason::Sleep, 500, 10);
        retracted.state = State::Retracted;
        // Still running when read: counts with its duration so far.
        let mut running = pin(3, Reason::Io, 40, 20);
        running.state = State::InProgress;
        let p = decoded(
            &[first, second, done, retracted, running],
            &Options::default(),
        );
        assert_eq!(totals(&p), (2, 140_000_000));
        let got = samples(&p);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(
            got[0].0,
            ["std::thread::sleep:800", "app::handler:10", "app::main:3"]
        );
        assert_eq!(got[0].1, ["reason=sleep", "spawned_at=src/main.rs:9:5"]);
        assert_eq!(got[0].2, [1, 100_000_000]);
        assert_eq!(got[1].1[0], "reason=io");
        let comment = &p.string_table[p.comment[0] as usize];
        assert!(
            comment.contains("2 pins (1 still in progress)"),
            "{comment}"
        );
    }

    #[test]
    fn pins_with_the_same_stack_reason_and_span_share_a_sample() {
        let a = pin(1, Reason::Sleep, 100, 10);
        let b = pin(2, Reason::Sleep, 50, 10);
        let mut other_reason = pin(3, Reason::LockHeld, 20, 10);
        other_reason.spawned_at = a.spawned_at.clone();
        let mut in_span = pin(4, Reason::Sleep, 25, 10);
        in_span.spans = vec![
            SpanInfo::for_test("request", "svc", &[("http.route", "/users/{id}")]),
            SpanInfo::for_test("render", "svc", &[("id", "7")]),
        ];
        let mut routed = pin(5, Reason::Sleep, 25, 10);
        routed.spans = vec![SpanInfo::for_test(
            "request",
            "svc",
            &[("http.route", "/users/{id}"), ("uri", "/users/9")],
        )];
        let p = decoded(&[a, b, other_reason, in_span, routed], &Options::default());
        let got = samples(&p);
        let labels: Vec<(Vec<String>, [i64; 2])> =
            got.iter().map(|(_, l, v)| (l.clone(), *v)).collect();
        assert_eq!(
            labels,
            [
                (
                    vec!["reason=sleep".into(), "spawned_at=src/main.rs:9:5".into()],
                    [2, 150_000_000]
                ),
                (
                    vec![
                        "reason=lock_held".into(),
                        "spawned_at=src/main.rs:9:5".into()
                    ],
                    [1, 20_000_000]
                ),
                // The request as metrics group it, and the innermost span's label.
                (
                    vec![
                        "reason=sleep".into(),
                        "request=request /users/{id}".into(),
                        "span=render".into()
                    ],
                    [1, 25_000_000]
                ),
                (
                    vec![
                        "reason=sleep".into(),
                        "request=request /users/{id}".into(),
                        "span=request /users/{id}".into()
                    ],
                    [1, 25_000_000]
                ),
            ]
        );
        // One location per distinct frame, one function per distinct name and file.
        assert_eq!(p.location.len(), 3);
        assert_eq!(p.function.len(), 3);
        assert_eq!(
            p.string_table
                .iter()
                .filter(|s| *s == "app::handler")
                .count(),
            1,
            "strings interned once"
        );
    }

    /// A pin sampled 4 times, 3 at line 10 (the shown stack) and once at line 14 of the same
    /// function, once in another function: its 80 ms split 60/20 (all the remainder to the shown
    /// stack), its count on the shown stack alone.
    #[test]
    fn several_sampled_stacks_split_the_pinned_time_by_samples() {
        let mut e = pin(1, Reason::Cpu, 80, 10);
        e.profile = vec![
            ProfileEntry {
                frame: frame("app::handler", 10),
                samples: 3,
            },
            ProfileEntry {
                frame: frame("app::handler", 14),
                samples: 1,
            },
            ProfileEntry {
                frame: frame("app::other", 40),
                samples: 2,
            },
        ];
        e.duration = Duration::from_nanos(60_000_001);
        let p = decoded(&[e], &Options::default());
        let got = samples(&p);
        assert_eq!(totals(&p), (1, 60_000_001));
        assert_eq!(
            got[0],
            (
                vec![
                    "std::thread::sleep:800".to_owned(),
                    "app::handler:10".into(),
                    "app::main:3".into()
                ],
                vec!["reason=cpu".into(), "spawned_at=src/main.rs:9:5".into()],
                [1, 30_000_001]
            )
        );
        // Another line of the same function: the shown stack's callers.
        assert_eq!(got[1].0, ["app::handler:14", "app::main:3"]);
        assert_eq!(got[1].2, [0, 10_000_000]);
        // Another function: no callers are known.
        assert_eq!(got[2].0, ["app::other:40"]);
        assert_eq!(got[2].2, [0, 20_000_000]);
    }

    /// Another line of the shown function, below a stack deeper than the profile keeps: its
    /// stack is cut as the shown one is, saying how many outer frames are left out.
    #[test]
    fn another_line_below_a_deep_stack_is_cut_to_the_depth() {
        let mut e = pin(1, Reason::Cpu, 80, 10);
        let callers = 3 * MAX_DEPTH;
        e.stack
            .extend((0..callers).map(|k| frame("app::caller", k as u32)));
        e.profile = vec![
            ProfileEntry {
                frame: frame("app::handler", 10),
                samples: 1,
            },
            ProfileEntry {
                frame: frame("app::handler", 14),
                samples: 1,
            },
        ];
        let p = decoded(&[e], &Options::default());
        let got = samples(&p);
        // Below `app::handler`: `app::main` and the callers.
        let other = &got[1].0;
        assert_eq!(other.len(), MAX_DEPTH);
        assert_eq!(other[..2], ["app::handler:14", "app::main:3"]);
        let left_out = 2 + callers - (MAX_DEPTH - 1);
        assert_eq!(
            other[MAX_DEPTH - 1],
            format!("[pinwatch: {left_out} outer frames left out]:0")
        );
        // The shown stack, one frame deeper (the sleep), leaves one more out.
        assert_eq!(
            got[0].0[MAX_DEPTH - 1],
            format!("[pinwatch: {} outer frames left out]:0", left_out + 1)
        );
    }

    #[test]
    fn a_pin_without_a_stack_counts_under_its_top_frame_or_its_reason() {
        let mut a = pin(1, Reason::Sleep, 10, 10);
        a.stack.clear();
        a.no_stack = Some("signal_pending".into());
        let mut b = pin(2, Reason::Io, 10, 10);
        b.stack.clear();
        b.top_frame = None;
        b.no_stack = Some("stacks_off".into());
        let got = samples(&decoded(&[a, b], &Options::default()));
        assert_eq!(
            got[0].0,
            ["app::handler:10", "[no stack: signal_pending]:0"]
        );
        assert_eq!(got[1].0, ["[io]:0", "[no stack: stacks_off]:0"]);
    }

    #[test]
    fn since_keeps_the_pins_that_ran_in_the_window_and_the_time_span_is_theirs() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let at = |id: u64, start_s: u64, ms: u64| {
            let mut e = pin(id, Reason::Sleep, ms, 10);
            e.start = t0 + Duration::from_secs(start_s);
            e
        };
        // Pin 1 ended at 1.5 s; pin 2 started at 9 s and ran 2 s (ends at 11 s); pin 3 at 20 s.
        let mut early = at(2, 9, 500);
        early.state = State::InProgress;
        let events = [at(1, 1, 500), early, at(2, 9, 2000), at(3, 20, 100)];
        let all = decoded(&events, &Options::default());
        assert_eq!(totals(&all).0, 3);
        assert_eq!(all.time_nanos, 1_800_000_001_000_000_000);
        assert_eq!(all.duration_nanos, 19_100_000_000);
        let window = decoded(
            &events,
            &Options::default().since(t0 + Duration::from_secs(10)),
        );
        // Pin 2's in-progress report (ended at 9.5 s) is out, its completed one in.
        assert_eq!(totals(&window), (2, 2_100_000_000));
        assert_eq!(window.time_nanos, 1_800_000_009_000_000_000);
        let none = decoded(
            &events,
            &Options::default().since(t0 + Duration::from_secs(60)),
        );
        assert!(none.sample.is_empty());
        assert_eq!(totals(&none), (0, 0));
    }

    /// The profile's strings follow the one text rule ([`crate::text`] tests it).
    #[test]
    fn strings_are_escaped_and_bounded() {
        assert_eq!(cut("a\u{1b}[2J\nb"), r"a\u{1b}[2J\u{a}b");
        let long = cut(&"é".repeat(MAX_STRING_BYTES));
        assert!(
            long.len() <= MAX_STRING_BYTES && long.ends_with('…'),
            "{long}"
        );
    }

    /// A crafted recording: 20,000 pins with distinct stacks and spans, a few of 1,000 frames
    /// with megabyte names. The profile stays within the bounds, and every pin and nanosecond is counted.
    #[test]
    fn a_full_string_table_keeps_the_profile_s_description() {
        // Long names until one no longer fits, then short ones until none does: the table is
        // full to a few bytes.
        let long = "y".repeat(1000);
        let events: Vec<PinnedEvent> = (0..12_000u64)
            .map(|id| {
                let mut e = pin(id, Reason::Sleep, 1, 10);
                let name = match id {
                    ..9_000 => format!("{long}{id}"),
                    _ => format!("z{id}"),
                };
                e.stack = vec![frame(&name, 1)];
                e
            })
            .collect();
        let p = build(&events, &Options::default());
        assert!(p
            .string_table
            .iter()
            .any(|s| s == "[pinwatch: string table full]"));
        let description = &p.string_table[p.comment[0] as usize];
        assert!(
            description.starts_with("pinwatch pinned-time profile: 12000 pins"),
            "{description}"
        );
    }

    #[test]
    fn a_crafted_recording_gives_a_bounded_profile_with_every_pin_counted() {
        let huge = "x".repeat(1 << 20);
        let mut events = Vec::new();
        for id in 0..20_000u64 {
            let mut e = pin(id, Reason::Sleep, 1, 10);
            e.stack = (0..if id < 8 { 1000 } else { 2 })
                .map(|k| frame(&format!("f{id}_{k}"), k))
                .collect();
            if id < 8 {
                e.stack[0].function = Some(format!("{huge}{id}"));
            }
            e.spans = vec![SpanInfo::for_test(&format!("s{id}"), "svc", &[])];
            events.push(e);
        }
        let mut dur = pin(50_000, Reason::Io, 0, 1);
        dur.duration = Duration::MAX;
        events.push(dur);
        let p = decoded(&events, &Options::default());
        assert!(
            p.sample.len() <= MAX_SAMPLES + Reason::ALL.len() + 1,
            "{}",
            p.sample.len()
        );
        assert!(
            p.location.len() <= MAX_LOCATIONS + 2,
            "{}",
            p.location.len()
        );
        assert!(p.function.len() <= MAX_LOCATIONS + 2);
        assert!(p.string_table.iter().all(|s| s.len() <= MAX_STRING_BYTES));
        let bytes: usize = p.string_table.iter().map(String::len).sum();
        let description = &p.string_table[p.comment[0] as usize];
        assert!(
            description.starts_with("pinwatch pinned-time profile: 20001 pins"),
            "{description}"
        );
        assert!(
            bytes <= MAX_STRING_TABLE_BYTES + 64 + description.len(),
            "{bytes}"
        );
        assert!(p.sample.iter().all(|s| s.location_id.len() <= MAX_DEPTH));
        let (pins, nanos) = p.sample.iter().fold((0i64, 0i64), |(n, t), s| {
            (n + s.value[0], t.saturating_add(s.value[1]))
        });
        assert_eq!(pins, 20_001);
        assert_eq!(nanos, i64::MAX, "a duration past i64 saturates");
        let names: Vec<&String> = p.string_table.iter().collect();
        assert!(names.iter().any(|s| s.contains("outer frames left out")));
        assert!(names
            .iter()
            .any(|s| s.contains(&format!("more than {MAX_SAMPLES} distinct stacks"))));
        assert!(names
            .iter()
            .any(|s| s.contains(&format!("more than {MAX_LOCATIONS} distinct frames"))));
        assert!(pprof(&events, &Options::default()).len() < 16 << 20);
    }
}
