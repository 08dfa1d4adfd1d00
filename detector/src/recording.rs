//! Reading a recording back, and the two views of the `pinwatch` CLI: `print` (like
//! `jfr print --events jdk.VirtualThreadPinned`) and `summary` (like `jfr view pinned-threads`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::event::{DumpInfo, PinnedEvent, Reason, Victim, Victims};
use crate::text::Escaped;

/// A recording that cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The file cannot be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file could be read up to a line, then not.
    #[error("cannot read {path} after line {line}: {source}")]
    Stopped {
        /// The file.
        path: String,
        /// The last line read (1-based).
        line: usize,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A line is not a pinwatch event.
    #[error("{path}:{line}: {message}")]
    Line {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// What was read from a recording.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Recording {
    /// Every event, in file order.
    pub events: Vec<PinnedEvent>,
    /// Warnings, for a person: one line that sums up the damaged lines skipped, if any (for a
    /// file with nothing of pinwatch's in it, one that names them without blaming a write cut
    /// short).
    pub warnings: Vec<String>,
    /// Lines skipped because they are damaged (not UTF-8, or not JSON at all: a write cut short
    /// by a full disk, a crash mid-line), across all the files read.
    pub damaged_lines: usize,
    /// Lines skipped because another pinwatch version wrote them, in a recording schema this
    /// one does not read; not counted in [`damaged_lines`](Self::damaged_lines).
    pub other_schema_lines: usize,
    /// The schema of the first of those.
    pub other_schema: Option<u64>,
    /// The first [`MAX_DAMAGED_SHOWN`] of them, in file order.
    pub damaged: Vec<DamagedLine>,
    /// The `dump` lines read, in file order: a flight recording's dump
    /// ([`Detector::dump`](crate::Detector::dump), `pinwatch ctl <pid> dump`) starts with one,
    /// saying whose events follow and what was dropped for space.
    pub dumps: Vec<DumpInfo>,
    /// A damaged line began as pinwatch's lines do (`{"schema":`), among all.
    any_ours: bool,
    /// The first file whose first line was gzip's magic number (a compressed recording), as
    /// messages name it.
    gzipped: Option<String>,
}

/// Why a first line of gzip's magic number is no event, and what to do.
const GZIPPED: &str =
    "compressed with gzip: read it through zcat (`zcat FILE | pinwatch summary -`)";

impl Recording {
    /// Nothing in it is pinwatch's: no event, no dump, no line of another version, no damaged
    /// line that began as pinwatch's do — some other file (a service's stderr), or compressed:
    /// either way its lines are listed without blaming a disk.
    fn foreign(&self) -> bool {
        self.events.is_empty()
            && self.dumps.is_empty()
            && self.other_schema_lines == 0
            && !self.any_ours
    }

    /// For a file where lines were skipped and no event was read, what it is, in one sentence
    /// naming it as `name`: compressed, another version's, a recording whose every line is
    /// damaged, or no recording at all. `None` when an event was read or nothing was skipped
    /// (an empty recording). Readers say it first, then the [`warnings`](Self::warnings).
    pub fn no_event_verdict(&self, name: &str) -> Option<String> {
        // A flight dump of no event is a recording read whole, its damage warned of.
        if !self.events.is_empty()
            || !self.dumps.is_empty()
            || self.damaged_lines + self.other_schema_lines == 0
        {
            return None;
        }
        Some(if let Some(schema) = self.other_schema {
            format!(
                "{name} holds no pinwatch event this version reads: it was written by another \
                 pinwatch version (recording schema {schema}); read it with that version"
            )
        } else if self.any_ours {
            format!("{name} holds no readable pinwatch event: every event line in it is damaged")
        } else if let Some(file) = &self.gzipped {
            format!("{name} holds no pinwatch event as it is: {file} is {GZIPPED}")
        } else {
            format!("{name} holds no pinwatch event; is it a recording (a PINWATCH_RECORD file)?")
        })
    }

    /// One line per dump in it ([`describe_dump`]), for
    /// the head of `print`, `summary` and `report`.
    pub fn describe_dumps(&self) -> Vec<String> {
        self.dumps.iter().map(describe_dump).collect()
    }
}

/// How many damaged lines a [`Recording`] names one by one (the rest are only counted).
pub const MAX_DAMAGED_SHOWN: usize = 5;

/// A line of a recording that was skipped: see [`Recording::damaged`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DamagedLine {
    /// The file.
    pub file: String,
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub why: String,
    /// It is the file's last line and has no newline: the file was cut off there.
    pub cut_off: bool,
}

impl Recording {
    fn skip(&mut self, file: &str, line: usize, why: String, raw: &[u8], cut_off: bool) {
        self.damaged_lines += 1;
        // Begun as every line pinwatch writes is (or cut off before that much was written): a
        // recording's line, damaged, rather than a line of some other file.
        const OURS: &[u8] = br#"{"schema":"#;
        self.any_ours |=
            raw.starts_with(OURS) || (cut_off && raw.len() >= 2 && OURS.starts_with(raw));
        if self.damaged.len() < MAX_DAMAGED_SHOWN {
            self.damaged.push(DamagedLine {
                // Both may quote what the file holds (a parser's message quotes the bad value):
                // shown escaped wherever the warning goes.
                file: Escaped(file).to_string(),
                line,
                why: Escaped(why).to_string(),
                cut_off,
            });
        }
    }

    /// A line of another schema version, counted apart from damage: nothing is wrong with it
    /// but the version reading it.
    fn other_schema(&mut self, schema: u64) {
        self.other_schema_lines += 1;
        self.other_schema.get_or_insert(schema);
    }

    /// The warnings that name the lines skipped, once every file is read.
    fn sum_up(&mut self) {
        if let Some(schema) = self.other_schema {
            let n = self.other_schema_lines;
            self.warnings.push(format!(
                "skipped {n} line{} written by another pinwatch version (recording schema \
                 {schema}{}; this one reads schemas {} to {}): read {} with the version that \
                 wrote {}",
                if n == 1 { "" } else { "s" },
                if n == 1 { "" } else { " for the first" },
                crate::event::OLDEST_READABLE_SCHEMA,
                crate::event::RECORD_SCHEMA,
                if n == 1 { "it" } else { "them" },
                if n == 1 { "it" } else { "them" },
            ));
        }
        if self.damaged_lines == 0 {
            return;
        }
        let n = self.damaged_lines;
        // Some other file (not a recording that lost lines): its last line is no recording
        // cut off, and no disk is blamed; the verdict says it is no recording.
        let foreign = self.foreign();
        let mut at: Vec<String> = self
            .damaged
            .iter()
            .map(|d| {
                if d.cut_off && !foreign {
                    format!(
                        "{}:{} (last line is incomplete: the recording was cut off)",
                        d.file, d.line
                    )
                } else {
                    format!("{}:{}", d.file, d.line)
                }
            })
            .collect();
        if n > self.damaged.len() {
            at.push(format!("and {} more", n - self.damaged.len()));
        }
        // What is wrong with the first one, bounded (it may quote a crafted line).
        let first: String = self.damaged[0].why.chars().take(160).collect();
        if foreign {
            self.warnings.push(format!(
                "skipped {n} line{} ({}); the first: {first}",
                if n == 1 { "" } else { "s" },
                at.join(", ")
            ));
            return;
        }
        self.warnings.push(format!(
            "skipped {n} damaged line{} ({}): not JSON (as a write cut short by a full disk or a \
             crash leaves it), a field no pinwatch writes or longer than any line it writes (the \
             first: {first}){}",
            if n == 1 { "" } else { "s" },
            at.join(", "),
            if self.events.is_empty() && self.dumps.is_empty() {
                ""
            } else {
                "; every other line was read"
            }
        ));
    }
}

/// A flight recording dump's `dump` line in one sentence, for people: `flight recording of pid 42 (/usr/bin/svc), dumped at …; 120
/// earlier events of 50 pins were dropped for space`.
pub fn describe_dump(d: &DumpInfo) -> String {
    let exe = if d.exe.is_empty() {
        String::new()
    } else {
        format!(" ({})", d.exe)
    };
    let dropped = if d.dropped_events == 0 {
        "nothing was dropped for space".to_owned()
    } else {
        format!(
            "{} earlier event{} of {} pin{} {} dropped for space (the buffer holds {})",
            d.dropped_events,
            if d.dropped_events == 1 { "" } else { "s" },
            d.dropped_pins,
            if d.dropped_pins == 1 { "" } else { "s" },
            if d.dropped_events == 1 { "was" } else { "were" },
            bytesize::ByteSize(d.flight_size).display().iec()
        )
    };
    format!(
        "flight recording of pid {}{exe}, dumped at {}; {dropped}",
        d.pid,
        format_time(d.dumped_at)
    )
}

/// The files of the recording `path`, oldest first: its rotated files (`rec.N.jsonl` …
/// `rec.1.jsonl`) that exist, then `path` itself; not a file named like a rotated one but
/// numbered far past them, another recording's ([`read_recording`] says what it left out).
pub fn recording_files(path: &Path) -> Result<Vec<std::path::PathBuf>, ReadError> {
    recording_files_saying(path).map(|(files, _)| files)
}

/// [`recording_files`], with warnings for what a reader should know it left out.
///
/// A file numbered far past the other rotated files is another recording's
/// ([`rotated_run`](crate::files::rotated_run)), and was read as part of this one, silently
/// (helper-105): it is left out, and named. A directory that cannot be listed (mode `0711`, as
/// a home directory often is) leaves `path` alone, said so; it was an error that blamed `path`,
/// which could be read.
fn recording_files_saying(
    path: &Path,
) -> Result<(Vec<std::path::PathBuf>, Vec<String>), ReadError> {
    let io = |source| ReadError::Io {
        path: Escaped(path.display()).to_string(),
        source,
    };
    std::fs::metadata(path).map_err(io)?;
    let mut warnings = Vec::new();
    let mut rotated: Vec<(usize, std::path::PathBuf)> = Vec::new();
    let dir = crate::files::dir_of(path);
    let listed = std::fs::read_dir(dir).and_then(|entries| {
        for entry in entries {
            let candidate = entry?.path();
            // A name is rotated file k of `path` exactly when it is rotated_path(path, k).
            if let Some(k) = crate::files::rotation_number(path, &candidate) {
                rotated.push((k, candidate));
            }
        }
        Ok(())
    });
    if let Err(e) = listed {
        warnings.push(format!(
            "could not look for rotated files of {} in {} ({e}): only it was read",
            Escaped(path.display()),
            Escaped(dir.display())
        ));
        return Ok((vec![path.to_owned()], warnings));
    }
    rotated.sort_by_key(|r| r.0);
    let numbers: Vec<usize> = rotated.iter().map(|r| r.0).collect();
    let kept = crate::files::rotated_run(&numbers);
    let strays = rotated.split_off(kept);
    if !strays.is_empty() {
        let named: Vec<String> = strays
            .iter()
            .take(3)
            .map(|(_, p)| Escaped(p.display()).to_string())
            .collect();
        let more = match strays.len() {
            n @ 4.. => format!(" and {} more", n - 3),
            _ => String::new(),
        };
        let others = match rotated.last() {
            Some((k, _)) => format!("its rotated files go up to {k}"),
            None => "it has no rotated file numbered below".to_owned(),
        };
        warnings.push(format!(
            "left out {}{more}: named like rotated files of {}, but {others}, and a rotation \
             numbers them from 1 up: another recording's; read {} by its own name",
            named.join(", "),
            Escaped(path.display()),
            if strays.len() == 1 { "it" } else { "each" },
        ));
    }
    let mut files: Vec<std::path::PathBuf> = rotated.into_iter().rev().map(|(_, p)| p).collect();
    files.push(path.to_owned());
    Ok((files, warnings))
}

/// Reads a recording: `path` and, before it, its rotated files (`rec.N.jsonl` … `rec.1.jsonl`),
/// as one recording, oldest first.
///
/// A damaged line — not UTF-8 or not JSON at all, as a write cut short by a full disk or a
/// crash mid-line leaves it, an event with a field of the wrong type or out of range, a line of
/// another kind or schema version, as a crafted or foreign file may hold — is skipped and
/// counted in [`Recording::damaged_lines`], with one warning naming the first few by file and
/// line and saying what was wrong with the first. Each file is read a line at a time, so that
/// memory is the events and dumps kept and one line: a line longer than [`MAX_LINE_BYTES`]
/// (without a `\r\n`'s `\r`) is skipped as damaged, unless blank, and a pipe that never ends is
/// read until it does.
///
/// Each file must be a regular file: a FIFO or a device among the rotated files, as a crafted
/// set may hold, would never end (and opening some devices does something), so each is looked
/// at before it is opened, and again once open. The file named may also be a pipe
/// (`/dev/stdin`, `<(zcat rec.jsonl.gz)`). A rotated file must belong to the user whose the
/// named file is, or to root: one that another user put beside it (in `/tmp`) is not part of
/// the recording.
/// A rotated file that cannot be read — gone as the recording rotated, another user's, or not
/// a regular file — is skipped with a warning; `path` itself must be read.
pub fn read_recording(path: &Path) -> Result<Recording, ReadError> {
    use std::os::unix::fs::MetadataExt;
    let mut rec = Recording::default();
    let (files, warnings) = recording_files_saying(path)?;
    rec.warnings = warnings;
    let before = std::fs::metadata(path).ok();
    let owner = before.as_ref().map(|m| m.uid());
    for file in &files {
        let named = file.as_path() == path;
        let mut lines = 0;
        let read = open_to_read(file, named, owner.filter(|_| !named)).and_then(|f| {
            let name = file.display().to_string();
            read_lines(
                std::io::BufReader::with_capacity(READ_BUFFER, f),
                &name,
                &mut lines,
                &mut rec,
            )
        });
        match read {
            Ok(()) => {}
            Err(e) if !named => rec.warnings.push(if lines == 0 {
                format!(
                    "skipped {}, a rotated file of {}: {e}; the others were read",
                    Escaped(file.display()),
                    Escaped(path.display())
                )
            } else {
                format!(
                    "stopped reading {}, a rotated file of {}, after line {lines}: {e}; the \
                     lines before it and the other files were read",
                    Escaped(file.display()),
                    Escaped(path.display())
                )
            }),
            Err(source) => return Err(failed(&file.display().to_string(), lines, source)),
        }
    }
    // The names moved while the files were read (the service rotated its recording): a
    // rotated file may have been read twice, or not at all.
    let id = |m: &std::fs::Metadata| (m.dev(), m.ino());
    if before.as_ref().is_some_and(|m| m.is_file())
        && std::fs::metadata(path).ok().map(|m| id(&m)) != before.as_ref().map(id)
    {
        rec.warnings.push(format!(
            "{} rotated while it was read: some events may be missing or shown twice; read it \
             again",
            Escaped(path.display())
        ));
    }
    rec.sum_up();
    Ok(rec)
}

/// Opens a file of a recording to read it (see [`read_recording`]): a regular file, or a pipe
/// when it is the one `named`; of user `owner` when given.
fn open_to_read(path: &Path, named: bool, owner: Option<u32>) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
    let check = |m: &std::fs::Metadata| {
        if !(m.is_file() || named && m.file_type().is_fifo()) {
            // The recording named may be a pipe (helper-93: the message said a FIFO was not).
            let what = if named {
                "not a regular file or a pipe (a directory or a device): a recording is the file \
                 pinwatch wrote, or a pipe of one (`-` reads standard input)"
            } else {
                "not a regular file (a directory, a FIFO or a device): a recording is the file \
                 pinwatch wrote"
            };
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, what));
        }
        match owner {
            // Root's may be the service's too (a file made for it, then rotated).
            Some(uid) if m.uid() != uid && m.uid() != 0 => Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "it belongs to uid {}, not to uid {uid} whose recording it would be part of \
                     (another user may have put it there)",
                    m.uid()
                ),
            )),
            _ => Ok(()),
        }
    };
    check(&std::fs::metadata(path)?)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        // A FIFO swapped in meanwhile is not waited for (a named pipe is: the user gave it).
        .custom_flags(if named { 0 } else { libc::O_NONBLOCK })
        .open(path)?;
    check(&file.metadata()?)?;
    Ok(file)
}

/// [`read_recording`] on text; `name` names it in messages.
pub fn parse_recording(text: &str, name: &str) -> Result<Recording, ReadError> {
    read_recording_from(text.as_bytes(), name)
}

/// [`read_recording`] of one stream, read as it is (no rotated files, nothing reopened):
/// standard input, as `cat -` reads it — a pipe, a socket, a file from its offset on. `name`
/// names it in messages.
pub fn read_recording_from(r: impl std::io::Read, name: &str) -> Result<Recording, ReadError> {
    let mut rec = Recording::default();
    let mut lines = 0;
    let r = std::io::BufReader::with_capacity(READ_BUFFER, r);
    read_lines(r, name, &mut lines, &mut rec).map_err(|e| failed(name, lines, e))?;
    rec.sum_up();
    Ok(rec)
}

/// The error of a read of `name` that failed after `lines` lines.
fn failed(name: &str, lines: usize, source: std::io::Error) -> ReadError {
    let path = Escaped(name).to_string();
    match lines {
        0 => ReadError::Io { path, source },
        line => ReadError::Stopped { path, line, source },
    }
}

/// The longest line [`read_recording`] reads: a longer one is skipped as damaged, read through
/// without being kept, so that a crafted file or an endless pipe with no newline
/// (`pinwatch summary <(cat /dev/zero)`) is read in bounded memory. 64 MiB: far more than an
/// event of 128 frames with long names and every span field takes (tens of KB).
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// How much of a file is read at a time.
const READ_BUFFER: usize = 64 << 10;

/// Adds the events of one file's lines, read from `r`, to `rec`, skipping (and counting)
/// damaged lines; `lines` counts the lines read, for a message about a read that failed.
/// Memory is one line at a time (at most [`MAX_LINE_BYTES`]) besides the events.
fn read_lines(
    mut r: impl std::io::BufRead,
    name: &str,
    lines: &mut usize,
    rec: &mut Recording,
) -> std::io::Result<()> {
    let mut line = Vec::new();
    // Room for the `\r` of a `\r\n`, which is no part of the line.
    while let Some(read) = next_line(&mut r, &mut line, MAX_LINE_BYTES + 1)? {
        *lines += 1;
        let number = *lines;
        // The file's last line, with no newline: the write was cut off there.
        let cut_off = !read.ended;
        let raw = line.strip_suffix(b"\r").unwrap_or(&line);
        // A compressed recording (`rec.jsonl.gz`) given as it is: said so, with how to read
        // it, instead of "cut off" and "not UTF-8" (helper-93). Only its first line is looked
        // at: the rest of it is damage like any.
        if number == 1 && raw.starts_with(&[0x1f, 0x8b]) {
            rec.gzipped.get_or_insert_with(|| Escaped(name).to_string());
            rec.skip(name, number, GZIPPED.to_owned(), raw, false);
            continue;
        }
        if read.too_long || raw.len() > MAX_LINE_BYTES {
            // A blank line is passed over, however long.
            if !(read.blank && raw.iter().all(u8::is_ascii_whitespace)) {
                rec.skip(
                    name,
                    number,
                    format!("longer than {} MiB", MAX_LINE_BYTES >> 20),
                    raw,
                    cut_off,
                );
            }
            continue;
        }
        let Ok(text) = std::str::from_utf8(raw) else {
            rec.skip(name, number, "not UTF-8".to_owned(), raw, cut_off);
            continue;
        };
        if text.trim().is_empty() {
            continue;
        }
        match crate::event::Line::parse(text) {
            Ok(crate::event::Line::Pinned(e)) => rec.events.push(*e),
            Ok(crate::event::Line::Dump(d)) => rec.dumps.push(d),
            Err(crate::event::ParseLineError::Schema(v)) => rec.other_schema(v),
            // Not JSON, a pinwatch event with a field that is not what the schema says (a wrong
            // type, a number out of range), another kind of line or another schema: either way
            // this line cannot be read, and the rest of the recording is still worth reading.
            // The warning says what was wrong with the first; a file none of whose lines is an
            // event is no recording at all (the CLI says so and fails).
            Err(e) => rec.skip(name, number, e.to_string(), raw, cut_off),
        }
    }
    Ok(())
}

/// How [`next_line`] found a line's end.
struct LineRead {
    /// At a newline (not at the end of the input).
    ended: bool,
    /// Longer than the bound: not kept.
    too_long: bool,
    /// When `too_long`: every byte of it was ASCII whitespace.
    blank: bool,
}

/// The next line of `r` into `line`, its newline left off; `None` at the end of the input. A
/// line longer than `max` bytes is read through to its end without being kept (`too_long`,
/// `line` empty), noting whether it was `blank`.
fn next_line(
    r: &mut impl std::io::BufRead,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Option<LineRead>> {
    line.clear();
    let mut any = false;
    let mut too_long = false;
    let mut blank = true;
    loop {
        let buf = match r.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(any.then_some(LineRead {
                ended: false,
                too_long,
                blank,
            }));
        }
        any = true;
        let end = memchr::memchr(b'\n', buf);
        let part = &buf[..end.unwrap_or(buf.len())];
        if too_long {
            blank = blank && part.iter().all(u8::is_ascii_whitespace);
        } else if line.len() + part.len() > max {
            too_long = true;
            blank = line.iter().chain(part).all(u8::is_ascii_whitespace);
            line.clear();
        } else {
            line.extend_from_slice(part);
        }
        let used = end.map_or(buf.len(), |i| i + 1);
        r.consume(used);
        if end.is_some() {
            return Ok(Some(LineRead {
                ended: true,
                too_long,
                blank,
            }));
        }
    }
}

/// The last report of each pinned poll (a `completed` or `retracted` one supersedes its
/// `in_progress` ones, and a later report number an earlier one, in whatever order the lines
/// come: dumps joined in the wrong order, a file read while it rotated), in order of first
/// appearance. A poll is named by its run and its id, so that the runs appended to one
/// recording stay apart.
pub fn latest_reports<'a>(
    events: impl IntoIterator<Item = &'a PinnedEvent>,
) -> Vec<&'a PinnedEvent> {
    use std::collections::hash_map::{Entry, HashMap};
    let rank = |e: &PinnedEvent| (e.state != crate::State::InProgress, e.report);
    let mut latest: Vec<&PinnedEvent> = Vec::new();
    // Where each poll's report is in `latest`: hashed, since every event of a run shares its
    // run id, which a tree would compare in full at each of its levels.
    let mut at: HashMap<(&str, u64), usize> = HashMap::new();
    for e in events {
        match at.entry((e.run_id.as_str(), e.id)) {
            Entry::Vacant(v) => {
                v.insert(latest.len());
                latest.push(e);
            }
            Entry::Occupied(o) => {
                let kept = &mut latest[*o.get()];
                if rank(kept) <= rank(e) {
                    *kept = e;
                }
            }
        }
    }
    latest
}

/// `t` in RFC 3339 with milliseconds, for any `t`: humantime's formatter panics on a time before
/// the epoch and fails on one past the year 9999 (which a recording's start plus its duration
/// can reach); those are written as seconds from the epoch instead.
pub fn format_time(t: SystemTime) -> String {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) if d.as_secs() < RFC3339_END_SECS => humantime::format_rfc3339_millis(t).to_string(),
        Ok(d) => format!("{} s after the epoch", d.as_secs()),
        Err(e) => format!("{} s before the epoch", e.duration().as_secs()),
    }
}

/// 10000-01-01T00:00:00Z, seconds after the epoch: the first time RFC 3339 cannot write.
const RFC3339_END_SECS: u64 = 253_402_300_800;

fn ms(d: Duration) -> String {
    human_ms(d.as_secs_f64() * 1e3)
}

/// A duration of `ms` milliseconds as every view shows it to a person (`print`, `summary`, the
/// report page, `ctl`): `12.3 ms` below a second, `1.52 s` below a minute, `7m 12s` (whole
/// seconds, humantime's style) from a minute on. The `--json` outputs keep raw numbers.
/// A value that is not a finite number of milliseconds ≥ 0 (only a crafted recording has one)
/// is written as it is, with `ms`.
pub fn human_ms(ms: f64) -> String {
    if !ms.is_finite() || ms < 0.0 {
        return format!("{ms} ms");
    }
    // Each format is chosen on the value as it would be written, so that 999.96 ms is `1.00 s`
    // and not `1000.0 ms`, and 59.996 s is `1m` and not `60.00 s`.
    let tenths = (ms * 10.0).round() / 10.0;
    if tenths < 1000.0 {
        return format!("{tenths:.1} ms");
    }
    let hundredths = (ms / 10.0).round() / 100.0;
    if hundredths < 60.0 {
        return format!("{hundredths:.2} s");
    }
    // `as` saturates: a crafted 1e300 ms is u64::MAX seconds, which humantime writes.
    let secs = (ms / 1e3).round() as u64;
    humantime::format_duration(Duration::from_secs(secs)).to_string()
}

/// What stands for the top frame of pin `e` when it has none, in every view: why no stack was
/// sampled (`[no stack: signal_pending]`), or `[no application frame]` when there is a stack.
pub fn no_top_frame(e: &PinnedEvent) -> String {
    if e.stack.is_empty() {
        no_stack(e)
    } else {
        "[no application frame]".to_owned()
    }
}

/// `[no stack: WHY]` for pin `e` without a stack, in every view (`not sampled` when the
/// recording does not say why).
pub fn no_stack(e: &PinnedEvent) -> String {
    format!(
        "[no stack: {}]",
        e.no_stack.as_deref().unwrap_or("not sampled")
    )
}

/// `pinwatch print`: one block per event, like `jfr print --events jdk.VirtualThreadPinned`.
pub fn render_print(events: &[PinnedEvent]) -> String {
    let mut out = String::new();
    for e in events {
        print_event(&mut out, e);
    }
    out
}

/// One event's block of [`render_print`], added to `out`: a long recording is written a few
/// blocks at a time.
pub fn print_event(out: &mut String, e: &PinnedEvent) {
    let _ = writeln!(out, "pinwatch.Pinned {{");
    let _ = writeln!(out, "  id = {}", e.id);
    if !e.run_id.is_empty() {
        let _ = writeln!(out, "  run = {} (pid {})", Escaped(&e.run_id), e.pid);
    }
    let _ = writeln!(
        out,
        "  state = \"{}\" (report {})",
        e.state.as_str(),
        e.report
    );
    let _ = writeln!(out, "  startTime = {}", format_time(e.start));
    let _ = writeln!(out, "  duration = {}", ms(e.duration));
    if !e.cpu_wait.is_zero() {
        let _ = writeln!(
            out,
            "  cpuWait = {} (runnable, waiting for a CPU; not counted toward the threshold)",
            ms(e.cpu_wait)
        );
    }
    let _ = writeln!(out, "  threshold = {}", ms(e.threshold));
    let task = e.task_id.map_or_else(|| "?".to_owned(), |t| t.to_string());
    match &e.spawned_at {
        Some(at) => {
            let _ = writeln!(out, "  task = {task} spawned at {}", Escaped(at));
        }
        None => {
            let _ = writeln!(out, "  task = {task}");
        }
    }
    let _ = writeln!(
        out,
        "  carrierThread = \"{}\" (worker {}, tid {})",
        Escaped(&e.worker.name),
        e.worker
            .index
            .map_or_else(|| "?".to_owned(), |i| i.to_string()),
        e.worker.tid
    );
    let reason = e.reason.map_or("unknown", Reason::as_str);
    if e.other_reasons.is_empty() {
        let _ = writeln!(out, "  pinnedReason = \"{reason}\"");
    } else {
        let others: Vec<&str> = e.other_reasons.iter().map(|r| r.as_str()).collect();
        let _ = writeln!(
            out,
            "  pinnedReason = \"{reason}\" (also seen: {})",
            others.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "  blockingOperation = \"{}\"",
        Escaped(e.blocking_operation.as_deref().unwrap_or("unknown"))
    );
    if let Some(advice) = &e.advice {
        let _ = writeln!(out, "  advice = \"{}\"", Escaped(advice));
    }
    if let Some(stall) = e.stall_description() {
        let _ = writeln!(out, "  runtimeStalled = true ({stall})");
    }
    if let Some(advice) = &e.runtime_advice {
        let _ = writeln!(out, "  runtimeAdvice = \"{}\"", Escaped(advice));
    }
    if let Some(n) = e.tasks_queued_behind {
        let _ = writeln!(out, "  tasksQueuedBehind = {n}");
    }
    if let Some(v) = &e.victims {
        print_victims(out, v, e.held_drivers());
    }
    // Which request: the span chain, outermost first, and its trace.
    if !e.spans.is_empty() {
        let _ = writeln!(out, "  spans = [");
        for span in &e.spans {
            let _ = writeln!(
                out,
                "    {} ({})",
                Escaped(span.display()),
                Escaped(&span.target)
            );
        }
        let _ = writeln!(out, "  ]");
    }
    if let Some(trace) = &e.trace_id {
        match &e.span_id {
            Some(span) => {
                let _ = writeln!(
                    out,
                    "  traceId = {} (span {})",
                    Escaped(trace),
                    Escaped(span)
                );
            }
            None => {
                let _ = writeln!(out, "  traceId = {}", Escaped(trace));
            }
        }
    }
    match &e.top_frame {
        Some(f) => {
            let _ = writeln!(out, "  topApplicationFrame = {}", Escaped(f));
        }
        None => {
            let _ = writeln!(out, "  topApplicationFrame = {}", Escaped(no_top_frame(e)));
        }
    }
    if let Some(app) = e.caller_frame() {
        let _ = writeln!(out, "  calledFrom = {}", Escaped(app));
    }
    if !e.profile.is_empty() {
        let _ = writeln!(out, "  samples = {} [", e.samples);
        for p in &e.profile {
            let _ = writeln!(out, "    {:>4}  {}", p.samples, Escaped(&p.frame));
        }
        let _ = writeln!(out, "  ]");
    }
    for l in &e.held_locks {
        let _ = writeln!(
            out,
            "  heldLock = {} acquired at {}",
            Escaped(&l.kind),
            Escaped(&l.acquired_at)
        );
    }
    if let Some(h) = &e.lock_holder {
        let _ = writeln!(
            out,
            "  lockHolder = \"{}\" (tid {}) acquired at {}",
            Escaped(&h.worker.name),
            h.worker.tid,
            Escaped(&h.acquired_at)
        );
    }
    if e.stack.is_empty() {
        let _ = writeln!(out, "  stackTrace = {}", Escaped(no_stack(e)));
    } else {
        let _ = writeln!(out, "  stackTrace = [");
        for f in &e.stack {
            if f.locks > 0 {
                let _ = writeln!(out, "    {} <== locks:{}", Escaped(f), f.locks);
            } else {
                let _ = writeln!(out, "    {}", Escaped(f));
            }
        }
        let _ = writeln!(out, "  ]");
    }
    let _ = writeln!(out, "}}");
}

/// `print`'s lines for the tasks that waited behind a pin ([`PinnedEvent::victims`]): measured,
/// how many, their waits, and each one named (wait, spawn place, worker, LIFO slot, spans); not
/// measured, the tasks the worker ran right after, saying that no wait was measured.
fn print_victims(out: &mut String, v: &Victims, held_drivers: bool) {
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    if v.measured {
        if v.tasks == 0 && v.worst.is_empty() {
            let _ = writeln!(
                out,
                "  victims = none (measured: no task waited the threshold behind it{})",
                if held_drivers {
                    " once woken; tasks whose timers or I/O the pin held back are not counted"
                } else {
                    ""
                }
            );
        } else {
            let mut head = format!(
                "  victims = {} task{} waited behind it (measured{})",
                v.tasks,
                plural(v.tasks),
                if held_drivers {
                    "; not counting tasks whose timers or I/O the pin held back"
                } else {
                    ""
                }
            );
            let mut waits = Vec::new();
            if let Some(t) = v.total_wait {
                waits.push(format!("{} in all", ms(t)));
            }
            if let Some(m) = v.max_wait {
                waits.push(format!("the longest {}", ms(m)));
            }
            if !waits.is_empty() {
                head.push_str(": ");
                head.push_str(&waits.join(", "));
            }
            let unnamed = v.tasks.saturating_sub(v.worst.len());
            let more = (unnamed > 0).then(|| {
                format!(
                    "… and {unnamed} more, not named (a pin names its {} longest waits)",
                    v.worst.len()
                )
            });
            print_victim_list(out, head, &v.worst, more);
        }
    } else {
        let head = format!(
            "  victims = not measured: the worker ran {} of the service's tasks right after it \
             (no wait is measured without pinwatch's schedule-latency feature)",
            v.tasks
        );
        print_victim_list(out, head, &v.worst, None);
    }
    if let Some(n) = v.queue_depth_max {
        let _ = writeln!(
            out,
            "  queueDepthMax = {n} (tasks in the worker's local run queue)"
        );
    }
}

/// `head`, then `victims` one per line in brackets, and `more` last in them (just `head`
/// without any victim).
fn print_victim_list(out: &mut String, head: String, victims: &[Victim], more: Option<String>) {
    if victims.is_empty() {
        let _ = writeln!(out, "{head}");
        return;
    }
    let _ = writeln!(out, "{head} [");
    for v in victims {
        let mut line = String::from("    ");
        if let Some(w) = v.wait {
            line.push_str(&format!("waited {}: ", ms(w)));
        }
        line.push_str(&format!("task {}", v.task_id));
        if let Some(at) = &v.spawned_at {
            line.push_str(&format!(" spawned at {}", Escaped(at)));
        }
        if let Some(w) = v.worker {
            line.push_str(&format!(", polled by worker {w}"));
        }
        if v.lifo {
            line.push_str(" [LIFO slot]");
        }
        let _ = writeln!(out, "{line}");
        if !v.spans.is_empty() {
            let spans: Vec<String> = v
                .spans
                .iter()
                .map(|s| format!("{} ({})", Escaped(s.display()), Escaped(&s.target)))
                .collect();
            let _ = writeln!(out, "      in {}", spans.join(" > "));
        }
    }
    if let Some(more) = more {
        let _ = writeln!(out, "    {more}");
    }
    let _ = writeln!(out, "  ]");
}

/// One row of `pinwatch summary`: a function (the top application frame's), with the lines of
/// it that pins were at in [`lines`](Self::lines); or one of those lines.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct SummaryRow {
    /// A function row: the function and its file (`function (file)`, or `function` when its
    /// lines are in several files or none), or what stands for a pin without a top frame
    /// (`[no stack: signal_pending]`). A line row: the whole top frame, `function (file:line)`.
    pub frame: String,
    /// A line row: where, `file:line` (`file`, or `(no file)`, when the frame says less).
    /// Empty in a function row.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub at: String,
    /// A line row whose pins spent their time in a library called from that line: the
    /// library's function and file (`in argon2::block::compress (argon2-0.5.3/src/block.rs)`).
    /// Rows are the service's own frames ([`PinnedEvent::app_frame`]), else the top frame.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub via: String,
    /// Pinned polls.
    pub count: usize,
    /// Longest, in ms.
    pub longest_ms: f64,
    /// Total, in ms.
    pub total_ms: f64,
    /// Reasons and how many polls had each, most first.
    pub reasons: Vec<(String, usize)>,
    /// Polls still running at their last report.
    pub in_progress: usize,
    /// Polls that stalled the whole runtime (`runtime_stalled`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stalled: usize,
    /// What usually fixes the row's pins: the advice most of them got (of the most common
    /// reason's, on a tie).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub advice: String,
    /// The other advice its pins got, most given first (at most three): pins of one line may
    /// block in different ways (one writing to a full pipe, one waiting for the lock the writer
    /// holds).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_advice: Vec<String>,
    /// A function row: its lines, sorted like the functions (by total time pinned, most
    /// first). Empty in a line row, and for pins without a top frame.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<SummaryRow>,
    /// Each advice given, with how many pins got it, for `advice` and `more_advice`.
    #[serde(skip)]
    advice_given: Vec<(String, usize)>,
    /// Where each advice is in `advice_given`: a recording of many distinct advice texts (a
    /// crafted one) took a search of them all per pin (helper-105: 60,000 took 81 s).
    #[serde(skip)]
    advice_at: std::collections::HashMap<String, usize>,
    /// A line row: its file, to say a function's file once.
    #[serde(skip)]
    file: Option<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl SummaryRow {
    fn new(frame: String, at: String, file: Option<String>) -> SummaryRow {
        SummaryRow {
            frame,
            at,
            via: String::new(),
            count: 0,
            longest_ms: 0.0,
            total_ms: 0.0,
            reasons: Vec::new(),
            in_progress: 0,
            stalled: 0,
            advice: String::new(),
            more_advice: Vec::new(),
            lines: Vec::new(),
            advice_given: Vec::new(),
            advice_at: std::collections::HashMap::new(),
            file,
        }
    }

    /// Adds `other`'s counts to this row's (a function's, summing its lines).
    fn absorb(&mut self, other: &SummaryRow) {
        self.count += other.count;
        self.total_ms += other.total_ms;
        self.longest_ms = self.longest_ms.max(other.longest_ms);
        self.in_progress += other.in_progress;
        self.stalled += other.stalled;
        for (r, n) in &other.reasons {
            match self.reasons.iter_mut().find(|(name, _)| name == r) {
                Some((_, m)) => *m += n,
                None => self.reasons.push((r.clone(), *n)),
            }
        }
        for (a, n) in &other.advice_given {
            self.give(a, *n);
        }
    }

    /// `n` more pins got `advice`.
    fn give(&mut self, advice: &str, n: usize) {
        match self.advice_at.get(advice) {
            Some(&i) => self.advice_given[i].1 += n,
            None => {
                self.advice_at
                    .insert(advice.to_owned(), self.advice_given.len());
                self.advice_given.push((advice.to_owned(), n));
            }
        }
    }

    /// Sorts the reasons, picks the advice, rounds the times to 0.1 ms.
    fn finish(&mut self) {
        self.reasons
            .sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        // Most given first; the order they were first given on a tie (stable).
        self.advice_given.sort_by_key(|a| std::cmp::Reverse(a.1));
        self.advice_at = std::collections::HashMap::new();
        let mut given = self.advice_given.iter().map(|(a, _)| a.clone());
        self.advice = given.next().unwrap_or_default();
        self.more_advice = given.take(3).collect();
        self.total_ms = (self.total_ms * 10.0).round() / 10.0;
        self.longest_ms = (self.longest_ms * 10.0).round() / 10.0;
    }
}

/// By total time pinned, most first; then by name.
fn by_total(rows: &mut [SummaryRow]) {
    rows.sort_by(|a, b| {
        b.total_ms
            .total_cmp(&a.total_ms)
            .then(a.frame.cmp(&b.frame))
    });
}

/// `pinwatch summary`: per function of the top application frame — and under it per line —
/// count, longest and total time pinned, and the reasons, sorted by total; like
/// `jfr view pinned-threads`. Each pinned poll counts once, with its last report; retracted
/// polls (`block_in_place`) do not count.
pub fn summarize(events: &[PinnedEvent]) -> Vec<SummaryRow> {
    let mut summary = Summary::default();
    for e in latest_reports(events) {
        summary.add(e);
    }
    summary.rows()
}

/// The rows of [`summarize`], built one pin at a time: [`add`](Self::add) each pin's last
/// report once.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Per (function, top frame): the line rows.
    lines: BTreeMap<(String, String), SummaryRow>,
    /// At most this many lines in all; later frames count under `(other locations)`.
    /// 0: no bound.
    max_rows: usize,
}

/// The function and line that stand for the frames past [`Summary::bounded`]'s bound.
const OTHER: &str = "(other locations)";

impl Summary {
    /// A summary of at most `max_rows` lines in all (for a long-running service's memory).
    pub fn bounded(max_rows: usize) -> Summary {
        Summary {
            lines: BTreeMap::new(),
            max_rows,
        }
    }

    /// Counts pin `e` (its last report); a retracted one does not count.
    pub fn add(&mut self, e: &PinnedEvent) {
        if e.state == crate::State::Retracted {
            return;
        }
        // The service's own frame first: the row is the line to change, the library it called
        // (where the time went) said beside it.
        let blame = e.app_frame.as_ref().or(e.top_frame.as_ref());
        let via = e
            .caller_frame()
            .and(e.top_frame.as_ref())
            .map(|t| {
                let file = t.file.as_deref().map(crate::event::crate_path);
                format!(
                    "in {}{}",
                    t.function.as_deref().unwrap_or("<unknown>"),
                    file.map_or(String::new(), |f| format!(" ({f})"))
                )
            })
            .unwrap_or_default();
        let (mut function, mut frame, mut at, mut file) = match blame {
            // Files as every build machine names them: one row for the same code.
            Some(f) => (
                f.function.as_deref().unwrap_or("<unknown>").to_owned(),
                f.portable().to_string(),
                f.portable_location()
                    .unwrap_or_else(|| "(no file)".to_owned()),
                f.portable_file(),
            ),
            // Not a function: a row of its own, with no lines.
            None => {
                let why = no_top_frame(e);
                (why.clone(), why, String::new(), None)
            }
        };
        let mut key = (function.clone(), format!("{frame}\u{0}{via}"));
        let mut via = via;
        if self.max_rows > 0
            && self.lines.len() >= self.max_rows - 1
            && !self.lines.contains_key(&key)
        {
            (function, frame, at, file) = (OTHER.to_owned(), OTHER.to_owned(), String::new(), None);
            via = String::new();
            key = (function.clone(), frame.clone());
        }
        let row = self.lines.entry(key).or_insert_with(|| {
            let mut row = SummaryRow::new(frame, at, file);
            row.via = via;
            row
        });
        let d = e.duration.as_secs_f64() * 1e3;
        row.count += 1;
        row.total_ms += d;
        row.longest_ms = row.longest_ms.max(d);
        if e.state == crate::State::InProgress {
            row.in_progress += 1;
        }
        if e.runtime_stalled {
            row.stalled += 1;
        }
        let r = e.reason.map_or("unknown", Reason::as_str).to_owned();
        if let Some(advice) = &e.advice {
            row.give(advice, 1);
        }
        match row.reasons.iter_mut().find(|(name, _)| *name == r) {
            Some((_, n)) => *n += 1,
            None => row.reasons.push((r, 1)),
        }
    }

    /// The function rows, by total time pinned, most first, each with its lines sorted the
    /// same way.
    pub fn rows(&self) -> Vec<SummaryRow> {
        let mut functions: BTreeMap<&str, Vec<SummaryRow>> = BTreeMap::new();
        for ((function, _), line) in &self.lines {
            functions.entry(function).or_default().push(line.clone());
        }
        let mut rows: Vec<SummaryRow> = functions
            .into_iter()
            .map(|(function, mut lines)| {
                let mut files: Vec<&str> = lines.iter().filter_map(|l| l.file.as_deref()).collect();
                files.sort_unstable();
                files.dedup();
                let frame = match files.as_slice() {
                    [file] if lines.iter().all(|l| l.file.is_some()) => {
                        format!("{function} ({file})")
                    }
                    _ => function.to_owned(),
                };
                let mut row = SummaryRow::new(frame, String::new(), None);
                for l in &lines {
                    row.absorb(l);
                }
                row.finish();
                for l in &mut lines {
                    l.finish();
                }
                by_total(&mut lines);
                // A pin without a top frame is not a function: it has no lines.
                if !lines.iter().all(|l| l.at.is_empty()) {
                    row.lines = lines;
                }
                row
            })
            .collect();
        by_total(&mut rows);
        rows
    }
}

/// One row of the "by request" table: the pins whose request (the outermost request-like
/// span, [`PinnedEvent::request_label`]) is this one.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct RequestRow {
    /// The request: method and route (`GET /users/{id}`), or the outermost span's name;
    /// [`NO_SPAN`] for pins outside any span.
    pub request: String,
    /// Pins.
    pub count: usize,
    /// The longest, in ms.
    pub longest_ms: f64,
    /// Time pinned in all, in ms.
    pub total_ms: f64,
    /// The names of the innermost spans those pins were in, with how many pins each, most
    /// first: what in the request pinned (`db_query`; the request's own name when the pin was
    /// in no span inside it).
    pub innermost: Vec<(String, usize)>,
}

pub use crate::event::NO_SPAN;

/// Pins and time pinned per request, by total time, most first: which route pins most. Each
/// pin counts once, with its last report; retracted ones do not. Empty when no pin has spans
/// (the service has no `pinwatch::tracing_layer()`).
pub fn summarize_requests(events: &[PinnedEvent]) -> Vec<RequestRow> {
    let latest = latest_reports(events);
    if latest.iter().all(|e| e.spans.is_empty()) {
        return Vec::new();
    }
    let mut by: BTreeMap<String, (RequestRow, BTreeMap<String, usize>)> = BTreeMap::new();
    for e in latest {
        if e.state == crate::State::Retracted {
            continue;
        }
        let request = e.request_label();
        let (row, inner) = by.entry(request.clone()).or_insert_with(|| {
            let row = RequestRow {
                request,
                count: 0,
                longest_ms: 0.0,
                total_ms: 0.0,
                innermost: Vec::new(),
            };
            (row, BTreeMap::new())
        });
        let d = e.duration.as_secs_f64() * 1e3;
        row.count += 1;
        row.total_ms += d;
        row.longest_ms = row.longest_ms.max(d);
        if let Some(span) = e.innermost_span() {
            *inner.entry(span.name.clone()).or_default() += 1;
        }
    }
    let mut rows: Vec<RequestRow> = by
        .into_values()
        .map(|(mut row, inner)| {
            row.innermost = inner.into_iter().collect();
            row.innermost
                .sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            row
        })
        .collect();
    rows.sort_by(|a, b| {
        b.total_ms
            .total_cmp(&a.total_ms)
            .then_with(|| a.request.cmp(&b.request))
    });
    rows
}

/// Innermost spans a "by request" row names at most; the rest are counted.
const MAX_INNERMOST_SHOWN: usize = 3;

/// A row's innermost spans as one cell: `db_query 17, render 2, and 3 more`.
pub fn innermost_cell(innermost: &[(String, usize)]) -> String {
    let mut cell: Vec<String> = innermost
        .iter()
        .take(MAX_INNERMOST_SHOWN)
        .map(|(span, n)| format!("{} {n}", Escaped(span)))
        .collect();
    if innermost.len() > MAX_INNERMOST_SHOWN {
        cell.push(format!(
            "and {} more",
            innermost.len() - MAX_INNERMOST_SHOWN
        ));
    }
    cell.join(", ")
}

/// The "by request" table as text (nothing when `rows` is empty).
pub fn render_requests(rows: &[RequestRow]) -> String {
    let mut out = String::new();
    if rows.is_empty() {
        return out;
    }
    let _ = writeln!(out, "By Request");
    let _ = writeln!(out);
    let cells: Vec<[String; 5]> = rows
        .iter()
        .map(|r| {
            [
                Escaped(&r.request).to_string(),
                r.count.to_string(),
                human_ms(r.longest_ms),
                human_ms(r.total_ms),
                innermost_cell(&r.innermost),
            ]
        })
        .collect();
    let headers = ["Request", "Count", "Longest", "Total", "Innermost Spans"];
    write_table(&mut out, headers, &cells, 1..4);
    out
}

/// A text table: `headers`, a line of dashes, then `rows`, each column as wide as its widest
/// cell (up to [`MAX_COLUMN`](crate::text::MAX_COLUMN)), the columns in `right` aligned right ([`text::pad`](crate::text::pad)).
fn write_table<const N: usize>(
    out: &mut String,
    headers: [&str; N],
    rows: &[[String; N]],
    right: std::ops::Range<usize>,
) {
    let mut widths = headers.map(str::len);
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(crate::text::column_width(c.chars().count()));
        }
    }
    let line = |cols: [&str; N]| {
        let mut s = String::new();
        for (i, (c, w)) in cols.iter().zip(widths).enumerate() {
            crate::text::pad(&mut s, c, w, right.contains(&i));
            s.push_str("  ");
        }
        s.trim_end().to_owned()
    };
    let _ = writeln!(out, "{}", line(headers));
    let dashes = widths.map(|w| "-".repeat(w));
    let _ = writeln!(out, "{}", line(dashes.each_ref().map(|s| s.as_str())));
    for row in rows {
        let _ = writeln!(out, "{}", line(row.each_ref().map(|s| s.as_str())));
    }
}

/// One row of the "who waited" table ([`who_waited`]): the tasks that waited behind pins,
/// spawned at one place (and in one outermost span).
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct WaitRow {
    /// Where the tasks were spawned (`file:line:column`), or [`UNKNOWN_SPAWN`].
    pub spawned_at: String,
    /// The name of the outermost span their polls entered; empty outside any span.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub span: String,
    /// Tasks that waited (a task that waited behind several pins counts for each).
    pub tasks: usize,
    /// Their waits added up, in ms.
    pub total_wait_ms: f64,
    /// The longest of them, in ms.
    pub max_wait_ms: f64,
    /// Pins that delayed them.
    pub pins: usize,
    /// How many of them waited in the pinned worker's LIFO slot (for the whole pin: no other
    /// worker may steal from it).
    pub lifo: usize,
}

/// What [`WaitRow::spawned_at`] says of a task whose spawn place is unknown.
pub const UNKNOWN_SPAWN: &str = "(unknown)";

/// Who waited behind the completed pins of a recording: `pinwatch summary`'s "who waited"
/// table and the report's "most delayed" one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct WhoWaited {
    /// Completed pins whose waits were measured (`victims.measured`).
    pub measured_pins: usize,
    /// Completed pins with victims that were not measured (no wait known: the tasks their
    /// worker ran right after).
    pub unmeasured_pins: usize,
    /// The named victims of the measured pins, by spawn place and outermost span name; most
    /// total wait first.
    pub rows: Vec<WaitRow>,
    /// Tasks the measured pins counted but did not name (each names its longest waits only).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unnamed_tasks: usize,
    /// Their waits added up, in ms.
    #[serde(default, skip_serializing_if = "is_zero_ms")]
    pub unnamed_wait_ms: f64,
}

fn is_zero_ms(ms: &f64) -> bool {
    *ms == 0.0
}

impl WhoWaited {
    /// No completed pin says anything of its victims (a recording made before they were
    /// recorded, or one with no completed pin).
    pub fn is_empty(&self) -> bool {
        self.measured_pins == 0 && self.unmeasured_pins == 0
    }
}

/// Who waited behind the pins: the victims ([`PinnedEvent::victims`]) of each completed pin's
/// last report (in-progress and retracted pins do not count), grouped by where the tasks were
/// spawned and their outermost span's name.
pub fn who_waited(events: &[PinnedEvent]) -> WhoWaited {
    let mut who = WhoWaited::default();
    let mut by: BTreeMap<(String, String), WaitRow> = BTreeMap::new();
    let mut unnamed_wait = 0.0;
    for e in latest_reports(events) {
        if e.state != crate::State::Completed {
            continue;
        }
        let Some(v) = &e.victims else { continue };
        if !v.measured {
            who.unmeasured_pins += 1;
            continue;
        }
        who.measured_pins += 1;
        let mut named_wait = 0.0;
        let mut delayed: std::collections::HashSet<(String, String)> = Default::default();
        for victim in &v.worst {
            let wait = victim.wait.map_or(0.0, |w| w.as_secs_f64() * 1e3);
            named_wait += wait;
            let key = (
                victim
                    .spawned_at
                    .as_ref()
                    .map_or_else(|| UNKNOWN_SPAWN.to_owned(), ToString::to_string),
                victim
                    .spans
                    .first()
                    .map_or_else(String::new, |s| s.name.clone()),
            );
            let row = by.entry(key.clone()).or_insert_with(|| WaitRow {
                spawned_at: key.0.clone(),
                span: key.1.clone(),
                tasks: 0,
                total_wait_ms: 0.0,
                max_wait_ms: 0.0,
                pins: 0,
                lifo: 0,
            });
            row.tasks += 1;
            row.total_wait_ms += wait;
            row.max_wait_ms = row.max_wait_ms.max(wait);
            row.lifo += usize::from(victim.lifo);
            if delayed.insert(key) {
                row.pins += 1;
            }
        }
        who.unnamed_tasks = who
            .unnamed_tasks
            .saturating_add(v.tasks.saturating_sub(v.worst.len()));
        if let Some(total) = v.total_wait {
            unnamed_wait += (total.as_secs_f64() * 1e3 - named_wait).max(0.0);
        }
    }
    let round = |ms: f64| (ms * 10.0).round() / 10.0;
    who.unnamed_wait_ms = round(unnamed_wait);
    who.rows = by
        .into_values()
        .map(|mut r| {
            r.total_wait_ms = round(r.total_wait_ms);
            r.max_wait_ms = round(r.max_wait_ms);
            r
        })
        .collect();
    who.rows.sort_by(|a, b| {
        b.total_wait_ms
            .total_cmp(&a.total_wait_ms)
            .then(b.tasks.cmp(&a.tasks))
            .then(a.spawned_at.cmp(&b.spawned_at))
            .then(a.span.cmp(&b.span))
    });
    who
}

/// What the "who waited" table says when it has no row: why.
pub fn who_waited_note(who: &WhoWaited) -> Option<String> {
    if who.measured_pins == 0 {
        let mut s = "waits were not measured: no completed pin here measured who waited \
                     behind it; pinwatch's schedule-latency feature measures waits"
            .to_owned();
        if who.unmeasured_pins > 0 {
            s.push_str(&format!(
                "; {} {} the tasks {} worker ran right after (`pinwatch print`)",
                who.unmeasured_pins,
                if who.unmeasured_pins == 1 {
                    "pin names"
                } else {
                    "pins name"
                },
                if who.unmeasured_pins == 1 {
                    "its"
                } else {
                    "their"
                },
            ));
        }
        return Some(s);
    }
    who.rows
        .is_empty()
        .then(|| "no task waited the threshold behind a completed pin".to_owned())
}

/// The "who waited" table as text: a row per spawn place (and outermost span), then what it
/// leaves out; or the line saying that waits were not measured.
pub fn render_who_waited(who: &WhoWaited) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Who Waited");
    let _ = writeln!(out);
    if let Some(note) = who_waited_note(who) {
        let _ = writeln!(out, "({note})");
        return out;
    }
    let cells: Vec<[String; 7]> = who
        .rows
        .iter()
        .map(|r| {
            [
                Escaped(&r.spawned_at).to_string(),
                if r.span.is_empty() {
                    "-".to_owned()
                } else {
                    Escaped(&r.span).to_string()
                },
                r.tasks.to_string(),
                human_ms(r.total_wait_ms),
                human_ms(r.max_wait_ms),
                r.pins.to_string(),
                r.lifo.to_string(),
            ]
        })
        .collect();
    let headers = [
        "Spawned At",
        "Outermost Span",
        "Tasks",
        "Total Wait",
        "Max Wait",
        "Pins",
        "LIFO",
    ];
    write_table(&mut out, headers, &cells, 2..headers.len());
    if who.unnamed_tasks > 0 {
        let _ = writeln!(
            out,
            "(and {} more delayed task{}, {} of waiting, not named: a pin names its longest \
             waits only)",
            who.unnamed_tasks,
            if who.unnamed_tasks == 1 { "" } else { "s" },
            human_ms(who.unnamed_wait_ms)
        );
    }
    if who.unmeasured_pins > 0 {
        let _ = writeln!(
            out,
            "({} completed pin{} did not measure waits: not counted here)",
            who.unmeasured_pins,
            if who.unmeasured_pins == 1 { "" } else { "s" }
        );
    }
    out
}

/// The summary as a text table.
pub fn render_summary(rows: &[SummaryRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Pinned Threads");
    let _ = writeln!(out);
    let headers = [
        "Top Application Frame",
        "Count",
        "Longest",
        "Total",
        "Reasons",
    ];
    let cell = |r: &SummaryRow, name: String| {
        let reasons: Vec<String> = r
            .reasons
            .iter()
            .map(|(name, n)| format!("{name} {n}"))
            .collect();
        // The notes in one parenthesis after the reasons: `sleep 4 (1 still in progress)`.
        let mut notes = Vec::new();
        if r.in_progress > 0 {
            notes.push(format!("{} still in progress", r.in_progress));
        }
        if r.stalled > 0 {
            notes.push(format!("{} stalled the whole runtime", r.stalled));
        }
        let mut reasons = reasons.join(", ");
        if !notes.is_empty() {
            reasons.push_str(&format!(" ({})", notes.join("; ")));
        }
        [
            name,
            r.count.to_string(),
            human_ms(r.longest_ms),
            human_ms(r.total_ms),
            reasons,
        ]
    };
    // Per function: its row, then its lines (indented), then its advice.
    let mut cells: Vec<[String; 5]> = Vec::new();
    let mut advice: Vec<Vec<&str>> = Vec::new();
    for r in rows {
        cells.push(cell(r, Escaped(&r.frame).to_string()));
        advice.push(Vec::new());
        for l in &r.lines {
            let via = if l.via.is_empty() {
                String::new()
            } else {
                format!(" {}", l.via)
            };
            cells.push(cell(l, format!("  {}{}", Escaped(&l.at), Escaped(via))));
            advice.push(Vec::new());
        }
        if let Some(a) = advice.last_mut() {
            *a = std::iter::once(r.advice.as_str())
                .chain(r.more_advice.iter().map(String::as_str))
                .filter(|a| !a.is_empty())
                .collect();
        }
    }
    let mut widths = headers.map(str::len);
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(crate::text::column_width(c.chars().count()));
        }
    }
    let line = |cols: [&str; 5]| {
        let mut s = String::new();
        for (i, (c, w)) in cols.iter().zip(widths).enumerate() {
            crate::text::pad(&mut s, c, w, i != 0 && i != 4);
            if i < 4 {
                s.push_str("  ");
            }
        }
        s.trim_end().to_owned()
    };
    let _ = writeln!(out, "{}", line(headers));
    let _ = writeln!(
        out,
        "{}",
        line(widths.map(|w| "-".repeat(w)).each_ref().map(|s| s.as_str()))
    );
    for (row, advice) in cells.iter().zip(advice) {
        let _ = writeln!(out, "{}", line(row.each_ref().map(|s| s.as_str())));
        for advice in advice {
            let _ = writeln!(out, "  advice: {}", Escaped(advice));
        }
    }
    if rows.is_empty() {
        let _ = writeln!(out, "(no pinned polls)");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(run: &str, id: u64, state: &str, ms: f64) -> String {
        format!(
            r#"{{"schema":2,"event":"pinned","id":{id},"run_id":"{run}","pid":1,"state":"{state}","start":"2026-11-30T00:00:00Z","duration_ms":{ms},"threshold_ms":20.0,"task_id":1,"spawned_at":null,"worker":{{"index":0,"tid":1,"name":"w"}},"reason":"sleep","blocking_operation":"clock_nanosleep","top_frame":{{"function":"app::f","file":"src/f.rs","line":3}},"stack":[],"held_locks":[],"report":1}}"#
        )
    }

    /// A pin line in spans: `spans` as the tracing layer writes them, and a trace.
    fn in_spans(run: &str, id: u64, ms: f64, route: &str, uri: &str) -> String {
        let l = line(run, id, "completed", ms);
        let spans = format!(
            r#","spans":[{{"name":"conn","target":"hyper"}},{{"name":"request","target":"tower_http::trace::make_span","fields":{{"http.route":"{route}","method":"GET","uri":"{uri}"}}}}],"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7"}}"#
        );
        l[..l.len() - 1].to_owned() + &spans
    }

    #[test]
    fn print_shows_the_span_chain_and_trace_and_summary_a_by_request_table() {
        let text = [
            in_spans("r", 1, 100.0, "/report", "/report?a=1"),
            in_spans("r", 2, 300.0, "/report", "/report?a=2"),
            in_spans("r", 3, 50.0, "/users/{id}", "/users/9"),
            line("r", 4, "completed", 30.0),
        ]
        .join("\n");
        let rec = parse_recording(&text, "rec").unwrap();
        let print = render_print(&rec.events);
        assert!(
            print.contains(
                "  spans = [\n    conn (hyper)\n    request{http.route=/report method=GET \
                 uri=/report?a=1} (tower_http::trace::make_span)\n  ]\n"
            ),
            "{print}"
        );
        assert!(
            print.contains("  traceId = 4bf92f3577b34da6a3ce929d0e0e4736 (span 00f067aa0ba902b7)"),
            "{print}"
        );
        let rows = summarize_requests(&rec.events);
        let got: Vec<(&str, usize, f64)> = rows
            .iter()
            .map(|r| (r.request.as_str(), r.count, r.total_ms))
            .collect();
        assert_eq!(
            got,
            [
                ("GET /report", 2, 400.0),
                ("GET /users/{id}", 1, 50.0),
                (NO_SPAN, 1, 30.0)
            ]
        );
        let table = render_requests(&rows);
        assert!(table.starts_with("By Request\n"), "{table}");
        assert!(
            table
                .lines()
                .any(|l| l.starts_with("GET /report") && l.ends_with("400.0 ms  request 2")),
            "{table}"
        );
        // Without spans anywhere: no table (the summary is the frames table alone).
        let plain = parse_recording(&line("r", 4, "completed", 30.0), "rec").unwrap();
        assert!(summarize_requests(&plain.events).is_empty());
        assert_eq!(render_requests(&[]), "");
    }

    /// tower-http's span without a route, ids in its uri, the pin in a span inside it: one
    /// row per route, what pinned in it named, most first.
    #[test]
    fn summary_groups_by_the_outermost_request_and_names_the_innermost() {
        let pin = |id: u64, ms: f64, uri: &str, inner: &str| {
            let l = line("r", id, "completed", ms);
            let spans = format!(
                r#","spans":[{{"name":"request","target":"tower_http","fields":{{"method":"GET","uri":"{uri}"}}}},{{"name":"{inner}","target":"svc"}}]}}"#
            );
            l[..l.len() - 1].to_owned() + &spans
        };
        let mut lines: Vec<String> = (1..=17)
            .map(|i| pin(i, 60.0, &format!("/orders/{i}?expand=1"), "db_query"))
            .collect();
        lines.push(pin(18, 80.0, "/orders/99", "render"));
        lines.push(pin(19, 80.0, "/report", "cpu_loop"));
        let rec = parse_recording(&lines.join("\n"), "rec").unwrap();
        let rows = summarize_requests(&rec.events);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(
            (rows[0].request.as_str(), rows[0].count),
            ("GET /orders/{id}", 18)
        );
        assert_eq!(
            rows[0].innermost,
            [("db_query".to_owned(), 17), ("render".to_owned(), 1)]
        );
        assert_eq!(innermost_cell(&rows[0].innermost), "db_query 17, render 1");
        assert_eq!(rows[1].request, "GET /report");
        let many: Vec<(String, usize)> = (0..5).map(|i| (format!("s{i}"), 1)).collect();
        assert_eq!(innermost_cell(&many), "s0 1, s1 1, s2 1, and 2 more");
    }

    /// `line` with `victims` (their JSON) added.
    fn with_victims(run: &str, id: u64, state: &str, ms: f64, victims: &str) -> String {
        let l = line(run, id, state, ms);
        format!("{},\"victims\":{victims}}}", &l[..l.len() - 1])
    }

    /// The example of the recording's docs: 11 tasks measured, the worst named.
    const MEASURED: &str = r#"{"measured":true,"tasks":11,"total_wait_ms":1520.5,"max_wait_ms":300.2,"worst":[{"task_id":14,"spawned_at":{"file":"src/api.rs","line":88,"column":5},"wait_ms":300.2,"worker":0,"lifo":true,"spans":[{"name":"request","target":"svc","fields":{"uri":"/orders"}}]},{"task_id":15,"spawned_at":{"file":"src/jobs.rs","line":20,"column":9},"wait_ms":120.0,"worker":1}],"queue_depth_max":10}"#;

    /// Without tokio's measurement: the tasks the worker ran next, no wait.
    const NOT_MEASURED: &str = r#"{"measured":false,"tasks":3,"worst":[{"task_id":30,"spawned_at":{"file":"src/api.rs","line":88,"column":5},"worker":0},{"task_id":31,"worker":0}]}"#;

    #[test]
    fn print_shows_who_waited_behind_a_pin() {
        let text = [
            with_victims("r", 1, "completed", 320.0, MEASURED),
            with_victims("r", 2, "completed", 60.0, NOT_MEASURED),
            with_victims("r", 3, "completed", 25.0, r#"{"measured":true,"tasks":0}"#),
            line("r", 4, "completed", 30.0),
        ]
        .join("\n");
        let events = parse_recording(&text, "rec").unwrap().events;
        let print = render_print(&events);
        let blocks: Vec<&str> = print.split("pinwatch.Pinned {").skip(1).collect();
        assert_eq!(blocks.len(), 4, "{print}");
        assert!(
            blocks[0].contains(
                "  victims = 11 tasks waited behind it (measured): 1.52 s in all, the longest \
                 300.2 ms [\n    waited 300.2 ms: task 14 spawned at src/api.rs:88:5, polled by \
                 worker 0 [LIFO slot]\n      in request{uri=/orders} (svc)\n    waited 120.0 ms: \
                 task 15 spawned at src/jobs.rs:20:9, polled by worker 1\n    … and 9 more, not \
                 named (a pin names its 2 longest waits)\n  ]\n  queueDepthMax = 10"
            ),
            "{}",
            blocks[0]
        );
        // Not measured: the tasks run next, and no wait is claimed.
        assert!(
            blocks[1].contains(
                "  victims = not measured: the worker ran 3 of the service's tasks right after it \
                 (no wait is measured without pinwatch's schedule-latency feature) [\n    task 30 spawned at \
                 src/api.rs:88:5, polled by worker 0\n    task 31, polled by worker 0\n  ]\n"
            ),
            "{}",
            blocks[1]
        );
        assert!(!blocks[1].contains("waited "), "{}", blocks[1]);
        assert!(!blocks[1].contains("queueDepthMax"), "{}", blocks[1]);
        assert!(
            blocks[2]
                .contains("  victims = none (measured: no task waited the threshold behind it)"),
            "{}",
            blocks[2]
        );
        // A recording from before victims: nothing said of them.
        assert!(!blocks[3].contains("victims"), "{}", blocks[3]);
        // A pin that held the timers and I/O (here: on a current-thread runtime) says whom
        // the measure leaves out, with victims or none (helper-60).
        let mut held = events.clone();
        for e in &mut held {
            e.current_thread = true;
        }
        let print = render_print(&held);
        let blocks: Vec<&str> = print.split("pinwatch.Pinned {").skip(1).collect();
        assert!(
            blocks[0].contains(
                "  victims = 11 tasks waited behind it (measured; not counting tasks whose \
                 timers or I/O the pin held back): 1.52 s in all"
            ),
            "{}",
            blocks[0]
        );
        assert!(
            blocks[2].contains(
                "  victims = none (measured: no task waited the threshold behind it once woken; \
                 tasks whose timers or I/O the pin held back are not counted)"
            ),
            "{}",
            blocks[2]
        );
    }

    /// The "who waited" table: the named victims of completed pins only, by spawn place and
    /// outermost span name, with their counts, waits, pins and LIFO waits; what the pins
    /// counted without naming, and the pins that measured nothing, said under it.
    #[test]
    fn who_waited_groups_the_victims_of_completed_pins() {
        let second = r#"{"measured":true,"tasks":2,"total_wait_ms":400.0,"max_wait_ms":220.0,"worst":[{"task_id":21,"spawned_at":{"file":"src/api.rs","line":88,"column":5},"wait_ms":220.0,"lifo":true,"spans":[{"name":"request","target":"svc"}]},{"task_id":22,"spawned_at":{"file":"src/api.rs","line":88,"column":5},"wait_ms":180.0,"spans":[{"name":"conn","target":"hyper"},{"name":"request","target":"svc"}]}]}"#;
        let big = r#"{"measured":true,"tasks":1,"total_wait_ms":900.0,"max_wait_ms":900.0,"worst":[{"task_id":50,"spawned_at":{"file":"src/other.rs","line":1,"column":1},"wait_ms":900.0}]}"#;
        let text = [
            // Superseded by its completed report: its victims count once, as completed.
            with_victims("r", 1, "in_progress", 30.0, big),
            with_victims("r", 1, "completed", 320.0, MEASURED),
            with_victims("r", 2, "completed", 150.0, second),
            with_victims("r", 3, "completed", 60.0, NOT_MEASURED),
            // Running, or retracted: not counted.
            with_victims("r", 4, "in_progress", 30.0, big),
            with_victims("r", 5, "retracted", 30.0, big),
            line("r", 6, "completed", 30.0),
        ]
        .join("\n");
        let events = parse_recording(&text, "rec").unwrap().events;
        let who = who_waited(&events);
        assert_eq!((who.measured_pins, who.unmeasured_pins), (2, 1));
        let rows: Vec<(&str, &str, usize, f64, f64, usize, usize)> = who
            .rows
            .iter()
            .map(|r| {
                (
                    r.spawned_at.as_str(),
                    r.span.as_str(),
                    r.tasks,
                    r.total_wait_ms,
                    r.max_wait_ms,
                    r.pins,
                    r.lifo,
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                ("src/api.rs:88:5", "request", 2, 520.2, 300.2, 2, 2),
                ("src/api.rs:88:5", "conn", 1, 180.0, 180.0, 1, 0),
                ("src/jobs.rs:20:9", "", 1, 120.0, 120.0, 1, 0),
            ]
        );
        // Pin 1 counted 11 and named 2: 9 more, 1520.5 - 420.2 ms of waiting.
        assert_eq!((who.unnamed_tasks, who.unnamed_wait_ms), (9, 1100.3));
        assert_eq!(who_waited_note(&who), None);

        let table = render_who_waited(&who);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "Who Waited");
        assert_eq!(
            lines[2],
            "Spawned At        Outermost Span  Tasks  Total Wait  Max Wait  Pins  LIFO"
        );
        assert_eq!(
            lines[4],
            "src/api.rs:88:5   request             2    520.2 ms  300.2 ms     2     2"
        );
        assert_eq!(
            lines[6],
            "src/jobs.rs:20:9  -                   1    120.0 ms  120.0 ms     1     0"
        );
        assert_eq!(
            lines[7],
            "(and 9 more delayed tasks, 1.10 s of waiting, not named: a pin names its longest \
             waits only)"
        );
        assert_eq!(
            lines[8],
            "(1 completed pin did not measure waits: not counted here)"
        );
        // --json: the same table.
        let json = serde_json::to_value(&who).unwrap();
        assert_eq!(json["rows"][0]["spawned_at"], "src/api.rs:88:5");
        assert_eq!(json["rows"][0]["total_wait_ms"], 520.2);
        assert_eq!(json["rows"][2].get("span"), None);
        assert_eq!(json["unnamed_tasks"], 9);
    }

    /// No completed pin measured its victims (an older recording, or a service without the
    /// schedule-latency feature): one line says so, and no table invents waits.
    #[test]
    fn who_waited_says_when_waits_were_not_measured() {
        let old = parse_recording(&line("r", 1, "completed", 30.0), "rec").unwrap();
        let who = who_waited(&old.events);
        assert!(who.is_empty() && who.rows.is_empty());
        let text = render_who_waited(&who);
        assert_eq!(
            text,
            "Who Waited\n\n(waits were not measured: no completed pin here measured who waited \
             behind it; pinwatch's schedule-latency feature measures waits)\n"
        );
        let unmeasured = parse_recording(
            &with_victims("r", 1, "completed", 60.0, NOT_MEASURED),
            "rec",
        )
        .unwrap();
        let who = who_waited(&unmeasured.events);
        assert_eq!((who.measured_pins, who.unmeasured_pins), (0, 1));
        assert!(!who.is_empty() && who.rows.is_empty());
        let text = render_who_waited(&who);
        assert!(text.contains("(waits were not measured:"), "{text}");
        assert!(
            text.contains("; 1 pin names the tasks its worker ran right after (`pinwatch print`)"),
            "{text}"
        );
        assert!(!text.contains("Total Wait"), "{text}");
        // Measured, but nobody waited.
        let nobody = parse_recording(
            &with_victims("r", 1, "completed", 60.0, r#"{"measured":true,"tasks":0}"#),
            "rec",
        )
        .unwrap();
        let text = render_who_waited(&who_waited(&nobody.events));
        assert!(
            text.contains("(no task waited the threshold behind a completed pin)"),
            "{text}"
        );
    }

    /// A victim's spawn place and spans come from the service: `print` and the "who waited"
    /// table show them escaped, one line each.
    #[test]
    fn victims_text_is_escaped() {
        let evil = "v\u{1b}]0;owned\u{7}\n}\npinwatch.Pinned {\u{202e}";
        let json = serde_json::to_string(evil).unwrap();
        let victims = format!(
            r#"{{"measured":true,"tasks":1,"total_wait_ms":50.0,"max_wait_ms":50.0,"worst":[{{"task_id":1,"spawned_at":{{"file":{json},"line":1,"column":1}},"wait_ms":50.0,"spans":[{{"name":{json},"target":{json},"fields":{{"k":{json}}}}}]}}]}}"#
        );
        let text = with_victims("r", 1, "completed", 60.0, &victims);
        let events = parse_recording(&text, "rec").unwrap().events;
        assert_eq!(
            events[0].victims.as_ref().unwrap().worst[0].spans[0].name,
            evil
        );
        let print = render_print(&events);
        let table = render_who_waited(&who_waited(&events));
        for out in [&print, &table] {
            assert!(
                !out.chars()
                    .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
                "{out:?}"
            );
        }
        let blocks = print.lines().filter(|l| *l == "pinwatch.Pinned {").count();
        assert_eq!(blocks, 1, "{print}");
        assert!(table.contains("v\\u{1b}]0;owned"), "{table}");
        // The table's rows: header, dashes, one row.
        assert_eq!(table.lines().count(), 5, "{table}");
    }

    /// Strings of a recording reach the terminal escaped: no `ESC` sequence, no forged line,
    /// no reordering control.
    #[test]
    fn print_and_summary_escape_control_characters() {
        let evil = "w\u{1b}]0;owned\u{7}\u{1b}[2J\n}\npinwatch.Pinned {\r\u{202e}";
        let json = serde_json::to_string(evil).unwrap();
        let text = line("run", 1, "completed", 30.0)
            .replace("\"name\":\"w\"", &format!("\"name\":{json}"))
            .replace("\"app::f\"", &json);
        let rec = parse_recording(&text, "rec").unwrap();
        assert_eq!(rec.events[0].worker.name, evil);
        let print = render_print(&rec.events);
        let summary = render_summary(&summarize(&rec.events));
        for out in [&print, &summary] {
            assert!(
                !out.chars()
                    .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
                "{out:?}"
            );
        }
        // One event, one block: the name's newline forged no line of its own.
        let blocks = print.lines().filter(|l| *l == "pinwatch.Pinned {").count();
        assert_eq!(blocks, 1, "{print}");
        assert!(
            print.contains("carrierThread = \"w\\u{1b}]0;owned\\u{7}"),
            "{print}"
        );
        assert!(summary.contains("w\\u{1b}]0;owned"), "{summary}");
    }

    /// The one format of durations for people, at its edges: the unit changes where the
    /// written value would reach the next unit, not before or after.
    #[test]
    fn durations_are_written_one_way_at_every_edge() {
        let cases = [
            (0.0, "0.0 ms"),
            (0.04, "0.0 ms"),
            (12.34, "12.3 ms"),
            (999.9, "999.9 ms"),
            (999.95, "1.00 s"),
            (1000.0, "1.00 s"),
            (1523.0, "1.52 s"),
            (59_994.0, "59.99 s"),
            (59_995.0, "1m"),
            (60_000.0, "1m"),
            (432_000.0, "7m 12s"),
            (446_964.9, "7m 27s"),
            (3_723_400.0, "1h 2m 3s"),
            (-1.0, "-1 ms"),
            (f64::NAN, "NaN ms"),
        ];
        for (ms, want) in cases {
            assert_eq!(human_ms(ms), want, "{ms} ms");
        }
        assert_eq!(ms(Duration::from_micros(20_500)), "20.5 ms");
        // A crafted recording's huge value is written, not a panic.
        assert!(human_ms(1e300).ends_with('s'), "{}", human_ms(1e300));
    }

    /// Out of order, a poll's `completed` report still wins over its `in_progress` ones, and
    /// a later report over an earlier one; equal ranks keep the last line.
    #[test]
    fn the_final_report_wins_in_any_order() {
        let at = |id: u64, state: &str, report: u32, ms: f64| {
            line("run", id, state, ms).replace(r#""report":1"#, &format!(r#""report":{report}"#))
        };
        let text = [
            at(1, "completed", 3, 320.0),
            at(1, "in_progress", 1, 30.0),
            at(1, "in_progress", 2, 80.0),
            at(2, "in_progress", 2, 60.0),
            at(2, "in_progress", 1, 30.0),
            at(3, "retracted", 2, 25.0),
            at(3, "in_progress", 1, 22.0),
        ]
        .join("\n");
        let rec = parse_recording(&text, "rec.jsonl").unwrap();
        let latest: Vec<(u64, f64)> = latest_reports(&rec.events)
            .iter()
            .map(|e| (e.id, e.duration.as_secs_f64() * 1000.0))
            .collect();
        assert_eq!(latest, [(1, 320.0), (2, 60.0), (3, 25.0)]);
        // The summary's reasons, with what is still in progress after them in one parenthesis
        // (helper-60 read `sleep 4, (1 still in progress)`).
        let summary = render_summary(&summarize(&rec.events));
        assert!(
            summary.contains("sleep 2 (1 still in progress)"),
            "{summary}"
        );
        assert!(!summary.contains(", ("), "{summary}");
    }

    /// A crafted name of a megabyte is written once, whole; the other rows are not padded to
    /// it (600 rows of a megabyte each made 1.2 GB of text from a file of 2.5 MB).
    #[test]
    fn a_huge_name_sticks_out_of_its_column_instead_of_widening_every_row() {
        let huge = format!("big::{}", "A".repeat(1_000_000));
        let text: String = (0..600u64)
            .map(|i| {
                let name = if i == 0 {
                    huge.clone()
                } else {
                    format!("app::f{i}")
                };
                line("run", i, "completed", 30.0).replace("app::f", &name) + "\n"
            })
            .collect();
        let rec = parse_recording(&text, "rec.jsonl").unwrap();
        let rows = summarize(&rec.events);
        assert_eq!(rows.len(), 600);
        let summary = render_summary(&rows);
        assert!(summary.contains(&huge));
        assert!(
            summary.len() < 1_000_000 + 600 * 2 * (crate::text::MAX_COLUMN + 100),
            "{} bytes",
            summary.len()
        );
        // Every other row is as wide as a column may be, and no wider.
        let widest_other = summary
            .lines()
            .filter(|l| !l.contains("AAAA"))
            .map(|l| l.chars().count())
            .max()
            .unwrap();
        assert!(widest_other < 5 * crate::text::MAX_COLUMN, "{widest_other}");
    }

    /// One CPU loop whose samples fall on three lines of one function: one function row, with
    /// its three lines under it, the sums right and both levels sorted by total time.
    #[test]
    fn a_function_pinned_at_three_lines_is_one_row_with_three_lines() {
        let at = |id: u64, at: u32, ms: f64| {
            line("run", id, "completed", ms)
                .replace(r#""reason":"sleep""#, r#""reason":"cpu""#)
                .replace(r#""line":3"#, &format!(r#""line":{at}"#))
        };
        let other = line("run", 9, "completed", 500.0)
            .replace("app::f", "app::g")
            .replace("src/f.rs", "src/g.rs");
        let text = [
            at(1, 10, 100.0),
            at(2, 11, 300.0),
            at(3, 12, 50.0),
            at(4, 11, 200.0),
            at(5, 12, 25.0),
            other,
        ]
        .join("\n");
        let rows = summarize(&parse_recording(&text, "rec").unwrap().events);
        assert_eq!(rows.len(), 2, "{rows:#?}");
        let f = &rows[0];
        assert_eq!(f.frame, "app::f (app/src/f.rs)");
        assert_eq!((f.count, f.total_ms, f.longest_ms), (5, 675.0, 300.0));
        assert_eq!(f.reasons, [("cpu".to_owned(), 5)]);
        let lines: Vec<(&str, usize, f64)> = f
            .lines
            .iter()
            .map(|l| (l.at.as_str(), l.count, l.total_ms))
            .collect();
        assert_eq!(
            lines,
            [
                ("app/src/f.rs:11", 2, 500.0),
                ("app/src/f.rs:10", 1, 100.0),
                ("app/src/f.rs:12", 2, 75.0)
            ]
        );
        assert_eq!(f.lines[0].frame, "app::f (app/src/f.rs:11)");
        assert_eq!(rows[1].frame, "app::g (app/src/g.rs)");
        assert_eq!(rows[1].lines.len(), 1);

        let text = render_summary(&rows);
        // Each function's advice follows its lines.
        assert_eq!(text.matches("  advice: ").count(), 2, "{text}");
        let body: Vec<&str> = text
            .lines()
            .skip(4)
            .filter(|l| !l.starts_with("  advice: "))
            .collect();
        let first: Vec<&str> = body.iter().map(|l| l.split("  ").next().unwrap()).collect();
        assert_eq!(
            first,
            [
                "app::f (app/src/f.rs)",
                "",
                "",
                "",
                "app::g (app/src/g.rs)",
                ""
            ],
            "{text}"
        );
        assert!(
            body[0].contains("675.0 ms") && body[0].contains("cpu 5"),
            "{text}"
        );
        assert!(
            body[1].trim_start().starts_with("app/src/f.rs:11"),
            "{text}"
        );
        assert!(body[1].contains("500.0 ms"), "{text}");
        assert!(
            body[3].trim_start().starts_with("app/src/f.rs:12"),
            "{text}"
        );

        // --json: a superset of the old rows, the lines under each function.
        let json: serde_json::Value = serde_json::to_value(&rows).unwrap();
        assert_eq!(json[0]["lines"][1]["at"], "app/src/f.rs:10");
        assert_eq!(json[0]["total_ms"], 675.0);
    }

    /// Pins of one line that blocked two ways (one writing to a full pipe, two waiting for the
    /// lock the writer holds): the row gives each advice, the most given first.
    #[test]
    fn a_row_gives_every_advice_its_pins_got() {
        let with = |id: u64, reason: &str, advice: &str| {
            line("run", id, "completed", 100.0)
                .replace(r#""reason":"sleep""#, &format!(r#""reason":"{reason}""#))
                .replace(
                    r#""report":1"#,
                    &format!(r#""report":1,"advice":"{advice}""#),
                )
        };
        let text = [
            with(1, "io", "use a non-blocking writer"),
            with(2, "lock_wait", "the lock is std's"),
            with(3, "lock_wait", "the lock is std's"),
        ]
        .join("\n");
        let rows = summarize(&parse_recording(&text, "rec").unwrap().events);
        assert_eq!(rows.len(), 1, "{rows:#?}");
        assert_eq!(rows[0].advice, "the lock is std's");
        assert_eq!(rows[0].more_advice, ["use a non-blocking writer"]);
        let text = render_summary(&rows);
        let advice: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("  advice: "))
            .collect();
        assert_eq!(
            advice,
            ["the lock is std's", "use a non-blocking writer"],
            "{text}"
        );
    }

    /// A pin without a stack is said the same way everywhere: `[no stack: WHY]`.
    #[test]
    fn a_pin_without_a_stack_is_said_one_way() {
        let text = line("run", 1, "completed", 30.0).replace(
            r#""top_frame":{"function":"app::f","file":"src/f.rs","line":3}"#,
            r#""top_frame":null,"no_stack":"signal_pending""#,
        );
        let events = parse_recording(&text, "rec").unwrap().events;
        assert!(events[0].top_frame.is_none());
        let print = render_print(&events);
        assert!(
            print.contains("topApplicationFrame = [no stack: signal_pending]")
                && print.contains("stackTrace = [no stack: signal_pending]"),
            "{print}"
        );
        let rows = summarize(&events);
        assert_eq!(rows[0].frame, "[no stack: signal_pending]");
        assert!(rows[0].lines.is_empty());
        let summary = render_summary(&rows);
        assert!(!summary.contains("N/A"), "{summary}");
        assert!(summary.contains("[no stack: signal_pending]"), "{summary}");
    }

    #[test]
    fn times_past_rfc3339_are_written_as_seconds() {
        let t = UNIX_EPOCH + Duration::from_secs(RFC3339_END_SECS);
        assert_eq!(format_time(t), "253402300800 s after the epoch");
        assert_eq!(
            format_time(t - Duration::from_millis(1)),
            "9999-12-31T23:59:59.999Z"
        );
        assert_eq!(
            format_time(UNIX_EPOCH - Duration::from_secs(5)),
            "5 s before the epoch"
        );
    }

    #[test]
    fn runs_appended_to_one_recording_stay_apart() {
        let text = [
            line("run-a", 1, "in_progress", 25.0),
            line("run-a", 1, "completed", 40.0),
            line("run-b", 1, "completed", 100.0),
            line("run-b", 2, "in_progress", 30.0),
            line("run-b", 2, "retracted", 35.0),
        ]
        .join("\n")
            + "\n";
        let rec = parse_recording(&text, "rec").unwrap();
        let latest = latest_reports(&rec.events);
        assert_eq!(latest.len(), 3);
        assert_eq!(latest[0].duration, Duration::from_millis(40));
        assert_eq!(latest[1].duration, Duration::from_millis(100));
        assert_eq!(latest[2].state, crate::State::Retracted);
        let rows = summarize(&rec.events);
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].count, rows[0].total_ms), (2, 140.0));
    }

    fn good(id: u64) -> String {
        line("run", id, "completed", 30.0)
    }

    fn ids(rec: &Recording) -> Vec<u64> {
        rec.events.iter().map(|e| e.id).collect()
    }

    /// A line cut short by a failed write with the next event appended to it (what a writer
    /// that does not start a fresh line leaves): that line is skipped and named, every other
    /// event is read.
    #[test]
    fn a_torn_line_in_the_middle_is_skipped_and_named() {
        let torn = good(2);
        let text = format!(
            "{}\n{}{}\n{}\n",
            good(1),
            &torn[..torn.len() / 2],
            good(3),
            good(4)
        );
        let rec = parse_recording(&text, "rec.jsonl").unwrap();
        assert_eq!(ids(&rec), [1, 4]);
        assert_eq!(rec.damaged_lines, 1);
        assert_eq!((rec.damaged[0].line, rec.damaged[0].cut_off), (2, false));
        assert_eq!(rec.warnings.len(), 1);
        assert!(
            rec.warnings[0].starts_with("skipped 1 damaged line (rec.jsonl:2)"),
            "{}",
            rec.warnings[0]
        );
    }

    /// Lines are read one at a time: a line longer than the bound is read through without
    /// being kept (what is kept never passes it), is counted with its number, and the lines
    /// after it are read; `\r\n` ends a line as `\n` does, and a last line without a
    /// newline is cut off.
    #[test]
    fn a_line_past_the_bound_is_read_through_and_the_next_ones_kept() {
        let text = format!(
            "{}\r\n{}\n\n{}\n{}",
            good(1),
            "x".repeat(500),
            good(3),
            good(4)
        );
        // A reader that hands out 7 bytes at a time, so that lines span many reads.
        let mut r = std::io::BufReader::with_capacity(7, text.as_bytes());
        let max = good(1).len().max(good(3).len()) + 1;
        let mut line = Vec::new();
        let mut got = Vec::new();
        while let Some(read) = next_line(&mut r, &mut line, max).unwrap() {
            assert!(line.len() <= max && line.capacity() <= 2 * max + 7);
            got.push((
                String::from_utf8(line.clone()).unwrap(),
                read.ended,
                read.too_long,
            ));
        }
        let expect = [
            (good(1) + "\r", true, false),
            (String::new(), true, true),
            (String::new(), true, false),
            (good(3), true, false),
            (good(4), false, false),
        ];
        assert_eq!(got, expect);

        let mut rec = Recording::default();
        let mut lines = 0;
        read_lines(text.as_bytes(), "rec.jsonl", &mut lines, &mut rec).unwrap();
        // At the real bound the 500 bytes are a line like any other: not JSON.
        assert_eq!((ids(&rec), lines), (vec![1, 3, 4], 5));
        assert_eq!((rec.damaged_lines, rec.damaged[0].line), (1, 2));
    }

    /// A line past [`MAX_LINE_BYTES`] is damaged, named by its number and its length; a read
    /// that fails part way keeps the lines before it and says how many were read.
    #[test]
    fn a_line_past_the_limit_is_damaged_and_a_failed_read_keeps_what_came_before() {
        use std::io::Read;
        let long = std::io::repeat(b'x').take(MAX_LINE_BYTES as u64 + 1);
        let (head, tail) = (format!("{}\n", good(1)), format!("\n{}\n", good(3)));
        let r = head.as_bytes().chain(long).chain(tail.as_bytes());
        let rec = {
            let mut rec = Recording::default();
            let mut lines = 0;
            read_lines(std::io::BufReader::new(r), "big", &mut lines, &mut rec).unwrap();
            assert_eq!(lines, 3);
            rec.sum_up();
            rec
        };
        assert_eq!(ids(&rec), [1, 3]);
        assert_eq!((rec.damaged_lines, rec.damaged[0].line), (1, 2));
        assert!(
            rec.damaged[0].why.contains("longer than 64 MiB"),
            "{:?}",
            rec.damaged
        );

        // The bound is the line's, without the `\r` of a `\r\n` (helper-87: an event of
        // exactly 64 MiB was read with `\n` and skipped with `\r\n`); a blank line past it is
        // passed over like any blank line (helper-87: it was counted as damaged).
        let mut exact = good(2);
        exact.push_str(&" ".repeat(MAX_LINE_BYTES - exact.len()));
        let spaces = std::io::repeat(b' ').take(MAX_LINE_BYTES as u64 + 7);
        let text = format!("{exact}\r\n{exact}\n");
        let r = text.as_bytes().chain(spaces).chain(&b"\t \r\n"[..]);
        let mut rec = Recording::default();
        let mut lines = 0;
        read_lines(std::io::BufReader::new(r), "exact", &mut lines, &mut rec).unwrap();
        assert_eq!((ids(&rec), lines, rec.damaged_lines), (vec![2, 2], 3, 0));
        // One byte more is past it, with either ending.
        let over = format!("{exact} \r\n{exact} \n");
        let rec = parse_recording(&over, "over").unwrap();
        assert_eq!((rec.events.len(), rec.damaged_lines), (0, 2));

        struct Fails;
        impl Read for Fails {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::from_raw_os_error(libc::EIO))
            }
        }
        let r = format!("{}\n{}\n", good(1), good(2)).into_bytes();
        let mut rec = Recording::default();
        let mut lines = 0;
        let e = read_lines(
            std::io::BufReader::new(r.as_slice().chain(Fails)),
            "rec",
            &mut lines,
            &mut rec,
        )
        .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        assert_eq!((ids(&rec), lines), (vec![1, 2], 2));
    }

    /// A dump's line in one sentence, and a dump line is no damaged line.
    #[test]
    fn a_dump_line_is_read_and_described() {
        let t = |us| SystemTime::UNIX_EPOCH + Duration::from_micros(us);
        let d = crate::event::DumpInfo {
            pid: 42,
            exe: "/usr/bin/svc".into(),
            run_id: "r".into(),
            process_started: None,
            detector_started: t(1_780_000_000_500_000),
            dumped_at: t(1_780_000_100_000_000),
            flight_size: 4 << 20,
            events: 1,
            bytes: 100,
            dropped_events: 120,
            dropped_pins: 50,
            first_event_at: None,
        };
        assert_eq!(
            describe_dump(&d),
            "flight recording of pid 42 (/usr/bin/svc), dumped at 2026-05-28T20:28:20.000Z; \
             120 earlier events of 50 pins were dropped for space (the buffer holds 4.0 MiB)"
        );
        let one = crate::event::DumpInfo {
            exe: String::new(),
            dropped_events: 1,
            dropped_pins: 1,
            ..d.clone()
        };
        assert!(describe_dump(&one).ends_with(
            "pid 42, dumped at 2026-05-28T20:28:20.000Z; 1 earlier event of 1 pin was dropped \
             for space (the buffer holds 4.0 MiB)"
        ));
        let text = format!("{}{}", d.to_json_line(), good(1));
        let rec = parse_recording(&text, "d").unwrap();
        assert_eq!(
            (rec.events.len(), rec.damaged_lines, rec.dumps.len()),
            (1, 0, 1)
        );
        assert_eq!(rec.describe_dumps(), [describe_dump(&d)]);
    }

    #[test]
    fn many_damaged_lines_are_counted_and_the_first_few_named() {
        let mut lines = Vec::new();
        for id in 1..=20u64 {
            if id % 3 == 0 {
                lines.push(good(id)[..40].to_owned());
            } else {
                lines.push(good(id));
            }
        }
        let rec = parse_recording(&(lines.join("\n") + "\n"), "r").unwrap();
        assert_eq!(rec.events.len(), 14);
        assert_eq!(rec.damaged_lines, 6);
        let named: Vec<usize> = rec.damaged.iter().map(|d| d.line).collect();
        assert_eq!(named, [3, 6, 9, 12, 15]);
        assert!(
            rec.warnings[0]
                .starts_with("skipped 6 damaged lines (r:3, r:6, r:9, r:12, r:15, and 1 more)"),
            "{}",
            rec.warnings[0]
        );
    }

    /// At the end: a line cut by a crash (no newline), or a torn one that a later newline ended.
    #[test]
    fn a_damaged_last_line() {
        let cut = format!("{}\n{}", good(1), &good(2)[..50]);
        let rec = parse_recording(&cut, "r").unwrap();
        assert_eq!(ids(&rec), [1]);
        assert!(rec.damaged[0].cut_off);
        assert!(
            rec.warnings[0].contains("r:2 (last line is incomplete"),
            "{}",
            rec.warnings[0]
        );
        let ended = cut + "\n";
        let rec = parse_recording(&ended, "r").unwrap();
        assert_eq!((ids(&rec), rec.damaged_lines), (vec![1], 1));
        assert!(!rec.damaged[0].cut_off);
    }

    /// Binary garbage (not UTF-8, or NUL bytes a crash can leave) is damage, skipped, read from
    /// a real file; the files of a rotated set are named as they are.
    #[test]
    fn binary_garbage_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.jsonl");
        let mut bytes = format!("{}\n", good(1)).into_bytes();
        bytes.extend_from_slice(b"\xff\xfe\x00garbage\x9c\n");
        bytes.extend_from_slice(&[0u8; 300]);
        bytes.push(b'\n');
        bytes.extend_from_slice(format!("{}\n", good(2)).as_bytes());
        std::fs::write(dir.path().join("rec.1.jsonl"), &bytes).unwrap();
        std::fs::write(&path, format!("{}\n\u{1}\u{2}\n", good(3))).unwrap();
        let rec = read_recording(&path).unwrap();
        assert_eq!(ids(&rec), [1, 2, 3]);
        assert_eq!(rec.damaged_lines, 3);
        assert_eq!(rec.damaged[0].why, "not UTF-8");
        let rotated = dir.path().join("rec.1.jsonl").display().to_string();
        let current = path.display().to_string();
        assert_eq!(
            rec.damaged
                .iter()
                .map(|d| (d.file.clone(), d.line))
                .collect::<Vec<_>>(),
            [(rotated.clone(), 2), (rotated, 3), (current, 2)]
        );
    }

    /// A set of files as a crafted archive may hold it: a rotated FIFO (which would wait for a
    /// writer for ever), a link to `/dev/zero` (which never ends), a link to nothing. Each is
    /// skipped with a warning naming it, and the rest is read; the recording itself as a FIFO
    /// or a device is refused at once, its name escaped.
    #[test]
    fn files_that_are_not_regular_are_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.jsonl");
        std::fs::write(&path, format!("{}\n", good(3))).unwrap();
        std::fs::write(dir.path().join("rec.4.jsonl"), format!("{}\n", good(1))).unwrap();
        let fifo = std::ffi::CString::new(
            dir.path()
                .join("rec.1.jsonl")
                .as_os_str()
                .as_encoded_bytes(),
        )
        .unwrap();
        // SAFETY: a NUL-terminated path; makes a FIFO there.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("rec.2.jsonl")).unwrap();
        std::os::unix::fs::symlink("nowhere", dir.path().join("rec.3.jsonl")).unwrap();
        let rec = read_recording(&path).unwrap();
        assert_eq!(ids(&rec), [1, 3]);
        let skipped: Vec<&String> = rec
            .warnings
            .iter()
            .filter(|w| w.starts_with("skipped"))
            .collect();
        assert_eq!(skipped.len(), 3, "{:?}", rec.warnings);
        for n in 1..=3 {
            assert!(
                skipped
                    .iter()
                    .any(|w| w.contains(&format!("rec.{n}.jsonl, a rotated file"))),
                "{n}: {skipped:?}"
            );
        }
        assert!(
            skipped
                .iter()
                .filter(|w| w.contains("not a regular file"))
                .count()
                == 2
        );

        // Another user's rotated file beside it (root here may give one away): not read.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let theirs = dir.path().join("rec.5.jsonl");
            std::fs::write(&theirs, format!("{}\n", good(9))).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
            let rec = read_recording(&path).unwrap();
            assert_eq!(ids(&rec), [1, 3]);
            assert!(
                rec.warnings
                    .iter()
                    .any(|w| w.contains("rec.5.jsonl") && w.contains("belongs to uid 65534")),
                "{:?}",
                rec.warnings
            );
        }
        // The recording named may be a pipe (`/dev/stdin`, `<(zcat …)`): read to its end.
        let piped = dir.path().join("piped.jsonl");
        let c = std::ffi::CString::new(piped.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; makes a FIFO there.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let writer = {
            let (piped, line) = (piped.clone(), format!("{}\n{}\n", good(4), good(5)));
            std::thread::spawn(move || std::fs::write(piped, line).unwrap())
        };
        let rec = read_recording(&piped).unwrap();
        writer.join().unwrap();
        assert_eq!(ids(&rec), [4, 5]);

        let evil = dir.path().join("evil\u{1b}]0;x\u{7}.jsonl");
        std::os::unix::fs::symlink("/dev/zero", &evil).unwrap();
        let e = read_recording(&evil).unwrap_err().to_string();
        assert!(
            e.contains("not a regular file") && e.contains(r"\u{1b}"),
            "{e}"
        );
        assert!(!e.contains('\u{1b}'), "{e}");
    }

    /// A JSON line that is not a pinwatch event is skipped like any damaged line, and the
    /// warning says why (one such line in the middle must not hide the rest).
    #[test]
    fn other_events_are_skipped_and_said() {
        let cases = [
            good(2).replace(r#""event":"pinned""#, r#""event":"gc""#),
            r#"{"hello":1}"#.to_owned(),
        ];
        for other in cases {
            let text = format!("{}\n{other}\n{}\n", good(1), good(3));
            let rec = parse_recording(&text, "r").unwrap();
            assert_eq!(ids(&rec), [1, 3], "{other}");
            assert_eq!((rec.damaged_lines, rec.damaged[0].line), (1, 2), "{other}");
            assert!(rec.warnings[0].contains("r:2"), "{:?}", rec.warnings);
        }
    }

    /// Lines of a schema this pinwatch does not read are skipped too, counted apart from damage
    /// and said as what they are: another version's.
    #[test]
    fn lines_of_another_schema_are_another_versions_not_damage() {
        let newer = |i| good(i).replace(r#""schema":2"#, r#""schema":99"#);
        let bad = good(4).replace(r#""id":4"#, r#""id":"four""#);
        let text = format!("{}\n{}\n{}\n{bad}\n", good(1), newer(2), newer(3));
        let rec = parse_recording(&text, "r").unwrap();
        assert_eq!(ids(&rec), [1]);
        assert_eq!((rec.other_schema_lines, rec.other_schema), (2, Some(99)));
        assert_eq!((rec.damaged_lines, rec.damaged[0].line), (1, 4));
        assert_eq!(rec.warnings.len(), 2, "{:?}", rec.warnings);
        assert!(
            rec.warnings[0].starts_with(
                "skipped 2 lines written by another pinwatch version (recording schema 99 for \
                 the first;"
            ),
            "{:?}",
            rec.warnings
        );
        assert!(
            rec.warnings[1].starts_with("skipped 1 damaged line (r:4)"),
            "{:?}",
            rec.warnings
        );
        // Another tool's JSON with a `schema` of its own is damage, not another version's.
        let rec = parse_recording(r#"{"schema":3,"event":"gc"}"#, "r").unwrap();
        assert_eq!((rec.other_schema_lines, rec.damaged_lines), (0, 1));
        // A kind of line a newer pinwatch added carries its run's id: another version's.
        let rec = parse_recording(r#"{"schema":3,"event":"stats","run_id":"x"}"#, "r").unwrap();
        assert_eq!((rec.other_schema_lines, rec.damaged_lines), (1, 0));
        // An event with no `event` field says so, with no Rust `Option` in the words.
        let rec = parse_recording(r#"{"schema":2,"id":1}"#, "r").unwrap();
        assert!(
            rec.damaged[0].why.contains("no `event` field"),
            "{:?}",
            rec.damaged
        );
    }

    /// A file with lines skipped and no event read gets a verdict saying what it is, and
    /// warnings that fit it: a file of some other kind (a service's stderr) is not said to have
    /// lost lines to a full disk, nor its last line to be a recording cut off; a recording whose
    /// only event was cut short is still said to be one; so are a gzipped recording and another
    /// version's.
    #[test]
    fn a_file_with_no_event_is_said_to_be_what_it_is() {
        let verdict = |rec: &Recording| rec.no_event_verdict("f").unwrap_or_default();
        // Some other file, its last line without a newline.
        let rec = parse_recording("starting up\nlistening on :8080", "log").unwrap();
        assert_eq!(rec.damaged_lines, 2);
        assert_eq!(
            verdict(&rec),
            "f holds no pinwatch event; is it a recording (a PINWATCH_RECORD file)?"
        );
        assert_eq!(rec.warnings.len(), 1, "{:?}", rec.warnings);
        let w = &rec.warnings[0];
        assert!(
            w.starts_with("skipped 2 lines (log:1, log:2); the first: not a pinwatch event: "),
            "{w}"
        );
        for no in ["disk", "every other line", "cut off", "damaged"] {
            assert!(!w.contains(no), "{no:?} in {w}");
        }
        // A recording whose one event was cut short by a full disk.
        let torn = &good(1)[..100];
        let rec = parse_recording(torn, "rec").unwrap();
        assert_eq!(
            verdict(&rec),
            "f holds no readable pinwatch event: every event line in it is damaged"
        );
        let w = rec.warnings.join("\n");
        assert!(
            w.starts_with("skipped 1 damaged line (rec:1 (last line is incomplete: the recording was cut off))")
                && w.contains("full disk")
                && !w.contains("every other line"),
            "{w}"
        );
        // Gzip: the verdict names the compressed file and how to read it; its lines are
        // listed as some other file's, with no disk blamed.
        let mut gz = vec![0x1f, 0x8b, 0x08, 0x00, 0xff, 0x10, b'\n', 0x9c];
        gz.extend_from_slice(&[0xfe; 40]);
        let rec = read_recording_from(&gz[..], "rec.jsonl.gz").unwrap();
        assert_eq!(
            verdict(&rec),
            "f holds no pinwatch event as it is: rec.jsonl.gz is compressed with gzip: read it \
             through zcat (`zcat FILE | pinwatch summary -`)"
        );
        let w = rec.warnings.join("\n");
        assert!(
            w.starts_with(
                "skipped 2 lines (rec.jsonl.gz:1, rec.jsonl.gz:2); the first: compressed"
            ) && !w.contains("disk"),
            "{w}"
        );
        // A recording cut off within its first bytes is still one.
        let rec = parse_recording(r#"{"sch"#, "r").unwrap();
        assert!(
            verdict(&rec).contains("every event line in it is damaged"),
            "{}",
            verdict(&rec)
        );
        // A flight dump of no event, and a line of garbage: read, with a warning; no verdict.
        let dump = crate::event::DumpInfo {
            pid: 1,
            exe: "/svc".into(),
            run_id: "r".into(),
            process_started: None,
            detector_started: SystemTime::UNIX_EPOCH,
            dumped_at: SystemTime::UNIX_EPOCH,
            flight_size: 4 << 20,
            events: 0,
            bytes: 0,
            dropped_events: 0,
            dropped_pins: 0,
            first_event_at: None,
        };
        let rec = parse_recording(&format!("{}garbage\n", dump.to_json_line()), "d").unwrap();
        assert_eq!(rec.dumps.len(), 1, "{:?}", rec.warnings);
        assert_eq!(rec.no_event_verdict("f"), None);
        assert!(
            rec.warnings[0].ends_with("; every other line was read"),
            "{:?}",
            rec.warnings
        );
        // Another version's events, one line damaged: another version's, not "a recording?".
        let newer = good(1).replace(r#""schema":2"#, r#""schema":99"#);
        let rec = parse_recording(&format!("{newer}\n{torn}\n"), "r").unwrap();
        assert!(
            verdict(&rec).contains("written by another pinwatch version (recording schema 99)"),
            "{}",
            verdict(&rec)
        );
        // One event among them: damage in a recording, no verdict.
        let rec = parse_recording(&format!("starting up\n{}\n", good(1)), "r").unwrap();
        assert_eq!(rec.no_event_verdict("f"), None);
        assert!(rec.warnings[0].starts_with("skipped 1 damaged line (r:1)"));
        assert!(rec.warnings[0].ends_with("; every other line was read"));
        // Nothing skipped, nothing read (an empty recording): no verdict either.
        assert_eq!(
            parse_recording("\n", "r").unwrap().no_event_verdict("f"),
            None
        );
    }

    /// An event of this schema whose fields are not what pinwatch writes (a crafted file) is
    /// damage: skipped and counted, the rest read.
    #[test]
    fn an_event_with_a_bad_field_is_skipped_and_counted() {
        for bad in [
            good(2).replace(r#""id":2"#, r#""id":"two""#),
            good(2).replace(r#""id":2"#, r#""id":-2"#),
            good(2).replace(r#""id":2"#, "\"id\":\"\u{1b}]0;owned\u{7}\""),
        ] {
            let text = format!("{}\n{bad}\n{}\n", good(1), good(3));
            let rec = parse_recording(&text, "r").unwrap();
            assert_eq!(ids(&rec), [1, 3], "{bad}");
            assert_eq!(rec.damaged_lines, 1);
            assert_eq!(rec.damaged[0].line, 2);
            assert!(rec.warnings[0].starts_with("skipped 1 damaged line (r:2)"));
            assert!(
                !rec.warnings[0].chars().any(char::is_control),
                "{:?}",
                rec.warnings[0]
            );
        }
    }
}
