//! pinwatch's heartbeat: while a pin runs, a timer on the watched runtime that fires every
//! heartbeat period (`PINWATCH_HEARTBEAT`). Its lateness tells a pin that stalls the whole
//! runtime's timers from one that holds only its worker ([`Stall`]).
//!
//! It observes without rescuing. The task that waits on the timer is spawned once, when the
//! detector starts, and sleeps on a timer a year away; a pin arms it by setting that timer from
//! outside the runtime ([`Heartbeat::arm`]). Setting a timer earlier wakes only the worker that
//! waits on the runtime's drivers, to wait less long; where none does — the stall it is there to
//! see — it wakes nobody. A task spawned when the pin begins would wake a parked worker, which
//! would take the drivers over as it parked again and end the stall unseen (see
//! docs/blast-radius.md). Nothing beats while nothing pins: an idle runtime is never woken by it.
//!
//! The waker thread does whatever calls into the runtime from outside: it makes and sets the
//! timer, spawns the heartbeat's task and a rescue's empty task ([`Heartbeat::wake`]). With
//! `tokio_unstable` and tokio's `tracing` feature, tokio traces each of these into the service's
//! subscriber, whose layers may block (a writer on a full pipe): the watchdog only asks, and
//! never waits for it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::time::Sleep;

use super::judge::Stall;

/// Where the timer waits while nothing pins: far enough never to fire, near enough for the
/// timer wheel (about two years at most).
const FAR: Duration = Duration::from_secs(365 * 24 * 3600);

/// A location in this file, where pinwatch's own tasks are spawned (`victims::is_own_task`).
#[cfg(test)]
pub(super) fn a_location_in_it() -> &'static std::panic::Location<'static> {
    std::panic::Location::caller()
}

/// What the watchdog asks of the waker thread.
const ARM: u8 = 1;
const WAKE: u8 = 2;
const STOP: u8 = 4;

/// The heartbeat's state, shared by the watchdog that arms it, the waker thread that sets its
/// timer and the task that beats.
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
    /// What the watchdog has asked of the waker thread and it has not done yet.
    requests: AtomicU8,
    /// The waker thread, once started.
    waker: OnceLock<std::thread::Thread>,
    /// The waker thread is doing what it was asked (not parked): where it stays so, the
    /// service's subscriber holds it, and a wake-up asked of it now would not come.
    busy: AtomicBool,
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
            requests: AtomicU8::new(0),
            waker: OnceLock::new(),
            busy: AtomicBool::new(true),
        }
    }

    /// Starts the waker thread for the runtime of `handle`, where there is a heartbeat or a
    /// `rescue` to wake workers for. Without it (a thread could not be made) there is neither.
    pub(super) fn start(self: &Arc<Heartbeat>, handle: &Handle, rescue: bool) {
        if self.every.is_none() && !rescue {
            return;
        }
        let (h, handle) = (Arc::clone(self), handle.clone());
        let (made_tx, made_rx) = std::sync::mpsc::sync_channel(1);
        let made = std::thread::Builder::new()
            .name("pinwatch-waker".into())
            .spawn(move || h.run(&handle, made_tx));
        match made {
            Ok(thread) => {
                let _ = self.waker.set(thread.thread().clone());
                // The heartbeat's task is spawned before the runtime runs the service's tasks: a
                // spawn while a pin runs would wake a parked worker (the rescue it must not be).
                // Bounded: a subscriber that holds the waker thread holds up no start.
                let _ = made_rx.recv_timeout(Duration::from_secs(1));
            }
            Err(_) => self.gone.store(true, Ordering::SeqCst),
        }
    }

    /// The waker thread: makes the timer and spawns the task that waits on it, then does what
    /// it is asked until it is asked to stop.
    fn run(self: &Arc<Heartbeat>, handle: &Handle, made: std::sync::mpsc::SyncSender<()>) {
        if self.every.is_some() {
            self.make_timer(handle);
        }
        let _ = made.send(());
        loop {
            let asked = self.requests.swap(0, Ordering::SeqCst);
            if asked & WAKE != 0 {
                // A task from outside the runtime: tokio wakes a parked worker for it, and
                // that worker, parking again when it is done, takes the free drivers.
                drop(handle.spawn(async {}));
            }
            if asked & STOP != 0 {
                return;
            }
            if asked & ARM != 0 {
                self.set_timer();
            }
            if asked == 0 {
                self.busy.store(false, Ordering::SeqCst);
                // Asked again since, or asked now: the unpark's token wakes the park.
                if self.requests.load(Ordering::SeqCst) == 0 {
                    std::thread::park();
                }
                self.busy.store(true, Ordering::SeqCst);
            }
        }
    }

    /// Asks the waker thread for `what`; whether there is one to ask.
    fn ask(&self, what: u8) -> bool {
        let Some(thread) = self.waker.get() else {
            return false;
        };
        self.requests.fetch_or(what, Ordering::SeqCst);
        thread.unpark();
        true
    }

    /// Makes the timer in the runtime's context, and spawns the task that waits on it. A
    /// runtime without a time driver has no heartbeat: tokio panics making the timer, and says
    /// so on stderr.
    fn make_timer(self: &Arc<Heartbeat>, handle: &Handle) {
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

    /// On the waker thread: sets the timer one period ahead, unless it is armed already or no
    /// pin runs now. Armed only once the timer is set: a waker thread held up in the service's
    /// subscriber leaves the heartbeat unarmed (no verdict), never late.
    fn set_timer(&self) {
        let Some(every) = self.every else {
            return;
        };
        if self.pins.load(Ordering::SeqCst) == 0 {
            return;
        }
        let Ok(mut timer) = self.timer.lock() else {
            return;
        };
        let Some(timer) = timer.as_mut() else {
            return;
        };
        if self.armed.load(Ordering::SeqCst) {
            return;
        }
        let at = Instant::now();
        timer.as_mut().reset((at + every).into());
        // Due one period from now: a runtime that does not fire it by then is late.
        self.beat_at(at);
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Asks the waker thread to wake a parked worker (a rescue, `PINWATCH_RESCUE`): whether it
    /// was asked, which it is only while it is free (parked between requests). A waker thread
    /// still busy, held in the service's subscriber, would not spawn the task: no rescue is
    /// claimed then.
    pub(super) fn wake(&self) -> bool {
        !self.busy.load(Ordering::SeqCst) && self.ask(WAKE)
    }

    /// The detector stops: the heartbeat beats once more at most (a pin may still run), and the
    /// waker thread ends.
    pub(super) fn stop(&self) {
        self.pins.store(0, Ordering::SeqCst);
        self.ask(STOP);
    }

    /// Called each time the timer fires (and when armed: the next beat is due one period on).
    fn beat(&self) {
        self.beat_at(Instant::now());
    }

    fn beat_at(&self, at: Instant) {
        let since_base = at.saturating_duration_since(self.base);
        self.last_beat
            .store(since_base.as_nanos() as u64, Ordering::Relaxed);
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

    /// Beats while `pins` (polls followed as pinned now) is not zero: asks the waker thread to
    /// arm the timer, one period from now, when it is not armed. Called at every scan.
    pub(super) fn arm(&self, pins: usize) {
        self.pins.store(pins, Ordering::SeqCst);
        if self.every.is_none() || pins == 0 {
            return;
        }
        if !self.armed.load(Ordering::SeqCst) && !self.gone.load(Ordering::SeqCst) {
            self.ask(ARM);
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
