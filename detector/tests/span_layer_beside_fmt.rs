//! `pinwatch::tracing_layer()` beside tracing-subscriber's fmt layer, which holds a span's lock
//! in the registry while it formats a recorded value (the service's `Debug`): the watchdog reads
//! the spans from pinwatch's own table, so a slow or panicking value in another layer neither
//! holds up the reports of other pins nor stops the watchdog. A process of its own: it sets the
//! global default subscriber.

mod support;

use std::sync::{mpsc, Mutex};
use std::time::Duration;

use pinwatch::State;
use support::{builder, multi_thread, spin, Collected};
use tracing::Instrument;
use tracing_subscriber::prelude::*;

const WAIT: Duration = Duration::from_secs(30);

/// The subscriber, once; the tests one at a time.
fn setup() -> std::sync::MutexGuard<'static, ()> {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing_subscriber::registry()
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::sink))
            .with(pinwatch::tracing_layer())
            .init();
    });
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A value whose `Debug` says it started, then waits to be released (the sender dropped: every
/// layer that formats it, each in turn, then goes on).
struct Blocker {
    started: mpsc::Sender<()>,
    release: Mutex<mpsc::Receiver<()>>,
}

impl std::fmt::Debug for Blocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let _ = self.started.send(());
        let _ = self.release.lock().unwrap().recv_timeout(WAIT * 2);
        f.write_str("blocker")
    }
}

/// Task A pins inside span `request` while the fmt layer formats a value recorded on it (and
/// holds the span's registry lock); task B then pins outside any span. B's pin is reported
/// while A still blocks, and A's pin names its span.
#[test]
fn a_value_another_layer_formats_slowly_holds_up_no_report() {
    let _setup = setup();
    let events = Collected::default();
    let rt = support::watch(builder(&events), &mut multi_thread(2));
    let (started_tx, started_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let blocker = Blocker {
        started: started_tx,
        release: Mutex::new(release_rx),
    };
    let a = rt.spawn(
        async move {
            tracing::Span::current().record("user", tracing::field::debug(&blocker));
        }
        .instrument(tracing::info_span!(
            "request",
            uri = "/slow",
            user = tracing::field::Empty
        )),
    );
    started_rx.recv_timeout(WAIT).unwrap();
    // A is now blocked in its record, pinned; its pin is flagged while the fmt layer holds the
    // span's lock. B pins on the other worker.
    let b = rt.spawn(async { spin(Duration::from_millis(100)) });
    let b_id: u64 = b.id().to_string().parse().unwrap();
    let b_done = events.wait_for(WAIT, |e| {
        e.task_id == Some(b_id) && e.state == State::Completed
    });
    drop(release_tx);
    rt.block_on(a).unwrap();
    rt.block_on(b).unwrap();
    rt.shutdown();
    assert!(
        b_done.is_some(),
        "B's pin was not reported while A blocked: {:#?}",
        events.all()
    );
    let a_pin = events
        .all()
        .into_iter()
        .find(|e| e.task_id != Some(b_id))
        .unwrap_or_else(|| panic!("A's pin was not reported: {:#?}", events.all()));
    let names: Vec<&str> = a_pin.spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["request"], "{a_pin:#?}");
    assert_eq!(a_pin.spans[0].fields["uri"], "/slow");
}

/// A value whose `Debug` panics.
struct Panicky;

impl std::fmt::Debug for Panicky {
    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        panic!("a field that cannot be shown")
    }
}

/// A panic in the fmt layer's `on_record` poisons the span's registry lock; pins inside that
/// span are still reported with it, and the watchdog goes on reporting later pins.
#[test]
fn a_span_whose_registry_lock_is_poisoned_is_still_named_and_the_watchdog_goes_on() {
    let _setup = setup();
    let events = Collected::default();
    let rt = support::watch(builder(&events), &mut multi_thread(2));
    let session = tracing::info_span!("session", user = tracing::field::Empty);
    let poisoner = rt.spawn(
        async {
            tracing::Span::current().record("user", tracing::field::debug(&Panicky));
        }
        .instrument(session.clone()),
    );
    assert!(rt.block_on(poisoner).unwrap_err().is_panic());
    let inside = rt.spawn(async { spin(Duration::from_millis(100)) }.instrument(session));
    rt.block_on(inside).unwrap();
    let after = rt.spawn(async { spin(Duration::from_millis(100)) });
    let after_id: u64 = after.id().to_string().parse().unwrap();
    rt.block_on(after).unwrap();
    let later = events.wait_for(WAIT, |e| {
        e.task_id == Some(after_id) && e.state == State::Completed
    });
    rt.shutdown();
    assert!(
        later.is_some(),
        "no pin after the poisoning: {:#?}",
        events.all()
    );
    let named = events
        .completed()
        .into_iter()
        .find(|e| e.spans.iter().any(|s| s.name == "session"));
    assert!(named.is_some(), "{:#?}", events.all());
}
