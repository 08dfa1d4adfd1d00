//! The client side of the control socket, for `pinwatch ctl`: finding services and asking them.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::dir::parse_socket_name;
use super::protocol::{Reply, Request};
use super::ControlDir;
use crate::Error;

/// The longest reply `pinwatch ctl` reads, in bytes; a longer one is an error. The biggest real
/// one, a `status` of a service with every worker pinned under long frames, is far smaller
/// (see docs/ctl.md).
pub const MAX_REPLY: usize = 4 * 1024 * 1024;

/// How long a whole exchange may take — connect, send, the full reply — unless told otherwise.
pub const DEADLINE: Duration = Duration::from_secs(5);

/// A control socket found in a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Endpoint {
    /// The process (0 for a socket named by a path that does not say it).
    pub pid: u32,
    /// How `pinwatch ctl` names it: `<pid>`, or `<pid>.<n>` for another of a process's
    /// detectors running at once (the lowest number free in its directory).
    pub name: String,
    /// The socket.
    pub path: PathBuf,
    /// The uid that owns its directory and the socket: the only one allowed to answer on it.
    pub owner: u32,
    /// Its directory, in [`Dirs::dirs`].
    dir: Option<usize>,
}

/// The control directories to look in, each opened and checked ([`ControlDir::open`]), and why
/// the others were left out.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Dirs {
    /// Checked directories.
    pub dirs: Vec<ControlDir>,
    /// The directories skipped, each as why, naming it (`/tmp/x is not a directory`), for
    /// people; shown after `skipped `.
    pub skipped: Vec<String>,
    /// Every directory looked at, checked or not.
    pub looked: Vec<PathBuf>,
}

fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// Who must own a directory named by the user (`--dir`, `PINWATCH_CONTROL`, a socket's path):
/// we, or for root anyone — root may control any user's service, and then that user must own
/// the directory, the socket and the process answering.
fn named_owner() -> Option<u32> {
    match euid() {
        0 => None,
        me => Some(me),
    }
}

/// Who must own the directory `path` named by the user: the uid its name says for a
/// `/tmp/pinwatch-<uid>`, else [`named_owner`].
fn owner_of_named(path: &Path) -> Option<u32> {
    let says = (path.parent() == Some(Path::new("/tmp")))
        .then(|| path.file_name()?.to_str().and_then(default_dir_uid))
        .flatten();
    says.or_else(named_owner)
}

/// The uid a default directory's name says: `/tmp/pinwatch-<uid>`.
fn default_dir_uid(name: &str) -> Option<u32> {
    let n = name.strip_prefix("pinwatch-")?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

impl Dirs {
    fn add(&mut self, path: PathBuf, owner: Option<u32>, quiet_if_missing: bool) {
        self.looked.push(path.clone());
        if quiet_if_missing && std::fs::symlink_metadata(&path).is_err() {
            return;
        }
        match ControlDir::checked(&path, owner) {
            Ok(d) => self.dirs.push(d),
            Err(e) => self.skipped.push(e.to_string()),
        }
    }

    /// The control sockets in these directories, by pid: entries with a socket's name that are
    /// sockets of the directory's owner; and the others with a socket's name, each as its path
    /// and why it is left alone (`/tmp/x/7.sock: …`), as [`Dirs::skipped`] says them.
    pub fn endpoints(&self) -> (Vec<Endpoint>, Vec<String>) {
        let mut out = Vec::new();
        let mut skipped = Vec::new();
        for (i, dir) in self.dirs.iter().enumerate() {
            for file in dir.names() {
                let Some((pid, name)) = parse_socket_name(&file) else {
                    continue;
                };
                match dir.socket(&file) {
                    Some(Ok(())) => out.push(Endpoint {
                        pid,
                        name,
                        path: dir.path().join(&file),
                        owner: dir.owner(),
                        dir: Some(i),
                    }),
                    Some(Err(why)) => skipped.push(left_alone(dir, &file, &why)),
                    None => {}
                }
            }
        }
        out.sort_by(|a, b| (a.pid, &a.name).cmp(&(b.pid, &b.name)));
        (out, skipped)
    }

    /// Removes `ep` if nobody will answer there again (see [`ControlDir`]'s rules: a socket
    /// of the directory's owner, whose process is gone, that refuses connections); removal is
    /// relative to the opened directory. Returns whether it did.
    pub fn remove_if_stale(&self, ep: &Endpoint) -> bool {
        let Some(dir) = ep.dir.and_then(|i| self.dirs.get(i)) else {
            return false;
        };
        let Some(file) = ep.path.file_name().and_then(|f| f.to_str()) else {
            return false;
        };
        dir.remove_if_stale(file, false)
    }
}

/// An entry with a socket's name that is not spoken to, as [`Dirs::skipped`] says it:
/// `/tmp/x/7.sock: not a socket (left alone)`.
fn left_alone(dir: &ControlDir, file: &str, why: &str) -> String {
    format!("{}: {why}", dir.path().join(file).display())
}

/// Where to look for control sockets: `dir` if given, else the directory `PINWATCH_CONTROL`
/// names, else this user's default one; for root also every user's default directory
/// (`/tmp/pinwatch-<uid>`, which must belong to that uid). Each is opened without following
/// symlinks and checked; those that fail are skipped with a note.
pub fn search_dirs(dir: Option<&Path>) -> Dirs {
    let mut dirs = Dirs::default();
    let named = dir
        .map(Path::to_owned)
        .or_else(|| std::env::var_os("PINWATCH_CONTROL").map(PathBuf::from))
        .filter(|d| d.is_absolute() || dir.is_some());
    if let Some(d) = named {
        let owner = owner_of_named(&d);
        dirs.add(d, owner, false);
        return dirs;
    }
    let me = euid();
    let mine = super::default_dir();
    dirs.add(mine.clone(), Some(me), true);
    if me == 0 {
        if let Ok(entries) = std::fs::read_dir("/tmp") {
            let mut others: Vec<(PathBuf, u32)> = entries
                .flatten()
                .filter_map(|e| {
                    let uid = default_dir_uid(e.file_name().to_str()?)?;
                    Some((e.path(), uid))
                })
                .filter(|(p, _)| *p != mine)
                .collect();
            others.sort();
            for (p, uid) in others {
                dirs.add(p, Some(uid), false);
            }
        }
    }
    dirs
}

/// The socket `target` names: a path (it has a `/`), or `<pid>` / `<pid>.<n>` in `dirs`. A
/// path's directory is checked like the others, and the socket must be its owner's.
pub fn find(target: &str, dirs: &Dirs) -> Result<Endpoint, Error> {
    find_socket(target, dirs).map_err(Error::ControlSocket)
}

fn find_socket(target: &str, dirs: &Dirs) -> Result<Endpoint, String> {
    if target.contains('/') {
        let path = PathBuf::from(target);
        if std::fs::metadata(&path).is_ok_and(|m| m.is_dir()) {
            // A link to the directory is named by where it leads: `--dir` takes no link.
            let dir = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
            let word = crate::text::shell_word;
            return Err(format!(
                "{target} is a directory, not a socket: give the process with it, `pinwatch ctl \
                 --dir {dir} PID …` (`pinwatch ctl --dir {dir} list` shows them), or the \
                 socket's own path (`{}`)",
                word(&dir.join("PID.sock")),
                dir = word(&dir),
            ));
        }
        let (Some(parent), Some(file)) = (path.parent(), path.file_name().and_then(|f| f.to_str()))
        else {
            return Err(format!("{target:?} does not name a socket in a directory"));
        };
        let parent = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        };
        let dir = ControlDir::checked(parent, owner_of_named(parent))
            .map_err(|e| format!("refusing to talk to {target}: {e}"))?;
        return match dir.socket(file) {
            Some(Ok(())) => Ok(Endpoint {
                pid: parse_socket_name(file).map_or(0, |(p, _)| p),
                name: file.to_owned(),
                path: path.clone(),
                owner: dir.owner(),
                dir: None,
            }),
            Some(Err(why)) => Err(format!("refusing to talk to {target}: {why}")),
            None => Err(format!("{target}: no such socket")),
        };
    }
    if parse_socket_name(&format!("{target}.sock")).is_none() {
        return Err(format!(
            "{target:?} is not a process id; give a pid (`pinwatch ctl list` shows them), \
             `<pid>.<n>` for another of its detectors running at once, or a socket's path"
        ));
    }
    let file = format!("{target}.sock");
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    for dir in &dirs.dirs {
        match dir.socket(&file) {
            Some(Ok(())) => {
                let (pid, name) = parse_socket_name(&file).unwrap_or((0, target.to_owned()));
                found.push(Endpoint {
                    pid,
                    name,
                    path: dir.path().join(&file),
                    owner: dir.owner(),
                    dir: None,
                });
            }
            // Noted, and the next directory looked in: another user's directory comes before
            // the real one in root's search.
            Some(Err(why)) => skipped.push(left_alone(dir, &file, &why)),
            None => {}
        }
    }
    // Root looks in every user's directory, and another user's may hold a socket named after
    // anyone's process: where there are several, the one whose owner the process runs as.
    // Which process answers is checked as it connects ([`open`]).
    if !found.is_empty() {
        let at = found
            .iter()
            .position(|ep| runs_as(ep.pid).is_none_or(|uid| uid == ep.owner))
            .unwrap_or(0);
        return Ok(found.swap_remove(at));
    }
    let posers = skipped;
    let pid = target.split('.').next().unwrap_or(target);
    let alive = Path::new(&format!("/proc/{pid}")).exists();
    let looked: Vec<String> = dirs
        .looked
        .iter()
        .map(|d| d.display().to_string())
        .collect();
    // Its other sockets: a detector started while another was stopping keeps `PID.2`. Only
    // those that would be spoken to (helper-90: a file named `PID.sock`, passed over, was
    // offered as one, and the advice was the command that had just failed).
    let served: Vec<String> = dirs
        .dirs
        .iter()
        .flat_map(|d| {
            let mut names = d.names();
            names.retain(|n| matches!(d.socket(n), Some(Ok(()))));
            names
        })
        .filter_map(|n| parse_socket_name(&n))
        .filter(|(p, _)| p.to_string() == pid)
        .map(|(_, name)| name)
        .collect();
    let mut msg = if alive && !served.is_empty() {
        format!(
            "process {pid} has no pinwatch control socket {file} in {}, but serves {}: give one \
             of those (`pinwatch ctl {} status`)",
            looked.join(", "),
            served.join(", "),
            served[0]
        )
    } else if alive {
        format!(
            "process {pid} has no pinwatch control socket {file} in {}: it runs without \
             pinwatch, with PINWATCH_CONTROL=off or a directory of its own (then set \
             PINWATCH_CONTROL to that directory here too), or as another user (run as that user \
             or as root)",
            looked.join(", ")
        )
    } else {
        format!("no process {pid}")
    };
    for note in dirs.skipped.iter().chain(&posers) {
        msg.push_str("; skipped ");
        msg.push_str(note);
    }
    Err(msg)
}

/// The effective uid process `pid` runs as here, if it can be read (not for a process that is
/// gone, or hidden by `/proc`'s `hidepid`).
fn runs_as(pid: u32) -> Option<u32> {
    status_field(pid, "Uid:")?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A field of `/proc/<pid>/status`, trimmed.
fn status_field(pid: u32, name: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .trim()
            .to_owned(),
    )
}

/// Whether the peer (`SO_PEERCRED`: the process that listened, its pid here and uid) is the
/// process `named` (the pid its socket's name says: its own, in its pid namespace); why not,
/// when not. `own`: the caller is the socket's owner, whose directory nobody else can put a
/// socket in — only the pid is compared. For another user's socket (root looking into a
/// user's directory), the process now at the peer's pid must run as the peer's uid:
/// `SO_PEERCRED` keeps the pid of a listener that has exited, after another process (root's)
/// takes that pid. In this pid namespace the peer's pid is the name. A service in a pid
/// namespace of its own (a container) names itself by its pid there, the last of its `NSpid`;
/// but any user may make a pid namespace inside a user namespace of their own and fork up to
/// any pid there, so for another user's socket it must also share this process's user
/// namespace, where only root makes pid namespaces.
fn serves_as(peer: &libc::ucred, named: u32, own: bool) -> Result<(), String> {
    let posing = |how: String| {
        Err(format!(
            "it is served by process {}{how}, not by process {named} its name says (another \
             user's process may be posing as that one)",
            peer.pid
        ))
    };
    let Ok(pid) = u32::try_from(peer.pid) else {
        return posing(String::new());
    };
    let now = runs_as(pid);
    if !own && now != Some(peer.uid) {
        return posing(format!(
            " of uid {}, which has exited (the pid is now {})",
            peer.uid,
            now.map_or("free".to_owned(), |uid| format!("uid {uid}'s"))
        ));
    }
    if pid == named {
        return Ok(());
    }
    let Some(pids) = status_field(pid, "NSpid:") else {
        return if own { Ok(()) } else { posing(String::new()) };
    };
    if pids.split_whitespace().last() != Some(named.to_string().as_str()) {
        return posing(String::new());
    }
    let user_ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/user")).ok();
    if own || user_ns(&pid.to_string()).is_some_and(|ns| Some(ns) == user_ns("self")) {
        return Ok(());
    }
    Err(format!(
        "it is served by process {pid}, which is process {named} in a pid namespace of a user \
         namespace of its own (a rootless container?): from here that cannot be told apart from \
         another user's process posing as it; run `pinwatch ctl` as uid {} or inside its \
         namespaces",
        peer.uid
    ))
}

/// One exchange with a service: the stream, and the time left of the whole exchange.
struct Exchange<'a> {
    stream: UnixStream,
    path: &'a Path,
    deadline: Instant,
    timeout: Duration,
    /// What the exchange waits for, in the error once the time is up ("answer", "dump").
    awaited: &'static str,
}

impl<'a> Exchange<'a> {
    /// Connects to `ep` (checking who answers) and sends `request`; then reads the first line
    /// of the answer into `got` (it may hold what followed it too). Returns the exchange and
    /// how the send and the read went: a service that refuses a client answers before reading,
    /// so the send may fail with the answer there to read.
    fn begin(
        ep: &'a Endpoint,
        request: &Request,
        timeout: Duration,
        awaited: &'static str,
        got: &mut Vec<u8>,
    ) -> Result<(Exchange<'a>, std::io::Result<()>, std::io::Result<()>), String> {
        let deadline = Instant::now() + timeout;
        let stream = open(ep, timeout)?;
        let mut ex = Exchange {
            stream,
            path: &ep.path,
            deadline,
            timeout,
            awaited,
        };
        let mut line = serde_json::to_string(request).map_err(|e| e.to_string())?;
        line.push('\n');
        let _ = ex.stream.set_write_timeout(Some(ex.left("sending")?));
        let sent = ex.stream.write_all(line.as_bytes());
        let read = ex.read_line(got)?;
        Ok((ex, sent, read))
    }

    /// The time left, or the error once it is gone (`what`: the step that ran out of it).
    fn left(&self, what: &str) -> Result<Duration, String> {
        let now = Instant::now();
        if now >= self.deadline {
            return Err(format!(
                "no whole {} from {} within {:?} ({what})",
                self.awaited,
                self.path.display(),
                self.timeout
            ));
        }
        Ok((self.deadline - now).max(Duration::from_millis(1)))
    }

    /// Reads into `answer` until a newline arrives, the peer ends, or an error; at most
    /// [`MAX_REPLY`] bytes (more is an error).
    fn read_line(&mut self, answer: &mut Vec<u8>) -> Result<std::io::Result<()>, String> {
        let mut chunk = vec![0u8; 64 * 1024];
        Ok(loop {
            let _ = self.stream.set_read_timeout(Some(self.left("reading")?));
            match self.stream.read(&mut chunk) {
                Ok(0) => break Ok(()),
                Ok(n) => {
                    if answer.len() + n > MAX_REPLY {
                        return Err(format!(
                            "{} answered more than {} bytes: not a pinwatch reply; gave up",
                            self.path.display(),
                            MAX_REPLY
                        ));
                    }
                    answer.extend_from_slice(&chunk[..n]);
                    // One line is the whole reply.
                    if chunk[..n].contains(&b'\n') {
                        break Ok(());
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => break Err(e),
            }
        })
    }
}

/// Sends `request` to `ep` and reads the reply: the whole exchange within `timeout`, the reply
/// at most [`MAX_REPLY`] bytes, and only from a process of the socket's owner (`SO_PEERCRED`).
pub fn request(ep: &Endpoint, request: &Request, timeout: Duration) -> Result<Reply, Error> {
    exchange_request(ep, request, timeout).map_err(Error::ControlSocket)
}

fn exchange_request(ep: &Endpoint, request: &Request, timeout: Duration) -> Result<Reply, String> {
    let mut answer = Vec::new();
    let (_, sent, read) = Exchange::begin(ep, request, timeout, "answer", &mut answer)?;
    let answer = String::from_utf8_lossy(&answer);
    if let Ok(reply) = serde_json::from_str::<Reply>(answer.trim()) {
        return Ok(reply);
    }
    Err(not_a_reply(&ep.path, timeout, &answer, sent, read))
}

/// The most `pinwatch ctl` takes of a dump: the largest flight recording a service keeps
/// ([`MAX_FLIGHT_SIZE`](crate::config::MAX_FLIGHT_SIZE)) and its first line.
pub const MAX_DUMP: u64 = crate::config::MAX_FLIGHT_SIZE + 64 * 1024;

/// Asks `ep` for its flight recording and copies it to `out` as it arrives: the reply (for a
/// dump, its [`Reply::dump_bytes`] bytes were all written to `out`; a reply that is not `ok`
/// wrote nothing). The whole exchange within `timeout`, the dump at most [`MAX_DUMP`] bytes.
pub fn dump(ep: &Endpoint, timeout: Duration, out: &mut dyn Write) -> Result<Reply, Error> {
    exchange_dump(ep, timeout, out).map_err(Error::ControlSocket)
}

fn exchange_dump(ep: &Endpoint, timeout: Duration, out: &mut dyn Write) -> Result<Reply, String> {
    let path = &ep.path;
    let mut got = Vec::new();
    let (mut ex, sent, read) = Exchange::begin(ep, &Request::Dump, timeout, "dump", &mut got)?;
    let Some(end) = got.iter().position(|&b| b == b'\n') else {
        let answer = String::from_utf8_lossy(&got).into_owned();
        return Err(not_a_reply(path, timeout, &answer, sent, read));
    };
    let rest = got.split_off(end + 1);
    let answer = String::from_utf8_lossy(&got).into_owned();
    let Ok(reply) = serde_json::from_str::<Reply>(answer.trim()) else {
        return Err(not_a_reply(path, timeout, &answer, sent, read));
    };
    if !reply.ok {
        return Ok(reply);
    }
    let Some(n) = reply.dump_bytes else {
        return Err(format!(
            "{} sent no dump (is it an older pinwatch, without `dump`?)",
            path.display()
        ));
    };
    if n > MAX_DUMP || rest.len() as u64 > n {
        return Err(format!(
            "{} sent a dump of {n} bytes (or more than it said): not a pinwatch dump, which is \
             at most {MAX_DUMP} bytes; gave up",
            path.display()
        ));
    }
    let write_err = |e: std::io::Error| format!("cannot write the dump: {e}");
    out.write_all(&rest).map_err(write_err)?;
    let mut have = rest.len() as u64;
    let mut chunk = vec![0u8; 64 * 1024];
    while have < n {
        let _ = ex.stream.set_read_timeout(Some(ex.left("reading")?));
        let want = chunk.len().min((n - have) as usize);
        match ex.stream.read(&mut chunk[..want]) {
            Ok(0) => {
                return Err(format!(
                    "{} ended the dump after {have} of its {n} bytes (the service stopped, or \
                     was too slow to send it within {timeout:?}); nothing was written",
                    path.display()
                ))
            }
            Ok(k) => {
                out.write_all(&chunk[..k]).map_err(write_err)?;
                have += k as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(format!(
                    "reading the dump from {} after {have} of {n} bytes: {e}",
                    path.display()
                ))
            }
        }
    }
    Ok(reply)
}

/// Why `answer` is no reply, for a person.
fn not_a_reply(
    path: &Path,
    timeout: Duration,
    answer: &str,
    sent: std::io::Result<()>,
    read: std::io::Result<()>,
) -> String {
    if let Err(e) = sent {
        return format!("cannot send the request to {}: {e}", path.display());
    }
    if let Err(e) = read {
        return match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!(
                "no whole answer from {} within {timeout:?} (got {} bytes)",
                path.display(),
                answer.len()
            ),
            _ => format!("no answer from {}: {e}", path.display()),
        };
    }
    format!(
        "{} answered something that is not a pinwatch reply: {:?}",
        path.display(),
        answer.chars().take(200).collect::<String>()
    )
}

/// Connects to `ep` within `timeout` and checks that the process answering is the socket's
/// owner's, before a word is sent.
fn open(ep: &Endpoint, timeout: Duration) -> Result<UnixStream, String> {
    let path = &ep.path;
    let stream = connect(path, timeout).map_err(|e| match e.kind() {
        std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound => format!(
            "{}: nobody listens there (the process is gone or has stopped its detector): {e}",
            path.display()
        ),
        std::io::ErrorKind::PermissionDenied => format!(
            "{}: permission denied: the socket belongs to another user; run as that user or as \
             root",
            path.display()
        ),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!(
            "{}: not accepting connections within {timeout:?} (the service is overloaded or \
             this is not a pinwatch socket)",
            path.display()
        ),
        _ => format!("cannot connect to {}: {e}", path.display()),
    })?;
    // Before a word is sent (a `record start` names a path): the one answering must be the
    // user whose socket this is, and the process its name says.
    match super::peer_cred(&stream) {
        Ok(cred) if cred.uid == ep.owner => {
            if ep.pid != 0 {
                serves_as(&cred, ep.pid, euid() == ep.owner)
                    .map_err(|why| format!("refusing to talk to {}: {why}", path.display()))?;
            }
        }
        Ok(libc::ucred { uid, .. }) => {
            return Err(format!(
                "refusing to talk to {}: it is served by uid {uid}, not by uid {} who owns it \
                 (another user's process may be posing as the service)",
                path.display(),
                ep.owner
            ))
        }
        Err(e) => {
            return Err(format!(
                "refusing to talk to {}: cannot tell who serves it: {e}",
                path.display()
            ))
        }
    }
    Ok(stream)
}

/// `connect(path)`, waiting at most `timeout` for a listener whose queue is full (the socket's
/// send timeout bounds a Unix socket's connect; std offers no way to set it before).
fn connect(path: &Path, timeout: Duration) -> std::io::Result<UnixStream> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data; zeroes are a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "the path is longer than {} bytes or has a NUL byte",
                addr.sun_path.len() - 1
            ),
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: a plain system call with constant arguments.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a socket just made and owned by nobody else; the stream takes it over
    // (and closes it on every path below).
    let stream = unsafe { UnixStream::from_raw_fd(fd) };
    stream.set_write_timeout(Some(timeout.max(Duration::from_millis(1))))?;
    // SAFETY: `addr` is a valid, initialised sockaddr_un and the length is its size; the fd is
    // the stream's, open for this call.
    let rc = unsafe {
        libc::connect(
            stream.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A control directory given where a socket's path goes (`PINWATCH_CONTROL=/run/svc` and
    /// then `pinwatch ctl /run/svc status`) is named as such, with the two ways to say what
    /// was meant — not taken for a socket in its parent, whose mode is none of the user's
    /// business (helper-83: "chmod 700" of the parent).
    #[test]
    fn a_directory_given_for_a_socket_is_told_how_to_use_it() {
        let dir = tempfile::tempdir().unwrap();
        let target = std::fs::canonicalize(dir.path())
            .unwrap()
            .display()
            .to_string();
        // A name with a space and a quote is quoted for the shell, to be pasted (helper-86).
        let odd = format!("{target}/my svc's dir");
        std::fs::create_dir(&odd).unwrap();
        let e = find_socket(&odd, &search_dirs(None)).unwrap_err();
        // What is between each pair of backticks, as a shell splits it.
        let words: Vec<Vec<String>> = e
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|cmd| shlex::split(cmd).unwrap())
            .collect();
        assert_eq!(
            words[0],
            ["pinwatch", "ctl", "--dir", &odd, "PID", "…"],
            "{e}"
        );
        assert_eq!(words[1], ["pinwatch", "ctl", "--dir", &odd, "list"], "{e}");
        assert_eq!(words[2], [format!("{odd}/PID.sock")], "{e}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let link = link.display().to_string();
        // A link to it is named by where it leads (helper-85: `--dir` refuses the link).
        for given in [target.clone(), format!("{target}/"), link] {
            let Err(e) = find_socket(&given, &search_dirs(None)) else {
                panic!("{given} was taken for a socket");
            };
            assert!(
                e.starts_with(&format!("{given} is a directory, not a socket")),
                "{e}"
            );
            assert!(e.contains(&format!("--dir {target} PID")), "{e}");
            assert!(e.contains(&format!("{target}/PID.sock")), "{e}");
            assert!(!e.contains("chmod"), "{e}");
        }
    }

    /// Root looks in every user's directory, and another user's may hold a socket, or
    /// anything else, named after someone else's process. `ctl PID` takes the socket whose
    /// owner the process runs as (a file that is no socket is noted and passed over), and a
    /// socket served by another process than its name says is refused before a word is sent:
    /// judged by who answers, so a service in a pid namespace of its own, whose pid here is
    /// another, still is what its name says (its `NSpid`).
    #[test]
    fn a_socket_named_after_another_process_is_not_taken_for_it() {
        use std::os::unix::fs::{lchown, PermissionsExt};
        assert_eq!(
            euid(),
            0,
            "this test gives a directory to another user: run it as root (CI does)"
        );
        let me = std::process::id();
        let make = |uid: u32| {
            let dir = tempfile::tempdir().unwrap();
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
            lchown(dir.path(), Some(uid), None).unwrap();
            dir
        };
        let (theirs, other, mine) = (make(65534), make(65534), make(0));
        let sock = |d: &tempfile::TempDir| d.path().join(format!("{me}.sock"));
        let _fake = std::os::unix::net::UnixListener::bind(sock(&theirs)).unwrap();
        lchown(sock(&theirs), Some(65534), None).unwrap();
        std::fs::write(sock(&other), b"").unwrap();
        lchown(sock(&other), Some(65534), None).unwrap();
        let _real = std::os::unix::net::UnixListener::bind(sock(&mine)).unwrap();
        let checked =
            |d: &tempfile::TempDir, uid| ControlDir::checked(d.path(), Some(uid)).unwrap();
        let dirs = Dirs {
            dirs: vec![
                checked(&theirs, 65534),
                checked(&other, 65534),
                checked(&mine, 0),
            ],
            skipped: Vec::new(),
            looked: Vec::new(),
        };
        let found = find_socket(&me.to_string(), &dirs).unwrap();
        assert_eq!(found.path, sock(&mine));
        assert!(open(&found, Duration::from_secs(5)).is_ok());
        // Without the real one, the other is found, and refused as it answers (here by the
        // wrong uid; the same uid as its owner, by the wrong process, below).
        let dirs = Dirs {
            dirs: vec![checked(&theirs, 65534), checked(&other, 65534)],
            skipped: Vec::new(),
            looked: Vec::new(),
        };
        let fake = find_socket(&me.to_string(), &dirs).unwrap();
        assert_eq!(fake.path, sock(&theirs));
        let e = open(&fake, Duration::from_secs(5)).unwrap_err();
        assert!(e.contains("served by uid 0, not by uid 65534"), "{e}");
        // A socket of root's named after process 1, served by this one: refused.
        let one = mine.path().join("1.sock");
        let _posing = std::os::unix::net::UnixListener::bind(&one).unwrap();
        let dirs = Dirs {
            dirs: vec![checked(&mine, 0)],
            skipped: Vec::new(),
            looked: Vec::new(),
        };
        let ep = find_socket("1", &dirs).unwrap();
        let e = open(&ep, Duration::from_secs(5)).unwrap_err();
        assert!(
            e.contains(&format!("served by process {me}, not by process 1")),
            "{e}"
        );
        let cred = |pid: i32, uid: u32| libc::ucred { pid, uid, gid: 0 };
        assert!(serves_as(&cred(me as i32, 0), me, false).is_ok());
        assert!(serves_as(&cred(me as i32, 0), 1, false).is_err());
        // A listener's pid now another user's process (root's, here: this one): refused for
        // another user's socket, whose owner the listener ran as.
        let e = serves_as(&cred(me as i32, 65534), me, false).unwrap_err();
        assert!(
            e.contains("which has exited (the pid is now uid 0's)"),
            "{e}"
        );
        // The caller's own socket: the pid alone.
        assert!(serves_as(&cred(me as i32, 65534), me, true).is_ok());
    }

    /// A process whose only socket is `PID.2.sock` (a detector started while another was
    /// stopping) is not said to run without pinwatch: the error names the socket it serves.
    #[test]
    fn a_pid_whose_socket_is_numbered_is_pointed_at_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let me = std::process::id();
        let _listening =
            std::os::unix::net::UnixListener::bind(dir.path().join(format!("{me}.2.sock")))
                .unwrap();
        // Files named like its sockets are passed over, and not offered (helper-90).
        for file in [format!("{me}.sock"), format!("{me}.3.sock")] {
            std::fs::write(dir.path().join(file), "").unwrap();
        }
        let dirs = Dirs {
            dirs: vec![ControlDir::checked(dir.path(), Some(euid())).unwrap()],
            skipped: Vec::new(),
            looked: vec![dir.path().to_owned()],
        };
        let err = find_socket(&me.to_string(), &dirs).map(|_| ()).unwrap_err();
        assert!(
            err.contains(&format!("but serves {me}.2: give one"))
                && err.contains(&format!("`pinwatch ctl {me}.2 status`"))
                && err.contains(&format!("{me}.sock: not a socket (left alone)")),
            "{err}"
        );
        let found = find_socket(&format!("{me}.2"), &dirs).unwrap();
        assert_eq!(found.name, format!("{me}.2"));
    }
}
