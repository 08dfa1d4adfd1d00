//! A small HTTP/1.x server on one thread of pinwatch's own (the Prometheus endpoint's): bounded in
//! threads, connections, time and request size whatever its peers do.
//!
//! One thread polls (`poll(2)`) the listener and every connection, all nonblocking: an idle or
//! slow client costs a slot and a file descriptor, never a thread, and never holds up another
//! client. A connection carries one request and is closed after its answer
//! (`Connection: close`). Its request head must arrive within [`HEAD_TIMEOUT`] of the accept
//! (else `408`) and be at most [`MAX_HEAD`] bytes (else `431`); the whole exchange ends within
//! [`DEADLINE`]. At most [`MAX_CONNECTIONS`] are open: one more closes one of the network
//! holding the most connections (an IPv4 /24, an IPv6 /48) when it holds [`CROWD`] or more and,
//! in it, of the peer holding the most (an IPv6 peer is its /64), one already answered first,
//! else its oldest; where no peer there holds two, one already answered, else the oldest still
//! without its request, else the new one (never one being answered; see `pick`), counted and
//! logged. Routing is the caller's: it gets the method, the path and the query. An answer
//! that takes long to make ([`Response::later`]) is made on a thread of its own, and its
//! connection waits for it without holding up the others.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Connections open at once; one more closes one of them (`pick`), or itself.
pub(crate) const MAX_CONNECTIONS: usize = 32;
/// Connections from one network (an IPv4 /24, an IPv6 /48) from which, when it holds the most,
/// a full endpoint makes room there first: fewer are not told from a few clients that share a
/// network (two Prometheus servers, the pods of one node), which a flood spread one connection
/// to a network would otherwise have closed first (helper-88).
const CROWD: usize = 4;
/// Bytes of a request head (request line and headers).
pub(crate) const MAX_HEAD: usize = 8 * 1024;
/// From the accept to the end of the request head.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// From the accept to the connection's close, whatever it is doing.
pub(crate) const DEADLINE: Duration = Duration::from_secs(10);
/// After the answer is written: how long what the client still sends is read and discarded, so
/// that closing with unread bytes does not reset the connection before the client read it.
const LINGER: Duration = Duration::from_secs(1);
/// From the accept to the end of the wait for an answer made on a thread of its own
/// ([`Response::later`]): what is left of [`DEADLINE`] is for writing it, or for saying that it
/// took too long.
pub(crate) const ANSWER_WAIT: Duration = Duration::from_secs(8);
/// Connections accepted per turn of the loop: the ones already open are served between
/// batches, so a burst of new ones cannot evict a scrape whose request has arrived.
const ACCEPT_BATCH: usize = MAX_CONNECTIONS / 4;
/// How long accepting pauses when `accept` fails (out of file descriptors): the pending
/// connection stays in the backlog and would wake `poll` at once, again and again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The request line of a request.
pub(crate) struct Request<'a> {
    /// `GET`, `POST`, …
    pub(crate) method: &'a str,
    /// The target up to `?`.
    pub(crate) path: &'a str,
    /// The target after `?`, or empty.
    pub(crate) query: &'a str,
}

/// An answer.
pub(crate) struct Response {
    status: u16,
    content_type: &'static str,
    allow: Option<&'static str>,
    /// The answer to a `HEAD`: the head of the `GET`'s answer, its `Content-Length` included,
    /// without the body.
    head_only: bool,
    /// `Retry-After`, in seconds.
    retry_after: Option<u64>,
    body: Vec<u8>,
    /// The answer is being made on a thread of its own ([`Response::later`]): this one is only
    /// its placeholder.
    later: Option<Later>,
}

/// An answer being made on a thread of its own.
struct Later {
    answer: mpsc::Receiver<Response>,
    /// The server's end of a socket pair whose other end the thread closes once it has sent
    /// the answer (or failed to): readable then, so `poll` wakes for it.
    ready: UnixStream,
    /// What the client is told when the answer is not made within [`ANSWER_WAIT`].
    late: String,
}

impl Response {
    /// `200 OK` with `body`.
    pub(crate) fn ok(content_type: &'static str, body: Vec<u8>) -> Response {
        Response {
            status: 200,
            content_type,
            allow: None,
            head_only: false,
            retry_after: None,
            body,
            later: None,
        }
    }

    /// An error status with a one-line text body.
    pub(crate) fn error(status: u16, text: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            allow: None,
            head_only: false,
            retry_after: None,
            body: format!("{text}\n").into_bytes(),
            later: None,
        }
    }

    /// `405 Method Not Allowed`, naming the methods that are.
    pub(crate) fn method_not_allowed(allow: &'static str) -> Response {
        Response {
            allow: Some(allow),
            ..Response::error(405, &format!("pinwatch: only {allow} here"))
        }
    }

    /// `503 Service Unavailable` with `Retry-After: seconds`.
    pub(crate) fn busy(seconds: u64, text: &str) -> Response {
        Response {
            retry_after: Some(seconds),
            ..Response::error(503, text)
        }
    }

    /// The answer that `make` returns, made on a thread named `thread` while the server goes
    /// on serving the other connections: for an answer that takes long (a profile of a large
    /// flight recording took seconds, and held up `/metrics` as long; helper-104). Not made
    /// within [`ANSWER_WAIT`] of the connection's accept, the client gets a `503` saying
    /// `late`, and what `make` returns later is thrown away. A thread that cannot be started
    /// is a `503` at once.
    pub(crate) fn later(
        thread: &str,
        late: String,
        make: impl FnOnce() -> Response + Send + 'static,
    ) -> Response {
        let cannot = |e: io::Error| {
            Response::error(
                503,
                &format!("pinwatch: cannot start a thread to make the answer ({e}); try again"),
            )
        };
        let (ready, done) = match UnixStream::pair() {
            Ok(pair) => pair,
            Err(e) => return cannot(e),
        };
        if let Err(e) = ready.set_nonblocking(true) {
            return cannot(e);
        }
        let (send, answer) = mpsc::sync_channel(1);
        let started = std::thread::Builder::new()
            .name(thread.to_owned())
            .spawn(move || {
                let response =
                    std::panic::catch_unwind(AssertUnwindSafe(make)).unwrap_or_else(|_| failed());
                // The connection may have gone (closed, or past its wait): nobody to tell.
                let _ = send.send(response);
                drop(done);
            });
        match started {
            Ok(_) => Response {
                later: Some(Later {
                    answer,
                    ready,
                    late,
                }),
                ..Response::error(503, "")
            },
            Err(e) => cannot(e),
        }
    }

    fn into_bytes(self) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            408 => "Request Timeout",
            431 => "Request Header Fields Too Large",
            500 => "Internal Server Error",
            503 => "Service Unavailable",
            505 => "HTTP Version Not Supported",
            _ => "",
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            self.content_type,
            self.body.len()
        );
        if let Some(allow) = self.allow {
            out.push_str(&format!("Allow: {allow}\r\n"));
        }
        if let Some(s) = self.retry_after {
            out.push_str(&format!("Retry-After: {s}\r\n"));
        }
        out.push_str("\r\n");
        let mut out = out.into_bytes();
        if !self.head_only {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

/// What the server has done, for its log.
#[derive(Default, Debug)]
pub(crate) struct Counters {
    /// Connections accepted.
    pub(crate) accepted: AtomicU64,
    /// Connections closed to make room for a newer one.
    pub(crate) evicted: AtomicU64,
    /// Connections closed because their head or their whole exchange took too long.
    pub(crate) timed_out: AtomicU64,
}

/// The server; dropping it closes the listener and every connection, and joins its thread.
pub(crate) struct Server {
    /// Its end of a socket pair: dropped, it wakes the thread, which then returns.
    waker: Option<UnixStream>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl Server {
    /// Serves `listener` on a thread named `name`, answering each request with `handle`.
    pub(crate) fn start(
        listener: TcpListener,
        name: &str,
        handle: impl FnMut(&Request<'_>) -> Response + Send + 'static,
    ) -> io::Result<Server> {
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let (waker, woken) = UnixStream::pair()?;
        woken.set_nonblocking(true)?;
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || run(&listener, &woken, handle, &Counters::default()))?;
        Ok(Server {
            waker: Some(waker),
            thread: Some(thread),
            addr,
        })
    }

    /// Where it listens.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.waker.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

enum Phase {
    /// Reading the request head.
    Head,
    /// Writing the answer.
    Write { out: Vec<u8>, sent: usize },
    /// Answer written and our side shut: reading what the client still sends, until it closes.
    Drain { until: Instant },
    /// Waiting for an answer made on a thread of its own ([`Response::later`]).
    Wait { later: Later, head_only: bool },
}

struct Conn {
    stream: TcpStream,
    /// Who connected: evictions take from the peer holding the most connections.
    peer: std::net::IpAddr,
    opened: Instant,
    head: Vec<u8>,
    phase: Phase,
}

/// What became of a connection in one turn.
#[derive(PartialEq)]
enum Turn {
    Open,
    Closed,
}

impl Conn {
    /// What `poll` waits for: the client's socket, or the end of a [`Later`]'s thread.
    fn pollfd(&self) -> libc::pollfd {
        match &self.phase {
            Phase::Head | Phase::Drain { .. } => pollfd(self.stream.as_raw_fd(), libc::POLLIN),
            Phase::Write { .. } => pollfd(self.stream.as_raw_fd(), libc::POLLOUT),
            Phase::Wait { later, .. } => pollfd(later.ready.as_raw_fd(), libc::POLLIN),
        }
    }

    /// When it must next be looked at even if nothing happens on it.
    fn deadline(&self) -> Instant {
        match self.phase {
            Phase::Head => self.opened + HEAD_TIMEOUT,
            Phase::Write { .. } => self.opened + DEADLINE,
            Phase::Drain { until } => until,
            Phase::Wait { .. } => self.opened + ANSWER_WAIT,
        }
    }

    /// Moves it on after `poll` said `revents` of it.
    fn turn(
        &mut self,
        revents: libc::c_short,
        now: Instant,
        handle: &mut dyn FnMut(&Request<'_>) -> Response,
        counters: &Counters,
    ) -> Turn {
        if revents != 0 {
            let turn = match self.phase {
                Phase::Head => self.read_head(now, handle),
                Phase::Write { .. } => self.write(now),
                Phase::Drain { .. } => self.drain(),
                Phase::Wait { .. } => self.take_answer(now),
            };
            if turn == Turn::Closed {
                return turn;
            }
        }
        if now < self.deadline() {
            return Turn::Open;
        }
        match self.phase {
            Phase::Head => {
                counters.timed_out.fetch_add(1, Ordering::Relaxed);
                // Answered like any request (then lingering): the client learns why.
                self.answer(Response::error(
                    408,
                    "pinwatch: the request came too slowly",
                ));
                self.write(now)
            }
            Phase::Write { .. } => {
                counters.timed_out.fetch_add(1, Ordering::Relaxed);
                Turn::Closed
            }
            Phase::Drain { .. } => Turn::Closed,
            Phase::Wait { ref later, .. } => {
                counters.timed_out.fetch_add(1, Ordering::Relaxed);
                let late = Response::error(503, &later.late);
                self.answer(late);
                self.write(now)
            }
        }
    }

    /// The thread making the answer has ended (or `poll` woke for nothing): the answer, once
    /// it is there.
    fn take_answer(&mut self, now: Instant) -> Turn {
        let Phase::Wait { later, head_only } = &self.phase else {
            return Turn::Open;
        };
        let head_only = *head_only;
        let mut response = match later.answer.try_recv() {
            Ok(response) => response,
            Err(mpsc::TryRecvError::Empty) => return Turn::Open,
            Err(mpsc::TryRecvError::Disconnected) => failed(),
        };
        response.head_only = head_only;
        self.answer(response);
        self.write(now)
    }

    fn read_head(
        &mut self,
        now: Instant,
        handle: &mut dyn FnMut(&Request<'_>) -> Response,
    ) -> Turn {
        let mut buf = [0u8; 4096];
        loop {
            let room = (MAX_HEAD + 1 - self.head.len()).min(buf.len());
            match self.stream.read(&mut buf[..room]) {
                Ok(0) => return Turn::Closed,
                Ok(n) => {
                    let from = self.head.len().saturating_sub(3);
                    self.head.extend_from_slice(&buf[..n]);
                    if let Some(end) = head_end(&self.head[from..]) {
                        let response = respond(&self.head[..from + end], handle);
                        self.answer(response);
                        return self.write(now);
                    }
                    if self.head.len() > MAX_HEAD {
                        let text =
                            format!("pinwatch: the request head is longer than {MAX_HEAD} bytes");
                        self.answer(Response::error(431, &text));
                        return self.write(now);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Turn::Open,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Turn::Closed,
            }
        }
    }

    fn answer(&mut self, mut response: Response) {
        self.head = Vec::new();
        self.phase = match response.later.take() {
            Some(later) => Phase::Wait {
                later,
                head_only: response.head_only,
            },
            None => Phase::Write {
                out: response.into_bytes(),
                sent: 0,
            },
        };
    }

    fn write(&mut self, now: Instant) -> Turn {
        let Phase::Write { out, sent } = &mut self.phase else {
            return Turn::Open;
        };
        while *sent < out.len() {
            match self.stream.write(&out[*sent..]) {
                Ok(0) => return Turn::Closed,
                Ok(n) => *sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Turn::Open,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Turn::Closed,
            }
        }
        let _ = self.stream.shutdown(Shutdown::Write);
        self.phase = Phase::Drain {
            until: (now + LINGER).min(self.opened + DEADLINE),
        };
        Turn::Open
    }

    fn drain(&mut self) -> Turn {
        let mut buf = [0u8; 4096];
        // A bounded amount per turn: a client that floods is cut off by the linger time, and
        // holds up nobody meanwhile.
        for _ in 0..16 {
            match self.stream.read(&mut buf) {
                Ok(0) => return Turn::Closed,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Turn::Open,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Turn::Closed,
            }
        }
        Turn::Open
    }
}

/// The length of the head at the start of `bytes` (through its blank line), if it is all there.
fn head_end(bytes: &[u8]) -> Option<usize> {
    (0..bytes.len()).find_map(|i| {
        let rest = &bytes[i..];
        if rest.starts_with(b"\r\n\r\n") {
            Some(i + 4)
        } else if rest.starts_with(b"\n\n") {
            Some(i + 2)
        } else {
            None
        }
    })
}

/// The answer to a complete request head.
fn respond(head: &[u8], handle: &mut dyn FnMut(&Request<'_>) -> Response) -> Response {
    let bad = || Response::error(400, "pinwatch: malformed request; try GET /metrics");
    let Ok(text) = std::str::from_utf8(head) else {
        return bad();
    };
    let Some(line) = text.trim_start_matches(['\r', '\n']).lines().next() else {
        return bad();
    };
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return bad();
    };
    if !version.starts_with("HTTP/") || method.is_empty() || !target.starts_with('/') {
        return bad();
    }
    let mut response = if version != "HTTP/1.0" && version != "HTTP/1.1" {
        Response::error(505, "pinwatch: HTTP/1.0 and HTTP/1.1 only")
    } else {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let request = Request {
            method,
            path,
            query,
        };
        std::panic::catch_unwind(AssertUnwindSafe(|| handle(&request))).unwrap_or_else(|_| failed())
    };
    // The answer to a `HEAD` has no body (RFC 9110, 9.3.2), whichever it is.
    response.head_only = method == "HEAD";
    response
}

/// The answer of a handler that panicked.
fn failed() -> Response {
    Response::error(500, "pinwatch: the handler failed (this is a bug)")
}

fn pollfd(fd: libc::c_int, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// The server's loop, until `woken` reads end-of-file (the [`Server`] was dropped).
fn run(
    listener: &TcpListener,
    woken: &UnixStream,
    mut handle: impl FnMut(&Request<'_>) -> Response,
    counters: &Counters,
) {
    let mut conns: Vec<Conn> = Vec::with_capacity(MAX_CONNECTIONS);
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(MAX_CONNECTIONS + 2);
    let mut accept_paused_until: Option<Instant> = None;
    let mut last_warning: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if accept_paused_until.is_some_and(|t| now >= t) {
            accept_paused_until = None;
        }
        fds.clear();
        fds.push(pollfd(woken.as_raw_fd(), libc::POLLIN));
        // A negative descriptor is ignored by poll: no accepting while paused.
        let listen_fd = match accept_paused_until {
            None => listener.as_raw_fd(),
            Some(_) => -1,
        };
        fds.push(pollfd(listen_fd, libc::POLLIN));
        let mut wake_at = accept_paused_until;
        for c in &conns {
            fds.push(c.pollfd());
            let d = c.deadline();
            wake_at = Some(wake_at.map_or(d, |w| w.min(d)));
        }
        let timeout = match wake_at {
            None => -1,
            Some(t) => {
                let ms = t.saturating_duration_since(now).as_micros().div_ceil(1000);
                libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
            }
        };
        // SAFETY: `fds` is a live, initialised array of `fds.len()` pollfd structs that poll
        // may write `revents` into; it is not touched elsewhere during the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        if n < 0 {
            if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                // ENOMEM: the kernel could not allocate its poll tables; try again shortly.
                std::thread::sleep(Duration::from_millis(10));
            }
            continue;
        }
        if fds[0].revents != 0 {
            return;
        }
        let now = Instant::now();
        // The connections already open first: a request that has arrived is answered before
        // new arrivals could evict it.
        let mut i = 2;
        conns.retain_mut(|c| {
            let revents = fds[i].revents;
            i += 1;
            c.turn(revents, now, &mut handle, counters) == Turn::Open
        });
        if fds[1].revents == 0 {
            continue;
        }
        for _ in 0..ACCEPT_BATCH {
            match listener.accept() {
                Ok((stream, peer)) => {
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    counters.accepted.fetch_add(1, Ordering::Relaxed);
                    if conns.len() >= MAX_CONNECTIONS {
                        // None: every connection is being answered: the new one waits its
                        // turn by being closed (the client retries), not an answer cut off.
                        let victim = victim(&conns);
                        if let Some(v) = victim {
                            conns.remove(v);
                        }
                        let evicted = counters.evicted.fetch_add(1, Ordering::Relaxed) + 1;
                        if super::warning_due(&mut last_warning, now) {
                            // Through the log thread: a blocked log must not stop the
                            // endpoint.
                            crate::export::say(
                                tracing::Level::WARN,
                                format!(
                                    "the Prometheus endpoint has {MAX_CONNECTIONS} connections \
                                     open, its limit: closed {} ({evicted} so far); something \
                                     opens or holds connections to it faster than it is \
                                     scraped",
                                    if victim.is_some() {
                                        "one to make room"
                                    } else {
                                        "a new one"
                                    }
                                ),
                            );
                        }
                        if victim.is_none() {
                            // Closed as it is dropped: never more than the limit held open.
                            continue;
                        }
                    }
                    conns.push(Conn {
                        stream,
                        peer: peer.ip(),
                        opened: now,
                        head: Vec::new(),
                        phase: Phase::Head,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                    ) => {}
                Err(_) => {
                    // EMFILE, ENFILE, ENOBUFS: the connection waits in the backlog.
                    accept_paused_until = Some(now + ACCEPT_BACKOFF);
                    break;
                }
            }
        }
    }
}

/// Which connection to close to make room for a new one, if any may be ([`pick`]).
fn victim(conns: &[Conn]) -> Option<usize> {
    let stages: Vec<(std::net::IpAddr, Stage)> = conns
        .iter()
        .map(|c| {
            let stage = match c.phase {
                Phase::Head => Stage::Head,
                Phase::Write { .. } | Phase::Wait { .. } => Stage::Answering,
                Phase::Drain { .. } => Stage::Answered,
            };
            (c.peer, stage)
        })
        .collect();
    pick(&stages)
}

/// Where a connection is, for [`pick`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Its request head is being read (or nothing has come yet).
    Head,
    /// Its answer is being written.
    Answering,
    /// Answered; what the client still sends is being read until it closes.
    Answered,
}

/// Which of `conns` (peer and stage, oldest first) to close for a new one; `None`: the new one.
/// Never one being answered. First the network holding the most connections, when it holds
/// [`CROWD`] or more, then in it the peer holding the most, when it holds two or more — a flood from one
/// address, or spread over a network's addresses, costs that address or network, not a
/// scraper elsewhere, whatever each flood connection has sent: of that peer, one already
/// answered first, else its oldest (not one that has sent nothing: a flood that sends a byte
/// on each connection would keep its room and close every scraper's connection accepted
/// before its request was read). Where no peer there holds two (a flood spread over many
/// addresses), one already answered, else the oldest still without its request (connections
/// are kept in accept order): a scraper's connection, whose
/// request comes at once, keeps its room until [`MAX_CONNECTIONS`] newer ones have come (the
/// requests that have arrived are read before each batch of accepts), so a flood spread over
/// as many networks as it opens connections must open that many in the time a scraper's
/// request takes to follow its connection to keep it out — whether it holds its connections or
/// opens new ones as fast as it closes them (helper-85: with the new connection closed
/// instead, a flood from 500 addresses, each closed after 0.6 s, kept 18–19 of 20 scrapes out;
/// now none; a flood churning from four /24s let 8–13 of 20 scrapes be answered while only
/// addresses were counted, all 20 now). `None` only while every place is being answered.
/// An IPv6 peer is its /64, which one host is given whole, and its network its /48; an IPv4
/// peer is its address, and its network its /24; one mapped or translated into IPv6
/// (`::ffff:a.b.c.d`, NAT64's `64:ff9b::a.b.c.d`) is its IPv4 address.
fn pick(conns: &[(std::net::IpAddr, Stage)]) -> Option<usize> {
    // The IPv4 addresses RFC 6052 keeps out of the well-known prefix: the special-purpose
    // blocks (RFC 6890), multicast and the reserved ones.
    const NOT_GLOBAL: [(u32, u32); 14] = [
        (0x0000_0000, 8),  // 0.0.0.0/8
        (0x0a00_0000, 8),  // 10.0.0.0/8
        (0x6440_0000, 10), // 100.64.0.0/10 (carrier-grade NAT)
        (0x7f00_0000, 8),  // 127.0.0.0/8
        (0xa9fe_0000, 16), // 169.254.0.0/16
        (0xac10_0000, 12), // 172.16.0.0/12
        (0xc000_0000, 24), // 192.0.0.0/24
        (0xc000_0200, 24), // 192.0.2.0/24
        (0xc0a8_0000, 16), // 192.168.0.0/16
        (0xc612_0000, 15), // 198.18.0.0/15
        (0xc633_6400, 24), // 198.51.100.0/24
        (0xcb00_7100, 24), // 203.0.113.0/24
        (0xe000_0000, 4),  // 224.0.0.0/4
        (0xf000_0000, 4),  // 240.0.0.0/4, 255.255.255.255 among them
    ];
    let global = |v6: std::net::Ipv6Addr| {
        let v4 = u128::from(v6) as u32;
        !NOT_GLOBAL
            .iter()
            .any(|&(net, bits)| v4 >> (32 - bits) == net >> (32 - bits))
    };
    let key = |ip: std::net::IpAddr| match ip {
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => std::net::IpAddr::V4(v4),
            // NAT64's well-known prefix (64:ff9b::/96, RFC 6052): one IPv4 client each, of
            // the global ones it may carry (a loopback or private one there is forged).
            None if v6.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0] && global(v6) => {
                std::net::IpAddr::V4((u128::from(v6) as u32).into())
            }
            None => std::net::IpAddr::V6((u128::from(v6) & !0u128 << 64).into()),
        },
        v4 => v4,
    };
    // A peer's network: an IPv4 address's /24, an IPv6 peer's /48 (a site's usual prefix).
    let network = |peer: std::net::IpAddr| match peer {
        std::net::IpAddr::V4(v4) => std::net::IpAddr::V4((u32::from(v4) & !0xff).into()),
        std::net::IpAddr::V6(v6) => std::net::IpAddr::V6((u128::from(v6) & !0u128 << 80).into()),
    };
    let peers: Vec<std::net::IpAddr> = conns.iter().map(|c| key(c.0)).collect();
    let nets: Vec<std::net::IpAddr> = peers.iter().map(|&p| network(p)).collect();
    let held = |of: &[std::net::IpAddr], i: usize| of.iter().filter(|&&k| k == of[i]).count();
    let may_close = |i: usize| conns[i].1 != Stage::Answering;
    let closable = || (0..conns.len()).filter(|&i| may_close(i));
    // The network holding the most, where one holds a crowd; in it (or among all), the peer
    // holding the most, where one holds two or more.
    let most_net = closable().map(|i| held(&nets, i)).max()?;
    let in_net = |i: usize| most_net < CROWD || held(&nets, i) == most_net;
    let most = closable()
        .filter(|&i| in_net(i))
        .map(|i| held(&peers, i))
        .max()?;
    let of = |i: usize| may_close(i) && in_net(i) && (most < 2 || held(&peers, i) == most);
    // In accept order: among equals, the first is the oldest.
    let first = |stage: Option<Stage>| {
        (0..conns.len()).find(|&i| of(i) && stage.is_none_or(|s| conns[i].1 == s))
    };
    let answered = first(Some(Stage::Answered));
    if most < 2 {
        return answered.or_else(|| first(Some(Stage::Head)));
    }
    answered.or_else(|| first(None))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server on a free loopback port that answers every request with `metrics`.
    fn metrics_server() -> (Server, SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = Server::start(listener, "test-http", |_: &Request<'_>| {
            Response::ok("text/plain", b"metrics".to_vec())
        })
        .unwrap();
        (server, addr)
    }

    #[test]
    fn reads_the_request_line() {
        let mut seen = Vec::new();
        let mut handle = |r: &Request<'_>| {
            seen.push(format!("{} {} {}", r.method, r.path, r.query));
            Response::ok("text/plain", b"hi".to_vec())
        };
        for (head, status) in [
            (&b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"[..], 200),
            (b"\r\nGET /debug/pprof/pinned?seconds=5 HTTP/1.0\n\n", 200),
            (b"GET /metrics HTTP/2.0\r\n\r\n", 505),
            (b"GET  /metrics HTTP/1.1\r\n\r\n", 400),
            (b"GET metrics HTTP/1.1\r\n\r\n", 400),
            (b"GET /metrics\r\n\r\n", 400),
            (b"\xff\xfe /metrics HTTP/1.1\r\n\r\n", 400),
        ] {
            let r = respond(head, &mut handle);
            assert_eq!(r.status, status, "{:?}", String::from_utf8_lossy(head));
        }
        // A HEAD's answer is the handler's without its body: the length it would have, no bytes.
        let r = respond(b"HEAD /metrics HTTP/1.1\r\n\r\n", &mut handle);
        assert_eq!(
            seen,
            [
                "GET /metrics ",
                "GET /debug/pprof/pinned seconds=5",
                "HEAD /metrics "
            ]
        );
        let bytes = String::from_utf8(r.into_bytes()).unwrap();
        assert!(bytes.starts_with("HTTP/1.1 200 OK\r\n"), "{bytes}");
        assert!(bytes.contains("Content-Length: 2\r\n"), "{bytes}");
        assert!(bytes.ends_with("\r\n\r\n"), "{bytes}");
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nrest"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n"), None);
    }

    /// A flood of connections from one address, each holding a byte of a request, takes its room
    /// from that address: a scraper elsewhere that connected first and has not sent its request
    /// yet keeps its connection, and is answered. (Room was taken from connections that had
    /// sent nothing: the scraper's, and not the flood's.)
    #[test]
    fn a_flood_from_one_peer_does_not_evict_another_peers_scrape() {
        let (server, addr) = metrics_server();
        let mut scraper = TcpStream::connect(addr).unwrap();
        const FLOOD: usize = 64;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let flood: Vec<TcpStream> = rt.block_on(async {
            let mut v = Vec::new();
            for _ in 0..FLOOD {
                let s = tokio::net::TcpSocket::new_v4().unwrap();
                s.bind("127.0.0.2:0".parse().unwrap()).unwrap();
                let mut c = s.connect(addr).await.unwrap().into_std().unwrap();
                // One byte of a request, held: a fresh socket takes it at once.
                assert_eq!(c.write(b"G").unwrap(), 1);
                v.push(c);
            }
            v
        });
        // Ordered by the server's own doing: the oldest flood connections are closed to make
        // room (end of file on their side), all but the room left beside the scraper.
        let evicted = FLOOD - (MAX_CONNECTIONS - 1);
        for (k, mut c) in flood.iter().take(evicted).enumerate() {
            c.set_nonblocking(false).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut byte = [0u8; 1];
            assert!(
                matches!(c.read(&mut byte), Ok(0) | Err(_)),
                "flood connection {k} was not closed"
            );
        }
        scraper
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        scraper
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut answer = Vec::new();
        let _ = scraper.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
        assert!(answer.ends_with("metrics"), "{answer:?}");
        drop(flood);
        drop(server);
    }

    /// A flood spread over as many addresses as the endpoint has places, each holding one
    /// connection that has sent nothing: a scrape after it takes the place of the oldest, which
    /// is closed, and is answered. Never more than [`MAX_CONNECTIONS`] held (helper-84: the new
    /// one was kept besides, and a flood from many addresses held 550 open), and never a scrape
    /// shut out by connections that have not sent their request (helper-85: closing the new one
    /// instead let a flood that keeps every place young keep scrapes out).
    #[test]
    fn a_full_endpoint_makes_room_and_holds_no_more_than_its_limit() {
        let (server, addr) = metrics_server();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let connect = |ip: String| -> TcpStream {
            rt.block_on(async {
                let s = tokio::net::TcpSocket::new_v4().unwrap();
                s.bind(format!("{ip}:0").parse().unwrap()).unwrap();
                s.connect(addr).await.unwrap().into_std().unwrap()
            })
        };
        let flood: Vec<TcpStream> = (1..=MAX_CONNECTIONS)
            .map(|k| connect(format!("127.0.1.{k}")))
            .collect();
        let mut scrape = connect("127.0.2.1".into());
        scrape.set_nonblocking(false).unwrap();
        scrape
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        scrape
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut answer = Vec::new();
        scrape.read_to_end(&mut answer).unwrap();
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
        // Its place was made before its request was read: the close is on its way first.
        // (On a machine so slow that the flood's heads timed out, those were answered `408`
        // and closed: neither held nor made room.)
        let (mut held, mut closed) = (0, Vec::new());
        for (k, c) in flood.iter().enumerate() {
            let mut byte = [0u8; 1];
            // Set up non-blocking by tokio: one still held would block.
            match (&mut &*c).read(&mut byte) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => held += 1,
                Ok(0) | Err(_) => closed.push(k),
                Ok(_) => {}
            }
        }
        assert!(
            held < MAX_CONNECTIONS,
            "answered with all {MAX_CONNECTIONS} places held by the flood"
        );
        assert!(
            closed.iter().all(|&k| k == 0),
            "closed {closed:?}, not the oldest"
        );
        drop(flood);
        drop(server);
    }

    /// Which connection makes room, from where each one is and who holds it.
    #[test]
    fn the_peer_holding_the_most_connections_makes_room_oldest_first() {
        use Stage::*;
        let (a, b): (std::net::IpAddr, std::net::IpAddr) =
            ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
        // A scraper's connection not read yet, beside a flood from elsewhere that sent a byte
        // on each of its connections: the flood's oldest goes, not the scraper's.
        assert_eq!(pick(&[(a, Head), (b, Head), (b, Head), (b, Head)]), Some(1));
        // A flood spread over many addresses, one connection each: the new one takes the place
        // of the oldest still without its request.
        let spread: Vec<_> = (1..=4u8)
            .map(|i| (std::net::IpAddr::from([127, 0, 1, i]), Head))
            .collect();
        assert_eq!(pick(&[&spread[..], &[(a, Head)]].concat()), Some(0));
        // (Each peer holding one, the oldest goes: where two were taken for one peer, the
        // older of those two would, below.)
        // Unless one there is answered already.
        let answered: Vec<_> = spread.iter().map(|(ip, _)| (*ip, Answered)).collect();
        assert_eq!(
            pick(&[&[(a, Head)][..], &spread[..3], &answered[3..]].concat()),
            Some(4)
        );
        // The network holding the most goes first: a flood spread over a /24's addresses, or
        // over several /24s, takes its room from itself, and a scrape answered in another
        // network keeps its linger (until every network holds one).
        assert_eq!(
            pick(&[&[(a, Head)][..], &spread, &[(b, Answered)]].concat()),
            Some(1)
        );
        let four_nets: Vec<_> = (3..=6u8)
            .flat_map(|n| (1..=4u8).map(move |i| (std::net::IpAddr::from([127, 0, n, i]), Head)))
            .collect();
        assert_eq!(pick(&[&[(a, Head)][..], &four_nets].concat()), Some(1));
        assert_eq!(
            pick(&[&four_nets[..], &[(a, Head), (b, Answered)]].concat()),
            Some(0)
        );
        // In the scraper's own network, the peer holding the most.
        let c: std::net::IpAddr = "127.0.0.3".parse().unwrap();
        assert_eq!(
            pick(&[
                (a, Head),
                (b, Head),
                (c, Head),
                (c, Head),
                (spread[0].0, Head)
            ]),
            Some(2)
        );
        // Each network holding one: as if each held one peer. Two or three clients sharing a
        // network are no crowd (helper-88: two scrapers in one /24 were closed first, before
        // a flood of one connection from each of 30 other /24s).
        let one_each: Vec<_> = (1..=30u8)
            .map(|n| (std::net::IpAddr::from([10, n, 0, 1]), Head))
            .collect();
        assert_eq!(pick(&[&[(a, Head)][..], &one_each].concat()), Some(0));
        for scrapers in [&[a, b][..], &[a, b, c]] {
            let scrapes: Vec<_> = scrapers.iter().map(|&ip| (ip, Head)).collect();
            assert_eq!(pick(&[&one_each[..], &scrapes].concat()), Some(0));
        }
        // An IPv6 host's /64 is one peer; an IPv4-mapped address is its IPv4 one.
        let v6 = |last: u16| std::net::IpAddr::from([0x2001, 0xdb8, 0, 1, 0, 0, 0, last]);
        assert_eq!(pick(&[(a, Head), (v6(1), Head), (v6(2), Head)]), Some(1));
        // Another /64 is another peer, of the same network when in the same /48.
        let other = |net: u16| std::net::IpAddr::from([0x2001, 0xdb8, 0, net, 0, 0, 0, 1]);
        assert_eq!(pick(&[(a, Head), (v6(1), Head), (other(2), Head)]), Some(0));
        let crowd: Vec<_> = (2..=5).map(|n| (other(n), Head)).collect();
        assert_eq!(pick(&[&[(a, Head)][..], &crowd].concat()), Some(1));
        let elsewhere = |n: u16| std::net::IpAddr::from([0x2001, 0xdb8, n, 1, 0, 0, 0, 1]);
        let spread: Vec<_> = (1..=4).map(|n| (elsewhere(n), Head)).collect();
        assert_eq!(pick(&[&[(a, Head)][..], &spread].concat()), Some(0));
        let mapped: std::net::IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert_eq!(pick(&[(b, Head), (a, Head), (mapped, Head)]), Some(1));
        // Clients behind NAT64 are their IPv4 addresses, not one /64.
        let nat64 = |v4: &str| {
            format!("64:ff9b::{v4}")
                .parse::<std::net::IpAddr>()
                .unwrap()
        };
        let (x, y) = (nat64("8.8.8.8"), nat64("1.1.1.1"));
        assert_eq!(pick(&[(b, Head), (x, Head), (y, Head)]), Some(0));
        assert_eq!(pick(&[(b, Head), (x, Head), (x, Head)]), Some(1));
        // A loopback address there, or any other not global, is forged: not the scraper's
        // own, so its peer holds one.
        assert_eq!(
            pick(&[(x, Head), (a, Head), (nat64("127.0.0.1"), Head)]),
            Some(0)
        );
        let cgnat: std::net::IpAddr = "100.64.1.2".parse().unwrap();
        for forged in ["100.64.1.2", "0.0.0.1", "198.18.0.1", "240.0.0.1"] {
            let own: std::net::IpAddr = forged.parse().unwrap();
            assert_eq!(
                pick(&[(x, Head), (own, Head), (nat64(forged), Head)]),
                Some(0),
                "{forged}"
            );
        }
        // A global one is its IPv4 client.
        assert_eq!(
            pick(&[(cgnat, Head), (x, Head), (nat64("8.8.8.8"), Head)]),
            Some(1)
        );
        // The same flood from the scraper's own address: its oldest goes, not the newest.
        assert_eq!(pick(&[(a, Head), (a, Head), (a, Head)]), Some(0));
        // One answered already goes first; one being answered never.
        assert_eq!(pick(&[(b, Head), (b, Answered)]), Some(1));
        assert_eq!(pick(&[(a, Answering), (b, Answering)]), None);
        // The only one that may be closed is its peer's only one: it makes room.
        assert_eq!(pick(&[(b, Answering), (b, Answering), (a, Head)]), Some(2));
        // A tie of two or more each: the oldest of them.
        assert_eq!(pick(&[(a, Head), (b, Head), (a, Head), (b, Head)]), Some(0));
        assert_eq!(pick(&[]), None);
    }

    /// An answer made on a thread of its own holds up no other connection: `/metrics` is
    /// answered while it is being made, and it is written once made; one not made within
    /// [`ANSWER_WAIT`] is a `503` saying so. Ordered by channels: the thread making it waits
    /// until the test lets it go.
    #[test]
    fn an_answer_made_later_holds_up_no_other_connection() {
        use std::sync::{Arc, Mutex};
        type Gate = Arc<Mutex<Option<mpsc::Receiver<()>>>>;
        let gate: Gate = Arc::default();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = Server::start(listener, "test-http", {
            let gate = gate.clone();
            move |r: &Request<'_>| {
                if r.path != "/slow" {
                    return Response::ok("text/plain", b"metrics".to_vec());
                }
                let go = gate.lock().unwrap().take().unwrap();
                Response::later("test-later", "too slow".into(), move || {
                    let _ = go.recv();
                    Response::ok("text/plain", b"made".to_vec())
                })
            }
        })
        .unwrap();
        let ask = |path: &str| {
            let mut c = TcpStream::connect(addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            write!(c, "GET {path} HTTP/1.0\r\n\r\n").unwrap();
            c
        };
        let answer = |mut c: TcpStream| {
            let mut b = String::new();
            c.read_to_string(&mut b).unwrap();
            b
        };

        let (go, wait) = mpsc::channel();
        *gate.lock().unwrap() = Some(wait);
        let slow = ask("/slow");
        // The slow one's request is read before this one is accepted (the open connections
        // are served first), and its answer is not made yet.
        let metrics = answer(ask("/metrics"));
        assert!(metrics.ends_with("\r\n\r\nmetrics"), "{metrics}");
        go.send(()).unwrap();
        let made = answer(slow);
        assert!(made.starts_with("HTTP/1.1 200 OK\r\n"), "{made}");
        assert!(made.ends_with("\r\n\r\nmade"), "{made}");

        // Never let go while the connection waits: it is told, past ANSWER_WAIT.
        let (go, wait) = mpsc::channel();
        *gate.lock().unwrap() = Some(wait);
        let late = answer(ask("/slow"));
        assert!(late.starts_with("HTTP/1.1 503 "), "{late}");
        assert!(late.ends_with("\r\n\r\ntoo slow\n"), "{late}");
        drop(go);
        drop(server);
    }

    #[test]
    fn a_handler_that_panics_gets_a_500() {
        let r = respond(
            b"GET / HTTP/1.1\r\n\r\n",
            &mut |_: &Request<'_>| -> Response { panic!("boom") },
        );
        assert_eq!(r.status, 500);
    }
}
