//! The Prometheus endpoint (`PINWATCH_PROMETHEUS_ADDR`) against hostile peers, in this process
//! so that its threads and file descriptors can be counted: a thousand idle connections, a
//! client that sends its request a byte at a time, an oversized request head, wrong paths and
//! methods. None of them adds a thread or more than a bounded number of descriptors, and a real
//! scrape is answered meanwhile and afterwards. One test: the counts are the process's.
#![cfg(feature = "prometheus")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use pinwatch::Control;

const LONG: Duration = Duration::from_secs(30);
/// Idle connections opened at once.
const IDLE: usize = 1000;
/// The server's limit on open connections (`MAX_CONNECTIONS` in `export/http.rs`).
const MAX_CONNECTIONS: usize = 32;

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

/// Sends `bytes` on a new connection and reads the answer to its end.
fn exchange(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect_timeout(&addr, LONG).unwrap();
    s.set_read_timeout(Some(LONG)).unwrap();
    s.set_write_timeout(Some(LONG)).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out)
        .unwrap_or_else(|e| panic!("answer to {:?}: {e}", String::from_utf8_lossy(bytes)));
    String::from_utf8_lossy(&out).into_owned()
}

/// `GET /metrics`, which must answer with pinwatch's metrics; how long it took.
fn scrape(addr: SocketAddr) -> Duration {
    let t0 = Instant::now();
    let answer = exchange(
        addr,
        b"GET /metrics HTTP/1.1\r\nHost: pinwatch\r\nConnection: close\r\n\r\n",
    );
    let took = t0.elapsed();
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(answer.contains("\npinwatch_workers 2\n"), "{answer}");
    took
}

/// Lets this process open `n` more descriptors than it has.
fn allow_descriptors(n: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit for getrlimit to fill.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    let want = (count("/proc/self/fd") as u64 + n).min(lim.rlim_max);
    if lim.rlim_cur < want {
        lim.rlim_cur = want;
        // SAFETY: `lim` is a valid rlimit, its soft limit within its hard one.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    }
    lim.rlim_cur
}

#[test]
fn hostile_peers_cost_no_thread_and_a_bounded_number_of_descriptors() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let (rt, detector) = pinwatch::Builder::new()
        .tracing(false)
        .control(Control::Off)
        .prometheus_addr(addr)
        .build(tokio::runtime::Builder::new_multi_thread().worker_threads(2))
        .unwrap();
    let first = scrape(addr);
    let threads_before = count("/proc/self/task");
    let fds_before = count("/proc/self/fd");

    // A thousand connections that never send a byte.
    let limit = allow_descriptors(IDLE as u64 + 200);
    assert!(
        limit >= (fds_before + IDLE + 100) as u64,
        "RLIMIT_NOFILE's hard limit {limit} is too low for {IDLE} connections"
    );
    let idle: Vec<TcpStream> = (0..IDLE)
        .map(|i| {
            TcpStream::connect_timeout(&addr, LONG)
                .unwrap_or_else(|e| panic!("idle connection {i}: {e}"))
        })
        .collect();
    // A scrape meanwhile: the server took in every connection before it (they were queued
    // first), and still answers.
    let during = scrape(addr);
    let threads = count("/proc/self/task");
    let fds = count("/proc/self/fd");
    eprintln!(
        "{IDLE} idle connections: threads {threads_before} -> {threads}, descriptors \
         {fds_before} -> {fds} (this test's own {IDLE} among them); scrape {first:?} before, \
         {during:?} meanwhile"
    );
    assert!(
        threads <= threads_before + 1,
        "{IDLE} idle connections took the threads from {threads_before} to {threads}"
    );
    assert!(
        fds <= fds_before + IDLE + MAX_CONNECTIONS + 8,
        "{IDLE} idle connections took the server's descriptors from {fds_before} to {} (at \
         most {MAX_CONNECTIONS} connections)",
        fds - IDLE
    );
    assert!(during < LONG, "a scrape took {during:?}");

    // A client that sends its request head a byte at a time is answered 408 and closed when
    // its head is late (5 s), while a scrape is answered at once.
    let mut slow = TcpStream::connect_timeout(&addr, LONG).unwrap();
    slow.set_read_timeout(Some(LONG)).unwrap();
    let mut trickle = slow.try_clone().unwrap();
    let (started, first_byte) = mpsc::channel();
    let trickler = std::thread::spawn(move || {
        let head = b"GET /metrics HTTP/1.1\r\nX-Slow: "
            .iter()
            .chain([b'a'; 600].iter());
        for (i, b) in head.enumerate() {
            if trickle.write_all(&[*b]).is_err() {
                return i;
            }
            if i == 0 {
                started.send(()).unwrap();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        usize::MAX
    });
    first_byte.recv_timeout(LONG).unwrap();
    let t0 = Instant::now();
    scrape(addr);
    let mut answer = Vec::new();
    slow.read_to_end(&mut answer).unwrap();
    let closed_after = t0.elapsed();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    assert!(
        closed_after < LONG,
        "the slow client was closed after {closed_after:?}"
    );
    drop(slow);
    let sent = trickler.join().unwrap();
    assert!(
        sent < 630,
        "the slow client sent its whole head ({sent} bytes) before it was cut off"
    );

    // An oversized head: 431, closed.
    let mut big = b"GET /metrics HTTP/1.1\r\nX-Big: ".to_vec();
    big.resize(big.len() + 16 * 1024, b'a');
    let answer = exchange(addr, &big);
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
    // Other paths and methods.
    let answer = exchange(addr, b"GET /nothing HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 404 "), "{answer}");
    let answer = exchange(addr, b"POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
    assert!(
        answer.starts_with("HTTP/1.1 405 ") && answer.contains("\r\nAllow: GET, HEAD\r\n"),
        "{answer}"
    );
    // A HEAD (a load balancer's check) gets the GET's head, no body; the profile is not made
    // for one.
    let answer = exchange(addr, b"HEAD /metrics HTTP/1.0\r\n\r\n");
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.1 200 ")
            && head.contains("\r\nContent-Length: ")
            && body.is_empty(),
        "{answer}"
    );
    let answer = exchange(addr, b"HEAD /debug/pprof/pinned HTTP/1.0\r\n\r\n");
    assert!(
        answer.starts_with("HTTP/1.1 405 ") && answer.contains("\r\nAllow: GET\r\n"),
        "{answer}"
    );
    assert!(answer.ends_with("\r\n\r\n"), "{answer}");
    let answer = exchange(addr, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");

    // Still serving, with its threads where they were.
    drop(idle);
    scrape(addr);
    assert!(count("/proc/self/task") <= threads_before + 1);

    // Stopped with the detector: nothing listens any more.
    drop(rt);
    let t0 = Instant::now();
    detector.shutdown();
    let took = t0.elapsed();
    assert!(took < LONG, "shutdown took {took:?}");
    assert!(
        TcpStream::connect_timeout(&addr, LONG).is_err(),
        "the endpoint still listens after shutdown"
    );
}
