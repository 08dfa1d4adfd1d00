//! The `tracing` sink: a WARN event (target `pinwatch`) per pinned event, readable like
//! `-Djdk.tracePinnedThreads` output.

use super::Sink;
use crate::config::Stacks;
use crate::event::PinnedEvent;

/// Emits each event as a `tracing` WARN event with target `pinwatch`, with structured fields
/// (`state`, `duration_ms`, `task_id`, `reason`, `blocking_operation`, `advice`, `top_frame`,
/// `spawned_at`) and a message that reads like `jdk.tracePinnedThreads`, led by the top frame.
#[derive(Debug)]
pub struct TracingSink {
    stacks: Stacks,
}

impl TracingSink {
    /// A sink printing stacks as `stacks` says.
    pub fn new(stacks: Stacks) -> TracingSink {
        TracingSink { stacks }
    }
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
            "{text}"
        );
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
        let out = Arc::new(Mutex::new(Vec::<u8>::new()));
        let writer = {
            let out = Arc::clone(&out);
            move || Buffer(Arc::clone(&out))
        };
        let subscriber = tracing_subscriber::fmt()
            .with_writer(writer)
            .with_ansi(false)
            .finish();
        let mut e = PinnedEvent::for_test(3, State::InProgress, Reason::Sleep, 25, 7);
        e.spawned_at = Some(crate::event::SourceLocation {
            file: "src/server.rs".into(),
            line: 389,
            column: 5,
        });
        tracing::subscriber::with_default(subscriber, || {
            TracingSink::new(Stacks::Short).event(&e);
        });
        let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
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
