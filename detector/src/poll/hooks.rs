//! The tokio poll hooks: the per-poll path.
//!
//! Before a poll: a thread-local load compared with the table's key, then two relaxed stores (the
//! task), a relaxed load (whether the watchdog wants this thread's polls stamped: then the CPU's
//! time-stamp counter, `rdtsc`, is stored too — only on threads that poll rarely, see
//! `watch::stamps`) and a release store (the odd counter). After a poll: a thread-local load, a
//! release store (the even counter) and a relaxed load compared with it (the flag); only when
//! the watchdog has flagged the poll as pinned does it read the clock. The fences are
//! compiler-only on x86. No allocation, no lock, no system call, nothing that can panic — the
//! `hot_path` tests prove it (a counting allocator inside the hooks; the hooks run, stamping and
//! not, under a seccomp filter that kills any system call but read, write and exit).

use std::future::Future;
use std::panic::Location;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::runtime::TaskMeta;

use super::claim::{begin_poll, end_poll, mark_parked};
use super::slot::SlotTable;

/// pinwatch's two poll hooks and two park hooks, for a tokio runtime builder.
///
/// [`Builder::build`](crate::Builder::build) installs them for you. If you have poll or park
/// hooks of your own, install yours and call these from them (they are cheap to clone):
///
/// ```no_run
/// # fn main() -> Result<(), pinwatch::Error> {
/// let prepared = pinwatch::Builder::from_env()?.prepare()?;
/// let (before, after) = (prepared.hooks(), prepared.hooks());
/// let (park, unpark) = (prepared.hooks(), prepared.hooks());
/// let mut tokio = tokio::runtime::Builder::new_multi_thread();
/// tokio
///     .enable_all()
///     .on_before_task_poll(move |meta| {
///         before.before_poll(meta);
///         // your own hook
///     })
///     .on_after_task_poll(move |meta| {
///         // your own hook
///         after.after_poll(meta);
///     })
///     .on_thread_park(move || park.before_park())
///     .on_thread_unpark(move || unpark.after_unpark());
/// let rt = tokio.build().expect("tokio runtime");
/// let detector = prepared.start(rt.handle())?;
/// # drop(rt); drop(detector);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PollHooks {
    table: Option<Table>,
}

/// A slot table and its key ([`SlotTable::key`]), kept side by side so that the per-poll check
/// loads the key without computing it.
#[derive(Clone)]
struct Table {
    table: Arc<SlotTable>,
    key: usize,
}

impl Table {
    fn new(table: Arc<SlotTable>) -> Table {
        let key = SlotTable::key(&table);
        Table { table, key }
    }

    #[inline(always)]
    fn before(&self, task_id: u64, spawned_at: &'static Location<'static>) {
        begin_poll(&self.table, &self.key, task_id, spawned_at);
    }

    #[inline(always)]
    fn after(&self) {
        end_poll();
    }

    /// Whether tokio says the task of this poll waited at least the threshold to be polled
    /// (`schedule-latency`; both hooks get the same measure): a load and a compare.
    #[cfg(feature = "schedule-latency")]
    #[inline(always)]
    fn waited_long(&self, meta: &TaskMeta<'_>) -> Option<u64> {
        let wait = meta.schedule_latency()?;
        let ns = wait
            .as_secs()
            .wrapping_mul(1_000_000_000)
            .wrapping_add(u64::from(wait.subsec_nanos()));
        (ns >= self
            .table
            .wait_floor
            .0
            .load(std::sync::atomic::Ordering::Relaxed))
        .then_some(ns)
    }

    /// Before a poll, after [`before`](Self::before): a poll that waited long is recorded
    /// (begun: the time is the poll's start).
    #[cfg(feature = "schedule-latency")]
    #[inline(always)]
    fn before_waited(&self, meta: &TaskMeta<'_>) {
        if let Some(ns) = self.waited_long(meta) {
            super::claim::wait_begins(
                &self.table,
                super::id_u64(&meta.id()),
                meta.spawned_at(),
                ns,
            );
        }
    }

    /// After a poll, after [`after`](Self::after): the record of a poll that waited long is
    /// published, with the span the poll entered.
    #[cfg(feature = "schedule-latency")]
    #[inline(always)]
    fn after_waited(&self, meta: &TaskMeta<'_>) {
        if self.waited_long(meta).is_some() {
            super::claim::wait_ends(&self.table);
        }
    }

    /// `on_thread_park`: counted (the watchdog's sleep), and marked in the thread's slot (who
    /// drives the runtime's drivers while a pin runs).
    #[inline]
    fn park(&self) {
        mark_parked(&self.table, self.key, true);
        self.table.parking.park();
    }

    /// `on_thread_unpark`.
    #[inline]
    fn unpark(&self) {
        mark_parked(&self.table, self.key, false);
        self.table.parking.unpark();
    }
}

impl std::fmt::Debug for PollHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PollHooks")
            .field("enabled", &self.table.is_some())
            .finish()
    }
}

impl PollHooks {
    pub(crate) fn new(table: Option<Arc<SlotTable>>) -> PollHooks {
        PollHooks {
            table: table.map(Table::new),
        }
    }

    /// Installs both poll hooks and the two park hooks on `builder`, replacing any poll and
    /// park hooks set on it before (`on_thread_park`/`on_thread_unpark`). Does nothing when
    /// pinwatch is off.
    pub fn install(&self, builder: &mut tokio::runtime::Builder) {
        let Some(table) = &self.table else { return };
        // The closures hold the table itself: no "is pinwatch on" test per poll.
        let (before, after) = (table.clone(), table.clone());
        let (park, unpark) = (table.clone(), table.clone());
        #[cfg(feature = "schedule-latency")]
        builder.track_task_schedule_latency();
        builder
            .on_before_task_poll(move |meta| {
                before.before(super::id_u64(&meta.id()), meta.spawned_at());
                #[cfg(feature = "schedule-latency")]
                before.before_waited(meta);
            })
            .on_after_task_poll(move |meta| {
                after.after();
                #[cfg(feature = "schedule-latency")]
                after.after_waited(meta);
                #[cfg(not(feature = "schedule-latency"))]
                let _ = meta;
            })
            .on_thread_park(move || park.park())
            .on_thread_unpark(move || unpark.unpark());
        table.table.parking.hooked();
        table.table.parking.installed();
    }

    /// Call from `on_thread_park`, with [`after_unpark`](Self::after_unpark) from
    /// `on_thread_unpark`: they let the watchdog sleep while every worker is parked, and see
    /// which worker drives the runtime's timers and I/O. Without them it looks at the workers
    /// every scan interval even when the service is idle, and tells a stall of the whole
    /// runtime only from its heartbeat (docs/blast-radius.md).
    #[inline]
    pub fn before_park(&self) {
        if let Some(table) = &self.table {
            table.park();
        }
    }

    /// Call from `on_thread_unpark` (see [`before_park`](Self::before_park)).
    #[inline]
    pub fn after_unpark(&self) {
        if let Some(table) = &self.table {
            table.table.parking.hooked();
            table.unpark();
        }
    }

    /// Call from `on_before_task_poll`.
    #[inline]
    pub fn before_poll(&self, meta: &TaskMeta<'_>) {
        self.before_poll_raw(super::id_u64(&meta.id()), meta.spawned_at());
        #[cfg(feature = "schedule-latency")]
        if let Some(table) = &self.table {
            table.before_waited(meta);
        }
    }

    /// Call from `on_after_task_poll`. With the `schedule-latency` feature, also call
    /// `track_task_schedule_latency()` on your tokio builder ([`install`](Self::install) does).
    #[inline]
    pub fn after_poll(&self, meta: &TaskMeta<'_>) {
        self.after_poll_raw();
        #[cfg(feature = "schedule-latency")]
        if let Some(table) = &self.table {
            table.after_waited(meta);
        }
        #[cfg(not(feature = "schedule-latency"))]
        let _ = meta;
    }

    /// [`before_poll`](Self::before_poll) with the task's id as a number. For tests that drive
    /// the hooks without tokio.
    #[doc(hidden)]
    #[inline(always)]
    pub fn before_poll_raw(&self, task_id: u64, spawned_at: &'static Location<'static>) {
        if let Some(table) = &self.table {
            table.before(task_id, spawned_at);
        }
    }

    /// The rare paths of a poll whose task waited `wait_ns` to be polled
    /// (`schedule-latency`), without tokio's `TaskMeta`: the record begun after
    /// [`before_poll_raw`](Self::before_poll_raw), published before
    /// [`after_poll_raw`](Self::after_poll_raw) would. For tests.
    #[cfg(feature = "schedule-latency")]
    #[doc(hidden)]
    pub fn __waited_raw(
        &self,
        begins: bool,
        task_id: u64,
        spawned_at: &'static Location<'static>,
        wait_ns: u64,
    ) {
        if let Some(table) = &self.table {
            if begins {
                super::claim::wait_begins(&table.table, task_id, spawned_at, wait_ns);
            } else {
                super::claim::wait_ends(&table.table);
            }
        }
    }

    /// Marks the calling thread's running poll as the watchdog does when it finds it pinned,
    /// so that its end takes the rare path (and the polls after it are recorded). Not a hook;
    /// it makes a system call. For tests.
    #[doc(hidden)]
    pub fn __flag_running_poll(&self) -> bool {
        let slot = super::claim::current_slot_any();
        if slot.is_null() {
            return false;
        }
        // SAFETY: the calling thread's own slot, kept alive by its claim while it runs.
        let slot = unsafe { &*slot };
        slot.poll.flag(slot.poll.seq())
    }

    /// Turns start stamps on or off for every slot of the table, as the watchdog does by each
    /// thread's poll rate. For tests that drive the hooks down the stamping branch, and only
    /// where no watchdog runs (a `Prepared` whose runtime is never built): while one does, it
    /// is the one writer of a slot's stamping, and its generations are what make a stamp
    /// valid.
    #[doc(hidden)]
    pub fn __set_stamping(&self, on: bool) {
        if let Some(table) = &self.table {
            for slot in table.table.slots() {
                slot.poll.set_stamping(u64::from(on));
            }
        }
    }

    /// [`after_poll`](Self::after_poll) without tokio's `TaskMeta`. For tests.
    #[doc(hidden)]
    #[inline(always)]
    pub fn after_poll_raw(&self) {
        if let Some(table) = &self.table {
            table.after();
        }
    }
}

/// A future whose polls are marked like a task's: for the `block_on` future (the body of
/// `main` or of a test), which tokio's task hooks never see. It is polled on one thread, the
/// one calling `block_on`, and is reported as task id [`super::BODY_TASK_ID`].
pub(crate) struct WatchBody<F> {
    table: Option<Table>,
    at: &'static Location<'static>,
    fut: Pin<Box<F>>,
}

impl<F> WatchBody<F> {
    pub(crate) fn new(
        table: Option<Arc<SlotTable>>,
        at: &'static Location<'static>,
        fut: F,
    ) -> WatchBody<F> {
        WatchBody {
            table: table.map(Table::new),
            at,
            fut: Box::pin(fut),
        }
    }
}

impl<F: Future> Future for WatchBody<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // `WatchBody` is `Unpin`: the future it polls is boxed.
        let this = self.get_mut();
        let Some(table) = &this.table else {
            return this.fut.as_mut().poll(cx);
        };
        /// Ends the poll also when the body panics.
        struct End<'a>(&'a Table);
        impl Drop for End<'_> {
            fn drop(&mut self) {
                self.0.after();
            }
        }
        table.before(super::BODY_TASK_ID, this.at);
        // A body on a multi-thread runtime polls outside the workers' park brackets.
        table.table.parking.poll_begins();
        let _end = End(table);
        this.fut.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::panic::Location;
    use std::sync::{mpsc, Arc};

    use super::PollHooks;
    use crate::poll::current::NO_CELL;
    use crate::poll::slot::SlotTable;

    fn active(table: &SlotTable) -> usize {
        table.slots().iter().filter(|s| s.is_active()).count()
    }

    /// Runs `f` on a new thread (no claim yet) and waits for it.
    fn on_new_thread(f: impl FnOnce() + Send + 'static) {
        std::thread::spawn(f).join().unwrap();
    }

    #[test]
    fn an_after_poll_hook_alone_claims_no_slot() {
        let table = Arc::new(SlotTable::new(2));
        let hooks = PollHooks::new(Some(Arc::clone(&table)));
        let seen = Arc::clone(&table);
        on_new_thread(move || {
            hooks.after_poll_raw();
            hooks.after_poll_raw();
            // Still no slot: the end went to the cell of "no slot", which stays idle.
            assert_eq!(active(&seen), 0);
            assert_eq!(NO_CELL.seq(), 0);
            hooks.before_poll_raw(7, Location::caller());
            assert_eq!(active(&seen), 1);
            hooks.after_poll_raw();
        });
    }

    #[test]
    fn each_poll_moves_the_counter_odd_then_even() {
        let table = Arc::new(SlotTable::new(1));
        let hooks = PollHooks::new(Some(Arc::clone(&table)));
        let seen = Arc::clone(&table);
        on_new_thread(move || {
            let cell = &seen.slots()[0].poll;
            let at = Location::caller();
            for k in 0..3u64 {
                hooks.before_poll_raw(100 + k, at);
                assert_eq!(cell.seq(), 2 * k + 1);
                let snap = cell.read().unwrap();
                assert_eq!(snap.task_id, 100 + k);
                assert_eq!(snap.spawned_at, at as *const _ as usize);
                hooks.after_poll_raw();
                assert_eq!(cell.seq(), 2 * k + 2);
            }
            // A poll inside a poll (same hooks): the counter moves on, and is even once both
            // have ended.
            hooks.before_poll_raw(1, Location::caller());
            hooks.before_poll_raw(2, Location::caller());
            assert_eq!(cell.seq(), 9);
            assert_eq!(cell.read().unwrap().task_id, 2);
            hooks.after_poll_raw();
            hooks.after_poll_raw();
            assert_eq!(cell.seq(), 10);
        });
    }

    #[test]
    fn the_hooks_of_a_full_table_never_leave_another_tables_slot_running() {
        // Table `a` has one slot, held by a thread that stays alive until the end.
        let a = Arc::new(SlotTable::new(1));
        let b = Arc::new(SlotTable::new(1));
        let (hooks_a, hooks_b) = (
            PollHooks::new(Some(Arc::clone(&a))),
            PollHooks::new(Some(Arc::clone(&b))),
        );
        let (held_tx, held_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let holder = {
            let hooks_a = hooks_a.clone();
            std::thread::spawn(move || {
                hooks_a.before_poll_raw(1, Location::caller());
                hooks_a.after_poll_raw();
                held_tx.send(()).unwrap();
                let _ = done_rx.recv();
            })
        };
        held_rx.recv().unwrap();
        let (a2, b2) = (Arc::clone(&a), Arc::clone(&b));
        on_new_thread(move || {
            let cell = &b2.slots()[0].poll;
            hooks_b.before_poll_raw(2, Location::caller());
            hooks_b.after_poll_raw();
            assert_eq!(cell.seq(), 2);
            // `a` is full: its hooks watch nothing on this thread, and its after-poll hook ends
            // no poll of `b`'s slot that is not running.
            for _ in 0..3 {
                hooks_a.before_poll_raw(3, Location::caller());
                hooks_a.after_poll_raw();
            }
            assert_eq!(cell.seq(), 2, "b's slot must not show a poll running");
            assert_eq!(
                a2.unwatched_threads
                    .load(std::sync::atomic::Ordering::Relaxed),
                1
            );
            // `b` is still this thread's.
            hooks_b.before_poll_raw(4, Location::caller());
            assert_eq!(cell.seq(), 3);
            hooks_b.after_poll_raw();
            assert_eq!(cell.seq(), 4);
        });
        done_tx.send(()).unwrap();
        holder.join().unwrap();
        assert_eq!(active(&a), 0);
        assert_eq!(active(&b), 0);
    }

    /// A thread leaves its accounting in its slot as it exits, and not when it moves to
    /// another table's slot (it goes on: three system calls a switch, helper-109); the record
    /// stays when another thread claims the slot (helper-110), for the exited thread's polls
    /// only.
    #[test]
    fn a_thread_records_its_accounting_as_it_exits_only() {
        let a = Arc::new(SlotTable::new(1));
        let b = Arc::new(SlotTable::new(1));
        let (hooks_a, hooks_b) = (
            PollHooks::new(Some(Arc::clone(&a))),
            PollHooks::new(Some(Arc::clone(&b))),
        );
        let (a2, b2) = (Arc::clone(&a), Arc::clone(&b));
        let tid = std::thread::spawn(move || {
            let tid = super::super::slot::current_tid();
            hooks_a.before_poll_raw(1, Location::caller());
            hooks_a.after_poll_raw();
            hooks_b.before_poll_raw(2, Location::caller());
            hooks_b.after_poll_raw();
            // Moved to `b`: `a`'s slot is free, and holds no record.
            assert_eq!(active(&a2), 0);
            assert_eq!(a2.slots()[0].exited.of(tid, 0), None);
            assert_eq!(b2.slots()[0].exited.of(tid, 0), None);
            tid
        })
        .join()
        .unwrap();
        // Exited from `b`'s slot after its poll (counter 1): recorded there.
        let slot = &b.slots()[0];
        assert!(slot.exited.of(tid, 1).is_some());
        assert_eq!(a.slots()[0].exited.of(tid, 1), None);
        // Claimed again: the record stays, for the polls begun before it only.
        assert!(b.claim().is_some());
        assert!(slot.exited.of(tid, 1).is_some());
        assert_eq!(slot.exited.of(tid, slot.poll.seq()), None);
    }

    /// A thread that a full table refused is watched in the next table, even one the allocator
    /// would put where the refused one was (a detector started again): what the thread
    /// remembers of the refusal keeps the refused table's memory (a weak reference), so that no
    /// other table can be there while it does. The weak count is what tells a regression: a new
    /// table here (128-byte aligned) does not land at a freed one's address at once, as it did
    /// in a restarted detector (11 of 30 rounds), so the rest checks only that it is watched.
    #[test]
    fn a_thread_refused_by_a_table_that_is_gone_is_watched_in_the_next() {
        let a = Arc::new(SlotTable::new(1));
        assert!(a.claim().is_some(), "the table's one slot, taken");
        let hooks_a = PollHooks::new(Some(Arc::clone(&a)));
        on_new_thread(move || {
            hooks_a.before_poll_raw(1, Location::caller());
            hooks_a.after_poll_raw();
            assert_eq!(
                a.unwatched_threads
                    .load(std::sync::atomic::Ordering::Relaxed),
                1
            );
            assert_eq!(
                Arc::weak_count(&a),
                1,
                "the refusal keeps the refused table's memory"
            );
            let was = Arc::as_ptr(&a) as usize;
            drop(hooks_a);
            drop(a);
            // Wherever the allocator puts a new table, never there.
            let b = Arc::new(SlotTable::new(1));
            assert_ne!(
                Arc::as_ptr(&b) as usize,
                was,
                "a table where the refused one was"
            );
            let hooks_b = PollHooks::new(Some(Arc::clone(&b)));
            hooks_b.before_poll_raw(2, Location::caller());
            assert_eq!(b.slots()[0].poll.seq(), 1, "the thread is watched in it");
            hooks_b.after_poll_raw();
            assert_eq!(
                b.unwatched_threads
                    .load(std::sync::atomic::Ordering::Relaxed),
                0
            );
        });
    }

    /// After a flagged poll, the thread's next polls are recorded on the cold path, in its own
    /// slot (never a second claim), until its record is full or it parks; then the per-poll
    /// path takes over again.
    #[test]
    fn the_polls_after_a_flagged_one_are_recorded_until_the_thread_parks() {
        use crate::poll::waits::{Polled, AFTER_PIN_MAX};
        let table = Arc::new(SlotTable::new(2));
        let hooks = PollHooks::new(Some(Arc::clone(&table)));
        let (begun_tx, begun_rx) = mpsc::channel();
        let (flagged_tx, flagged_rx) = mpsc::channel::<()>();
        let (more_tx, more_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel();
        let at = Location::caller();
        let worker = std::thread::spawn(move || {
            hooks.before_poll_raw(5, at);
            begun_tx.send(()).unwrap();
            flagged_rx.recv().unwrap();
            hooks.after_poll_raw();
            for task in [6, 5, 7] {
                hooks.before_poll_raw(task, at);
                hooks.after_poll_raw();
            }
            hooks.before_park();
            hooks.after_unpark();
            // Recording ended at the park: this one is not recorded.
            hooks.before_poll_raw(8, at);
            hooks.after_poll_raw();
            done_tx.send(()).unwrap();
            more_rx.recv().unwrap();
        });
        begun_rx.recv().unwrap();
        let slot = &table.slots()[0];
        let seq = slot.poll.seq();
        assert!(slot.poll.flag(seq));
        flagged_tx.send(()).unwrap();
        done_rx.recv().unwrap();
        let mut out = [Polled {
            task_id: 0,
            spawned_at: 0,
        }; AFTER_PIN_MAX];
        let n = slot.after_pin.read(seq, &mut out);
        let at = at as *const Location<'static> as usize;
        assert_eq!(
            out[..n],
            [
                Polled {
                    task_id: 6,
                    spawned_at: at
                },
                Polled {
                    task_id: 7,
                    spawned_at: at
                }
            ],
            "the tasks run after the pin, not the pinned task itself"
        );
        assert_eq!(active(&table), 1, "one slot, never a second claim");
        assert_eq!(slot.poll.seq(), seq + 9, "every poll was marked");
        more_tx.send(()).unwrap();
        worker.join().unwrap();
    }

    #[test]
    fn a_flagged_poll_records_its_end_on_its_tables_clock() {
        let table = Arc::new(SlotTable::new(1));
        let hooks = PollHooks::new(Some(Arc::clone(&table)));
        let (begun_tx, begun_rx) = mpsc::channel();
        let (flagged_tx, flagged_rx) = mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            hooks.before_poll_raw(5, Location::caller());
            begun_tx.send(()).unwrap();
            flagged_rx.recv().unwrap();
            hooks.after_poll_raw();
        });
        begun_rx.recv().unwrap();
        let cell = &table.slots()[0].poll;
        let seq = cell.seq();
        assert_eq!(seq, 1);
        let before = table.nanos_since_base(std::time::Instant::now());
        assert!(cell.flag(seq), "the poll is still running");
        flagged_tx.send(()).unwrap();
        worker.join().unwrap();
        let after = table.nanos_since_base(std::time::Instant::now());
        let end = cell
            .ended(seq)
            .expect("the end of a flagged poll is recorded");
        assert!(
            before <= end && end <= after,
            "{before} <= {end} <= {after}"
        );
    }
}
