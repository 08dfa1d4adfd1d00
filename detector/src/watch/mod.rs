//! The watchdog: a thread of pinwatch's own that looks at every watched thread's slot every few
//! milliseconds and reports a poll running past the threshold while it still runs, again while
//! it stays stuck, and completed with its exact duration once it returns.
//!
//! - `shared`: what it shares with the hooks' table, the exporters and the detector handle.
//! - `settings`: the settings that change at run time; `stats`: its counters.
//! - `stamps`: where polls are rare, their exact starts, so that it looks less often.
//! - `judge`: its decisions, as functions of the looks, times and states they are given.
//! - `scan`: the thread's loop, which reads the clock, the slots and `/proc` for them.
//! - `probe`: what a pinned thread is doing (`/proc`, a stack sample); `workers`: which
//!   worker a thread runs; `heartbeat`: whether a pin stalls the whole runtime; `victims`:
//!   who waited behind a pin.

mod heartbeat;
mod judge;
pub(crate) mod probe;
mod scan;
mod settings;
mod shared;
mod stamps;
mod stats;
mod victims;
mod workers;

pub(crate) use scan::{spawn, RawReport};
pub(crate) use shared::Shared;
pub use stats::Stats;
pub(crate) use stats::{snapshot, StatsCounters};
