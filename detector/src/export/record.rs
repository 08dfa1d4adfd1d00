//! The JSON-lines recording (`PINWATCH_RECORD`).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::Sink;
use crate::event::PinnedEvent;
use crate::Error;

/// Appends each event to a file as one JSON line.
///
/// Each line goes to the kernel in a single `write` as soon as the event arrives — no user-space
/// buffer — so a process killed with SIGKILL while a worker is stuck still leaves that worker's
/// `in_progress` event whole on disk, and never half a line.
#[derive(Debug)]
pub struct RecordSink {
    file: File,
    path: PathBuf,
    failed: bool,
}

impl RecordSink {
    /// Opens (creating if needed) `path` for appending.
    pub fn open(path: &Path) -> Result<RecordSink, Error> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| Error::Record {
                path: path.to_owned(),
                source,
            })?;
        Ok(RecordSink {
            file,
            path: path.to_owned(),
            failed: false,
        })
    }
}

impl Sink for RecordSink {
    fn event(&mut self, event: &PinnedEvent) {
        let line = event.to_json_line();
        if let Err(e) = self.file.write_all(line.as_bytes()) {
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
