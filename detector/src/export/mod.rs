//! Export: where finished events go. One fan-out hands each event to every sink in turn, on
//! pinwatch's own export thread (never on the watched runtime, never on the watchdog). Adding a
//! way out is adding a file here and a line in `builtin`.

#[cfg(feature = "console")]
pub mod console;
#[cfg(feature = "prometheus")]
mod http;
#[cfg(feature = "otlp")]
pub mod otlp;
#[cfg(feature = "prometheus")]
pub mod prometheus;
mod record;
mod tracing;

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::config::Config;
use crate::event::PinnedEvent;
use crate::Error;

pub(crate) use record::Recorder;
pub use record::{RecordSink, RecordStatus, Rotation};
pub(crate) use tracing::render as render_text;
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

/// The sinks the configuration turns on. `recorder` is the detector's recording: its sink is
/// always there, and `PINWATCH_RECORD` starts it.
pub(crate) fn builtin(config: &Config, recorder: &Recorder) -> Result<Vec<Box<dyn Sink>>, Error> {
    let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
    if config.tracing {
        // The analysis keeps as much of the stack as the settings in force say (they may
        // change at run time): print all it kept.
        sinks.push(Box::new(TracingSink::new(crate::config::Stacks::Full)));
    }
    if let Some(path) = &config.record {
        recorder.install(RecordSink::open_rotating(
            path,
            Rotation::from_config(config),
        )?);
    }
    sinks.push(Box::new(recorder.sink()));
    Ok(sinks)
}

/// What a metrics exporter reads live, from the watchdog (never waiting for the export thread).
#[cfg_attr(
    not(any(feature = "prometheus", feature = "otlp", feature = "console")),
    allow(dead_code)
)]
pub(crate) struct Live {
    /// The threshold in force.
    pub threshold: std::time::Duration,
    /// Whether the runtime is stalled now, and for how long it has been stalled in all.
    pub stall: (bool, std::time::Duration),
    /// Each pin running now: event id and age.
    pub pinned: Vec<(u64, std::time::Duration)>,
    /// Workers of the runtime.
    pub workers: usize,
    /// Reports the queue dropped so far.
    pub queue_dropped: u64,
    /// Events the OTLP exporter's queue dropped so far, when it runs.
    pub otlp_dropped: Option<u64>,
}

/// Reads [`Live`]; called on an exporter's own thread.
#[cfg_attr(
    not(any(feature = "prometheus", feature = "otlp", feature = "console")),
    allow(dead_code)
)]
pub(crate) type LiveFn = std::sync::Arc<dyn Fn() -> Live + Send + Sync>;

/// Pin-duration histogram buckets, in seconds: from 25 ms (just past the default threshold) to a
/// minute. Prometheus and OTLP use the same.
pub const DURATION_BUCKETS: &[f64] =
    &[0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// What the metrics exporters share about counting pins: each pin counts once, at its first
/// report that is not a retraction, under a `location` label drawn from a bounded set (its top
/// frame's `file:line`, else its function, else `unknown`; past the bound, `other`). A metrics
/// exporter serves one detector, so a pin is named by its event id alone.
#[cfg_attr(not(any(feature = "prometheus", feature = "otlp")), allow(dead_code))]
pub(crate) struct PinCounter {
    /// Pins already counted and not yet completed.
    counted: std::collections::HashSet<u64>,
    locations: std::collections::HashSet<String>,
    max_locations: usize,
}

#[cfg_attr(not(any(feature = "prometheus", feature = "otlp")), allow(dead_code))]
impl PinCounter {
    pub(crate) fn new(max_locations: usize) -> PinCounter {
        PinCounter {
            counted: std::collections::HashSet::new(),
            locations: std::collections::HashSet::new(),
            max_locations,
        }
    }

    /// The location label when `e` is the first countable report of its pin, `None` otherwise.
    /// A completed or retracted pin is forgotten.
    pub(crate) fn first_report(&mut self, e: &PinnedEvent) -> Option<String> {
        let first = e.state != crate::event::State::Retracted && self.counted.insert(e.id);
        if e.state != crate::event::State::InProgress {
            self.counted.remove(&e.id);
        }
        first.then(|| {
            let location = e.top_frame.as_ref().map_or_else(
                || "unknown".to_owned(),
                |f| match (&f.file, f.line) {
                    (Some(file), Some(line)) => format!("{file}:{line}"),
                    _ => f.function.clone().unwrap_or_else(|| "unknown".to_owned()),
                },
            );
            // `other` is one of the bounded values.
            if self.locations.contains(&location)
                || self.locations.len() < self.max_locations.saturating_sub(1)
            {
                self.locations.insert(location.clone());
                location
            } else {
                "other".to_owned()
            }
        })
    }
}

/// Hands each event to an exporter thread of pinwatch's own through a bounded queue, and never
/// waits: what does not fit is dropped and counted. `flush` closes the queue, which ends the
/// thread's loop.
#[cfg_attr(not(any(feature = "otlp", feature = "console")), allow(dead_code))]
pub(crate) struct QueueSink {
    tx: Option<std::sync::mpsc::SyncSender<PinnedEvent>>,
    dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

#[cfg_attr(not(any(feature = "otlp", feature = "console")), allow(dead_code))]
impl QueueSink {
    pub(crate) fn new(
        tx: Option<std::sync::mpsc::SyncSender<PinnedEvent>>,
        dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
    ) -> QueueSink {
        QueueSink { tx, dropped }
    }
}

impl Sink for QueueSink {
    fn event(&mut self, event: &PinnedEvent) {
        if let Some(tx) = &self.tx {
            if tx.try_send(event.clone()).is_err() {
                self.dropped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    fn flush(&mut self) {
        drop(self.tx.take());
    }
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
