//! Issue 24 end to end: `traced_service` (axum + tower-http's `TraceLayer` +
//! `tracing-opentelemetry` + `pinwatch::tracing_layer()`), a real process on 127.0.0.1. A pin
//! names the request it happened in; its trace id is the one the OTLP trace exporter sent for
//! that request's span, to an in-process OTLP/HTTP receiver built on `opentelemetry-proto`.

mod support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use support::{wait_for, Proc};

/// `traced_service` on a free port (it binds port 0 and says which on stdout), with `env`;
/// returns once it has said where it listens.
fn traced_service(env: &[(&str, String)]) -> (Proc, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_traced_service"))
        .args(["--addr", "127.0.0.1:0"])
        .env_remove("PINWATCH")
        .env_remove("PINWATCH_THRESHOLD")
        .env_remove("PINWATCH_RECORD")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env("RUST_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let proc = Proc {
        child,
        name: "traced_service".into(),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if let Some(addr) = line.strip_prefix("traced_service: listening on ") {
                let _ = tx.send(addr.parse::<SocketAddr>().unwrap());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("traced_service did not say where it listens within 60 s");
    (proc, addr)
}

/// `GET path`; panics unless it answers 200.
fn get_ok(addr: SocketAddr, path: &str) {
    let (status, body) = sample_apps::traced::get(addr, path)
        .unwrap_or_else(|e| panic!("GET {path} from traced_service: {e}"));
    assert_eq!(status, 200, "GET {path}: {body}");
}

/// The recording's events so far (a line being written is skipped).
fn recorded(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The `request` span of a recorded pin (`spans`, outermost first), if it has one.
fn request_span(event: &serde_json::Value) -> Option<&serde_json::Value> {
    event["spans"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == "request")
}

#[test]
fn a_pin_names_its_request_and_the_other_route_never_appears() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("pins.jsonl");
    let (_service, addr) = traced_service(&[("PINWATCH_RECORD", record.display().to_string())]);
    // /health requests from one thread while another's /report requests block a worker.
    let health = std::thread::spawn(move || {
        for _ in 0..40 {
            get_ok(addr, "/health");
        }
    });
    for _ in 0..4 {
        get_ok(addr, "/report");
    }
    health.join().unwrap();
    // Wait (bounded) for a completed pin; on a machine so loaded that the watchdog saw none of
    // those pins, one more /report each round.
    let events = wait_for(
        "a completed pin in the recording",
        Duration::from_secs(90),
        || {
            let events = recorded(&record);
            let done = events.iter().any(|e| e["state"] == "completed");
            if !done {
                get_ok(addr, "/report");
            }
            done.then_some(events)
        },
    );
    for e in &events {
        assert_eq!(e["event"], "pinned", "{e}");
        let span = request_span(e).unwrap_or_else(|| panic!("a pin with no request span: {e}"));
        assert_eq!(span["target"], "sample_apps::traced", "{e}");
        assert_eq!(span["fields"]["method"], "GET", "{e}");
        assert_eq!(span["fields"]["uri"], "/report", "{e}");
        assert_eq!(span["fields"]["http.route"], "/report", "{e}");
        assert!(
            !e["spans"].to_string().contains("/health"),
            "a /health request in a pin: {e}"
        );
    }
}

/// The docs' axum setup (docs/spans.md) under `RUST_LOG=info`: the request span is INFO with
/// `http.route` from `MatchedPath`, and the fmt layer's filter is its own, so pinwatch still sees
/// the DEBUG `db_query` span inside it. Pins in `/orders/7` and `/orders/8` are one request,
/// `GET /orders/{id}`, with `db_query` innermost — in the recording and in `summary --json`.
#[test]
fn under_rust_log_info_pins_name_their_route_and_the_debug_span_inside_it() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("pins.jsonl");
    let (_service, addr) = traced_service(&[
        ("PINWATCH_RECORD", record.display().to_string()),
        ("RUST_LOG", "info".to_owned()),
    ]);
    get_ok(addr, "/orders/7");
    get_ok(addr, "/orders/8");
    // Each query blocks 60 ms, three times the threshold: two completed pins, written by the
    // recording's thread after the polls end.
    let events = wait_for(
        "the two completed pins in the recording",
        Duration::from_secs(60),
        || {
            let done: Vec<serde_json::Value> = recorded(&record)
                .into_iter()
                .filter(|e| e["state"] == "completed")
                .collect();
            (done.len() >= 2).then_some(done)
        },
    );
    for e in &events {
        let spans = e["spans"]
            .as_array()
            .unwrap_or_else(|| panic!("no spans: {e}"));
        let request = request_span(e).unwrap_or_else(|| panic!("no request span: {e}"));
        assert_eq!(request["fields"]["http.route"], "/orders/{id}", "{e}");
        assert_eq!(request["fields"]["method"], "GET", "{e}");
        let innermost = spans.last().unwrap();
        assert_eq!(
            innermost["name"], "db_query",
            "the DEBUG span is hidden: {e}"
        );
    }
    let uris: std::collections::BTreeSet<String> = events
        .iter()
        .map(|e| request_span(e).unwrap()["fields"]["uri"].to_string())
        .collect();
    assert_eq!(uris.len(), 2, "{uris:?}");
    let out = Command::new(support::pinwatch_cli())
        .args(["summary", "--json"])
        .arg(&record)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = summary["by_request"]
        .as_array()
        .unwrap_or_else(|| panic!("{summary}"));
    assert_eq!(rows.len(), 1, "one route, whatever the ids: {summary}");
    assert_eq!(rows[0]["request"], "GET /orders/{id}", "{summary}");
    assert_eq!(rows[0]["count"], 2, "{summary}");
    assert_eq!(
        rows[0]["innermost"],
        serde_json::json!([["db_query", 2]]),
        "{summary}"
    );
}

#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    logs: Vec<LogRecord>,
}

type Shared = Arc<Mutex<Received>>;

/// An OTLP/HTTP receiver on loopback, as in `tests/otlp.rs`, with traces: `POST /v1/traces` and
/// `/v1/logs`, protobuf bodies, decoded into spans and log records.
fn receiver() -> (u16, Shared) {
    let got: Shared = Arc::default();
    let store = Arc::clone(&got);
    let port = support::otlp_http_receiver(move |path, body| match path {
        "/v1/traces" => ExportTraceServiceRequest::decode(body)
            .map(|r| {
                let spans = r
                    .resource_spans
                    .into_iter()
                    .flat_map(|r| r.scope_spans)
                    .flat_map(|s| s.spans);
                store.lock().unwrap().spans.extend(spans);
            })
            .is_ok(),
        "/v1/logs" => ExportLogsServiceRequest::decode(body)
            .map(|r| {
                let records = r
                    .resource_logs
                    .into_iter()
                    .flat_map(|r| r.scope_logs)
                    .flat_map(|s| s.log_records);
                store.lock().unwrap().logs.extend(records);
            })
            .is_ok(),
        "/v1/metrics" => true,
        _ => false,
    });
    (port, got)
}

fn string<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    match attrs
        .iter()
        .find(|kv| kv.key == key)?
        .value
        .as_ref()?
        .value
        .as_ref()?
    {
        any_value::Value::StringValue(s) => Some(s),
        _ => None,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The service with its OTLP trace exporter and pinwatch's OTLP logs both sending to one
/// receiver; after /report requests, a completed pin from the recording and the exported
/// `request` span with the pin's span id.
fn pin_and_its_exported_span() -> (serde_json::Value, Span, Shared, Proc, tempfile::TempDir) {
    let (port, got) = receiver();
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("pins.jsonl");
    let endpoint = format!("http://127.0.0.1:{port}");
    let (service, addr) = traced_service(&[
        ("PINWATCH_RECORD", record.display().to_string()),
        ("PINWATCH_OTLP", "on".into()),
        ("PINWATCH_TRACING", "off".into()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".into()),
        ("OTEL_SERVICE_NAME", "traced-test".into()),
        ("OTEL_BSP_SCHEDULE_DELAY", "200".into()),
        ("OTEL_METRIC_EXPORT_INTERVAL", "60000".into()),
    ]);
    for _ in 0..3 {
        get_ok(addr, "/report");
        get_ok(addr, "/health");
    }
    let (pin, span) = wait_for(
        "a completed pin whose request span was exported",
        Duration::from_secs(90),
        || {
            let found = {
                let g = got.lock().unwrap();
                recorded(&record)
                    .into_iter()
                    .filter(|e| e["state"] == "completed")
                    .find_map(|e| {
                        let id = e["span_id"].as_str()?.to_owned();
                        let span = g.spans.iter().find(|s| hex(&s.span_id) == id)?.clone();
                        Some((e, span))
                    })
            };
            if found.is_none() {
                get_ok(addr, "/report"); // a machine too loaded to see the pins: one more
            }
            found
        },
    );
    (pin, span, got, service, dir)
}

#[test]
fn the_pins_trace_id_is_its_request_spans_in_the_trace_export() {
    let (pin, span, _got, _service, _dir) = pin_and_its_exported_span();
    let hex_of = |v: &serde_json::Value, n: usize| {
        v.as_str()
            .is_some_and(|s| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    assert!(hex_of(&pin["trace_id"], 32), "trace_id: {pin}");
    assert!(hex_of(&pin["span_id"], 16), "span_id: {pin}");
    assert_eq!(span.name, "request", "{span:?}");
    assert_eq!(string(&span.attributes, "method"), Some("GET"), "{span:?}");
    assert_eq!(string(&span.attributes, "uri"), Some("/report"), "{span:?}");
    assert_eq!(
        pin["trace_id"],
        hex(&span.trace_id),
        "pin {pin}\nspan {span:?}"
    );
    assert_eq!(request_span(&pin).unwrap()["fields"]["uri"], "/report");
}

#[test]
fn the_pins_otlp_log_record_carries_its_requests_trace_id() {
    let (pin, span, got, _service, _dir) = pin_and_its_exported_span();
    let record = wait_for("the pin's OTLP log record", Duration::from_secs(60), || {
        let g = got.lock().unwrap();
        g.logs
            .iter()
            .find(|r| {
                string(&r.attributes, "pinwatch.state") == Some("completed")
                    && hex(&r.span_id) == pin["span_id"].as_str().unwrap_or("-")
            })
            .cloned()
    });
    assert_eq!(record.event_name, "pinwatch.worker.pinned", "{record:?}");
    assert_eq!(hex(&record.trace_id), hex(&span.trace_id), "{record:?}");
    assert_eq!(hex(&record.span_id), hex(&span.span_id), "{record:?}");
}
