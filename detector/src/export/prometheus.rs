//! Prometheus: pinwatch's metrics, updated from the export thread and read live at each scrape;
//! an HTTP endpoint on a thread of pinwatch's own (never on the watched runtime: it must answer
//! while every worker is pinned); or a collector for a `prometheus::Registry` of yours.
//!
//! [`METRICS`] lists every metric with its type and meaning; docs/prometheus.md's table, the
//! dashboards and the alert rules are checked against it by tests.

use std::sync::{Arc, Mutex, PoisonError};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    Counter, CounterVec, Encoder, Gauge, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

use super::Sink;
use super::{Exporter, Outlet, Parts, Started};
use crate::event::{PinnedEvent, Reason};
use crate::Error;

impl crate::Builder {
    /// Serves Prometheus metrics at `http://addr/metrics` from a thread of pinwatch's own
    /// (`PINWATCH_PROMETHEUS_ADDR`). It answers while every worker is pinned.
    pub fn prometheus_addr(mut self, addr: std::net::SocketAddr) -> Self {
        self.config.prometheus_addr = Some(addr);
        self
    }

    /// Registers pinwatch's metrics ([`METRICS`]) into `registry`, for a service that already
    /// serves its own `/metrics`. They are in it while the detector runs: a detector that stops
    /// (or whose start fails) takes them out, so that the next one can register into it.
    pub fn prometheus_registry(mut self, registry: &Registry) -> Self {
        self.config.prometheus_registry = Some(registry.clone());
        self
    }
}

impl crate::Detector {
    /// pinwatch's Prometheus metrics, when the endpoint or a registry was asked for.
    pub fn prometheus(&self) -> Option<&PinwatchCollector> {
        self.exporters.running.iter().find_map(|e| e.prometheus())
    }
}

/// The collector, its sink, and the endpoint and the registry when they were asked for.
struct Prometheus {
    collector: PinwatchCollector,
    endpoint: Option<Endpoint>,
    /// Held for its `Drop`.
    _registered: Option<Registered>,
}

/// pinwatch's collector in a registry of the service's, for as long as this is kept: dropped
/// (the detector stopped, or its start failed after registering), it takes the collector out
/// again. Left in, a detector started again on the same registry (a runtime rebuilt, a start
/// retried once its port is free) would be refused as a duplicate, and the registry would go on
/// serving the metrics of a detector that is gone.
struct Registered {
    registry: Registry,
    collector: PinwatchCollector,
}

impl Registered {
    fn new(registry: &Registry, collector: &PinwatchCollector) -> Result<Registered, Error> {
        registry
            .register(Box::new(collector.clone()))
            .map_err(|e| Error::InvalidSetting {
                setting: "prometheus_registry",
                reason: match e {
                    prometheus::Error::AlreadyReg => "cannot register pinwatch's metrics: this \
                        registry already has one of their names (`pinwatch_*`), from another \
                        detector still running or a metric of the service's; shut that detector \
                        down first, or give each detector a registry of its own"
                        .to_owned(),
                    e => format!(
                        "cannot register pinwatch's metrics: {e}; their names (`pinwatch_*`, and \
                         `pinwatch_collector`, which tells pinwatch's collectors apart) must be \
                         free in the registry"
                    ),
                },
            })?;
        Ok(Registered {
            registry: registry.clone(),
            collector: collector.clone(),
        })
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        // An error is a collector the service has taken out itself: nothing left to do.
        let _ = self.registry.unregister(Box::new(self.collector.clone()));
    }
}

impl Exporter for Prometheus {
    fn describe(&self) -> String {
        match &self.endpoint {
            Some(e) => format!("Prometheus http://{}/metrics", e.local_addr()),
            None => "Prometheus metrics in the service's registry".to_owned(),
        }
    }

    fn close(&mut self) {
        // First of all: no scrape reaches a detector that is stopping.
        drop(self.endpoint.take());
    }

    fn prometheus(&self) -> Option<&PinwatchCollector> {
        Some(&self.collector)
    }
}

/// The collector when `PINWATCH_PROMETHEUS_ADDR` or a registry asks for it, registered into the
/// registry, and the endpoint serving it and the pinned-time profile.
pub(crate) fn start(parts: &Parts) -> Result<Option<Started>, Error> {
    let config = &parts.watched.config;
    let registry = config.prometheus_registry.as_ref();
    if config.prometheus_addr.is_none() && registry.is_none() {
        return Ok(None);
    }
    let collector =
        PinwatchCollector::new(config.prometheus_max_locations, parts.live()).map_err(|e| {
            Error::InvalidSetting {
                setting: "prometheus",
                reason: e.to_string(),
            }
        })?;
    // Before the endpoint: a port that cannot be listened on drops it, which unregisters.
    let registered = registry
        .map(|r| Registered::new(r, &collector))
        .transpose()?;
    let endpoint = match config.prometheus_addr {
        Some(addr) => Some(Endpoint::serve(
            addr,
            collector.clone(),
            parts.flight.as_ref().map(|(f, _)| f.clone()),
        )?),
        None => None,
    };
    Ok(Some(Started {
        sink: Outlet::Inline(Box::new(collector.sink())),
        exporter: Box::new(Prometheus {
            collector,
            endpoint,
            _registered: registered,
        }),
    }))
}

/// One exported metric: name, type and meaning.
#[derive(Clone, Copy, Debug)]
pub struct MetricDoc {
    /// Its name.
    pub name: &'static str,
    /// `counter`, `gauge` or `histogram`.
    pub kind: &'static str,
    /// Its labels.
    pub labels: &'static [&'static str],
    /// What it means.
    pub help: &'static str,
}

/// Every metric pinwatch exports.
pub const METRICS: &[MetricDoc] = &[
    MetricDoc {
        name: "pinwatch_pins_total",
        kind: "counter",
        labels: &["reason"],
        help: "Polls that pinned a worker past the threshold, counted when first reported (a pin that never ends counts too; a multi-thread runtime's block_on body holds no worker and is counted only by location and request).",
    },
    MetricDoc {
        name: "pinwatch_pin_duration_seconds",
        kind: "histogram",
        labels: &["reason"],
        help: "Duration of completed pins of workers.",
    },
    MetricDoc {
        name: "pinwatch_pinned_seconds_total",
        kind: "counter",
        labels: &["reason"],
        help: "Worker-seconds lost to pins, advanced live while a pin runs (a multi-thread runtime's block_on body holds no worker and is not counted).",
    },
    MetricDoc {
        name: "pinwatch_workers_pinned",
        kind: "gauge",
        labels: &[],
        help: "Workers pinned right now (a multi-thread runtime's block_on body holds no worker and is not counted: see pinwatch_block_on_blocked).",
    },
    MetricDoc {
        name: "pinwatch_block_on_blocked",
        kind: "gauge",
        labels: &[],
        help: "block_on bodies of a multi-thread runtime blocked past the threshold right now: the body (the main of #[pinwatch::main]) holds no worker, so it is not among the workers pinned.",
    },
    MetricDoc {
        name: "pinwatch_workers",
        kind: "gauge",
        labels: &[],
        help: "Workers of the watched runtime.",
    },
    MetricDoc {
        name: "pinwatch_oldest_pin_seconds",
        kind: "gauge",
        labels: &[],
        help: "Age of the oldest pin still running; 0 when none runs.",
    },
    MetricDoc {
        name: "pinwatch_pins_by_location_total",
        kind: "counter",
        labels: &["location"],
        help: "Pins per function of the service's own code that pinned (its app frame, else the top application frame), with its file relative to its crate, named after the crate: svc::api::orders (svc/src/api.rs), the same on every build machine; at most PINWATCH_PROMETHEUS_MAX_LOCATIONS values, \"other\" among them.",
    },
    MetricDoc {
        name: "pinwatch_pins_by_request_total",
        kind: "counter",
        labels: &["request"],
        help: "Pins per request: the pinned poll's outermost request-like tracing span as method and route (GET /users/{id}: http.route, else the uri's path with ids made {id}, else the outermost span's name; \"none\" outside any span; needs pinwatch::tracing_layer()); at most PINWATCH_PROMETHEUS_MAX_LOCATIONS values, \"other\" among them.",
    },
    MetricDoc {
        name: "pinwatch_events_dropped_total",
        kind: "counter",
        labels: &["sink"],
        help: "Pin reports lost: sink=\"queue\" when the queue to the export thread was full, sink=\"otlp\" when the OTLP exporter's queue was full or its collector did not take them, sink=\"console\" when the console thread's queue was full, sink=\"tracing\" when the log sink's queue was full (its writer blocked), sink=\"sink\" for the sinks added with Builder::sink (summed), sink=\"recording\" for the events a recording could not write, sink=\"log\" for pinwatch's own log lines its log thread could not take.",
    },
    MetricDoc {
        name: "pinwatch_runtime_stalled",
        kind: "gauge",
        labels: &[],
        help: "1 while a pin stalls the whole runtime (nobody drives its timers and I/O: every free worker asleep; where that cannot be seen, pinwatch's heartbeat late past the threshold), else 0.",
    },
    MetricDoc {
        name: "pinwatch_runtime_stall_seconds_total",
        kind: "counter",
        labels: &[],
        help: "Seconds the whole runtime spent stalled by pins, advanced live.",
    },
    MetricDoc {
        name: "pinwatch_driver_handovers_total",
        kind: "counter",
        labels: &[],
        help: "Times a pin left the runtime's timers and I/O undriven and a worker pinwatch woke took them over (PINWATCH_RESCUE).",
    },
    MetricDoc {
        name: "pinwatch_driver_rescued_pins_total",
        kind: "counter",
        labels: &[],
        help: "Pins that ran on a second or more after their hand-over (pinwatch_driver_handovers_total): without PINWATCH_RESCUE each would have stalled the whole runtime that long; counted once a pin, at the first report that shows it (a pin still running too).",
    },
    MetricDoc {
        name: "pinwatch_victim_tasks_total",
        kind: "counter",
        labels: &["reason"],
        help: "Tasks delayed by pins: polled after waiting at least the threshold while a pin ran, by the pin's reason, counted when the pin completes (measured with the schedule-latency feature only; 0 without it).",
    },
    MetricDoc {
        name: "pinwatch_victim_wait_seconds_total",
        kind: "counter",
        labels: &["reason"],
        help: "Seconds those tasks waited to be polled, added up, by the pin's reason (schedule-latency feature only).",
    },
    MetricDoc {
        name: "pinwatch_busy_waits_total",
        kind: "counter",
        labels: &[],
        help: "Tasks polled after waiting at least the threshold while no pin ran: a busy runtime, not a pinned worker (schedule-latency feature only).",
    },
    MetricDoc {
        name: "pinwatch_threshold_seconds",
        kind: "gauge",
        labels: &[],
        help: "The pinning threshold in force.",
    },
    MetricDoc {
        name: "pinwatch_build_info",
        kind: "gauge",
        labels: &["version"],
        help: "Always 1; the pinwatch version as a label.",
    },
];

fn help(name: &str) -> &'static str {
    METRICS
        .iter()
        .find(|m| m.name == name)
        .map_or("", |m| m.help)
}

use super::{LiveFn, DURATION_BUCKETS};

struct Metrics {
    pins: IntCounterVec,
    durations: HistogramVec,
    pinned_seconds: CounterVec,
    workers_pinned: IntGauge,
    bodies_blocked: IntGauge,
    workers: IntGauge,
    oldest: Gauge,
    by_location: IntCounterVec,
    by_request: IntCounterVec,
    dropped: IntCounterVec,
    stalled: IntGauge,
    stalled_seconds: Counter,
    handovers: IntCounter,
    rescued_pins: IntCounter,
    victim_tasks: IntCounterVec,
    victim_wait: CounterVec,
    busy_waits: IntCounter,
    threshold: Gauge,
    build_info: IntGaugeVec,
}

struct Inner {
    metrics: Metrics,
    counted: Mutex<Counted>,
    live: LiveFn,
    descs: Vec<Desc>,
}

/// What the counters hold. Changed under one lock by events and scrapes alike: two scrapes at
/// once (a registry of the service's own, gathered from two threads) add each increment once.
struct Counted {
    /// Of each pin.
    tally: super::PinTally,
    /// Of the detector's running totals.
    totals: Totals,
}

/// The detector's running totals as the counters have them: a scrape adds what its [`Live`]
/// read has past them, never what another scrape added already, and a read older than one
/// already added adds nothing.
///
/// [`Live`]: super::live::Live
#[derive(Debug, Default, PartialEq)]
struct Totals {
    stall: std::time::Duration,
    handovers: u64,
    busy_waits: u64,
    /// Events dropped, by where.
    dropped: Vec<(&'static str, u64)>,
}

impl Totals {
    /// Catches up to `live`; returns what that added to each.
    fn catch_up(&mut self, live: &super::live::Live) -> Totals {
        fn up(have: &mut u64, now: u64) -> u64 {
            let more = now.saturating_sub(*have);
            *have += more;
            more
        }
        let stall = live.stall.1.saturating_sub(self.stall);
        self.stall += stall;
        let mut dropped = Vec::with_capacity(live.dropped.len());
        for &(sink, now) in &live.dropped {
            let i = match self.dropped.iter().position(|(s, _)| *s == sink) {
                Some(i) => i,
                None => {
                    self.dropped.push((sink, 0));
                    self.dropped.len() - 1
                }
            };
            dropped.push((sink, up(&mut self.dropped[i].1, now)));
        }
        Totals {
            stall,
            handovers: up(&mut self.handovers, live.handovers),
            busy_waits: up(&mut self.busy_waits, live.busy_waits),
            dropped,
        }
    }
}

/// pinwatch's metrics as a `prometheus` collector. Register it into your own registry
/// ([`Builder::prometheus_registry`](crate::Builder::prometheus_registry)) or let pinwatch
/// serve it (`PINWATCH_PROMETHEUS_ADDR`).
#[derive(Clone)]
pub struct PinwatchCollector {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PinwatchCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinwatchCollector").finish_non_exhaustive()
    }
}

impl PinwatchCollector {
    pub(crate) fn new(
        max_locations: usize,
        live: LiveFn,
    ) -> Result<PinwatchCollector, prometheus::Error> {
        let opts = |name: &str| Opts::new(name, help(name));
        let metrics = Metrics {
            pins: IntCounterVec::new(opts("pinwatch_pins_total"), &["reason"])?,
            durations: HistogramVec::new(
                HistogramOpts::new(
                    "pinwatch_pin_duration_seconds",
                    help("pinwatch_pin_duration_seconds"),
                )
                .buckets(DURATION_BUCKETS.to_vec()),
                &["reason"],
            )?,
            pinned_seconds: CounterVec::new(opts("pinwatch_pinned_seconds_total"), &["reason"])?,
            workers_pinned: IntGauge::with_opts(opts("pinwatch_workers_pinned"))?,
            bodies_blocked: IntGauge::with_opts(opts("pinwatch_block_on_blocked"))?,
            workers: IntGauge::with_opts(opts("pinwatch_workers"))?,
            oldest: Gauge::with_opts(opts("pinwatch_oldest_pin_seconds"))?,
            by_location: IntCounterVec::new(
                opts("pinwatch_pins_by_location_total"),
                &["location"],
            )?,
            by_request: IntCounterVec::new(opts("pinwatch_pins_by_request_total"), &["request"])?,
            dropped: IntCounterVec::new(opts("pinwatch_events_dropped_total"), &["sink"])?,
            stalled: IntGauge::with_opts(opts("pinwatch_runtime_stalled"))?,
            stalled_seconds: Counter::with_opts(opts("pinwatch_runtime_stall_seconds_total"))?,
            handovers: IntCounter::with_opts(opts("pinwatch_driver_handovers_total"))?,
            rescued_pins: IntCounter::with_opts(opts("pinwatch_driver_rescued_pins_total"))?,
            victim_tasks: IntCounterVec::new(opts("pinwatch_victim_tasks_total"), &["reason"])?,
            victim_wait: CounterVec::new(opts("pinwatch_victim_wait_seconds_total"), &["reason"])?,
            busy_waits: IntCounter::with_opts(opts("pinwatch_busy_waits_total"))?,
            threshold: Gauge::with_opts(opts("pinwatch_threshold_seconds"))?,
            build_info: IntGaugeVec::new(opts("pinwatch_build_info"), &["version"])?,
        };
        // Every reason exists at 0 from the start, so that rate() and alerts work before the
        // first pin.
        for r in Reason::ALL {
            metrics.pins.with_label_values(&[r.as_str()]);
            metrics.durations.with_label_values(&[r.as_str()]);
            metrics.pinned_seconds.with_label_values(&[r.as_str()]);
            metrics.victim_tasks.with_label_values(&[r.as_str()]);
            metrics.victim_wait.with_label_values(&[r.as_str()]);
        }
        metrics.dropped.with_label_values(&["queue"]);
        metrics.by_location.with_label_values(&["other"]);
        metrics.by_request.with_label_values(&["other"]);
        metrics
            .build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        let collectors: [&dyn Collector; 19] = [
            &metrics.pins,
            &metrics.durations,
            &metrics.pinned_seconds,
            &metrics.workers_pinned,
            &metrics.bodies_blocked,
            &metrics.workers,
            &metrics.oldest,
            &metrics.by_location,
            &metrics.by_request,
            &metrics.dropped,
            &metrics.stalled,
            &metrics.stalled_seconds,
            &metrics.handovers,
            &metrics.rescued_pins,
            &metrics.victim_tasks,
            &metrics.victim_wait,
            &metrics.busy_waits,
            &metrics.threshold,
            &metrics.build_info,
        ];
        let mut descs: Vec<Desc> = collectors
            .iter()
            .flat_map(|c| c.desc().into_iter().cloned())
            .collect();
        descs.push(own_desc()?);
        Ok(PinwatchCollector {
            inner: Arc::new(Inner {
                metrics,
                counted: Mutex::new(Counted {
                    tally: super::PinTally::new(max_locations),
                    totals: Totals::default(),
                }),
                live,
                descs,
            }),
        })
    }

    /// A sink feeding this collector (runs on the export thread).
    pub(crate) fn sink(&self) -> PrometheusSink {
        PrometheusSink {
            inner: Arc::clone(&self.inner),
        }
    }

    /// Brings the live values up to now: workers pinned, the oldest pin, the worker-seconds of
    /// pins still running, drops, busy waits.
    fn refresh(&self) {
        let inner = &self.inner;
        let live = (inner.live)();
        let m = &inner.metrics;
        m.workers.set(live.workers as i64);
        m.threshold.set(live.threshold.as_secs_f64());
        m.stalled.set(i64::from(live.stall.0));
        m.workers_pinned.set(live.workers_pinned as i64);
        m.bodies_blocked.set(live.bodies_blocked as i64);
        m.oldest.set(live.oldest_worker_pin.as_secs_f64());
        let mut counted = inner.counted.lock().unwrap_or_else(PoisonError::into_inner);
        let new = counted.totals.catch_up(&live);
        m.stalled_seconds.inc_by(new.stall.as_secs_f64());
        m.handovers.inc_by(new.handovers);
        m.busy_waits.inc_by(new.busy_waits);
        for (sink, more) in new.dropped {
            m.dropped.with_label_values(&[sink]).inc_by(more);
        }
        counted.tally.advance(&live.pinned, |reason, more| {
            m.pinned_seconds
                .with_label_values(&[reason.as_str()])
                .inc_by(more.as_secs_f64())
        });
    }

    /// The metrics in Prometheus' text format.
    pub fn render(&self) -> String {
        let families = self.collect();
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&families, &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

/// A description of the collector's own, never collected. A registry takes a collector out by
/// its set of descriptions, and every pinwatch collector has the same metrics: without one of
/// its own, a detector stopping would take out another's (registered after the service had
/// taken the first one's out itself). Its name is pinwatch's, so a second collector in the
/// registry is still refused for its metrics' names.
fn own_desc() -> Result<Desc, prometheus::Error> {
    static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Desc::new(
        "pinwatch_collector".to_owned(),
        "Tells one pinwatch collector from another in a registry; never exported.".to_owned(),
        Vec::new(),
        std::collections::HashMap::from([("collector".to_owned(), n.to_string())]),
    )
}

impl Collector for PinwatchCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.inner.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.refresh();
        let m = &self.inner.metrics;
        let collectors: [&dyn Collector; 19] = [
            &m.pins,
            &m.durations,
            &m.pinned_seconds,
            &m.workers_pinned,
            &m.bodies_blocked,
            &m.workers,
            &m.oldest,
            &m.by_location,
            &m.by_request,
            &m.dropped,
            &m.stalled,
            &m.stalled_seconds,
            &m.handovers,
            &m.rescued_pins,
            &m.victim_tasks,
            &m.victim_wait,
            &m.busy_waits,
            &m.threshold,
            &m.build_info,
        ];
        collectors.iter().flat_map(|c| c.collect()).collect()
    }
}

/// Feeds a [`PinwatchCollector`] with finished events.
pub(crate) struct PrometheusSink {
    inner: Arc<Inner>,
}

impl Sink for PrometheusSink {
    fn event(&mut self, e: &PinnedEvent) {
        let m = &self.inner.metrics;
        let mut counted = self
            .inner
            .counted
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let added = counted.tally.report(e);
        if let Some(labels) = added.labels {
            m.by_location.with_label_values(&[&labels.location]).inc();
            m.by_request.with_label_values(&[&labels.request]).inc();
        }
        if let Some(reason) = added.pin {
            m.pins.with_label_values(&[reason.as_str()]).inc();
        }
        if let Some((reason, more)) = added.time {
            m.pinned_seconds
                .with_label_values(&[reason.as_str()])
                .inc_by(more.as_secs_f64());
        }
        if added.rescued {
            m.rescued_pins.inc();
        }
        if let Some((reason, duration)) = added.duration {
            m.durations
                .with_label_values(&[reason.as_str()])
                .observe(duration.as_secs_f64());
        }
        if let Some(v) = added.victims {
            let reason = [v.reason.as_str()];
            m.victim_tasks.with_label_values(&reason).inc_by(v.tasks);
            m.victim_wait
                .with_label_values(&reason)
                .inc_by(v.wait.as_secs_f64());
        }
    }
}

/// `GET /metrics` on a thread of pinwatch's own: one thread whatever its peers do, bounded in
/// connections, time and request size (see the `http` module).
pub(crate) struct Endpoint {
    server: super::http::Server,
}

/// What to change when the endpoint cannot listen, by why: "pick a free port" was said of an
/// address that is not this host's too (helper-119).
fn listen_hint(kind: std::io::ErrorKind) -> &'static str {
    match kind {
        std::io::ErrorKind::AddrInUse => "pick a free port",
        std::io::ErrorKind::AddrNotAvailable => {
            "no interface of this host has that address: give one of its own (127.0.0.1, or \
             0.0.0.0 for every interface)"
        }
        std::io::ErrorKind::PermissionDenied => {
            "a port below 1024 needs a privilege this process lacks: pick a higher one"
        }
        _ => "pick another address or port",
    }
}

impl Endpoint {
    /// Listens on `addr` and serves `collector` until dropped.
    pub(crate) fn serve(
        addr: std::net::SocketAddr,
        collector: PinwatchCollector,
        flight: Option<super::Flight>,
    ) -> Result<Endpoint, Error> {
        let listen_error = |reason: String| Error::PrometheusListen { addr, reason };
        let listener = std::net::TcpListener::bind(addr)
            .map_err(|e| listen_error(format!("{e}; {}", listen_hint(e.kind()))))?;
        let registry = Registry::new();
        registry
            .register(Box::new(collector))
            .map_err(|e| listen_error(e.to_string()))?;
        let profiles = Arc::default();
        let server = super::http::Server::start(listener, "pinwatch-prometheus", move |req| {
            route(&registry, flight.as_ref(), &profiles, req)
        })
        .map_err(|source| Error::Thread {
            what: "prometheus",
            source,
        })?;
        Ok(Endpoint { server })
    }

    /// Where it listens (the port chosen when `addr` asked for port 0).
    pub(crate) fn local_addr(&self) -> std::net::SocketAddr {
        self.server.local_addr()
    }
}

/// Where the pinned-time profile is served (like Go's `net/http/pprof` profiles).
pub const PPROF_PATH: &str = "/debug/pprof/pinned";

/// The longest `seconds` of `/debug/pprof/pinned?seconds=N` (a year): what a buffer of the last
/// pins could hold, with room.
const MAX_PPROF_SECONDS: u64 = 366 * 24 * 3600;

/// The profiles of `/debug/pprof/pinned`: one is made at a time, on a thread of its own
/// ([`Response::later`](super::http::Response::later)), and after each the next is refused
/// (`503`, with `Retry-After`) for as long as it took to make. A profile of a full 4 MiB flight
/// recording costs hundreds of ms of CPU, of a 1 GiB one seconds: peers asking for one after
/// another would otherwise take a core from the service (and, when they were made on the
/// endpoint's own thread, held `/metrics` up for as long: helper-104).
#[derive(Debug, Default)]
struct Profiles {
    /// When the one being made was asked for.
    making: Option<std::time::Instant>,
    /// Before then, no profile is made.
    free_at: Option<std::time::Instant>,
}

/// Ends a profile's turn in [`Profiles`] when its thread is done with it, whatever happened
/// there.
struct Making {
    profiles: Arc<Mutex<Profiles>>,
    since: std::time::Instant,
}

impl Drop for Making {
    fn drop(&mut self) {
        let done = std::time::Instant::now();
        let mut profiles = self.profiles.lock().unwrap_or_else(PoisonError::into_inner);
        profiles.making = None;
        profiles.free_at = Some(done + (done - self.since));
    }
}

/// The endpoint's paths.
fn route(
    registry: &Registry,
    flight: Option<&super::Flight>,
    profiles: &Arc<Mutex<Profiles>>,
    req: &super::http::Request<'_>,
) -> super::http::Response {
    use super::http::Response;
    match req.path {
        // A HEAD (a load balancer's or a prober's check) is answered as a GET, without the
        // body (the server drops it).
        "/metrics" if matches!(req.method, "GET" | "HEAD") => {
            let mut body = Vec::new();
            if let Err(e) = TextEncoder::new().encode(&registry.gather(), &mut body) {
                return Response::error(500, &format!("pinwatch: cannot encode the metrics: {e}"));
            }
            Response::ok("text/plain; version=0.0.4; charset=utf-8", body)
        }
        "/metrics" => Response::method_not_allowed("GET, HEAD"),
        PPROF_PATH if req.method == "GET" => {
            let Some(flight) = flight else {
                return Response::error(
                    404,
                    "pinwatch: the flight recording is off (PINWATCH_FLIGHT_SIZE=off), and \
                     /debug/pprof/pinned profiles the pins it holds; turn it on to serve profiles",
                );
            };
            let last = match pprof_seconds(req.query) {
                Ok(last) => last,
                Err(e) => return Response::error(400, &e),
            };
            let now = std::time::Instant::now();
            let mut state = profiles.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(since) = state.making {
                let secs = (now - since).as_secs() + 1;
                return Response::busy(
                    secs,
                    &format!(
                        "pinwatch: a profile is being made, one at a time; try again in {secs} s"
                    ),
                );
            }
            if let Some(at) = state.free_at.filter(|at| now < *at) {
                let secs = (at - now).as_secs() + 1;
                return Response::busy(
                    secs,
                    &format!(
                        "pinwatch: a profile was just made; the next is made once as long as \
                         it took has passed, in {secs} s at the latest: try again then"
                    ),
                );
            }
            state.making = Some(now);
            drop(state);
            let making = Making {
                profiles: profiles.clone(),
                since: now,
            };
            let flight = flight.clone();
            let late = format!(
                "pinwatch: the profile took longer than {} s to make (the flight recording \
                 holds many pins); ask for fewer (?seconds=N), or write it with `pinwatch ctl \
                 PID profile -o FILE`",
                super::http::ANSWER_WAIT.as_secs()
            );
            Response::later("pinwatch-pprof", late, move || {
                let body = flight.profile(last);
                drop(making);
                Response::ok("application/octet-stream", body)
            })
        }
        // A profile costs up to hundreds of ms of a core and closes the endpoint to the next
        // for as long: not for a HEAD, which would throw it away.
        PPROF_PATH => Response::method_not_allowed("GET"),
        _ => Response::error(404, "pinwatch: try /metrics or /debug/pprof/pinned"),
    }
}

/// `seconds=N` of `/debug/pprof/pinned`'s query: the pins of the last N seconds (`None`: all
/// the flight recording holds). Other parameters are ignored, as Go's handlers ignore what they
/// do not know; a bad `seconds` is refused, quoting it (cut and escaped: it is the peer's).
fn pprof_seconds(query: &str) -> Result<Option<std::time::Duration>, String> {
    let Some(value) = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("seconds="))
    else {
        return Ok(None);
    };
    match value.parse::<u64>() {
        Ok(n) if (1..=MAX_PPROF_SECONDS).contains(&n) => {
            Ok(Some(std::time::Duration::from_secs(n)))
        }
        _ => {
            let shown: String = value.chars().take(32).collect();
            Err(format!(
                "pinwatch: seconds={} is not a whole number of seconds from 1 to {MAX_PPROF_SECONDS} \
                 (e.g. {PPROF_PATH}?seconds=60; without it, every pin the flight recording holds)",
                shown.escape_default()
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::State;
    use std::time::Duration;

    fn event(id: u64, state: State, reason: Reason, ms: u64, line: u32) -> PinnedEvent {
        PinnedEvent::for_test(id, state, reason, ms, line)
    }

    fn collector(
        live: Arc<Mutex<Vec<(u64, Duration)>>>,
        max_locations: usize,
    ) -> PinwatchCollector {
        collector_with_busy_waits(live, max_locations, Arc::default())
    }

    /// [`collector`], its live view reporting `busy` busy waits so far.
    fn collector_with_busy_waits(
        live: Arc<Mutex<Vec<(u64, Duration)>>>,
        max_locations: usize,
        busy: Arc<Mutex<u64>>,
    ) -> PinwatchCollector {
        PinwatchCollector::new(
            max_locations,
            Arc::new(move || {
                let pinned = live.lock().unwrap().clone();
                super::super::live::Live {
                    threshold: Duration::from_millis(20),
                    stall: (false, Duration::ZERO),
                    workers_pinned: pinned.len(),
                    oldest_worker_pin: pinned.iter().map(|(_, age)| *age).max().unwrap_or_default(),
                    pinned,
                    bodies_blocked: 0,
                    workers: 2,
                    dropped: vec![("queue", 3)],
                    handovers: 0,
                    busy_waits: *busy.lock().unwrap(),
                }
            }),
        )
        .unwrap()
    }

    fn value(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    }

    #[test]
    fn a_pin_counts_once_and_its_time_advances_live_and_never_goes_back() {
        let live = Arc::new(Mutex::new(vec![]));
        let c = collector(Arc::clone(&live), 50);
        let mut sink = c.sink();
        let pinned = "pinwatch_pinned_seconds_total{reason=\"sleep\"}";
        sink.event(&event(1, State::InProgress, Reason::Sleep, 25, 3));
        *live.lock().unwrap() = vec![(1, Duration::from_millis(500))];
        let t = c.render();
        assert_eq!(value(&t, "pinwatch_pins_total{reason=\"sleep\"}"), 1.0);
        assert_eq!(value(&t, "pinwatch_workers_pinned"), 1.0);
        assert_eq!(value(&t, "pinwatch_oldest_pin_seconds"), 0.5);
        assert!((value(&t, pinned) - 0.5).abs() < 1e-9, "{t}");
        // A later report of the same pin does not count it again, nor go back in time.
        sink.event(&event(1, State::InProgress, Reason::Sleep, 300, 3));
        *live.lock().unwrap() = vec![];
        let t = c.render();
        assert_eq!(value(&t, "pinwatch_pins_total{reason=\"sleep\"}"), 1.0);
        assert!((value(&t, pinned) - 0.5).abs() < 1e-9, "{t}");
        sink.event(&event(1, State::Completed, Reason::Sleep, 700, 3));
        let t = c.render();
        assert!((value(&t, pinned) - 0.7).abs() < 1e-9, "{t}");
        assert_eq!(
            value(&t, "pinwatch_pin_duration_seconds_count{reason=\"sleep\"}"),
            1.0
        );
        assert_eq!(
            value(
                &t,
                "pinwatch_pin_duration_seconds_bucket{reason=\"sleep\",le=\"1\"}"
            ),
            1.0
        );
        assert_eq!(value(&t, "pinwatch_workers_pinned"), 0.0);
        assert_eq!(
            value(&t, "pinwatch_events_dropped_total{sink=\"queue\"}"),
            3.0
        );
        assert_eq!(value(&t, "pinwatch_workers"), 2.0);
    }

    /// A multi-thread runtime's blocked `block_on` body holds no worker: it counts by location
    /// and request, and in none of the workers' series (helper-64, helper-65: it paged as lost
    /// worker time, and made the per-pin average of the workers' pins look short).
    #[test]
    fn a_body_that_holds_no_worker_counts_only_where_it_is() {
        let c = collector(Arc::new(Mutex::new(vec![])), 50);
        let mut sink = c.sink();
        let mut body = event(1, State::InProgress, Reason::Sleep, 500, 3);
        body.block_on = true;
        body.worker.index = None;
        sink.event(&body);
        body.state = State::Completed;
        body.duration = Duration::from_secs(3);
        sink.event(&body);
        let t = c.render();
        assert_eq!(value(&t, "pinwatch_pins_total{reason=\"sleep\"}"), 0.0);
        assert_eq!(
            value(&t, "pinwatch_pinned_seconds_total{reason=\"sleep\"}"),
            0.0
        );
        assert_eq!(
            value(&t, "pinwatch_pin_duration_seconds_count{reason=\"sleep\"}"),
            0.0
        );
        let located: f64 = t
            .lines()
            .filter(|l| {
                l.starts_with("pinwatch_pins_by_location_total{") && !l.contains("\"other\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        assert_eq!(located, 1.0, "{t}");
    }

    fn with_victims(mut e: PinnedEvent, measured: bool, tasks: usize, wait_ms: u64) -> PinnedEvent {
        e.victims = Some(crate::event::Victims {
            measured,
            tasks,
            total_wait: measured.then(|| Duration::from_millis(wait_ms)),
            max_wait: measured.then(|| Duration::from_millis(wait_ms)),
            ..Default::default()
        });
        e
    }

    /// Every reason's victim series exists at 0 before the first pin, as pinwatch_pins_total's
    /// do; a pin's measured victims count once, from its completed report, under its reason;
    /// unmeasured ones count nothing.
    #[test]
    fn victims_count_once_per_pin_by_reason_and_only_when_measured() {
        let c = collector(Arc::default(), 50);
        let tasks =
            |t: &str, r: &str| value(t, &format!("pinwatch_victim_tasks_total{{reason=\"{r}\"}}"));
        let wait = |t: &str, r: &str| {
            value(
                t,
                &format!("pinwatch_victim_wait_seconds_total{{reason=\"{r}\"}}"),
            )
        };
        let t = c.render();
        for r in Reason::ALL {
            assert_eq!(tasks(&t, r.as_str()), 0.0, "{t}");
            assert_eq!(wait(&t, r.as_str()), 0.0, "{t}");
        }
        assert_eq!(value(&t, "pinwatch_busy_waits_total"), 0.0, "{t}");
        let mut sink = c.sink();
        // Partial victims on in_progress reports, then the final ones on the completed report.
        let lock = |state, tasks, wait| {
            with_victims(event(1, state, Reason::LockWait, 400, 3), true, tasks, wait)
        };
        sink.event(&lock(State::InProgress, 2, 60));
        sink.event(&lock(State::InProgress, 5, 400));
        let t = c.render();
        assert_eq!(
            tasks(&t, "lock_wait"),
            0.0,
            "in_progress victims counted: {t}"
        );
        sink.event(&lock(State::Completed, 11, 1_500));
        // A second pin of another reason; one whose victims were not measured.
        sink.event(&with_victims(
            event(2, State::Completed, Reason::Sleep, 100, 3),
            true,
            1,
            80,
        ));
        sink.event(&with_victims(
            event(3, State::Completed, Reason::Sleep, 100, 3),
            false,
            8,
            0,
        ));
        let t = c.render();
        assert_eq!(tasks(&t, "lock_wait"), 11.0, "{t}");
        assert!((wait(&t, "lock_wait") - 1.5).abs() < 1e-9, "{t}");
        assert_eq!(tasks(&t, "sleep"), 1.0, "unmeasured victims counted: {t}");
        assert!((wait(&t, "sleep") - 0.08).abs() < 1e-9, "{t}");
        assert_eq!(tasks(&t, "cpu"), 0.0, "{t}");
        // Bounded: one series per reason, no other label.
        let series = t
            .lines()
            .filter(|l| l.starts_with("pinwatch_victim_tasks_total{"))
            .count();
        assert_eq!(series, Reason::ALL.len(), "{t}");
    }

    #[test]
    fn busy_waits_follow_the_detectors_count_and_never_go_back() {
        let busy = Arc::new(Mutex::new(0));
        let c = collector_with_busy_waits(Arc::default(), 50, Arc::clone(&busy));
        assert_eq!(value(&c.render(), "pinwatch_busy_waits_total"), 0.0);
        *busy.lock().unwrap() = 7;
        assert_eq!(value(&c.render(), "pinwatch_busy_waits_total"), 7.0);
        *busy.lock().unwrap() = 9;
        let t = c.render();
        assert_eq!(value(&t, "pinwatch_busy_waits_total"), 9.0);
        assert!(
            t.contains("# HELP pinwatch_busy_waits_total Tasks polled after waiting"),
            "{t}"
        );
        assert!(
            t.contains("# TYPE pinwatch_busy_waits_total counter"),
            "{t}"
        );
    }

    /// A scrape adds to each running total only what its read of the detector has past what
    /// the counters hold: two scrapes at once, the later one's read taken first, add each
    /// increment once (they used to compare with the counter and add outside any lock: the
    /// difference underflowed, or was added twice).
    #[test]
    fn a_scrape_adds_what_is_new_and_a_stale_read_nothing() {
        let live = |stall_ms, handovers, busy_waits, dropped: &[(&'static str, u64)]| {
            super::super::live::Live {
                stall: (false, Duration::from_millis(stall_ms)),
                handovers,
                busy_waits,
                dropped: dropped.to_vec(),
                ..Default::default()
            }
        };
        let added = |stall_ms, handovers, busy_waits, dropped: &[(&'static str, u64)]| Totals {
            stall: Duration::from_millis(stall_ms),
            handovers,
            busy_waits,
            dropped: dropped.to_vec(),
        };
        let mut totals = Totals::default();
        assert_eq!(
            totals.catch_up(&live(1_000, 2, 5, &[("queue", 3)])),
            added(1_000, 2, 5, &[("queue", 3)])
        );
        // Read before the one just added: nothing, but for a sink seen for the first time.
        assert_eq!(
            totals.catch_up(&live(500, 1, 3, &[("queue", 1), ("otlp", 2)])),
            added(0, 0, 0, &[("queue", 0), ("otlp", 2)])
        );
        assert_eq!(
            totals.catch_up(&live(1_200, 2, 9, &[("queue", 4), ("otlp", 2)])),
            added(200, 0, 4, &[("queue", 1), ("otlp", 0)])
        );
        assert_eq!(totals, added(1_200, 2, 9, &[("queue", 4), ("otlp", 2)]));
    }

    /// A panic while the counters' lock was held (in a label's formatting, say) does not stop
    /// the metrics: later events and scrapes still count.
    #[test]
    fn the_metrics_count_on_after_a_panic_under_their_lock() {
        let c = collector(Arc::default(), 50);
        let inner = Arc::clone(&c.inner);
        let panicked = std::thread::spawn(move || {
            let _held = inner.counted.lock().unwrap();
            panic!("a panic under the counters' lock (expected by this test)");
        })
        .join();
        assert!(panicked.is_err() && c.inner.counted.is_poisoned());
        c.sink()
            .event(&event(1, State::Completed, Reason::Sleep, 40, 3));
        let t = c.render();
        assert_eq!(
            value(&t, "pinwatch_pins_total{reason=\"sleep\"}"),
            1.0,
            "{t}"
        );
        assert_eq!(
            value(&t, "pinwatch_events_dropped_total{sink=\"queue\"}"),
            3.0,
            "{t}"
        );
    }

    /// One series per function, named the same wherever it was built: its lines, and the same
    /// source built under two directories, are one `location`; functions past the bound are
    /// `other`.
    #[test]
    fn locations_are_functions_with_portable_files_and_bounded() {
        let c = collector(Arc::default(), 3);
        let mut sink = c.sink();
        let at = |id: u64, function: &str, file: &str, line: u32| {
            let mut e = event(id, State::Completed, Reason::Cpu, 30, line);
            let f = e.top_frame.as_mut().unwrap();
            f.function = Some(function.to_owned());
            f.file = Some(file.to_owned());
            e
        };
        for id in 1..=6 {
            let root = if id % 2 == 0 { "/home/ci" } else { "/build/x" };
            let file = format!("{root}/svc/src/api.rs");
            sink.event(&at(id, "svc::api::orders", &file, id as u32));
        }
        // Generic arguments are not part of the function.
        sink.event(&at(
            7,
            "svc::api::list<alloc::string::String>",
            "/b/svc/src/api.rs",
            9,
        ));
        for id in 8..=10 {
            sink.event(&at(
                id,
                &format!("svc::jobs::j{id}"),
                "/b/svc/src/jobs.rs",
                1,
            ));
        }
        let t = c.render();
        let locations: Vec<&str> = t
            .lines()
            .filter(|l| l.starts_with("pinwatch_pins_by_location_total{"))
            .collect();
        assert_eq!(locations.len(), 3, "{t}");
        let location = |l: &str| {
            value(
                &t,
                &format!("pinwatch_pins_by_location_total{{location=\"{l}\"}}"),
            )
        };
        assert_eq!(location("svc::api::orders (svc/src/api.rs)"), 6.0, "{t}");
        assert_eq!(location("svc::api::list (svc/src/api.rs)"), 1.0, "{t}");
        assert_eq!(location("other"), 3.0, "{t}");
    }

    /// `e` in `conn:request{method=GET uri=/x/<id>?<id>}:db`, the request with `http.route`
    /// `route` when given.
    fn in_span(mut e: PinnedEvent, route: Option<&str>) -> PinnedEvent {
        let mut request = crate::SpanInfo {
            name: "request".to_owned(),
            target: "svc".to_owned(),
            ..Default::default()
        };
        if let Some(r) = route {
            request.fields.insert("http.route".to_owned(), r.to_owned());
        }
        request.fields.insert("method".to_owned(), "GET".to_owned());
        request
            .fields
            .insert("uri".to_owned(), format!("/x/{0}?{0}", e.id + 1000));
        let named = |name: &str| crate::SpanInfo {
            name: name.to_owned(),
            ..Default::default()
        };
        e.spans = vec![named("conn"), request, named("db")];
        e
    }

    #[test]
    fn pins_count_once_by_request_bounded_with_other() {
        let c = collector(Arc::default(), 4);
        let mut sink = c.sink();
        let by_request = |t: &str, request: &str| {
            value(
                t,
                &format!("pinwatch_pins_by_request_total{{request=\"{request}\"}}"),
            )
        };
        // Two reports of one pin in `GET /report`: counted once, by route (not by uri).
        let e = in_span(
            event(1, State::InProgress, Reason::Sleep, 25, 3),
            Some("/report"),
        );
        sink.event(&e);
        sink.event(&in_span(
            event(1, State::Completed, Reason::Sleep, 90, 3),
            Some("/report"),
        ));
        sink.event(&in_span(
            event(2, State::Completed, Reason::Sleep, 90, 3),
            Some("/report"),
        ));
        // No route: the uri's path, its id left out — one series for every id.
        for id in 3..6 {
            sink.event(&in_span(
                event(id, State::Completed, Reason::Io, 90, 3),
                None,
            ));
        }
        // Outside any span.
        sink.event(&event(6, State::Completed, Reason::Sleep, 90, 3));
        // Past the bound (4 values, `other` among them): every new label is `other`.
        for id in 10..15 {
            let route = format!("/job{id}");
            sink.event(&in_span(
                event(id, State::Completed, Reason::Cpu, 30, 4),
                Some(&route),
            ));
        }
        let t = c.render();
        assert_eq!(by_request(&t, "GET /report"), 2.0, "{t}");
        assert_eq!(by_request(&t, "GET /x/{id}"), 3.0, "{t}");
        assert_eq!(by_request(&t, "none"), 1.0, "{t}");
        assert_eq!(by_request(&t, "other"), 5.0, "{t}");
        let series = t
            .lines()
            .filter(|l| l.starts_with("pinwatch_pins_by_request_total{"))
            .count();
        assert_eq!(series, 4, "{t}");
    }

    #[test]
    fn a_route_with_control_characters_reaches_the_metrics_escaped() {
        let c = collector(Arc::default(), 50);
        c.sink().event(&in_span(
            event(1, State::Completed, Reason::Sleep, 90, 3),
            Some("/x\u{1b}]0;owned\u{7}\u{202e}gnp"),
        ));
        let t = c.render();
        assert!(
            !t.chars()
                .any(|ch| ch != '\n' && crate::text::is_escaped(ch)),
            "{t:?}"
        );
        assert!(t.contains(r"/x\\u{1b}]0;owned\\u{7}\\u{202e}gnp"), "{t}");
    }

    #[test]
    fn registers_into_a_registry_of_yours() {
        let c = collector(Arc::default(), 50);
        let registry = Registry::new();
        registry.register(Box::new(c.clone())).unwrap();
        c.sink()
            .event(&event(1, State::Completed, Reason::Io, 40, 3));
        let families = registry.gather();
        let pins = families
            .iter()
            .find(|f| f.name() == "pinwatch_pins_total")
            .unwrap();
        assert_eq!(pins.get_metric().len(), Reason::ALL.len());
        let names: Vec<&str> = families.iter().map(|f| f.name()).collect();
        for m in METRICS {
            assert!(
                names.contains(&m.name),
                "{} not gathered: {names:?}",
                m.name
            );
        }
    }

    /// The metrics are in a registry of the service's while their detector runs, and only then:
    /// a detector that stopped, or whose start failed after registering (its endpoint's port
    /// taken), leaves the registry as it found it, and the next one registers into it; a second
    /// detector on the registry while the first runs is refused, saying what to do, and leaves
    /// the first's metrics in.
    #[test]
    fn a_registry_holds_the_metrics_while_their_detector_runs() {
        let registry = Registry::new();
        let has = |r: &Registry| r.gather().iter().any(|f| f.name().starts_with("pinwatch_"));
        let start = |addr: Option<std::net::SocketAddr>| {
            let mut b = crate::Builder::new()
                .control(crate::config::Control::Off)
                .heartbeat(None)
                .stacks(crate::config::Stacks::Off)
                .tracing(false)
                .prometheus_registry(&registry);
            if let Some(addr) = addr {
                b = b.prometheus_addr(addr);
            }
            b.build(&mut tokio::runtime::Builder::new_current_thread())
        };
        let (rt, first) = start(None).unwrap();
        assert!(has(&registry), "a running detector's metrics are in");
        let refused = start(None).map(|_| ()).unwrap_err().to_string();
        assert!(
            refused.contains("already has one of their names") && refused.contains("shut that"),
            "{refused}"
        );
        assert!(
            has(&registry),
            "a refused start leaves the running one's metrics in"
        );
        // The service takes the first one's out itself, and starts another before the first
        // stops: the first's stop takes out its own only.
        registry
            .unregister(Box::new(first.prometheus().unwrap().clone()))
            .unwrap();
        let (rt_second, second) = start(None).unwrap();
        drop(rt);
        first.shutdown();
        assert!(
            has(&registry),
            "a detector stopping took out another's metrics"
        );
        drop(rt_second);
        second.shutdown();
        assert!(
            !has(&registry),
            "a stopped detector's metrics are taken out"
        );

        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let failed = start(Some(taken.local_addr().unwrap()))
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            failed.contains("cannot listen there") && failed.contains("pick a free port"),
            "{failed}"
        );
        // An address that is not this host's is said to be so.
        assert!(listen_hint(std::io::ErrorKind::AddrNotAvailable).contains("no interface"));
        assert!(listen_hint(std::io::ErrorKind::PermissionDenied).contains("below 1024"));
        assert!(
            !has(&registry),
            "a start that failed after registering takes its metrics out"
        );
        let (_rt, again) = start(None).unwrap();
        assert!(has(&registry), "a detector started again registers");
        again.shutdown();
    }

    /// Peers asking for profiles at once (each made from the whole flight recording) get one
    /// made and the rest a `503` with `Retry-After`, while it is made and until as long as it
    /// took has passed: profiles take at most about half of a core.
    #[test]
    fn profiles_asked_for_at_once_are_made_one_per_its_own_time() {
        use crate::event::{Reason, State};
        use std::io::{Read, Write};
        let flight = super::super::Flight::new(512 * 1024);
        for id in 0..600u64 {
            let mut e = PinnedEvent::for_test(id, State::Completed, Reason::Sleep, 30, 7);
            let top = e.top_frame.clone().unwrap();
            e.stack = (0..40u64)
                .map(|k| {
                    let mut f = top.clone();
                    f.function = Some(format!("svc::m{}::f{}", k % 20, (id * 13 + k * 31) % 400));
                    f.line = Some(10 + k as u32);
                    f
                })
                .collect();
            flight.push(&e);
        }
        let live = Arc::new(Mutex::new(Vec::new()));
        let ep = Endpoint::serve(
            "127.0.0.1:0".parse().unwrap(),
            collector(live, 8),
            Some(flight),
        )
        .unwrap();
        let addr = ep.local_addr();
        let get = move |path: &str| -> String {
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
            write!(c, "GET {path} HTTP/1.0\r\n\r\n").unwrap();
            let mut b = Vec::new();
            c.read_to_end(&mut b).unwrap();
            String::from_utf8_lossy(&b).into_owned()
        };
        const PEERS: usize = 8;
        let barrier = Arc::new(std::sync::Barrier::new(PEERS));
        let peers: Vec<_> = (0..PEERS)
            .map(|k| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    get(&format!("/debug/pprof/pinned?seconds={}", 1000 + k))
                })
            })
            .collect();
        let answers: Vec<String> = peers.into_iter().map(|p| p.join().unwrap()).collect();
        let made = answers
            .iter()
            .filter(|a| a.starts_with("HTTP/1.1 200"))
            .count();
        let busy: Vec<&String> = answers
            .iter()
            .filter(|a| a.starts_with("HTTP/1.1 503"))
            .collect();
        assert!(made >= 1, "{answers:?}");
        assert!(!busy.is_empty(), "all {made} made one after another");
        assert_eq!(made + busy.len(), PEERS);
        for b in busy {
            assert!(b.contains("\r\nRetry-After: "), "{b}");
            assert!(b.contains("try again"), "{b}");
        }
        assert!(get("/metrics").starts_with("HTTP/1.1 200"));
    }
}
