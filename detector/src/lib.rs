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
//!     // the service, unchanged; `spawn` the work (the body of `main` itself is not a task)
//!     tokio::spawn(async { /* … */ }).await.unwrap();
//! }
//! ```
//!
//! or, for code that builds its own runtime:
//!
//! ```no_run
//! # fn main() -> Result<(), pinwatch::Error> {
//! let rt = pinwatch::Builder::from_env()?
//!     .build(tokio::runtime::Builder::new_multi_thread().enable_all())?;
//! # Ok(()) }
//! ```
//!
//! Both need `--cfg tokio_unstable` (tokio's poll hooks are unstable API): put
//! `rustflags = ["--cfg", "tokio_unstable"]` under `[build]` in `.cargo/config.toml`.
//!
//! ## The pipeline
//!
//! poll ([`hooks`](crate) → a per-thread slot) → watchdog thread (scans the slots, flags polls
//! past the threshold, probes the thread: `/proc` state and system call, stack sample) → one
//! bounded queue → sink thread (symbols, reason) → sinks: a `tracing` WARN event (target
//! `pinwatch`), a JSON-lines recording ([`PinnedEvent`]), and any [`Sink`] you add.
//!
//! ## Configuration
//!
//! Builder setters, or the environment through the one explicit call [`Builder::from_env`];
//! [`config::ENV_VARS`] lists the variables and the README has the table.

#![warn(missing_docs)]

#[cfg(not(tokio_unstable))]
compile_error!(
    "pinwatch needs `--cfg tokio_unstable` for tokio's task poll hooks: add \
     `rustflags = [\"--cfg\", \"tokio_unstable\"]` under `[build]` in .cargo/config.toml"
);

pub mod config;
mod error;
pub mod event;
mod hooks;
mod probe;
mod reason;
pub mod report;
mod runtime;
pub mod sink;
mod slot;
mod stack;
pub mod sync;
mod watchdog;

pub use config::{Config, Stacks};
pub use error::Error;
pub use event::{PinnedEvent, Reason, State};
pub use runtime::{Builder, Detector, Runtime, Stats};
pub use sink::Sink;
pub use stack::sample_signal;

/// Drop-in for `#[tokio::main]`: builds the runtime with pinwatch watching it, configured from
/// the environment. Takes the same arguments (`flavor = "multi_thread" | "current_thread"`,
/// `worker_threads = N`). A bad `PINWATCH_*` value stops the program with a message naming it.
pub use pinwatch_macros::main;

#[doc(hidden)]
pub mod __private {
    pub use tokio;

    /// What `#[pinwatch::main]` expands to.
    pub fn main_runtime(current_thread: bool, worker_threads: Option<usize>) -> crate::Runtime {
        let mut tokio = if current_thread {
            tokio::runtime::Builder::new_current_thread()
        } else {
            tokio::runtime::Builder::new_multi_thread()
        };
        tokio.enable_all();
        if let Some(n) = worker_threads {
            tokio.worker_threads(n);
        }
        match crate::Builder::from_env().and_then(|b| b.build(&mut tokio)) {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("pinwatch: {e}");
                std::process::exit(2);
            }
        }
    }
}
