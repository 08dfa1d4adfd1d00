//! Files pinwatch writes and reads: written whole or not at all, named as the settings say
//! (`%p`, rotation numbers), in a directory checked before the detector relies on it.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

/// The directory `path` is in: `.` for a bare name.
pub(crate) fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// The directory `path` is in (`.` for a bare name) and its file name; an error for a path that
/// names no file (it ends in `.` or `..`, or is `/`).
pub(crate) fn dir_and_name(path: &Path) -> std::io::Result<(&Path, &std::ffi::OsStr)> {
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the path names no file (it ends in `.` or `..`, or is `/`); give a file's path",
        )
    })?;
    Ok((dir_of(path), name))
}

/// Reads the file at `path` into `buf` with one read (what does not fit is left out: a read that
/// fills `buf` may be cut, which the caller must allow for): an open, one read (again if a
/// signal interrupts it) and a close, nothing allocated (std makes a path this short a C string
/// on the stack). For `/proc`'s small files, which are made whole on the first read and handed
/// out from that (`seq_file`'s single-record files): `read_to_string` would also ask for the
/// size (a `statx`, which `/proc` answers with 0), then read in pieces that double from 32
/// bytes. `None` if the file cannot be opened or read.
pub(crate) fn read_small<'b>(path: &str, buf: &'b mut [u8]) -> Option<&'b [u8]> {
    use std::io::Read;
    let mut file = File::open(path).ok()?;
    let n = loop {
        match file.read(buf) {
            Ok(n) => break n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    };
    Some(&buf[..n])
}

/// Writes a new file at `path` whole, or not at all: `fill` writes into a temporary file in the
/// same directory, which is synced and then takes `path`'s name — with `replace`, by a rename
/// over whatever is there; without it, by a hard link that fails if `path` exists (so a file
/// the user did not mean is never replaced, even one that appears meanwhile). On any failure
/// (a full disk, `fill`'s own error) the temporary file is removed and `path` is as it was.
pub fn write_whole_file(
    path: &Path,
    replace: bool,
    fill: impl FnOnce(&mut File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        // Not even when asked to replace it: a rename cannot put a file over a directory.
        Ok(m) if m.is_dir() => return Err(exists(path)),
        Ok(_) if !replace => return Err(exists(path)),
        _ => {}
    }
    let (dir, name) = dir_and_name(path)?;
    let (mut file, tmp) = new_temporary(dir, &name.to_string_lossy())?;
    let done = fill(&mut file)
        .and_then(|()| file.sync_all())
        .and_then(|()| {
            if replace {
                std::fs::rename(&tmp, path)
            } else {
                std::fs::hard_link(&tmp, path).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::AlreadyExists {
                        exists(path)
                    } else {
                        e
                    }
                })
            }
        });
    // After a rename there is nothing left under the temporary name; after a link (or a
    // failure) it goes.
    let _ = std::fs::remove_file(&tmp);
    done
}

/// Attempts at a temporary name before [`write_whole_file`] gives up.
const TEMPORARY_TRIES: usize = 16;

/// A new file `.NAME.PID.RANDOM.tmp` in `dir`, made with `O_EXCL` (a symlink or file already
/// there is never opened or followed). The name is not guessable by another process: one that
/// planted files at the names it could predict (the pid is public) would otherwise make every
/// dump in a shared directory fail (`PINWATCH_DUMP_ON_EXIT=/var/tmp/pins-%p.jsonl` lost).
fn new_temporary(dir: &Path, name: &str) -> std::io::Result<(File, PathBuf)> {
    use std::hash::{BuildHasher, Hasher};
    use std::os::unix::fs::OpenOptionsExt;
    let mut last = None;
    for attempt in 0..TEMPORARY_TRIES {
        // RandomState's keys are drawn from the OS's randomness (once per thread, then stepped).
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_usize(attempt);
        let tmp = dir.join(format!(
            ".{name}.{}.{:016x}.tmp",
            std::process::id(),
            h.finish()
        ));
        // Its owner's only: a dump or a profile says what the service does.
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
        {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(tmp),
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        format!(
            "{TEMPORARY_TRIES} temporary names in {} were taken (the last {}); something is \
             making files there: give a directory only you can write to",
            dir.display(),
            last.unwrap_or_default().display()
        ),
    ))
}

fn exists(path: &Path) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::AlreadyExists, taken(path))
}

/// Why `path`, which exists, is not written: a directory cannot be replaced by a file, even
/// when asked to (helper-83: `--force` was suggested, then failed "Is a directory").
pub fn taken(path: &Path) -> String {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        return format!(
            "{} is a directory; give the path of a file in it",
            crate::text::Escaped(path.display())
        );
    }
    format!(
        "{} exists; give another file, or ask to replace it (`--force`)",
        crate::text::Escaped(path.display())
    )
}

/// `path` with every `%p` replaced by this process's id (`PINWATCH_DUMP_ON_EXIT`).
/// Byte by byte: a path that is not UTF-8 keeps its bytes.
pub(crate) fn with_pid(path: &Path) -> PathBuf {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let mut rest = path.as_os_str().as_bytes();
    let pid = std::process::id().to_string();
    let mut out = Vec::with_capacity(rest.len() + pid.len());
    while let Some(i) = rest.windows(2).position(|w| w == b"%p") {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(pid.as_bytes());
        rest = &rest[i + 2..];
    }
    out.extend_from_slice(rest);
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// `path` for the n-th of a process's files of one name (`n` from 1): `pins-42.jsonl`, then
/// `pins-42.2.jsonl`, `pins-42.3.jsonl`, … (named as [`rotated_path`] names).
pub(crate) fn numbered(path: &Path, n: usize) -> PathBuf {
    if n <= 1 {
        return path.to_owned();
    }
    rotated_path(path, n)
}

/// Whether a dump could be written at `path` when the detector stops: its directory exists
/// and this process may write there, and `path` is not something other than a regular file.
/// The reason when not.
pub(crate) fn check_dump_path(path: &Path) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    let path = with_pid(path);
    let (dir, _) = dir_and_name(&path).map_err(|e| e.to_string())?;
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(format!(
                "is in {}, which is not a directory; give a path in a directory that exists",
                dir.display()
            ))
        }
        Err(e) => {
            return Err(format!(
                "is in {}, which cannot be used ({e}); make it, or give a path in a directory \
                 that exists",
                dir.display()
            ))
        }
    }
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| "has a NUL byte".to_owned())?;
    // SAFETY: `c` is a valid NUL-terminated path; access only reads it.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(format!(
            "is in {}, which this process may not write to ({}); give a directory it may \
             write to",
            dir.display(),
            std::io::Error::last_os_error()
        ));
    }
    if let Ok(m) = std::fs::symlink_metadata(&path) {
        if !m.is_file() {
            return Err(format!(
                "names something other than a regular file: {} is {}, which the dump would \
                 replace; give the path of a file",
                path.display(),
                kind(m.file_type())
            ));
        }
    }
    Ok(())
}

/// What a file that is not a regular file is, for a message: "it is a FIFO".
pub(crate) fn kind(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// The `k`-th rotated file of the recording `path`: `rec.jsonl` → `rec.1.jsonl`, `rec` →
/// `rec.1`. `rec.1.jsonl` is the newest rotated file.
pub fn rotated_path(path: &Path, k: usize) -> std::path::PathBuf {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    // As bytes: a name that is not UTF-8 keeps its bytes.
    let n = path.file_name().map_or(&[][..], |n| n.as_bytes());
    let (stem, ext) = stem_and_extension(n);
    let mut name = stem.to_vec();
    if !name.is_empty() {
        name.push(b'.');
    }
    name.extend_from_slice(k.to_string().as_bytes());
    if let Some(ext) = ext {
        name.push(b'.');
        name.extend_from_slice(ext);
    }
    path.with_file_name(std::ffi::OsString::from_vec(name))
}

/// A file name split at its last dot: `rec.jsonl` → (`rec`, `jsonl`); `rec` and `.rec` have no
/// extension. How [`rotated_path`] numbers a name, and [`rotation_number`] reads it back.
fn stem_and_extension(name: &[u8]) -> (&[u8], Option<&[u8]>) {
    match name.iter().rposition(|&b| b == b'.') {
        Some(dot) if dot > 0 => (&name[..dot], Some(&name[dot + 1..])),
        _ => (name, None),
    }
}

/// The numbers `k` of the rotated files of `path` that exist now (see [`rotated_path`]), in no
/// particular order: one look at the directory, whatever the number of files kept.
pub(crate) fn rotated_numbers(path: &Path) -> std::io::Result<Vec<usize>> {
    let dir = dir_of(path);
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        if let Some(k) = rotation_number(path, &entry?.path()) {
            out.push(k);
        }
    }
    Ok(out)
}

/// How many of `numbers` (rotated files' numbers, sorted up) are the recording's own: a rotation
/// renames each file onto the next number, so gaps are few and short (a crash between two
/// renames leaves one; one there when the recording began is carried along). A file numbered
/// far past the others — more than twice as many as come before it, plus three — is another
/// recording named like a rotated file (`rec.20261201.jsonl`, `rec.$$.jsonl`), and so is every
/// one after it: the reader leaves them out (they were read as part of the recording:
/// helper-105) and the writer leaves them where they are (it renamed them on: helper-107).
pub(crate) fn rotated_run(numbers: &[usize]) -> usize {
    numbers
        .iter()
        .enumerate()
        .take_while(|&(before, &k)| k <= 2 * before + 3)
        .count()
}

/// `Some(k)` when `candidate` is the `k`-th rotated file of `path`.
pub(crate) fn rotation_number(path: &Path, candidate: &Path) -> Option<usize> {
    use std::os::unix::ffi::OsStrExt;
    // As bytes, as `rotated_path` names them.
    let name = candidate.file_name()?.as_bytes();
    let base = path.file_name()?.as_bytes();
    let (stem, ext) = stem_and_extension(base);
    let rest = name.strip_prefix(stem)?.strip_prefix(b".")?;
    let digits = match ext {
        Some(ext) => rest.strip_suffix(ext)?.strip_suffix(b".")?,
        None => rest,
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) || digits[0] == b'0' {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Walks `path` as the kernel resolves it, and refuses the first symlink on the way that
/// another user made in a directory anyone may write to (sticky, as `/tmp`), unless that user
/// owns the directory: the kernel's `fs.protected_symlinks` rule, kept where the sysctl is off.
/// In a parent's name, at the end, or further down a chain of links. Where the last name is not
/// there (yet), the walk ends and the open makes it; any other name not there fails the walk,
/// as it would the open. For a recording's path, and the CLI's outputs (`-o`, `ctl dump`).
pub fn planted_symlinks(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    use std::path::Component;
    enum Step {
        Root,
        Up,
        Name(std::ffi::OsString),
    }
    let steps = |p: &Path| -> Vec<Step> {
        p.components()
            .filter_map(|c| match c {
                Component::RootDir => Some(Step::Root),
                Component::ParentDir => Some(Step::Up),
                Component::Normal(n) => Some(Step::Name(n.to_owned())),
                Component::CurDir | Component::Prefix(_) => None,
            })
            .rev()
            .collect()
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    // The working directory only for a relative path: a service's may have been deleted.
    let mut at = if path.is_absolute() {
        PathBuf::from("/")
    } else {
        std::env::current_dir()?
    };
    // A stack: the next step last.
    let mut todo = steps(path);
    let mut links = 0;
    // Where the walk went on from a link in /proc as from a directory reached (see below).
    let mut proc_links: Vec<PathBuf> = Vec::new();
    while let Some(step) = todo.pop() {
        let name = match step {
            Step::Root => {
                at = PathBuf::from("/");
                continue;
            }
            // Up from where a link in /proc led is up from where its file is, which `at` does
            // not name.
            Step::Up if proc_links.contains(&at) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "{} goes up (`..`) past a link in /proc: give the path without it",
                        path.display()
                    ),
                ))
            }
            Step::Up => {
                at.pop();
                continue;
            }
            Step::Name(n) => n,
        };
        let next = at.join(&name);
        let meta = match std::fs::symlink_metadata(&next) {
            Ok(m) => m,
            // The last name: the open makes it.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && todo.is_empty() => return Ok(()),
            // A directory on the way that is not there: the open would fail the same way,
            // unless someone made it meanwhile, a link of theirs in `/tmp` say, which the
            // open would follow unchecked. Named: behind a link, the path given does not say
            // which (`-o out.html`, a link to a directory since removed).
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("{}: {e}", crate::text::Escaped(next.display())),
                ))
            }
        };
        if !meta.file_type().is_symlink() {
            at = next;
            continue;
        }
        links += 1;
        if links > 40 {
            // As the kernel counts (`ELOOP`), said plainly.
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "more than 40 symlinks on the way to {} (a loop of links?): give a path \
                     that leads to a file",
                    path.display()
                ),
            ));
        }
        let dir = std::fs::metadata(&at)?;
        if !may_follow(meta.uid(), dir.uid(), dir.mode(), me) {
            return Err(planted(&next, meta.uid(), &at));
        }
        // A link in /proc (`/proc/self`, `/proc/self/fd/3`, `/dev/fd/3` through it, `/proc/self/
        // root`): nobody plants those, and the kernel follows a descriptor's to the file it has
        // open, which its text may not name (a file deleted, or in a mount it cannot reach).
        // The walk goes on from it as the kernel will, by its name: what comes after it (a
        // link someone planted in `/proc/self/root/tmp/`) is looked at as anywhere else.
        if on_procfs(&at) {
            at = next;
            proc_links.push(at.clone());
            continue;
        }
        // Read from where the link is.
        todo.extend(steps(&std::fs::read_link(&next)?));
    }
    Ok(())
}

/// The error for a symlink `link` that user `uid` made in `dir`, a directory anyone may write
/// to: not followed.
fn planted(link: &Path, uid: u32, dir: &Path) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!(
            "{} is a symlink that user {uid} made in {}, a directory anyone may write to: \
             pinwatch does not follow it (as the kernel's fs.protected_symlinks would not); use \
             a path in a directory of your own",
            crate::text::Escaped(link.display()),
            crate::text::Escaped(dir.display())
        ),
    )
}

/// Where the last name of a path leads, for [`open_unplanted`].
#[derive(Debug, PartialEq, Eq)]
enum Last {
    /// This name (no symlink there now), to be opened in its directory.
    Name(PathBuf),
    /// This link in `/proc`: a descriptor's, to be opened by its name.
    Descriptor(PathBuf),
}

/// Reads the symlinks at the end of `path` (user `me`'s view) to the name they lead to. Each
/// is judged as the walk judges links ([`may_follow`]): the walk passes a last name that is
/// missing, and another user's link may be made there since.
fn last_target(path: &Path, me: u32) -> std::io::Result<Last> {
    use std::os::unix::fs::MetadataExt;
    let mut target = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&target) {
            Ok(m) if m.file_type().is_symlink() => {
                let dir = dir_of(&target).to_owned();
                let d = std::fs::metadata(&dir)?;
                if !may_follow(m.uid(), d.uid(), d.mode(), me) {
                    return Err(planted(&target, m.uid(), &dir));
                }
                if on_procfs(&dir) {
                    return Ok(Last::Descriptor(target));
                }
                target = dir.join(std::fs::read_link(&target)?);
            }
            _ => break,
        }
    }
    // Still a link after 40: the open says ELOOP.
    Ok(Last::Name(target))
}

/// A file opened by [`open_unplanted`], and the directory it was opened in.
#[derive(Debug)]
#[non_exhaustive]
pub struct Opened {
    /// The file.
    pub file: File,
    /// The directory its last name was looked up in, as opened, and its metadata: where the
    /// file was when it was opened, whatever is renamed afterwards. `None` for a descriptor's
    /// link in `/proc` (`/proc/self/fd/N`, `/dev/stdout`), which the kernel opens as the file
    /// the descriptor has open.
    pub dir: Option<(PathBuf, std::fs::Metadata)>,
}

/// Opens `path` as `open(2)` with `flags` (and `mode`, for a file it makes) would, except that
/// no symlink that another user made in a directory anyone may write to is followed
/// ([`planted_symlinks`]), and that the last name is looked up once, in its directory opened
/// first: `openat(dir, name, flags | O_NOFOLLOW)`. A symlink at the end (the caller's own) is
/// read to its target before; one that appears there after that fails the open (`ELOOP`,
/// said as such) instead of being followed. A name swapped or renamed after the open does not
/// change which directory the file was in.
pub fn open_unplanted(
    path: &Path,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> std::io::Result<Opened> {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    planted_symlinks(path)?;
    // `name/` names a directory, which open(2) refuses to make (the name would lose its slash).
    if path.as_os_str().as_bytes().ends_with(b"/") {
        return Err(std::io::Error::from_raw_os_error(libc::EISDIR));
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let c = |p: &std::ffi::OsStr| {
        std::ffi::CString::new(p.as_encoded_bytes()).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "a NUL byte in the path")
        })
    };
    let target = match last_target(path, me)? {
        Last::Name(target) => target,
        Last::Descriptor(link) => {
            // A descriptor's link: the kernel opens the file it has open, which the link's
            // text may not name.
            let name = c(link.as_os_str())?;
            // SAFETY: a NUL-terminated path; the fd returned is owned by the File.
            let fd =
                unsafe { libc::open(name.as_ptr(), flags | libc::O_CLOEXEC, mode as libc::c_uint) };
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: `fd` was just opened above and nothing else owns it.
            let file = unsafe { File::from_raw_fd(fd) };
            return Ok(Opened { file, dir: None });
        }
    };
    let (dir, name) = dir_and_name(&target)?;
    let dir_name = c(dir.as_os_str())?;
    // SAFETY: a NUL-terminated path; the fd returned is owned by the File.
    let dir_fd = unsafe {
        libc::open(
            dir_name.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dir_fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `dir_fd` was just opened above and nothing else owns it.
    let dir_file = unsafe { File::from_raw_fd(dir_fd) };
    let dir_meta = dir_file.metadata()?;
    let name = c(name)?;
    // SAFETY: `dir_fd` is open (held by `dir_file`) and `name` NUL-terminated; the fd returned
    // is owned by the File.
    let fd = unsafe {
        libc::openat(
            dir_fd,
            name.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ELOOP) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{} became a symlink as it was opened (another user's, in a shared \
                     directory?); not followed: use a path in a directory of your own",
                    crate::text::Escaped(target.display())
                ),
            ));
        }
        return Err(e);
    }
    // SAFETY: `fd` was just opened above and nothing else owns it.
    let file = unsafe { File::from_raw_fd(fd) };
    Ok(Opened {
        file,
        dir: Some((dir.to_owned(), dir_meta)),
    })
}

/// Whether `dir` is on a proc file system.
fn on_procfs(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a NUL-terminated path; `st` is a plain C struct that statfs fills and
    // that is read only when it succeeds.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type == libc::PROC_SUPER_MAGIC
    }
}

/// Whether a symlink owned by `link_uid`, in a directory owned by `dir_uid` with mode
/// `dir_mode`, may be followed by a process of user `me` (or a file of that owner there
/// written to): always, unless the directory is sticky and anyone may write to it, and the
/// link is neither the process's user's nor the directory owner's.
pub(crate) fn may_follow(link_uid: u32, dir_uid: u32, dir_mode: u32, me: u32) -> bool {
    !is_shared(dir_mode) || link_uid == me || link_uid == dir_uid
}

/// Whether a directory of mode `dir_mode` is one anyone may write to, sticky (as `/tmp`).
pub(crate) fn is_shared(dir_mode: u32) -> bool {
    dir_mode & (libc::S_ISVTX | libc::S_IWOTH) == libc::S_ISVTX | libc::S_IWOTH
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The recording's own rotated files are numbered from 1 with short gaps; a number far past
    /// them (a date, a pid) is another recording, and so is every one after it.
    #[test]
    fn a_rotated_run_ends_where_a_number_is_far_past_the_others() {
        assert_eq!(rotated_run(&[]), 0);
        assert_eq!(rotated_run(&[1, 2, 3, 4, 5]), 5);
        // A crash's gap, two of them, one carried from the start.
        assert_eq!(rotated_run(&[1, 2, 4]), 3);
        assert_eq!(rotated_run(&[1, 2, 5]), 3);
        assert_eq!(rotated_run(&[1, 2, 3, 6]), 4);
        assert_eq!(rotated_run(&[3]), 1);
        // Another recording's.
        assert_eq!(rotated_run(&[4]), 0);
        assert_eq!(rotated_run(&[1, 2, 10]), 2);
        assert_eq!(rotated_run(&[1, 2, 3, 12345, 20261201]), 3);
        assert_eq!(rotated_run(&[20261201]), 0);
    }

    /// A link at the end that another user made in a shared directory is not read on, also
    /// where the walk let it pass (made after the walk, the name was missing then): the
    /// recording would go wherever it points. The user's own links are read to their end.
    #[test]
    fn the_last_links_are_judged_as_the_walk_judges_them() {
        use std::os::unix::fs::{lchown, symlink, PermissionsExt};
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        assert_eq!(
            me, 0,
            "this test gives a link to another user: run it as root (CI does)"
        );
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let secret = dir.path().join("secret.conf");
        std::fs::write(&secret, b"token=secret\n").unwrap();
        let race = tmp.join("race.jsonl");
        symlink(&secret, &race).unwrap();
        lchown(&race, Some(65534), None).unwrap();
        let e = last_target(&race, me).unwrap_err().to_string();
        assert!(e.contains("is a symlink that user 65534 made"), "{e}");
        lchown(&race, Some(me), None).unwrap();
        assert_eq!(last_target(&race, me).unwrap(), Last::Name(secret.clone()));
        let own = dir.path().join("own");
        symlink("/proc/self/fd/1", &own).unwrap();
        assert_eq!(
            last_target(&own, me).unwrap(),
            Last::Descriptor("/proc/self/fd/1".into())
        );
        // And a name ending in `/` is a directory's, never made as a file.
        let e = open_unplanted(
            &dir.path().join("x.jsonl/"),
            libc::O_CREAT | libc::O_WRONLY,
            0o600,
        );
        assert_eq!(e.unwrap_err().raw_os_error(), Some(libc::EISDIR));
        assert!(!dir.path().join("x.jsonl").exists());
    }
    use std::io::Write;

    #[test]
    fn a_numbered_name_keeps_its_directory_and_extension() {
        let n = |p: &str, k| numbered(Path::new(p), k);
        assert_eq!(
            n("/var/tmp/pins-42.jsonl", 1),
            Path::new("/var/tmp/pins-42.jsonl")
        );
        assert_eq!(
            n("/var/tmp/pins-42.jsonl", 2),
            Path::new("/var/tmp/pins-42.2.jsonl")
        );
        assert_eq!(
            n("/var/tmp/a.b.jsonl", 3),
            Path::new("/var/tmp/a.b.3.jsonl")
        );
        assert_eq!(n("/var/tmp/pins", 2), Path::new("/var/tmp/pins.2"));
        assert_eq!(n("pins.jsonl", 12), Path::new("pins.12.jsonl"));
        assert_eq!(n("/var/tmp/.pins", 2), Path::new("/var/tmp/.pins.2"));
        // A name that is not UTF-8 keeps its bytes.
        use std::os::unix::ffi::OsStrExt;
        let odd = Path::new(std::ffi::OsStr::from_bytes(b"/t/p\xffs.jsonl"));
        let want = Path::new(std::ffi::OsStr::from_bytes(b"/t/p\xffs.2.jsonl"));
        assert_eq!(numbered(odd, 2), want);
        assert_eq!(
            rotation_number(odd, want),
            Some(2),
            "and is found as rotated"
        );
    }

    #[test]
    fn a_whole_file_never_replaces_one_unasked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dump.jsonl");
        write_whole_file(&path, false, |f| f.write_all(b"one\n")).unwrap();
        let err = write_whole_file(&path, false, |f| f.write_all(b"two\n")).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
        assert!(err.to_string().contains("--force"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\n");
        write_whole_file(&path, true, |f| f.write_all(b"two\n")).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two\n");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "a dump is its owner's only: {mode:o}");
        // A failing fill leaves the file as it was and no temporary file.
        let err = write_whole_file(&path, true, |f| {
            f.write_all(b"half")?;
            Err(std::io::Error::other("the service went away"))
        })
        .unwrap_err();
        assert!(err.to_string().contains("went away"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two\n");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["dump.jsonl"]);
        // A directory is named as one, with or without `--force` (which cannot help), and
        // nothing is left behind.
        for replace in [false, true] {
            let err = write_whole_file(dir.path(), replace, |f| f.write_all(b"x")).unwrap_err();
            let said = err.to_string();
            assert!(
                said.ends_with("is a directory; give the path of a file in it"),
                "{said}"
            );
            assert!(!said.contains("--force"), "{said}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    /// Files planted at the temporary names another process could predict (this pid, the
    /// first counts) neither make the dump fail nor get written through: a symlink there is
    /// left as it was, and so is what it points to.
    #[test]
    fn planted_temporary_names_are_neither_followed_nor_in_the_way() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep\n").unwrap();
        let path = dir.path().join("dump.jsonl");
        let pid = std::process::id();
        for n in 0..256 {
            let planted = dir.path().join(format!(".dump.jsonl.{pid}.{n}.tmp"));
            std::os::unix::fs::symlink(&victim, planted).unwrap();
        }
        write_whole_file(&path, false, |f| f.write_all(b"dump\n")).unwrap();
        write_whole_file(&path, true, |f| f.write_all(b"again\n")).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "again\n");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
        let left = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                let name = e.as_ref().unwrap().file_name();
                name.as_bytes().ends_with(b".tmp")
                    && std::fs::symlink_metadata(e.as_ref().unwrap().path())
                        .unwrap()
                        .is_file()
            })
            .count();
        assert_eq!(left, 0, "a temporary file of ours was left");
    }

    #[test]
    fn dump_paths_are_checked_at_start_up() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(check_dump_path(&dir.path().join("d-%p.jsonl")), Ok(()));
        let err = check_dump_path(Path::new("/nonexistent-dir/d.jsonl")).unwrap_err();
        assert!(err.contains("/nonexistent-dir"), "{err}");
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let err = check_dump_path(&dir.path().join("sub")).unwrap_err();
        assert!(
            err.contains("something other than a regular file") && err.contains("is a directory"),
            "{err}"
        );
        // Each kind named (helper-119: a FIFO was "a directory, a device, a link…").
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(fifo.as_os_str()))
            .unwrap();
        // SAFETY: `c` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = check_dump_path(&fifo).unwrap_err();
        assert!(err.contains("is a FIFO"), "{err}");
        let err = check_dump_path(&dir.path().join("sub/none/d.jsonl")).unwrap_err();
        assert!(
            err.starts_with("is in ") && err.contains("/sub/none, which"),
            "{err}"
        );
        assert_eq!(
            with_pid(Path::new("/x/f-%p.jsonl")),
            PathBuf::from(format!("/x/f-{}.jsonl", std::process::id()))
        );
    }

    #[test]
    fn the_pid_goes_into_a_path_that_is_not_utf8_without_changing_its_bytes() {
        use std::os::unix::ffi::OsStrExt;
        let pid = std::process::id();
        let path = Path::new(std::ffi::OsStr::from_bytes(b"/x/\xff%p/d-%p%%p.jsonl"));
        let want = [
            &b"/x/\xff"[..],
            pid.to_string().as_bytes(),
            b"/d-",
            pid.to_string().as_bytes(),
            b"%",
            pid.to_string().as_bytes(),
            b".jsonl",
        ]
        .concat();
        assert_eq!(with_pid(path).as_os_str().as_bytes(), &want[..]);
        // No `%p`: the path as given; a lone `%` or `p` stays.
        let plain = Path::new(std::ffi::OsStr::from_bytes(b"/x/\xfe%-p"));
        assert_eq!(with_pid(plain), plain);
    }
}
