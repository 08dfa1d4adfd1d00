//! A control directory opened once and checked on its descriptor (like OpenSSH's
//! `StrictModes`): every later look at an entry (`fstatat`) and every removal (`unlinkat`) is
//! relative to that descriptor, so a path swapped after the check cannot redirect them.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// An opened, checked directory of control sockets.
#[derive(Debug)]
pub struct ControlDir {
    path: PathBuf,
    file: File,
    owner: u32,
    /// Its device and inode, as checked.
    id: (u64, u64),
}

/// What a directory entry is, as `lstat` sees it.
struct Entry {
    is_socket: bool,
    uid: u32,
}

impl ControlDir {
    /// Opens `path` without following a symlink there and checks the opened directory: it
    /// must belong to `owner` (any owner if `None`) and nobody else may enter it (mode 0700 or
    /// tighter).
    pub fn open(path: &Path, owner: Option<u32>) -> Result<ControlDir, crate::Error> {
        ControlDir::checked(path, owner).map_err(crate::Error::ControlSocket)
    }

    /// [`open`](Self::open), the reason as text (the control socket's own errors are text).
    pub(crate) fn checked(path: &Path, owner: Option<u32>) -> Result<ControlDir, String> {
        let file = open_nofollow(path)?;
        let m = file
            .metadata()
            .map_err(|e| format!("cannot check {}: {e}", path.display()))?;
        let uid = m.uid();
        if !m.is_dir() {
            return Err(format!("{} is not a directory", path.display()));
        }
        if let Some(want) = owner {
            if uid != want && m.mode() & libc::S_ISVTX != 0 {
                // `/tmp` itself (`PINWATCH_CONTROL=/tmp`, `ctl /tmp/x.sock`): nothing to remove.
                return Err(format!(
                    "{} (uid {uid}, mode {:o}) is a directory anyone may use, not a control \
                     directory: give a directory of uid {want}'s, mode 0700 (as the default \
                     /tmp/pinwatch-{want}), with PINWATCH_CONTROL / --dir",
                    path.display(),
                    m.mode() & 0o7777
                ));
            }
            if uid != want {
                return Err(format!(
                    "{} belongs to uid {uid} (mode {:o}), not to uid {want}: another user may \
                     have made it to catch requests or keep control out; do not use it — remove \
                     it (as root), or use a directory of uid {want}'s with PINWATCH_CONTROL / \
                     --dir",
                    path.display(),
                    m.mode() & 0o7777
                ));
            }
        }
        if m.mode() & 0o077 != 0 {
            return Err(format!(
                "{} (uid {uid}) has mode {:o}: others may enter it and replace its sockets; it \
                 must be 0700 — `chmod 700 {}` as its owner (a starting detector does that to a \
                 directory of its own)",
                path.display(),
                m.mode() & 0o7777,
                crate::text::shell_word(path)
            ));
        }
        Ok(ControlDir {
            path: path.to_owned(),
            file,
            owner: uid,
            id: (m.dev(), m.ino()),
        })
    }

    /// The directory's path, as it was opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The uid that owns it (and so must own its sockets and the services behind them).
    pub fn owner(&self) -> u32 {
        self.owner
    }

    /// The names in the directory. Read through the opened descriptor when `/proc` is there;
    /// a name is only a name: what it is, is asked of the descriptor again ([`Self::entry`]).
    pub(crate) fn names(&self) -> Vec<String> {
        let via_fd = PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()));
        let entries = std::fs::read_dir(&via_fd).or_else(|_| std::fs::read_dir(&self.path));
        let Ok(entries) = entries else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .collect();
        names.sort();
        names
    }

    /// Whether `name` in this directory is a socket of its owner, the only kind spoken to:
    /// `None` if there is no such entry, else `Ok`, or why it is left alone.
    pub(crate) fn socket(&self, name: &str) -> Option<Result<(), String>> {
        let e = self.entry(name)?;
        Some(if !e.is_socket {
            Err("not a socket (left alone)".to_owned())
        } else if e.uid != self.owner {
            Err(format!(
                "a socket of uid {}, not of the directory's owner uid {} (left alone)",
                e.uid, self.owner
            ))
        } else {
            Ok(())
        })
    }

    /// `lstat` of `name` in this directory (a symlink is not followed).
    fn entry(&self, name: &str) -> Option<Entry> {
        let c = CString::new(name).ok()?;
        // SAFETY: stat is plain data; zeroes are a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: the fd is this directory's, open while `self` lives; `c` is a NUL-terminated
        // name and `st` is valid for writing a `stat`.
        let rc = unsafe {
            libc::fstatat(
                self.file.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            return None;
        }
        Some(Entry {
            is_socket: st.st_mode & libc::S_IFMT == libc::S_IFSOCK,
            uid: st.st_uid,
        })
    }

    /// Removes `name` from this directory (not through its path).
    pub(crate) fn unlink(&self, name: &str) -> std::io::Result<()> {
        let c = CString::new(name)?;
        // SAFETY: the fd is this directory's, open while `self` lives; `c` is NUL-terminated.
        let rc = unsafe { libc::unlinkat(self.file.as_raw_fd(), c.as_ptr(), 0) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Sets `name`'s mode in this directory.
    pub(crate) fn chmod(&self, name: &str, mode: u32) -> std::io::Result<()> {
        let c = CString::new(name)?;
        // SAFETY: the fd is this directory's, open while `self` lives; `c` is NUL-terminated.
        let rc =
            unsafe { libc::fchmodat(self.file.as_raw_fd(), c.as_ptr(), mode as libc::mode_t, 0) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// The opened directory's device and inode, as checked: the same for every path that names
    /// it.
    pub(crate) fn id(&self) -> (u64, u64) {
        self.id
    }

    /// Whether `path` still names this opened directory (nobody swapped it since).
    pub(crate) fn is_at_path(&self) -> bool {
        let (Ok(now), Ok(opened)) = (std::fs::symlink_metadata(&self.path), self.file.metadata())
        else {
            return false;
        };
        now.dev() == opened.dev() && now.ino() == opened.ino()
    }

    /// Removes the control socket `name` if it is left over: a socket (not a file, symlink or
    /// anything else), owned by the directory's owner, of a process that is gone (or, with
    /// `ours`, of this very process), that nobody listens on. Returns whether it did.
    pub(crate) fn remove_if_stale(&self, name: &str, ours: bool) -> bool {
        let Some((pid, _)) = parse_socket_name(name) else {
            return false;
        };
        if !matches!(self.socket(name), Some(Ok(()))) {
            return false;
        }
        if !ours && Path::new(&format!("/proc/{pid}")).exists() {
            return false;
        }
        // Nobody answers there: a live listener (a process in another pid namespace, say)
        // keeps its socket. Connected through the descriptor's directory, not the path.
        let via_fd = format!("/proc/self/fd/{}/{name}", self.file.as_raw_fd());
        let path = if Path::new("/proc/self/fd").exists() {
            PathBuf::from(via_fd)
        } else {
            self.path.join(name)
        };
        let refused = matches!(
            std::os::unix::net::UnixStream::connect(&path),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
        );
        refused && self.unlink(name).is_ok()
    }
}

/// `open(path, O_DIRECTORY | O_NOFOLLOW)`.
fn open_nofollow(path: &Path) -> Result<File, String> {
    if path.as_os_str().as_bytes().contains(&0) {
        return Err(format!("{} contains a NUL byte", path.display()));
    }
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) | Some(libc::ENOTDIR) => format!(
                "{} is not a directory (a symlink or a file): not used; remove it, or set \
                 PINWATCH_CONTROL to a directory of yours",
                path.display()
            ),
            Some(libc::EACCES) => match std::fs::symlink_metadata(path) {
                // Who it belongs to may be the one this was meant for: a directory another
                // user made first, under this user's default name, to keep control out.
                Ok(m) => format!(
                    "{}: permission denied: it belongs to uid {} (mode {:o}); run as that user \
                     or as root — or, if uid {} should not own it, remove it as root: another \
                     user may have made it to keep control out",
                    path.display(),
                    m.uid(),
                    m.mode() & 0o7777,
                    m.uid()
                ),
                Err(_) => format!(
                    "{}: permission denied: it belongs to another user; run as that user or as \
                     root",
                    path.display()
                ),
            },
            _ => format!("cannot open {}: {e}", path.display()),
        })
}

/// `<pid>.sock` → `(pid, "<pid>")`; `<pid>.<n>.sock` → `(pid, "<pid>.<n>")`.
pub(crate) fn parse_socket_name(file: &str) -> Option<(u32, String)> {
    let name = file.strip_suffix(".sock")?;
    let (pid, n) = match name.split_once('.') {
        Some((pid, n)) => (pid, Some(n)),
        None => (name, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid) || n.is_some_and(|n| !digits(n)) {
        return None;
    }
    Some((pid.parse().ok()?, name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory others may enter is refused with the `chmod` to run, its path one word for
    /// the shell (helper-89: `chmod 700 /tmp/open dir` changed two other paths).
    #[test]
    fn an_open_directory_is_refused_with_a_chmod_to_paste() {
        use std::os::unix::fs::PermissionsExt;
        let top = tempfile::tempdir().unwrap();
        let dir = top.path().join("open dir");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let Err(e) = ControlDir::checked(&dir, None) else {
            panic!("a directory of mode 755 was taken");
        };
        let advice = e.split('`').nth(1).unwrap();
        let words = shlex::split(advice).unwrap();
        assert_eq!(words, ["chmod", "700", &dir.display().to_string()], "{e}");
    }

    #[test]
    fn socket_names() {
        assert_eq!(parse_socket_name("123.sock"), Some((123, "123".into())));
        assert_eq!(parse_socket_name("123.2.sock"), Some((123, "123.2".into())));
        for bad in [
            "x.sock",
            "123",
            "123..sock",
            "12a.sock",
            ".sock",
            "1.2.3.sock",
        ] {
            assert_eq!(parse_socket_name(bad), None, "{bad}");
        }
    }

    /// A shared sticky directory (`PINWATCH_CONTROL=/tmp`) is said to be no control directory,
    /// never advised to be removed.
    #[test]
    fn a_shared_directory_is_not_a_control_directory_and_not_to_be_removed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        // SAFETY: geteuid has no preconditions.
        let other = unsafe { libc::geteuid() } + 1;
        let e = ControlDir::checked(dir.path(), Some(other)).err().unwrap();
        assert!(
            e.contains("a directory anyone may use, not a control directory"),
            "{e}"
        );
        assert!(!e.contains("remove it"), "{e}");
    }
}
