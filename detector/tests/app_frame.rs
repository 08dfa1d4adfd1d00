//! A pin whose time goes inside a library from crates.io (here flate2, compressing): the top
//! frame is the library's, and every event also names the service's own line that called it —
//! with the default (short) stacks too.

use std::io::Write;
use std::time::{Duration, Instant};

use pinwatch::{PinnedEvent, Stacks, State};

mod support;

/// Compresses pseudo-random bytes until `for_at_least` has passed: CPU time inside flate2.
fn compress_for(for_at_least: Duration) -> usize {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let data: Vec<u8> = (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let start = Instant::now();
    let mut out = 0;
    while start.elapsed() < for_at_least {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&data).unwrap(); // THE CALL
        out += gz.finish().unwrap().len(); // THE CALL (its last block is compressed here)
    }
    out
}

/// The lines of `compress_for` marked `THE CALL`: where it calls into flate2, which compresses
/// in both (a sample may find the pin in either).
fn the_call_lines() -> Vec<u32> {
    let src = include_str!("app_frame.rs");
    // Made here, so that this line does not hold the mark itself.
    let mark = ["// THE", "CALL"].join(" ");
    let lines: Vec<u32> = src
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(&mark))
        .map(|(i, _)| i as u32 + 1)
        .collect();
    assert_eq!(lines.len(), 2, "the marked lines of compress_for");
    lines
}

fn pin_in_a_library(stacks: Stacks) -> PinnedEvent {
    let events = support::Collected::default();
    let rt = support::watch(
        support::builder(&events).stacks(stacks),
        &mut support::multi_thread(2),
    );
    let task = rt.spawn(async { compress_for(Duration::from_millis(400)) });
    let id: u64 = task.id().to_string().parse().unwrap();
    assert!(rt.block_on(task).unwrap() > 0);
    drop(rt);
    events
        .wait_for(Duration::from_secs(30), |e| {
            e.state == State::Completed && e.task_id == Some(id)
        })
        .unwrap_or_else(|| panic!("no completed event: {:#?}", events.all()))
}

#[test]
fn the_application_frame_is_the_line_that_called_the_library() {
    for stacks in [Stacks::Short, Stacks::Full] {
        let e = pin_in_a_library(stacks);
        let top = e.top_frame.as_ref().expect("a top frame");
        assert!(
            top.file
                .as_deref()
                .is_some_and(|f| f.contains("/registry/src/")),
            "the time is not in the library: {top:?}"
        );
        let app = e.app_frame.as_ref().expect("an application frame");
        assert!(
            app.file
                .as_deref()
                .is_some_and(|f| f.ends_with("detector/tests/app_frame.rs")),
            "{stacks:?}: {app:?}"
        );
        assert!(
            app.line.is_some_and(|l| the_call_lines().contains(&l)),
            "{stacks:?}: {app:?} is not a line that calls flate2 ({:?})",
            the_call_lines()
        );
        assert!(e.caller_frame().is_some());
        let headline = e.headline();
        println!("{stacks:?}: {headline}");
        assert!(
            headline.contains("), called from ") && headline.contains("app_frame.rs:"),
            "{headline}"
        );
        // The library's file is named from its package on, not cargo's registry path.
        assert!(!headline.contains("/registry/src/"), "{headline}");
        // Short stacks keep the application frame beside the top frame.
        assert!(e.stack.iter().any(|f| f.same_place(app)), "{:?}", e.stack);
    }
}
