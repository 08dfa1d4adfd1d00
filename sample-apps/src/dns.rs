//! The `blocking_dns` case: tasks resolve a name whose nameserver answers after 150 ms.
//!
//! No query may leave the machine, and none needs a real DNS server: [`sandbox`] moves the
//! process into a network namespace of its own (only a loopback interface: nothing can leave),
//! and a mount namespace of its own where `/etc/resolv.conf` says `nameserver 127.0.0.1` and
//! `/etc/nsswitch.conf` says `hosts: dns` (bind mounts seen by this process only), and answers
//! on 127.0.0.1:53 itself, from two plain threads: `A` queries for `*.pinwatch.test` with
//! 127.0.0.1, after [`DELAY`].

use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::{join_all, Variant};

/// The name the case resolves; only the sandbox's nameserver knows it.
pub const HOST: &str = "slow.pinwatch.test";

/// How long the nameserver takes to answer each query.
pub const DELAY: Duration = Duration::from_millis(150);

/// The domain the nameserver answers for; it refuses every other name.
const DOMAIN: &str = "pinwatch.test";

/// Set once the process is in its namespaces and the nameserver is listening.
static READY: AtomicBool = AtomicBool::new(false);

/// Whether [`sandbox`] succeeded in this process.
pub fn ready() -> bool {
    READY.load(Ordering::Acquire)
}

/// Enters fresh network and mount namespaces with the loopback resolver (see the module's
/// documentation). Must run before any other thread starts (namespaces are per thread; the
/// threads started before would resolve with the machine's resolver). As root, or else in a
/// user namespace of its own when unprivileged user namespaces are allowed. `Err` says why the
/// case cannot run here.
pub fn sandbox() -> Result<(), String> {
    if ready() {
        return Ok(());
    }
    let threads = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse::<u32>().ok())
        });
    if threads != Some(1) {
        return Err(format!(
            "the loopback resolver must be set up before any other thread starts \
             (this process has {threads:?} threads); call sample_apps::prepare first in main"
        ));
    }
    unshare()?;
    // SAFETY: plain system calls on NUL-terminated string literals; a null source, type and
    // data are what a propagation change takes.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(format!(
            "making the mount namespace private: {}",
            std::io::Error::last_os_error()
        ));
    }
    loopback_up()?;
    bind_file(
        "/etc/resolv.conf",
        "nameserver 127.0.0.1\noptions timeout:2 attempts:1\n",
    )?;
    bind_file("/etc/nsswitch.conf", "hosts: dns\n")?;
    // glibc asks a running nscd (through its socket) before its own modules, and nscd lives in
    // the host's network namespace: hide its socket, so that no query can leave this one.
    for dir in ["/run/nscd", "/var/run/nscd"] {
        if std::path::Path::new(dir).is_dir() {
            empty_dir_over(dir)?;
        }
    }
    let socket = UdpSocket::bind("127.0.0.1:53")
        .map_err(|e| format!("the loopback nameserver cannot bind 127.0.0.1:53: {e}"))?;
    serve(socket)?;
    READY.store(true, Ordering::Release);
    Ok(())
}

/// `unshare(CLONE_NEWNS | CLONE_NEWNET)`; when that is not permitted, the same in a new user
/// namespace where this user is root.
fn unshare() -> Result<(), String> {
    // SAFETY: unshare takes flags only; the process is single-threaded (checked by the caller).
    if unsafe { libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWNET) } == 0 {
        return Ok(());
    }
    let as_root = std::io::Error::last_os_error();
    // SAFETY: getuid and getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    // SAFETY: as above.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(format!(
            "blocking_dns needs root or unprivileged user namespaces (it runs its nameserver on \
             loopback in a network namespace of its own, so that no query leaves the machine): \
             unshare: {as_root}; with a user namespace: {}",
            std::io::Error::last_os_error()
        ));
    }
    let write = |path: &str, text: String| {
        std::fs::write(path, text).map_err(|e| format!("writing {path}: {e}"))
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("0 {uid} 1"))?;
    write("/proc/self/gid_map", format!("0 {gid} 1"))
}

/// Brings `lo` up: the only interface of a new network namespace, and down at first.
fn loopback_up() -> Result<(), String> {
    let err = |what: &str| {
        format!(
            "bringing lo up: {what}: {}",
            std::io::Error::last_os_error()
        )
    };
    // SAFETY: a plain socket call; the descriptor is closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(err("socket"));
    }
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(b"lo") {
        *d = *s as libc::c_char;
    }
    // SAFETY: `req` is a live ifreq naming `lo`, as SIOCGIFFLAGS/SIOCSIFFLAGS take; the flags
    // member of the union is the one these requests read and write.
    let result = unsafe {
        if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) != 0 {
            Err(err("SIOCGIFFLAGS"))
        } else {
            req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            if libc::ioctl(fd, libc::SIOCSIFFLAGS, &req) != 0 {
                Err(err("SIOCSIFFLAGS"))
            } else {
                Ok(())
            }
        }
    };
    // SAFETY: `fd` is ours and closed once.
    unsafe { libc::close(fd) };
    result
}

/// Mounts an empty tmpfs over `dir` (in this mount namespace only).
fn empty_dir_over(dir: &str) -> Result<(), String> {
    let target = std::ffi::CString::new(dir).map_err(|e| format!("{dir:?}: {e}"))?;
    // SAFETY: NUL-terminated strings that outlive the call; tmpfs takes no source device and
    // no data here.
    let rc = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(format!(
            "hiding nscd's socket ({dir}): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Bind-mounts a file holding `text` over `target` (in this mount namespace only). The source
/// file is removed at once: the mount keeps it.
fn bind_file(target: &str, text: &str) -> Result<(), String> {
    let source = std::env::temp_dir().join(format!(
        "pinwatch-blocking-dns-{}-{}",
        std::process::id(),
        target.rsplit('/').next().unwrap_or("file")
    ));
    std::fs::write(&source, text).map_err(|e| format!("writing {}: {e}", source.display()))?;
    let c = |s: &str| std::ffi::CString::new(s).map_err(|e| format!("{s:?}: {e}"));
    let (src, dst) = (c(&source.to_string_lossy())?, c(target)?);
    // SAFETY: NUL-terminated paths that outlive the call; a bind mount takes no type or data.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            dst.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    let mounted = std::io::Error::last_os_error();
    let _ = std::fs::remove_file(&source);
    if rc != 0 {
        return Err(format!(
            "bind-mounting {} over {target}: {mounted}",
            source.display()
        ));
    }
    Ok(())
}

/// Answers on `socket` from two threads: one reads the queries and builds the answers, the
/// other sends each [`DELAY`] after its query came (in order: the delay is the same for all).
fn serve(socket: UdpSocket) -> Result<(), String> {
    let sender = socket
        .try_clone()
        .map_err(|e| format!("the loopback nameserver's socket: {e}"))?;
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>, SocketAddr)>();
    let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(f)
            .map(drop)
            .map_err(|e| format!("starting the loopback nameserver: {e}"))
    };
    spawn(
        "dns-recv",
        Box::new(move || {
            let mut buf = [0u8; 512];
            while let Ok((n, peer)) = socket.recv_from(&mut buf) {
                if let Some(answer) = answer(&buf[..n]) {
                    if tx.send((Instant::now() + DELAY, answer, peer)).is_err() {
                        return;
                    }
                }
            }
        }),
    )?;
    spawn(
        "dns-send",
        Box::new(move || {
            for (at, answer, peer) in rx {
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
                let _ = sender.send_to(&answer, peer);
            }
        }),
    )
}

/// The answer to one DNS query (RFC 1035 §4.1): the header, the question echoed, and for an
/// `A` query of a name under [`DOMAIN`] one record, 127.0.0.1 (other types of such a name: no
/// records; other names: refused). `None` for what is not a one-question query.
fn answer(query: &[u8]) -> Option<Vec<u8>> {
    let u16_at = |i: usize| Some(u16::from_be_bytes([*query.get(i)?, *query.get(i + 1)?]));
    let flags = u16_at(2)?;
    if flags & 0x8000 != 0 || u16_at(4)? != 1 {
        return None;
    }
    let mut name = String::new();
    let mut at = 12;
    loop {
        let len = usize::from(*query.get(at)?);
        at += 1;
        if len == 0 {
            break;
        }
        if len > 63 || name.len() > 253 {
            return None;
        }
        let label = query.get(at..at + len)?;
        if !name.is_empty() {
            name.push('.');
        }
        name.push_str(&String::from_utf8_lossy(label).to_ascii_lowercase());
        at += len;
    }
    let qtype = u16_at(at)?;
    let question = query.get(12..at + 4)?;
    let ours = name == DOMAIN || name.ends_with(&format!(".{DOMAIN}"));
    let records = u16::from(ours && qtype == 1);
    // QR, the query's opcode and RD, AA, RA; rcode 0 (NOERROR) or 5 (REFUSED).
    let flags = 0x8000 | (flags & 0x7900) | 0x0400 | 0x0080 | if ours { 0 } else { 5 };
    let mut out = Vec::with_capacity(question.len() + 28);
    out.extend_from_slice(&query[..2]);
    for v in [flags, 1, records, 0, 0] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out.extend_from_slice(question);
    if records == 1 {
        // The name as a pointer to the question's (offset 12), type A, class IN, TTL 0,
        // 4 bytes of address.
        out.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4, 127, 0, 0, 1]);
    }
    Some(out)
}

/// `n` tasks resolve [`HOST`]. `Bad`: `std::net::ToSocketAddrs` on the worker (a blocking
/// `getaddrinfo`); `Fixed`: `tokio::net::lookup_host`, which resolves in `spawn_blocking`.
pub(crate) async fn blocking_dns(variant: Variant, n: usize) -> Option<String> {
    assert!(
        ready(),
        "blocking_dns runs only inside its sandbox (no query may leave the machine): \
         call sample_apps::prepare(&case) first in main"
    );
    let start = Instant::now();
    let handles = (0..n)
        .map(|_| match variant {
            Variant::Fixed => tokio::spawn(async {
                let addrs = tokio::net::lookup_host((HOST, 80)).await;
                addrs.map(|a| a.count()).map_err(|e| e.to_string())
            }),
            _ => tokio::spawn(async {
                let addrs = (HOST, 80).to_socket_addrs(); // pinned: a blocking getaddrinfo
                addrs.map(|a| a.count()).map_err(|e| e.to_string())
            }),
        })
        .collect();
    let results = join_all(handles).await;
    let elapsed = start.elapsed();
    if let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
        panic!("resolving {HOST} with the loopback nameserver: {e}");
    }
    Some(format!(
        "{n} lookups of {} ms each in {}",
        DELAY.as_millis(),
        crate::table::ms(elapsed)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query for `slow.pinwatch.test` as glibc sends it: id, RD, one question, type A.
    fn query(name: &str, qtype: u8) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.') {
            q.push(label.len() as u8);
            q.extend_from_slice(label.as_bytes());
        }
        q.extend_from_slice(&[0, 0, qtype, 0, 1]);
        q
    }

    #[test]
    fn answers_a_with_loopback_and_nothing_else() {
        let q = query("slow.pinwatch.test", 1);
        let a = answer(&q).unwrap();
        assert_eq!(&a[..2], &[0x12, 0x34]);
        assert_eq!(&a[2..4], &[0x85, 0x80]); // QR AA RD RA, NOERROR
        assert_eq!(&a[4..12], &[0, 1, 0, 1, 0, 0, 0, 0]);
        assert_eq!(&a[12..q.len()], &q[12..]);
        assert_eq!(&a[a.len() - 4..], &[127, 0, 0, 1]);
        let aaaa = answer(&query("slow.pinwatch.test", 28)).unwrap();
        assert_eq!(&aaaa[4..8], &[0, 1, 0, 0]);
        let other = answer(&query("example.com", 1)).unwrap();
        assert_eq!(other[3] & 0x0f, 5);
        assert_eq!(&other[6..8], &[0, 0]);
        assert!(answer(&q[..15]).is_none());
        assert!(answer(&a).is_none(), "an answer is not a query");
    }
}
