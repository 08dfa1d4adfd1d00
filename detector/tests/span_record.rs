//! `pinwatch::tracing_layer()` and fields recorded after a span is created (`span.record`):
//! formatting a value runs the service's own code, which may use `tracing` itself. Its own test
//! binary: it installs the process's subscriber, and a failure here is a deadlock.

use std::sync::mpsc;
use std::time::Duration;

use tracing_subscriber::prelude::*;

/// A value whose `Debug` makes a span of its own (an `#[instrument]`ed helper, a log line in a
/// formatter).
struct Traced;

impl std::fmt::Debug for Traced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let _inner = tracing::info_span!("inside_debug").entered();
        f.write_str("traced")
    }
}

/// With the layer in the global subscriber, `span.record` of such a value returns: the layer
/// does not hold its span map locked while the value is formatted (it did, and the span made
/// inside the formatter waited for that lock forever — and so did every other thread, the
/// watchdog included).
#[test]
fn recording_a_value_whose_debug_makes_a_span_does_not_deadlock() {
    tracing_subscriber::registry()
        .with(pinwatch::tracing_layer())
        .init();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let span = tracing::info_span!("request", user = tracing::field::Empty);
        span.record("user", tracing::field::debug(&Traced));
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("span.record of a value whose Debug makes a span did not return within 60 s");
}
