//! Parking: lets the watchdog sleep while the runtime has nothing to run, and wakes it when a
//! worker unparks.
//!
//! tokio calls the park hooks around a worker's park (`on_thread_park` before, `on_thread_unpark`
//! after), and no task is polled between the two. Counting both tells how many of the runtime's
//! cores (its workers; the one core of a current-thread runtime) are out of that bracket — able
//! to poll: the core count plus the unparks minus the parks. The count follows cores, not
//! threads: a core handed to another thread by `block_in_place` keeps its place in it.
//!
//! The watchdog sleeps only when none is able to poll and no poll runs. Its handshake with the
//! hooks is a store-buffering pair: it says it sleeps, then reads the counts (both sequentially
//! consistent); an unpark counts, then reads whether it sleeps. So either the watchdog sees the
//! unpark and stays awake, or the unpark sees it asleep and wakes it. A `block_on` body on a
//! multi-thread runtime holds no core and is polled without park hooks: its polls wake the
//! watchdog the same way ([`Parking::poll_begins`]).
//!
//! Every per-unpark cost is one atomic add and one load; the wake (a futex system call) happens
//! only when the watchdog sleeps, once per idle period. Nothing here allocates, locks or panics.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;
use std::time::{Duration, Instant};

/// The park hooks' counts, and the watchdog's sleep.
pub(crate) struct Parking {
    /// Origin of `woken_at`.
    base: Instant,
    /// When the watchdog was last woken, in ns since `base`: read before any poll that the wake
    /// let run began, so it bounds their starts from below.
    woken_at: AtomicU64,
    parks: AtomicU64,
    unparks: AtomicU64,
    /// Whether the watchdog is asleep (or about to be) until something wakes it.
    sleeping: AtomicBool,
    /// The watchdog thread, once it runs.
    watchdog: OnceLock<Thread>,
    /// The park hooks are installed: without them the counts say nothing, and the watchdog
    /// never sleeps.
    hooked: AtomicBool,
    /// pinwatch installed the park hooks itself ([`installed`](Self::installed)).
    installed: AtomicBool,
    /// The detector is stopping: the watchdog must not sleep any more.
    stopping: AtomicBool,
    /// Something asked for a scan ([`nudge`](Self::nudge)) that the watchdog has not begun.
    nudged: AtomicBool,
}

impl Default for Parking {
    fn default() -> Parking {
        Parking {
            base: Instant::now(),
            woken_at: AtomicU64::new(0),
            parks: AtomicU64::new(0),
            unparks: AtomicU64::new(0),
            sleeping: AtomicBool::new(false),
            watchdog: OnceLock::new(),
            hooked: AtomicBool::new(false),
            installed: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            nudged: AtomicBool::new(false),
        }
    }
}

impl Parking {
    /// The park hooks were installed on the runtime.
    pub fn hooked(&self) {
        self.hooked.store(true, Ordering::Relaxed);
    }

    /// [`PollHooks::install`] installed the park hooks (before the runtime was built): unlike
    /// [`hooked`](Self::hooked), known from the runtime's start.
    ///
    /// [`PollHooks::install`]: crate::poll::PollHooks::install
    pub fn installed(&self) {
        self.installed.store(true, Ordering::Relaxed);
    }

    /// Whether [`installed`](Self::installed) was called.
    pub fn is_installed(&self) -> bool {
        self.installed.load(Ordering::Relaxed)
    }

    /// `on_thread_park`: a core parks.
    #[inline]
    pub fn park(&self) {
        self.parks.fetch_add(1, Ordering::SeqCst);
    }

    /// `on_thread_unpark`: a core unparks and may poll.
    #[inline]
    pub fn unpark(&self) {
        self.unparks.fetch_add(1, Ordering::SeqCst);
        self.wake_if_asleep();
    }

    /// A poll outside the park brackets (a `block_on` body's) began; its counter store is
    /// already made.
    #[inline]
    pub fn poll_begins(&self) {
        fence(Ordering::SeqCst);
        self.wake_if_asleep();
    }

    #[inline]
    fn wake_if_asleep(&self) {
        if self.sleeping.load(Ordering::SeqCst) {
            self.wake();
        }
    }

    /// The detector stops: wakes the watchdog — asleep, or waiting for its next scan
    /// ([`wait`](Self::wait)) — and keeps it from sleeping again.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.wake();
        if let Some(t) = self.watchdog.get() {
            t.unpark();
        }
    }

    /// Cuts the watchdog's wait for its next scan short (a setting changed: with start stamps
    /// it may be waiting up to the old threshold less an interval; a thread took a slot, whose
    /// first poll needs an earlier look); a watchdog asleep while the runtime idles sleeps on.
    /// An early scan is harmless: `park_timeout` may wake spuriously anyway. Said with a flag
    /// as well as the unpark: one that lands as a wait times out before the scan is due (the
    /// watchdog's waits are cut short, see `scan::run`) would be lost in its timeout.
    pub fn nudge(&self) {
        self.nudged.store(true, Ordering::SeqCst);
        if let Some(t) = self.watchdog.get() {
            t.unpark();
        }
    }

    /// Whether a scan was asked for since the last call ([`nudge`](Self::nudge)).
    pub fn take_nudge(&self) -> bool {
        self.nudged.swap(false, Ordering::SeqCst)
    }

    /// Whether the detector is stopping.
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Wakes the watchdog if it sleeps.
    #[cold]
    pub fn wake(&self) {
        if self.sleeping.load(Ordering::SeqCst) {
            // Before the swap: the watchdog reads it once it sees the wake. The earliest waker's
            // time bounds every poll let run, whoever woke it.
            let now = Instant::now()
                .saturating_duration_since(self.base)
                .as_nanos() as u64;
            self.woken_at.fetch_min(now, Ordering::Relaxed);
        }
        if self.sleeping.swap(false, Ordering::SeqCst) {
            if let Some(t) = self.watchdog.get() {
                t.unpark();
            }
        }
    }

    // ---- the watchdog's side ----

    /// Registers the calling thread as the watchdog.
    pub fn register_watchdog(&self) {
        let _ = self.watchdog.set(std::thread::current());
    }

    /// Unparks so far: a change between two looks means a core unparked in between.
    pub fn unparks(&self) -> u64 {
        self.unparks.load(Ordering::SeqCst)
    }

    /// Whether all `cores` are parked (as far as the hooks tell; `false` without them).
    pub fn all_parked(&self, cores: usize) -> bool {
        if !self.hooked.load(Ordering::Relaxed) {
            return false;
        }
        // Parks first: an unpark seen without its park would only make the count look busier.
        let parks = self.parks.load(Ordering::SeqCst);
        let unparks = self.unparks.load(Ordering::SeqCst);
        (cores as u64).wrapping_add(unparks).wrapping_sub(parks) == 0
    }

    /// Says the watchdog is about to sleep; `false` when the detector is stopping (then it must
    /// not). After `true` the caller checks that nothing can poll ([`all_parked`](Self::all_parked),
    /// the poll counters), and either calls [`sleep`](Self::sleep) or
    /// [`cancel_sleep`](Self::cancel_sleep).
    pub fn prepare_sleep(&self) -> bool {
        self.woken_at.store(u64::MAX, Ordering::Relaxed);
        self.sleeping.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.stopping() {
            self.cancel_sleep();
            return false;
        }
        true
    }

    /// Something can poll after all: stay awake.
    pub fn cancel_sleep(&self) {
        self.sleeping.store(false, Ordering::SeqCst);
    }

    /// Waits `timeout` for the next scan, or less: until the detector stops, or a spurious
    /// wake (a wake meant for an earlier sleep; the next scan then comes early, which is only a
    /// look more). Returns whether the detector is stopping. One futex wait: the channel this
    /// replaced registered and unregistered a waker around it, about 700 instructions a scan.
    pub fn wait(&self, timeout: Duration) -> bool {
        if !self.stopping() {
            std::thread::park_timeout(timeout);
        }
        self.stopping()
    }

    /// Sleeps until woken (an unpark, a body's poll, the stop). Returns a moment no poll let run
    /// by the wake began before: the waker's time, or the sleep's start if it never slept.
    pub fn sleep(&self, from: Instant) -> Instant {
        let mut slept = false;
        while self.sleeping.load(Ordering::SeqCst) && !self.stopping() {
            slept = true;
            std::thread::park();
        }
        // The stop does not go through the handshake: nothing polls after it that matters.
        if !slept || self.stopping() {
            return from;
        }
        match self.woken_at.load(Ordering::Relaxed) {
            u64::MAX => from,
            nanos => (self.base + Duration::from_nanos(nanos)).max(from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{mpsc, Arc};

    #[test]
    fn a_wait_for_the_next_scan_ends_at_the_stop() {
        let parking = Arc::new(Parking::default());
        let (ready, is_ready) = mpsc::channel();
        let watchdog = {
            let parking = Arc::clone(&parking);
            std::thread::spawn(move || {
                parking.register_watchdog();
                ready.send(()).unwrap();
                // Far longer than any test run: only the stop can end it.
                parking.wait(Duration::from_secs(3600))
            })
        };
        is_ready.recv().unwrap();
        // Before or after the watchdog parks: either way the wait ends, and says it stops.
        parking.stop();
        assert!(watchdog.join().unwrap(), "the wait says the detector stops");
        assert!(parking.stopping());
        // Once stopping, a wait returns at once.
        assert!(parking.wait(Duration::from_secs(3600)));
    }

    /// A nudge that lands as the watchdog's wait times out is not lost with the unpark's
    /// token: the flag still says a scan was asked for, once.
    #[test]
    fn a_nudge_is_told_once_however_the_wait_ended() {
        let parking = Parking::default();
        parking.register_watchdog();
        assert!(!parking.take_nudge());
        // The wait timed out first; the nudge came after it.
        assert!(!parking.wait(Duration::ZERO));
        parking.nudge();
        assert!(parking.take_nudge(), "the nudge is told");
        assert!(!parking.take_nudge(), "and only once");
    }

    #[test]
    fn a_stop_before_the_watchdog_runs_ends_its_first_wait() {
        let parking = Arc::new(Parking::default());
        // Nobody to unpark yet: only the flag tells.
        parking.stop();
        let watchdog = {
            let parking = Arc::clone(&parking);
            std::thread::spawn(move || {
                parking.register_watchdog();
                parking.wait(Duration::from_secs(3600))
            })
        };
        assert!(
            watchdog.join().unwrap(),
            "the first wait says the detector stops"
        );
    }

    #[test]
    fn a_stop_while_the_watchdog_is_about_to_sleep_ends_its_sleep() {
        let parking = Arc::new(Parking::default());
        let (prepared, is_prepared) = mpsc::channel();
        let watchdog = {
            let parking = Arc::clone(&parking);
            std::thread::spawn(move || {
                parking.register_watchdog();
                assert!(parking.prepare_sleep(), "not stopping yet");
                prepared.send(()).unwrap();
                // Before or after it parks: the stop ends the sleep, and the watchdog sees it.
                let from = Instant::now();
                assert_eq!(parking.sleep(from), from, "a stop's wake bounds nothing");
                parking.stopping()
            })
        };
        is_prepared.recv().unwrap();
        parking.stop();
        assert!(watchdog.join().unwrap(), "the sleep ends at the stop");
        // And it sleeps no more.
        assert!(!parking.prepare_sleep());
    }

    #[test]
    fn a_wait_that_times_out_says_the_detector_runs_on() {
        let parking = Parking::default();
        parking.register_watchdog();
        assert!(!parking.wait(Duration::from_millis(1)));
        assert!(!parking.stopping());
    }
}
