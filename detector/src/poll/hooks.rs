//! The tokio poll hooks: the per-poll path.
//!
//! Before a poll: a thread-local load, a compiler-only fence on x86, two relaxed stores and a
//! release store. After a poll: a release store, a compiler fence and a relaxed load; only when
//! the watchdog has flagged the poll as pinned does it read the clock. No allocation, no lock, no
//! system call, nothing that can panic — the `hot_path` tests prove it (a counting allocator
//! inside the hooks; the hooks run under strict seccomp).

use std::future::Future;
use std::panic::Location;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::runtime::TaskMeta;

use super::slot::{current_slot, Slot, SlotTable};

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
    table: Option<Arc<SlotTable>>,
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
        PollHooks { table }
    }

    /// Installs both poll hooks and the two park hooks on `builder`, replacing any poll and
    /// park hooks set on it before (`on_thread_park`/`on_thread_unpark`). Does nothing when
    /// pinwatch is off.
    pub fn install(&self, builder: &mut tokio::runtime::Builder) {
        let Some(table) = &self.table else { return };
        // The closures hold the table itself: no "is pinwatch on" test per poll.
        let (before, after) = (Arc::clone(table), Arc::clone(table));
        let (park, unpark) = (Arc::clone(table), Arc::clone(table));
        builder
            .on_before_task_poll(move |meta| {
                before_poll(&before, super::id_u64(&meta.id()), meta.spawned_at())
            })
            .on_after_task_poll(move |_| after_poll(&after))
            .on_thread_park(move || park.parking.park())
            .on_thread_unpark(move || unpark.parking.unpark());
        table.parking.hooked();
    }

    /// Call from `on_thread_park`, with [`after_unpark`](Self::after_unpark) from
    /// `on_thread_unpark`: they let the watchdog sleep while every worker is parked. Without
    /// them it looks at the workers every scan interval even when the service is idle.
    #[inline]
    pub fn before_park(&self) {
        if let Some(table) = &self.table {
            table.parking.park();
        }
    }

    /// Call from `on_thread_unpark` (see [`before_park`](Self::before_park)).
    #[inline]
    pub fn after_unpark(&self) {
        if let Some(table) = &self.table {
            table.parking.hooked();
            table.parking.unpark();
        }
    }

    /// Call from `on_before_task_poll`.
    #[inline]
    pub fn before_poll(&self, meta: &TaskMeta<'_>) {
        self.before_poll_raw(super::id_u64(&meta.id()), meta.spawned_at());
    }

    /// Call from `on_after_task_poll`.
    #[inline]
    pub fn after_poll(&self, _meta: &TaskMeta<'_>) {
        self.after_poll_raw();
    }

    /// [`before_poll`](Self::before_poll) with the task's id as a number. For tests that drive
    /// the hooks without tokio.
    #[doc(hidden)]
    #[inline(always)]
    pub fn before_poll_raw(&self, task_id: u64, spawned_at: &'static Location<'static>) {
        if let Some(table) = &self.table {
            before_poll(table, task_id, spawned_at);
        }
    }

    /// [`after_poll`](Self::after_poll) without tokio's `TaskMeta`. For tests.
    #[doc(hidden)]
    #[inline(always)]
    pub fn after_poll_raw(&self) {
        if let Some(table) = &self.table {
            after_poll(table);
        }
    }
}

/// A future whose polls are marked like a task's: for the `block_on` future (the body of
/// `main` or of a test), which tokio's task hooks never see. It is polled on one thread, the
/// one calling `block_on`, and is reported as task id [`super::BODY_TASK_ID`].
pub(crate) struct WatchBody<F> {
    table: Option<Arc<SlotTable>>,
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
            table,
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
        struct End<'a>(&'a Arc<SlotTable>);
        impl Drop for End<'_> {
            fn drop(&mut self) {
                after_poll(self.0);
            }
        }
        before_poll(table, super::BODY_TASK_ID, this.at);
        // A body on a multi-thread runtime polls outside the workers' park brackets.
        table.parking.poll_begins();
        let _end = End(table);
        this.fut.as_mut().poll(cx)
    }
}

#[inline(always)]
fn before_poll(table: &Arc<SlotTable>, task_id: u64, spawned_at: &'static Location<'static>) {
    if let Some(slot) = current_slot(table) {
        slot.poll
            .begin(task_id, spawned_at as *const Location<'static> as usize);
    }
}

#[inline(always)]
fn after_poll(table: &Arc<SlotTable>) {
    if let Some(slot) = current_slot(table) {
        if let Some(seq) = slot.poll.end() {
            pinned_poll_ended(table, slot, seq);
        }
    }
}

/// Rare path: the poll that just returned was flagged as pinned; record its exact end.
#[cold]
#[inline(never)]
fn pinned_poll_ended(table: &SlotTable, slot: &Slot, seq: u64) {
    slot.poll
        .record_end(seq, table.nanos_since_base(Instant::now()));
}
