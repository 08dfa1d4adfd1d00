//! The OTLP exporter against in-process receivers built on `opentelemetry-proto`: an OTLP/HTTP
//! one (protobuf over HTTP) and an OTLP/gRPC one (tonic), each decoding what `pin_service` (a
//! sample app that pins) sends with `PINWATCH_OTLP=on` and the standard `OTEL_*` variables; and a
//! collector that hangs, which must cost the app nothing but counted drops.

mod support;

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::{
    logs_service_server::{LogsService, LogsServiceServer},
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    metrics_service_server::{MetricsService, MetricsServiceServer},
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use prost::Message;
use support::{wait_for, Proc};

#[derive(Default)]
struct Received {
    logs: Vec<ExportLogsServiceRequest>,
    metrics: Vec<ExportMetricsServiceRequest>,
}

type Shared = Arc<Mutex<Received>>;

/// An OTLP/HTTP receiver on loopback: `POST /v1/logs` and `/v1/metrics`, protobuf bodies.
fn http_receiver() -> (u16, Shared) {
    http_receiver_of(|body| Some(body.to_vec()))
}

/// [`http_receiver`], each body first through `open`, which refuses it with `None`.
fn http_receiver_of(open: impl Fn(&[u8]) -> Option<Vec<u8>> + Send + 'static) -> (u16, Shared) {
    let got: Shared = Arc::default();
    let store = Arc::clone(&got);
    let port = support::otlp_http_receiver(move |path, body| {
        let Some(body) = open(body) else {
            return false;
        };
        match path {
            "/v1/logs" => ExportLogsServiceRequest::decode(&body[..])
                .map(|r| store.lock().unwrap().logs.push(r))
                .is_ok(),
            "/v1/metrics" => ExportMetricsServiceRequest::decode(&body[..])
                .map(|r| store.lock().unwrap().metrics.push(r))
                .is_ok(),
            _ => false,
        }
    });
    (port, got)
}

struct Grpc(Shared);

#[tonic::async_trait]
impl LogsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        self.0.lock().unwrap().logs.push(request.into_inner());
        Ok(tonic::Response::new(ExportLogsServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.0.lock().unwrap().metrics.push(request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// An OTLP/gRPC receiver on loopback, on a runtime of the test's own.
fn grpc_receiver() -> (u16, Shared, tokio::runtime::Runtime) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let got: Shared = Arc::default();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let (logs, metrics) = (Grpc(Arc::clone(&got)), Grpc(Arc::clone(&got)));
    rt.spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(LogsServiceServer::new(logs))
            .add_service(MetricsServiceServer::new(metrics))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await;
    });
    (port, got, rt)
}

fn pin_service(env: &[(&str, String)], args: &[&str]) -> Proc {
    pin_service_logging_to(env, args, Stdio::inherit())
}

/// [`pin_service`] with its stderr (pinwatch's warnings) sent to `stderr`.
fn pin_service_logging_to(env: &[(&str, String)], args: &[&str], stderr: Stdio) -> Proc {
    let child = Command::new(env!("CARGO_BIN_EXE_pin_service"))
        .args(args)
        .stderr(stderr)
        .env("PINWATCH_OTLP", "on")
        .env("PINWATCH_TRACING", "off")
        .env("OTEL_SERVICE_NAME", "pin-test")
        .env("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=ci")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "500")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    Proc {
        child,
        name: "pin_service".into(),
    }
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v: &AnyValue| v.value.as_ref())
}

fn string<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    match attr(attrs, key)? {
        any_value::Value::StringValue(s) => Some(s),
        _ => None,
    }
}

fn records(got: &Shared) -> Vec<LogRecord> {
    got.lock()
        .unwrap()
        .logs
        .iter()
        .flat_map(|r| &r.resource_logs)
        .flat_map(|r| &r.scope_logs)
        .flat_map(|s| s.log_records.clone())
        .collect()
}

fn metric_names(got: &Shared) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = got
        .lock()
        .unwrap()
        .metrics
        .iter()
        .flat_map(|r| &r.resource_metrics)
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .map(|m| (m.name.clone(), m.unit.clone()))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The OpenTelemetry names and units whose standard translation gives the Prometheus
/// exporter's metric names.
const OTEL_METRICS: &[(&str, &str, &str)] = &[
    ("pinwatch.pins", "{pin}", "pinwatch_pins_total"),
    (
        "pinwatch.pin.duration",
        "s",
        "pinwatch_pin_duration_seconds",
    ),
    ("pinwatch.pinned", "s", "pinwatch_pinned_seconds_total"),
    (
        "pinwatch.workers.pinned",
        "{worker}",
        "pinwatch_workers_pinned",
    ),
    (
        "pinwatch.block_on.blocked",
        "{body}",
        "pinwatch_block_on_blocked",
    ),
    ("pinwatch.workers", "{worker}", "pinwatch_workers"),
    ("pinwatch.oldest_pin", "s", "pinwatch_oldest_pin_seconds"),
    (
        "pinwatch.pins_by_location",
        "{pin}",
        "pinwatch_pins_by_location_total",
    ),
    (
        "pinwatch.pins_by_request",
        "{pin}",
        "pinwatch_pins_by_request_total",
    ),
    (
        "pinwatch.events.dropped",
        "{event}",
        "pinwatch_events_dropped_total",
    ),
    ("pinwatch.runtime.stalled", "", "pinwatch_runtime_stalled"),
    (
        "pinwatch.runtime.stall",
        "s",
        "pinwatch_runtime_stall_seconds_total",
    ),
    (
        "pinwatch.driver.handovers",
        "{handover}",
        "pinwatch_driver_handovers_total",
    ),
    (
        "pinwatch.driver.rescued_pins",
        "{pin}",
        "pinwatch_driver_rescued_pins_total",
    ),
    (
        "pinwatch.victim_tasks",
        "{task}",
        "pinwatch_victim_tasks_total",
    ),
    (
        "pinwatch.victim_wait",
        "s",
        "pinwatch_victim_wait_seconds_total",
    ),
    ("pinwatch.busy_waits", "{task}", "pinwatch_busy_waits_total"),
    ("pinwatch.threshold", "s", "pinwatch_threshold_seconds"),
    ("pinwatch.build.info", "", "pinwatch_build_info"),
];

fn check_delivery(got: &Shared) {
    // A completed sleep pin with its code location, and the stuck worker's in_progress report.
    let done = wait_for("log records of both kinds", Duration::from_secs(90), || {
        let recs = records(got);
        let sleep = recs.iter().find(|r| {
            string(&r.attributes, "pinwatch.reason") == Some("sleep")
                && string(&r.attributes, "pinwatch.state") == Some("completed")
        })?;
        let stuck = recs.iter().find(|r| {
            string(&r.attributes, "pinwatch.reason") == Some("other")
                && string(&r.attributes, "pinwatch.state") == Some("in_progress")
        })?;
        let names = metric_names(got);
        (OTEL_METRICS
            .iter()
            .all(|(n, _, _)| names.iter().any(|(m, _)| m == n)))
        .then(|| (sleep.clone(), stuck.clone()))
    });
    let (sleep, stuck) = done;
    for r in [&sleep, &stuck] {
        assert_eq!(r.event_name, "pinwatch.worker.pinned", "{r:?}");
        assert_eq!(r.severity_number, 13, "WARN: {r:?}");
        assert!(
            r.time_unix_nano > 0 && r.time_unix_nano <= r.observed_time_unix_nano,
            "{r:?}"
        );
        assert!(string(&r.attributes, "pinwatch.run.id").is_some_and(|s| s.len() >= 16));
        assert!(string(&r.attributes, "thread.name").is_some(), "{r:?}");
        let body = match r.body.as_ref().and_then(|b| b.value.as_ref()) {
            Some(any_value::Value::StringValue(s)) => s.clone(),
            other => panic!("body {other:?}"),
        };
        assert!(body.starts_with("pinned "), "{body}");
    }
    assert!(
        string(&sleep.attributes, "code.file.path").is_some_and(|f| f.ends_with("pin_service.rs")),
        "{sleep:?}"
    );
    assert!(
        matches!(attr(&sleep.attributes, "code.line.number"), Some(any_value::Value::IntValue(l)) if *l > 0),
        "{sleep:?}"
    );
    assert!(
        string(&sleep.attributes, "code.function.name").is_some(),
        "{sleep:?}"
    );
    assert!(
        matches!(attr(&sleep.attributes, "pinwatch.pin.duration"), Some(any_value::Value::DoubleValue(d)) if *d >= 0.02),
        "{sleep:?}"
    );
    assert_eq!(
        string(&stuck.attributes, "pinwatch.blocking_operation"),
        Some("futex")
    );
    assert!(
        string(&stuck.attributes, "pinwatch.advice").is_some_and(|a| a.contains("spawn_blocking")),
        "{stuck:?}"
    );
    // The resource, from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
    let g = got.lock().unwrap();
    let resource = g.logs[0].resource_logs[0].resource.as_ref().unwrap();
    assert_eq!(
        string(&resource.attributes, "service.name"),
        Some("pin-test")
    );
    assert_eq!(
        string(&resource.attributes, "deployment.environment.name"),
        Some("ci")
    );
    drop(g);
    // Metric names and units, as the Prometheus translation needs them, and values.
    let names = metric_names(got);
    for (n, unit, _) in OTEL_METRICS {
        assert!(
            names.contains(&(n.to_string(), unit.to_string())),
            "{n} [{unit}] not in {names:?}"
        );
    }
    assert_eq!(last_value(got, "pinwatch.workers", &[]), Some(3.0));
    assert_eq!(last_value(got, "pinwatch.threshold", &[]), Some(0.02));
    assert!(last_value(got, "pinwatch.workers.pinned", &[]).is_some_and(|v| v >= 1.0));
    assert!(last_value(got, "pinwatch.oldest_pin", &[]).is_some_and(|v| v > 0.0));
    assert!(last_value(got, "pinwatch.pins", &[("reason", "sleep")]).is_some_and(|v| v >= 1.0));
    assert_eq!(
        last_value(got, "pinwatch.pins", &[("reason", "once_wait")]),
        Some(0.0)
    );
    assert!(last_value(got, "pinwatch.pinned", &[("reason", "other")]).is_some_and(|v| v > 0.0));
    // The victim series exist for every reason before any victim (pin_service measures none).
    for reason in pinwatch::Reason::ALL.iter().map(|r| r.as_str()) {
        for name in ["pinwatch.victim_tasks", "pinwatch.victim_wait"] {
            assert!(
                last_value(got, name, &[("reason", reason)]).is_some(),
                "no {name}{{reason={reason}}}"
            );
        }
    }
    assert!(last_value(got, "pinwatch.busy_waits", &[]).is_some());
    // A cumulative sum that goes down reads as a counter reset: every series only grows.
    let mut seen = 0;
    for reason in pinwatch::Reason::ALL.iter().map(|r| r.as_str()) {
        let values = values(got, "pinwatch.pinned", &[("reason", reason)]);
        seen += values.len();
        for w in values.windows(2) {
            assert!(
                w[1] >= w[0],
                "pinwatch.pinned{{reason={reason}}} went from {} to {}: {values:?}",
                w[0],
                w[1]
            );
        }
    }
    assert!(seen > 8, "{seen} pinwatch.pinned points");
}

/// Every data point of the sum `name` whose attributes include `attrs`, in the order received.
fn values(got: &Shared, name: &str, attrs: &[(&str, &str)]) -> Vec<f64> {
    use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value};
    let matches = |a: &[KeyValue]| attrs.iter().all(|(k, v)| string(a, k) == Some(*v));
    let g = got.lock().unwrap();
    g.metrics
        .iter()
        .flat_map(|r| &r.resource_metrics)
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .filter(|m| m.name == name)
        .filter_map(|m| match &m.data {
            Some(Data::Sum(s)) => Some(&s.data_points),
            _ => None,
        })
        .flatten()
        .filter(|p| matches(&p.attributes))
        .filter_map(|p| match p.value {
            Some(Value::AsDouble(d)) => Some(d),
            Some(Value::AsInt(i)) => Some(i as f64),
            None => None,
        })
        .collect()
}

/// The latest data point of metric `name` whose attributes include `attrs` (a sum, a gauge, or
/// a histogram's count).
fn last_value(got: &Shared, name: &str, attrs: &[(&str, &str)]) -> Option<f64> {
    use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value};
    let matches = |a: &[KeyValue]| attrs.iter().all(|(k, v)| string(a, k) == Some(*v));
    let g = got.lock().unwrap();
    let mut out = None;
    for m in g
        .metrics
        .iter()
        .flat_map(|r| &r.resource_metrics)
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .filter(|m| m.name == name)
    {
        let points: Vec<(Vec<KeyValue>, f64)> = match &m.data {
            Some(Data::Sum(s)) => s
                .data_points
                .iter()
                .map(|p| (p.attributes.clone(), p.value))
                .filter_map(|(a, v)| match v {
                    Some(Value::AsDouble(d)) => Some((a, d)),
                    Some(Value::AsInt(i)) => Some((a, i as f64)),
                    None => None,
                })
                .collect(),
            Some(Data::Gauge(s)) => s
                .data_points
                .iter()
                .filter_map(|p| match p.value {
                    Some(Value::AsDouble(d)) => Some((p.attributes.clone(), d)),
                    Some(Value::AsInt(i)) => Some((p.attributes.clone(), i as f64)),
                    None => None,
                })
                .collect(),
            Some(Data::Histogram(h)) => h
                .data_points
                .iter()
                .map(|p| (p.attributes.clone(), p.count as f64))
                .collect(),
            _ => Vec::new(),
        };
        for (a, v) in points {
            if matches(&a) {
                out = Some(v);
            }
        }
    }
    out
}

#[test]
fn events_and_metrics_reach_an_otlp_http_receiver() {
    let (port, got) = http_receiver();
    let _svc = pin_service(
        &[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}"),
        )],
        &["--stuck", "1"],
    );
    check_delivery(&got);
}

/// `OTEL_EXPORTER_OTLP_COMPRESSION=gzip` is done, not dropped with no word (the client was
/// built without gzip, and the SDK sent every body uncompressed: helper-97). The receiver takes
/// gzip bodies only.
#[test]
fn gzip_is_sent_when_asked_for() {
    let (port, got) = http_receiver_of(|body| {
        let mut plain = Vec::new();
        let gzip = body.starts_with(&[0x1f, 0x8b])
            && std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(body), &mut plain)
                .is_ok();
        gzip.then_some(plain)
    });
    let _svc = pin_service(
        &[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{port}"),
            ),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip".into()),
        ],
        &["--stuck", "1"],
    );
    check_delivery(&got);
}

#[test]
fn events_and_metrics_reach_an_otlp_grpc_receiver() {
    let (port, got, _rt) = grpc_receiver();
    let _svc = pin_service(
        &[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{port}"),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".into()),
        ],
        &["--stuck", "1"],
    );
    check_delivery(&got);
}

#[test]
fn the_otel_names_translate_to_the_prometheus_names() {
    let prometheus: Vec<&str> = pinwatch::export::prometheus::METRICS
        .iter()
        .map(|m| m.name)
        .collect();
    let otel: Vec<&str> = OTEL_METRICS.iter().map(|(_, _, p)| *p).collect();
    assert_eq!(otel, prometheus);
    for (name, unit, expected) in OTEL_METRICS {
        // The OTLP → Prometheus translation: dots to underscores, the unit's word appended
        // (annotations in braces dropped), `_total` on counters.
        let mut p = name.replace('.', "_");
        if *unit == "s" && !p.ends_with("_seconds") {
            p.push_str("_seconds");
        }
        let kind = pinwatch::export::prometheus::METRICS
            .iter()
            .find(|m| m.name == *expected)
            .unwrap()
            .kind;
        if kind == "counter" {
            p.push_str("_total");
        }
        assert_eq!(&p, expected, "{name} [{unit}]");
    }
}

/// A collector that fails in some way: what `pin_service` must survive.
enum Fault {
    /// Nothing listens on the port.
    Absent,
    /// Every request answered `503 Service Unavailable`.
    Unavailable,
    /// Connections accepted, never answered.
    Hangs,
}

/// Starts the faulty collector; its port.
fn faulty_collector(fault: &Fault) -> u16 {
    match fault {
        Fault::Absent => support::free_port(),
        Fault::Unavailable => {
            let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
            let port = server.server_addr().to_ip().unwrap().port();
            std::thread::spawn(move || {
                for req in server.incoming_requests() {
                    let _ = req.respond(tiny_http::Response::empty(503));
                }
            });
            port
        }
        Fault::Hangs => {
            let hang = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = hang.local_addr().unwrap().port();
            std::thread::spawn(move || {
                let mut held = Vec::new();
                for c in hang.incoming().flatten() {
                    held.push(c);
                }
            });
            port
        }
    }
}

/// Runs `pin_service` for a while against `fault`; the sleep pins it made per second, after
/// checking drops are counted, memory stays flat and the recording gets every report.
fn survives(fault: Fault) -> f64 {
    let port = faulty_collector(&fault);
    let prom_port = support::free_port();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec.jsonl");
    let log = dir.path().join("stderr");
    let svc = pin_service_logging_to(
        &[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{port}"),
            ),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2000".into()),
            ("PINWATCH_QUEUE_CAPACITY", "8".into()),
            ("PINWATCH_PROMETHEUS_ADDR", format!("127.0.0.1:{prom_port}")),
            ("PINWATCH_RECORD", rec.display().to_string()),
        ],
        &[],
        std::fs::File::create(&log).unwrap().into(),
    );
    let metrics = format!("http://127.0.0.1:{prom_port}/metrics");
    let rss = |pid: u32| -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let pid = svc.child.id();
    let scrape = || {
        let t0 = Instant::now();
        let t = support::get(&metrics, Duration::from_secs(5))
            .ok()
            .map(|(_, b)| b);
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "scrape took {:?}",
            t0.elapsed()
        );
        t
    };
    let pins = |t: &str| support::sample(t, "pinwatch_pins_total{reason=\"sleep\"}");
    let dropped = |t: &str| support::sample(t, "pinwatch_events_dropped_total{sink=\"otlp\"}");
    let first = wait_for(
        "the first analysed pins and OTLP drops",
        Duration::from_secs(90),
        || {
            let t = scrape()?;
            (pins(&t)? > 0.0 && dropped(&t)? > 0.0).then_some(t)
        },
    );
    let (t_start, pins_start, dropped_start) = (
        Instant::now(),
        pins(&first).unwrap(),
        dropped(&first).unwrap(),
    );
    // Memory stays flat while reports keep failing: every queue is bounded.
    let rss_start = rss(pid);
    let text = wait_for("more OTLP drops", Duration::from_secs(60), || {
        let t = scrape()?;
        (dropped(&t)? >= dropped_start + 20.0 && t_start.elapsed() > Duration::from_secs(3))
            .then_some(t)
    });
    let grown = rss(pid).saturating_sub(rss_start);
    assert!(grown < 16 * 1024, "RSS grew by {grown} KiB while dropping");
    // The app and the other sinks went on: more pins counted, every report recorded.
    let pins_now = pins(&text).unwrap();
    assert!(pins_now > pins_start, "pins stopped at {pins_now}");
    let recorded = std::fs::read_to_string(&rec).unwrap().lines().count();
    assert!(
        recorded as f64 >= pins_now,
        "{recorded} recorded lines, {pins_now} pins"
    );
    // And the service said so (helper-60: an absent collector said nothing at all; at most
    // once a minute: the unit test's). The warning goes out through pinwatch's log thread as
    // the first export fails.
    wait_for(
        "the failed exports' warning",
        Duration::from_secs(60),
        || {
            let text = std::fs::read_to_string(&log).ok()?;
            text.contains("WARN pinwatch: the OTLP collector did not take pin reports (")
                .then_some(())
        },
    );
    // A collector that holds each request for its timeout takes fewer reports than come: the
    // queue's drops are said too, not only counted (helper-95).
    if matches!(fault, Fault::Hangs) {
        wait_for("the full queue's warning", Duration::from_secs(60), || {
            let text = std::fs::read_to_string(&log).ok()?;
            text.contains(
                "WARN pinwatch: pinwatch's `otlp` sink is behind: its collector takes reports \
                 more slowly than they come",
            )
            .then_some(())
        });
    }
    (pins_now - pins_start) / t_start.elapsed().as_secs_f64()
}

/// pin_service's sleep pins per second with a healthy receiver, measured the same way.
fn healthy_rate() -> f64 {
    let (port, _got) = http_receiver();
    let prom_port = support::free_port();
    let _svc = pin_service(
        &[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{port}"),
            ),
            ("PINWATCH_PROMETHEUS_ADDR", format!("127.0.0.1:{prom_port}")),
        ],
        &[],
    );
    let metrics = format!("http://127.0.0.1:{prom_port}/metrics");
    let pins = || {
        let (_, t) = support::get(&metrics, Duration::from_secs(5)).ok()?;
        support::sample(&t, "pinwatch_pins_total{reason=\"sleep\"}").filter(|p| *p > 0.0)
    };
    let start = wait_for("the first pins", Duration::from_secs(90), pins);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(4));
    (pins().unwrap() - start) / t0.elapsed().as_secs_f64()
}

#[test]
fn a_collector_that_is_absent_refuses_or_hangs_costs_the_app_nothing_but_counted_drops() {
    let healthy = healthy_rate();
    for (name, fault) in [
        ("absent", Fault::Absent),
        ("503", Fault::Unavailable),
        ("hangs", Fault::Hangs),
    ] {
        let rate = survives(fault);
        // The app's own work: pin_service pins on a 100 ms ticker (about 9 sleep pins a
        // second); a collector in trouble must not slow it. Printed, with a generous bound.
        println!("collector {name}: {rate:.1} sleep pins/s (healthy collector: {healthy:.1})");
        assert!(
            rate > healthy * 0.3,
            "collector {name}: {rate:.1} pins/s vs {healthy:.1}"
        );
    }
}

#[test]
fn the_collector_config_feeds_the_prometheus_exporter_and_a_logs_pipeline() {
    // No collector binary here: parse it and check the pipelines it promises.
    let path = support::repo().join("deploy/otel-collector.yaml");
    let script = format!(
        "import yaml\n\
         c = yaml.safe_load(open('{}'))\n\
         p = c['service']['pipelines']\n\
         assert p['metrics']['receivers'] == ['otlp'] and 'prometheus' in p['metrics']['exporters'], p\n\
         assert p['logs']['receivers'] == ['otlp'] and p['logs']['exporters'], p\n\
         assert set(c['receivers']['otlp']['protocols']) == {{'grpc', 'http'}}\n\
         assert 'pinwatch.worker.pinned' in str(c['processors'])\n",
        path.display()
    );
    support::python(&script);
}

/// A pin's line with the spans and OpenTelemetry ids the tracing layer captures.
const TRACED_PIN: &str = r#"{"schema":1,"event":"pinned","id":7,"state":"completed","start":"2026-11-30T06:11:31.537975Z","duration_ms":120.5,"threshold_ms":20.0,"task_id":22,"worker":{"index":1,"tid":11190,"name":"tokio-rt-worker"},"reason":"sleep","blocking_operation":"clock_nanosleep","stack":[],"held_locks":[],"samples":1,"report":2,"cpu_wait_ms":0.0,"spans":[{"name":"request","target":"tower_http::trace::make_span","fields":{"http.route":"/report","method":"GET","uri":"/report?x=1"}},{"name":"render","target":"svc","fields":{"id":"7"}}],"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7"}"#;

#[test]
fn a_pins_log_record_carries_its_requests_trace_and_span_ids_and_chain() {
    let (port, got) = http_receiver();
    let event = pinwatch::PinnedEvent::from_json_line(TRACED_PIN).unwrap();
    pinwatch::export::otlp::send_for_test(&format!("http://127.0.0.1:{port}"), vec![event])
        .unwrap();
    // The exporter sends before it returns; the receiver stores before it responds.
    let recs = records(&got);
    let rec = recs
        .iter()
        .find(|r| r.event_name == pinwatch::export::otlp::EVENT_NAME)
        .expect("the pin's log record");
    assert_eq!(
        rec.trace_id,
        [
            0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e,
            0x47, 0x36
        ]
    );
    assert_eq!(
        rec.span_id,
        [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
    );
    assert_eq!(string(&rec.attributes, "pinwatch.span"), Some("render"));
    assert_eq!(
        string(&rec.attributes, "pinwatch.request"),
        Some("GET /report")
    );
    assert_eq!(
        string(&rec.attributes, "pinwatch.spans"),
        Some("request{http.route=/report method=GET uri=/report?x=1}:render{id=7}")
    );

    // A pin outside any traced request: no trace context, no span attributes.
    let (port, got) = http_receiver();
    let plain = TRACED_PIN.split(r#","spans""#).next().unwrap().to_owned() + "}";
    let event = pinwatch::PinnedEvent::from_json_line(&plain).unwrap();
    pinwatch::export::otlp::send_for_test(&format!("http://127.0.0.1:{port}"), vec![event])
        .unwrap();
    let recs = records(&got);
    let rec = recs.first().expect("the pin's log record");
    assert!(rec.trace_id.is_empty() && rec.span_id.is_empty(), "{rec:?}");
    assert_eq!(string(&rec.attributes, "pinwatch.span"), None);
    assert_eq!(string(&rec.attributes, "pinwatch.request"), None);
}

/// `TRACED_PIN` in state `state` with `victims` (a JSON object) added.
fn pin_with_victims(state: &str, victims: &str) -> pinwatch::PinnedEvent {
    let line = TRACED_PIN
        .replace(r#""state":"completed""#, &format!(r#""state":"{state}""#))
        .replace(r#","spans":"#, &format!(r#","victims":{victims},"spans":"#));
    pinwatch::PinnedEvent::from_json_line(&line).unwrap()
}

const MEASURED: &str = r#"{"measured":true,"tasks":11,"total_wait_ms":1250.0,"max_wait_ms":300.0,"worst":[{"task_id":12,"spawned_at":{"file":"src/api.rs","line":88,"column":5},"wait_ms":300.0,"worker":1,"lifo":true},{"task_id":13,"wait_ms":40.0,"worker":0}],"queue_depth_max":4}"#;

/// A pin's victims reach the receiver as `pinwatch.victims.*` attributes (the counts only when
/// measured), and the metrics count them once, from the completed report.
#[test]
fn a_pins_victims_reach_the_receiver_as_attributes_and_counted_once() {
    let (port, got) = http_receiver();
    let partial = r#"{"measured":true,"tasks":3,"total_wait_ms":90.0,"max_wait_ms":40.0}"#;
    let unmeasured = r#"{"measured":false,"tasks":2,"worst":[{"task_id":30,"worker":1},{"task_id":31,"worker":1}]}"#;
    let mut other = pin_with_victims("completed", unmeasured);
    other.id = 8;
    pinwatch::export::otlp::send_for_test(
        &format!("http://127.0.0.1:{port}"),
        vec![
            pin_with_victims("in_progress", partial),
            pin_with_victims("completed", MEASURED),
            other,
        ],
    )
    .unwrap();
    let recs = records(&got);
    let by = |state: &str, id: i64| {
        recs.iter()
            .find(|r| {
                string(&r.attributes, "pinwatch.state") == Some(state)
                    && matches!(attr(&r.attributes, "pinwatch.event.id"), Some(any_value::Value::IntValue(i)) if *i == id)
            })
            .unwrap_or_else(|| panic!("no {state} record of {id}: {recs:?}"))
    };
    let done = by("completed", 7);
    let a = &done.attributes;
    assert_eq!(
        attr(a, "pinwatch.victims.measured"),
        Some(&any_value::Value::BoolValue(true))
    );
    assert_eq!(
        attr(a, "pinwatch.victims.tasks"),
        Some(&any_value::Value::IntValue(11))
    );
    assert_eq!(
        attr(a, "pinwatch.victims.total_wait_ms"),
        Some(&any_value::Value::DoubleValue(1250.0))
    );
    assert_eq!(
        attr(a, "pinwatch.victims.max_wait_ms"),
        Some(&any_value::Value::DoubleValue(300.0))
    );
    assert_eq!(
        attr(a, "pinwatch.victims.lifo"),
        Some(&any_value::Value::BoolValue(true))
    );
    let worst = string(a, "pinwatch.victims.worst").unwrap();
    assert!(
        worst.starts_with("delayed 11 tasks, the longest 300.0 ms: spawned at src/api.rs:88:5"),
        "{worst}"
    );
    // The in_progress record carries the victims known so far.
    assert_eq!(
        attr(&by("in_progress", 7).attributes, "pinwatch.victims.tasks"),
        Some(&any_value::Value::IntValue(3))
    );
    // Not measured: named, not counted.
    let a = &by("completed", 8).attributes;
    assert_eq!(
        attr(a, "pinwatch.victims.measured"),
        Some(&any_value::Value::BoolValue(false))
    );
    assert_eq!(attr(a, "pinwatch.victims.tasks"), None, "{a:?}");
    assert_eq!(attr(a, "pinwatch.victims.total_wait_ms"), None, "{a:?}");
    assert!(string(a, "pinwatch.victims.worst").is_some_and(|w| w.contains("task 30")));
    // The metrics, flushed when the exporter stops: pin 7's final victims, once; pin 8's none.
    assert_eq!(
        last_value(&got, "pinwatch.victim_tasks", &[("reason", "sleep")]),
        Some(11.0)
    );
    assert!(
        last_value(&got, "pinwatch.victim_wait", &[("reason", "sleep")])
            .is_some_and(|s| (s - 1.25).abs() < 1e-9)
    );
    assert_eq!(
        last_value(&got, "pinwatch.victim_tasks", &[("reason", "cpu")]),
        Some(0.0)
    );
}

/// An `https://` endpoint stops the service at start-up, naming the variable, instead of every
/// export failing as "network error" while it runs (the client has no TLS; helper-95).
#[test]
fn an_https_endpoint_is_a_start_up_error() {
    let err = support::start_up_error(
        env!("CARGO_BIN_EXE_first_pin"),
        &[
            ("PINWATCH_OTLP", "on"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://127.0.0.1:1"),
        ],
    );
    assert!(
        err.contains("OTEL_EXPORTER_OTLP_ENDPOINT=\"https://127.0.0.1:1\" is https")
            && err.contains("no TLS"),
        "{err}"
    );
}

/// Metrics the collector does not take are said on stderr, though every log record arrives
/// (helper-95: `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` at nothing was never said, nor counted).
#[test]
fn metrics_the_collector_does_not_take_are_said() {
    let (port, _got) = http_receiver();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr");
    let nowhere = format!("http://127.0.0.1:{}/v1/metrics", support::free_port());
    let _svc = pin_service_logging_to(
        &[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{port}"),
            ),
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", nowhere.clone()),
        ],
        &[],
        std::fs::File::create(&log).unwrap().into(),
    );
    // Every 500 ms an export fails (OTEL_METRIC_EXPORT_INTERVAL): the first is said, with
    // where it went (the HTTP client's error says only "network error").
    let said = wait_for(
        "the failed metrics' warning",
        Duration::from_secs(60),
        || {
            let text = std::fs::read_to_string(&log).ok()?;
            text.lines()
                .find(|l| {
                    l.starts_with(
                        "WARN pinwatch: the OTLP collector did not take pinwatch's metrics (",
                    )
                })
                .map(str::to_owned)
        },
    );
    assert!(
        said.contains(&format!(", sent to {nowhere}); 1 export failed")),
        "{said}"
    );
}
