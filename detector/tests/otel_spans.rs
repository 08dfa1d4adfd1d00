//! `otel-trace`: a pin in a span that `tracing-opentelemetry` gave a context carries its trace
//! and span ids. Its own test binary: it installs the process's subscriber.
#![cfg(feature = "otel-trace")]

mod support;

use std::time::Duration;

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use pinwatch::State;
use support::{builder, multi_thread, spin, Collected};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::prelude::*;

#[test]
fn a_pin_carries_the_opentelemetry_ids_of_its_span() {
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("pinwatch-test")))
        .with(pinwatch::tracing_layer())
        .init();
    let events = Collected::default();
    let rt = support::watch(builder(&events), &mut multi_thread(2));
    let request = tracing::info_span!("request", uri = "/report");
    let inner = tracing::info_span!(parent: &request, "load_report");
    // The ids as tracing-opentelemetry's own API gives them.
    let want_trace = request
        .context()
        .span()
        .span_context()
        .trace_id()
        .to_string();
    let want_span = inner.context().span().span_context().span_id().to_string();
    let task = rt.spawn(
        async { spin(Duration::from_millis(100)) }
            .instrument(inner)
            .instrument(request),
    );
    rt.block_on(task).unwrap();
    let pin = events
        .wait_for(Duration::from_secs(30), |e| {
            !e.block_on && e.state == State::Completed
        })
        .unwrap_or_else(|| panic!("no pin: {:#?}", events.all()));
    rt.shutdown();
    let names: Vec<&str> = pin.spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["request", "load_report"], "{pin:#?}");
    assert_eq!(want_trace.len(), 32);
    assert_ne!(want_trace, "0".repeat(32));
    // The innermost span's: the trace both share, the inner one's span id.
    assert_eq!(
        pin.trace_id.as_deref(),
        Some(want_trace.as_str()),
        "{pin:#?}"
    );
    assert_eq!(pin.span_id.as_deref(), Some(want_span.as_str()), "{pin:#?}");
}
