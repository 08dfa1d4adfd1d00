//! # pinwatch
//!
//! Finds the code that holds tokio worker threads hostage — what JFR's
//! `jdk.VirtualThreadPinned` is for Java virtual threads.
//!
//! A tokio worker runs many tasks cooperatively. A poll that does not return quickly — a
//! `std::thread::sleep`, blocking I/O, a `std::sync::Mutex` held while blocking, a contended lock,
//! a blocking FFI call, a `LazyLock` initializer that blocks, a CPU loop with no `.await` — stalls
//! every task queued behind it. pinwatch times every poll without reading a clock, and reports a
//! poll that runs past a threshold (20 ms by default) *while it is still running*, with the task,
//! where it was spawned, the worker, why it is stuck and where.
//!
//! ## One line
//!
//! ```
//! #[pinwatch::main(flavor = "current_thread")]
//! async fn main() {
//!     // the service, unchanged (the body is watched too, though it is not a task)
//!     tokio::spawn(async { /* … */ }).await.unwrap();
//! }
//! ```
//!
//! or, for code that builds its own runtime:
//!
//! ```no_run
//! # fn main() -> Result<(), pinwatch::Error> {
//! let (rt, detector) = pinwatch::Builder::from_env()?
//!     .build(tokio::runtime::Builder::new_multi_thread().enable_all())?;
//! rt.block_on(async { /* the service */ });
//! drop(rt);
//! let stats = detector.shutdown(); // last scan, sinks flushed
//! # let _ = stats; Ok(()) }
//! ```
//!
//! You keep tokio's own `Runtime`; the [`Detector`] is a guard. Code with poll hooks of its own
//! calls pinwatch's from them ([`PollHooks`], [`Builder::prepare`]).
//!
//! Both need `--cfg tokio_unstable` (tokio's poll hooks are unstable API): put
//! `rustflags = ["--cfg", "tokio_unstable"]` under `[build]` in `.cargo/config.toml`.
//!
//! ## The pipeline
//!
//! `poll` → `signal` → [`sync`] → [`spans`] → `watch` → `analyze` → [`export`] → [`control`] →
//! `runtime` → `builder` → [`testing`]: the hooks and per-thread slots (the per-poll path), the
//! sampling signal's handler, instrumented locks, the span layer, the watchdog (its decisions
//! and its `/proc` probes), the analysis on the export thread (symbols, reasons, top frame), the
//! sinks — a `tracing` WARN event with target `pinwatch`, a JSON-lines recording of
//! [`PinnedEvent`]s, the flight recording and any [`Sink`] you add; with cargo features
//! Prometheus, OTLP and tokio-console —, the control socket, the [`Detector`] guard, the
//! [`Builder`], and the runtime of `#[pinwatch::test]`. Each module uses only those before it
//! and the leaves (`error`, [`config`], [`event`], [`files`], [`text`], `handoff`, [`recording`],
//! [`profile`]); the repository's CONTRIBUTING.md has the picture and what each file holds.
//!
//! ## Platforms
//!
//! Linux only: the detector reads `/proc/self/task` and samples stacks with a real-time signal.
//! Elsewhere the crate does not build, with a message saying so.
//!
//! ## Configuration
//!
//! Builder setters, or the environment through the one explicit call [`Builder::from_env`];
//! [`config::ENV_VARS`] lists the variables, and `docs/configuration.md` has the table.
//!
//! ## Cargo features
//!
//! - `prometheus` (default): [`Builder::prometheus_addr`] / `PINWATCH_PROMETHEUS_ADDR` (an
//!   endpoint on a thread of pinwatch's own), or [`Builder::prometheus_registry`] (your
//!   registry); [`export::prometheus::METRICS`] lists the metrics.
//! - `otlp`: `Builder::otlp` / `PINWATCH_OTLP=on`, pin reports and metrics over OTLP.
//! - `console`: `Builder::console` / `PINWATCH_CONSOLE=on`, tokio-console with a resource per
//!   worker (turns on tokio's `tracing` feature).
//! - `otel-trace`: [`tracing_layer()`] also puts the OpenTelemetry `trace_id`/`span_id` of the
//!   pinned poll's span on the event (from `tracing-opentelemetry`'s layer, added before it).
//!
//! - `schedule-latency`: every completed pin names the tasks that waited behind it and how long
//!   ([`Victims`], measured by tokio ≥ 1.54's `track_task_schedule_latency`).
//!
//! [`tracing_layer()`] itself needs no feature (`tracing-subscriber` with only its registry).
//!
//! ## Guides
//!
//! The repository's `docs/` folder has one guide per task, each with commands and real output:
//! `builder.md` (your own runtime, hooks, sinks), `configuration.md`, `prometheus.md` (metrics,
//! dashboard, alerts), `runbooks.md`, `otlp.md`, `console.md`, `testing.md`
//! (`#[pinwatch::test]`), `recording.md` (`pinwatch print` / `summary`, the format),
//! `report.md`, `profiling.md` (pprof profiles: `pinwatch profile`, [`profile`]), `ctl.md`
//! (a running service), `flight.md` (the flight recording: dumps after the fact), `reasons.md`, `blast-radius.md`,
//! `how-it-works.md` (design, signals, limits), `overhead.md` and `sample-apps.md`. Examples to
//! copy are in `detector/examples/`: `web_service` (axum and the Prometheus endpoint),
//! `own_runtime`, `own_registry`, `own_subscriber_console`.

#![warn(missing_docs)]
// docs.rs (`[package.metadata.docs.rs]`, `--cfg docsrs`): rustdoc's doc_cfg marks every item
// of a cargo feature with the feature it needs (`.ci/run` checks the pages).
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(not(target_os = "linux"))]
compile_error!(
    "pinwatch runs on Linux only: it reads /proc/self/task and samples stacks with a real-time \
     signal. Build the service without it elsewhere (e.g. make the dependency \
     `[target.'cfg(target_os = \"linux\")'.dependencies]`)"
);

#[cfg(not(tokio_unstable))]
compile_error!(
    "pinwatch needs `--cfg tokio_unstable` for tokio's task poll hooks: add \
     `rustflags = [\"--cfg\", \"tokio_unstable\"]` under `[build]` in .cargo/config.toml; \
     where the RUSTFLAGS variable is set (CI often sets it), cargo takes it instead of that \
     file: add `--cfg tokio_unstable` to RUSTFLAGS too"
);

// The pipeline's stages (their order: the crate docs, CONTRIBUTING.md).
mod analyze;
mod builder;
pub mod control;
pub mod export;
mod poll;
mod runtime;
mod signal;
pub mod spans;
pub mod sync;
mod watch;
// Runs a future on a watched runtime, for tests.
pub mod testing;

// Leaves every stage may use.
pub mod config;
mod error;
pub mod event;
pub mod files;
mod handoff;
pub mod profile;
pub mod recording;
pub mod text;

pub use builder::Builder;
pub use config::{Config, Console, Control, Settings, Stacks};
pub use error::Error;
pub use event::{Drivers, PinnedEvent, Reason, SpanInfo, State, Victim, Victims};
#[cfg(feature = "console")]
pub use export::console::console_layer;
pub use export::Sink;
pub use poll::PollHooks;
pub use runtime::{Detector, Prepared, Stats};
pub use signal::sample_signal;
pub use spans::{tracing_layer, SpanLayer};

/// Drop-in for `#[tokio::main]`: builds the runtime with pinwatch watching it, configured from
/// the environment. Takes the same arguments, refused in the same cases with tokio's messages
/// (`flavor = "multi_thread" | "current_thread" | "local"`, `worker_threads = N`,
/// `start_paused = true`, `crate = "path::to::tokio"`, `unhandled_panic = "ignore" |
/// "shutdown_runtime"`, `name = "…"`; each needs what tokio needs for it), and
/// `pinwatch_crate = "path::to::pinwatch"` when pinwatch is renamed or re-exported. A bad
/// `PINWATCH_*` value stops the program with a message naming it.
pub use pinwatch_macros::main;

/// Drop-in for `#[tokio::test]` that fails the test when a poll pins a worker — the test body's
/// own polls included. Takes every argument of `#[tokio::test]` (as [`main`]'s) and pinwatch's:
/// `threshold = "50ms"`, `allow = "cpu, sleep"` (reasons that do not count), `stacks = "full"`,
/// `pinwatch_crate = "…"`. The environment's detection settings apply under them, never
/// its exporters, recording or control socket. See [`testing`].
pub use pinwatch_macros::test;

#[doc(hidden)]
pub mod __private {
    use std::future::Future;

    /// pinwatch's tokio: what the attributes name when not given `crate = "…"`.
    pub use tokio;

    /// The runtime flavor an attribute asked for.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Flavor {
        /// `Builder::new_current_thread().build()`.
        CurrentThread,
        /// `Builder::new_multi_thread().build()`.
        MultiThread,
        /// `Builder::new_current_thread().build_local(..)`: a `LocalRuntime`.
        Local,
    }

    /// What `#[pinwatch::test]` expands to.
    #[track_caller]
    pub fn test_main<F: Future>(check: crate::testing::Check, body: F) -> F::Output {
        let (out, pins) = check.run(body);
        if !pins.is_empty() {
            panic!("{}", crate::testing::render(&pins));
        }
        out
    }

    /// What `#[pinwatch::test]` expands to for a `#[should_panic]` test (`expected` its
    /// string). A pin that the test expects — the first line of its failure message
    /// (`1 poll pinned a worker for 20ms or more:`) contains `expected` — fails it as in other
    /// tests, by panicking: the test passes. Any other pin cannot fail such a
    /// test by panicking (any panic passes a bare `#[should_panic]`, and `expected` may match
    /// the body's own panic), so it fails it by returning instead: the pins are printed, and
    /// the body's panic, if any, is caught — the harness then says the test did not panic as
    /// expected.
    #[track_caller]
    pub fn test_main_should_panic<F: Future<Output = ()>>(
        check: crate::testing::Check,
        expected: Option<&str>,
        body: F,
    ) {
        let (result, pins) = check.run_catching(std::panic::Location::caller(), body);
        if pins.is_empty() {
            if let Err(panic) = result {
                std::panic::resume_unwind(panic);
            }
            return;
        }
        let text = crate::testing::render(&pins);
        // Matched against the failure's first line (`1 poll pinned a worker for 20ms or more:`)
        // only: the rest names files, functions and span fields, which an `expected` meant for
        // the body's own panic could match by chance.
        let headline = text.lines().next().unwrap_or_default();
        if expected.is_some_and(|e| headline.contains(e)) {
            panic!("{text}");
        }
        eprintln!(
            "{text}\npinwatch: this #[should_panic] test pinned a worker, which its `expected` \
             does not name: it fails by not panicking{}",
            if result.is_err() {
                " (the body's own panic was caught)"
            } else {
                ""
            }
        );
    }

    /// What `#[pinwatch::main]` expands to: the runtime of `flavor`, `configure`d with the
    /// attribute's tokio options, watched, configured from the environment (a bad value stops
    /// the program with status 2), running `body`.
    #[track_caller]
    pub fn main<F: Future>(
        flavor: Flavor,
        configure: impl FnOnce(&mut tokio::runtime::Builder),
        body: F,
    ) -> F::Output {
        let at = std::panic::Location::caller();
        let mut tokio = crate::builder::tokio_builder(flavor, None);
        configure(&mut tokio);
        let builder = crate::Builder::from_env().unwrap_or_else(|e| exit(e));
        // No closure around `build`: it takes the caller's location (`track_caller`), the
        // user's `#[pinwatch::main]`, for the console resources. The body is the runtime's
        // `block_on` future, which tokio's task hooks never see: watched on its own. The
        // runtime is dropped first, so that a poll still running at shutdown is completed;
        // then the detector: a last scan, the sinks flushed.
        if flavor == Flavor::Local {
            let built = builder.build_local(&mut tokio, Default::default());
            let (runtime, detector) = built.unwrap_or_else(|e| exit(e));
            let output = runtime.block_on(detector.watch_block_on_at(at, body));
            drop(runtime);
            drop(detector);
            output
        } else {
            let built = builder.build(&mut tokio);
            let (runtime, detector) = built.unwrap_or_else(|e| exit(e));
            let output = runtime.block_on(detector.watch_block_on_at(at, body));
            drop(runtime);
            drop(detector);
            output
        }
    }

    fn exit(e: crate::Error) -> ! {
        eprintln!("pinwatch: {e}");
        std::process::exit(2);
    }
}
