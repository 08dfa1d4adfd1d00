//! Export: where finished events go. One fan-out hands each event to every sink in turn, on
//! pinwatch's own export thread (never on the watched runtime, never on the watchdog).
//!
//! The sinks of every detector: the `tracing` WARN event ([`TracingSink`]), the recordings and
//! the flight recording (`record`, `flight`), and any [`Sink`] of the user's. The exporters
//! that run beside the export thread — Prometheus, OTLP, tokio-console, each behind its cargo
//! feature — are listed in [`EXPORTERS`]: adding one is a file here with its `start`
//! (see `exporter`), its `mod` line and its line in that list, and its settings
//! (CONTRIBUTING.md lists the files).

#[cfg(feature = "console")]
pub mod console;
pub(crate) mod exporter;
mod fanout;
mod flight;
#[cfg(feature = "prometheus")]
mod http;
#[cfg(any(feature = "prometheus", feature = "otlp"))]
mod live;
#[cfg(any(feature = "prometheus", feature = "otlp"))]
mod metrics;
#[cfg(feature = "otlp")]
pub mod otlp;
#[cfg(feature = "prometheus")]
pub mod prometheus;
#[cfg(any(feature = "otlp", feature = "console"))]
mod queue;
mod record;
mod tracing;

use crate::config::Config;
use crate::event::PinnedEvent;
use crate::Error;

use exporter::{exporter, Entry};
pub(crate) use exporter::{Drops, Parts, Running};
pub(crate) use fanout::spawn_export_thread;
pub(crate) use flight::{Dump, Flight, Identity};
#[cfg(any(feature = "prometheus", feature = "otlp"))]
pub(crate) use live::LiveFn;
#[cfg(any(feature = "prometheus", feature = "otlp"))]
pub use metrics::DURATION_BUCKETS;
#[cfg(any(feature = "prometheus", feature = "otlp"))]
pub(crate) use metrics::{PinCounter, PinTime};
#[cfg(any(feature = "otlp", feature = "console"))]
pub(crate) use queue::QueueSink;
pub use record::{RecordSink, RecordStatus, Rotation, MAX_RECORDINGS};
pub(crate) use record::{Recorder, Which};
pub(crate) use tracing::render as render_text;
pub use tracing::TracingSink;
pub(crate) use tracing::{flush_stderr, no_subscriber, to_stderr};

/// The exporters, in the order they start, are named in the start-up line and stop. Each
/// module's `start` returns `None` when the settings do not ask for it.
const EXPORTERS: &[Entry] = &[
    exporter!("prometheus", "Prometheus", prometheus),
    exporter!("otlp", "OTLP", otlp),
    exporter!("console", "console", console),
];

/// Starts the exporters the settings ask for, adding their sinks to `sinks`.
pub(crate) fn start_exporters(
    parts: &Parts,
    sinks: &mut Vec<Box<dyn Sink>>,
) -> Result<Running, Error> {
    Running::start(parts, EXPORTERS, sinks)
}

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
/// always there, and `PINWATCH_RECORD` starts it. `flight` is the flight recording
/// (`PINWATCH_FLIGHT_SIZE`), when on: it gets every event the recording gets.
pub(crate) fn builtin(
    config: &Config,
    recorder: &Recorder,
    flight: Option<&Flight>,
) -> Result<Vec<Box<dyn Sink>>, Error> {
    let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
    if config.tracing {
        // The analysis keeps as much of the stack as the settings in force say (they may
        // change at run time): print all it kept.
        sinks.push(Box::new(
            TracingSink::new(crate::config::Stacks::Full).with_stderr_fallback(config.announce),
        ));
    }
    if let Some(path) = &config.record {
        // Absolute, as `pinwatch ctl` names the others: `record list` and `status` say where
        // it is to a client in another directory, and a later `chdir` does not move it.
        let path = std::path::absolute(path).unwrap_or_else(|_| path.clone());
        recorder.install(RecordSink::open_rotating(
            &path,
            Rotation::from_config(config),
        )?);
    }
    // One sink for the recordings and the flight recording: each event's line is made once.
    sinks.push(Box::new(recorder.sink_with(flight.cloned())));
    Ok(sinks)
}
