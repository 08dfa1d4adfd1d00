//! Export: where finished events go. One fan-out hands each event to every sink in turn, on
//! pinwatch's own export thread (never on the watched runtime, never on the watchdog). Adding a
//! way out is adding a file here and a line in `builtin`.

#[cfg(feature = "prometheus")]
pub mod prometheus;
mod record;
mod tracing;

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::config::Config;
use crate::event::PinnedEvent;
use crate::Error;

pub use record::RecordSink;
pub use tracing::TracingSink;

/// Receives finished events, one at a time, on pinwatch's export thread.
///
/// Any `FnMut(&PinnedEvent) + Send + 'static` closure is a sink. A sink that panics loses that
/// event only; the others still get it.
pub trait Sink: Send + 'static {
    /// One event.
    fn event(&mut self, event: &PinnedEvent);

    /// Called once when the detector stops, after the last event.
    fn flush(&mut self) {}
}

impl<F: FnMut(&PinnedEvent) + Send + 'static> Sink for F {
    fn event(&mut self, event: &PinnedEvent) {
        self(event)
    }
}

/// The sinks the configuration turns on.
pub(crate) fn builtin(config: &Config) -> Result<Vec<Box<dyn Sink>>, Error> {
    let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
    if config.tracing {
        sinks.push(Box::new(TracingSink::new(config.stacks)));
    }
    if let Some(path) = &config.record {
        sinks.push(Box::new(RecordSink::open(path)?));
    }
    Ok(sinks)
}

/// Every sink, in order.
pub(crate) struct Fanout {
    sinks: Vec<Box<dyn Sink>>,
}

impl Fanout {
    pub(crate) fn new(sinks: Vec<Box<dyn Sink>>) -> Fanout {
        Fanout { sinks }
    }

    /// Hands `event` to every sink; a sink's panic is contained.
    pub(crate) fn deliver(&mut self, event: &PinnedEvent) {
        for sink in self.sinks.iter_mut() {
            let _ = catch_unwind(AssertUnwindSafe(|| sink.event(event)));
        }
    }

    /// Flushes every sink, once, at the end.
    pub(crate) fn flush(&mut self) {
        for sink in self.sinks.iter_mut() {
            let _ = catch_unwind(AssertUnwindSafe(|| sink.flush()));
        }
    }
}
