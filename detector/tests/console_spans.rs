//! `PINWATCH_CONSOLE=on`: the subscriber pinwatch installs includes `tracing_layer()`, so a pin
//! in a span says so, for every detector of the process. Its own test binary: it installs the
//! process's subscriber.
#![cfg(feature = "console")]

mod support;

use std::time::Duration;

use pinwatch::{Console, State};
use support::{builder, multi_thread, spin, Collected};
use tracing::Instrument;

/// A pin in a span, through the subscriber `PINWATCH_CONSOLE=on` installed: its chain ends in
/// that span, with its field.
fn a_pin_in_a_span_says_so(rt: &support::Watched, events: &Collected) {
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
    let names: Vec<&str> = pin.spans.iter().map(|s| s.name.as_str()).collect();
    assert!(names.ends_with(&["request"]), "{pin:#?}");
    assert_eq!(pin.spans.last().unwrap().fields["uri"], "/report");
}

/// One test: the subscriber is the process's, installed once. A start that fails after
/// installing it (its control socket's directory cannot be made) leaves it installed, and the
/// corrected start uses it; so does a detector started after that one stopped (a runtime
/// rebuilt). Each puts spans on its pins.
#[test]
fn pinwatchs_own_subscriber_puts_spans_on_pins() {
    // A free port for the console's server.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::env::set_var("TOKIO_CONSOLE_BIND", format!("127.0.0.1:{port}"));
    let failed = builder(&Collected::default())
        .console(Console::On)
        .control(pinwatch::Control::Dir("/dev/null/pinwatch".into()))
        .build(&mut multi_thread(2))
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(failed.contains("/dev/null/pinwatch"), "{failed}");
    assert!(
        tracing::dispatcher::has_been_set(),
        "the failed start had installed the subscriber (the case this test is about)"
    );
    for round in 0..2 {
        let events = Collected::default();
        let rt = builder(&events)
            .console(Console::On)
            .build(&mut multi_thread(2))
            .map(|(rt, detector)| support::Watched { rt, detector })
            .unwrap_or_else(|e| panic!("start {round} after the subscriber was installed: {e}"));
        a_pin_in_a_span_says_so(&rt, &events);
        rt.shutdown();
    }
    // The start-up line names the address the server was installed on, not the variable's.
    std::env::set_var("TOKIO_CONSOLE_BIND", "127.0.0.1:1");
    let (started, line) = support::with_startup_line(|| {
        pinwatch::Builder::new()
            .control(pinwatch::Control::Off)
            .console(Console::On)
            .build(&mut multi_thread(1))
            .unwrap()
    });
    assert!(
        line.contains(&format!("tokio-console on 127.0.0.1:{port}")),
        "{line}"
    );
    drop(started);
}
