//! The `tracing` sink: a WARN event (target `pinwatch`) per pinned event, readable like
//! `-Djdk.tracePinnedThreads` output — or, while the process has no `tracing` subscriber, the
//! same line on stderr, so that a service that never set one up still sees its first pin.
//! pinwatch never installs a global subscriber for that: the service's own `fmt().init()`,
//! whenever it comes, must still work.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::Duration;

use super::Sink;
use crate::config::Stacks;
use crate::event::PinnedEvent;

/// Emits each event as a `tracing` WARN event with target `pinwatch`, with structured fields
/// (`state`, `duration_ms`, `task_id`, `reason`, `blocking_operation`, `advice`, `top_frame`,
/// `spawned_at`, and with spans `span` — the innermost span's label — and `trace_id`) and a
/// message that reads like `jdk.tracePinnedThreads`, led by the top frame.
#[derive(Debug)]
pub struct TracingSink {
    stacks: Stacks,
    /// While no `tracing` dispatcher has been set, write the line to stderr instead.
    stderr_fallback: bool,
}

impl TracingSink {
    /// A sink printing stacks as `stacks` says.
    pub fn new(stacks: Stacks) -> TracingSink {
        TracingSink {
            stacks,
            stderr_fallback: false,
        }
    }

    /// The detector's own: with no `tracing` subscriber set (checked at each event), the line
    /// goes to stderr.
    pub(crate) fn with_stderr_fallback(mut self, on: bool) -> TracingSink {
        self.stderr_fallback = on;
        self
    }
}

/// Lines queued for stderr at most; past it, lines are dropped (stderr is not being read).
const STDERR_QUEUE: usize = 256;

/// How long [`flush_stderr`] waits for the queued lines to be written.
const STDERR_FLUSH_WAIT: Duration = Duration::from_secs(1);

enum ToStderr {
    Line(String),
    /// A line of pinwatch's own (not an event) at this level: a `tracing` event when the
    /// process has a subscriber, else on stderr.
    Say(tracing::Level, String),
    Flushed(mpsc::SyncSender<()>),
}

/// The queue to pinwatch's log thread, started at the first line. A write to stderr, or
/// through the service's subscriber to its writer, can block for good (a pipe nobody reads)
/// and a detector's thread must not: they only `try_send`; the thread writes, ignoring errors
/// (a closed pipe).
static QUEUE: OnceLock<Option<mpsc::SyncSender<ToStderr>>> = OnceLock::new();

fn stderr_queue() -> Option<&'static mpsc::SyncSender<ToStderr>> {
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = mpsc::sync_channel::<ToStderr>(STDERR_QUEUE);
            std::thread::Builder::new()
                .name("pinwatch-log".into())
                .spawn(move || {
                    for m in rx {
                        match m {
                            ToStderr::Line(l) => {
                                let _ = std::io::stderr().lock().write_all(l.as_bytes());
                            }
                            ToStderr::Say(level, line) => emit(level, &line),
                            ToStderr::Flushed(done) => {
                                let _ = done.try_send(());
                            }
                        }
                    }
                })
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

/// Lines of pinwatch's own that the log thread's queue could not take (its writer blocked):
/// every detector counts them as `sink="log"`.
pub(crate) fn log_dropped() -> Arc<AtomicU64> {
    static DROPPED: OnceLock<Arc<AtomicU64>> = OnceLock::new();
    Arc::clone(DROPPED.get_or_init(Default::default))
}

fn queue_line(m: ToStderr) {
    if let Some(q) = stderr_queue() {
        if let Err(mpsc::TrySendError::Full(_)) = q.try_send(m) {
            log_dropped().fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Queues `line` (its newline added) for stderr; dropped and counted when the queue is full.
pub(crate) fn to_stderr(level: &str, line: &str) {
    queue_line(ToStderr::Line(format!("{level} pinwatch: {line}\n")));
}

/// Says `line` at `level` from a detector thread that must not block on it (the export
/// thread): queued for the log thread, which emits it as a `tracing` event with target
/// `pinwatch`, or writes it on stderr while the process has no subscriber. Dropped and counted
/// when the queue is full.
pub(crate) fn say(level: tracing::Level, line: String) {
    queue_line(ToStderr::Say(level, line));
}

fn emit(level: tracing::Level, line: &str) {
    use tracing::Level;
    if no_subscriber() {
        let _ = std::io::stderr()
            .lock()
            .write_all(format!("{level} pinwatch: {line}\n").as_bytes());
        return;
    }
    match level {
        Level::ERROR => tracing::error!(target: "pinwatch", "{line}"),
        Level::WARN => tracing::warn!(target: "pinwatch", "{line}"),
        Level::INFO => tracing::info!(target: "pinwatch", "{line}"),
        Level::DEBUG => tracing::debug!(target: "pinwatch", "{line}"),
        Level::TRACE => tracing::trace!(target: "pinwatch", "{line}"),
    }
}

/// Waits, a bounded time, until the lines queued so far are written: a report made just before
/// the process ends is not lost.
pub(crate) fn flush_stderr() {
    // Nothing was ever queued: nothing to wait for (and no thread to start).
    if let Some(Some(q)) = QUEUE.get() {
        let (tx, rx) = mpsc::sync_channel(1);
        if q.try_send(ToStderr::Flushed(tx)).is_ok() {
            let _ = rx.recv_timeout(STDERR_FLUSH_WAIT);
        }
    }
}

/// Whether a line of pinwatch's goes to stderr: no `tracing` dispatcher has been set.
pub(crate) fn no_subscriber() -> bool {
    !tracing::dispatcher::has_been_set()
}

/// The `jdk.tracePinnedThreads`-like text of an event: a headline, then the stack.
pub fn render(event: &PinnedEvent) -> String {
    let mut s = event.headline();
    if !event.held_locks.is_empty() {
        s.push_str(&format!(" locks_held={}", event.held_locks.len()));
    }
    if event.stack.is_empty() {
        if let Some(top) = &event.top_frame {
            s.push_str(&format!("\n    {top}"));
        }
    }
    for frame in &event.stack {
        s.push_str(&format!("\n    {frame}"));
        if frame.locks > 0 {
            s.push_str(&format!(" <== locks:{}", frame.locks));
        }
    }
    s
}

impl Sink for TracingSink {
    fn event(&mut self, event: &PinnedEvent) {
        let text = if self.stacks == Stacks::Off {
            event.headline()
        } else {
            render(event)
        };
        if self.stderr_fallback && no_subscriber() {
            // This sink runs on a thread of its own: a write that blocks fills its queue,
            // whose drops are counted as `sink="tracing"`.
            let _ = std::io::stderr()
                .lock()
                .write_all(format!("WARN pinwatch: {text}\n").as_bytes());
            return;
        }
        tracing::warn!(
            target: "pinwatch",
            state = event.state.as_str(),
            duration_ms = event.duration.as_secs_f64() * 1e3,
            task_id = event.task_id,
            reason = event.reason.map(|r| r.as_str()),
            blocking_operation = event.blocking_operation.as_deref(),
            advice = event.advice.as_deref(),
            top_frame = event.top_frame.as_ref().map(|f| f.to_string()),
            spawned_at = event.spawned_at.as_ref().map(|l| l.to_string()),
            request = event.request_span().map(|_| event.request_label()),
            span = event.innermost_span().map(|s| s.label()),
            trace_id = event.trace_id.as_deref(),
            "{text}"
        );
    }

    fn flush(&mut self) {
        if self.stderr_fallback {
            flush_stderr();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Reason, State};
    use std::sync::{Arc, Mutex};

    /// The WARN line leads with the top frame, the reason and the advice; the advice and the
    /// spawn site are fields too.
    #[test]
    fn the_warn_line_leads_with_the_top_frame_and_the_advice() {
        let mut e = PinnedEvent::for_test(3, State::InProgress, Reason::Sleep, 25, 7);
        e.spawned_at = Some(crate::event::SourceLocation {
            file: "src/server.rs".into(),
            line: 389,
            column: 5,
        });
        let text = warn_line(Stacks::Short, &e);
        assert!(
            text.contains(
                "WARN pinwatch: pinned in_progress for 25.0 ms at src/app.rs:7 app::f: reason=sleep \
                 — use tokio::time::sleep(..).await instead of std::thread::sleep; task 3 \
                 spawned at src/server.rs:389:5, worker 0"
            ),
            "{text}"
        );
        assert!(
            text.contains("advice=\"use tokio::time::sleep(..).await"),
            "{text}"
        );
        assert!(
            text.contains("spawned_at=\"src/server.rs:389:5\""),
            "{text}"
        );
    }

    /// The event is emitted on pinwatch's export thread, outside the request's span: the line
    /// itself says which request (`in request{..}`), and `span`/`trace_id` are fields.
    #[test]
    fn the_warn_line_says_which_request_pinned() {
        let mut e = PinnedEvent::for_test(3, State::Completed, Reason::Sleep, 25, 7);
        e.spans = vec![crate::SpanInfo::for_test(
            "request",
            "tower_http::trace::make_span",
            &[
                ("http.route", "/report"),
                ("method", "GET"),
                ("uri", "/report"),
            ],
        )];
        e.trace_id = Some("4bf92f3577b34da6a3ce929d0e0e4736".into());
        let text = warn_line(Stacks::Off, &e);
        assert!(
            text.contains("task 3 in request{http.route=/report method=GET uri=/report}, worker 0"),
            "{text}"
        );
        assert!(text.contains("span=\"request /report\""), "{text}");
        assert!(
            text.contains("trace_id=\"4bf92f3577b34da6a3ce929d0e0e4736\""),
            "{text}"
        );
    }

    /// What the sink writes for `e` through a `fmt` subscriber (no colours).
    fn warn_line(stacks: Stacks, e: &PinnedEvent) -> String {
        let out = Arc::new(Mutex::new(Vec::<u8>::new()));
        let writer = {
            let out = Arc::clone(&out);
            move || Buffer(Arc::clone(&out))
        };
        let subscriber = tracing_subscriber::fmt()
            .with_writer(writer)
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || TracingSink::new(stacks).event(e));
        let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
        text
    }

    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}
