//! Pinning checks for tests: what `#[pinwatch::test]` runs, and [`Check`] for harnesses of your
//! own.
//!
//! A test runs on a runtime of its own with a detector of its own (tests that run in parallel
//! never see each other's pins), its body watched too: the body of a `#[tokio::test]` is the
//! runtime's `block_on` future, which tokio's task hooks never see, and most test code runs
//! right there.
//!
//! A test's detector takes the detection settings from the environment (`PINWATCH`,
//! `PINWATCH_THRESHOLD`, `PINWATCH_REPORT_INTERVAL`, `PINWATCH_STACKS`,
//! `PINWATCH_SAMPLE_INTERVAL`, `PINWATCH_SCAN_INTERVAL`, `PINWATCH_WATCHDOG_NICE`,
//! `PINWATCH_QUEUE_CAPACITY`, `PINWATCH_MAX_THREADS`, `PINWATCH_TRACING`), never the exporters (`PINWATCH_PROMETHEUS_ADDR`,
//! `PINWATCH_OTLP`, `PINWATCH_CONSOLE`), the control socket (`PINWATCH_CONTROL`) or the
//! recording (`PINWATCH_RECORD*`): those belong to a process, and the tests of a binary run in
//! parallel in one. It has no control socket and no heartbeat. A harness that wants an exporter
//! or a recording builds its runtime with [`Builder`](crate::Builder) instead.
//!
//! ```
//! # #[cfg(tokio_unstable)] {
//! let ((), pins) = pinwatch::testing::Check::new().run(async {
//!     tokio::spawn(async { /* code under test */ }).await.unwrap();
//! });
//! assert!(pins.is_empty(), "{}", pinwatch::testing::render(&pins));
//! # }
//! ```

use std::future::Future;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe, Location};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::__private::Flavor;
use crate::config::Stacks;
use crate::event::{PinnedEvent, Reason, State};

/// How many pins [`render`] shows in full.
pub const SHOWN_IN_FULL: usize = 5;

/// How a watched test runs and what it tolerates. The detection settings of the environment
/// apply first (see the [module docs](self)); what is set here wins.
#[derive(Clone, Debug)]
pub struct Check {
    /// Current-thread (`#[tokio::test]`'s default), multi-thread or a `LocalRuntime`.
    flavor: Flavor,
    /// A multi-thread runtime's workers (tokio's default when `None`).
    workers: Option<usize>,
    threshold: Option<Duration>,
    allow: Vec<Reason>,
    stacks: Option<Stacks>,
    tokio: Option<fn(&mut tokio::runtime::Builder)>,
}

impl Default for Check {
    fn default() -> Check {
        Check {
            flavor: Flavor::CurrentThread,
            workers: None,
            threshold: None,
            allow: Vec::new(),
            stacks: None,
            tokio: None,
        }
    }
}

impl Check {
    /// A current-thread runtime, the production threshold (20 ms), nothing tolerated.
    pub fn new() -> Check {
        Check::default()
    }

    /// A multi-thread runtime, with `workers` workers (tokio's default when `None`).
    pub fn multi_thread(mut self, workers: Option<usize>) -> Check {
        self.flavor = Flavor::MultiThread;
        self.workers = workers;
        self
    }

    /// A `LocalRuntime` (tokio's `Builder::build_local`: `spawn_local` works in the body).
    pub fn local(mut self) -> Check {
        self.flavor = Flavor::Local;
        self
    }

    /// A poll running at least this long pins (default: `PINWATCH_THRESHOLD`, else 20 ms).
    pub fn threshold(mut self, d: Duration) -> Check {
        self.threshold = Some(d);
        self
    }

    /// Pins for this reason do not count.
    pub fn allow(mut self, reason: Reason) -> Check {
        self.allow.push(reason);
        self
    }

    /// How much of the stack the pins carry.
    pub fn stacks(mut self, stacks: Stacks) -> Check {
        self.stacks = Some(stacks);
        self
    }

    /// Configures tokio's builder further, after pinwatch's settings (e.g.
    /// `|b| { b.start_paused(true); }`, with tokio's `test-util` feature). What
    /// `#[pinwatch::test]` does with tokio's options (`worker_threads`, `start_paused`,
    /// `unhandled_panic`, `name`).
    pub fn tokio(mut self, configure: fn(&mut tokio::runtime::Builder)) -> Check {
        self.tokio = Some(configure);
        self
    }

    /// Runs `fut` to completion on a watched runtime of its own, the future itself watched as
    /// well, and returns its output and the pins (the last report of each pinned poll, retracted
    /// ones and allowed reasons left out, in the order they started). If `fut` panics, the pins
    /// are printed to stderr and the panic goes on.
    ///
    /// # Panics
    ///
    /// When a detection variable holds a bad value, or the runtime cannot be built.
    #[track_caller]
    pub fn run<F: Future>(self, fut: F) -> (F::Output, Vec<PinnedEvent>) {
        match self.run_catching(Location::caller(), fut) {
            (Ok(out), pins) => (out, pins),
            (Err(panic), pins) => {
                if !pins.is_empty() {
                    eprintln!("{}", render(&pins));
                }
                resume_unwind(panic)
            }
        }
    }

    /// [`run`](Self::run), the body's panic caught and returned.
    pub(crate) fn run_catching<F: Future>(
        self,
        at: &'static Location<'static>,
        fut: F,
    ) -> (std::thread::Result<F::Output>, Vec<PinnedEvent>) {
        let mut tokio = crate::builder::tokio_builder(self.flavor, self.workers);
        if let Some(configure) = self.tokio {
            configure(&mut tokio);
        }
        let mut builder = self
            .builder(|name| std::env::var_os(name))
            .unwrap_or_else(|e| panic!("pinwatch: {e}"));
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink_events = Arc::clone(&events);
        builder = builder.sink(move |e: &PinnedEvent| {
            sink_events
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(e.clone());
        });
        // The runtime is dropped first (a poll still running is completed), then the detector:
        // a last scan, every event delivered.
        let result = if self.flavor == Flavor::Local {
            let (rt, detector) = builder
                .build_local(&mut tokio, Default::default())
                .unwrap_or_else(|e| panic!("pinwatch: {e}"));
            let body = detector.watch_block_on_at(at, fut);
            let result = catch_unwind(AssertUnwindSafe(|| rt.block_on(body)));
            drop(rt);
            drop(detector);
            result
        } else {
            let (rt, detector) = builder
                .build(&mut tokio)
                .unwrap_or_else(|e| panic!("pinwatch: {e}"));
            let body = detector.watch_block_on_at(at, fut);
            let result = catch_unwind(AssertUnwindSafe(|| rt.block_on(body)));
            drop(rt);
            drop(detector);
            result
        };
        let events = std::mem::take(&mut *events.lock().unwrap_or_else(|p| p.into_inner()));
        (result, pins(events, &self.allow))
    }
}

impl Check {
    /// The detector's settings for this test: the detection settings from `get` (it stands for
    /// `std::env::var_os`), then this check's. No exporter, recording or control socket.
    fn builder(
        &self,
        get: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<crate::Builder, crate::Error> {
        let mut builder = crate::Builder::new()
            .with_env_from(|name| {
                if crate::config::TEST_ENV_VARS.contains(&name) {
                    get(name)
                } else {
                    None
                }
            })?
            // A test's runtime lives for the test: no control socket for `pinwatch ctl`.
            .control(crate::config::Control::Off)
            // No heartbeat either: a test with tokio's paused clock would advance it by the
            // heartbeat's period at a time.
            .heartbeat(None);
        // No start-up line per test, and no report on stderr: a failing test's message shows
        // its pins.
        builder.config.announce = false;
        if let Some(t) = self.threshold {
            builder = builder.threshold(t);
        }
        if let Some(s) = self.stacks {
            builder = builder.stacks(s);
        }
        Ok(builder)
    }
}

/// The last report of each pinned poll, without retracted ones and `allow`ed reasons, by start.
fn pins(events: Vec<PinnedEvent>, allow: &[Reason]) -> Vec<PinnedEvent> {
    let mut last: Vec<PinnedEvent> = Vec::new();
    for e in events {
        match last.iter_mut().find(|p| p.id == e.id) {
            Some(p) => *p = e,
            None => last.push(e),
        }
    }
    last.retain(|e| e.state != State::Retracted && !e.reason.is_some_and(|r| allow.contains(&r)));
    last.sort_by_key(|e| e.start);
    last
}

/// The pins as a test failure message: a count, the first [`SHOWN_IN_FULL`] as the `tracing`
/// line shows them (task, spawn location, worker, reason, blocking operation, stack or top
/// frame) with their held locks, and how many more.
pub fn render(pins: &[PinnedEvent]) -> String {
    let Some(first) = pins.first() else {
        return "no poll pinned a worker".to_owned();
    };
    let mut s = format!(
        "{} poll{} pinned a worker for {} or more:",
        pins.len(),
        if pins.len() == 1 { "" } else { "s" },
        humantime::format_duration(first.threshold)
    );
    for e in pins.iter().take(SHOWN_IN_FULL) {
        s.push_str("\n\n");
        s.push_str(&crate::export::render_text(e));
        for l in &e.held_locks {
            s.push_str(&format!(
                "\n    holding a {} acquired at {}",
                l.kind, l.acquired_at
            ));
        }
        if let Some(v) = &e.victims {
            for w in &v.worst {
                s.push_str(&format!(
                    "\n    delayed task {} {}",
                    w.task_id,
                    w.describe()
                ));
                match w.wait {
                    Some(wait) => s.push_str(&format!(" for {:.1} ms", wait.as_secs_f64() * 1e3)),
                    None => s.push_str(" (ran next; wait not measured)"),
                }
                if w.lifo {
                    s.push_str(" in the worker's LIFO slot");
                }
            }
        }
    }
    if pins.len() > SHOWN_IN_FULL {
        s.push_str(&format!("\n\n… and {} more", pins.len() - SHOWN_IN_FULL));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_failure_message_names_the_request_the_pin_was_in() {
        let mut e = PinnedEvent::for_test(1, State::Completed, Reason::Sleep, 40, 1);
        assert!(!render(std::slice::from_ref(&e)).contains(" in request"));
        e.spans = vec![crate::SpanInfo::for_test(
            "request",
            "tower_http::trace::make_span",
            &[("method", "GET"), ("uri", "/report")],
        )];
        let msg = render(&[e]);
        assert!(msg.contains(" in request{method=GET uri=/report}"), "{msg}");
    }

    #[test]
    fn the_failure_message_names_the_victims_of_the_pin() {
        let mut e = PinnedEvent::for_test(1, State::Completed, Reason::Sleep, 300, 1);
        e.victims = Some(crate::Victims {
            measured: true,
            tasks: 11,
            total_wait: Some(Duration::from_millis(1500)),
            max_wait: Some(Duration::from_millis(300)),
            worst: vec![crate::Victim {
                task_id: 14,
                spawned_at: Some(crate::event::SourceLocation {
                    file: "src/api.rs".into(),
                    line: 88,
                    column: 5,
                }),
                wait: Some(Duration::from_millis(300)),
                worker: Some(0),
                lifo: true,
                spans: vec![crate::SpanInfo::for_test(
                    "request",
                    "svc",
                    &[("uri", "/orders")],
                )],
            }],
            queue_depth_max: Some(10),
        });
        let msg = render(&[e]);
        assert!(
            msg.contains("delayed 11 tasks, the longest 300.0 ms: spawned at src/api.rs:88:5"),
            "{msg}"
        );
        assert!(
            msg.contains(
                "delayed task 14 spawned at src/api.rs:88:5 in request{uri=/orders} for 300.0 \
                 ms in the worker's LIFO slot"
            ),
            "{msg}"
        );
    }

    #[test]
    fn pins_keep_the_last_report_and_drop_retracted_and_allowed() {
        let events = vec![
            PinnedEvent::for_test(1, State::InProgress, Reason::Sleep, 25, 1),
            PinnedEvent::for_test(2, State::InProgress, Reason::Cpu, 25, 2),
            PinnedEvent::for_test(1, State::Completed, Reason::Sleep, 40, 1),
            PinnedEvent::for_test(3, State::InProgress, Reason::Io, 25, 3),
            PinnedEvent::for_test(3, State::Retracted, Reason::Io, 30, 3),
        ];
        let p = pins(events.clone(), &[]);
        let mut ids: Vec<u64> = p.iter().map(|e| e.id).collect();
        ids.sort();
        assert_eq!(ids, [1, 2]);
        let one = p.iter().find(|e| e.id == 1).unwrap();
        assert_eq!(one.state, State::Completed);
        assert_eq!(pins(events, &[Reason::Cpu]).len(), 1);
    }

    #[test]
    fn a_test_takes_the_detection_settings_from_the_environment_and_no_outputs() {
        let env: std::collections::HashMap<&str, &str> = [
            ("PINWATCH_THRESHOLD", "200ms"),
            ("PINWATCH_STACKS", "full"),
            ("PINWATCH_SCAN_INTERVAL", "1ms"),
            ("PINWATCH_SAMPLE_INTERVAL", "50ms"),
            ("PINWATCH_PROMETHEUS_ADDR", "127.0.0.1:9464"),
            ("PINWATCH_OTLP", "on"),
            ("PINWATCH_CONSOLE", "on"),
            ("PINWATCH_CONTROL", "on"),
            ("PINWATCH_RECORD", "/tmp/shared.jsonl"),
            ("PINWATCH_RECORD_MAX_SIZE", "1KB"),
            ("PINWATCH_HEARTBEAT", "10ms"),
        ]
        .into_iter()
        .collect();
        let get = |n: &str| env.get(n).map(std::ffi::OsString::from);
        let b = Check::new().builder(get).unwrap();
        let c = b.config();
        assert_eq!(c.threshold, Duration::from_millis(200));
        assert_eq!(c.stacks, Stacks::Full);
        assert_eq!(c.scan_interval, Duration::from_millis(1));
        assert_eq!(c.sample_interval, Duration::from_millis(50));
        assert_eq!(c.prometheus_addr, None);
        assert!(!c.otlp);
        assert_eq!(c.console, crate::config::Console::Off);
        assert_eq!(c.control, crate::config::Control::Off);
        assert_eq!(c.record, None);
        assert_eq!(c.heartbeat, None);
        // What the test sets in code wins.
        let b = Check::new()
            .threshold(Duration::from_millis(5))
            .builder(get)
            .unwrap();
        assert_eq!(b.config().threshold, Duration::from_millis(5));
        // A bad detection value is still an error naming it.
        let err = Check::new()
            .builder(|n: &str| (n == "PINWATCH_THRESHOLD").then(|| "soon".into()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("PINWATCH_THRESHOLD") && err.contains("\"soon\""),
            "{err}"
        );
    }

    /// The test harness names a test's thread for the test's whole path, and the body of a
    /// current-thread test runs on it: the pin names it whole (it was cut at 48 bytes).
    #[test]
    fn a_pin_in_a_test_with_a_long_name_names_its_thread_in_full_not_cut_at_forty_eight_bytes() {
        let name = std::thread::current()
            .name()
            .expect("the test harness names its threads")
            .to_owned();
        assert!(name.len() > 48, "{name}");
        let ((), pins) = Check::new()
            .threshold(Duration::from_millis(20))
            .stacks(Stacks::Off)
            .run(async { std::thread::sleep(Duration::from_millis(200)) });
        assert_eq!(pins.len(), 1, "{pins:#?}");
        assert_eq!(pins[0].worker.name, name);
        let text = render(&pins);
        assert!(text.contains(&name), "{text}");
    }

    #[test]
    fn render_counts_and_cuts() {
        let many: Vec<_> = (1..=7)
            .map(|i| PinnedEvent::for_test(i, State::Completed, Reason::Sleep, 30, 10 + i as u32))
            .collect();
        let text = render(&many);
        assert!(
            text.starts_with("7 polls pinned a worker for 20ms or more:"),
            "{text}"
        );
        assert!(text.contains("src/app.rs:15"), "{text}");
        assert!(!text.contains("src/app.rs:16"), "{text}");
        assert!(text.ends_with("… and 2 more"), "{text}");
    }
}
