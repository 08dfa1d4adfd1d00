//! Export: where finished events go. One fan-out hands each event to every sink in turn, on
//! pinwatch's own export thread (never on the watched runtime, never on the watchdog).
//!
//! The sinks of every detector: the `tracing` WARN event ([`TracingSink`]), the recordings and
//! the flight recording (`record`, `flight`), and any [`Sink`] of the user's. The exporters
//! that run beside the export thread — Prometheus, OTLP, tokio-console, each behind its cargo
//! feature — are listed in `EXPORTERS`: adding one is a file here with its `start`
//! (see `Exporter`), its `mod` line and its line in that list, and its settings
//! (CONTRIBUTING.md lists the files).

#[cfg(feature = "console")]
pub mod console;
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
mod record;
mod running;
mod threaded;
mod tracing;

use crate::config::Config;
use crate::event::PinnedEvent;
use crate::Error;

pub(crate) use fanout::{ExportThread, Outlet};
pub(crate) use flight::{Dump, Flight, Identity};
#[cfg(any(feature = "prometheus", feature = "otlp"))]
pub(crate) use live::LiveFn;
#[cfg(any(feature = "prometheus", feature = "otlp"))]
pub(crate) use metrics::PinTally;
#[cfg(any(feature = "prometheus", feature = "otlp"))]
pub use metrics::DURATION_BUCKETS;
pub use record::{RecordSink, RecordStatus, Rotation, MAX_RECORDINGS};
pub(crate) use record::{Recorder, RecordingRef};
pub(crate) use running::{Drops, Parts, Running};
pub(crate) use threaded::on_own_thread;
pub(crate) use tracing::render as render_text;
pub use tracing::TracingSink;
pub(crate) use tracing::{flush_stderr, log_dropped, no_subscriber, say, to_stderr};

/// At most one warning of a kind a sink repeats (a peer that holds connections, a collector
/// that takes nothing, a queue that stays full) this often.
pub(crate) const WARN_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Whether a warning of a kind is due at `now`: the first, or [`WARN_EVERY`] after the last
/// (`last`, then moved to `now`).
pub(crate) fn warning_due(last: &mut Option<std::time::Instant>, now: std::time::Instant) -> bool {
    if last.is_some_and(|t| now.saturating_duration_since(t) < WARN_EVERY) {
        return false;
    }
    *last = Some(now);
    true
}

/// The environment `pairs` make, as the exporters read variables (`|name| std::env::var(name)
/// .ok()`), for tests.
#[cfg(all(test, any(feature = "otlp", feature = "console")))]
pub(crate) fn env_of(
    pairs: &'static [(&'static str, &'static str)],
) -> impl Fn(&str) -> Option<String> {
    move |n: &str| {
        pairs
            .iter()
            .find(|(k, _)| *k == n)
            .map(|(_, v)| v.to_string())
    }
}

/// A running exporter. Dropping it stops it, after it has sent what it was handed.
pub(crate) trait Exporter: Send + Sync {
    /// Its part of the start-up line (`Prometheus http://127.0.0.1:9464/metrics`).
    fn describe(&self) -> String;

    /// The detector is stopping: take no more requests from outside (the last events still
    /// come, through its sink).
    fn close(&mut self) {}

    /// pinwatch's metrics, for [`Detector::prometheus`](crate::Detector::prometheus).
    #[cfg(feature = "prometheus")]
    fn prometheus(&self) -> Option<&prometheus::PinwatchCollector> {
        None
    }
}

/// What an exporter's `start` returns when its settings ask for it.
pub(crate) struct Started {
    /// Where the export thread hands it each event (never waits): a sink the export thread runs
    /// itself, or one on a thread of its own ([`on_own_thread`], its drops counted under the
    /// exporter's feature: `pinwatch_events_dropped_total{sink}`).
    pub sink: Outlet,
    pub exporter: Box<dyn Exporter>,
}

/// Starts an exporter, or returns `None` when the settings do not ask for it.
pub(crate) type StartFn = fn(&Parts) -> Result<Option<Started>, Error>;

/// One line of [`EXPORTERS`].
pub(crate) struct Entry {
    /// How the start-up line names it (`Prometheus off`).
    pub name: &'static str,
    /// `None` in a build without its feature.
    pub start: Option<StartFn>,
}

/// An [`Entry`] for the exporter in module `$module`, built with cargo feature `$feature`.
macro_rules! exporter {
    ($feature:literal, $name:literal, $module:ident) => {
        Entry {
            name: $name,
            #[cfg(feature = $feature)]
            start: Some($module::start),
            #[cfg(not(feature = $feature))]
            start: None,
        }
    };
}

/// The exporters, in the order they start, are named in the start-up line and stop. Each
/// module's `start` returns `None` when the settings do not ask for it.
const EXPORTERS: &[Entry] = &[
    exporter!("prometheus", "Prometheus", prometheus),
    exporter!("otlp", "OTLP", otlp),
    exporter!("console", "console", console),
];

/// Starts the exporters the settings ask for, adding their sinks to `sinks`.
pub(crate) fn start_exporters(parts: &Parts, sinks: &mut Vec<Outlet>) -> Result<Running, Error> {
    Running::start(parts, EXPORTERS, sinks)
}

/// Receives finished events, one at a time. A sink added with
/// [`Builder::sink`](crate::Builder::sink) runs on a thread of its own behind a bounded queue: a
/// slow sink loses its own events (counted), never another's.
///
/// Any `FnMut(&PinnedEvent) + Send + 'static` closure is a sink. A sink that panics loses that
/// event only (counted with its drops); the others still get it.
pub trait Sink: Send + 'static {
    /// One event.
    fn event(&mut self, event: &PinnedEvent);

    /// Called once when the detector stops, after the last event, unless the stop has given up
    /// waiting for the sink (5 s for every sink on a thread of its own, together): then the
    /// events still queued for it are dropped and counted, and this is not called.
    fn flush(&mut self) {}
}

impl<F: FnMut(&PinnedEvent) + Send + 'static> Sink for F {
    fn event(&mut self, event: &PinnedEvent) {
        self(event)
    }
}

/// A detector's sinks before it starts: those the export thread runs itself, in order (they
/// never block: the recordings, the flight recording, in-memory views), and those that may
/// block, each to run on a thread of its own ([`on_own_thread`]) with the name its drops are
/// counted under.
#[derive(Default)]
pub(crate) struct Sinks {
    pub inline: Vec<Box<dyn Sink>>,
    pub own_thread: Vec<(&'static str, Box<dyn Sink>)>,
}

/// The sinks the configuration turns on. `recorder` is the detector's recording: its sink is
/// always there (first: nothing holds it back), and `PINWATCH_RECORD` starts it. `flight` is
/// the flight recording (`PINWATCH_FLIGHT_SIZE`), when on: it gets every event the recording
/// gets. The `tracing` sink writes through the service's subscriber, which may block: it runs
/// on a thread of its own.
pub(crate) fn builtin(
    config: &Config,
    recorder: &Recorder,
    flight: Option<&Flight>,
) -> Result<Sinks, Error> {
    let mut sinks = Sinks::default();
    if config.tracing {
        // The analysis keeps as much of the stack as the settings in force say (they may
        // change at run time): print all it kept.
        sinks.own_thread.push((
            "tracing",
            Box::new(
                TracingSink::new(crate::config::Stacks::Full).with_stderr_fallback(config.announce),
            ),
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
    sinks
        .inline
        .push(Box::new(recorder.sink_with(flight.cloned())));
    Ok(sinks)
}
