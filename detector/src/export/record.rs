//! The JSON-lines recording (`PINWATCH_RECORD`, `pinwatch ctl <pid> record start`), rotated so
//! that it never fills the disk.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::Sink;
use crate::event::PinnedEvent;
use crate::report::rotated_path;
use crate::Error;

/// When a recording moves on to a fresh file: `rec.jsonl` becomes `rec.1.jsonl`, `rec.1.jsonl`
/// becomes `rec.2.jsonl`, …, and the file past `keep` is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Rotation {
    /// Rotate before a line would take the current file past this many bytes. A single line
    /// longer than that still goes whole into a file of its own.
    pub max_size: Option<u64>,
    /// Rotate before writing to a current file this old (its age counts from when this
    /// process started writing it).
    pub max_age: Option<Duration>,
    /// Rotated files kept (at least 1).
    pub keep: usize,
}

impl Rotation {
    /// Never rotate.
    pub const NEVER: Rotation = Rotation {
        max_size: None,
        max_age: None,
        keep: 1,
    };

    /// The limits `PINWATCH_RECORD_MAX_SIZE`, `_MAX_AGE` and `_KEEP` set.
    pub fn from_config(c: &crate::Config) -> Rotation {
        Rotation {
            max_size: c.record_max_size,
            max_age: c.record_max_age,
            keep: c.record_keep.max(1),
        }
    }
}

/// Appends each event to a file as one JSON line, rotating it by size and age.
///
/// Each line goes to the kernel in a single `write` as soon as the event arrives — no user-space
/// buffer — so a process killed with SIGKILL while a worker is stuck still leaves that worker's
/// `in_progress` event whole on disk, and never half a line. A line never spans two files.
#[derive(Debug)]
pub struct RecordSink {
    file: File,
    path: PathBuf,
    rotation: Rotation,
    /// Bytes in the current file.
    size: u64,
    /// When this process started writing the current file.
    since: Instant,
    failed: bool,
    events: u64,
    bytes: u64,
    rotations: u64,
    write_errors: u64,
}

/// What a recording has written, for `pinwatch ctl <pid> status` and `record stop`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct RecordStatus {
    /// The current file.
    pub path: PathBuf,
    /// Events written since the recording started.
    pub events: u64,
    /// Bytes written since the recording started.
    pub bytes: u64,
    /// Bytes in the current file.
    pub current_size: u64,
    /// Times the file was rotated.
    pub rotations: u64,
    /// Events that could not be written (the disk was full, the file was gone…).
    pub write_errors: u64,
    /// See [`Rotation::max_size`].
    pub max_size: Option<u64>,
    /// See [`Rotation::max_age`], in ms.
    pub max_age_ms: Option<u64>,
    /// See [`Rotation::keep`].
    pub keep: usize,
}

impl RecordSink {
    /// Opens (creating if needed) `path` for appending, never rotating it.
    pub fn open(path: &Path) -> Result<RecordSink, Error> {
        RecordSink::open_rotating(path, Rotation::NEVER)
    }

    /// Opens (creating if needed) `path` for appending, rotating it as `rotation` says.
    pub fn open_rotating(path: &Path, rotation: Rotation) -> Result<RecordSink, Error> {
        let (file, size) = append(path).map_err(|source| Error::Record {
            path: path.to_owned(),
            source,
        })?;
        Ok(RecordSink {
            file,
            path: path.to_owned(),
            rotation: Rotation {
                keep: rotation.keep.max(1),
                ..rotation
            },
            size,
            since: Instant::now(),
            failed: false,
            events: 0,
            bytes: 0,
            rotations: 0,
            write_errors: 0,
        })
    }

    /// What it has written so far.
    pub fn status(&self) -> RecordStatus {
        RecordStatus {
            path: self.path.clone(),
            events: self.events,
            bytes: self.bytes,
            current_size: self.size,
            rotations: self.rotations,
            write_errors: self.write_errors,
            max_size: self.rotation.max_size,
            max_age_ms: self.rotation.max_age.map(|d| d.as_millis() as u64),
            keep: self.rotation.keep,
        }
    }

    fn due(&self, len: u64) -> bool {
        self.size > 0
            && (self
                .rotation
                .max_size
                .is_some_and(|max| self.size + len > max)
                || self
                    .rotation
                    .max_age
                    .is_some_and(|age| self.since.elapsed() >= age))
    }

    /// Shifts the rotated files up by one (dropping the one past `keep`) and starts a fresh
    /// current file. On an error the current file stays in use, so nothing is lost.
    fn rotate(&mut self) -> std::io::Result<()> {
        let keep = self.rotation.keep;
        let oldest = rotated_path(&self.path, keep);
        match std::fs::remove_file(&oldest) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        for k in (1..keep).rev() {
            let from = rotated_path(&self.path, k);
            match std::fs::rename(&from, rotated_path(&self.path, k + 1)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        std::fs::rename(&self.path, rotated_path(&self.path, 1))?;
        let (file, size) = append(&self.path)?;
        self.file = file;
        self.size = size;
        self.since = Instant::now();
        self.rotations += 1;
        Ok(())
    }

    fn write_line(&mut self, line: &str) -> std::io::Result<()> {
        let len = line.len() as u64;
        if self.due(len) {
            self.rotate()?;
        }
        self.file.write_all(line.as_bytes())?;
        self.size += len;
        self.bytes += len;
        self.events += 1;
        Ok(())
    }
}

/// Opens `path` for appending; its current size.
fn append(path: &Path) -> std::io::Result<(File, u64)> {
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let size = file.metadata()?.len();
    Ok((file, size))
}

impl Sink for RecordSink {
    fn event(&mut self, event: &PinnedEvent) {
        let line = event.to_json_line();
        if let Err(e) = self.write_line(&line) {
            self.write_errors += 1;
            if !self.failed {
                self.failed = true;
                tracing::error!(
                    target: "pinwatch",
                    path = %self.path.display(),
                    "cannot append to the pinwatch recording: {e}; later events are lost until it is writable again"
                );
            }
        } else {
            self.failed = false;
        }
    }

    fn flush(&mut self) {
        let _ = self.file.sync_data();
    }
}

/// The one recording of a detector, which `PINWATCH_RECORD` starts and `pinwatch ctl` starts
/// and stops while the service runs. Its sink sits in the export thread's fan-out; the control
/// thread swaps the file in and out under the lock (the lock is taken per event on the export
/// thread, never on a worker or on the watchdog).
#[derive(Clone, Default)]
pub(crate) struct Recorder(Arc<Mutex<Option<RecordSink>>>);

impl Recorder {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<RecordSink>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts recording to `path`; fails when a recording runs already or the file cannot be
    /// opened.
    pub(crate) fn start(&self, path: &Path, rotation: Rotation) -> Result<(), String> {
        let mut slot = self.lock();
        if let Some(running) = slot.as_ref() {
            return Err(format!(
                "a recording is already running, to {}; stop it first (`record stop`)",
                running.path.display()
            ));
        }
        let sink = RecordSink::open_rotating(path, rotation).map_err(|e| match e {
            Error::Record { source, .. } => format!(
                "cannot open {} for appending: {source}; check that its directory exists and \
                 that the service's user may write there",
                path.display()
            ),
            other => other.to_string(),
        })?;
        *slot = Some(sink);
        Ok(())
    }

    /// Makes `sink` the recording (at start, from `PINWATCH_RECORD`).
    pub(crate) fn install(&self, sink: RecordSink) {
        *self.lock() = Some(sink);
    }

    /// Stops the recording, its data on disk; what it wrote. `None` when none was running.
    pub(crate) fn stop(&self) -> Option<RecordStatus> {
        let mut sink = self.lock().take()?;
        sink.flush();
        Some(sink.status())
    }

    /// What the running recording has written, if one runs.
    pub(crate) fn status(&self) -> Option<RecordStatus> {
        self.lock().as_ref().map(RecordSink::status)
    }

    /// The sink that writes to whichever recording runs.
    pub(crate) fn sink(&self) -> RecorderSink {
        RecorderSink(self.clone())
    }
}

/// See [`Recorder::sink`].
pub(crate) struct RecorderSink(Recorder);

impl Sink for RecorderSink {
    fn event(&mut self, event: &PinnedEvent) {
        if let Some(sink) = self.0.lock().as_mut() {
            sink.event(event);
        }
    }

    fn flush(&mut self) {
        if let Some(sink) = self.0.lock().as_mut() {
            sink.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{read_recording, recording_files};

    fn event(id: u64, pad: usize) -> PinnedEvent {
        let mut e = PinnedEvent::for_test(
            id,
            crate::event::State::Completed,
            crate::event::Reason::Sleep,
            30,
            7,
        );
        e.worker.name = "x".repeat(pad);
        e
    }

    /// Under a storm of events the files stay within the bound, only `keep` rotated files stay,
    /// every line is whole, and the set reads back as the newest events in order.
    #[test]
    fn rotation_keeps_the_bound_and_every_line_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.jsonl");
        let max = 4_000;
        let mut sink = RecordSink::open_rotating(
            &path,
            Rotation {
                max_size: Some(max),
                max_age: None,
                keep: 3,
            },
        )
        .unwrap();
        for id in 1..=500 {
            sink.event(&event(id, (id % 7) as usize * 40));
        }
        sink.flush();
        let st = sink.status();
        assert_eq!(st.events, 500);
        assert!(st.rotations > 10, "{st:?}");
        let files = recording_files(&path).unwrap();
        assert_eq!(
            files,
            vec![
                dir.path().join("rec.3.jsonl"),
                dir.path().join("rec.2.jsonl"),
                dir.path().join("rec.1.jsonl"),
                path.clone()
            ]
        );
        assert!(!dir.path().join("rec.4.jsonl").exists());
        for f in &files {
            let len = std::fs::metadata(f).unwrap().len();
            assert!(len <= max, "{} is {len} bytes", f.display());
        }
        let rec = read_recording(&path).unwrap();
        assert!(rec.warnings.is_empty(), "{:?}", rec.warnings);
        let ids: Vec<u64> = rec.events.iter().map(|e| e.id).collect();
        assert_eq!(*ids.last().unwrap(), 500);
        assert!(
            ids.windows(2).all(|w| w[1] == w[0] + 1),
            "ids not contiguous: {ids:?}"
        );
        assert!(ids.len() > 20);
    }

    #[test]
    fn a_line_longer_than_the_bound_gets_a_file_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec");
        let mut sink = RecordSink::open_rotating(
            &path,
            Rotation {
                max_size: Some(100),
                max_age: None,
                keep: 2,
            },
        )
        .unwrap();
        sink.event(&event(1, 0));
        sink.event(&event(2, 0));
        let rec = read_recording(&path).unwrap();
        assert_eq!(rec.events.len(), 2);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("rec.1"))
                .unwrap()
                .lines()
                .count(),
            1
        );
    }

    #[test]
    fn rotation_by_age() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.jsonl");
        let mut sink = RecordSink::open_rotating(
            &path,
            Rotation {
                max_size: None,
                max_age: Some(Duration::from_millis(1)),
                keep: 1,
            },
        )
        .unwrap();
        sink.event(&event(1, 0));
        std::thread::sleep(Duration::from_millis(5));
        sink.event(&event(2, 0));
        assert_eq!(sink.status().rotations, 1);
        let rec = read_recording(&path).unwrap();
        assert_eq!(rec.events.iter().map(|e| e.id).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn the_recorder_starts_once_and_stops_with_what_it_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let r = Recorder::default();
        let mut sink = r.sink();
        sink.event(&event(1, 0)); // nothing runs: dropped
        let path = dir.path().join("a.jsonl");
        r.start(&path, Rotation::NEVER).unwrap();
        let again = r.start(&dir.path().join("b.jsonl"), Rotation::NEVER);
        assert!(again.unwrap_err().contains("already running"));
        sink.event(&event(2, 0));
        let st = r.stop().unwrap();
        assert_eq!((st.events, st.path.clone()), (1, path.clone()));
        assert!(r.stop().is_none());
        sink.event(&event(3, 0));
        let ids: Vec<u64> = read_recording(&path)
            .unwrap()
            .events
            .iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(ids, [2]);
        let bad = r.start(&dir.path().join("no/such/dir/c.jsonl"), Rotation::NEVER);
        let bad = bad.unwrap_err();
        assert!(
            bad.contains("no/such/dir") && !bad.contains("PINWATCH_RECORD"),
            "{bad}"
        );
    }
}
