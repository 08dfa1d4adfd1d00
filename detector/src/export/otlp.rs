//! OTLP: each pin report as an OpenTelemetry log record, and pinwatch's metrics, sent to an
//! OpenTelemetry Collector (or a vendor) over http/protobuf (the default) or grpc.
//!
//! Configured by the standard variables: `OTEL_EXPORTER_OTLP_ENDPOINT`, `_PROTOCOL`, `_HEADERS`,
//! `_TIMEOUT` (and their `_LOGS_` / `_METRICS_` forms), `OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_METRIC_EXPORT_INTERVAL`.
//!
//! Never on the watched runtime: the OTLP clients run on threads of pinwatch's own (a runtime of
//! one worker for grpc; the SDK's own reader thread for metrics). The export thread only
//! `try_send`s each event into a bounded queue; a collector that is down, refuses or hangs
//! fills that queue, and what does not fit is dropped and counted
//! (`pinwatch_events_dropped_total{sink="otlp"}`) — it never slows the watchdog or the app.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::logs::{AnyValue, LogRecord, Logger, LoggerProvider, Severity};
use opentelemetry::metrics::MeterProvider;
use opentelemetry::{KeyValue, SpanId, TraceFlags, TraceId};
use opentelemetry_otlp::{LogExporter, MetricExporter, WithExportConfig};
use opentelemetry_sdk::logs::{LogBatch, LogProcessor, SdkLogRecord, SdkLoggerProvider};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::Resource;

use super::LiveFn;
use super::{Exporter, Outlet, Parts, Started};
use crate::event::{PinnedEvent, Reason};
use crate::Error;

/// The OTLP log record's event name.
pub const EVENT_NAME: &str = "pinwatch.worker.pinned";

/// The wire protocol, from `OTEL_EXPORTER_OTLP_[LOGS_|METRICS_]PROTOCOL`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    HttpProtobuf,
    Grpc,
}

/// The protocol for `signal` (`LOGS` or `METRICS`): the signal's own variable, else the
/// general one, else http/protobuf. `get` stands for `std::env::var`.
pub(crate) fn protocol(
    signal: &str,
    get: impl Fn(&str) -> Option<String>,
) -> Result<Protocol, Error> {
    let specific = format!("OTEL_EXPORTER_OTLP_{signal}_PROTOCOL");
    let (var, value) = match get(&specific) {
        Some(v) => (specific, v),
        None => match get("OTEL_EXPORTER_OTLP_PROTOCOL") {
            Some(v) => ("OTEL_EXPORTER_OTLP_PROTOCOL".to_owned(), v),
            None => return Ok(Protocol::HttpProtobuf),
        },
    };
    match value.trim() {
        "http/protobuf" | "" => Ok(Protocol::HttpProtobuf),
        "grpc" => Ok(Protocol::Grpc),
        _ => Err(Error::Otlp(format!(
            "{var}={value:?} is not supported; use `http/protobuf` or `grpc`"
        ))),
    }
}

/// The variable that gives `signal`'s `what` (`ENDPOINT`, `COMPRESSION`), and its value: the
/// signal's own, else the general one; an empty one is unset, as the SDK takes it (helper-96:
/// an empty `…_LOGS_ENDPOINT` let an https general one past [`no_tls`]).
fn signal_var(
    signal: &str,
    what: &str,
    get: &impl Fn(&str) -> Option<String>,
) -> Option<(String, String)> {
    let set = |var: String| get(&var).filter(|v| !v.is_empty()).map(|v| (var, v));
    set(format!("OTEL_EXPORTER_OTLP_{signal}_{what}"))
        .or_else(|| set(format!("OTEL_EXPORTER_OTLP_{what}")))
}

/// Refuses a compression for `signal` that pinwatch's client cannot do: it is built with gzip
/// only, and the SDK drops any other value (`zstd`, a misspelling, ` gzip`: it lowercases, and
/// does not trim) with no word, sending uncompressed (helper-97, helper-98). Said at start-up,
/// naming the variable. The variable that asks for gzip, if one does, for the warnings of
/// failed exports: a collector that does not take gzip says so only in a status code.
fn compression(
    signal: &str,
    get: impl Fn(&str) -> Option<String>,
) -> Result<Option<String>, Error> {
    let Some((var, value)) = signal_var(signal, "COMPRESSION", &get) else {
        return Ok(None);
    };
    match value.to_ascii_lowercase().as_str() {
        "gzip" => Ok(Some(var)),
        "none" => Ok(None),
        other => Err(Error::Otlp(format!(
            "{var}={} is not a compression pinwatch's OTLP client does{}: give `gzip` or \
             `none`",
            crate::text::quoted(&value, 100),
            if other.trim() == "zstd" {
                " (it is built with gzip only)"
            } else {
                ""
            }
        ))),
    }
}

/// An endpoint as it may be shown in a log line: without the credentials a URL may carry (its
/// user information, its query), and escaped.
fn shown_endpoint(url: &str) -> String {
    crate::text::bounded(&without_credentials(url), 200)
}

/// `url` without what may carry credentials: its user information (all up to the last `@`
/// before its query: `user:pa/ss@host`), its query and its fragment (`?…`), wherever they
/// start (`https://host?api_key=…` has no path; helper-100).
fn without_credentials(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url),
    };
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    let (kept, cut) = (&rest[..end], end < rest.len());
    let kept = match kept.rsplit_once('@') {
        Some((_, after)) => format!("…@{after}"),
        None => kept.to_owned(),
    };
    format!("{scheme}{kept}{}", if cut { "?…" } else { "" })
}

/// Refuses an `https://` endpoint for `signal` (`LOGS`, `METRICS`): pinwatch's OTLP clients
/// are built without TLS, so over HTTP every export would fail as "network error" for as long
/// as the service runs (helper-95), and over gRPC the SDK's own refusal asks for a cargo
/// feature of a crate the service does not depend on. Said at start-up, naming the variable.
fn no_tls(signal: &str, get: impl Fn(&str) -> Option<String>) -> Result<(), Error> {
    let Some((var, value)) = signal_var(signal, "ENDPOINT", &get) else {
        return Ok(());
    };
    if value
        .trim_start()
        .to_ascii_lowercase()
        .starts_with("https:")
    {
        return Err(Error::Otlp(format!(
            "{var}={} is https, and pinwatch's OTLP client has no TLS: give an http:// \
             endpoint, such as an OpenTelemetry Collector beside the service (which may forward \
             over TLS)",
            crate::text::quoted(&without_credentials(&value), 200)
        )));
    }
    Ok(())
}

/// What the metrics hold of each pin ([`super::PinTally`]), and what `pinwatch.pinned` and
/// `pinwatch.driver.rescued_pins` report: the worker-time of pins, by reason, and the pins
/// rescued, only ever added to (a cumulative OTLP sum that goes down reads as a counter reset to
/// the backend). The reader thread's callbacks read it; the client's thread reports to it.
struct MetricState {
    /// Worker-time accounted so far, by reason (as in [`Reason::ALL`]).
    totals: [Duration; Reason::ALL.len()],
    /// Pins rescued for a second or more so far.
    rescued: u64,
    tally: super::PinTally,
}

impl MetricState {
    fn new(max_locations: usize) -> MetricState {
        MetricState {
            totals: [Duration::ZERO; Reason::ALL.len()],
            rescued: 0,
            tally: super::PinTally::new(max_locations),
        }
    }

    /// Accounts a report, on the OTLP thread: the observed values here, the rest returned for
    /// the event-driven [`Instruments`].
    fn report(&mut self, e: &PinnedEvent) -> super::metrics::Added {
        let added = self.tally.report(e);
        if let Some((r, more)) = added.time {
            self.totals[reason_index(r)] += more;
        }
        self.rescued += u64::from(added.rescued);
        added
    }

    /// The values of `pinwatch.pinned` by reason (as in [`Reason::ALL`]), the running pins
    /// (`running`: id and live age) advanced to now.
    fn pinned(&mut self, running: &[(u64, Duration)]) -> [f64; Reason::ALL.len()] {
        let totals = &mut self.totals;
        self.tally
            .advance(running, |r, more| totals[reason_index(r)] += more);
        self.totals.map(|d| d.as_secs_f64())
    }
}

/// `r`'s place in [`Reason::ALL`].
fn reason_index(r: Reason) -> usize {
    Reason::ALL
        .iter()
        .position(|x| *x == r)
        .unwrap_or(Reason::ALL.len() - 1)
}

/// The running OTLP exporter, as the start-up line names it: its client runs on a thread of its
/// own ([`Client`]).
pub(crate) struct Otlp {
    /// Where the reports go.
    to: String,
}

/// The OTLP client, on its thread ([`on_own_thread`](super::on_own_thread)): each report sent
/// as a log record and counted in the metrics; at the end the providers shut down, which sends
/// the metrics' last export, once every report is counted in them.
struct Client {
    logger: opentelemetry_sdk::logs::SdkLogger,
    logs: SdkLoggerProvider,
    /// The records its log processor keeps for the next request.
    kept: Kept,
    meters: SdkMeterProvider,
    state: Arc<Mutex<MetricState>>,
    instruments: Instruments,
    /// Dropped after the providers (fields drop in order), on the client's thread.
    runtime: ClientRuntime,
}

impl super::threaded::OwnThread for Client {
    fn event(&mut self, e: &PinnedEvent) {
        let _entered = self.runtime.0.as_ref().map(|r| r.enter());
        emit(&self.logger, e);
        // The instruments are applied outside the lock that the reader's callbacks take.
        let added = self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .report(e);
        self.instruments.record(added);
    }

    fn caught_up(&mut self) {
        let _entered = self.runtime.0.as_ref().map(|r| r.enter());
        let _ = self.logs.force_flush();
    }

    fn kept(&self) -> u64 {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.records.len() as u64
    }

    fn flush(&mut self) {
        let _entered = self.runtime.0.as_ref().map(|r| r.enter());
        let _ = self.logs.shutdown();
        let _ = self.meters.shutdown();
    }
}

/// The runtime of pinwatch's own that the gRPC client runs on, when OTLP goes over gRPC.
/// Dropped after everything that uses it, on the client's thread; should that thread not start,
/// where the exporter started, which may be async code (a `build` in a task), where dropping a
/// runtime waits for its threads, which tokio refuses with a panic: there it is left to stop
/// in the background, its one thread ending on its own.
struct ClientRuntime(Option<tokio::runtime::Runtime>);

impl Drop for ClientRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                rt.shutdown_background();
            }
        }
    }
}

impl Otlp {
    /// Starts the exporter: its client on a thread of its own behind a queue of `queue` events
    /// (the detector's queue capacity; what does not fit is counted in `drops`), sending each
    /// event as a log record, and a meter provider whose reader thread exports the metrics;
    /// to `endpoint` (`http://host:port`) when it is given, else where the `OTEL_*` variables
    /// say, with the protocols `env` (the environment) says.
    fn start(
        max_locations: usize,
        queue: usize,
        live: LiveFn,
        endpoint: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
        drops: &super::Drops,
    ) -> Result<(Otlp, super::threaded::Threaded), Error> {
        let logs_protocol = protocol("LOGS", &env)?;
        let metrics_protocol = protocol("METRICS", &env)?;
        no_tls("LOGS", &env)?;
        no_tls("METRICS", &env)?;
        let logs_gzip = compression("LOGS", &env)?;
        let metrics_gzip = compression("METRICS", &env)?;
        let max_records = batch_size(&env)?;
        let logs_to = sent_to("LOGS", logs_protocol, endpoint, &env);
        // A runtime of pinwatch's own for the grpc client (tonic needs one); never the app's.
        let runtime = ClientRuntime(
            if logs_protocol == Protocol::Grpc || metrics_protocol == Protocol::Grpc {
                Some(
                    tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(1)
                        .thread_name("pinwatch-otlp-io")
                        .enable_all()
                        .build()
                        .map_err(|e| {
                            Error::Otlp(format!("cannot start the OTLP client runtime: {e}"))
                        })?,
                )
            } else {
                None
            },
        );
        let handle = runtime.0.as_ref().map(|r| r.handle().clone());
        let _entered = handle.as_ref().map(|h| h.enter());
        let resource = Resource::builder().build();
        let log_exporter = match logs_protocol {
            Protocol::HttpProtobuf => match endpoint {
                Some(at) => LogExporter::builder()
                    .with_http()
                    .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                    .with_endpoint(format!("{at}/v1/logs"))
                    .build(),
                None => LogExporter::builder()
                    .with_http()
                    .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                    .build(),
            },
            Protocol::Grpc => match endpoint {
                Some(at) => LogExporter::builder()
                    .with_tonic()
                    .with_endpoint(at)
                    .build(),
                None => LogExporter::builder().with_tonic().build(),
            },
        }
        .map_err(|e| {
            Error::Otlp(format!(
                "cannot build the OTLP log exporter: {}",
                crate::text::bounded(&e.to_string(), 300)
            ))
        })?;
        let metric_exporter = match metrics_protocol {
            Protocol::HttpProtobuf => match endpoint {
                Some(at) => MetricExporter::builder()
                    .with_http()
                    .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                    .with_endpoint(format!("{at}/v1/metrics"))
                    .build(),
                None => MetricExporter::builder()
                    .with_http()
                    .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                    .build(),
            },
            Protocol::Grpc => match endpoint {
                Some(at) => MetricExporter::builder()
                    .with_tonic()
                    .with_endpoint(at)
                    .build(),
                None => MetricExporter::builder().with_tonic().build(),
            },
        }
        .map_err(|e| {
            Error::Otlp(format!(
                "cannot build the OTLP metric exporter: {}",
                crate::text::bounded(&e.to_string(), 300)
            ))
        })?;
        let dropped = Arc::new(AtomicU64::new(0));
        let kept = Kept::default();
        let logs = SdkLoggerProvider::builder()
            .with_resource(resource.clone())
            .with_log_processor(Batching::new(
                Counting::new(
                    log_exporter,
                    Arc::clone(&dropped),
                    gzipped(logs_to.clone(), logs_gzip),
                ),
                Arc::clone(&kept),
                Limits {
                    records: max_records,
                    bytes: MAX_BATCH_BYTES,
                },
            ))
            .build();
        let meters = SdkMeterProvider::builder()
            .with_resource(resource)
            .with_reader(
                PeriodicReader::builder(CountingMetrics::new(
                    metric_exporter,
                    gzipped(
                        sent_to("METRICS", metrics_protocol, endpoint, &env),
                        metrics_gzip,
                    ),
                ))
                .build(),
            )
            .build();
        let state = Arc::new(Mutex::new(MetricState::new(max_locations)));
        register_metrics(&meters, live, Arc::clone(&state));
        let instruments = Instruments::new(&meters);
        let client = Client {
            logger: logs.logger("pinwatch"),
            logs,
            kept,
            meters,
            state,
            instruments,
            runtime,
        };
        // Counted with the queue's drops: records the collector did not take, and what the
        // queue could not.
        let thread =
            super::threaded::on_own_thread_counted("otlp", move || client, queue, dropped, drops)?;
        Ok((Otlp { to: logs_to }, thread))
    }
}

impl Exporter for Otlp {
    fn describe(&self) -> String {
        format!("OTLP to {}", self.to)
    }
}

impl crate::Builder {
    /// Sends pin reports as OpenTelemetry log records, and pinwatch's metrics, over OTLP
    /// (`PINWATCH_OTLP=on`); the standard `OTEL_*` variables configure where and how.
    pub fn otlp(mut self, on: bool) -> Self {
        self.config.otlp = on;
        self
    }
}

/// The exporter, when `PINWATCH_OTLP` asks for it.
pub(crate) fn start(parts: &Parts) -> Result<Option<Started>, Error> {
    let config = &parts.watched.config;
    if !config.otlp {
        return Ok(None);
    }
    let (otlp, thread) = Otlp::start(
        config.prometheus_max_locations,
        config.queue_capacity,
        parts.live(),
        None,
        |n| std::env::var(n).ok(),
        &parts.drops,
    )?;
    Ok(Some(Started {
        sink: Outlet::Thread(thread),
        exporter: Box::new(otlp),
    }))
}

/// Sends `events` as log records to the OTLP/HTTP receiver at `endpoint` (`http://host:port`)
/// through the exporter pinwatch runs, and returns once they are sent (or the detector's stop
/// would have stopped waiting). For tests of what a receiver gets (the events come from JSON
/// lines); not an interface.
#[doc(hidden)]
pub fn send_for_test(endpoint: &str, events: Vec<PinnedEvent>) -> Result<(), Error> {
    let live: LiveFn = Arc::new(super::live::Live::default);
    let drops = super::Drops::default();
    let queue = events.len().max(1);
    let (_otlp, mut thread) = Otlp::start(16, queue, live, Some(endpoint), |_| None, &drops)?;
    for e in events {
        thread.send(&Arc::new(e));
    }
    thread.close();
    thread.wait(std::time::Instant::now() + super::threaded::FLUSH_WAIT);
    Ok(())
}

/// The most log records one request carries, unless `OTEL_BLRP_MAX_EXPORT_BATCH_SIZE` says
/// fewer ([`batch_size`]).
const MAX_BATCH: usize = 128;

/// The most bytes of records one request carries, as [`encoded_size`] counts them: a quarter of
/// what a Collector takes by default in a gRPC message (4 MiB; 20 MiB an HTTP body), so that a
/// batch of reports with long stacks (`stacks=full`: 30 KB each and more) is never refused
/// whole (helper-97: 128 such reports made a message over 4 MiB, and all were lost). A report
/// larger than this goes alone; a collector that takes less gets less ([`Batching::deliver`]).
const MAX_BATCH_BYTES: usize = 1 << 20;

/// The least that requests carry after a collector refused one whole ([`Batching::deliver`]):
/// about 35 reports of a short stack (1.9 KB in `pin_service`), 4 of `stacks=full` (14 KB).
const MIN_BATCH_BYTES: usize = 64 << 10;

/// The most records a request carries: `OTEL_BLRP_MAX_EXPORT_BATCH_SIZE` (the standard variable
/// of the SDK's batching processor, whose part pinwatch's plays) when it is set, at most
/// [`MAX_BATCH`]; a value that is not a positive whole number is a start-up error naming it.
fn batch_size(get: impl Fn(&str) -> Option<String>) -> Result<usize, Error> {
    const VAR: &str = "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE";
    let Some(value) = get(VAR).filter(|v| !v.trim().is_empty()) else {
        return Ok(MAX_BATCH);
    };
    let digits = value.trim();
    let digits = digits.strip_prefix('+').unwrap_or(digits);
    if !digits.bytes().all(|b| b.is_ascii_digit()) || digits.bytes().all(|b| b == b'0') {
        return Err(Error::Otlp(format!(
            "{VAR}={} is not a positive whole number: give the most log records one request \
             carries (pinwatch's default, and most: {MAX_BATCH})",
            crate::text::quoted(&value, 100)
        )));
    }
    // A count too large for a usize is a count all the same: capped as the others are.
    Ok(digits
        .parse::<usize>()
        .map_or(MAX_BATCH, |n| n.min(MAX_BATCH)))
}

/// About how many bytes `record` takes in a request, a little more than it does: its strings'
/// lengths, and for each value more than protobuf's framing and a number's encoding take.
fn encoded_size(record: &SdkLogRecord) -> usize {
    fn value(v: &AnyValue) -> usize {
        16 + match v {
            AnyValue::String(s) => s.as_str().len(),
            AnyValue::Bytes(b) => b.len(),
            AnyValue::ListAny(l) => l.iter().map(value).sum(),
            AnyValue::Map(m) => m.iter().map(|(k, v)| k.as_str().len() + value(v)).sum(),
            _ => 0,
        }
    }
    // The timestamps, severity, event name, trace context.
    128 + record.body().map_or(0, value)
        + record
            .attributes_iter()
            .map(|(k, v)| k.as_str().len() + value(v))
            .sum::<usize>()
}

/// The records the client's thread has made, kept until it has taken every report queued
/// ([`caught_up`](super::threaded::OwnThread::caught_up) flushes the provider) or a request's
/// worth is kept ([`Limits`]), then sent in one request. A collector that answers at once gets
/// each report alone, as soon as it comes; one far away, the reports that came during a round
/// trip together: one request each held the client to a report per round trip (helper-95: 35 a
/// second at 30 ms). Only the client's thread uses it.
#[derive(Debug)]
struct Batching {
    exporter: Counting,
    kept: Kept,
    limits: Limits,
    /// The most bytes a request carries now: [`Limits::bytes`], lowered when the collector
    /// refuses a request of several records whole ([`Batching::deliver`]).
    bytes: AtomicUsize,
}

/// How much one request carries at most.
#[derive(Clone, Copy, Debug)]
struct Limits {
    records: usize,
    bytes: usize,
}

/// The records [`Batching`] keeps; the client reads how many ([`OwnThread::kept`]).
///
/// [`OwnThread::kept`]: super::threaded::OwnThread::kept
type Kept = Arc<Mutex<KeptRecords>>;

#[derive(Debug, Default)]
struct KeptRecords {
    records: Vec<(SdkLogRecord, opentelemetry::InstrumentationScope)>,
    /// Their [`encoded_size`]s, added up.
    bytes: usize,
}

impl Batching {
    fn new(exporter: Counting, kept: Kept, limits: Limits) -> Batching {
        Batching {
            exporter,
            kept,
            limits,
            bytes: AtomicUsize::new(limits.bytes),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, KeptRecords> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends what is kept ([`deliver`](Batching::deliver)).
    fn send(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        let kept = std::mem::take(&mut *self.lock()).records;
        if kept.is_empty() {
            return Ok(());
        }
        // The client's own requests are not telemetry to record (as the SDK's processors do).
        let _suppressed = opentelemetry::Context::enter_telemetry_suppressed_scope();
        self.deliver(&kept)
    }

    /// Sends `records`, in requests of what a request carries now. A request of several records
    /// that the collector refuses whole for its size ([`refused_for_size`]) would have lost them
    /// all: the refused records go again in requests half its size, halved again while they are
    /// refused so, until each is taken or refused alone. Once a smaller request is taken, later
    /// requests carry no more than it could, but never less than [`MIN_BATCH_BYTES`]: one
    /// stray refusal of a small request would otherwise leave every later report going alone
    /// (helper-101), and a collector that refuses everything is no reason to send less
    /// (helper-102). What the collector does not take alone, or refuses for another reason, is
    /// counted dropped.
    fn deliver(
        &self,
        records: &[(SdkLogRecord, opentelemetry::InstrumentationScope)],
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        let mut result = Ok(());
        let mut limit = self.bytes.load(Ordering::Relaxed);
        // The first refusal for size, until a request under the limit it set is taken.
        let mut refused: Option<String> = None;
        let mut rest = records;
        while !rest.is_empty() {
            let n = fitting(rest, limit);
            let request = &rest[..n];
            let Err(error) = self.exporter.export(request) else {
                if let Some(refused) = refused.take() {
                    self.lower(limit, &refused);
                }
                rest = &rest[n..];
                continue;
            };
            let bytes: usize = request.iter().map(|(r, _)| encoded_size(r)).sum();
            let for_size = refused_for_size(&error);
            if n > 1 && for_size {
                // The refused records stay first in what is left, for requests of half as many:
                // half the size and one record's share more, so that a record a little larger
                // than the others does not leave each of the rest going alone (helper-103).
                refused.get_or_insert_with(|| {
                    format!("{n} reports in a request of about {bytes} bytes ({error})")
                });
                limit = bytes / 2 + bytes / (2 * n);
                continue;
            }
            let why = if for_size {
                format!("{error}, for one report of about {bytes} bytes alone")
            } else {
                error.to_string()
            };
            self.exporter.lost(n, &why);
            result = result.and(Err(error));
            rest = &rest[n..];
        }
        result
    }

    /// The collector took a request of at most `taken` bytes after it `refused` a larger one
    /// for its size: later requests carry no more (and no less than [`MIN_BATCH_BYTES`]), said
    /// in a WARN line when that is less than they did — at most four times in a process's life.
    fn lower(&self, taken: usize, refused: &str) {
        let later = taken.max(MIN_BATCH_BYTES);
        if later >= self.bytes.load(Ordering::Relaxed) {
            return;
        }
        self.bytes.store(later, Ordering::Relaxed);
        super::tracing::say(
            tracing::Level::WARN,
            format!(
                "the OTLP collector refused {refused}, sent to {}, and took smaller requests: \
                 pinwatch's requests carry at most {later} bytes of records from now \
                 on; if the collector (or a proxy before it) takes less than 1 MiB, raise its \
                 limit to keep them whole",
                self.exporter.refused.to,
            ),
        );
    }
}

/// How many of `records`, from the first, go in a request of at most `bytes` ([`encoded_size`]):
/// one at least.
fn fitting(records: &[(SdkLogRecord, opentelemetry::InstrumentationScope)], bytes: usize) -> usize {
    let mut sum = 0;
    records
        .iter()
        .position(|(r, _)| {
            sum += encoded_size(r);
            sum > bytes
        })
        .map_or(records.len(), |n| n.max(1))
}

/// Whether the collector refused an export for its size, as the OTLP client words it (its
/// error type is its own): HTTP's 413, a proxy's body limit (nginx, Envoy). Not 400, which a
/// Collector answers to a body past its `max_request_body_size` (20 MiB unless set lower) and
/// to any it cannot read (gzip it does not take, a tenant it does not know): halving those
/// sent each report alone to be refused (helper-102). Nor gRPC's `ResourceExhausted`: it is
/// also a collector's "too busy", which smaller requests would only make worse, and a
/// Collector takes 4 MiB in a message (its least, set in whole MiB, is 1), four times
/// [`MAX_BATCH_BYTES`].
fn refused_for_size(error: &opentelemetry_sdk::error::OTelSdkError) -> bool {
    error.to_string().ends_with("status code: 413")
}

impl LogProcessor for Batching {
    fn emit(&self, record: &mut SdkLogRecord, scope: &opentelemetry::InstrumentationScope) {
        let size = encoded_size(record);
        let bytes = self.bytes.load(Ordering::Relaxed);
        // What is kept goes first if this one would take the request past its size.
        let room = {
            let kept = self.lock();
            kept.records.is_empty() || kept.bytes + size <= bytes
        };
        if !room {
            let _ = self.send();
        }
        let full = {
            let mut kept = self.lock();
            kept.records.push((record.clone(), scope.clone()));
            kept.bytes += size;
            kept.records.len() >= self.limits.records || kept.bytes >= bytes
        };
        if full {
            let _ = self.send();
        }
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.send()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        let sent = self.send();
        opentelemetry_sdk::logs::LogExporter::shutdown_with_timeout(&self.exporter.inner, timeout)
            .and(sent)
    }

    fn set_resource(&mut self, resource: &Resource) {
        opentelemetry_sdk::logs::LogExporter::set_resource(&mut self.exporter.inner, resource);
    }
}

/// The OTLP log exporter, counting the records that did not reach the collector (refused,
/// unreachable, timed out) with the queue's drops.
#[derive(Debug)]
struct Counting {
    inner: LogExporter,
    failed: Arc<AtomicU64>,
    refused: Refused,
}

impl Counting {
    fn new(inner: LogExporter, failed: Arc<AtomicU64>, to: String) -> Counting {
        Counting {
            inner,
            failed,
            refused: Refused::new(to),
        }
    }
}

/// What an exporter says of the exports its collector did not take: where they went, and
/// when the last warning went out.
#[derive(Debug)]
struct Refused {
    /// Where the exports go ([`sent_to`]).
    to: String,
    warned: Mutex<Option<Instant>>,
}

impl Refused {
    fn new(to: String) -> Refused {
        Refused {
            to,
            warned: Mutex::new(None),
        }
    }

    /// An export failed with `error`: says what `warning` (given the last warning's time, now,
    /// and the error with where it went) makes of it, through the log thread, as every sink's
    /// warning: never blocking the exporter.
    fn failed(
        &self,
        error: &dyn std::fmt::Display,
        warning: impl FnOnce(&mut Option<Instant>, Instant, &str) -> Option<String>,
    ) {
        let line = self.warned.lock().ok().and_then(|mut last| {
            warning(
                &mut last,
                Instant::now(),
                &format!("{error}, sent to {}", self.to),
            )
        });
        if let Some(line) = line {
            super::say(tracing::Level::WARN, line);
        }
    }
}

/// Where a signal's exports go, as its exporter decides it (`endpoint`: the one a test gives):
/// its own variable, the general one, or the protocol's default. For the start-up line and the
/// warnings of failed exports (the HTTP client's own error is "network error", whatever the
/// cause).
fn sent_to(
    signal: &str,
    protocol: Protocol,
    endpoint: Option<&str>,
    env: &impl Fn(&str) -> Option<String>,
) -> String {
    match endpoint
        .map(str::to_owned)
        .or_else(|| signal_var(signal, "ENDPOINT", env).map(|(_, v)| v))
    {
        Some(url) => shown_endpoint(&url),
        None => match protocol {
            Protocol::HttpProtobuf => "the OTLP default endpoint (localhost:4318)",
            Protocol::Grpc => "the OTLP default endpoint (localhost:4317)",
        }
        .to_owned(),
    }
}

/// Where exports go ([`sent_to`]), and, when `gzip` names the variable that asks for it, that
/// they go compressed: for the warnings of failed exports, whose error (`415`, `Unimplemented`)
/// is all a collector that does not take gzip says.
fn gzipped(to: String, gzip: Option<String>) -> String {
    match gzip {
        Some(var) => format!("{to} with gzip ({var})"),
        None => to,
    }
}

/// The warning for an export the collector did not take, at `now` with `dropped` reports
/// dropped so far: at the first, then at most every [`WARN_EVERY`](super::WARN_EVERY) (`last`:
/// when one last went out). Without it a collector that is down or refuses pinwatch's records
/// shows only in a counter. The error is the collector's to word: escaped and bounded.
fn failed_export_warning(
    last: &mut Option<Instant>,
    now: Instant,
    dropped: u64,
    error: &str,
) -> Option<String> {
    if !super::warning_due(last, now) {
        return None;
    }
    Some(format!(
        "the OTLP collector did not take pin reports ({}); {dropped} dropped so far, counted in \
         pinwatch_events_dropped_total{{sink=\"otlp\"}} (at most one such warning a minute)",
        crate::text::bounded(error, 300)
    ))
}

impl Counting {
    /// Sends `records` in one request, and returns once the collector has answered (or the
    /// client's timeout has passed).
    fn export(
        &self,
        records: &[(SdkLogRecord, opentelemetry::InstrumentationScope)],
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        let batch: Vec<_> = records.iter().map(|(r, s)| (r, s)).collect();
        futures_executor::block_on(opentelemetry_sdk::logs::LogExporter::export(
            &self.inner,
            LogBatch::new(&batch),
        ))
    }

    /// `n` records did not reach the collector, for `error`: counted, and said.
    fn lost(&self, n: usize, error: &dyn std::fmt::Display) {
        let n = n as u64;
        let dropped = self.failed.fetch_add(n, Ordering::Relaxed) + n;
        self.refused.failed(error, |last, now, error| {
            failed_export_warning(last, now, dropped, error)
        });
    }
}

/// The OTLP metric exporter, saying when the collector does not take pinwatch's metrics: a
/// service that has not pinned yet sends no log record, and without this would never learn
/// that its collector is unreachable (helper-95), nor one whose metrics go elsewhere
/// (`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`) that they are lost.
#[derive(Debug)]
struct CountingMetrics {
    inner: MetricExporter,
    /// Exports the collector did not take.
    failed: AtomicU64,
    refused: Refused,
}

impl CountingMetrics {
    fn new(inner: MetricExporter, to: String) -> CountingMetrics {
        CountingMetrics {
            inner,
            failed: AtomicU64::new(0),
            refused: Refused::new(to),
        }
    }
}

/// The warning for a metrics export the collector did not take, at `now`, `failed` failures so
/// far: at the first, then at most every [`WARN_EVERY`](super::WARN_EVERY) (`last`: when one
/// last went out). The error is the collector's to word: escaped and bounded.
fn failed_metrics_warning(
    last: &mut Option<Instant>,
    now: Instant,
    failed: u64,
    error: &str,
) -> Option<String> {
    if !super::warning_due(last, now) {
        return None;
    }
    Some(format!(
        "the OTLP collector did not take pinwatch's metrics ({}); {failed} export{} failed so \
         far (at most one such warning a minute)",
        crate::text::bounded(error, 300),
        if failed == 1 { "" } else { "s" }
    ))
}

impl opentelemetry_sdk::metrics::exporter::PushMetricExporter for CountingMetrics {
    async fn export(
        &self,
        metrics: &opentelemetry_sdk::metrics::data::ResourceMetrics,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        let result = self.inner.export(metrics).await;
        if let Err(e) = &result {
            let failed = self.failed.fetch_add(1, Ordering::Relaxed) + 1;
            self.refused.failed(e, |last, now, error| {
                failed_metrics_warning(last, now, failed, error)
            });
        }
        result
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> opentelemetry_sdk::metrics::Temporality {
        self.inner.temporality()
    }
}

/// One report as a log record: semantic conventions for the code location, `pinwatch.*` for the
/// rest.
fn emit(logger: &impl Logger, e: &PinnedEvent) {
    let mut rec = logger.create_log_record();
    rec.set_event_name(EVENT_NAME);
    rec.set_severity_number(Severity::Warn);
    rec.set_severity_text("WARN");
    rec.set_timestamp(e.start);
    rec.set_observed_timestamp(SystemTime::now());
    rec.set_body(AnyValue::from(e.headline()));
    let mut attrs: Vec<(&'static str, AnyValue)> = vec![
        kv("pinwatch.state", e.state.as_str()),
        kv("pinwatch.pin.duration", e.duration.as_secs_f64()),
        kv("pinwatch.threshold", e.threshold.as_secs_f64()),
        kv(
            "pinwatch.reason",
            e.reason.map_or("unknown", Reason::as_str),
        ),
        kv("pinwatch.run.id", e.run_id.clone()),
        kv("pinwatch.event.id", e.id as i64),
        kv("pinwatch.report", i64::from(e.report)),
        kv("pinwatch.runtime.stalled", e.runtime_stalled),
        kv("thread.id", i64::from(e.worker.tid)),
        kv("thread.name", e.worker.name.clone()),
    ];
    if let Some(advice) = &e.advice {
        attrs.push(kv("pinwatch.advice", advice.clone()));
    }
    if let Some(op) = &e.blocking_operation {
        attrs.push(kv("pinwatch.blocking_operation", op.clone()));
    }
    if let Some(t) = e.task_id {
        attrs.push(kv("pinwatch.task.id", t as i64));
    }
    if let Some(at) = &e.spawned_at {
        attrs.push(kv("pinwatch.task.spawn.file", at.file.clone()));
        attrs.push(kv("pinwatch.task.spawn.line", i64::from(at.line)));
        attrs.push(kv("pinwatch.task.spawn.column", i64::from(at.column)));
    }
    if let Some(i) = e.worker.index {
        attrs.push(kv("pinwatch.worker.index", i as i64));
    }
    if let Some(f) = &e.top_frame {
        if let Some(func) = &f.function {
            attrs.push(kv("code.function.name", func.clone()));
        }
        if let Some(file) = &f.file {
            attrs.push(kv("code.file.path", file.clone()));
        }
        if let Some(line) = f.line {
            attrs.push(kv("code.line.number", i64::from(line)));
        }
    }
    if let Some(app) = e.caller_frame() {
        if let Some(func) = &app.function {
            attrs.push(kv("pinwatch.app_frame.function", func.clone()));
        }
        if let Some(file) = &app.file {
            attrs.push(kv("pinwatch.app_frame.file", file.clone()));
        }
        if let Some(line) = app.line {
            attrs.push(kv("pinwatch.app_frame.line", i64::from(line)));
        }
    }
    if !e.stack.is_empty() {
        let trace: Vec<String> = e.stack.iter().map(|f| f.to_string()).collect();
        attrs.push(kv("code.stacktrace", trace.join("\n")));
    }
    if !e.held_locks.is_empty() {
        let held: Vec<String> = e
            .held_locks
            .iter()
            .map(|l| format!("{} at {}", l.kind, l.acquired_at))
            .collect();
        attrs.push(kv("pinwatch.held_locks", held.join("; ")));
    }
    if let Some(late) = e.heartbeat_late {
        attrs.push(kv("pinwatch.heartbeat.late", late.as_secs_f64()));
    }
    if let Some(d) = &e.drivers {
        attrs.push(kv("pinwatch.drivers.undriven", d.undriven.as_secs_f64()));
        if let Some(w) = d.taken_over_by {
            attrs.push(kv("pinwatch.drivers.taken_over_by", w as i64));
        }
        if let Some(after) = d.taken_over_after {
            attrs.push(kv("pinwatch.drivers.taken_over_after", after.as_secs_f64()));
        }
        attrs.push(kv("pinwatch.drivers.woke_worker", d.woke_worker));
    }
    if let Some(advice) = &e.runtime_advice {
        attrs.push(kv("pinwatch.runtime_advice", advice.clone()));
    }
    if let Some(n) = e.tasks_queued_behind {
        attrs.push(kv("pinwatch.tasks_queued_behind", n as i64));
    }
    if let Some(v) = &e.victims {
        attrs.extend(victim_attributes(v));
    }
    // Which request (grouped as the metrics group it), the innermost span's label, and the
    // chain as the WARN line shows it.
    if e.request_span().is_some() {
        attrs.push(kv("pinwatch.request", e.request_label()));
    }
    if let Some(span) = e.innermost_span() {
        attrs.push(kv("pinwatch.span", span.label()));
    }
    if let Some(chain) = e.span_context() {
        attrs.push(kv("pinwatch.spans", chain));
    }
    // The record's own trace context: a tracing backend links the pin to the request's trace.
    if let Some((trace, span)) = trace_context(e) {
        rec.set_trace_context(trace, span, Some(TraceFlags::SAMPLED));
    }
    for (key, value) in attrs {
        rec.add_attribute(key, value);
    }
    logger.emit(rec);
}

/// The `pinwatch.victims.*` attributes: who waited behind the pin. The counts and waits only
/// when tokio measured them (`measured`, the `schedule-latency` feature): unmeasured victims are
/// the tasks the worker polled after the pin, with no wait known, and a backend adding up
/// `pinwatch.victims.tasks` must not count them. An `in_progress` record carries the victims
/// known so far; the `completed` one, the final ones.
fn victim_attributes(v: &crate::event::Victims) -> Vec<(&'static str, AnyValue)> {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut attrs = vec![kv("pinwatch.victims.measured", v.measured)];
    if v.measured {
        attrs.push(kv("pinwatch.victims.tasks", v.tasks as i64));
        if let Some(d) = v.total_wait {
            attrs.push(kv("pinwatch.victims.total_wait_ms", ms(d)));
        }
        if let Some(d) = v.max_wait {
            attrs.push(kv("pinwatch.victims.max_wait_ms", ms(d)));
        }
    }
    attrs.push(kv("pinwatch.victims.lifo", v.worst.iter().any(|w| w.lifo)));
    if let Some(worst) = v.describe() {
        attrs.push(kv("pinwatch.victims.worst", worst));
    }
    attrs
}

/// The event's trace and span ids, when both are valid hex ids (not all zeros).
fn trace_context(e: &PinnedEvent) -> Option<(TraceId, SpanId)> {
    let trace = TraceId::from_hex(e.trace_id.as_deref()?).ok()?;
    let span = SpanId::from_hex(e.span_id.as_deref()?).ok()?;
    (trace != TraceId::INVALID && span != SpanId::INVALID).then_some((trace, span))
}

fn kv(key: &'static str, value: impl Into<AnyValue>) -> (&'static str, AnyValue) {
    (key, value.into())
}

/// pinwatch's metrics, named so that the standard OTLP → Prometheus translation gives the
/// Prometheus exporter's names (`pinwatch.pins` with unit `{pin}` → `pinwatch_pins_total`,
/// `pinwatch.pin.duration` in `s` → `pinwatch_pin_duration_seconds`, …).
fn register_metrics(meters: &SdkMeterProvider, live: LiveFn, state: Arc<Mutex<MetricState>>) {
    let meter = meters.meter("pinwatch");
    let reasons: Vec<KeyValue> = Reason::ALL
        .iter()
        .map(|r| KeyValue::new("reason", r.as_str()))
        .collect();
    {
        let state = Arc::clone(&state);
        let live = Arc::clone(&live);
        let reasons = reasons.clone();
        let _ = meter
            .f64_observable_counter("pinwatch.pinned")
            .with_unit("s")
            .with_description(
                "Worker-seconds lost to pins, advanced live while a pin runs (a multi-thread \
                 runtime's block_on body holds no worker and is not counted).",
            )
            .with_callback(move |obs| {
                let running = (live)().pinned;
                let total = state
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .pinned(&running);
                for (kv, v) in reasons.iter().zip(total) {
                    obs.observe(v, std::slice::from_ref(kv));
                }
            })
            .build();
    }
    {
        let live = Arc::clone(&live);
        let _ = meter
            .u64_observable_gauge("pinwatch.workers.pinned")
            .with_unit("{worker}")
            .with_description("Workers pinned right now.")
            .with_callback(move |obs| obs.observe((live)().workers_pinned as u64, &[]))
            .build();
    }
    {
        let live = Arc::clone(&live);
        let _ = meter
            .u64_observable_gauge("pinwatch.block_on.blocked")
            .with_unit("{body}")
            .with_description(
                "block_on bodies of a multi-thread runtime blocked right now (they hold no worker).",
            )
            .with_callback(move |obs| obs.observe((live)().bodies_blocked as u64, &[]))
            .build();
    }
    {
        let live = Arc::clone(&live);
        let _ = meter
            .u64_observable_gauge("pinwatch.workers")
            .with_unit("{worker}")
            .with_description("Workers of the watched runtime.")
            .with_callback(move |obs| obs.observe((live)().workers as u64, &[]))
            .build();
    }
    {
        let live = Arc::clone(&live);
        let _ = meter
            .f64_observable_gauge("pinwatch.oldest_pin")
            .with_unit("s")
            .with_description("Age of the oldest pin still running; 0 when none runs.")
            .with_callback(move |obs| obs.observe((live)().oldest_worker_pin.as_secs_f64(), &[]))
            .build();
    }
    {
        let live = Arc::clone(&live);
        let _ = meter
            .u64_observable_counter("pinwatch.events.dropped")
            .with_unit("{event}")
            .with_description("Pin reports dropped, by where.")
            .with_callback(move |obs| {
                for (sink, n) in (live)().dropped {
                    obs.observe(n, &[KeyValue::new("sink", sink)]);
                }
            })
            .build();
    }
    {
        let live = Arc::clone(&live);
        let _ = meter
            .u64_observable_gauge("pinwatch.runtime.stalled")
            .with_description(
                "1 while a pin has stalled the whole runtime (its timers and I/O), else 0.",
            )
            .with_callback(move |obs| obs.observe(u64::from((live)().stall.0), &[]))
            .build();
    }
    {
        let live = Arc::clone(&live);
        let _ = meter
            .f64_observable_counter("pinwatch.runtime.stall")
            .with_unit("s")
            .with_description("Seconds the whole runtime spent stalled by pins, advanced live.")
            .with_callback(move |obs| obs.observe((live)().stall.1.as_secs_f64(), &[]))
            .build();
    }
    {
        let live = Arc::clone(&live);
        let _ = meter
            .u64_observable_counter("pinwatch.driver.handovers")
            .with_unit("{handover}")
            .with_description(
                "Times a pin left the runtime's timers and I/O undriven and a worker pinwatch woke took them over.",
            )
            .with_callback(move |obs| obs.observe((live)().handovers, &[]))
            .build();
    }
    {
        let state = Arc::clone(&state);
        let _ = meter
            .u64_observable_counter("pinwatch.driver.rescued_pins")
            .with_unit("{pin}")
            .with_description(
                "Pins that ran on a second or more after their hand-over: without \
                 PINWATCH_RESCUE each would have stalled the whole runtime that long.",
            )
            .with_callback(move |obs| {
                let rescued = state.lock().unwrap_or_else(PoisonError::into_inner).rescued;
                obs.observe(rescued, &[]);
            })
            .build();
    }
    {
        let live = Arc::clone(&live);
        let _ = meter
            .u64_observable_counter("pinwatch.busy_waits")
            .with_unit("{task}")
            .with_description(
                "Tasks polled after waiting at least the threshold while no pin ran: a busy runtime (schedule-latency feature only).",
            )
            .with_callback(move |obs| obs.observe((live)().busy_waits, &[]))
            .build();
    }
    {
        let live = Arc::clone(&live);
        let _ = meter
            .f64_observable_gauge("pinwatch.threshold")
            .with_unit("s")
            .with_description("The pinning threshold in force.")
            .with_callback(move |obs| obs.observe((live)().threshold.as_secs_f64(), &[]))
            .build();
    }
    let _ = meter
        .u64_observable_gauge("pinwatch.build.info")
        .with_description("Always 1; the pinwatch version as an attribute.")
        .with_callback(|obs| obs.observe(1, &[KeyValue::new("version", env!("CARGO_PKG_VERSION"))]))
        .build();
}

/// The instruments driven by the event stream, on the OTLP thread.
struct Instruments {
    pins: opentelemetry::metrics::Counter<u64>,
    durations: opentelemetry::metrics::Histogram<f64>,
    by_location: opentelemetry::metrics::Counter<u64>,
    by_request: opentelemetry::metrics::Counter<u64>,
    victim_tasks: opentelemetry::metrics::Counter<u64>,
    victim_wait: opentelemetry::metrics::Counter<f64>,
    reasons: Vec<KeyValue>,
}

impl Instruments {
    fn new(meters: &SdkMeterProvider) -> Instruments {
        let meter = meters.meter("pinwatch");
        let reasons: Vec<KeyValue> = Reason::ALL
            .iter()
            .map(|r| KeyValue::new("reason", r.as_str()))
            .collect();
        let pins = meter
            .u64_counter("pinwatch.pins")
            .with_unit("{pin}")
            .with_description(
                "Polls that pinned a worker past the threshold, counted when first reported (a \
                 multi-thread runtime's block_on body holds no worker and is counted only by \
                 location and request).",
            )
            .build();
        let durations = meter
            .f64_histogram("pinwatch.pin.duration")
            .with_unit("s")
            .with_description("Duration of completed pins of workers.")
            .with_boundaries(super::DURATION_BUCKETS.to_vec())
            .build();
        let by_location = meter
            .u64_counter("pinwatch.pins_by_location")
            .with_unit("{pin}")
            .with_description("Pins per function of the service's own code (app frame, else top application frame), its file relative to its crate; bounded, then \"other\".")
            .build();
        let by_request = meter
            .u64_counter("pinwatch.pins_by_request")
            .with_unit("{pin}")
            .with_description(
                "Pins per request (outermost request-like tracing span: method and route, ids made {id}); bounded, then \"other\".",
            )
            .build();
        let victim_tasks = meter
            .u64_counter("pinwatch.victim_tasks")
            .with_unit("{task}")
            .with_description(
                "Tasks delayed by pins: polled after waiting at least the threshold while a pin ran, by the pin's reason, counted when it completes (schedule-latency feature only).",
            )
            .build();
        let victim_wait = meter
            .f64_counter("pinwatch.victim_wait")
            .with_unit("s")
            .with_description(
                "Seconds those tasks waited to be polled, added up, by the pin's reason (schedule-latency feature only).",
            )
            .build();
        // Every reason exists at 0 from the start.
        for kv in &reasons {
            pins.add(0, std::slice::from_ref(kv));
            victim_tasks.add(0, std::slice::from_ref(kv));
            victim_wait.add(0.0, std::slice::from_ref(kv));
        }
        by_location.add(0, &[KeyValue::new("location", "other")]);
        by_request.add(0, &[KeyValue::new("request", "other")]);
        Instruments {
            pins,
            durations,
            by_location,
            by_request,
            victim_tasks,
            victim_wait,
            reasons,
        }
    }

    fn record(&mut self, added: super::metrics::Added) {
        let reason = |r| std::slice::from_ref(&self.reasons[reason_index(r)]);
        if let Some(labels) = added.labels {
            self.by_location
                .add(1, &[KeyValue::new("location", labels.location)]);
            self.by_request
                .add(1, &[KeyValue::new("request", labels.request)]);
        }
        if let Some(r) = added.pin {
            self.pins.add(1, reason(r));
        }
        if let Some((r, duration)) = added.duration {
            self.durations.record(duration.as_secs_f64(), reason(r));
        }
        if let Some(v) = added.victims {
            self.victim_tasks.add(v.tasks, reason(v.reason));
            self.victim_wait.add(v.wait.as_secs_f64(), reason(v.reason));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Frame, State};

    /// A collector that takes nothing is said at the first failed export, then at most once a
    /// minute, its error escaped and bounded (helper-60: an absent collector said nothing).
    #[test]
    fn a_failed_export_is_said_at_once_then_once_a_minute() {
        let t0 = Instant::now();
        let mut last = None;
        let first = failed_export_warning(&mut last, t0, 1, "connection refused").unwrap();
        assert!(
            first.starts_with(
                "the OTLP collector did not take pin reports (connection refused); 1 dropped so \
                 far, counted in pinwatch_events_dropped_total{sink=\"otlp\"}"
            ),
            "{first}"
        );
        let later = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(failed_export_warning(&mut last, later(59), 40, "x"), None);
        let again = failed_export_warning(&mut last, later(60), 41, "503\u{1b}[2J").unwrap();
        assert!(
            again.contains("; 41 dropped so far") && !again.contains('\u{1b}'),
            "{again}"
        );
        assert_eq!(failed_export_warning(&mut last, later(100), 50, "x"), None);
        let long = "e".repeat(100_000);
        assert!(
            failed_export_warning(&mut last, later(200), 60, &long)
                .unwrap()
                .len()
                < 600
        );
    }

    /// An endpoint in a log line keeps no credentials and no control character.
    #[test]
    fn an_endpoint_is_shown_without_its_credentials() {
        assert_eq!(
            shown_endpoint("http://collector:4318"),
            "http://collector:4318"
        );
        assert_eq!(
            shown_endpoint("https://user:secret@otlp.example.com/v1/logs?api_key=k"),
            "https://…@otlp.example.com/v1/logs?…"
        );
        assert!(!shown_endpoint("http://h/\u{1b}[31m").contains('\u{1b}'));
        // A query or a fragment with no path before it, user information with a `/` in it, a
        // scheme with one slash (helper-100).
        for (url, shown) in [
            (
                "https://otlp.example.com?api_key=S",
                "https://otlp.example.com?…",
            ),
            ("https://h:4318#token=S", "https://h:4318?…"),
            ("https://h/v1/logs#S", "https://h/v1/logs?…"),
            ("https://h?u=a@S", "https://h?…"),
            ("https://user:pa/S@h/", "https://…@h/"),
            ("https:/u:S@h/", "…@h/"),
            ("https://u:S@h\\v1?key=S", "https://…@h\\v1?…"),
        ] {
            assert_eq!(without_credentials(url), shown, "{url}");
        }
        assert_eq!(
            sent_to(
                "METRICS",
                Protocol::HttpProtobuf,
                None,
                &crate::export::env_of(&[
                    ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", ""),
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://u:p@c:4318"),
                ])
            ),
            "http://…@c:4318"
        );
    }

    /// A metrics export the collector did not take is said the same way: at once, then at
    /// most once a minute, bounded.
    #[test]
    fn a_failed_metrics_export_is_said_at_once_then_once_a_minute() {
        let t0 = Instant::now();
        let later = |s: u64| t0 + Duration::from_secs(s);
        let mut last = None;
        assert_eq!(
            failed_metrics_warning(&mut last, t0, 1, "network error").unwrap(),
            "the OTLP collector did not take pinwatch's metrics (network error); 1 export \
             failed so far (at most one such warning a minute)"
        );
        assert_eq!(failed_metrics_warning(&mut last, later(59), 9, "x"), None);
        let again = failed_metrics_warning(&mut last, later(61), 10, &"e".repeat(10_000));
        assert!(again
            .as_deref()
            .is_some_and(|w| w.contains("; 10 exports failed") && w.len() < 600));
    }

    /// An OTLP client to `at` (`env`: the protocols) in a fan-out of its own, with eight
    /// reports handed to it (its queue's capacity).
    fn eight_queued(
        at: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> (Otlp, super::super::fanout::Fanout) {
        let live: LiveFn = Arc::new(super::super::live::Live::default);
        let drops = super::super::Drops::default();
        let (otlp, client) = Otlp::start(16, 8, live, Some(at), env, &drops).unwrap();
        let mut fanout = super::super::fanout::Fanout::new(vec![Outlet::Thread(client)]);
        for id in 1..=8 {
            fanout.deliver(PinnedEvent::for_test(
                id,
                State::Completed,
                Reason::Sleep,
                30,
                1,
            ));
        }
        (otlp, fanout)
    }

    /// A detector started, shut down or dropped in async code (a task, a `block_on`) does all
    /// that there. Over gRPC the client has a runtime of its own, which tokio refuses to drop in
    /// async code with a panic: it goes on the client's thread.
    #[test]
    fn a_grpc_client_stopped_in_async_code_stops_without_a_panic() {
        // Nothing listens there: what the client sends is refused at once.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let grpc = |name: &str| name.ends_with("_PROTOCOL").then(|| "grpc".to_owned());
        let at = format!("http://127.0.0.1:{port}");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(async move {
                let (otlp, mut fanout) = eight_queued(&at, grpc);
                fanout.flush();
                drop((otlp, fanout));
            })
        }));
        assert!(stopped.is_ok(), "the client's stop in async code panicked");
    }

    /// A collector that takes connections and never answers holds each send for the whole
    /// `OTEL_EXPORTER_OTLP_TIMEOUT` (10 s), one report after another: the detector's stop
    /// waited for all of them (minutes with a full queue). It waits the sinks' bound.
    #[test]
    fn a_collector_that_never_answers_holds_the_stop_a_bounded_time() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = format!("http://{}", listener.local_addr().unwrap());
        // Takes every connection and keeps it, reading nothing and answering nothing.
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for c in listener.incoming().take(64) {
                held.push(c);
            }
        });
        // Eight reports: 10 s at least a request.
        let (_otlp, mut fanout) = eight_queued(&at, |_| None);
        let stopping = std::time::Instant::now();
        fanout.flush();
        let took = stopping.elapsed();
        let bound = super::super::threaded::FLUSH_WAIT;
        assert!(took >= bound, "{took:?}: it waited for nothing");
        // Generous: the bound, the log line's own bounded flush, and a loaded machine.
        assert!(
            took < 4 * bound,
            "{took:?}: the stop waited for the collector"
        );
    }

    /// A collector on loopback that answers 200 to every request, after `answer(path, records,
    /// bytes)` (the records a logs request carries, and its body's size) returns. Its `http://`
    /// address.
    fn collector(answer: impl Fn(&str, usize, usize) + Send + Sync + 'static) -> String {
        collector_of(move |path, records, bytes| {
            answer(path, records, bytes);
            200
        })
    }

    /// A collector as [`collector`], answering each request with the status `answer` returns.
    fn collector_of(answer: impl Fn(&str, usize, usize) -> u16 + Send + Sync + 'static) -> String {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = format!("http://{}", listener.local_addr().unwrap());
        let answer = Arc::new(answer);
        std::thread::spawn(move || {
            for c in listener.incoming().take(256).flatten() {
                let answer = Arc::clone(&answer);
                std::thread::spawn(move || {
                    let mut r = BufReader::new(c.try_clone().unwrap());
                    let mut c = c;
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let path = line.split(' ').nth(1).unwrap_or("").to_owned();
                        let mut len = 0;
                        loop {
                            let mut h = String::new();
                            if r.read_line(&mut h).unwrap_or(0) == 0 {
                                return;
                            }
                            if h == "\r\n" {
                                break;
                            }
                            if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:")
                            {
                                len = v.trim().parse().unwrap_or(0);
                            }
                        }
                        let mut body = vec![0u8; len];
                        if r.read_exact(&mut body).is_err() {
                            return;
                        }
                        // Every record carries this attribute's key once.
                        let key = b"pinwatch.event.id";
                        let records = body.windows(key.len()).filter(|w| w == key).count();
                        let status = answer(&path, records, body.len());
                        let _ = write!(c, "HTTP/1.1 {status} -\r\ncontent-length: 0\r\n\r\n");
                    }
                });
            }
        });
        at
    }

    /// A collector that answers (in 20 ms a request), with reports queued at the stop: every
    /// record reaches it, and then the metrics' last export, which counts them all (made beside
    /// the records, it missed the last pins).
    #[test]
    fn the_metrics_last_export_comes_after_every_queued_report() {
        let (got_tx, got) = std::sync::mpsc::channel::<(String, usize)>();
        let got_tx = Mutex::new(got_tx);
        let at = collector(move |path, records, _| {
            std::thread::sleep(Duration::from_millis(20));
            let _ = got_tx.lock().unwrap().send((path.to_owned(), records));
        });
        let (_otlp, mut fanout) = eight_queued(&at, |_| None);
        fanout.flush();
        let got: Vec<(String, usize)> = got.try_iter().collect();
        let records: usize = got
            .iter()
            .filter(|(p, _)| p == "/v1/logs")
            .map(|(_, n)| n)
            .sum();
        assert_eq!(records, 8, "{got:?}");
        assert_eq!(
            got.last().map(|(p, _)| p.as_str()),
            Some("/v1/metrics"),
            "{got:?}"
        );
    }

    /// The requests (their records and bytes) a collector got after the first, which it held
    /// until `more` reports were queued behind it (`env`: the variables), and what was dropped.
    /// It answers each logs request with the status `answer(records, bytes)` returns.
    fn behind_a_held_request(
        more: Vec<PinnedEvent>,
        env: impl Fn(&str) -> Option<String>,
        answer: impl Fn(usize, usize) -> u16 + Send + Sync + 'static,
    ) -> (Vec<(usize, usize)>, u64) {
        let (seen_tx, seen) = std::sync::mpsc::channel::<(usize, usize)>();
        let (open_tx, open) = std::sync::mpsc::channel::<()>();
        let (seen_tx, open) = (Mutex::new(seen_tx), Mutex::new(open));
        let at = collector_of(move |path, records, bytes| {
            if path == "/v1/logs" {
                let _ = seen_tx.lock().unwrap().send((records, bytes));
                // Held until the test says; every request once the test has let go.
                let _ = open.lock().unwrap().recv();
                return answer(records, bytes);
            }
            200
        });
        let live: LiveFn = Arc::new(super::super::live::Live::default);
        let drops = super::super::Drops::default();
        let queue = more.len() + 1;
        let (_otlp, client) = Otlp::start(16, queue, live, Some(&at), env, &drops).unwrap();
        let mut fanout = super::super::fanout::Fanout::new(vec![Outlet::Thread(client)]);
        fanout.deliver(report(0));
        let (first, _) = seen.recv().unwrap();
        assert_eq!(first, 1, "the first report waited for more");
        for e in more {
            fanout.deliver(e);
        }
        drop(open_tx);
        fanout.flush();
        let dropped = drops.totals().iter().map(|(_, n)| n).sum();
        (seen.try_iter().collect(), dropped)
    }

    fn report(id: u64) -> PinnedEvent {
        PinnedEvent::for_test(id, State::Completed, Reason::Sleep, 30, 1)
    }

    /// A report whose stack has `frames` frames of about 250 bytes each.
    fn long(id: u64, frames: usize) -> PinnedEvent {
        let mut e = report(id);
        e.stack = (0..frames)
            .map(|i| Frame {
                function: Some(format!("svc::deep::module::path::function_{i:0>200}")),
                file: Some("/home/build/svc/src/deep/module/path.rs".into()),
                line: Some(1),
                locks: 0,
            })
            .collect();
        e
    }

    /// The reports that come while a request is out go together in the next (helper-95: one
    /// request each held a collector 30 ms away to 35 reports a second), [`MAX_BATCH`] at most,
    /// or fewer if `OTEL_BLRP_MAX_EXPORT_BATCH_SIZE` says so; the first, with nothing behind
    /// it, goes alone at once. The collector holds the first request until the rest are
    /// queued: no timing decides what goes together.
    #[test]
    fn the_reports_of_a_round_trip_go_in_one_request() {
        let more = |n: u64| (1..=n).map(report).collect::<Vec<_>>();
        let (got, dropped) =
            behind_a_held_request(more(MAX_BATCH as u64 + 10), |_| None, |_, _| 200);
        let records: Vec<usize> = got.iter().map(|(n, _)| *n).collect();
        assert_eq!(records, [MAX_BATCH, 10], "requests after the held one");
        assert_eq!(dropped, 0);
        let four = |v: &str| (v == "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE").then(|| " 4 ".to_owned());
        let (got, _) = behind_a_held_request(more(10), four, |_, _| 200);
        let records: Vec<usize> = got.iter().map(|(n, _)| *n).collect();
        assert_eq!(records, [4, 4, 2]);
    }

    /// Reports with long stacks (`stacks=full`) go in requests of at most
    /// [`MAX_BATCH_BYTES`]: 128 of them made a message past a Collector's 4 MiB, and all were
    /// lost (helper-97). One larger than that goes alone.
    #[test]
    fn a_request_of_reports_with_long_stacks_stays_under_its_size() {
        // About 64 KB each.
        let (got, dropped) = behind_a_held_request(
            (1..=40).map(|id| long(id, 256)).collect(),
            |_| None,
            |_, _| 200,
        );
        assert_eq!(dropped, 0);
        assert_eq!(got.iter().map(|(n, _)| n).sum::<usize>(), 40);
        assert!(got.len() >= 3, "{got:?}");
        for (records, bytes) in &got {
            assert!(*records > 1, "{got:?}");
            assert!(*bytes <= MAX_BATCH_BYTES, "{got:?}");
        }
        // One past the size on its own, between two small ones: three requests.
        let huge = long(2, 8192);
        let (got, _) =
            behind_a_held_request(vec![report(1), huge, report(3)], |_| None, |_, _| 200);
        let records: Vec<usize> = got.iter().map(|(n, _)| *n).collect();
        assert_eq!(records, [1, 1, 1], "{got:?}");
        assert!(got[1].1 > MAX_BATCH_BYTES);
    }

    /// A proxy whose body limit is below pinwatch's refuses a request of several reports with
    /// 413: all were lost. They go again in smaller requests; a report
    /// refused alone is dropped, and counted, and a collector that refuses everything gets
    /// fewer than two requests a report. One refusal of a small request does not leave every
    /// later report going alone (helper-101).
    #[test]
    fn a_request_the_collector_finds_too_large_goes_again_in_smaller_ones() {
        // About 2.7 KB each, 215 KB together: thirteen times the collector's limit.
        const LIMIT: usize = 16 << 10;
        let limited = |_, bytes| if bytes > LIMIT { 413 } else { 200 };
        let refused = |got: &[(usize, usize)]| got.iter().filter(|(_, b)| *b > LIMIT).count();
        let taken = |got: &[(usize, usize)]| {
            got.iter()
                .filter(|(_, b)| *b <= LIMIT)
                .map(|(n, _)| n)
                .sum::<usize>()
        };
        let (got, dropped) =
            behind_a_held_request((1..=80).map(|id| long(id, 8)).collect(), |_| None, limited);
        assert_eq!(dropped, 0, "{got:?}");
        assert_eq!(taken(&got), 80, "{got:?}");
        // Each refusal halves what a request carries: four take it under the limit.
        assert!(refused(&got) <= 5, "{got:?}");
        // Nothing refused once a request was taken, and requests still carry several reports
        // (the last may carry what is left).
        let first_taken = got.iter().position(|(_, b)| *b <= LIMIT).unwrap();
        assert_eq!(refused(&got[first_taken..]), 0, "{got:?}");
        assert!(got[..got.len() - 1].iter().all(|(n, _)| *n > 1), "{got:?}");

        // A report over the limit between two small ones: it alone is lost.
        let huge = long(2, 2 * LIMIT / 250);
        let (got, dropped) =
            behind_a_held_request(vec![report(1), huge, report(3)], |_| None, limited);
        assert_eq!(dropped, 1, "{got:?}");
        assert_eq!(taken(&got), 2, "{got:?}");

        // A collector that refuses every request: each report counted dropped, after fewer
        // than two requests a report.
        let (got, dropped) =
            behind_a_held_request((1..=40).map(report).collect(), |_| None, |_, _| 413);
        assert_eq!(dropped, 41, "{got:?}");
        assert!(got.len() < 2 * 40, "{} requests", got.len());

        // A 413, once, for the first request of ten: those go again in halves, and the requests
        // after it carry ten again.
        let once = std::sync::atomic::AtomicBool::new(false);
        let ten = |v: &str| (v == "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE").then(|| "10".to_owned());
        let (got, dropped) =
            behind_a_held_request((1..=40).map(report).collect(), ten, move |n, _| {
                if n > 1 && !once.swap(true, Ordering::Relaxed) {
                    413
                } else {
                    200
                }
            });
        assert_eq!(dropped, 0, "{got:?}");
        let records: Vec<usize> = got.iter().map(|(n, _)| *n).collect();
        // The refused ten, then in halves (by size: 5, 4, 1), then whole.
        assert_eq!(records[0], 10, "{got:?}");
        assert_eq!(records[records.len() - 3..], [10, 10, 10], "{got:?}");
        assert_eq!(records.iter().sum::<usize>(), 10 + 40, "{got:?}");

        // A 400, a body the collector cannot read whatever its size (gzip it does not take):
        // dropped whole, not sent again report by report (helper-102).
        let (got, dropped) = behind_a_held_request((1..=40).map(report).collect(), ten, |_, _| 400);
        assert_eq!(dropped, 41, "{got:?}");
        let records: Vec<usize> = got.iter().map(|(n, _)| *n).collect();
        assert_eq!(records, [10, 10, 10, 10], "{got:?}");
    }

    /// `OTEL_BLRP_MAX_EXPORT_BATCH_SIZE` that is no positive whole number stops the start,
    /// naming it.
    #[test]
    fn a_batch_size_that_is_no_count_is_refused() {
        for bad in ["0", "-3", "many", "1e3"] {
            let err = batch_size(|_| Some(bad.to_owned()))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE") && err.contains(bad),
                "{err}"
            );
        }
        assert_eq!(batch_size(|_| Some("100000".into())).unwrap(), MAX_BATCH);
        // Past what a usize holds: a count all the same (helper-98).
        assert_eq!(
            batch_size(|_| Some("18446744073709551616".into())).unwrap(),
            MAX_BATCH
        );
        assert_eq!(batch_size(|_| Some(" +7 ".into())).unwrap(), 7);
        for zero in ["00", "+0", "+", "++3"] {
            assert!(batch_size(|_| Some(zero.into())).is_err(), "{zero}");
        }
        assert_eq!(batch_size(|_| Some(String::new())).unwrap(), MAX_BATCH);
        assert_eq!(batch_size(|_| None).unwrap(), MAX_BATCH);
    }

    /// Every exported value of every `pinwatch.pinned` series, through the sequences that made
    /// the old sum (completed time plus the open pins' `max(live age, reported)`) go down.
    #[test]
    fn pinned_seconds_never_go_back() {
        let ms = Duration::from_millis;
        let mut state = MetricState::new(16);
        let mut exported: Vec<[f64; Reason::ALL.len()]> = Vec::new();
        let ev = |id, st, r, d| PinnedEvent::for_test(id, st, r, d, 1);
        // 1: in_progress cpu, seen live at 400 ms, completed as sleep.
        state.report(&ev(1, State::InProgress, Reason::Cpu, 25));
        exported.push(state.pinned(&[(1, ms(400))]));
        state.report(&ev(1, State::Completed, Reason::Sleep, 450));
        exported.push(state.pinned(&[]));
        // 2: the pin ends (gone from the live list) before its completion is processed.
        state.report(&ev(2, State::InProgress, Reason::Io, 25));
        exported.push(state.pinned(&[(2, ms(700))]));
        exported.push(state.pinned(&[]));
        state.report(&ev(2, State::Completed, Reason::Io, 710));
        exported.push(state.pinned(&[]));
        // 3: the completion is dropped (queue full): the pin is never heard of again.
        state.report(&ev(3, State::InProgress, Reason::LockWait, 25));
        exported.push(state.pinned(&[(3, ms(2000))]));
        for _ in 0..3 {
            exported.push(state.pinned(&[]));
        }
        for (i, pair) in exported.windows(2).enumerate() {
            for (r, reason) in Reason::ALL.iter().enumerate() {
                assert!(
                    pair[1][r] >= pair[0][r],
                    "pinwatch.pinned{{reason={}}} went from {} to {} at export {}",
                    reason.as_str(),
                    pair[0][r],
                    pair[1][r],
                    i + 1
                );
            }
        }
        let last = exported.last().unwrap();
        let value = |r: Reason| last[reason_index(r)];
        assert!((value(Reason::Cpu) - 0.4).abs() < 1e-9, "{last:?}");
        assert!((value(Reason::Sleep) - 0.05).abs() < 1e-9, "{last:?}");
        assert!((value(Reason::Io) - 0.71).abs() < 1e-9, "{last:?}");
        assert!((value(Reason::LockWait) - 2.0).abs() < 1e-9, "{last:?}");
    }

    /// A logger that keeps each record's attributes, for what [`emit`] makes of an event.
    #[derive(Default)]
    struct Kept(std::cell::RefCell<Vec<Vec<(String, AnyValue)>>>);

    #[derive(Default)]
    struct KeptRecord(Vec<(String, AnyValue)>);

    impl LogRecord for KeptRecord {
        fn set_event_name(&mut self, _: &'static str) {}
        fn set_target<T: Into<std::borrow::Cow<'static, str>>>(&mut self, _: T) {}
        fn set_timestamp(&mut self, _: SystemTime) {}
        fn set_observed_timestamp(&mut self, _: SystemTime) {}
        fn set_severity_text(&mut self, _: &'static str) {}
        fn set_severity_number(&mut self, _: Severity) {}
        fn set_body(&mut self, _: AnyValue) {}
        fn add_attributes<I, K, V>(&mut self, attributes: I)
        where
            I: IntoIterator<Item = (K, V)>,
            K: Into<opentelemetry::Key>,
            V: Into<AnyValue>,
        {
            for (k, v) in attributes {
                self.add_attribute(k, v);
            }
        }
        fn add_attribute<K: Into<opentelemetry::Key>, V: Into<AnyValue>>(&mut self, k: K, v: V) {
            self.0.push((k.into().as_str().to_owned(), v.into()));
        }
    }

    impl Logger for Kept {
        type LogRecord = KeptRecord;
        fn create_log_record(&self) -> KeptRecord {
            KeptRecord::default()
        }
        fn emit(&self, record: KeptRecord) {
            self.0.borrow_mut().push(record.0);
        }
        fn event_enabled(&self, _: Severity, _: &str, _: Option<&str>) -> bool {
            true
        }
    }

    /// The attributes of the log record [`emit`] makes of `e`.
    fn record_of(e: &PinnedEvent) -> Vec<(String, AnyValue)> {
        let logger = Kept::default();
        emit(&logger, e);
        logger.0.into_inner().pop().unwrap()
    }

    fn attribute<'a>(attrs: &'a [(String, AnyValue)], key: &str) -> Option<&'a AnyValue> {
        attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    #[test]
    fn a_pins_victims_become_log_record_attributes_counts_only_when_measured() {
        use crate::event::{SourceLocation, Victim, Victims};
        let ms = Duration::from_millis;
        let worst = Victim {
            task_id: 12,
            spawned_at: Some(SourceLocation {
                file: "src/api.rs".into(),
                line: 88,
                column: 5,
            }),
            wait: Some(ms(300)),
            lifo: true,
            ..Default::default()
        };
        let other = Victim {
            task_id: 13,
            wait: Some(ms(40)),
            ..Default::default()
        };
        let v = Victims {
            measured: true,
            tasks: 11,
            total_wait: Some(ms(1_250)),
            max_wait: Some(ms(300)),
            worst: vec![worst.clone(), other],
            ..Default::default()
        };
        let mut e = PinnedEvent::for_test(4, State::Completed, Reason::LockWait, 320, 9);
        e.victims = Some(v.clone());
        let attrs = record_of(&e);
        let get = |k: &str| attribute(&attrs, k).cloned();
        assert_eq!(get("pinwatch.victims.measured"), Some(AnyValue::from(true)));
        assert_eq!(get("pinwatch.victims.tasks"), Some(AnyValue::from(11i64)));
        assert_eq!(
            get("pinwatch.victims.total_wait_ms"),
            Some(AnyValue::from(1250.0))
        );
        assert_eq!(
            get("pinwatch.victims.max_wait_ms"),
            Some(AnyValue::from(300.0))
        );
        assert_eq!(get("pinwatch.victims.lifo"), Some(AnyValue::from(true)));
        let described = v.describe().unwrap();
        assert!(
            described
                .starts_with("delayed 11 tasks, the longest 300.0 ms: spawned at src/api.rs:88:5"),
            "{described}"
        );
        assert_eq!(
            get("pinwatch.victims.worst"),
            Some(AnyValue::from(described))
        );

        // Not measured: the tasks polled after the pin, named, but no count and no wait that a
        // backend could add up as delays.
        let first = Victim {
            wait: None,
            lifo: false,
            ..worst
        };
        e.victims = Some(Victims {
            measured: false,
            tasks: 3,
            worst: vec![first],
            ..Default::default()
        });
        let attrs = record_of(&e);
        let victims: Vec<&str> = attrs
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| k.starts_with("pinwatch.victims."))
            .collect();
        assert_eq!(
            victims,
            [
                "pinwatch.victims.measured",
                "pinwatch.victims.lifo",
                "pinwatch.victims.worst"
            ]
        );
        assert_eq!(
            attribute(&attrs, "pinwatch.victims.measured"),
            Some(&AnyValue::from(false))
        );

        // No victims (a recording made before the field existed): no attribute.
        e.victims = None;
        assert!(!record_of(&e)
            .iter()
            .any(|(k, _)| k.starts_with("pinwatch.victims.")));
    }

    #[test]
    fn the_protocol_comes_from_the_signal_variable_then_the_general_one() {
        let env = crate::export::env_of;
        assert_eq!(protocol("LOGS", env(&[])).unwrap(), Protocol::HttpProtobuf);
        assert_eq!(
            protocol("LOGS", env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")])).unwrap(),
            Protocol::Grpc
        );
        assert_eq!(
            protocol(
                "METRICS",
                env(&[
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                    ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf"),
                ])
            )
            .unwrap(),
            Protocol::HttpProtobuf
        );
        let err = protocol(
            "LOGS",
            env(&[("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "http/json")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL=\"http/json\"") && err.contains("grpc"),
            "{err}"
        );
    }

    /// gzip and none are taken, in any case; zstd, which the client is not built with, and
    /// anything else, which the SDK would drop with no word (` gzip` among them: it does not
    /// trim), stop the start, naming the variable.
    #[test]
    fn a_compression_the_client_cannot_do_is_refused_at_start_up() {
        let env = crate::export::env_of;
        assert!(compression("LOGS", env(&[])).is_ok());
        assert!(compression("LOGS", env(&[("OTEL_EXPORTER_OTLP_COMPRESSION", "GZIP")])).is_ok());
        assert_eq!(
            compression("LOGS", env(&[("OTEL_EXPORTER_OTLP_COMPRESSION", "GZIP")])).unwrap(),
            Some("OTEL_EXPORTER_OTLP_COMPRESSION".to_owned())
        );
        assert_eq!(
            compression("LOGS", env(&[("OTEL_EXPORTER_OTLP_COMPRESSION", "None")])).unwrap(),
            None
        );
        // The SDK does not trim: ` gzip` (or `gzip` and a carriage return, from a file with
        // Windows line ends) would go uncompressed with no word.
        for spaced in [
            env(&[("OTEL_EXPORTER_OTLP_COMPRESSION", " gzip")]),
            env(&[("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip\r")]),
            env(&[("OTEL_EXPORTER_OTLP_COMPRESSION", " ")]),
        ] {
            let err = compression("LOGS", spaced).unwrap_err().to_string();
            assert!(err.contains("OTEL_EXPORTER_OTLP_COMPRESSION=\""), "{err}");
        }
        let err = compression(
            "METRICS",
            env(&[("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "zstd")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION=\"zstd\"")
                && err.contains("built with gzip only"),
            "{err}"
        );
        // The signal's own variable first; an empty one is unset, as the SDK takes it.
        let err = compression(
            "LOGS",
            env(&[
                ("OTEL_EXPORTER_OTLP_LOGS_COMPRESSION", ""),
                ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzp"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("OTEL_EXPORTER_OTLP_COMPRESSION=\"gzp\"") && err.contains("`gzip`"),
            "{err}"
        );
        // A collector that does not take gzip answers 415 or Unimplemented: the warning says
        // the exports went compressed, and by which variable.
        assert_eq!(
            gzipped(
                "http://c:4318".into(),
                Some("OTEL_EXPORTER_OTLP_COMPRESSION".into())
            ),
            "http://c:4318 with gzip (OTEL_EXPORTER_OTLP_COMPRESSION)"
        );
        assert_eq!(gzipped("http://c:4318".into(), None), "http://c:4318");
        assert!(compression(
            "LOGS",
            env(&[
                ("OTEL_EXPORTER_OTLP_LOGS_COMPRESSION", "gzip"),
                ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"),
            ]),
        )
        .is_ok());
    }

    /// An https endpoint is refused at start-up, naming the variable that gave it (the
    /// signal's own first), and what to do; an http one, or none, is taken.
    #[test]
    fn an_https_endpoint_is_refused_at_start_up() {
        let env = crate::export::env_of;
        assert!(no_tls("LOGS", env(&[])).is_ok());
        assert!(no_tls(
            "LOGS",
            env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")])
        )
        .is_ok());
        let err = no_tls(
            "METRICS",
            env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "HTTPS://otlp.example.com")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("OTEL_EXPORTER_OTLP_ENDPOINT=\"HTTPS://otlp.example.com\" is https")
                && err.contains("has no TLS: give an http:// endpoint"),
            "{err}"
        );
        // Its credentials are not shown (helper-99).
        let err = no_tls(
            "LOGS",
            env(&[(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "https://user:s3cret@c.example:4318/?token=abc",
            )]),
        )
        .unwrap_err()
        .to_string();
        assert!(!err.contains("s3cret") && !err.contains("abc"), "{err}");
        assert!(
            err.contains("=\"https://…@c.example:4318/?…\" is https"),
            "{err}"
        );
        // An empty one is unset, as the SDK takes it.
        let pairs = &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otlp.example.com"),
            ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", ""),
        ];
        assert!(no_tls("LOGS", env(pairs)).is_err());
        // The signal's own variable decides for it.
        let pairs = &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otlp.example.com"),
            (
                "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
                "http://collector:4318/v1/logs",
            ),
        ];
        assert!(no_tls("LOGS", env(pairs)).is_ok());
        assert!(no_tls("METRICS", env(pairs)).is_err());
    }
}
