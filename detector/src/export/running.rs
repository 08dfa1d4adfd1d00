//! The exporters of a running detector: each way out that runs beside the export thread (an
//! endpoint, a client, a thread of its own) is started from [`EXPORTERS`](super::EXPORTERS)
//! in its order, named in the start-up line, closed to requests when the detector stops, and
//! dropped after the export thread has flushed the sinks (an exporter's client on a thread of
//! its own is one of them, waited for a bounded time with the others).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::{Entry, Exporter, Flight, Identity, Outlet};
use crate::watch::Shared;
use crate::Error;

/// The parts of a running detector that the exporters and the control socket read.
#[derive(Clone)]
pub(crate) struct Parts {
    pub watched: Arc<Shared>,
    /// The watched runtime (its workers, their queues).
    pub handle: tokio::runtime::Handle,
    /// The flight recording and whose it is, when on.
    pub flight: Option<(Flight, Identity)>,
    /// Where the runtime was built.
    pub built_at: &'static std::panic::Location<'static>,
    pub drops: Drops,
}

/// Events lost by the sinks that have a queue of their own, by sink (`otlp`, `console`), beside
/// the export queue's own drops. Clones share it.
#[derive(Clone, Default)]
pub(crate) struct Drops(Arc<Mutex<Vec<SinkDrops>>>);

/// A sink's name and its count of lost events.
type SinkDrops = (&'static str, Arc<AtomicU64>);

impl Drops {
    pub(crate) fn add(&self, sink: &'static str, counter: Arc<AtomicU64>) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((sink, counter));
    }

    /// Each sink's drops so far, in the order the sinks started; sinks of one name (the
    /// builder's sinks, all `sink`) summed.
    pub(crate) fn totals(&self) -> Vec<(&'static str, u64)> {
        let list = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out: Vec<(&'static str, u64)> = Vec::new();
        for (sink, n) in list.iter() {
            let n = n.load(Ordering::Relaxed);
            match out.iter_mut().find(|(s, _)| s == sink) {
                Some((_, total)) => *total += n,
                None => out.push((sink, n)),
            }
        }
        out
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
    /// If one fails or panics, those already started stop as they are dropped (none waits for
    /// its sink: one with a thread has it on its own, [`on_own_thread`](super::on_own_thread)).
    pub(crate) fn start(
        parts: &Parts,
        entries: &[Entry],
        sinks: &mut Vec<Outlet>,
    ) -> Result<Running, Error> {
        let mut out = Running::none();
        for entry in entries {
            let started = match entry.start {
                Some(start) => start(parts)?,
                None => None,
            };
            let Some(started) = started else {
                out.described.push(format!("{} off", entry.name));
                continue;
            };
            // A panic here drops `started` whole: no sink is added for it.
            out.described.push(started.exporter.describe());
            out.running.push(started.exporter);
            sinks.push(started.sink);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Sinks of one name (the builder's, all `sink`) are one count: their sum, in the order
    /// the first of them started.
    #[test]
    fn drops_of_sinks_of_one_name_are_summed() {
        let drops = Drops::default();
        for (sink, n) in [("sink", 3), ("otlp", 1), ("sink", 4)] {
            drops.add(sink, Arc::new(AtomicU64::new(n)));
        }
        assert_eq!(drops.totals(), vec![("sink", 7), ("otlp", 1)]);
    }
}
