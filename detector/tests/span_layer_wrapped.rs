//! `pinwatch::tracing_layer()` inside an `Option` (`.with(on.then(pinwatch::tracing_layer))`,
//! which tracing-subscriber does not tell which subscriber it is in) still names the spans of a
//! pin with their fields. A process of its own: it sets the global default subscriber.

mod support;

use std::time::Duration;

use pinwatch::State;
use support::{builder, multi_thread, spin, Collected};
use tracing::Instrument;
use tracing_subscriber::prelude::*;

#[test]
fn a_layer_in_an_option_still_names_the_spans_with_their_fields() {
    tracing_subscriber::registry()
        .with(Some(pinwatch::tracing_layer()))
        .init();
    let events = Collected::default();
    let rt = support::watch(builder(&events), &mut multi_thread(2));
    let task = rt.spawn(async { spin(Duration::from_millis(150)) }.instrument(
        tracing::info_span!("request", method = "GET", http.route = "/orders/{id}"),
    ));
    rt.block_on(task).unwrap();
    rt.shutdown();
    let e = events
        .completed()
        .into_iter()
        .find(|e| e.state == State::Completed)
        .unwrap_or_else(|| panic!("no pin: {:#?}", events.all()));
    assert_eq!(e.spans.len(), 1, "{e:#?}");
    assert_eq!(e.spans[0].name, "request");
    assert_eq!(e.spans[0].fields["method"], "GET");
    assert_eq!(e.spans[0].fields["http.route"], "/orders/{id}");
}
