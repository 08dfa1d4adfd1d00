//! The cases found in real services (pinwatch tried on reproductions of blocking bugs from
//! public projects): the time spent inside a library the service calls, a log writer on a
//! full pipe, an executor's `block_on` in a `Drop`, a large value dropped on a worker, a loop
//! on a read that returns at once. Each says, beside its reason, what pinwatch must name —
//! the service's own line, and the advice that fits — and [`check`] checks it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pinwatch::{PinnedEvent, Reason};

use crate::Variant;

/// What the events of a case's bad variant must say beyond their reason, by case name.
pub fn check(case: &str, events: &[PinnedEvent]) -> Result<(), String> {
    match case {
        "library_cpu" => {
            // Where the time went is a library's (flate2's deflate, miniz_oxide, the adler32
            // checksum): a crate from the registry. The line to change is the handler's.
            let sampled: Vec<&PinnedEvent> =
                events.iter().filter(|e| e.top_frame.is_some()).collect();
            let in_library = |e: &&PinnedEvent| {
                e.top_frame
                    .as_ref()
                    .and_then(|f| f.file.as_deref())
                    .is_some_and(|f| f.contains("/registry/src/"))
            };
            let named = |e: &&PinnedEvent| {
                in_library(e)
                    && e.caller_frame()
                        .and_then(|f| f.file.as_deref())
                        .is_some_and(|f| f.ends_with("sample-apps/src/services.rs"))
                    && e.headline().contains("), called from ")
            };
            most(
                &sampled,
                named,
                "name flate2 and the handler's line that called it",
            )
        }
        "blocked_log" => advised(events, Reason::Io, "tracing_appender::non_blocking"),
        "block_on_in_drop" => advised(events, Reason::Other, ".await the future"),
        "large_drop" => advised(events, Reason::Cpu, "drop it there"),
        "spin_read" => advised(events, Reason::Cpu, "stop the loop on Ok(0)"),
        _ => Ok(()),
    }
}

/// At least one of `events`, and two thirds of them, are `ok` (the slack: a sample taken late
/// on a busy machine says nothing, see [`crate::Outcome::check`]; and every sample of a pin can
/// land where the rule does not look — each of `spin_read`'s three 600 ms pins is sampled three
/// times, and all three of one pin once fell in the loop's own code between its reads, which
/// three quarters did not forgive).
fn most(
    events: &[&PinnedEvent],
    ok: impl Fn(&&PinnedEvent) -> bool,
    what: &str,
) -> Result<(), String> {
    let good = events.iter().filter(|e| ok(e)).count();
    if good == 0 || good * 3 < events.len() * 2 {
        let bad = events
            .iter()
            .find(|e| !ok(e))
            .map_or_else(String::new, |e| seen(e));
        return Err(format!(
            "{good} of {} sampled events {what}; one that does not: {bad}",
            events.len(),
        ));
    }
    Ok(())
}

/// An event's headline, and what of its samples it keeps: how many, their top frames, its
/// stack (as the stacks setting keeps it: the top frame and the service's own by default). Not
/// all the advice was chosen from: every sample's whole stack, and whether the thread made read
/// or write calls, are not in the event.
fn seen(e: &PinnedEvent) -> String {
    // Each frame as `Frame`'s `Display` gives it: function (file:line).
    let top: Vec<String> = if e.profile.is_empty() {
        e.top_frame.iter().map(ToString::to_string).collect()
    } else {
        e.profile
            .iter()
            .map(|p| format!("{} ×{}", p.frame, p.samples))
            .collect()
    };
    let stack: Vec<String> = e.stack.iter().take(6).map(ToString::to_string).collect();
    let list = |v: Vec<String>, sep: &str| {
        if v.is_empty() {
            "none".to_owned()
        } else {
            v.join(sep)
        }
    };
    format!(
        "{} [{} samples; top frames: {}; stack: {}]",
        e.headline(),
        e.samples,
        list(top, ", "),
        list(stack, " < "),
    )
}

/// Most sampled events with `reason` carry advice that says `says`.
fn advised(events: &[PinnedEvent], reason: Reason, says: &str) -> Result<(), String> {
    let sampled: Vec<&PinnedEvent> = events
        .iter()
        .filter(|e| e.reason == Some(reason) && e.no_stack.is_none())
        .collect();
    most(
        &sampled,
        |e| e.advice.as_deref().is_some_and(|a| a.contains(says)),
        &format!("advise {says:?}"),
    )
}

/// Compresses `upload` again and again for `work`, as a handler compressing a large body: the
/// time goes inside flate2's deflate; the line that calls it is the handler's.
fn compress_upload(upload: &[u8], work: Duration) -> usize {
    use std::io::Write;
    let start = Instant::now();
    let mut out = 0;
    while start.elapsed() < work {
        let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        enc.write_all(upload).expect("compress in memory"); // pinned: inside flate2
        out += enc.finish().expect("compress in memory").len(); // pinned: inside flate2
    }
    out
}

/// `n` requests, each compressing a 64 KiB upload for 150 ms (600 ms at full size).
pub(crate) async fn library_cpu(variant: Variant, n: usize, full: bool) -> Option<String> {
    let work = Duration::from_millis(if full { 600 } else { 150 });
    let upload: Arc<Vec<u8>> = Arc::new(
        (0..64 * 1024u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 27) as u8 + b'a')
            .collect(),
    );
    let handles = (0..n)
        .map(|_| {
            let upload = Arc::clone(&upload);
            match variant {
                Variant::Fixed => tokio::spawn(async move {
                    tokio::task::spawn_blocking(move || compress_upload(&upload, work))
                        .await
                        .expect("compression")
                }),
                _ => tokio::spawn(async move { compress_upload(&upload, work) }),
            }
        })
        .collect();
    let bytes: usize = crate::join_all(handles).await.into_iter().sum();
    Some(format!("compressed to {} KiB", bytes / 1024))
}

/// `n` tasks log 200 lines of 1 KiB each through a `tracing` fmt subscriber whose writer is a
/// pipe that its reader leaves unread for 300 ms (a service's stdout piped into a reader that
/// stopped): with a plain writer each `info!` waits in `write(2)` on the full pipe, on the
/// worker. `Fixed`: the same subscriber through `tracing_appender::non_blocking`, whose own
/// thread waits instead.
pub(crate) async fn blocked_log(variant: Variant, n: usize, full: bool) -> Option<String> {
    use tracing::instrument::WithSubscriber;
    let unread = Duration::from_millis(if full { 2000 } else { 300 });
    let (reader, writer) = pipe();
    let drained = std::thread::spawn(move || {
        use std::io::Read;
        std::thread::sleep(unread); // the reader that stopped, for a while
        let mut reader = reader;
        let mut buf = vec![0u8; 64 * 1024];
        let mut total = 0;
        while let Ok(k) = reader.read(&mut buf) {
            if k == 0 {
                break;
            }
            total += k;
        }
        total
    });
    // The subscriber is set up off the workers, as a service sets it up before it serves:
    // `non_blocking` fills a 128,000-line channel, which an unoptimized build takes tens of
    // milliseconds on a CPU to do, a pin of its own in the fixed variant on a loaded machine.
    let (dispatch, guard) = tokio::task::spawn_blocking(move || match variant {
        Variant::Fixed => {
            let (nb, guard) = tracing_appender::non_blocking(writer);
            let sub = tracing_subscriber::fmt()
                .with_ansi(false)
                .with_writer(nb)
                .finish();
            (tracing::Dispatch::new(sub), Some(guard))
        }
        _ => {
            let sub = tracing_subscriber::fmt()
                .with_ansi(false)
                .with_writer(move || writer.try_clone().expect("the pipe's write end"))
                .finish();
            (tracing::Dispatch::new(sub), None)
        }
    })
    .await
    .expect("the subscriber's setup");
    let line = "x".repeat(1024);
    let handles = (0..n)
        .map(|t| {
            let line = line.clone();
            tokio::spawn(
                async move {
                    for i in 0..200 {
                        tracing::info!(task = t, request = i, "handled: {line}"); // pinned: a full pipe
                        if i % 20 == 19 {
                            tokio::task::yield_now().await;
                        }
                    }
                }
                .with_subscriber(dispatch.clone()),
            )
        })
        .collect();
    crate::join_all(handles).await;
    // Every write end closed: the reader sees the end of the pipe. (The non-blocking writer's
    // guard waits for its thread to write what is queued: off the workers.)
    drop(dispatch);
    let total = tokio::task::spawn_blocking(move || {
        drop(guard);
        drained.join().expect("reader")
    })
    .await
    .expect("reader");
    Some(format!("{} KiB logged", total / 1024))
}

/// A pipe: its read end and its write end.
fn pipe() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors `pipe2` writes.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just made and are owned by nothing else.
    unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    }
}

/// A connection whose close is confirmed by its peer (here a thread, 100 ms later).
struct Conn {
    closed: Option<tokio::sync::oneshot::Receiver<()>>,
}

impl Conn {
    fn open() -> Conn {
        let (tx, rx) = tokio::sync::oneshot::channel();
        crate::after_100ms(move || {
            let _ = tx.send(());
        });
        Conn { closed: Some(rx) }
    }

    /// The fix: close it in async code, awaiting the peer.
    async fn close(mut self) {
        if let Some(rx) = self.closed.take() {
            let _ = rx.await;
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(rx) = self.closed.take() {
            // pinned: a nested executor waits for the peer on the worker
            let _ = futures::executor::block_on(rx);
        }
    }
}

/// `n` tasks each drop a connection whose `Drop` waits for its peer with
/// `futures::executor::block_on`. `Fixed`: `conn.close().await`.
pub(crate) async fn block_on_in_drop(variant: Variant, n: usize) -> Option<String> {
    let handles = (0..n)
        .map(|_| match variant {
            Variant::Fixed => tokio::spawn(async { Conn::open().close().await }),
            _ => tokio::spawn(async { drop(Conn::open()) }),
        })
        .collect();
    crate::join_all(handles).await;
    None
}

/// A cache of `entries` entries, built off the workers.
fn build_cache(entries: u64) -> std::collections::HashMap<u64, String> {
    (0..entries).map(|i| (i, format!("value {i}"))).collect()
}

/// `n` tasks each evict a cache of a million entries (two at full size), built off the
/// workers: the drop frees every entry on the worker. `Fixed`: dropped in `spawn_blocking`.
pub(crate) async fn large_drop(variant: Variant, n: usize, full: bool) -> Option<String> {
    let entries = if full { 2_000_000 } else { 1_000_000 };
    let handles = (0..n)
        .map(|_| {
            tokio::spawn(async move {
                let cache = tokio::task::spawn_blocking(move || build_cache(entries))
                    .await
                    .expect("build");
                let start = Instant::now();
                match variant {
                    Variant::Fixed => tokio::task::spawn_blocking(move || drop(cache))
                        .await
                        .expect("drop"),
                    _ => drop(cache), // pinned: frees a million entries on the worker
                }
                start.elapsed()
            })
        })
        .collect();
    let worst = crate::join_all(handles)
        .await
        .into_iter()
        .max()
        .unwrap_or_default();
    Some(format!("evict took {}", crate::table::ms(worst)))
}

/// `n` tasks each read a stream whose peer has closed, buffered as a TLS layer buffers it
/// (`&[u8]`: `Ok(0)` at once, no system call), and loop on `Ok(0)` for 600 ms (the omicron
/// case; there for good). `Fixed`: the loop stops at the end of the stream.
pub(crate) async fn spin_read(variant: Variant, n: usize, full: bool) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let spin = Duration::from_millis(if full { 3000 } else { 600 });
    let handles = (0..n)
        .map(|_| {
            tokio::spawn(async move {
                let mut stream: &[u8] = &[];
                let mut buf = [0u8; 512];
                let start = Instant::now();
                let mut reads = 0u64;
                // (The clock is read every 1024 reads: the time goes to the reads.)
                while !reads.is_multiple_of(1024) || start.elapsed() < spin {
                    let k = stream.read(&mut buf).await.expect("read"); // pinned: returns at once
                    reads += 1;
                    if k == 0 && variant == Variant::Fixed {
                        break; // the end of the stream: the peer closed
                    }
                }
                reads
            })
        })
        .collect();
    let reads: u64 = crate::join_all(handles).await.into_iter().sum();
    Some(format!("{reads} reads"))
}
