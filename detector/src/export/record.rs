//! The JSON-lines recording (`PINWATCH_RECORD`, `pinwatch ctl <pid> record start`), rotated so
//! that it never fills the disk.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use super::Sink;
use crate::event::PinnedEvent;
use crate::files::{may_follow, rotated_path};
use crate::text::Escaped;
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

/// After a rotation failed, the events written to the current file before the next try…
const ROTATE_RETRY_EVENTS: u64 = 16;
/// …or the time, whichever comes first.
const ROTATE_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Appends each event to a file as one JSON line, rotating it by size and age.
///
/// Each line goes to the kernel in a single `write` as soon as the event arrives — no user-space
/// buffer — so a process killed with SIGKILL while a worker is stuck still leaves that worker's
/// `in_progress` event whole on disk. A line never spans two files.
///
/// Faults of the disk lose no more than they must. A rotation opens the new file before it
/// renames any old one, so a rotation that fails (no file descriptor left, quota, a full disk)
/// leaves every file in place and the events keep going to the current file, past its size
/// limit; the rotation is tried again after 16 events or 1 s and resumes once the fault is gone.
/// A write cut short (a full disk) leaves part of a line; the next line then starts on a line
/// of its own, as does the first line appended to a file whose last line has no newline (a
/// crash), so a damaged line never takes a whole one with it — readers skip it and say so.
#[derive(Debug)]
pub struct RecordSink {
    file: File,
    path: PathBuf,
    rotation: Rotation,
    /// Bytes in the current file.
    size: u64,
    /// When this process started writing the current file.
    since: Instant,
    /// When the recording started (for `record list`).
    started: SystemTime,
    /// The current file's device and inode, to tell a second recording to the same file.
    file_id: (u64, u64),
    /// The current file holds a whole line (so that rotating it keeps something).
    holds_lines: bool,
    /// The current file ends in part of a line: the next line starts with a newline.
    torn: bool,
    /// Warned that writes fail; events lost since.
    failing: Option<u64>,
    /// The last rotation failed: at how many events offered, and when.
    rotate_failed: Option<(u64, Instant)>,
    events: u64,
    bytes: u64,
    rotations: u64,
    rotation_errors: u64,
    write_errors: u64,
}

/// What a recording has written, for `pinwatch ctl <pid> status`, `record list` and
/// `record stop`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct RecordStatus {
    /// The recording's id in its service (`record stop ID`): 0 for the start-up recording
    /// (`PINWATCH_RECORD`), 1, 2, … for those started with `pinwatch ctl`, never reused.
    /// `None` for a [`RecordSink`] of one's own (and from services older than several
    /// recordings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// Whether it is the start-up recording (`PINWATCH_RECORD`).
    #[serde(default)]
    pub startup: bool,
    /// When it started, in ms since the Unix epoch (0 from services older than this field).
    #[serde(default)]
    pub started_ms: u64,
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
    /// Times a rotation failed (no file descriptor left, a full disk…): the events went on to
    /// the current file, past its size limit, and the rotation was tried again later.
    #[serde(default)]
    pub rotation_errors: u64,
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
        // Absolute: a `chdir` of the service's later moves neither the checks of its name nor
        // its rotation.
        let path = &std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        let (file, meta) = append(path).map_err(|source| Error::Record {
            path: path.to_owned(),
            source,
        })?;
        let size = meta.len();
        let torn = size > 0 && !ends_with_newline(&file, size);
        Ok(RecordSink {
            file,
            path: path.to_owned(),
            rotation: Rotation {
                keep: rotation.keep.max(1),
                ..rotation
            },
            size,
            since: Instant::now(),
            started: SystemTime::now(),
            file_id: (meta.dev(), meta.ino()),
            holds_lines: size > 0,
            torn,
            failing: None,
            rotate_failed: None,
            events: 0,
            bytes: 0,
            rotations: 0,
            rotation_errors: 0,
            write_errors: 0,
        })
    }

    /// What it has written so far.
    pub fn status(&self) -> RecordStatus {
        RecordStatus {
            id: None,
            startup: false,
            started_ms: self
                .started
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            path: self.path.clone(),
            events: self.events,
            bytes: self.bytes,
            current_size: self.size,
            rotations: self.rotations,
            rotation_errors: self.rotation_errors,
            write_errors: self.write_errors,
            max_size: self.rotation.max_size,
            max_age_ms: self.rotation.max_age.map(|d| d.as_millis() as u64),
            keep: self.rotation.keep,
        }
    }

    fn due(&self, len: u64) -> bool {
        self.holds_lines
            && (self
                .rotation
                .max_size
                .is_some_and(|max| self.size + len > max)
                || self
                    .rotation
                    .max_age
                    .is_some_and(|age| self.since.elapsed() >= age))
            && self.rotate_failed.is_none_or(|(offered, at)| {
                self.offered() - offered >= ROTATE_RETRY_EVENTS
                    || at.elapsed() >= ROTATE_RETRY_AFTER
            })
    }

    /// Events offered so far, written or not.
    fn offered(&self) -> u64 {
        self.events + self.write_errors
    }

    /// Starts a fresh current file, the old one becoming rotated file 1, file 1 file 2, …, and
    /// the one past `keep` deleted. The new file is opened first, under a name no reader takes
    /// for part of the recording; then the names move, newest last. A failure at any step
    /// leaves every file there (at worst one number is skipped, which readers and the next
    /// rotation take in their stride) and the current file in use.
    fn rotate(&mut self) -> std::io::Result<()> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        match std::fs::symlink_metadata(&self.path) {
            Ok(_) => {}
            // The current file went since the line began (deleted by hand): a new one under
            // its name, the rotated ones left where they are.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return self.follow_the_name(),
            Err(e) => return Err(e),
        }
        // The mode of the file written (`fstat`), not of the path: a symlink's own is 0777.
        let current = self.file.metadata()?;
        let fresh = fresh_path(&self.path);
        let named = |e: std::io::Error| {
            let what = format!("{}: {e}", Escaped(fresh.display()));
            std::io::Error::new(e.kind(), what)
        };
        match std::fs::remove_file(&fresh) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(named(e)),
            _ => {}
        }
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .mode(0o600)
            .open(&fresh)
            .map_err(named)?;
        let undo = |e: std::io::Error| {
            let _ = std::fs::remove_file(&fresh);
            e
        };
        // The new file is readable by whom the current one is (a recording made 0640 for a log
        // shipper stays so), never by more than its owner otherwise.
        let mode = current.permissions().mode() & 0o777;
        file.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(undo)?;
        // Its size and inode, before any name moves.
        let meta = file.metadata().map_err(undo)?;
        // Only the files that are there: `keep` may be huge (`--keep 18446744073709551615`),
        // and a rotation must cost what is on disk, not what `keep` allows. Files numbered
        // `keep` or more are left alone.
        let mut present = crate::files::rotated_numbers(&self.path).map_err(undo)?;
        // Not another recording named like a rotated file, which the reader leaves out too.
        present.sort_unstable();
        present.truncate(crate::files::rotated_run(&present));
        present.retain(|&k| k < self.rotation.keep);
        present.reverse();
        for k in present {
            // Onto file k + 1, replacing it: that deletes the oldest.
            match rename(
                &rotated_path(&self.path, k),
                &rotated_path(&self.path, k + 1),
            ) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(undo(e)),
                _ => {}
            }
        }
        let first = rotated_path(&self.path, 1);
        rename(&self.path, &first).map_err(undo)?;
        if let Err(e) = rename(&fresh, &self.path) {
            // Put the current file back under its name; should that fail too, the next
            // rotation finds no current file and starts one.
            let _ = std::fs::rename(&first, &self.path);
            return Err(undo(e));
        }
        self.rotations += 1;
        self.switch_to(file, &meta);
        Ok(())
    }

    /// Makes `file` the current file (a fresh one, or one that a reader should take as
    /// possibly ending mid-line when it holds anything).
    fn switch_to(&mut self, file: File, meta: &std::fs::Metadata) {
        self.size = meta.len();
        self.file_id = (meta.dev(), meta.ino());
        self.file = file;
        self.since = Instant::now();
        self.holds_lines = false;
        self.torn = self.size > 0;
    }

    /// Keeps writing to the file the path names: one deleted by hand, or moved away as a log
    /// rotator does, would take every later line with it, unseen (nothing fails writing to
    /// it). A new file is started under the name, once said; one that cannot be is a write
    /// error, counted and said as such.
    fn follow_the_name(&mut self) -> std::io::Result<()> {
        match std::fs::metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == self.file_id && m.len() < self.size => {
                // Truncated in place (logrotate's `copytruncate`): its size is counted from
                // what is left, or it would rotate that much early (helper-105: at 30 KB of
                // 64). Appends go to its new end.
                self.size = m.len();
                self.torn &= m.len() > 0;
                return Ok(());
            }
            Ok(m) if (m.dev(), m.ino()) != self.file_id => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // The file, or a look that failed (a directory the service may no longer search):
            // the open file stays.
            _ => return Ok(()),
        }
        let (file, meta) = append(&self.path)?;
        self.switch_to(file, &meta);
        super::say(
            tracing::Level::WARN,
            format!(
                "the pinwatch recording {} was deleted or moved away; it goes on in a new file \
                 under its name",
                Escaped(self.path.display())
            ),
        );
        Ok(())
    }

    fn write_line(&mut self, line: &str) -> std::io::Result<()> {
        self.follow_the_name()?;
        if self.due(line.len() as u64 + u64::from(self.torn)) {
            let offered = self.offered();
            match self.rotate() {
                Ok(()) => {
                    if self.rotate_failed.take().is_some() {
                        super::say(
                            tracing::Level::INFO,
                            format!(
                                "the pinwatch recording {} rotates again",
                                Escaped(self.path.display())
                            ),
                        );
                    }
                }
                Err(e) => {
                    self.rotation_errors += 1;
                    if self.rotate_failed.is_none() {
                        super::say(
                            tracing::Level::ERROR,
                            format!(
                                "cannot rotate the pinwatch recording {}: {e}; events go on to \
                                 the current file, past its size limit, and the rotation is tried \
                                 again every {ROTATE_RETRY_EVENTS} events or {}",
                                Escaped(self.path.display()),
                                humantime::format_duration(ROTATE_RETRY_AFTER)
                            ),
                        );
                    }
                    self.rotate_failed = Some((offered, Instant::now()));
                }
            }
        }
        // Still one `write`: the newline that ends a torn line goes with the line.
        let line: std::borrow::Cow<'_, str> = if self.torn {
            format!("\n{line}").into()
        } else {
            line.into()
        };
        let bytes = line.as_bytes();
        let mut written = 0;
        let result = loop {
            if written == bytes.len() {
                break Ok(());
            }
            match self.file.write(&bytes[written..]) {
                Ok(0) => break Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        self.size += written as u64;
        self.bytes += written as u64;
        if written > 0 {
            // Part of a line on disk: the next one starts on a line of its own.
            self.torn = !bytes[..written].ends_with(b"\n");
        }
        result?;
        self.holds_lines = true;
        self.events += 1;
        Ok(())
    }
}

/// `std::fs::rename`, its error naming both paths (and the kind kept): a rotation that fails
/// names the file in its way, as another user's file in `/tmp` that cannot be replaced.
fn rename(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::rename(from, to).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!(
                "cannot rename {} to {}: {e}",
                Escaped(from.display()),
                Escaped(to.display())
            ),
        )
    })
}

/// Opens `path` for appending; its current size.
///
/// Only a regular file: a recording is rotated by renaming its path, which on a device would
/// move the device node itself (a service running as root, recording to `/dev/null`, would
/// replace `/dev/null` with a regular file once the size limit is reached); and writes to a FIFO
/// block the export thread while nobody reads. The open does not wait either: `O_NONBLOCK`
/// makes opening a FIFO that nobody reads fail at once (`ENXIO`) instead of blocking the
/// caller, who may hold the recorder's lock, for good. The check is made on the opened
/// descriptor (`fstat`), not on the path.
///
/// Symlinks on the way are followed (a recording may live elsewhere), except one that another
/// user made in a directory anyone may write to (sticky, as `/tmp`): it could point at any file
/// the service may write. That is the kernel's `fs.protected_symlinks` rule, kept where the
/// kernel's is off ([`planted_symlinks`]). The last name is opened without following first, and
/// a symlink found there is checked again before it is followed: one made after the first
/// check is refused too (in such a directory nobody else can replace the service's own). Nor
/// another user's file there ([`others_file_in_shared_dir`]), nor a file of `/proc` or `/sys`
/// ([`kernel_fs`]).
///
/// [`planted_symlinks`]: crate::files::planted_symlinks
fn append(path: &Path) -> std::io::Result<(File, std::fs::Metadata)> {
    // A new recording is its owner's only (stacks, span fields and thread names say what the
    // service does); an existing file keeps its mode.
    let opened = crate::files::open_unplanted(
        path,
        libc::O_CREAT | libc::O_WRONLY | libc::O_APPEND | libc::O_NONBLOCK | libc::O_NOCTTY,
        0o600,
    )
    .map_err(|e| match e.raw_os_error() {
        Some(libc::ENXIO) => not_a_file("a FIFO that nobody reads"),
        Some(libc::EISDIR) => not_a_file("a directory"),
        _ => e,
    })?;
    let file = opened.file;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_a_file(crate::files::kind(meta.file_type())));
    }
    if let Some(fs) = kernel_fs(&file) {
        return Err(not_a_file(&format!(
            "a file of the kernel's {fs} (whose writes change the process or the system)"
        )));
    }
    if let Some((dir, dir_meta)) = &opened.dir {
        others_file_in_shared_dir(&meta, dir, dir_meta)?;
    }
    // Back to blocking writes (O_NONBLOCK means nothing to a regular file's I/O, but the
    // descriptor says what it is).
    // SAFETY: the fd is the file's, open for these calls; F_GETFL/F_SETFL change only its
    // status flags.
    unsafe {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    Ok((file, meta))
}

/// The error for a recording path that is `what`, not a regular file.
fn not_a_file(what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!(
            "it is {what}: a recording must be a regular file (it is rotated by renaming it); \
             give the path of a file"
        ),
    )
}

/// The kernel's own file system that `file` is on (`/proc`, `/sys`, …), if it is: their
/// regular files are the kernel's controls (`/proc/self/comm` renames the process), never a
/// place for a recording.
fn kernel_fs(file: &File) -> Option<&'static str> {
    // SAFETY: the fd is the file's, open for this call; `st` is a plain C struct that fstatfs
    // fills and that is read only when it succeeds.
    let kind = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        if libc::fstatfs(std::os::fd::AsRawFd::as_raw_fd(file), &mut st) != 0 {
            return None;
        }
        st.f_type as u64
    };
    const KERNEL_FS: [(u64, &str); 14] = [
        (0x9fa0, "proc"),
        (0x6265_6572, "sysfs"),
        (0x6462_6720, "debugfs"),
        (0x7472_6163, "tracefs"),
        (0x0027_e0eb, "cgroup"),
        (0x6367_7270, "cgroup2"),
        (0x7363_6673, "securityfs"),
        (0x6265_6570, "configfs"),
        (0xcafe_4a11, "bpf"),
        (0xde5e_81e4, "efivarfs"),
        (0x4249_4e4d, "binfmt_misc"),
        (0xf97c_ff8c, "selinuxfs"),
        (0x6573_5543, "fusectl"),
        (0x6165_676c, "pstore"),
    ];
    KERNEL_FS.iter().find(|k| k.0 == kind).map(|k| k.1)
}

/// Refuses an existing file that another user made in a directory anyone may write to
/// (sticky, as `/tmp`), unless that user owns the directory: they can read every line
/// written to it and forge lines in it. That is the kernel's `fs.protected_regular` rule, kept
/// where the kernel's is off, as [`may_follow`] keeps `fs.protected_symlinks`. Nor a file with
/// other names (hard links) there: another user may have linked one of the service's files
/// in (where `fs.protected_hardlinks` is off). `dir` is the directory the file was opened in
/// ([`open_unplanted`](crate::files::open_unplanted)), whatever was renamed since.
fn others_file_in_shared_dir(
    meta: &std::fs::Metadata,
    dir: &Path,
    dir_meta: &std::fs::Metadata,
) -> std::io::Result<()> {
    // SAFETY: geteuid cannot fail and touches no memory.
    let me = unsafe { libc::geteuid() };
    let shared = crate::files::is_shared(dir_meta.mode());
    let why = if !may_follow(meta.uid(), dir_meta.uid(), dir_meta.mode(), me) {
        format!(
            "a file that user {} made in {}, a directory anyone may write to: they can read \
             the recording and forge lines in it, so pinwatch does not write to it (as the \
             kernel's fs.protected_regular would)",
            meta.uid(),
            Escaped(dir.display()),
        )
    } else if shared && meta.nlink() > 1 {
        format!(
            "a file with {} names (hard links) in {}, a directory anyone may write to: it may \
             be another file of the service's that someone linked there, so pinwatch does not \
             write to it",
            meta.nlink(),
            Escaped(dir.display()),
        )
    } else {
        return Ok(());
    };
    Err(std::io::Error::new(
        // A refusal, not a failure to open: said without "check that its directory exists".
        std::io::ErrorKind::InvalidInput,
        format!(
            "{why}; record to a new name, or into a directory of the service's own (only its \
             owner or root may remove it)"
        ),
    ))
}

/// Whether the `size`-byte `file` ends with a newline; when it cannot be read, it is taken
/// not to (the cost of a wrong guess is one blank line, which readers skip).
fn ends_with_newline(file: &File, size: u64) -> bool {
    use std::os::unix::fs::FileExt;
    let mut last = [0u8];
    // The open file itself, read through its descriptor's link: its name may name another
    // file by now.
    let fd = std::os::fd::AsRawFd::as_raw_fd(file);
    File::open(format!("/proc/self/fd/{fd}"))
        .and_then(|f| f.read_exact_at(&mut last, size.saturating_sub(1)))
        .is_ok_and(|()| last[0] == b'\n')
}

/// Where a rotation opens the next current file of `path` before it takes `path`'s name:
/// hidden, and no rotated file's name, so that readers of the recording never see it.
fn fresh_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(Default::default, |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.next"))
}

impl RecordSink {
    /// Appends one event's line (see [`PinnedEvent::to_json_line`]), counting and logging a
    /// failure once; whether it was written.
    fn write(&mut self, line: &str) -> bool {
        let result = self.write_line(line);
        let written = result.is_ok();
        if let Err(e) = result {
            self.write_errors += 1;
            match &mut self.failing {
                Some(lost) => *lost += 1,
                None => {
                    self.failing = Some(1);
                    super::say(
                        tracing::Level::ERROR,
                        format!(
                            "cannot append to the pinwatch recording {}: {e}; later events are \
                             lost until it is writable again",
                            Escaped(self.path.display())
                        ),
                    );
                }
            }
        } else if let Some(lost) = self.failing.take() {
            super::say(
                tracing::Level::INFO,
                format!(
                    "the pinwatch recording {} is writable again; {lost} events were lost",
                    Escaped(self.path.display())
                ),
            );
        }
        written
    }
}

impl Sink for RecordSink {
    fn event(&mut self, event: &PinnedEvent) {
        let _ = self.write(&event.to_json_line());
    }

    fn flush(&mut self) {
        let _ = self.file.sync_data();
    }
}

/// Recordings one service runs at once, the start-up one (`PINWATCH_RECORD`) included; one
/// more `record start` is refused until one is stopped. Each costs a file descriptor and one
/// `write` per event on the export thread.
pub const MAX_RECORDINGS: usize = 8;

/// Where a recording's names live: its directory, by device and inode (so that a symlinked
/// directory, `..` or a relative path name the same one), and the file's name in it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Place {
    dir: (u64, u64),
    name: std::ffi::OsString,
}

impl Place {
    /// The place of `path` as named (where its rotation renames files).
    fn of(path: &Path) -> std::io::Result<Place> {
        let (dir, name) = crate::files::dir_and_name(path)?;
        let meta = std::fs::metadata(dir)?;
        Ok(Place {
            dir: (meta.dev(), meta.ino()),
            name: name.to_owned(),
        })
    }

    /// The places of `path`: as named, and where a symlink at its end leads (where its lines
    /// go), when that is elsewhere.
    fn all(path: &Path) -> Vec<Place> {
        let mut places: Vec<Place> = Place::of(path).into_iter().collect();
        if let Ok(real) = std::fs::canonicalize(path).and_then(|p| Place::of(&p)) {
            if !places.contains(&real) {
                places.push(real);
            }
        }
        places
    }

    /// Whether recordings here and at `other` would write or rotate each other's files: the
    /// same file, or one a rotated name of the other (`rec.1.jsonl` of `rec.jsonl`), or the
    /// hidden name a rotation opens its next file under.
    fn clashes(&self, other: &Place) -> bool {
        let related = |a: &std::ffi::OsStr, b: &std::ffi::OsStr| {
            let (a, b) = (Path::new(a), Path::new(b));
            crate::files::rotation_number(a, b).is_some() || fresh_path(a) == b
        };
        self.dir == other.dir
            && (self.name == other.name
                || related(&self.name, &other.name)
                || related(&other.name, &self.name))
    }
}

/// A running recording.
#[derive(Debug)]
struct Running {
    id: u64,
    startup: bool,
    /// Where its names are (see [`Place::all`]), as it started.
    places: Vec<Place>,
    sink: RecordSink,
}

impl Running {
    fn status(&self) -> RecordStatus {
        RecordStatus {
            id: Some(self.id),
            startup: self.startup,
            ..self.sink.status()
        }
    }

    /// Why a recording to `path` (its `places`, its file `file_id`) cannot run beside this
    /// one, if it cannot.
    fn clash(&self, path: &Path, places: &[Place], file_id: Option<(u64, u64)>) -> Option<String> {
        let same_file = file_id == Some(self.sink.file_id);
        let related = places
            .iter()
            .any(|p| self.places.iter().any(|q| q.clashes(p)));
        (same_file || related).then(|| {
            format!(
                "cannot record to {}: recording {} writes {}, and that is the same file or one \
                 of its rotated files (`name.1.ext`, …) — two recordings there would interleave \
                 and rotate each other's lines; stop it first (`record stop {}`) or record to \
                 another file",
                path.display(),
                self.label(),
                self.sink.path.display(),
                self.id
            )
        })
    }

    /// `0 (startup)`, `3`.
    fn label(&self) -> String {
        if self.startup {
            format!("{} (startup)", self.id)
        } else {
            self.id.to_string()
        }
    }
}

/// The recordings running in a detector.
#[derive(Debug)]
struct Recordings {
    /// By id, oldest first.
    running: Vec<Running>,
    /// The id of the next recording started with `pinwatch ctl` (the start-up one is 0).
    next_id: u64,
    /// Events a recording could not write (a full disk, an I/O error), all recordings together:
    /// `pinwatch_events_dropped_total{sink="recording"}`.
    unwritten: Arc<AtomicU64>,
}

impl Default for Recordings {
    fn default() -> Self {
        Recordings {
            running: Vec::new(),
            next_id: 1,
            unwritten: Arc::default(),
        }
    }
}

impl Recordings {
    fn full(&self) -> Option<String> {
        (self.running.len() >= MAX_RECORDINGS).then(|| {
            format!(
                "{} recordings are running, the most a service keeps at once; stop one first \
                 (`record list` shows them, `record stop ID` stops one)",
                self.running.len()
            )
        })
    }

    fn clash(&self, path: &Path, places: &[Place], file_id: Option<(u64, u64)>) -> Option<String> {
        self.running
            .iter()
            .find_map(|r| r.clash(path, places, file_id))
    }

    /// One line per recording: `  1 /tmp/a.jsonl`.
    fn listing(&self) -> String {
        self.running
            .iter()
            .map(|r| format!("\n  {} {}", r.label(), r.sink.path.display()))
            .collect()
    }
}

/// RecordingRef recording `record stop` stops.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RecordingRef<'a> {
    /// The only one running.
    Only,
    /// The one with this id.
    Id(u64),
    /// The one writing this file.
    Path(&'a Path),
}

/// The recordings of a detector: the one `PINWATCH_RECORD` starts (id 0) and up to
/// [`MAX_RECORDINGS`] in all that `pinwatch ctl` starts and stops while the service runs.
/// Their sink sits in the export thread's fan-out and writes each event to every recording
/// running, under one lock: a recording gets an event whole or not at all, and exactly the
/// events delivered between its start and its stop. The lock is taken per event on the export
/// thread, never on a worker or on the watchdog; the control thread opens, inspects and syncs
/// files without it.
#[derive(Clone, Default)]
pub(crate) struct Recorder {
    slots: Arc<Mutex<Recordings>>,
    /// What [`list`](Self::list) says: each recording's status as of its last change, kept
    /// apart from `slots`. A write that does not return (a file system that does not answer)
    /// holds `slots`; `status` and `record list` still answer, with the counts from before it.
    shown: Arc<Mutex<Vec<RecordStatus>>>,
}

impl Recorder {
    fn lock(&self) -> std::sync::MutexGuard<'_, Recordings> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The recordings, held as a write that does not return holds them.
    #[cfg(test)]
    pub(crate) fn hold(&self) -> impl Sized + '_ {
        self.lock()
    }

    /// Makes `slots` (locked) what [`list`](Self::list) says.
    fn publish(&self, slots: &Recordings) {
        let statuses = slots.running.iter().map(Running::status).collect();
        *self.shown.lock().unwrap_or_else(PoisonError::into_inner) = statuses;
    }

    /// The count of events the recordings could not write.
    pub(crate) fn unwritten(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.lock().unwritten)
    }

    /// Starts a recording to `path`; what it is (its id). Fails when [`MAX_RECORDINGS`] run,
    /// when a running one writes the same file or one of its rotated names, or when the file
    /// cannot be opened.
    pub(crate) fn start(&self, path: &Path, rotation: Rotation) -> Result<RecordStatus, String> {
        // Everything that touches the disk is done without the lock, which the export thread
        // takes for every event: an open that takes long (a slow network filesystem) holds up
        // neither the events nor `status`.
        let named = Place::of(path).ok();
        {
            let slots = self.lock();
            if let Some(e) = slots
                .full()
                .or_else(|| slots.clash(path, named.as_slice(), None))
            {
                return Err(e);
            }
        }
        let sink = RecordSink::open_rotating(path, rotation).map_err(|e| match e {
            Error::Record { source, .. } if source.kind() == std::io::ErrorKind::InvalidInput => {
                format!("cannot record to {}: {source}", path.display())
            }
            Error::Record { source, .. } => format!(
                "cannot open {} for appending: {source}; check that its directory exists and \
                 that the service's user may write there",
                path.display()
            ),
            other => other.to_string(),
        })?;
        let places = Place::all(path);
        let mut slots = self.lock();
        // Another client may have started one meanwhile; and now that the file exists, a
        // symlink or hard link to a running recording's file shows.
        if let Some(e) = slots
            .full()
            .or_else(|| slots.clash(path, &places, Some(sink.file_id)))
        {
            return Err(e);
        }
        let id = slots.next_id;
        slots.next_id += 1;
        let running = Running {
            id,
            startup: false,
            places,
            sink,
        };
        let status = running.status();
        slots.running.push(running);
        self.publish(&slots);
        Ok(status)
    }

    /// Makes `sink` the start-up recording (id 0, from `PINWATCH_RECORD`).
    pub(crate) fn install(&self, sink: RecordSink) {
        let places = Place::all(&sink.path);
        let mut slots = self.lock();
        slots.running.retain(|r| r.id != 0);
        slots.running.insert(
            0,
            Running {
                id: 0,
                startup: true,
                places,
                sink,
            },
        );
        self.publish(&slots);
    }

    /// Stops the recording `which` says, its data on disk; what it wrote. Never guesses: with
    /// [`RecordingRef::Only`] and several running, it stops none and says which run.
    pub(crate) fn stop(&self, which: RecordingRef<'_>) -> Result<RecordStatus, String> {
        // The file's places and inode are looked up before the lock is taken.
        let (places, file_id) = match which {
            RecordingRef::Path(p) => (
                Place::all(p),
                std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino())),
            ),
            _ => (Vec::new(), None),
        };
        let mut slots = self.lock();
        if slots.running.is_empty() {
            return Err("no recording is running; start one with `record start FILE`".to_owned());
        }
        let at = match which {
            RecordingRef::Only if slots.running.len() == 1 => Some(0),
            RecordingRef::Only => {
                return Err(format!(
                    "{} recordings are running; say which to stop, by id or file (`record stop \
                     ID`, `record stop FILE`):{}",
                    slots.running.len(),
                    slots.listing()
                ))
            }
            RecordingRef::Id(id) => slots.running.iter().position(|r| r.id == id),
            RecordingRef::Path(p) => slots.running.iter().position(|r| {
                r.sink.path == p
                    || places.iter().any(|q| r.places.contains(q))
                    || file_id == Some(r.sink.file_id)
            }),
        };
        let Some(at) = at else {
            let what = match which {
                RecordingRef::Id(id) => format!("no recording {id} is running"),
                RecordingRef::Path(p) => format!("no recording writes {}", p.display()),
                RecordingRef::Only => "no recording is running".to_owned(),
            };
            return Err(format!(
                "{what}; running (`record list`):{}",
                slots.listing()
            ));
        };
        let running = slots.running.remove(at);
        self.publish(&slots);
        drop(slots);
        let mut running = running;
        running.sink.flush();
        Ok(running.status())
    }

    /// The recordings running, oldest first.
    pub(crate) fn list(&self) -> Vec<RecordStatus> {
        self.shown
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The sink that writes to every recording running (and keeps no flight recording).
    #[cfg(test)]
    pub(crate) fn sink(&self) -> RecorderSink {
        RecorderSink(self.clone(), None)
    }

    /// The tests' `sink`, also keeping each event in `flight`: its line is made once for
    /// the flight recording and every recording running.
    pub(crate) fn sink_with(&self, flight: Option<super::Flight>) -> RecorderSink {
        RecorderSink(self.clone(), flight)
    }
}

/// See [`Recorder::sink_with`].
pub(crate) struct RecorderSink(Recorder, Option<super::Flight>);

impl Sink for RecorderSink {
    fn event(&mut self, event: &PinnedEvent) {
        let mut slots = self.0.lock();
        if slots.running.is_empty() && self.1.is_none() {
            return;
        }
        // Made once, written to each recording and kept in the flight recording.
        let line = event.to_json_line();
        let mut unwritten = 0;
        for r in &mut slots.running {
            unwritten += u64::from(!r.sink.write(&line));
        }
        if unwritten > 0 {
            slots.unwritten.fetch_add(unwritten, Ordering::Relaxed);
        }
        if !slots.running.is_empty() {
            self.0.publish(&slots);
        }
        drop(slots);
        if let Some(flight) = &self.1 {
            flight.push_line(event, &line);
        }
    }

    fn flush(&mut self) {
        for r in &mut self.0.lock().running {
            r.sink.flush();
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::files::planted_symlinks;
    use crate::recording::{read_recording, recording_files};

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
        // Room for more than 20 events (each line carries its advice) in the 4 files kept.
        let max = 6_000;
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

    /// A recording at `path` that rotates every few events (2,000 bytes, two files kept).
    fn small_rotating(path: &Path) -> RecordSink {
        let rotation = Rotation {
            max_size: Some(2_000),
            max_age: None,
            keep: 2,
        };
        RecordSink::open_rotating(path, rotation).unwrap()
    }

    /// A rotation that cannot move a name (a directory planted as `rec.2.jsonl`; another
    /// user's file in `/tmp` does the same for all but root) names the file in its way, and
    /// the events go on to the current file.
    #[test]
    fn a_failed_rotation_names_the_file_in_its_way() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.jsonl");
        let mut sink = small_rotating(&path);
        std::fs::write(dir.path().join("rec.1.jsonl"), b"").unwrap();
        std::fs::create_dir(dir.path().join("rec.2.jsonl")).unwrap();
        std::fs::write(dir.path().join("rec.2.jsonl/x"), b"x").unwrap();
        sink.event(&event(1, 0));
        let e = sink.rotate().unwrap_err().to_string();
        assert!(
            e.contains("cannot rename")
                && e.contains(&format!("to {}", dir.path().join("rec.2.jsonl").display())),
            "{e}"
        );
        sink.event(&event(2, 0));
        assert_eq!(ids(&path), [1, 2]);
    }

    /// A new recording is its owner's only, whatever the umask; a rotation gives the new file
    /// the current one's mode (made readable on purpose, it stays so).
    #[test]
    fn a_new_recording_is_private_and_rotation_keeps_the_mode_given() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.jsonl");
        let mut sink = small_rotating(&path);
        sink.event(&event(1, 0));
        sink.flush();
        assert_eq!(mode(&path), 0o600);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        for id in 2..=40 {
            sink.event(&event(id, 100));
        }
        sink.flush();
        assert!(sink.status().rotations > 0, "{:?}", sink.status());
        assert_eq!(mode(&path), 0o640, "the rotated-to file");
        assert_eq!(mode(&dir.path().join("rec.1.jsonl")), 0o640);
    }

    /// A recording whose path is a symlink (to a private file) rotates into a file as private
    /// as the one written: the mode is the written file's, not the symlink's own (always 0777).
    #[test]
    fn a_recording_through_a_symlink_rotates_into_a_private_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target.jsonl");
        std::fs::write(&target, "").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
        let path = dir.path().join("rec.jsonl");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let mut sink = small_rotating(&path);
        for id in 1..=40 {
            sink.event(&event(id, 100));
        }
        sink.flush();
        assert!(sink.status().rotations > 0, "{:?}", sink.status());
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.is_file(), "{meta:?}");
        let mode = meta.permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the rotated-to file: {mode:o}");
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

    /// The start-up recording and two started later run at once, stopped in another order than
    /// started: each file holds exactly the events delivered while it ran. `stop` without an
    /// id refuses to guess while several run; an unknown id or file is refused, naming the
    /// running ones; ids are never reused.
    #[test]
    fn several_recordings_each_get_exactly_the_events_of_their_span() {
        let dir = tempfile::tempdir().unwrap();
        let r = Recorder::default();
        let mut sink = r.sink();
        sink.event(&event(1, 0)); // nothing runs: dropped
        let (s, a, b) = (
            dir.path().join("startup.jsonl"),
            dir.path().join("a.jsonl"),
            dir.path().join("b.jsonl"),
        );
        r.install(RecordSink::open(&s).unwrap());
        sink.event(&event(2, 0));
        let st = r.start(&a, Rotation::NEVER).unwrap();
        assert_eq!((st.id, st.startup), (Some(1), false));
        sink.event(&event(3, 0));
        assert_eq!(r.start(&b, Rotation::NEVER).unwrap().id, Some(2));
        sink.event(&event(4, 0));
        let list = r.list();
        let ids: Vec<_> = list.iter().map(|s| (s.id, s.startup)).collect();
        assert_eq!(ids, [(Some(0), true), (Some(1), false), (Some(2), false)]);
        assert!(list.iter().all(|s| s.started_ms > 0));

        let e = r.stop(RecordingRef::Only).unwrap_err();
        assert!(
            e.contains("3 recordings are running")
                && e.contains("0 (startup)")
                && e.contains(&a.display().to_string())
                && e.contains("record stop ID"),
            "{e}"
        );
        assert_eq!(r.list().len(), 3, "an ambiguous stop stopped one");
        let e = r.stop(RecordingRef::Id(7)).unwrap_err();
        assert!(e.contains("no recording 7") && e.contains("b.jsonl"), "{e}");
        let e = r
            .stop(RecordingRef::Path(&dir.path().join("c.jsonl")))
            .unwrap_err();
        assert!(e.contains("no recording writes"), "{e}");

        let st = r.stop(RecordingRef::Id(1)).unwrap();
        assert_eq!((st.id, st.events, st.path.clone()), (Some(1), 2, a.clone()));
        sink.event(&event(5, 0));
        // By its file, through a `..`.
        let via = dir.path().join("sub");
        std::fs::create_dir(&via).unwrap();
        let st = r
            .stop(RecordingRef::Path(&via.join("../startup.jsonl")))
            .unwrap();
        assert_eq!((st.id, st.startup, st.events), (Some(0), true, 4));
        sink.event(&event(6, 0));
        // One left: no id needed.
        let st = r.stop(RecordingRef::Only).unwrap();
        assert_eq!((st.id, st.events), (Some(2), 3));
        sink.event(&event(7, 0));
        assert!(r
            .stop(RecordingRef::Only)
            .unwrap_err()
            .contains("no recording is running"));

        assert_eq!(ids_of(&s), [2, 3, 4, 5]);
        assert_eq!(ids_of(&a), [3, 4]);
        assert_eq!(ids_of(&b), [4, 5, 6]);
        // Ids are not reused.
        assert_eq!(r.start(&a, Rotation::NEVER).unwrap().id, Some(3));

        let bad = r.start(&dir.path().join("no/such/dir/c.jsonl"), Rotation::NEVER);
        let bad = bad.unwrap_err();
        assert!(
            bad.contains("no/such/dir") && !bad.contains("PINWATCH_RECORD"),
            "{bad}"
        );
    }

    fn ids_of(path: &Path) -> Vec<u64> {
        read_recording(path)
            .unwrap()
            .events
            .iter()
            .map(|e| e.id)
            .collect()
    }

    /// Two writers on one file would interleave their lines and rotate each other's files: a
    /// second recording of a file that one writes already is refused, however it is named —
    /// the same path, through `..`, a symlinked directory, a symlink or hard link to the file —
    /// and so is one of its rotated names (or the other way round). Another file in the same
    /// directory, or the same name elsewhere, is fine.
    #[test]
    fn a_second_recording_of_the_same_file_or_its_rotated_names_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("d");
        std::fs::create_dir(&d).unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        let rec = d.join("rec.jsonl");
        let r = Recorder::default();
        r.start(&rec, Rotation::NEVER).unwrap();
        std::os::unix::fs::symlink(&d, dir.path().join("linked")).unwrap();
        std::os::unix::fs::symlink(&rec, d.join("to-rec.jsonl")).unwrap();
        std::fs::hard_link(&rec, d.join("hard.jsonl")).unwrap();
        for same in [
            rec.clone(),
            d.join("sub/../rec.jsonl"),
            dir.path().join("linked/rec.jsonl"),
            d.join("to-rec.jsonl"),
            d.join("hard.jsonl"),
            d.join("rec.1.jsonl"),
            d.join("rec.12.jsonl"),
            dir.path().join("linked/rec.3.jsonl"),
            d.join(".rec.jsonl.next"),
        ] {
            let e = r.start(&same, Rotation::NEVER).unwrap_err();
            assert!(
                e.contains("recording 1 writes")
                    && e.contains(&rec.display().to_string())
                    && e.contains("record stop 1"),
                "{}: {e}",
                same.display()
            );
        }
        assert!(
            !d.join("rec.1.jsonl").exists(),
            "a refused start made a file"
        );
        assert_eq!(r.list().len(), 1);
        // The other way round: a recording of a rotated name refuses the base name.
        let other = d.join("other.2.jsonl");
        assert_eq!(r.start(&other, Rotation::NEVER).unwrap().id, Some(2));
        let e = r
            .start(&d.join("other.jsonl"), Rotation::NEVER)
            .unwrap_err();
        assert!(e.contains("recording 2 writes"), "{e}");
        // Unrelated names are fine: `rec.1.1.jsonl` is no rotated name of `rec.jsonl`.
        for fine in [
            d.join("rec2.jsonl"),
            d.join("sub/rec.jsonl"),
            d.join("rec.jsonl.1"),
        ] {
            r.start(&fine, Rotation::NEVER)
                .unwrap_or_else(|e| panic!("{}: {e}", fine.display()));
        }
        // Once stopped, the file may be recorded again; a recording is stopped by any name
        // of its file too, a hard link's included, but not by a rotated name.
        r.stop(RecordingRef::Id(1)).unwrap();
        r.start(&d.join("hard.jsonl"), Rotation::NEVER).unwrap();
        let e = r
            .stop(RecordingRef::Path(&d.join("rec.1.jsonl")))
            .unwrap_err();
        assert!(e.contains("no recording writes"), "{e}");
        let st = r.stop(RecordingRef::Path(&rec)).unwrap();
        assert_eq!(st.path, d.join("hard.jsonl"));
    }

    /// At most [`MAX_RECORDINGS`] run, the start-up one counted; the next start says the bound
    /// and how to stop one, and works again once one stops.
    #[test]
    fn recordings_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let r = Recorder::default();
        r.install(RecordSink::open(&dir.path().join("startup.jsonl")).unwrap());
        for k in 1..MAX_RECORDINGS {
            r.start(&dir.path().join(format!("r{k}.jsonl")), Rotation::NEVER)
                .unwrap();
        }
        let e = r
            .start(&dir.path().join("one-more.jsonl"), Rotation::NEVER)
            .unwrap_err();
        assert!(
            e.contains(&format!("{MAX_RECORDINGS} recordings are running"))
                && e.contains("record stop ID"),
            "{e}"
        );
        assert!(!dir.path().join("one-more.jsonl").exists());
        r.stop(RecordingRef::Id(0)).unwrap();
        let st = r
            .start(&dir.path().join("one-more.jsonl"), Rotation::NEVER)
            .unwrap();
        assert_eq!(st.id, Some(MAX_RECORDINGS as u64));
    }

    /// Recordings started and stopped while the export thread delivers events as fast as it
    /// can: every file holds an unbroken run of events (none skipped, none twice), as many as
    /// its stop said it wrote.
    #[test]
    fn starting_and_stopping_under_a_stream_of_events_cuts_between_events() {
        let dir = tempfile::tempdir().unwrap();
        let r = Recorder::default();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sender = std::thread::spawn({
            let (mut sink, stop) = (r.sink(), Arc::clone(&stop));
            move || {
                let mut id = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    id += 1;
                    sink.event(&event(id, 0));
                }
            }
        });
        // Until recording `id` has at least `n` events (bounded).
        let wait_events = |id: u64, n: u64| {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !r.list().iter().any(|s| s.id == Some(id) && s.events >= n) {
                assert!(Instant::now() < deadline, "recording {id} got no events");
                std::thread::yield_now();
            }
        };
        let mut stopped = Vec::new();
        let mut running = std::collections::VecDeque::new();
        for k in 0..24 {
            let path = dir.path().join(format!("r{k}.jsonl"));
            let st = r.start(&path, Rotation::NEVER).unwrap();
            let id = st.id.unwrap();
            running.push_back(id);
            wait_events(id, 3);
            // Up to three at once, stopped oldest or newest first in turn.
            if running.len() == 3 {
                let id = if k % 2 == 0 {
                    running.pop_front()
                } else {
                    running.pop_back()
                };
                stopped.push(r.stop(RecordingRef::Id(id.unwrap())).unwrap());
            }
        }
        for id in running {
            stopped.push(r.stop(RecordingRef::Id(id)).unwrap());
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        sender.join().unwrap();
        assert_eq!(stopped.len(), 24);
        for st in stopped {
            let ids = ids(&st.path);
            assert_eq!(ids.len() as u64, st.events, "{}", st.path.display());
            assert!(
                ids.windows(2).all(|w| w[1] == w[0] + 1),
                "{}: a gap or a repeat in {ids:?}",
                st.path.display()
            );
        }
    }

    /// A write that does not return (a frozen or hung file system) holds the recordings' lock
    /// on the export thread: `status` and `record list` waited for it, and timed out. They
    /// answer now, with each recording as of its last event.
    #[test]
    fn the_list_answers_while_a_write_holds_the_recordings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.jsonl");
        let r = Recorder::default();
        r.start(&path, Rotation::NEVER).unwrap();
        let mut sink = r.sink();
        sink.event(&event(1, 0));
        sink.event(&event(2, 0));
        // As the export thread holds it while its write waits.
        let writing = r.lock();
        let (tx, rx) = std::sync::mpsc::channel();
        let lister = r.clone();
        std::thread::spawn(move || {
            let _ = tx.send(lister.list());
        });
        let list = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("`record list` waited for the write");
        assert_eq!(list.len(), 1, "{list:?}");
        assert_eq!((list[0].events, list[0].path.clone()), (2, path.clone()));
        drop(writing);
        r.stop(RecordingRef::Only).unwrap();
        assert!(r.list().is_empty());
    }

    /// A recording deleted by hand, or moved away as a log rotator does, went on into the
    /// unlinked (or moved) file: every later event was lost, with no error and nothing said.
    #[test]
    fn a_recording_deleted_or_moved_away_goes_on_under_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.jsonl");
        let mut sink = RecordSink::open(&path).unwrap();
        sink.event(&event(1, 0));
        std::fs::remove_file(&path).unwrap();
        sink.event(&event(2, 0));
        let moved = dir.path().join("rec.jsonl.old");
        std::fs::rename(&path, &moved).unwrap();
        sink.event(&event(3, 0));
        sink.event(&event(4, 0));
        let st = sink.status();
        assert_eq!((st.events, st.write_errors), (4, 0), "{st:?}");
        drop(sink);
        assert_eq!(ids(&moved), vec![2]);
        assert_eq!(ids(&path), vec![3, 4]);
        // A relative name is made absolute at the open: a `chdir` later would make it name
        // another file, taken for this one moved away.
        let cwd = std::env::current_dir().unwrap();
        let up = "../".repeat(cwd.components().count() - 1);
        let relative = PathBuf::from(up).join(path.strip_prefix("/").unwrap());
        let sink = RecordSink::open(&relative).unwrap();
        assert!(sink.status().path.is_absolute(), "{:?}", sink.status().path);
    }

    /// A recording truncated in place (logrotate's `copytruncate`) is counted from its new size:
    /// it rotated that much early.
    #[test]
    fn a_recording_truncated_in_place_counts_its_size_from_there() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.jsonl");
        let line = |id| {
            let mut sink = RecordSink::open(&dir.path().join("probe.jsonl")).unwrap();
            sink.event(&event(id, 0));
            drop(sink);
            let text = std::fs::read_to_string(dir.path().join("probe.jsonl")).unwrap();
            std::fs::remove_file(dir.path().join("probe.jsonl")).unwrap();
            text.len() as u64
        };
        let one = line(1);
        // Room for three lines: the fourth would rotate.
        let mut sink = RecordSink::open_rotating(
            &path,
            Rotation {
                max_size: Some(3 * one + one / 2),
                max_age: None,
                keep: 2,
            },
        )
        .unwrap();
        sink.event(&event(1, 0));
        sink.event(&event(2, 0));
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(0)
            .unwrap();
        sink.event(&event(3, 0));
        sink.event(&event(4, 0));
        let st = sink.status();
        assert_eq!((st.events, st.rotations), (4, 0), "{st:?}");
        assert_eq!(st.current_size, std::fs::metadata(&path).unwrap().len());
        drop(sink);
        assert_eq!(ids(&path), vec![3, 4]);
    }

    /// Following a symlink at the end of a recording's path, as the kernel's
    /// `fs.protected_symlinks` would: never one another user made in a sticky directory anyone
    /// may write to, unless that user owns the directory.
    #[test]
    fn a_symlink_is_followed_unless_another_user_planted_it_in_a_shared_directory() {
        let (me, other, owner) = (1000, 2000, 0);
        let shared = 0o41777;
        assert!(!may_follow(other, owner, shared, me));
        assert!(may_follow(me, owner, shared, me));
        assert!(may_follow(owner, owner, shared, me));
        // Not sticky, or not writable by anyone: the kernel follows, and so does pinwatch.
        assert!(may_follow(other, owner, 0o40777, me));
        assert!(may_follow(other, owner, 0o41755, me));
        assert!(may_follow(other, owner, 0o40755, me));
    }

    /// A directory on the way that is not there fails the walk (the open would fail too): had
    /// it passed, a link another user made there between the walk and the open would have been
    /// followed unchecked. The last name not being there is a recording to start.
    #[test]
    fn the_walk_fails_where_a_directory_on_the_way_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        assert!(planted_symlinks(&dir.path().join("rec.jsonl")).is_ok());
        let e = planted_symlinks(&dir.path().join("missing/rec.jsonl")).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        let e = planted_symlinks(&dir.path().join("missing/..")).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        // Through a link of the service's own to a directory not there.
        std::os::unix::fs::symlink(dir.path().join("gone"), dir.path().join("to-gone")).unwrap();
        assert!(planted_symlinks(&dir.path().join("to-gone")).is_ok());
        let e = planted_symlinks(&dir.path().join("to-gone/rec.jsonl")).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        // The error names the directory that is missing, which the path given does not.
        let gone = format!("{}: ", dir.path().join("gone").display());
        assert!(e.to_string().starts_with(&gone), "{e}");
        // A descriptor's link in /proc is followed to its file, whatever its text says: here
        // the file is deleted and its directory gone ("…/d/r.jsonl (deleted)").
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let file = dir.path().join("d/r.jsonl");
        let held = File::create(&file).unwrap();
        std::fs::remove_file(&file).unwrap();
        std::fs::remove_dir(dir.path().join("d")).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&held);
        for by in [format!("/proc/self/fd/{fd}"), format!("/dev/fd/{fd}")] {
            assert!(planted_symlinks(Path::new(&by)).is_ok(), "{by}");
        }
        let up = planted_symlinks(Path::new(&format!("/proc/self/fd/{fd}/../x")));
        assert!(
            up.is_err_and(|e| e.to_string().contains("past a link in /proc")),
            "up from a descriptor's file"
        );
        // A loop of links is said as one, not as a missing directory.
        std::os::unix::fs::symlink("b", dir.path().join("a")).unwrap();
        std::os::unix::fs::symlink("a", dir.path().join("b")).unwrap();
        let r = Recorder::default();
        let e = r.start(&dir.path().join("a"), Rotation::NEVER).unwrap_err();
        assert!(e.contains("a loop of links"), "{e}");
        assert!(!e.contains("directory exists"), "{e}");
    }

    /// A recording to a symlink another user planted in a directory like `/tmp` (the kernel's
    /// protection off, as in many containers) appended pinwatch's lines to whatever it pointed
    /// at, a root-owned private file included; a dangling one made its target anywhere.
    #[test]
    fn a_recording_does_not_write_through_a_symlink_another_user_planted() {
        use std::os::unix::fs::{lchown, symlink, PermissionsExt};
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        assert_eq!(
            me, 0,
            "this test gives a symlink to another user (lchown), which needs root: run it as \
             root (CI does)"
        );
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"private\n").unwrap();
        let planted = tmp.join("rec.jsonl");
        symlink(&victim, &planted).unwrap();
        lchown(&planted, Some(65534), None).unwrap();
        let Err(e) = RecordSink::open(&planted) else {
            panic!("the planted symlink was followed");
        };
        // Reached through a link in /proc: the same.
        let via_proc = Path::new("/proc/self/root").join(planted.strip_prefix("/").unwrap());
        let e2 = RecordSink::open(&via_proc).err().map(|e| e.to_string());
        assert!(
            e2.as_ref()
                .is_some_and(|e| e.contains("symlink that user 65534 made")),
            "{e2:?}"
        );
        let e = e.to_string();
        assert!(e.contains("symlink that user 65534 made"), "{e}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"private\n");
        // Dangling: its target is not made.
        let nowhere = dir.path().join("made");
        let dangling = tmp.join("other.jsonl");
        symlink(&nowhere, &dangling).unwrap();
        lchown(&dangling, Some(65534), None).unwrap();
        assert!(RecordSink::open(&dangling).is_err());
        assert!(!nowhere.exists());
        // A planted directory on the way, and a planted link further down a chain of the
        // service's own: refused as well.
        let secret = dir.path().join("secret");
        std::fs::create_dir(&secret).unwrap();
        let via = tmp.join("app");
        symlink(&secret, &via).unwrap();
        lchown(&via, Some(65534), None).unwrap();
        let e = RecordSink::open(&via.join("rec.jsonl"))
            .err()
            .map(|e| e.to_string());
        assert!(
            e.as_ref().is_some_and(|e| e.contains("app is a symlink")),
            "{e:?}"
        );
        assert!(!secret.join("rec.jsonl").exists());
        let own = tmp.join("own.jsonl");
        symlink(tmp.join("next.jsonl"), &own).unwrap();
        symlink(&victim, tmp.join("next.jsonl")).unwrap();
        lchown(tmp.join("next.jsonl"), Some(65534), None).unwrap();
        let e = RecordSink::open(&own).err().map(|e| e.to_string());
        assert!(
            e.as_ref()
                .is_some_and(|e| e.contains("next.jsonl is a symlink")),
            "{e:?}"
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"private\n");
        // The same symlink made by the service's own user is followed.
        lchown(&planted, Some(me), None).unwrap();
        let mut sink = RecordSink::open(&planted).unwrap();
        sink.event(&event(1, 0));
        drop(sink);
        let written = std::fs::read_to_string(&victim).unwrap();
        assert!(written.starts_with("private\n{"), "{written}");
    }

    /// A file another user made in a sticky directory anyone may write to (`/tmp`) is not
    /// appended to (they could read every line and forge lines): the kernel's
    /// `fs.protected_regular` rule, here whatever the sysctl says. The directory's owner's file,
    /// the service's own, and such a file reached through the service's own symlink are
    /// judged by where the file is.
    #[test]
    fn a_recording_does_not_append_to_a_file_another_user_made_in_a_shared_directory() {
        use std::os::unix::fs::{chown, symlink, PermissionsExt};
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        assert_eq!(
            me, 0,
            "this test gives a file to another user (chown), which needs root: run it as root \
             (CI does)"
        );
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let theirs = tmp.join("incident.jsonl");
        std::fs::write(&theirs, b"").unwrap();
        chown(&theirs, Some(65534), None).unwrap();
        let e = RecordSink::open(&theirs).err().map(|e| e.to_string());
        assert!(
            e.as_ref()
                .is_some_and(|e| e.contains("file that user 65534 made")
                    && e.contains("fs.protected_regular")),
            "{e:?}"
        );
        // Through a symlink of the service's own elsewhere: the file's directory decides.
        let link = dir.path().join("link.jsonl");
        symlink(&theirs, &link).unwrap();
        assert!(RecordSink::open(&link).is_err());
        assert_eq!(std::fs::read(&theirs).unwrap(), b"");
        // The same file in a directory anyone may write to but not sticky: written (as the
        // kernel would; anyone may replace it there anyway).
        let plain = dir.path().join("plain");
        std::fs::create_dir(&plain).unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o777)).unwrap();
        let elsewhere = plain.join("incident.jsonl");
        std::fs::write(&elsewhere, b"").unwrap();
        chown(&elsewhere, Some(65534), None).unwrap();
        assert!(RecordSink::open(&elsewhere).is_ok());
        // A file of the service's own elsewhere, hard-linked into the shared directory (where
        // fs.protected_hardlinks is off, anyone may): refused.
        let config = dir.path().join("config.toml");
        std::fs::write(&config, b"token=secret\n").unwrap();
        std::fs::hard_link(&config, tmp.join("hl.jsonl")).unwrap();
        let e = RecordSink::open(&tmp.join("hl.jsonl"))
            .err()
            .map(|e| e.to_string());
        assert!(
            e.as_ref()
                .is_some_and(|e| e.contains("2 names (hard links)")),
            "{e:?}"
        );
        assert_eq!(std::fs::read(&config).unwrap(), b"token=secret\n");
        // The directory a file is judged by is the one it was opened in: renamed away (or
        // swapped, RENAME_EXCHANGE) into a plain directory after the open, it is still the
        // shared one.
        let opened = crate::files::open_unplanted(&theirs, libc::O_WRONLY, 0).unwrap();
        std::fs::rename(&theirs, plain.join("moved.jsonl")).unwrap();
        assert_eq!(
            opened.dir.as_ref().map(|d| d.0.as_path()),
            Some(tmp.as_path())
        );
        let (meta, (d, dm)) = (opened.file.metadata().unwrap(), opened.dir.unwrap());
        assert!(others_file_in_shared_dir(&meta, &d, &dm).is_err());
        std::fs::rename(plain.join("moved.jsonl"), &theirs).unwrap();
        // The directory owner's file, and the service's own, in the sticky one: written.
        chown(&tmp, Some(65534), None).unwrap();
        assert!(RecordSink::open(&theirs).is_ok());
        chown(&tmp, Some(0), None).unwrap();
        chown(&theirs, Some(me), None).unwrap();
        let mut sink = RecordSink::open(&theirs).unwrap();
        sink.event(&event(1, 0));
        drop(sink);
        assert!(!std::fs::read(&theirs).unwrap().is_empty());
    }

    /// A regular file of `/proc` or `/sys` is the kernel's control, never a recording:
    /// `/proc/self/comm` would have renamed the process to the first bytes of each line.
    #[test]
    fn a_recording_is_never_a_file_of_the_kernel() {
        let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
        for path in [
            "/proc/self/comm",
            "/proc/thread-self/comm",
            "/sys/kernel/uevent_helper",
        ] {
            if !Path::new(path).exists() {
                continue;
            }
            let e = RecordSink::open(Path::new(path))
                .err()
                .map(|e| e.to_string());
            assert!(
                e.as_ref()
                    .is_some_and(|e| e.contains("a file of the kernel's")),
                "{path}: {e:?}"
            );
        }
        assert_eq!(std::fs::read_to_string("/proc/self/comm").unwrap(), comm);
    }

    /// `ctl record start` to a FIFO nobody reads, or to a device (`/dev/null`), is refused at
    /// once: a recording is a regular file. Opening a FIFO would block holding the recorder's
    /// lock (the export thread stopped, `status` and `record stop` hung), and a device would be
    /// renamed away at the size limit and replaced by a regular file.
    #[test]
    fn a_recording_is_a_regular_file_and_opening_it_never_waits() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let r = Recorder::default();
        let (tx, rx) = std::sync::mpsc::channel();
        let (r2, f2) = (r.clone(), fifo.clone());
        std::thread::spawn(move || {
            let _ = tx.send(r2.start(&f2, Rotation::NEVER));
        });
        let started = match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(started) => started,
            Err(_) => {
                // Let the blocked open go on, then fail.
                let _ = File::open(&fifo);
                panic!("record start to a FIFO nobody reads blocked");
            }
        };
        let e = started.unwrap_err();
        assert!(
            e.contains("fifo") && e.contains("a FIFO that nobody reads"),
            "{e}"
        );
        assert!(!e.contains("directory exists"), "{e}");
        assert!(r.list().is_empty());
        // A FIFO someone reads: open would work, but it is no file to rotate.
        let reader = std::thread::spawn({
            let fifo = fifo.clone();
            move || std::fs::read(&fifo)
        });
        let e = loop {
            match RecordSink::open(&fifo) {
                Err(Error::Record { source, .. })
                    if source.to_string().contains("nobody reads") =>
                {
                    std::thread::sleep(Duration::from_millis(10)); // the reader is not there yet
                }
                other => break other.unwrap_err().to_string(),
            }
        };
        assert!(
            e.contains("it is a FIFO:") && e.contains("regular file"),
            "{e}"
        );
        let _ = reader.join();
        // A directory: said so, not "Is a directory" with a hint about its directory.
        let e = r.start(dir.path(), Rotation::NEVER).unwrap_err();
        assert!(
            e.contains("it is a directory: a recording must be a regular file"),
            "{e}"
        );
        let e = RecordSink::open_rotating(
            Path::new("/dev/null"),
            Rotation {
                max_size: Some(1),
                max_age: None,
                keep: 1,
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("a device"), "{e}");
        let e = r
            .start(Path::new("/dev/null"), Rotation::NEVER)
            .unwrap_err();
        assert!(
            e.contains("regular file") && !e.contains("directory exists"),
            "{e}"
        );
        let e = RecordSink::open(dir.path()).unwrap_err().to_string();
        assert!(e.contains(&dir.path().display().to_string()), "{e}");
        // A regular file still works, and so does a second start after a refused one.
        r.start(&dir.path().join("rec.jsonl"), Rotation::NEVER)
            .unwrap();
        assert_eq!(r.list().len(), 1);
    }

    /// `keep` as large as a `usize` goes (`ctl record start --keep 18446744073709551615`): a
    /// rotation costs what is on disk, not `keep - 1` renames (which would spin the export
    /// thread for good with the recorder's lock held), and gaps and files past `keep` stay as
    /// they were.
    #[test]
    fn a_huge_keep_rotates_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.jsonl");
        std::fs::write(rotated_path(&path, 3), "three\n").unwrap();
        // Another recording named like a rotated file, far past the rotated ones: left where
        // it is (rotations renamed it on, one number each: helper-107), and not read.
        let other = rotated_path(&path, 20_261_201);
        std::fs::write(&other, "theirs\n").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        std::thread::spawn(move || {
            let mut sink = RecordSink::open_rotating(
                &p,
                Rotation {
                    max_size: Some(1),
                    max_age: None,
                    keep: usize::MAX,
                },
            )
            .unwrap();
            for id in 1..=4 {
                sink.event(&event(id, 0));
            }
            let _ = tx.send(sink.status());
        });
        let st = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("rotating with a huge keep did not end");
        assert_eq!((st.events, st.rotations, st.rotation_errors), (4, 3, 0));
        // 3 was moved to 4 at the first rotation, then to 5, 6: one line each.
        assert_eq!(
            std::fs::read_to_string(rotated_path(&path, 6)).unwrap(),
            "three\n"
        );
        let rec = read_recording(&path).unwrap();
        let got: Vec<u64> = rec.events.iter().map(|e| e.id).collect();
        assert_eq!((got, rec.damaged_lines), (vec![1, 2, 3, 4], 1));
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "theirs\n");
        // With keep 2, file 3 (past keep) is left alone and 2 is replaced by 1.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.jsonl");
        for k in [2, 3] {
            std::fs::write(rotated_path(&path, k), format!("{k}\n")).unwrap();
        }
        std::fs::write(rotated_path(&path, 1), "1\n").unwrap();
        let mut sink = RecordSink::open_rotating(
            &path,
            Rotation {
                max_size: Some(1),
                max_age: None,
                keep: 2,
            },
        )
        .unwrap();
        sink.event(&event(1, 0));
        sink.event(&event(2, 0));
        assert_eq!(sink.status().rotations, 1);
        assert_eq!(
            std::fs::read_to_string(rotated_path(&path, 2)).unwrap(),
            "1\n"
        );
        assert_eq!(
            std::fs::read_to_string(rotated_path(&path, 3)).unwrap(),
            "3\n"
        );
    }

    fn ids(path: &Path) -> Vec<u64> {
        let rec = read_recording(path).unwrap();
        assert_eq!(rec.damaged_lines, 0, "{:?}", rec.warnings);
        rec.events.iter().map(|e| e.id).collect()
    }

    /// Set in the child process that runs one test alone (see [`in_own_process`]).
    const CHILD: &str = "PINWATCH_TEST_OWN_PROCESS";

    /// Runs test `name` of this module alone in a child process of this test binary, for a test
    /// that changes the whole process (its file descriptor table); fails with its output if the
    /// test failed or did not run.
    fn in_own_process(name: &str) {
        let module = module_path!().split_once("::").unwrap().1;
        let test = format!("{module}::{name}");
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([test.as_str(), "--exact", "--test-threads=1", "--nocapture"])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{test} failed in its own process ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The process's file descriptor table, full: every open fails with EMFILE until this is
    /// dropped.
    struct FdTableFull {
        fds: Vec<File>,
        limit: libc::rlimit,
    }

    impl FdTableFull {
        fn new() -> FdTableFull {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: getrlimit only writes the limit into `limit`, a valid `rlimit`.
            assert_eq!(
                unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
                0
            );
            // A low soft limit, so that filling the table takes a few hundred descriptors.
            let low = libc::rlimit {
                rlim_cur: limit.rlim_cur.min(256),
                rlim_max: limit.rlim_max,
            };
            // SAFETY: setrlimit only reads `low`, a valid `rlimit` within the hard limit.
            assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);
            let null = File::open("/dev/null").unwrap();
            let mut fds = Vec::new();
            let err = loop {
                match null.try_clone() {
                    Ok(f) => fds.push(f),
                    Err(e) => break e,
                }
                assert!(fds.len() <= 256, "the table does not fill");
            };
            assert_eq!(err.raw_os_error(), Some(libc::EMFILE), "{err}");
            fds.push(null);
            FdTableFull { fds, limit }
        }
    }

    impl Drop for FdTableFull {
        fn drop(&mut self) {
            self.fds.clear();
            // SAFETY: setrlimit only reads `self.limit`, the limit getrlimit gave.
            unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &self.limit) };
        }
    }

    /// With no file descriptor left, a rotation cannot open its new file: every file stays,
    /// the events go on to the current one (each once, in order), and once descriptors are
    /// free again the rotation resumes: the current file is never renamed away before its
    /// successor is open (or every later event would rotate again, deleting the recording).
    #[test]
    fn a_rotation_without_file_descriptors_loses_nothing_and_resumes() {
        if std::env::var_os(CHILD).is_none() {
            return in_own_process("a_rotation_without_file_descriptors_loses_nothing_and_resumes");
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.jsonl");
        // 30 lines a file (ids up to 999 are no longer than this one).
        let line = event(999, 0).to_json_line().len() as u64;
        let mut sink = RecordSink::open_rotating(
            &path,
            Rotation {
                max_size: Some(30 * line),
                max_age: None,
                keep: 3,
            },
        )
        .unwrap();
        let mut id = 0;
        let mut send = |sink: &mut RecordSink, n: u64| {
            for _ in 0..n {
                id += 1;
                sink.event(&event(id, 0));
            }
        };
        send(&mut sink, 35);
        assert_eq!(sink.status().rotations, 1);
        let rotated = std::fs::read(dir.path().join("rec.1.jsonl")).unwrap();

        let full = FdTableFull::new();
        let probe = File::create(dir.path().join("probe")).unwrap_err();
        assert_eq!(probe.raw_os_error(), Some(libc::EMFILE), "{probe}");
        send(&mut sink, 60);
        let st = sink.status();
        assert_eq!(
            (st.events, st.write_errors, st.rotations),
            (95, 0, 1),
            "{st:?}"
        );
        // Tried again now and then, not on every one of the ~35 events it was due.
        assert!(
            (1..20).contains(&st.rotation_errors),
            "{} rotation errors",
            st.rotation_errors
        );
        drop(full);
        assert_eq!(
            std::fs::read(dir.path().join("rec.1.jsonl")).unwrap(),
            rotated
        );
        assert!(!dir.path().join("rec.2.jsonl").exists());

        send(&mut sink, 50);
        let st = sink.status();
        assert_eq!((st.events, st.write_errors), (145, 0), "{st:?}");
        assert!(st.rotations >= 2, "the rotation did not resume: {st:?}");
        assert!(!dir.path().join(".rec.jsonl.next").exists());
        // Every event, once, in order, across the set.
        assert_eq!(ids(&path), (1..=145).collect::<Vec<u64>>());
    }

    /// A 64 KiB tmpfs, mounted for a test and unmounted after.
    /// (The flight recording's dump tests use it too.)
    pub(in crate::export) struct SmallDisk(pub(in crate::export) PathBuf);

    impl SmallDisk {
        pub(in crate::export) fn mount(dir: &Path) -> SmallDisk {
            // SAFETY: geteuid has no preconditions.
            let root = unsafe { libc::geteuid() } == 0;
            assert!(
                root,
                "this test mounts a 64 KiB tmpfs to fill it, which needs root: run it as root \
                 (CI does)"
            );
            let mnt = dir.join("small");
            std::fs::create_dir(&mnt).unwrap();
            let out = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
                .arg(&mnt)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "cannot mount a tmpfs on {}: {}",
                mnt.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            SmallDisk(mnt)
        }
    }

    impl Drop for SmallDisk {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }

    /// What a full disk keeps out of a recording is counted where Prometheus and `ctl status`
    /// read the sinks' drops (`sink="recording"`).
    #[test]
    fn the_events_a_full_disk_keeps_out_are_counted_as_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let disk = SmallDisk::mount(dir.path());
        std::fs::write(disk.0.join("filler"), vec![0u8; 60 * 1024]).unwrap();
        let recorder = Recorder::default();
        recorder.install(
            RecordSink::open_rotating(
                &disk.0.join("rec.jsonl"),
                Rotation {
                    max_size: None,
                    max_age: None,
                    keep: 1,
                },
            )
            .unwrap(),
        );
        let unwritten = recorder.unwritten();
        let mut sink = recorder.sink();
        for id in 1..=50 {
            sink.event(&event(id, 200));
        }
        let st = &recorder.list()[0];
        assert!(st.write_errors > 0, "the disk did not fill: {st:?}");
        assert_eq!(unwritten.load(Ordering::Relaxed), st.write_errors, "{st:?}");
    }

    /// Writing until the disk is full: the rotated files stay, the events that do not fit are
    /// counted, the one line cut short is not joined by the next event, and after space is
    /// freed writing resumes — the set reads back as every event that was written, in order,
    /// and one damaged line.
    #[test]
    fn a_full_disk_loses_only_the_events_that_did_not_fit() {
        let dir = tempfile::tempdir().unwrap();
        let disk = SmallDisk::mount(dir.path());
        // 11 of the 16 pages: 20 KiB left, room for two 8 KiB files and part of a third.
        let filler = disk.0.join("filler");
        std::fs::write(&filler, vec![0u8; 44 * 1024]).unwrap();
        let path = disk.0.join("rec.jsonl");
        let mut sink = RecordSink::open_rotating(
            &path,
            Rotation {
                max_size: Some(8 * 1024),
                max_age: None,
                keep: 3,
            },
        )
        .unwrap();
        let mut accepted = Vec::new();
        let mut id = 0;
        let mut send = |sink: &mut RecordSink| {
            id += 1;
            let before = sink.status().write_errors;
            sink.event(&event(id, 200));
            let ok = sink.status().write_errors == before;
            if ok {
                accepted.push(id);
            }
            ok
        };
        let mut n = 0;
        while send(&mut sink) {
            n += 1;
            assert!(n < 1000, "the disk never filled: {:?}", sink.status());
        }
        let snapshot = |p: &Path| -> Vec<(PathBuf, Vec<u8>)> {
            recording_files(p)
                .unwrap()
                .into_iter()
                .map(|f| {
                    let bytes = std::fs::read(&f).unwrap();
                    (f, bytes)
                })
                .collect()
        };
        let at_fault = snapshot(&path);
        assert!(at_fault.len() >= 2, "{at_fault:?}");
        let st = sink.status();
        assert_eq!(st.write_errors, 1, "{st:?}");
        for _ in 0..20 {
            assert!(!send(&mut sink), "an event fit on a full disk");
        }
        let st = sink.status();
        assert_eq!((st.write_errors, st.rotation_errors), (21, 0), "{st:?}");
        assert_eq!(snapshot(&path), at_fault, "files changed on a full disk");

        std::fs::remove_file(&filler).unwrap();
        for _ in 0..30 {
            assert!(
                send(&mut sink),
                "not written with space free: {:?}",
                sink.status()
            );
        }
        let st = sink.status();
        assert_eq!(st.write_errors, 21, "{st:?}");
        assert!(st.rotations > 2, "{st:?}");
        let rec = read_recording(&path).unwrap();
        assert_eq!(rec.damaged_lines, 1, "{:?}", rec.warnings);
        let ids: Vec<u64> = rec.events.iter().map(|e| e.id).collect();
        let first = ids[0];
        let kept: Vec<u64> = accepted.iter().copied().filter(|&i| i >= first).collect();
        assert_eq!(
            ids, kept,
            "not every event written reads back, once and in order"
        );
        drop(disk);
    }

    /// A file cut mid-line (a crash) is appended to: the first new line starts a line of its
    /// own, so only the cut line is lost.
    #[test]
    fn appending_to_a_file_cut_mid_line_starts_a_new_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.jsonl");
        let second = event(2, 0).to_json_line();
        let cut = format!(
            "{}{}",
            event(1, 0).to_json_line(),
            &second[..second.len() / 2]
        );
        std::fs::write(&path, cut).unwrap();
        let mut sink = RecordSink::open(&path).unwrap();
        sink.event(&event(3, 0));
        sink.event(&event(4, 0));
        let rec = read_recording(&path).unwrap();
        assert_eq!(
            rec.events.iter().map(|e| e.id).collect::<Vec<_>>(),
            [1, 3, 4]
        );
        assert_eq!(rec.damaged_lines, 1);
        assert_eq!((rec.damaged[0].line, rec.damaged[0].cut_off), (2, false));
        // A file that ends with its newline gets none extra.
        let whole = dir.path().join("whole.jsonl");
        std::fs::write(&whole, event(1, 0).to_json_line()).unwrap();
        RecordSink::open(&whole).unwrap().event(&event(2, 0));
        let text = std::fs::read_to_string(&whole).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
    }

    /// The current file deleted by hand: the next event starts a new one, and rotations shift
    /// no rotated file for it (shifting them at every event would delete them one by one).
    #[test]
    fn a_deleted_current_file_is_started_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.jsonl");
        let line = event(10, 0).to_json_line().len() as u64;
        let mut sink = RecordSink::open_rotating(
            &path,
            Rotation {
                max_size: Some(3 * line),
                max_age: None,
                keep: 2,
            },
        )
        .unwrap();
        for id in 1..=4 {
            sink.event(&event(id, 0));
        }
        std::fs::remove_file(&path).unwrap();
        // 4 went with the deleted file; 5 starts a new one; 8 rotates.
        for id in 5..=10 {
            sink.event(&event(id, 0));
        }
        let st = sink.status();
        assert_eq!((st.write_errors, st.rotation_errors), (0, 0), "{st:?}");
        assert_eq!(ids(&path), [1, 2, 3, 5, 6, 7, 8, 9, 10]);
        assert_eq!(st.rotations, 2, "{st:?}");
    }
}
