//! What the watchdog shares with the hooks' slot table, the exporters, the control socket and
//! the detector handle: the settings, the counters, and the pins running now.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::heartbeat::Heartbeat;
use super::settings::Tunables;
use super::stats::StatsCounters;
use crate::config::Config;
use crate::poll::slot::SlotTable;

/// One detector's watched state.
pub(crate) struct Shared {
    pub table: Arc<SlotTable>,
    /// The settings at start; those that change at run time are in `tunables`.
    pub config: Config,
    /// The settings in force now.
    pub tunables: Tunables,
    pub stats: StatsCounters,
    /// Why no stack can be sampled here whatever the settings (`unwinder_not_signal_safe`).
    pub stacks_blocked: Option<&'static str>,
    /// Names this detector's events (see [`PinnedEvent::run_id`](crate::PinnedEvent::run_id)).
    pub run_id: String,
    /// The next event id.
    pub(super) next_id: AtomicU64,
    /// Per slot, the pin running there now: for live views (metrics, status) that must not
    /// wait for the export thread.
    live: Box<[LivePin]>,
    pub(super) heartbeat: Arc<Heartbeat>,
    /// Whether the runtime is stalled now: a pin runs and the heartbeat is late.
    pub(super) stalled_now: AtomicBool,
}

/// The pin a slot runs now, as the watchdog last saw it.
struct LivePin {
    /// Its event id; 0 when the slot is not pinned.
    id: AtomicU64,
    /// When it started, in ns since the slot table's base.
    start: AtomicU64,
    /// Whether it holds one of the runtime's workers: not so for a `block_on` body on a
    /// multi-thread runtime, whose thread is not a worker.
    holds_worker: AtomicBool,
}

/// The pins running now, as live views count them.
#[derive(Clone, Debug, Default)]
pub(crate) struct PinnedNow {
    /// Every pin running now (workers' and `block_on` bodies'): event id and age.
    pub all: Vec<(u64, Duration)>,
    /// How many of them hold a worker.
    pub workers: usize,
    /// The age of the oldest of those that hold a worker.
    pub oldest_worker_pin: Duration,
    /// `block_on` bodies of a multi-thread runtime blocked now (they hold no worker).
    pub bodies: usize,
}

impl Shared {
    pub(crate) fn new(
        table: Arc<SlotTable>,
        config: Config,
        stacks_blocked: Option<&'static str>,
        run_id: String,
    ) -> Shared {
        let live = (0..table.slots().len())
            .map(|_| LivePin {
                id: AtomicU64::new(0),
                start: AtomicU64::new(0),
                holds_worker: AtomicBool::new(false),
            })
            .collect();
        let heartbeat = Arc::new(Heartbeat::new(config.heartbeat, table.base));
        Shared {
            table,
            tunables: Tunables::new(config.settings()),
            config,
            stats: StatsCounters::default(),
            stacks_blocked,
            run_id,
            next_id: AtomicU64::new(1),
            live,
            heartbeat,
            stalled_now: AtomicBool::new(false),
        }
    }

    /// Each pin running now: its event id and how long it has run.
    pub(crate) fn pinned_now(&self) -> Vec<(u64, Duration)> {
        self.pinned_now_counted().all
    }

    /// The pins running now, with which of them hold a worker.
    pub(crate) fn pinned_now_counted(&self) -> PinnedNow {
        let now = self.table.nanos_since_base(Instant::now());
        let mut out = PinnedNow::default();
        for p in self.live.iter() {
            let id = p.id.load(Ordering::Acquire);
            if id == 0 {
                continue;
            }
            let age = Duration::from_nanos(now.saturating_sub(p.start.load(Ordering::Relaxed)));
            if p.holds_worker.load(Ordering::Relaxed) {
                out.workers += 1;
                out.oldest_worker_pin = out.oldest_worker_pin.max(age);
            } else {
                out.bodies += 1;
            }
            out.all.push((id, age));
        }
        out
    }

    /// Slot `i` runs pin `id` (0: none), which started at `start` and holds a worker or not.
    pub(super) fn set_live(&self, i: usize, id: u64, start: Instant, holds_worker: bool) {
        let p = &self.live[i];
        if p.id.load(Ordering::Relaxed) == id {
            return;
        }
        if id != 0 {
            p.start
                .store(self.table.nanos_since_base(start), Ordering::Relaxed);
            p.holds_worker.store(holds_worker, Ordering::Relaxed);
        }
        p.id.store(id, Ordering::Release);
    }

    /// Whether the runtime is stalled now, and for how long it has been stalled in all.
    pub(crate) fn stall(&self) -> (bool, Duration) {
        (
            self.stalled_now.load(Ordering::Relaxed),
            Duration::from_nanos(self.stats.stalled_ns.load(Ordering::Relaxed)),
        )
    }

    /// The instant of `nanos` on the slot table's clock.
    pub(super) fn at(&self, nanos: u64) -> Instant {
        self.table.base + Duration::from_nanos(nanos)
    }
}
