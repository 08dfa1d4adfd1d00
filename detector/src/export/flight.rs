//! The flight recording: the last events, every report of each pin, kept in memory all the
//! time (like JFR's default recording), bounded in bytes (`PINWATCH_FLIGHT_SIZE`), for a dump
//! after the fact (`pinwatch ctl <pid> dump`, [`Detector::dump`](crate::Detector::dump),
//! `PINWATCH_DUMP_ON_EXIT`).
//!
//! Fed by a sink on the export thread — never by the per-poll path or the watchdog. Each
//! event is kept as its recording line ([`PinnedEvent::to_json_line`], made before the lock
//! is taken): the line's length is what counts toward the bound, and a dump writes the lines
//! as they are. The lines lie one after another in one ring of bytes, allocated at its bound
//! when the first event comes (the kernel backs only the pages written), so the memory it
//! takes is the bound, never more, and adding an event allocates nothing in it (not one
//! allocation per line, left to the allocator to reuse). The oldest whole events are dropped
//! to make room, and counted. The lock is held by the export thread to copy one line in, and by a
//! dump to copy the ring out; the dump is written without it.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

#[cfg(test)]
use super::Sink;
use crate::event::{DumpInfo, PinnedEvent};

/// The in-memory buffer; clones share it.
#[derive(Clone)]
pub(crate) struct Flight(Arc<Mutex<Ring>>);

struct Ring {
    /// The kept lines, oldest first, one after another.
    bytes: VecDeque<u8>,
    /// One per kept line, in the same order.
    entries: VecDeque<Entry>,
    /// The bound on `bytes.len()`.
    max: u64,
    dropped_events: u64,
    dropped_pins: u64,
}

#[derive(Clone, Copy)]
struct Entry {
    at: SystemTime,
    /// The event's first report (`report` 1).
    first: bool,
    len: usize,
}

/// One event of a [`FlightSnapshot`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct FlightEntry {
    /// When it was reported: its `start` plus its `duration_ms` (for a reader that wants the
    /// pins of the last N seconds, the pprof profile).
    pub at: SystemTime,
    /// Where its line is in [`FlightSnapshot::lines`].
    pub range: (usize, usize),
}

/// What the buffer holds at one moment, oldest first.
#[derive(Clone, Debug)]
pub(crate) struct FlightSnapshot {
    /// Every kept event's recording line, oldest first, one after another (each ends with its
    /// newline; [`PinnedEvent::from_json_line`] reads one back).
    pub lines: String,
    pub entries: Vec<FlightEntry>,
    /// The buffer's bound in bytes.
    pub max_bytes: u64,
    /// Events dropped (oldest first) to make room, since the buffer was made.
    pub dropped_events: u64,
    /// Pins whose first report was among the dropped events.
    pub dropped_pins: u64,
    /// When the first kept event was reported.
    pub first_at: Option<SystemTime>,
}

impl FlightSnapshot {
    /// The line of `e`, newline included.
    pub(crate) fn line(&self, e: &FlightEntry) -> &str {
        self.lines.get(e.range.0..e.range.1).unwrap_or_default()
    }

    /// The events, parsed back (a line that does not parse, which pinwatch never writes, is
    /// left out).
    #[cfg(test)]
    pub(crate) fn events(&self) -> Vec<PinnedEvent> {
        self.events_since(None)
    }

    /// The kept events reported at or after `since` (all with `None`), read back: the lines
    /// before it are never parsed (each entry knows when its event was reported).
    pub(crate) fn events_since(&self, since: Option<SystemTime>) -> Vec<PinnedEvent> {
        self.entries
            .iter()
            .filter(|e| since.is_none_or(|t| e.at >= t))
            .filter_map(|e| PinnedEvent::from_json_line(self.line(e)).ok())
            .collect()
    }
}

impl Flight {
    /// A buffer of at most `max_bytes` of lines.
    pub(crate) fn new(max_bytes: u64) -> Flight {
        Flight(Arc::new(Mutex::new(Ring {
            bytes: VecDeque::new(),
            entries: VecDeque::new(),
            max: max_bytes,
            dropped_events: 0,
            dropped_pins: 0,
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ring> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A sink that feeds it alone.
    #[cfg(test)]
    pub(crate) fn sink(&self) -> FlightSink {
        FlightSink(self.clone())
    }

    /// Keeps `e`, dropping the oldest events until it fits. An event longer than the whole
    /// buffer is not kept (it is counted as dropped, with everything it pushed out).
    #[cfg(test)]
    pub(crate) fn push(&self, e: &PinnedEvent) {
        // Made before the lock: a dump never waits for a line to be serialised.
        self.push_line(e, &e.to_json_line());
    }

    /// The tests' `push`, with `e`'s line made already (`e.to_json_line()`), for the sink
    /// that also writes it to the recordings: an event is serialised once.
    pub(crate) fn push_line(&self, e: &PinnedEvent, line: &str) {
        let entry = Entry {
            at: e.start + e.duration,
            first: e.report <= 1,
            len: line.len(),
        };
        let len = line.len() as u64;
        let mut ring = self.lock();
        while !ring.entries.is_empty() && ring.bytes.len() as u64 + len > ring.max {
            ring.evict();
        }
        if len > ring.max {
            ring.dropped_events += 1;
            ring.dropped_pins += u64::from(entry.first);
            return;
        }
        if ring.bytes.capacity() == 0 {
            // Once, at the bound (at most MAX_FLIGHT_SIZE): the ring never grows past it.
            let max = ring.max as usize;
            ring.bytes.reserve_exact(max);
        }
        ring.bytes.extend(line.as_bytes());
        ring.entries.push_back(entry);
    }

    /// What it holds now: the ring's bytes copied under the lock, the rest after it.
    pub(crate) fn snapshot(&self) -> FlightSnapshot {
        let ring = self.lock();
        let (a, b) = ring.bytes.as_slices();
        let mut bytes = Vec::with_capacity(a.len() + b.len());
        bytes.extend_from_slice(a);
        bytes.extend_from_slice(b);
        let kept: Vec<Entry> = ring.entries.iter().copied().collect();
        let (max_bytes, dropped_events, dropped_pins) =
            (ring.max, ring.dropped_events, ring.dropped_pins);
        drop(ring);
        let mut at = 0;
        let entries = kept
            .iter()
            .map(|e| {
                let range = (at, at + e.len);
                at += e.len;
                FlightEntry { at: e.at, range }
            })
            .collect();
        FlightSnapshot {
            // Whole lines of Strings, so UTF-8; lossy only should that ever not hold.
            lines: String::from_utf8(bytes)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
            entries,
            max_bytes,
            dropped_events,
            dropped_pins,
            first_at: kept.first().map(|e| e.at),
        }
    }
}

impl Ring {
    fn evict(&mut self) {
        if let Some(old) = self.entries.pop_front() {
            self.bytes.drain(..old.len);
            self.dropped_events += 1;
            self.dropped_pins += u64::from(old.first);
        }
    }
}

/// See [`Flight`]. (The export thread feeds the flight recording through
/// [`Recorder::sink`](super::Recorder::sink), which makes each line once for it and the
/// recordings.)
#[cfg(test)]
pub(crate) struct FlightSink(Flight);

#[cfg(test)]
impl Sink for FlightSink {
    fn event(&mut self, e: &PinnedEvent) {
        self.0.push(e);
    }
}

/// Who a dump is from: what its `dump` line says besides the buffer's counts.
#[derive(Clone, Debug)]
pub(crate) struct Identity {
    pub run_id: String,
    pub detector_started: SystemTime,
}

/// A dump, ready to be written: its `dump` line, then the events' lines.
pub(crate) struct Dump {
    pub info: DumpInfo,
    header: String,
    lines: String,
}

impl Dump {
    /// The dump of `snapshot`, taken now, of this process.
    pub(crate) fn new(snapshot: FlightSnapshot, who: &Identity) -> Dump {
        let info = DumpInfo {
            pid: std::process::id(),
            exe: std::fs::read_link("/proc/self/exe")
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            run_id: who.run_id.clone(),
            process_started: process_started(),
            detector_started: who.detector_started,
            dumped_at: SystemTime::now(),
            flight_size: snapshot.max_bytes,
            events: snapshot.entries.len() as u64,
            bytes: snapshot.lines.len() as u64,
            dropped_events: snapshot.dropped_events,
            dropped_pins: snapshot.dropped_pins,
            first_event_at: snapshot.first_at,
        };
        Dump {
            header: info.to_json_line(),
            info,
            lines: snapshot.lines,
        }
    }

    /// Bytes [`write_to`](Self::write_to) writes.
    pub(crate) fn len(&self) -> u64 {
        (self.header.len() + self.lines.len()) as u64
    }

    /// Writes the whole dump to `w`, in pieces of at most 64 KiB.
    pub(crate) fn write_to(&self, mut w: impl Write) -> std::io::Result<()> {
        w.write_all(self.header.as_bytes())?;
        for piece in self.lines.as_bytes().chunks(64 * 1024) {
            w.write_all(piece)?;
        }
        w.flush()
    }
}

/// When this process started: its start time in clock ticks after boot (`/proc/self/stat`,
/// field 22) plus the boot time (`/proc/stat`'s `btime`).
fn process_started() -> Option<SystemTime> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold anything: count after it.
    let after = &stat[stat.rfind(')')? + 1..];
    let ticks: u64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let btime: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz <= 0 {
        return None;
    }
    let hz = hz as u64;
    let since_boot = std::time::Duration::from_secs(ticks / hz)
        + std::time::Duration::from_nanos((ticks % hz) * 1_000_000_000 / hz);
    SystemTime::UNIX_EPOCH.checked_add(std::time::Duration::from_secs(btime) + since_boot)
}

impl Flight {
    /// The pinned-time profile (pprof, gzipped) of the pins the buffer holds that ran in the
    /// `last` stretch of time before now (all it holds when `None`): what
    /// `/debug/pprof/pinned?seconds=N` and [`Detector::profile`](crate::Detector::profile)
    /// answer. The lock is held only to copy the buffer.
    pub(crate) fn profile(&self, last: Option<std::time::Duration>) -> Vec<u8> {
        let mut options = crate::profile::Options::default();
        if let Some(last) = last {
            let since = SystemTime::now()
                .checked_sub(last)
                .unwrap_or(SystemTime::UNIX_EPOCH);
            options = options.since(since);
        }
        // The same window as the profile's (`profile::ran_since`: start + duration), applied
        // before the lines are parsed.
        let events = self.snapshot().events_since(options.since);
        crate::profile::pprof(&events, &options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Reason, State};

    fn event(id: u64, report: u32, state: State) -> PinnedEvent {
        let mut e = PinnedEvent::for_test(id, state, Reason::Sleep, 30 + u64::from(report), 7);
        e.report = report;
        e
    }

    fn ids(s: &FlightSnapshot) -> Vec<(u64, u32)> {
        s.events().iter().map(|e| (e.id, e.report)).collect()
    }

    /// The events of a window are those whose end (start + duration) is in it, as the
    /// profile's `ran_since` has them; the others are not parsed.
    #[test]
    fn events_since_keeps_those_that_ended_in_the_window() {
        let flight = Flight::new(1 << 20);
        let mut sink = flight.sink();
        let t0 = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        let mut all = Vec::new();
        for id in 1..=6 {
            let mut e = event(id, 1, State::Completed);
            e.start = t0 + std::time::Duration::from_secs(10 * id);
            sink.event(&e);
            all.push(e);
        }
        let snap = flight.snapshot();
        let since = t0 + std::time::Duration::from_secs(35);
        let got: Vec<u64> = snap
            .events_since(Some(since))
            .iter()
            .map(|e| e.id)
            .collect();
        let want: Vec<u64> = all
            .iter()
            .filter(|e| crate::profile::ran_since(e, since))
            .map(|e| e.id)
            .collect();
        assert_eq!(got, want);
        assert_eq!(got, vec![4, 5, 6]);
        assert_eq!(snap.events_since(None).len(), 6);
    }

    /// The newest whole events are kept, in order; the oldest go first; the dropped events
    /// and the pins whose first report went are counted.
    #[test]
    fn keeps_the_newest_events_and_counts_what_it_dropped() {
        let line = event(1, 1, State::InProgress).to_json_line().len() as u64;
        // Room for 4 lines (ids 1..9 have the same length).
        let flight = Flight::new(4 * line + line / 2);
        let mut sink = flight.sink();
        // Pins 1..=3, each with two reports.
        for id in 1..=3 {
            sink.event(&event(id, 1, State::InProgress));
            sink.event(&event(id, 2, State::Completed));
        }
        let s = flight.snapshot();
        assert_eq!(ids(&s), [(2, 1), (2, 2), (3, 1), (3, 2)]);
        assert_eq!((s.dropped_events, s.dropped_pins), (2, 1));
        let kept: usize = s.entries.iter().map(|e| s.line(e).len()).sum();
        assert_eq!(s.lines.len(), kept);
        assert!(s.lines.len() as u64 <= s.max_bytes);
        // The first kept event's report time.
        let first = &s.events()[0];
        let at = s.entries[0].at;
        assert_eq!(s.first_at, Some(at));
        let reported = first.start + first.duration;
        let off = at.duration_since(reported).unwrap_or_else(|e| e.duration());
        assert!(off < std::time::Duration::from_millis(1), "{off:?}");
        // A later report alone (its first report dropped) does not count its pin again.
        sink.event(&event(4, 1, State::InProgress));
        let s = flight.snapshot();
        assert_eq!(ids(&s), [(2, 2), (3, 1), (3, 2), (4, 1)]);
        assert_eq!((s.dropped_events, s.dropped_pins), (3, 2));
        let last = event(4, 2, State::InProgress);
        sink.event(&last);
        let s = flight.snapshot();
        assert_eq!((s.dropped_events, s.dropped_pins), (4, 2));
        // Every line reads back as the event it was (times to the microsecond, as recorded).
        assert_eq!(s.events()[3].to_json_line(), last.to_json_line());
    }

    /// A bound smaller than one line keeps nothing and counts everything; a snapshot is not
    /// changed by later events.
    #[test]
    fn an_event_larger_than_the_buffer_is_dropped_and_counted() {
        let flight = Flight::new(10);
        flight.push(&event(1, 1, State::InProgress));
        let s = flight.snapshot();
        assert_eq!(
            (
                s.entries.len(),
                s.lines.len(),
                s.dropped_events,
                s.dropped_pins
            ),
            (0, 0, 1, 1)
        );
        assert_eq!(s.first_at, None);
        let flight = Flight::new(1 << 20);
        flight.push(&event(1, 1, State::InProgress));
        let before = flight.snapshot();
        flight.push(&event(1, 2, State::Completed));
        assert_eq!(before.entries.len(), 1);
        assert_eq!(flight.snapshot().entries.len(), 2);
    }

    /// Thousands of events through a small buffer: never over its bound.
    #[test]
    fn the_bound_holds_under_a_storm() {
        let flight = Flight::new(64 * 1024);
        for id in 1..=5000 {
            flight.push(&event(id, 1, State::InProgress));
            flight.push(&event(id, 2, State::Completed));
        }
        let s = flight.snapshot();
        assert!(s.lines.len() <= 64 * 1024, "{}", s.lines.len());
        let kept = s.entries.len() as u64;
        assert_eq!(s.dropped_events + kept, 10_000);
        // The newest are kept, the last one last.
        assert_eq!(ids(&s).last(), Some(&(5000, 2)));
        assert!(s.dropped_pins >= s.dropped_events / 2);
    }

    #[test]
    fn a_dump_is_its_line_then_the_events_and_reads_back() {
        let flight = Flight::new(1 << 20);
        flight.push(&event(1, 1, State::InProgress));
        flight.push(&event(1, 2, State::Completed));
        let dump = Dump::new(
            flight.snapshot(),
            &Identity {
                run_id: "run".into(),
                detector_started: SystemTime::now(),
            },
        );
        let mut bytes = Vec::new();
        dump.write_to(&mut bytes).unwrap();
        assert_eq!(bytes.len() as u64, dump.len());
        let rec =
            crate::recording::parse_recording(std::str::from_utf8(&bytes).unwrap(), "d").unwrap();
        assert_eq!((rec.events.len(), rec.damaged_lines), (2, 0));
        assert_eq!(rec.dumps.len(), 1);
        let d = &rec.dumps[0];
        assert_eq!(
            (d.pid, d.events, d.dropped_events),
            (std::process::id(), 2, 0)
        );
        assert!(d.exe.contains("pinwatch"), "{}", d.exe);
        assert!(d.process_started.is_some_and(|t| t <= d.dumped_at));
        assert!(
            crate::recording::describe_dump(d).starts_with(&format!(
                "flight recording of pid {} ({}), dumped at ",
                d.pid, d.exe
            )),
            "{}",
            crate::recording::describe_dump(d)
        );
    }

    /// On a full disk the dump fails, naming why, and leaves no file — neither under its name
    /// nor a temporary one — and an older file under the name stays whole.
    #[test]
    fn a_full_disk_leaves_no_half_dump() {
        let dir = tempfile::tempdir().unwrap();
        let disk = super::super::record::tests::SmallDisk::mount(dir.path());
        let flight = Flight::new(1 << 20);
        for id in 1..=200 {
            flight.push(&event(id, 1, State::InProgress));
        }
        let dump = Dump::new(
            flight.snapshot(),
            &Identity {
                run_id: "run".into(),
                detector_started: SystemTime::now(),
            },
        );
        assert!(dump.len() > 64 * 1024, "{}", dump.len());
        let path = disk.0.join("dump.jsonl");
        let err = crate::files::write_whole_file(&path, false, |f| dump.write_to(f)).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
        let names = |d: &std::path::Path| -> Vec<std::ffi::OsString> {
            std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect()
        };
        assert!(names(&disk.0).is_empty(), "{:?}", names(&disk.0));
        std::fs::write(&path, "old\n").unwrap();
        let err = crate::files::write_whole_file(&path, true, |f| dump.write_to(f)).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old\n");
        assert_eq!(names(&disk.0), ["dump.jsonl"]);
        drop(disk);
    }
}
