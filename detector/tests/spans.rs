//! `pinwatch::tracing_layer()`: the spans a pinned poll was in, on its event. A real
//! `tracing_subscriber::registry()` with the layer, real runtimes, real pins.

mod support;

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Duration;

use pinwatch::{PinnedEvent, SpanInfo, State};
use support::{builder, multi_thread, spin, Collected};
use tracing::Instrument;
use tracing_subscriber::prelude::*;

const WAIT: Duration = Duration::from_secs(30);

/// The process's subscriber: the registry with pinwatch's layer (once per test binary). Tests run
/// one at a time: two sharing two cores would stretch each other's polls past the threshold.
fn setup() -> std::sync::MutexGuard<'static, ()> {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing_subscriber::registry()
            .with(pinwatch::tracing_layer())
            .init();
    });
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn span(name: &str, fields: &[(&str, &str)]) -> SpanInfo {
    SpanInfo {
        name: name.into(),
        target: "spans".into(),
        fields: fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
    }
}

fn names(e: &PinnedEvent) -> Vec<&str> {
    e.spans.iter().map(|s| s.name.as_str()).collect()
}

#[tracing::instrument]
async fn load_report(user: u32, kind: &str) -> u64 {
    spin(Duration::from_millis(150))
}

#[test]
fn nested_spans_are_on_the_pin_outermost_first_with_their_fields() {
    let _setup = setup();
    let events = Collected::default();
    let rt = support::watch(builder(&events), &mut multi_thread(2));
    let request = tracing::info_span!(
        "request",
        method = "GET",
        uri = "/report",
        status = tracing::field::Empty
    );
    let task = rt.spawn(
        async {
            tracing::Span::current().record("status", 200);
            load_report(7, "daily").await
        }
        .instrument(request),
    );
    rt.block_on(task).unwrap();
    let stats = rt.shutdown();
    assert_eq!(stats.pinned_polls, 1, "{:#?}", events.all());
    let want = vec![
        span(
            "request",
            &[("method", "GET"), ("uri", "/report"), ("status", "200")],
        ),
        span("load_report", &[("user", "7"), ("kind", "daily")]),
    ];
    // Every report of the pin carries them, the last one too (the spans had closed by then).
    let all = events.all();
    assert!(all.iter().any(|e| e.state == State::Completed), "{all:#?}");
    for e in &all {
        assert_eq!(e.spans, want, "{e:#?}");
        assert_eq!((&e.trace_id, &e.span_id), (&None, &None));
    }
}

#[test]
fn a_span_entered_on_another_worker_never_shows() {
    let _setup = setup();
    let events = Collected::default();
    let rt = support::watch(builder(&events), &mut multi_thread(2));
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    // Worker X: inside span "elsewhere", blocked until the other pin has been reported.
    let held = rt.spawn(
        async move {
            entered_tx.send(()).unwrap();
            release_rx.recv_timeout(WAIT * 2).unwrap();
        }
        .instrument(tracing::info_span!("elsewhere")),
    );
    entered_rx.recv_timeout(WAIT).unwrap();
    // This thread (a `block_on` body, in a slot of its own) pins, in span "mine", then in no
    // span, while the worker is in "elsewhere". (A second worker is not used: tokio does not
    // always wake the idle worker for a task spawned while the other one is blocked.)
    rt.block_on(rt.detector.watch_block_on(
        async { spin(Duration::from_millis(100)) }.instrument(tracing::info_span!("mine")),
    ));
    let mine = events
        .wait_for(WAIT, |e| e.block_on && e.state == State::Completed)
        .unwrap_or_else(|| panic!("no pin of the body: {:#?}", events.all()));
    rt.block_on(
        rt.detector
            .watch_block_on(async { spin(Duration::from_millis(100)) }),
    );
    let plain = events
        .wait_for(WAIT, |e| {
            e.block_on && e.state == State::Completed && e.id != mine.id
        })
        .unwrap_or_else(|| panic!("no second pin of the body: {:#?}", events.all()));
    release_tx.send(()).unwrap();
    rt.block_on(held).unwrap();
    rt.shutdown();
    assert_eq!(names(&mine), ["mine"], "{mine:#?}");
    assert!(plain.spans.is_empty(), "{plain:#?}");
    // The held worker's own pin shows its span.
    let held = events
        .completed()
        .into_iter()
        .find(|e| !e.block_on)
        .unwrap_or_else(|| panic!("no pin of the held worker: {:#?}", events.all()));
    assert_eq!(names(&held), ["elsewhere"], "{held:#?}");
    assert_ne!(held.worker.tid, mine.worker.tid);
}

#[test]
fn only_the_spans_of_the_poll_that_pinned() {
    let _setup = setup();
    let events = Collected::default();
    let rt = support::watch(builder(&events), &mut multi_thread(2));
    let task = rt.spawn(
        async {
            // First poll: a span entered and exited, then the task yields (and may move).
            tracing::info_span!("first").in_scope(|| spin(Duration::from_millis(1)));
            tokio::task::yield_now().await;
            // Second poll: pins inside "second".
            tracing::info_span!("second").in_scope(|| spin(Duration::from_millis(100)))
        }
        .instrument(tracing::info_span!("task")),
    );
    rt.block_on(rt.detector.watch_block_on(task)).unwrap();
    // A span the `block_on` caller entered before the poll began is not the poll's own.
    let caller = tracing::info_span!("caller").entered();
    rt.block_on(
        rt.detector
            .watch_block_on(async { spin(Duration::from_millis(100)) }),
    );
    drop(caller);
    rt.shutdown();
    let all = events.all();
    let task_pin = all.iter().find(|e| !e.block_on).expect("the task's pin");
    assert_eq!(names(task_pin), ["task", "second"], "{all:#?}");
    let body_pin = all.iter().find(|e| e.block_on).expect("the body's pin");
    assert!(body_pin.spans.is_empty(), "{body_pin:#?}");
}

#[test]
fn a_pin_outliving_its_span_keeps_it() {
    let _setup = setup();
    let events = Collected::default();
    let rt = support::watch(builder(&events), &mut multi_thread(2));
    let (flagged_tx, flagged_rx) = mpsc::channel::<()>();
    let flagged = events.clone();
    let task = rt.spawn(async move {
        {
            let span = tracing::info_span!("short", step = 1);
            let _entered = span.enter();
            // Until the watchdog has reported this poll as pinned, inside the span.
            let first = flagged.wait_for(WAIT, |e| !e.block_on);
            assert!(first.is_some(), "never flagged");
            flagged_tx.send(()).unwrap();
        }
        // The span is closed now; the poll goes on pinning.
        spin(Duration::from_millis(100))
    });
    flagged_rx.recv_timeout(WAIT).unwrap();
    rt.block_on(task).unwrap();
    rt.shutdown();
    let all = events.all();
    let last = all
        .iter()
        .rfind(|e| e.state == State::Completed)
        .expect("the completed report");
    assert_eq!(
        last.spans,
        vec![span("short", &[("step", "1")])],
        "{all:#?}"
    );
}
