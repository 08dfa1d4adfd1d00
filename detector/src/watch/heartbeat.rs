//! pinwatch's heartbeat: while a pin runs, a timer on the watched runtime that fires every
//! heartbeat period (`PINWATCH_HEARTBEAT`). Its lateness tells a pin that stalls the whole
//! runtime's timers from one that holds only its worker ([`Stall`]).
//!
//! It observes without rescuing. The task that waits on the timer is spawned once, when the
//! watchdog starts, and sleeps on a timer a year away; a pin arms it by setting that timer from
//! the watchdog thread ([`Heartbeat::arm`]). Setting a timer earlier wakes only the worker that
//! waits on the runtime's drivers, to wait less long; where none does — the stall it is there to
//! see — it wakes nobody. A task spawned when the pin begins would wake a parked worker, which
//! would take the drivers over as it parked again and end the stall unseen (see
//! docs/blast-radius.md). Nothing beats while nothing pins: an idle runtime is never woken by it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::time::Sleep;

use super::judge::Stall;

/// Where the timer waits while nothing pins: far enough never to fire, near enough for the
/// timer wheel (about two years at most).
const FAR: Duration = Duration::from_secs(365 * 24 * 3600);

/// The heartbeat's state, shared by the watchdog that arms it and the task that beats.
pub(super) struct Heartbeat {
    /// Its period; `None`: no heartbeat.
    every: Option<Duration>,
    /// The clock's origin (the slot table's base).
    base: Instant,
    /// The last beat (or the arming), in ns since `base`.
    last_beat: AtomicU64,
    /// Polls followed as pinned at the last scan: the heartbeat beats while it is not zero.
    pins: AtomicUsize,
    /// It beats: the timer is set one period after the last beat. Changed only with `timer`
    /// locked.
    armed: AtomicBool,
    /// The timer the task waits on ([`start`](Self::start)); locked by the task while it polls
    /// it and by the watchdog while it sets it.
    timer: Mutex<Option<Pin<Box<Sleep>>>>,
    /// The task is gone: the runtime shut down (and dropped it), or has no timers. A runtime
    /// shutting down with a pin still running is not stalled by it.
    gone: AtomicBool,
}

/// The heartbeat's task: beats as [`Heartbeat::poll_timer`] says, and says when the runtime
/// drops it.
struct Beating(Arc<Heartbeat>);

impl Future for Beating {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.poll_timer(cx)
    }
}

impl Drop for Beating {
    fn drop(&mut self) {
        self.0.gone.store(true, Ordering::SeqCst);
    }
}

impl Heartbeat {
    pub(super) fn new(every: Option<Duration>, base: Instant) -> Heartbeat {
        Heartbeat {
            every,
            base,
            last_beat: AtomicU64::new(0),
            pins: AtomicUsize::new(0),
            armed: AtomicBool::new(false),
            timer: Mutex::new(None),
            gone: AtomicBool::new(false),
        }
    }

    /// Makes the timer, in the runtime of `handle`, and spawns the task that waits on it: once,
    /// on the watchdog thread as it starts (where nothing reaches the service's `tracing`
    /// subscriber, so neither does the timer's instrumentation when the watchdog sets it). A
    /// runtime without a time driver has no heartbeat: tokio panics making the timer, and says
    /// so on stderr.
    pub(super) fn start(self: &Arc<Heartbeat>, handle: &Handle) {
        if self.every.is_none() {
            return;
        }
        let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _runtime = handle.enter();
            Box::pin(tokio::time::sleep_until((Instant::now() + FAR).into()))
        }));
        let Ok(timer) = made else {
            self.gone.store(true, Ordering::SeqCst);
            return;
        };
        if let Ok(mut slot) = self.timer.lock() {
            *slot = Some(timer);
        }
        drop(handle.spawn(Beating(Arc::clone(self))));
    }

    /// Called each time the timer fires (and when armed: the next beat is due one period on).
    fn beat(&self) {
        let now = Instant::now().saturating_duration_since(self.base);
        self.last_beat
            .store(now.as_nanos() as u64, Ordering::Relaxed);
    }

    fn last_beat(&self) -> Instant {
        self.base + Duration::from_nanos(self.last_beat.load(Ordering::Relaxed))
    }

    /// How late the heartbeat is at `now` (zero when on time), and when its next beat was due;
    /// `None` when it is off or not beating (no pin runs).
    pub(super) fn late(&self, now: Instant) -> Option<(Duration, Instant)> {
        let every = self.every?;
        if !self.armed.load(Ordering::SeqCst) || self.gone.load(Ordering::SeqCst) {
            return None;
        }
        Some(Stall::lateness(self.last_beat(), every, now))
    }

    /// Whether it has beaten at or after `at`.
    pub(super) fn beat_since(&self, at: Instant) -> Option<Instant> {
        let last = self.last_beat();
        (last >= at).then_some(last)
    }

    /// Beats while `pins` (polls followed as pinned now) is not zero: arms the timer, one
    /// period from now, when it is not armed. Called at every scan; when the task holds the
    /// timer (it is firing right now), the next scan arms it.
    pub(super) fn arm(&self, pins: usize) {
        self.pins.store(pins, Ordering::SeqCst);
        let Some(every) = self.every else {
            return;
        };
        if pins == 0 || self.armed.load(Ordering::SeqCst) || self.gone.load(Ordering::SeqCst) {
            return;
        }
        let Ok(mut timer) = self.timer.try_lock() else {
            return;
        };
        self.armed.store(true, Ordering::SeqCst);
        // Due one period from now: a runtime that does not fire it by then is late.
        self.beat();
        if let Some(timer) = timer.as_mut() {
            timer
                .as_mut()
                .reset(tokio::time::Instant::from_std(self.last_beat()) + every);
        }
    }

    /// The task's poll: waits on the timer, beats when it fires, and sets it again — a period
    /// on while pins run, far away once none does.
    fn poll_timer(&self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(every) = self.every else {
            return Poll::Ready(());
        };
        let Ok(mut timer) = self.timer.lock() else {
            return Poll::Ready(());
        };
        let Some(timer) = timer.as_mut() else {
            return Poll::Ready(());
        };
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        let next = if self.armed.load(Ordering::SeqCst) {
            self.beat();
            if self.pins.load(Ordering::SeqCst) == 0 {
                self.armed.store(false, Ordering::SeqCst);
                Instant::now() + FAR
            } else {
                self.last_beat() + every
            }
        } else {
            Instant::now() + FAR
        };
        timer.as_mut().reset(next.into());
        // Registers the waker for the new deadline (a period or more away: pending).
        if timer.as_mut().poll(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}
