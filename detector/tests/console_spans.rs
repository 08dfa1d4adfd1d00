//! `PINWATCH_CONSOLE=on`: the subscriber pinwatch installs includes `tracing_layer()`, so a pin
//! in a span says so. Its own test binary: it installs the process's subscriber.
#![cfg(feature = "console")]

mod support;

use std::time::Duration;

use pinwatch::{Console, State};
use support::{builder, multi_thread, spin, Collected};
use tracing::Instrument;

#[test]
fn pinwatchs_own_subscriber_puts_spans_on_pins() {
    // A free port for the console's server.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::env::set_var("TOKIO_CONSOLE_BIND", format!("127.0.0.1:{port}"));
    let events = Collected::default();
    let rt = support::watch(builder(&events).console(Console::On), &mut multi_thread(2));
    let task = rt.spawn(
        async { spin(Duration::from_millis(100)) }
            .instrument(tracing::warn_span!("request", uri = "/report")),
    );
    rt.block_on(task).unwrap();
    let pin = events
        .wait_for(Duration::from_secs(30), |e| {
            !e.block_on && e.state == State::Completed
        })
        .unwrap_or_else(|| panic!("no pin: {:#?}", events.all()));
    rt.shutdown();
    let names: Vec<&str> = pin.spans.iter().map(|s| s.name.as_str()).collect();
    assert!(names.ends_with(&["request"]), "{pin:#?}");
    assert_eq!(pin.spans.last().unwrap().fields["uri"], "/report");
}
