//! The exporters' lifecycle: each way out that runs beside the export thread (an endpoint, a
//! client, a thread of its own) is started from [`EXPORTERS`](super::EXPORTERS) in its order,
//! named in the start-up line, closed to requests when the detector stops, and dropped — its
//! queue drained — after the export thread has handed it the last event.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::{Flight, Identity, Sink};
use crate::watch::Watched;
use crate::Error;

/// The parts of a running detector that the exporters and the control socket read.
#[derive(Clone)]
pub(crate) struct Parts {
    pub watched: Arc<Watched>,
    /// The watched runtime (its workers, their queues).
    pub handle: tokio::runtime::Handle,
    /// The flight recording and whose it is, when on.
    pub flight: Option<(Flight, Identity)>,
    /// Where the runtime was built.
    pub built_at: &'static std::panic::Location<'static>,
    pub drops: Drops,
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
    fn prometheus(&self) -> Option<&super::prometheus::PinwatchCollector> {
        None
    }
}

/// What an exporter's `start` returns when its settings ask for it.
pub(crate) struct Started {
    pub exporter: Box<dyn Exporter>,
    /// Where the export thread hands it each event (never waits).
    pub sink: Box<dyn Sink>,
    /// Events its own queue dropped, when it has one: `pinwatch_events_dropped_total{sink}`.
    pub dropped: Option<Arc<AtomicU64>>,
}

/// Starts an exporter, or returns `None` when the settings do not ask for it.
pub(crate) type StartFn = fn(&Parts) -> Result<Option<Started>, Error>;

/// One line of [`EXPORTERS`](super::EXPORTERS).
pub(crate) struct Entry {
    /// How the start-up line names it (`Prometheus off`).
    pub name: &'static str,
    /// Its cargo feature: the `sink` label of its drops.
    pub feature: &'static str,
    /// `None` in a build without its feature.
    pub start: Option<StartFn>,
}

/// An [`Entry`] for the exporter in module `$module`, built with cargo feature `$feature`.
macro_rules! exporter {
    ($feature:literal, $name:literal, $module:ident) => {
        $crate::export::exporter::Entry {
            name: $name,
            feature: $feature,
            #[cfg(feature = $feature)]
            start: Some($module::start),
            #[cfg(not(feature = $feature))]
            start: None,
        }
    };
}
pub(crate) use exporter;

/// Events lost by the sinks that have a queue of their own, by sink (`otlp`, `console`), beside
/// the export queue's own drops. Clones share it.
#[derive(Clone, Default)]
pub(crate) struct Drops(Arc<Mutex<Vec<SinkDrops>>>);

/// A sink's name and its count of lost events.
type SinkDrops = (&'static str, Arc<AtomicU64>);

impl Drops {
    fn add(&self, sink: &'static str, counter: Arc<AtomicU64>) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((sink, counter));
    }

    /// Each sink's drops so far, in the order the sinks started.
    pub(crate) fn totals(&self) -> Vec<(&'static str, u64)> {
        let list = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        list.iter()
            .map(|(sink, n)| (*sink, n.load(Ordering::Relaxed)))
            .collect()
    }
}

/// The exporters a detector runs, in [`EXPORTERS`](super::EXPORTERS) order.
pub(crate) struct Running {
    /// Each entry's description for the start-up line, whether it runs or not.
    described: Vec<String>,
    pub(super) running: Vec<Box<dyn Exporter>>,
}

impl Running {
    /// Starts every exporter the settings ask for, in order, and adds their sinks to `sinks`.
    pub(crate) fn start(
        parts: &Parts,
        entries: &[Entry],
        sinks: &mut Vec<Box<dyn Sink>>,
    ) -> Result<Running, Error> {
        let mut out = Running {
            described: Vec::new(),
            running: Vec::new(),
        };
        for entry in entries {
            let started = match entry.start {
                Some(start) => start(parts)?,
                None => None,
            };
            let Some(started) = started else {
                out.described.push(format!("{} off", entry.name));
                continue;
            };
            if let Some(counter) = started.dropped {
                parts.drops.add(entry.feature, counter);
            }
            sinks.push(started.sink);
            out.described.push(started.exporter.describe());
            out.running.push(started.exporter);
        }
        Ok(out)
    }

    /// No exporter (a detector that is off).
    pub(crate) fn none() -> Running {
        Running {
            described: Vec::new(),
            running: Vec::new(),
        }
    }

    /// What the start-up line says of them: `Prometheus http://…/metrics; OTLP off; console off`.
    pub(crate) fn describe(&self) -> String {
        self.described.join("; ")
    }

    /// The detector is stopping: no exporter takes requests from outside any more.
    pub(crate) fn close(&mut self) {
        for e in self.running.iter_mut() {
            e.close();
        }
    }
}
