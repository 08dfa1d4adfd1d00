//! The control socket: `pinwatch ctl <pid> status | set | record | dump | pause | resume` on a running
//! service, like `jcmd <pid> JFR.start`.
//!
//! Each detector serves a Unix domain socket, `<pid>.sock` (`<pid>.<n>.sock` for the n-th of a
//! process's detectors running at once in one directory), in a directory only its user may
//! enter (`/tmp/pinwatch-<uid>`, mode 0700; the socket 0600), from a thread of pinwatch's own
//! that answers while every worker is pinned.
//! The directory is made without following symlinks and checked on its opened descriptor: one
//! that belongs to someone else, or a symlink, is refused ([`ControlDir`]).
//! A peer must have the service's uid or be root, checked with `SO_PEERCRED` as the JVM's attach
//! listener does; `pinwatch ctl` checks the other way round that the directory, the socket and
//! the process answering belong to the same user. One request per connection, each answered on
//! a short-lived thread, with [`REQUEST_DEADLINE`] from its accept to send the whole request;
//! of more than [`MAX_CLIENTS`] still sending at once, the one sending longest is cut off, so
//! slow clients hold up nobody else. The socket is removed when the detector stops; one left by
//! a process that died is removed by the next detector that starts in the directory, or by
//! `pinwatch ctl list` — only sockets of the directory's owner, removed relative to the opened
//! directory.
//!
//! Changing settings never touches the per-poll path: the watchdog and the analysis read them
//! afresh per scan and per event (see docs/ctl.md).

pub mod client;
mod dir;
pub mod protocol;
mod view;

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config::{Settings, Stacks};
use crate::export::{Parts, Recorder, RecordingRef, Rotation};
use crate::watch::Shared;
pub use dir::ControlDir;
use protocol::{PinnedNow, Reply, Request, Status, MAX_REQUEST};
pub(crate) use view::View;

/// How long a client has, from the moment it is accepted, to send its whole request line
/// (one deadline across all reads, not one per read); and the service to send the reply.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);

/// How long a client has to take a whole dump (`pinwatch ctl <pid> dump`), from its accept:
/// a client that reads slowly, or not at all, holds its connection's thread no longer.
pub const DUMP_DEADLINE: Duration = Duration::from_secs(60);

/// Dumps sent at once; one more is told to try again. Each holds a copy of the flight
/// recording's bytes until it is sent: with this bound, at most `1 + MAX_DUMPS` times
/// `PINWATCH_FLIGHT_SIZE` of lines are in memory.
pub const MAX_DUMPS: usize = 2;

/// Connections still sending their request at once. One more cuts off the one that has been
/// sending longest (a well-behaved client sends its line at once, so it is never the oldest
/// for long): slow or stuck clients cannot keep `pinwatch ctl` out.
pub const MAX_CLIENTS: usize = 8;

/// Connections served at once, sending or answered; more get a "busy" answer at once.
const MAX_THREADS: usize = 2 * MAX_CLIENTS;

/// Top locations in a status.
const TOP: usize = 10;

/// The directory of this user's control sockets when `PINWATCH_CONTROL` names none:
/// `/tmp/pinwatch-<euid>`.
pub fn default_dir() -> PathBuf {
    // SAFETY: geteuid cannot fail and touches no memory.
    let uid = unsafe { libc::geteuid() };
    PathBuf::from(format!("/tmp/pinwatch-{uid}"))
}

/// What the control thread reads and changes.
pub(crate) struct Context {
    pub parts: Parts,
    pub recorder: Recorder,
    pub view: View,
}

/// A running control socket; dropping it stops the thread and removes the socket.
pub(crate) struct Server {
    path: PathBuf,
    /// The directory, opened; the socket is removed through it.
    dir: ControlDir,
    name: String,
    fd: RawFd,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Given back after the socket is unlinked.
    _number: Number,
}

impl Server {
    /// The socket's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// What `pinwatch ctl` takes for this socket in the default directory: `PID`, or `PID.N`
    /// for the n-th of the process's detectors running at once there.
    pub(crate) fn target(&self) -> String {
        self.name.trim_end_matches(".sock").to_owned()
    }

    /// Makes (or checks) `dir`, binds this detector's socket in it, and serves it.
    pub(crate) fn start(dir: &Path, ctx: Context) -> Result<Server, String> {
        let dir = prepare_dir(dir)?;
        let number = Number::take(dir.id());
        let name = number.socket_name(std::process::id());
        let path = dir.path().join(&name);
        remove_stale(&dir, &name);
        let listener = UnixListener::bind(&path)
            .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
        // Bound by path: the path must still be the directory checked (only its owner or root
        // can move it, in a sticky /tmp too), and the new entry our socket.
        if !dir.is_at_path() || !matches!(dir.socket(&name), Some(Ok(()))) {
            return Err(format!(
                "{} changed while the socket was made in it; not serving there",
                dir.path().display()
            ));
        }
        dir.chmod(&name, 0o600)
            .map_err(|e| format!("cannot make {} owner-only: {e}", path.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let fd = listener.as_raw_fd();
        let thread = {
            let stop = Arc::clone(&stop);
            let ctx = Arc::new(Served {
                ctx,
                started: Instant::now(),
                socket: path.clone(),
                clients: AtomicUsize::new(0),
                dumps: AtomicUsize::new(0),
                reading: Mutex::new(VecDeque::new()),
            });
            std::thread::Builder::new()
                .name("pinwatch-control".into())
                .spawn(move || serve(listener, ctx, &stop))
                .map_err(|e| format!("cannot start the control thread: {e}"))?
        };
        Ok(Server {
            path,
            dir,
            name,
            fd,
            stop,
            thread: Some(thread),
            _number: number,
        })
    }
}

/// The sockets this process serves now, by directory (its device and inode) and number: in a
/// directory, the first is `<pid>.sock`, the n-th `<pid>.<n>.sock` (`pinwatch ctl PID.N`).
static SERVED: Mutex<Vec<((u64, u64), Numbers)>> = Mutex::new(Vec::new());

/// Numbers in use, from 1: a new one is the lowest free, so that a process with one detector at
/// a time in a directory (a runtime built again) serves `<pid>.sock` there, which
/// `pinwatch ctl PID` finds.
#[derive(Default)]
struct Numbers(Vec<bool>);

impl Numbers {
    fn take(&mut self) -> usize {
        let i = match self.0.iter().position(|used| !used) {
            Some(i) => i,
            None => {
                self.0.push(false);
                self.0.len() - 1
            }
        };
        self.0[i] = true;
        i + 1
    }

    /// Gives `n` back; whether none is in use now.
    fn release(&mut self, n: usize) -> bool {
        if let Some(used) = n.checked_sub(1).and_then(|i| self.0.get_mut(i)) {
            *used = false;
        }
        !self.0.contains(&true)
    }
}

/// A socket's number in its directory, given back when dropped: after its socket is unlinked (a
/// field of [`Server`], which unlinks in its `drop`).
struct Number {
    dir: (u64, u64),
    n: usize,
}

impl Number {
    fn take(dir: (u64, u64)) -> Number {
        let mut served = SERVED.lock().unwrap_or_else(PoisonError::into_inner);
        let at = match served.iter().position(|(d, _)| *d == dir) {
            Some(at) => at,
            None => {
                served.push((dir, Numbers::default()));
                served.len() - 1
            }
        };
        Number {
            dir,
            n: served[at].1.take(),
        }
    }

    fn socket_name(&self, pid: u32) -> String {
        match self.n {
            1 => format!("{pid}.sock"),
            n => format!("{pid}.{n}.sock"),
        }
    }
}

impl Drop for Number {
    fn drop(&mut self) {
        let mut served = SERVED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(at) = served.iter().position(|(d, _)| *d == self.dir) {
            if served[at].1.release(self.n) {
                served.swap_remove(at);
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // SAFETY: `fd` is the listener's, still open (the thread owns the listener and is
        // blocked in accept on it until this wakes it); shutdown only changes its state.
        unsafe { libc::shutdown(self.fd, libc::SHUT_RDWR) };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = self.dir.unlink(&self.name);
    }
}

/// Makes `dir` (mode 0700) in a directory that is there — a typo's parents are not made (a
/// recording's and an exit dump's directory must be there too) — and opens it without
/// following a symlink; the opened directory must be this user's, and nobody else's to enter: a
/// looser mode of our own is tightened, anything else refused. Checked on the descriptor, so a
/// directory or symlink that appears between the `mkdir` and the check is caught too.
fn prepare_dir(dir: &Path) -> Result<ControlDir, String> {
    // SAFETY: geteuid cannot fail and touches no memory.
    let uid = unsafe { libc::geteuid() };
    if let Some(parent) = dir.parent() {
        if !parent.as_os_str().is_empty() && !parent.exists() {
            return Err(format!(
                "cannot make {}: {} does not exist (make it first, or name a directory in one \
                 that does)",
                crate::text::Escaped(dir.display()),
                crate::text::Escaped(parent.display())
            ));
        }
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot make {}: {e}", dir.display())),
    }
    // Ours but too open (made by hand, or under a loose umask): tightened, on the descriptor.
    if let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
    {
        if let Ok(m) = file.metadata() {
            if m.uid() == uid && m.mode() & 0o077 != 0 {
                file.set_permissions(std::fs::Permissions::from_mode(0o700))
                    .map_err(|e| format!("cannot make {} owner-only: {e}", dir.display()))?;
            }
        }
    }
    ControlDir::checked(dir, Some(uid)).map_err(|e| {
        format!("{e} (this process runs as uid {uid}; PINWATCH_CONTROL=/a/dir/of/yours puts the socket elsewhere)")
    })
}

/// Removes the sockets in `dir` of processes that are gone, and a leftover `ours` (a process
/// that had this pid before); only sockets of the directory's owner (see
/// [`ControlDir::remove_if_stale`]).
fn remove_stale(dir: &ControlDir, ours: &str) {
    let me = std::process::id();
    for name in dir.names() {
        let Some((pid, _)) = dir::parse_socket_name(&name) else {
            continue;
        };
        if pid == me && name != ours {
            continue;
        }
        dir.remove_if_stale(&name, name == ours);
    }
}

struct Served {
    ctx: Context,
    started: Instant,
    socket: PathBuf,
    /// Connections being served.
    clients: AtomicUsize,
    /// Dumps being sent.
    dumps: AtomicUsize,
    /// The connections still sending their request, oldest first (a handle to cut each off).
    reading: Mutex<VecDeque<(u64, UnixStream)>>,
}

impl Served {
    fn reading(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, UnixStream)>> {
        self.reading.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes connection `id` off the list of those sending; false if it was cut off.
    fn done_reading(&self, id: u64) -> bool {
        let mut r = self.reading();
        match r.iter().position(|(i, _)| *i == id) {
            Some(at) => {
                r.remove(at);
                true
            }
            None => false,
        }
    }
}

fn serve(listener: UnixListener, s: Arc<Served>, stop: &AtomicBool) {
    let mut next_id = 0u64;
    loop {
        let accepted = listener.accept();
        if stop.load(Ordering::Acquire) {
            return;
        }
        match accepted {
            Ok((stream, _)) => {
                let accepted_at = Instant::now();
                let cut = stream.try_clone();
                if s.clients.fetch_add(1, Ordering::AcqRel) >= MAX_THREADS || cut.is_err() {
                    s.clients.fetch_sub(1, Ordering::AcqRel);
                    reply(
                        stream,
                        &Reply::error("busy: too many requests at once; try again"),
                    );
                    continue;
                }
                next_id += 1;
                let id = next_id;
                if let Ok(cut) = cut {
                    let mut r = s.reading();
                    if r.len() >= MAX_CLIENTS {
                        if let Some((_, oldest)) = r.pop_front() {
                            // Its pending read returns at once; it answers and ends.
                            let _ = oldest.shutdown(std::net::Shutdown::Read);
                        }
                    }
                    r.push_back((id, cut));
                }
                let conn = Arc::clone(&s);
                let spawned = std::thread::Builder::new()
                    .name("pinwatch-control-client".into())
                    .spawn(move || {
                        // A bug here must not end the service's control for good, nor the
                        // service.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            handle(stream, id, accepted_at, &conn)
                        }));
                        conn.done_reading(id);
                        conn.clients.fetch_sub(1, Ordering::AcqRel);
                    });
                if spawned.is_err() {
                    s.done_reading(id);
                    s.clients.fetch_sub(1, Ordering::AcqRel);
                }
            }
            // Out of file descriptors, or a connection reset before it was accepted: try again
            // shortly rather than spin.
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// The uid of the process at the other end of `stream`.
pub(crate) fn peer_uid(stream: &UnixStream) -> std::io::Result<u32> {
    peer_cred(stream).map(|c| c.uid)
}

/// The peer's credentials (`SO_PEERCRED`): its pid, uid and gid as this process sees them.
pub(crate) fn peer_cred(stream: &UnixStream) -> std::io::Result<libc::ucred> {
    // SAFETY: ucred is plain data; zeroes are a valid value.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writing and `len` is `cred`'s size, as
    // SO_PEERCRED requires; the fd is the stream's, open for this call.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred)
}

fn handle(stream: UnixStream, id: u64, accepted_at: Instant, s: &Served) {
    let read = read_request(&stream, accepted_at + REQUEST_DEADLINE);
    let cut_off = !s.done_reading(id);
    let answer = match read {
        Ok(Request::Dump) => return dump(stream, accepted_at + DUMP_DEADLINE, s),
        Ok(req) => answer(req, s),
        Err(_) if cut_off => Reply::error(format!(
            "dropped: the request was not complete while {MAX_CLIENTS} newer connections \
             waited; send the whole line at once"
        )),
        Err(reply) => reply,
    };
    reply(stream, &answer);
}

fn reply(mut stream: UnixStream, reply: &Reply) {
    let mut line = serde_json::to_string(reply)
        .unwrap_or_else(|_| r#"{"ok":false,"message":"cannot encode the reply"}"#.to_owned());
    line.push('\n');
    let _ = stream.set_write_timeout(Some(REQUEST_DEADLINE));
    let _ = stream.write_all(line.as_bytes());
}

/// Sends the flight recording on `stream`: the reply line with its size, then the dump, all
/// by `deadline`. The buffer's lock is held only to copy its bytes out; the socket is
/// written without it, each write waiting at most until the deadline, so a client that never
/// reads holds this thread until then and no longer (and nothing else waits for it).
fn dump(stream: UnixStream, deadline: Instant, s: &Served) {
    let Some((flight, who)) = &s.ctx.parts.flight else {
        return reply(
            stream,
            &Reply::error(
                "the flight recording is off in this service (PINWATCH_FLIGHT_SIZE=off); \
                 start one with `record start FILE` instead",
            ),
        );
    };
    if s.dumps.fetch_add(1, Ordering::AcqRel) >= MAX_DUMPS {
        s.dumps.fetch_sub(1, Ordering::AcqRel);
        return reply(
            stream,
            &Reply::error(format!(
                "busy: {MAX_DUMPS} dumps are being sent already; try again when they are done"
            )),
        );
    }
    let dump = crate::export::Dump::new(flight.snapshot(), who);
    let mut head = Reply::ok(crate::recording::describe_dump(&dump.info));
    head.dump_bytes = Some(dump.len());
    let mut line = serde_json::to_string(&head)
        .unwrap_or_else(|_| r#"{"ok":false,"message":"cannot encode the reply"}"#.to_owned());
    line.push('\n');
    let mut out = ByDeadline {
        stream: &stream,
        deadline,
    };
    let _ = out
        .write_all(line.as_bytes())
        .and_then(|()| dump.write_to(&mut out));
    drop(dump);
    s.dumps.fetch_sub(1, Ordering::AcqRel);
}

/// Writes to a socket, each write waiting at most until `deadline` (then `TimedOut`).
struct ByDeadline<'a> {
    stream: &'a UnixStream,
    deadline: Instant,
}

impl Write for ByDeadline<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let now = Instant::now();
        if now >= self.deadline {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        self.stream
            .set_write_timeout(Some((self.deadline - now).max(Duration::from_millis(1))))?;
        let mut s = self.stream;
        s.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The request on `stream`, from a peer allowed to send one, whole by `deadline`; or the error
/// reply.
fn read_request(mut stream: &UnixStream, deadline: Instant) -> Result<Request, Reply> {
    // SAFETY: geteuid cannot fail and touches no memory.
    let me = unsafe { libc::geteuid() };
    match peer_uid(stream) {
        Ok(uid) if uid == me || uid == 0 => {}
        Ok(uid) => {
            return Err(Reply::error(format!(
                "refused: this service runs as uid {me}, and only that user or root may control \
                 it (you are uid {uid})"
            )))
        }
        Err(e) => {
            return Err(Reply::error(format!(
                "refused: cannot tell who you are: {e}"
            )))
        }
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    // Up to the line's end, the peer's end, or one byte past the limit; by the deadline.
    while !buf.contains(&b'\n') && buf.len() <= MAX_REQUEST {
        let now = Instant::now();
        let late = || {
            Reply::error(format!(
                "no whole request within {REQUEST_DEADLINE:?}; send one JSON line at once"
            ))
        };
        if now >= deadline {
            return Err(late());
        }
        let _ = stream.set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))));
        let want = chunk.len().min(MAX_REQUEST + 1 - buf.len());
        match stream.read(&mut chunk[..want]) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(late())
            }
            Err(e) => {
                return Err(Reply::error(format!(
                    "cannot read the request ({e}); send one JSON line"
                )))
            }
        }
    }
    if let Some(end) = buf.iter().position(|&b| b == b'\n') {
        buf.truncate(end + 1);
    }
    if buf.len() > MAX_REQUEST {
        return Err(Reply::error(format!(
            "request longer than {MAX_REQUEST} bytes; send one JSON line"
        )));
    }
    let text = String::from_utf8_lossy(&buf);
    if text.trim().is_empty() {
        return Err(Reply::error("empty request; send one JSON line"));
    }
    Request::from_line(text.trim()).map_err(|e| {
        Reply::error(format!(
            "malformed request ({e}); send one JSON line like {{\"cmd\":\"status\"}} — \
             `pinwatch ctl` does"
        ))
    })
}

fn answer(req: Request, s: &Served) -> Reply {
    let ctx = &s.ctx;
    let w = &ctx.parts.watched;
    match req {
        Request::Status => Reply {
            status: Some(Box::new(status(s))),
            ..Reply::ok("")
        },
        Request::Set { settings } => set(w, &settings),
        Request::RecordStart {
            path,
            max_size,
            max_age,
            keep,
        } => match rotation(w, max_size, max_age, keep) {
            Err(e) => Reply::error(e),
            Ok(_) if !path.is_absolute() => Reply::error(format!(
                "{} is not an absolute path: the service's working directory is not yours; \
                 give an absolute one (`pinwatch ctl` does)",
                path.display()
            )),
            Ok(r) => match ctx.recorder.start(&path, r) {
                Ok(st) => Reply {
                    recordings: Some(vec![st.clone()]),
                    ..Reply::ok(format!(
                        "recording {} to {} ({}); `record stop {0}` stops it",
                        st.id.unwrap_or_default(),
                        path.display(),
                        describe(r)
                    ))
                },
                Err(e) => Reply::error(e),
            },
        },
        Request::RecordStop { id, path } => record_stop(&ctx.recorder, id, path.as_deref()),
        Request::RecordList => {
            let list = ctx.recorder.list();
            Reply {
                recordings: Some(list.clone()),
                ..Reply::ok(match list.len() {
                    0 => "no recording is running".to_owned(),
                    1 => "1 recording is running".to_owned(),
                    n => format!("{n} recordings are running"),
                })
            }
        }
        // Answered by `dump` (its reply is more than a line); not reached.
        Request::Dump => Reply::error("a dump is sent by its own path (this is a bug)"),
        Request::Pause | Request::Resume => {
            let pause = matches!(req, Request::Pause);
            let Ok((before, _)) = w.tunables.update(|s| {
                s.paused = pause;
                Ok::<(), std::convert::Infallible>(())
            });
            Reply::ok(match (pause, before.paused) {
                (true, true) => "already paused".to_owned(),
                (true, false) => format!(
                    "paused: no new pins are reported until `resume`; {} already reported \
                     followed to their end",
                    w.pinned_now().len()
                ),
                (false, false) => "not paused".to_owned(),
                (false, true) => "resumed: pins are reported again".to_owned(),
            })
        }
    }
}

/// `record stop [ID|FILE]`.
fn record_stop(recorder: &Recorder, id: Option<u64>, path: Option<&Path>) -> Reply {
    let which = match (id, path) {
        (Some(_), Some(_)) => return Reply::error("give the recording's id or its file, not both"),
        (Some(id), None) => RecordingRef::Id(id),
        (None, Some(p)) if !p.is_absolute() => {
            return Reply::error(format!(
                "{} is not an absolute path: the service's working directory is not yours; \
                 give an absolute one (`pinwatch ctl` does)",
                p.display()
            ))
        }
        (None, Some(p)) => RecordingRef::Path(p),
        (None, None) => RecordingRef::Only,
    };
    match recorder.stop(which) {
        Ok(st) => Reply {
            recordings: Some(vec![st.clone()]),
            ..Reply::ok(format!(
                "stopped recording {} to {}: {} events, {} bytes, {} rotation{}{}",
                st.id.unwrap_or_default(),
                st.path.display(),
                st.events,
                st.bytes,
                st.rotations,
                if st.rotations == 1 { "" } else { "s" },
                if st.write_errors > 0 {
                    format!(", {} events could not be written", st.write_errors)
                } else {
                    String::new()
                }
            ))
        },
        Err(e) => Reply::error(e),
    }
}

/// `record start`'s limits: what the request says, else the service's `PINWATCH_RECORD_*`.
fn rotation(
    w: &Shared,
    max_size: Option<String>,
    max_age: Option<String>,
    keep: Option<usize>,
) -> Result<Rotation, String> {
    let c = &w.config;
    let mut r = Rotation::from_config(c);
    if let Some(v) = max_size {
        r.max_size =
            crate::config::parse_record_size(&v).map_err(|e| format!("max size {v:?} {e}"))?;
    }
    if let Some(v) = max_age {
        r.max_age =
            crate::config::parse_record_age(&v).map_err(|e| format!("max age {v:?} {e}"))?;
    }
    match keep {
        Some(0) => return Err("keep must be at least 1".to_owned()),
        Some(k) => r.keep = k,
        None => {}
    }
    Ok(r)
}

/// `rotating at 100 MB or every 1h, keeping 5 rotated files`, `never rotating`.
fn describe(r: Rotation) -> String {
    let mut when = Vec::new();
    if let Some(b) = r.max_size {
        when.push(format!("at {}", bytesize::ByteSize(b).display().si()));
    }
    if let Some(d) = r.max_age {
        when.push(format!("every {}", humantime::format_duration(d)));
    }
    if when.is_empty() {
        return "never rotating".to_owned();
    }
    format!(
        "rotating {}, keeping {} rotated files",
        when.join(" or "),
        r.keep
    )
}

fn set(w: &Shared, pairs: &[(String, String)]) -> Reply {
    if pairs.is_empty() {
        return Reply::error(format!(
            "nothing to set; give key=value pairs, keys: {}",
            Settings::KEYS.join(", ")
        ));
    }
    // A key given twice is a mistake in the command (which was meant?): nothing is set. (An
    // unknown key is refused as that, below.)
    for (i, (k, v)) in pairs.iter().enumerate() {
        let again = pairs[i + 1..].iter().find(|(k2, _)| k2 == k);
        if let (Some((_, again)), true) = (again, Settings::KEYS.contains(&k.as_str())) {
            return Reply::error(format!(
                "`{k}` is given twice ({k}={v:?}, then {k}={again:?}); give each key once"
            ));
        }
    }
    // All under the settings' lock, so that two clients' changes never mix.
    let changed = w.tunables.update(|s| {
        for (k, v) in pairs {
            s.set(k, v).map_err(|e| e.to_string())?;
        }
        if s.stacks != Stacks::Off {
            if let Some(why) = w.stacks_blocked {
                return Err(format!(
                    "stacks={}: stack samples are unavailable in this process ({why}: the \
                     unwinder needs glibc >= 2.35 with libgcc >= 12 to be async-signal-safe)",
                    s.stacks.as_str()
                ));
            }
            // Before the setting takes effect: no signal may go out without its handler.
            crate::signal::install_handler().map_err(|e| e.to_string())?;
        }
        Ok(())
    });
    let (before, after) = match changed {
        Ok(change) => change,
        Err(e) => return Reply::error(e),
    };
    // The watchdog may be waiting out a scan timed by the old settings (with start stamps, a
    // quarter of the old threshold): a lower threshold takes effect now, not after that wait.
    w.table.parking.nudge();
    let mut lines = Vec::new();
    for key in Settings::KEYS {
        let (b, a) = (before.get(key), after.get(key));
        let in_force = match (*key, scan_in_force(&after)) {
            ("scan_interval", Some(d)) => {
                format!(" ({d} in force: never more than a quarter of the threshold)")
            }
            _ => String::new(),
        };
        if b != a {
            lines.push(format!(
                "{key}: {} -> {}{in_force}",
                b.unwrap_or_default(),
                a.unwrap_or_default()
            ));
        } else if pairs.iter().any(|(k, _)| k == key) {
            lines.push(format!(
                "{key}: {}{in_force} (unchanged)",
                a.unwrap_or_default()
            ));
        }
    }
    // A threshold moved past four scan intervals changes the scan period in force too.
    let (was, now) = (
        before.effective_scan_interval(),
        after.effective_scan_interval(),
    );
    if was != now && !lines.iter().any(|l| l.starts_with("scan_interval:")) {
        let d = |d: Duration| humantime::format_duration(d).to_string();
        lines.push(format!(
            "scan interval in force: {} -> {} (never more than a quarter of the threshold)",
            d(was),
            d(now)
        ));
    }
    Reply::ok(lines.join("\n"))
}

/// The scan period the watchdog uses, where it differs from the `scan_interval` asked for.
fn scan_in_force(s: &Settings) -> Option<String> {
    let d = s.effective_scan_interval();
    (d != s.scan_interval).then(|| humantime::format_duration(d).to_string())
}

fn status(s: &Served) -> Status {
    let ctx = &s.ctx;
    let w = &ctx.parts.watched;
    let settings = w.tunables.get();
    let stalled_now = w.stall().0;
    let mut pinned: Vec<PinnedNow> = w
        .pinned_now()
        .into_iter()
        .map(|(id, age)| {
            let e = ctx.view.open(id);
            PinnedNow {
                id,
                for_ms: age.as_millis() as u64,
                worker: e.as_ref().and_then(|e| e.worker.index),
                tid: e.as_ref().map(|e| e.worker.tid),
                task_id: e.as_ref().and_then(|e| e.task_id),
                spawned_at: e.as_ref().and_then(|e| {
                    e.spawned_at
                        .as_ref()
                        .map(|l| bounded(l.to_string(), MAX_FIELD))
                }),
                reason: e.as_ref().and_then(|e| e.reason.map(|r| r.to_string())),
                blocking_operation: e
                    .as_ref()
                    .and_then(|e| e.blocking_operation.clone())
                    .map(|o| bounded(o, MAX_FIELD)),
                advice: e
                    .as_ref()
                    .and_then(|e| e.advice.clone())
                    .map(|a| bounded(a, MAX_FIELD)),
                called_from: e
                    .as_ref()
                    .and_then(|e| e.caller_frame())
                    .map(|f| bounded(f.to_string(), MAX_FIELD)),
                top_frame: e.as_ref().and_then(|e| {
                    e.top_frame
                        .as_ref()
                        .map(|f| bounded(f.to_string(), MAX_FIELD))
                }),
                held_locks: e.as_ref().map_or(0, |e| e.held_locks.len()),
                runtime_stalled: stalled_now,
                stall: e
                    .as_ref()
                    .and_then(|e| e.stall_description())
                    .map(|s| bounded(s, MAX_FIELD)),
                runtime_advice: e
                    .as_ref()
                    .and_then(|e| e.runtime_advice.clone())
                    .map(|a| bounded(a, MAX_FIELD)),
                span: e.as_ref().and_then(request_of),
                trace_id: e
                    .as_ref()
                    .and_then(|e| e.trace_id.clone())
                    .map(|t| bounded(t, MAX_TRACE_ID)),
                delayed: e.as_ref().and_then(|e| e.victims.as_ref()).map(delayed_of),
            }
        })
        .collect();
    pinned.sort_by_key(|p| std::cmp::Reverse(p.for_ms));
    let stats = crate::watch::snapshot(&w.stats, &w.table);
    let recordings = ctx.recorder.list();
    let command = std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .map(|c| bounded(c, MAX_COMMAND))
        .unwrap_or_default();
    let flavor = match ctx.parts.handle.runtime_flavor() {
        tokio::runtime::RuntimeFlavor::CurrentThread => "current_thread",
        tokio::runtime::RuntimeFlavor::MultiThread => "multi_thread",
        _ => "other",
    };
    Status {
        pid: std::process::id(),
        socket: s.socket.clone(),
        command,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        run_id: w.run_id.clone(),
        uptime_ms: s.started.elapsed().as_millis() as u64,
        built_at: format!(
            "{}:{}",
            ctx.parts.built_at.file(),
            ctx.parts.built_at.line()
        ),
        flavor: flavor.to_owned(),
        workers: ctx.parts.handle.metrics().num_workers(),
        settings: Settings::KEYS
            .iter()
            .map(|k| ((*k).to_owned(), settings.get(k).unwrap_or_default()))
            .collect(),
        scan_interval_in_force: scan_in_force(&settings),
        paused: settings.paused,
        stacks_unavailable: w.stacks_blocked.map(str::to_owned),
        // One look, so that `recording` is the first of `recordings`.
        recording: recordings.first().cloned(),
        recordings,
        pinned,
        top: ctx
            .view
            .top(TOP)
            .into_iter()
            .map(|mut r| {
                r.frame = bounded(r.frame, MAX_FIELD);
                r
            })
            .collect(),
        counters: [
            ("pinned_polls".into(), stats.pinned_polls),
            ("events".into(), stats.events),
            ("delivered".into(), stats.delivered),
            ("dropped".into(), stats.dropped),
            ("block_in_place".into(), stats.block_in_place),
            ("retracted".into(), stats.retracted),
            ("unwatched_threads".into(), stats.unwatched_threads),
            ("samples".into(), stats.samples),
            ("samples_missed".into(), stats.samples_missed),
            ("samples_discarded".into(), stats.samples_discarded),
            (
                "runtime_stalled_ms".into(),
                stats.runtime_stalled_time.as_millis() as u64,
            ),
            (
                "process_stopped_ms".into(),
                stats.process_stopped_time.as_millis() as u64,
            ),
            ("driver_rescues".into(), stats.driver_rescues),
            ("driver_handovers".into(), stats.driver_handovers),
            // 1: stalls are seen from the workers' states; 0: from the heartbeat.
            ("drivers_seen".into(), u64::from(stats.drivers_seen)),
        ]
        .into_iter()
        // Events each sink with a queue of its own lost (`dropped_otlp`, …).
        .chain(
            ctx.parts
                .drops
                .totals()
                .into_iter()
                .map(|(sink, n)| (format!("dropped_{sink}"), n)),
        )
        .collect(),
    }
}

/// The longest command line a status carries, in bytes (a command line may be megabytes long).
const MAX_COMMAND: usize = 4096;

/// The longest frame, location or operation a status carries, in bytes. With these a status
/// stays under `pinwatch ctl`'s [`client::MAX_REPLY`] up to about a thousand pinned workers.
const MAX_FIELD: usize = 1024;

/// A trace id is 32 hex digits; a longer one (a bug elsewhere) is cut there.
const MAX_TRACE_ID: usize = 32;

/// The request a pin is in, for `status`: its [`request_label`](crate::PinnedEvent::request_label)
/// (`GET /users/{id}`), then its innermost span with its fields — another span inside the
/// request, or the request's own with the concrete uri — so the row says which route, which
/// request and what in it: `GET /users/{id} › db_query{sql=…}`. Bounded.
fn request_of(e: &crate::PinnedEvent) -> Option<String> {
    e.request_span()?;
    let mut s = e.request_label();
    if let Some(inner) = e.innermost_span() {
        s.push_str(" › ");
        s.push_str(&inner.display());
    }
    Some(bounded(s, crate::event::MAX_SPAN_TEXT))
}

/// A pin's victims in brief, for `status` (the description bounded).
fn delayed_of(v: &crate::Victims) -> protocol::Delayed {
    protocol::Delayed {
        measured: v.measured,
        tasks: v.tasks,
        max_wait_ms: v
            .max_wait
            .filter(|_| v.measured)
            // As the recording writes it: microseconds.
            .map(|d| (d.as_secs_f64() * 1e6).round() / 1e3),
        description: v.describe().map(|d| bounded(d, MAX_FIELD)),
    }
}

/// `s` escaped and cut to at most `max` bytes ([`text::bounded`](crate::text::bounded)).
fn bounded(s: String, max: usize) -> String {
    crate::text::bounded(&s, max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::RecordStatus;

    #[test]
    fn status_names_the_request_and_the_innermost_span_bounded() {
        use crate::event::{Reason, State};
        let mut e = crate::PinnedEvent::for_test(1, State::InProgress, Reason::Sleep, 30, 3);
        assert_eq!(request_of(&e), None);
        let span = |name, fields| crate::SpanInfo::for_test(name, "svc", fields);
        e.spans = vec![
            span("conn", &[("peer", "127.0.0.1:4000")]),
            span("request", &[("method", "GET"), ("uri", "/report")]),
        ];
        // The request as the metrics group it (method and route, no id), and the request's
        // own span with the id it served.
        e.spans = vec![
            span("conn", &[("peer", "127.0.0.1:4000")]),
            span(
                "request",
                &[("method", "GET"), ("uri", "/report/42?full=1")],
            ),
        ];
        assert_eq!(
            request_of(&e).as_deref(),
            Some("GET /report/{id} › request{method=GET uri=/report/42?full=1}")
        );
        // And the innermost span with its fields, when it is another one.
        e.spans.push(span("db_query", &[("table", "orders")]));
        assert_eq!(
            request_of(&e).as_deref(),
            Some("GET /report/{id} › db_query{table=orders}")
        );
        // A huge field is cut: a status stays small whatever a service records.
        let long = "x".repeat(10_000);
        e.spans = vec![span("request", &[]), span("db", &[("sql", long.as_str())])];
        let shown = request_of(&e).unwrap();
        assert!(
            shown.len() <= crate::event::MAX_SPAN_TEXT + 3,
            "{}",
            shown.len()
        );
        assert!(shown.starts_with("request › db{sql=xxx") && shown.ends_with('…'));
    }

    /// A running pin's victims, for `status`: measured, the count and the longest wait;
    /// not measured, the count and no wait; the words bounded; a pin without victims (or an
    /// older service) has none, and a status without the field still reads.
    #[test]
    fn status_says_who_waited_behind_each_pin() {
        use crate::event::{Reason, State, Victim, Victims};
        let mut e = crate::PinnedEvent::for_test(1, State::InProgress, Reason::Sleep, 300, 3);
        let victim = |id, wait_ms: Option<u64>| Victim {
            task_id: id,
            spawned_at: Some(crate::event::SourceLocation {
                file: "src/api.rs".into(),
                line: 88,
                column: 5,
            }),
            wait: wait_ms.map(Duration::from_millis),
            worker: Some(0),
            lifo: true,
            spans: vec![crate::SpanInfo::for_test(
                "request",
                "svc",
                &[("uri", &"x".repeat(5000))],
            )],
        };
        e.victims = Some(Victims {
            measured: true,
            tasks: 11,
            total_wait: Some(Duration::from_micros(1_520_500)),
            max_wait: Some(Duration::from_micros(300_250)),
            worst: vec![victim(14, Some(300))],
            queue_depth_max: Some(10),
        });
        let d = delayed_of(e.victims.as_ref().unwrap());
        assert_eq!(
            (d.measured, d.tasks, d.max_wait_ms),
            (true, 11, Some(300.25))
        );
        let words = d.description.unwrap();
        assert!(
            words.starts_with("delayed 11 tasks, the longest 300.2 ms: spawned at src/api.rs:88:5"),
            "{words}"
        );
        assert!(words.len() <= MAX_FIELD, "{}", words.len());
        e.victims = Some(Victims {
            measured: false,
            tasks: 3,
            total_wait: None,
            max_wait: None,
            worst: vec![victim(30, None)],
            queue_depth_max: None,
        });
        let d = delayed_of(e.victims.as_ref().unwrap());
        assert_eq!((d.measured, d.tasks, d.max_wait_ms), (false, 3, None));
        assert!(d.description.unwrap().contains("not measured"));
        // The field is optional both ways.
        let old: protocol::PinnedNow = serde_json::from_value(serde_json::json!({
            "id": 1, "for_ms": 30, "worker": 0, "tid": 1, "task_id": 1, "spawned_at": null,
            "reason": null, "blocking_operation": null, "top_frame": null, "held_locks": 0,
        }))
        .unwrap();
        assert_eq!(old.delayed, None);
        assert!(!serde_json::to_string(&old).unwrap().contains("delayed"));
    }

    /// Several recordings changed the protocol only by adding: an older `pinwatch ctl`'s
    /// `record_stop` (no id, no file) still means "the only one running", a stop with no target
    /// is sent in the form an older service understands, and a status or reply from an
    /// older service (no `recordings`, no ids) still reads.
    #[test]
    fn record_requests_and_replies_stay_compatible() {
        let old: Request = serde_json::from_str(r#"{"cmd":"record_stop"}"#).unwrap();
        assert_eq!(
            old,
            Request::RecordStop {
                id: None,
                path: None
            }
        );
        assert_eq!(
            serde_json::to_string(&old).unwrap(),
            r#"{"cmd":"record_stop"}"#
        );
        let by_id: Request = serde_json::from_str(r#"{"cmd":"record_stop","id":2}"#).unwrap();
        assert_eq!(
            by_id,
            Request::RecordStop {
                id: Some(2),
                path: None
            }
        );
        assert!(serde_json::from_str::<Request>(r#"{"cmd":"record_stop","who":2}"#).is_err());
        // As the service reads a line: the same, and a request of no fields refuses one.
        assert_eq!(
            Request::from_line(r#"{"cmd":"record_stop","id":2}"#).unwrap(),
            by_id
        );
        assert!(Request::from_line(r#"{"cmd":"record_stop","who":2}"#).is_err());
        assert_eq!(
            Request::from_line(r#"{"cmd":"pause"}"#).unwrap(),
            Request::Pause
        );
        for (line, field) in [
            (r#"{"cmd":"status","x":1}"#, "`x`: `status`"),
            (r#"{"cmd":"pause","for":"10s"}"#, "`for`: `pause`"),
            (r#"{"x":1,"cmd":"dump"}"#, "`x`: `dump`"),
            (r#"{"cmd":"record_list","id":0}"#, "`id`: `record_list`"),
            (r#"{"cmd":"resume","cmd2":null}"#, "`cmd2`: `resume`"),
        ] {
            let e = Request::from_line(line).unwrap_err().to_string();
            assert!(
                e.contains(&format!("unknown field {field} takes none")),
                "{line}: {e}"
            );
        }
        let reply: Reply = serde_json::from_str(r#"{"ok":true,"message":"x"}"#).unwrap();
        assert!(reply.recordings.is_none());
        let rec: RecordStatus = serde_json::from_value(serde_json::json!({
            "path": "/tmp/r.jsonl", "events": 1, "bytes": 2, "current_size": 2, "rotations": 0,
            "write_errors": 0, "max_size": null, "max_age_ms": null, "keep": 5,
        }))
        .unwrap();
        assert_eq!((rec.id, rec.startup, rec.started_ms), (None, false, 0));
    }
}
