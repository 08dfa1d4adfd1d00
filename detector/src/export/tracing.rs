//! The `tracing` sink: a WARN event (target `pinwatch`) per pinned event, readable like
//! `-Djdk.tracePinnedThreads` output.

use super::Sink;
use crate::config::Stacks;
use crate::event::PinnedEvent;

/// Emits each event as a `tracing` WARN event with target `pinwatch`, with structured fields
/// (`state`, `duration_ms`, `task_id`, `reason`, `blocking_operation`, `advice`, `top_frame`) and a message
/// that reads like `jdk.tracePinnedThreads`.
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
            "{text}"
        );
    }
}
