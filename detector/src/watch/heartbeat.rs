//! pinwatch's heartbeat: while a pin runs, a task on the watched runtime that beats every
//! heartbeat period (`PINWATCH_HEARTBEAT`). Its lateness tells a pin that stalls the whole
//! runtime's timers and I/O from one that holds only its worker ([`Stall`]). Nothing beats
//! while nothing pins: an idle runtime is never woken by it.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;

use super::judge::Stall;

/// The heartbeat's state, shared by the watchdog that arms it and the task that beats.
pub(super) struct Heartbeat {
    /// Its period; `None`: no heartbeat.
    every: Option<Duration>,
    /// The clock's origin (the slot table's base).
    base: Instant,
    /// The last beat, in ns since `base`.
    last_beat: AtomicU64,
    /// Polls followed as pinned at the last scan: the heartbeat beats while it is not zero.
    pins: AtomicUsize,
    /// A heartbeat task runs.
    armed: AtomicBool,
}

impl Heartbeat {
    pub(super) fn new(every: Option<Duration>, base: Instant) -> Heartbeat {
        Heartbeat {
            every,
            base,
            last_beat: AtomicU64::new(0),
            pins: AtomicUsize::new(0),
            armed: AtomicBool::new(false),
        }
    }

    /// Called by the heartbeat task each time its timer fires.
    fn beat(&self) {
        let now = Instant::now().saturating_duration_since(self.base);
        self.last_beat
            .store(now.as_nanos() as u64, Ordering::Relaxed);
    }

    /// How late the heartbeat is at `now` (zero when on time), and when its next beat was due;
    /// `None` when it is off or not beating (no pin runs).
    pub(super) fn late(&self, now: Instant) -> Option<(Duration, Instant)> {
        let every = self.every?;
        if !self.armed.load(Ordering::SeqCst) {
            return None;
        }
        let last = self.base + Duration::from_nanos(self.last_beat.load(Ordering::Relaxed));
        Some(Stall::lateness(last, every, now))
    }

    /// Runs the heartbeat on the runtime of `handle` while `pins` (polls followed as pinned
    /// now) is not zero.
    pub(super) fn arm(self: &Arc<Heartbeat>, handle: &Handle, pins: usize) {
        self.pins.store(pins, Ordering::SeqCst);
        let Some(every) = self.every else {
            return;
        };
        if pins == 0 || self.armed.swap(true, Ordering::SeqCst) {
            return;
        }
        // Due one period from now: a runtime that cannot run the task from here is late.
        self.beat();
        let h = Arc::clone(self);
        handle.spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                h.beat();
                if h.pins.load(Ordering::SeqCst) == 0 {
                    // Disarm, then look again: either the watchdog sees it disarmed and arms a
                    // new beat, or this one sees the new pin and goes on (see `arm`).
                    h.armed.store(false, Ordering::SeqCst);
                    if h.pins.load(Ordering::SeqCst) == 0 || h.armed.swap(true, Ordering::SeqCst) {
                        return;
                    }
                }
            }
        });
    }
}
