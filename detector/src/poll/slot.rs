//! Per-thread slots: what a worker publishes about its current poll, and what the watchdog reads.
//!
//! Each thread that polls tasks claims one slot from a table preallocated when the detector is
//! built, the first time it polls (a compare-and-swap over the table; `claim` holds the
//! per-thread side). Afterwards the per-poll path only touches its own slot's [`PollCell`]: a
//! few stores, no clock read. Nothing in this file allocates or locks; the claim (once per
//! thread) reads the thread's name and id.

use std::sync::atomic::{fence, AtomicBool, AtomicI32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::locks::LockTable;
use super::park::Parking;
use super::protocol::{PollCell, NOT_FLAGGED};
use super::sample::SampleArea;
use super::span_stack::SpanStack;
use super::waits::AfterPins;
#[cfg(feature = "schedule-latency")]
use super::waits::WaitRing;

const FREE: u8 = 0;
const CLAIMING: u8 = 1;
const ACTIVE: u8 = 2;

/// Bytes of a thread's name kept. A longer name keeps its start and its end around
/// [`ELLIPSIS`] (a test's thread is named for its whole path, and the test's own name is at the
/// end).
pub(crate) const NAME_MAX: usize = 128;

/// What stands for the middle of a name longer than [`NAME_MAX`].
const ELLIPSIS: &str = "…";

/// One thread's slot. Aligned to 128 bytes so that two workers' slots never share a cache line
/// (or an adjacent-line prefetch pair): unpadded slots measured 2× slower here. `repr(C)` with
/// the poll cell first, so that what a poll touches (the cell's first 32 bytes) is in the
/// slot's first cache line, whatever else the slot holds.
#[repr(C, align(128))]
pub(crate) struct Slot {
    /// The poll protocol: written by the owner on every poll.
    pub poll: PollCell,
    /// FREE, CLAIMING or ACTIVE.
    state: AtomicU8,
    /// The owner is in tokio's park (between the park and unpark hooks): asleep on the driver
    /// or on its condvar, or about to be. Written by the owner only.
    pub parked: AtomicBool,
    /// While the owner is in tokio's park, the time-stamp counter when it entered; 0 while it
    /// is not. Written by the owner only ([`mark_parked`](super::claim::mark_parked)).
    pub park_since: AtomicU64,
    /// The time-stamp counter's ticks the owner has spent in tokio's park, summed over its
    /// parks that have ended (the watchdog leaves them out of what a stamped poll did before it
    /// began). Written by the owner only.
    pub parked_ticks: AtomicU64,
    /// Linux thread id of the owner.
    pub tid: AtomicI32,
    /// The owner's `std::thread::ThreadId` as a number ([`super::id_u64`]), 0 if unknown.
    pub thread: AtomicU64,
    name_len: AtomicUsize,
    name: [AtomicU8; NAME_MAX],
    /// Instrumented locks the owner holds ([`crate::sync`]).
    pub locks: LockTable,
    /// Where the signal handler leaves a stack sample ([`crate::signal`]).
    pub sample: SampleArea,
    /// The `tracing` spans the owner has entered ([`crate::spans`]).
    pub spans: SpanStack,
    /// The running poll is unwinding from a panic, since when
    /// ([`poll_panics`](crate::poll::claim::poll_panics)).
    pub unwinding: Unwinding,
    /// The first tasks polled after a flagged poll ([`super::waits`]).
    pub after_pin: AfterPins,
    /// The last owners' scheduler accounting as they exited.
    pub exited: Exited,
    /// Tasks polled here after waiting past the threshold ([`super::waits`]).
    #[cfg(feature = "schedule-latency")]
    pub waits: WaitRing,
}

/// The scheduler accounting (`schedstat`: ns on a CPU, ns waiting for one) of a slot's last
/// owners, each read as the thread exited, with its thread id and the slot's poll counter
/// when it claimed the slot and when it left it: its `/proc` files go with it, and a poll the
/// watchdog finds ended after that is judged by this (a runtime dropped right after its last
/// poll; a preempted poll would otherwise be pinned by its wall time alone). The last
/// [`EXITS_KEPT`]: threads that come and go through the slot before the watchdog looks again
/// do not overwrite the one it needs (helper-110, helper-111), and the counters tell apart
/// owners with the same thread id. Written by each exiting owner in turn; read by the watchdog.
pub(crate) struct Exited {
    /// Records written so far; the next goes at this index, modulo [`EXITS_KEPT`].
    written: AtomicUsize,
    records: [ExitRecord; EXITS_KEPT],
}

/// How many owners' exits a slot keeps.
pub(crate) const EXITS_KEPT: usize = 4;

/// A seqlock's version, for fields one writer at a time changes and others read whole or not at
/// all: even at rest, odd while written.
struct SeqLock {
    version: AtomicU64,
}

impl SeqLock {
    const fn new() -> SeqLock {
        SeqLock {
            version: AtomicU64::new(0),
        }
    }

    /// Makes the stores `write` does (relaxed) as one change: a reader sees all or none of them.
    /// One writer at a time.
    fn write(&self, write: impl FnOnce()) {
        let v = self.version.load(Ordering::Relaxed);
        self.version.store(v.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        write();
        self.version.store(v.wrapping_add(2), Ordering::Release);
    }

    /// What `read` loads (relaxed), if no write overlapped it.
    fn read<T>(&self, read: impl FnOnce() -> T) -> Option<T> {
        let v = self.version.load(Ordering::Acquire);
        if v & 1 == 1 {
            return None;
        }
        let read = read();
        fence(Ordering::Acquire);
        (self.version.load(Ordering::Relaxed) == v).then_some(read)
    }
}

/// One owner's exit, read whole or not at all.
struct ExitRecord {
    lock: SeqLock,
    tid: AtomicI32,
    claimed: AtomicU64,
    left: AtomicU64,
    on_cpu: AtomicU64,
    waiting: AtomicU64,
}

impl ExitRecord {
    const fn new() -> ExitRecord {
        ExitRecord {
            lock: SeqLock::new(),
            tid: AtomicI32::new(0),
            claimed: AtomicU64::new(0),
            left: AtomicU64::new(0),
            on_cpu: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
        }
    }

    fn write(&self, tid: i32, claimed: u64, left: u64, on_cpu: u64, waiting: u64) {
        self.lock.write(|| {
            self.tid.store(tid, Ordering::Relaxed);
            self.claimed.store(claimed, Ordering::Relaxed);
            self.left.store(left, Ordering::Relaxed);
            self.on_cpu.store(on_cpu, Ordering::Relaxed);
            self.waiting.store(waiting, Ordering::Relaxed);
        });
    }

    /// `(tid, claimed, left, on_cpu, waiting)`, read whole (before the first record: thread 0,
    /// which nobody asks for); `None` while being written.
    fn read(&self) -> Option<(i32, u64, u64, u64, u64)> {
        self.lock.read(|| {
            (
                self.tid.load(Ordering::Relaxed),
                self.claimed.load(Ordering::Relaxed),
                self.left.load(Ordering::Relaxed),
                self.on_cpu.load(Ordering::Relaxed),
                self.waiting.load(Ordering::Relaxed),
            )
        })
    }
}

impl Exited {
    const fn new() -> Exited {
        Exited {
            written: AtomicUsize::new(0),
            records: [const { ExitRecord::new() }; EXITS_KEPT],
        }
    }

    /// The calling thread, `tid`, which claimed the slot with its poll counter at `claimed`,
    /// exits with it at `left`: records its accounting ([`own_schedstat`]: an open, one read
    /// and a close, once a thread). Nothing when it cannot be read.
    pub fn record_own(&self, tid: i32, claimed: u64, left: u64) {
        if let Some((on_cpu, waiting)) = own_schedstat() {
            self.record(tid, claimed, left, on_cpu, waiting);
        }
    }

    /// Thread `tid` exits, having claimed the slot with its poll counter at `claimed` and
    /// leaving it at `left` (a poll still open counts as closed: the counter `close` leaves),
    /// having spent `on_cpu` and `waiting` (ns). One writer at a time: a slot's owners exit
    /// one after another.
    pub fn record(&self, tid: i32, claimed: u64, left: u64, on_cpu: u64, waiting: u64) {
        let i = self.written.load(Ordering::Relaxed);
        let left = left + (left & 1);
        self.records[i % EXITS_KEPT].write(tid, claimed, left, on_cpu, waiting);
        self.written.store(i.wrapping_add(1), Ordering::Relaxed);
    }

    /// Thread `tid`'s accounting as it exited from this slot, if poll `seq` was one of its:
    /// begun after it claimed the slot and before it left. None for another thread, nor for
    /// another owner with the same id, nor while a record is being written.
    pub fn of(&self, tid: i32, seq: u64) -> Option<(u64, u64)> {
        if tid == 0 {
            return None;
        }
        self.records.iter().find_map(|r| {
            let (t, claimed, left, on_cpu, waiting) = r.read()?;
            (t == tid && claimed <= seq && seq < left).then_some((on_cpu, waiting))
        })
    }
}

/// Room for a `schedstat` file: three decimal numbers of at most 20 digits each, and their
/// separators.
pub(crate) const SCHEDSTAT_BYTES: usize = 80;

/// The calling thread's accounting, from `/proc/thread-self/schedstat`: ns on a CPU, ns waiting
/// for one ([`files::read_small`]: no allocation, no lock). The time on a CPU is as of the
/// kernel's last update of it, at most a scheduler tick old, as another thread's read of it is.
///
/// [`files::read_small`]: crate::files::read_small
pub(crate) fn own_schedstat() -> Option<(u64, u64)> {
    let mut buf = [0u8; SCHEDSTAT_BYTES];
    let text = crate::files::read_small("/proc/thread-self/schedstat", &mut buf)?;
    parse_schedstat(std::str::from_utf8(text).ok()?)
}

/// A `schedstat` file's first two numbers: ns on a CPU, ns waiting for one.
pub(crate) fn parse_schedstat(s: &str) -> Option<(u64, u64)> {
    let mut f = s.split_whitespace();
    Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
}

/// Which poll of a slot panicked, when, and when the panic hook returned: the watchdog counts
/// none of the time between (the panic hook's message and backtrace), which is the panic
/// machinery's, not the code under test's — neither its wall time nor the thread's time on a
/// CPU or waiting for one then, which the hook reads from the kernel's accounting as it begins
/// and as it returns. A panic caught inside the poll (`catch_unwind`) lets the poll go on: the
/// watchdog times what it does after the hook returned afresh. A poll the watchdog judges by
/// its end (flagged or armed) keeps its mark past the next polls' panics: its end copies it
/// ([`ended`](Self::ended)), as it records the end. With one mark, a next poll that panicked
/// before the watchdog saw the end overwrote it (helper-112: a 50 ms poll with a 200 ms hook
/// was then a 250 ms pin, 12 times in 12); with the last two, a third did (helper-113).
/// Written by the owner, from the panic hook only; read by the watchdog, as a seqlock.
pub(crate) struct Unwinding {
    /// `now` and `ended`, read whole or not at all.
    lock: SeqLock,
    /// The last poll that panicked.
    now: Mark,
    /// The last flagged or armed poll that had panicked, as it ended.
    ended: Mark,
    /// The thread's accounting as the running hook began, `NOT_FLAGGED` if unread: the owner's
    /// own, read back as the hook returns (outside the seqlock; no reader needs it).
    began_on_cpu: AtomicU64,
    began_waiting: AtomicU64,
}

/// One poll's panics ([`Panicked`]), in atomics.
struct Mark {
    /// The poll counter (odd) of the poll that panicked, or `NOT_FLAGGED`.
    seq: AtomicU64,
    /// When it last panicked, in ns since the table's base.
    nanos: AtomicU64,
    /// When that panic hook returned, in ns since the table's base; `NOT_FLAGGED` while it
    /// runs.
    resumed: AtomicU64,
    /// What the poll's panic hooks took, all of them, the running one left out ([`HookTime`]):
    /// a poll that catches one panic after another has each hook left out.
    hooks_nanos: AtomicU64,
    hooks_on_cpu: AtomicU64,
    hooks_waiting: AtomicU64,
}

impl Mark {
    const fn new() -> Mark {
        Mark {
            seq: AtomicU64::new(NOT_FLAGGED),
            nanos: AtomicU64::new(0),
            resumed: AtomicU64::new(NOT_FLAGGED),
            hooks_nanos: AtomicU64::new(0),
            hooks_on_cpu: AtomicU64::new(0),
            hooks_waiting: AtomicU64::new(0),
        }
    }

    /// Its poll counter and what it says of that poll. Inside the seqlock's `read`.
    fn load(&self) -> (u64, Panicked) {
        let at = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let panicked = Panicked {
            at: at(&self.nanos),
            resumed: Some(at(&self.resumed)).filter(|&r| r != NOT_FLAGGED),
            hooks: HookTime {
                nanos: at(&self.hooks_nanos),
                on_cpu: at(&self.hooks_on_cpu),
                waiting: at(&self.hooks_waiting),
            },
        };
        (at(&self.seq), panicked)
    }

    /// Poll `seq`'s panics as `p` says. Inside the seqlock's `write`.
    fn store(&self, seq: u64, p: Panicked) {
        let put = |a: &AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        put(&self.seq, seq);
        put(&self.nanos, p.at);
        put(&self.resumed, p.resumed.unwrap_or(NOT_FLAGGED));
        put(&self.hooks_nanos, p.hooks.nanos);
        put(&self.hooks_on_cpu, p.hooks.on_cpu);
        put(&self.hooks_waiting, p.hooks.waiting);
    }
}

/// What a poll's returned panic hooks took, all of them (ns): their wall time, and the thread's
/// time on a CPU and waiting for one meanwhile. Both are 0 for a hook whose thread's accounting
/// could not be read (no file descriptor left, no `/proc`): its work then counts as the poll's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HookTime {
    pub nanos: u64,
    pub on_cpu: u64,
    pub waiting: u64,
}

impl HookTime {
    /// What of this running total of a poll's hooks is new since `then`, an earlier one.
    pub fn since(self, then: HookTime) -> HookTime {
        HookTime {
            nanos: self.nanos.saturating_sub(then.nanos),
            on_cpu: self.on_cpu.saturating_sub(then.on_cpu),
            waiting: self.waiting.saturating_sub(then.waiting),
        }
    }

    /// Takes `now`, a later reading of this running total of a poll's hooks: what of it is new
    /// since this one, which then keeps the later of the two, each part on its own.
    pub fn take_new(&mut self, now: HookTime) -> HookTime {
        let new = now.since(*self);
        *self = HookTime {
            nanos: self.nanos.max(now.nanos),
            on_cpu: self.on_cpu.max(now.on_cpu),
            waiting: self.waiting.max(now.waiting),
        };
        new
    }
}

/// A poll's panic, as the watchdog reads it ([`Unwinding::since`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Panicked {
    /// When it panicked, in ns since the table's base.
    pub at: u64,
    /// When the panic hook returned (the unwinding began), in ns since the table's base; `None`
    /// while the hook runs.
    pub resumed: Option<u64>,
    /// What the poll's returned panic hooks took in all: every panic it caught before this one
    /// and, once returned, this one.
    pub hooks: HookTime,
}

impl Unwinding {
    const fn new() -> Unwinding {
        Unwinding {
            lock: SeqLock::new(),
            now: Mark::new(),
            ended: Mark::new(),
            began_on_cpu: AtomicU64::new(NOT_FLAGGED),
            began_waiting: AtomicU64::new(NOT_FLAGGED),
        }
    }

    /// Poll `seq` panics at `nanos`, its thread's accounting `stat` then (`None`: unread); its
    /// hook runs. Owner only.
    pub(super) fn mark(&self, seq: u64, nanos: u64, stat: Option<(u64, u64)>) {
        let (on_cpu, waiting) = stat.unwrap_or((NOT_FLAGGED, NOT_FLAGGED));
        self.began_on_cpu.store(on_cpu, Ordering::Relaxed);
        self.began_waiting.store(waiting, Ordering::Relaxed);
        let (marked, last) = self.now.load();
        let hooks = if marked == seq {
            last.hooks
        } else {
            HookTime::default()
        };
        self.lock.write(|| {
            let p = Panicked {
                at: nanos,
                resumed: None,
                hooks,
            };
            self.now.store(seq, p);
        });
    }

    /// The panic hook of poll `seq` returned at `nanos`, its thread's accounting `stat` then
    /// (`None`: unread). Owner only.
    pub(super) fn resume(&self, seq: u64, nanos: u64, stat: Option<(u64, u64)>) {
        let (marked, p) = self.now.load();
        if marked != seq || p.resumed.is_some() {
            return;
        }
        let began = (
            self.began_on_cpu.load(Ordering::Relaxed),
            self.began_waiting.load(Ordering::Relaxed),
        );
        // Unread at either end: none of the hook's accounting is known.
        let (on_cpu, waiting) = match stat {
            Some(now) if began.0 != NOT_FLAGGED => {
                (now.0.saturating_sub(began.0), now.1.saturating_sub(began.1))
            }
            _ => (0, 0),
        };
        let hooks = HookTime {
            nanos: p.hooks.nanos.saturating_add(nanos.saturating_sub(p.at)),
            on_cpu: p.hooks.on_cpu.saturating_add(on_cpu),
            waiting: p.hooks.waiting.saturating_add(waiting),
        };
        let resumed = Panicked {
            resumed: Some(nanos),
            hooks,
            ..p
        };
        self.lock.write(|| self.now.store(seq, resumed));
    }

    /// Flagged or armed poll `seq` ends (before its end is recorded, which the watchdog reads
    /// first): its mark, if it panicked, is kept for the watchdog whatever panics next. Owner
    /// only; the rare path of a poll's end.
    pub(super) fn ended(&self, seq: u64) {
        let (marked, p) = self.now.load();
        if marked == seq {
            self.lock.write(|| self.ended.store(seq, p));
        }
    }

    /// Whether poll `seq` panicked, when, and when its hook returned: the last poll that
    /// panicked, or the last flagged or armed one that ended. Counters never repeat, so a mark
    /// left by an earlier poll or owner never matches. A read that overlaps the owner's write
    /// is retried a few times; then there is no answer (for a poll that has ended: the owner
    /// writes another's mark).
    pub fn since(&self, seq: u64) -> Option<Panicked> {
        self.read(seq, None)
    }

    /// [`since`](Self::since) for the poll the owner is running: a read that keeps overlapping
    /// the owner's write is taken for its panic hook running (the owner writes only from
    /// there, its running poll's mark, and as a flagged or armed poll ends, when it is no
    /// longer running): at 0, not resumed, no hook time known.
    pub fn since_running(&self, seq: u64) -> Option<Panicked> {
        let hook = Panicked {
            at: 0,
            resumed: None,
            hooks: HookTime::default(),
        };
        self.read(seq, Some(hook))
    }

    fn read(&self, seq: u64, torn: Option<Panicked>) -> Option<Panicked> {
        for _ in 0..8 {
            let read = self.lock.read(|| {
                [self.now.load(), self.ended.load()]
                    .into_iter()
                    .find_map(|(marked, p)| (marked == seq).then_some(p))
            });
            if let Some(read) = read {
                return read;
            }
            std::hint::spin_loop();
        }
        torn
    }
}

impl Slot {
    fn new() -> Slot {
        Slot {
            poll: PollCell::new(),
            state: AtomicU8::new(FREE),
            parked: AtomicBool::new(false),
            park_since: AtomicU64::new(0),
            parked_ticks: AtomicU64::new(0),
            tid: AtomicI32::new(0),
            thread: AtomicU64::new(0),
            name_len: AtomicUsize::new(0),
            name: [const { AtomicU8::new(0) }; NAME_MAX],
            locks: LockTable::new(),
            sample: SampleArea::new(),
            spans: SpanStack::new(),
            unwinding: Unwinding::new(),
            after_pin: AfterPins::new(),
            exited: Exited::new(),
            #[cfg(feature = "schedule-latency")]
            waits: WaitRing::new(),
        }
    }

    /// Whether a thread owns this slot.
    pub fn is_active(&self) -> bool {
        self.state.load(Ordering::Acquire) == ACTIVE
    }

    /// Copies the owner's name into `out` (cleared first). Read it between two reads of the
    /// poll counter to know it belongs to the same owner.
    pub fn name_into(&self, out: &mut [u8; NAME_MAX]) -> usize {
        let n = self.name_len.load(Ordering::Acquire).min(NAME_MAX);
        for (o, b) in out.iter_mut().zip(&self.name[..n]) {
            *o = b.load(Ordering::Relaxed);
        }
        n
    }

    /// Keeps `name` whole, or when it is longer than [`NAME_MAX`] its start and its end with
    /// [`ELLIPSIS`] between them, cut at character boundaries. No allocation (the claim path).
    fn set_name(&self, name: &str) {
        let (head, tail) = if name.len() <= NAME_MAX {
            (name, "")
        } else {
            let room = NAME_MAX - ELLIPSIS.len();
            let mut h = room / 2;
            while !name.is_char_boundary(h) {
                h -= 1;
            }
            let mut t = name.len() - (room - room / 2);
            while !name.is_char_boundary(t) {
                t += 1;
            }
            (&name[..h], &name[t..])
        };
        let ellipsis = if tail.is_empty() { "" } else { ELLIPSIS };
        let bytes = head.bytes().chain(ellipsis.bytes()).chain(tail.bytes());
        let mut n = 0;
        for (b, c) in self.name.iter().zip(bytes) {
            b.store(c, Ordering::Relaxed);
            n += 1;
        }
        self.name_len.store(n, Ordering::Release);
    }
}

/// A name buffer for [`Slot::name_into`].
pub(crate) type NameBuf = [u8; NAME_MAX];

/// The preallocated slots of one detector.
pub(crate) struct SlotTable {
    slots: Box<[Slot]>,
    /// One past the highest slot ever claimed: the watchdog looks at these only (a thread
    /// claims the lowest free slot, so this stays near the number of threads that poll).
    used: AtomicUsize,
    /// Time origin for the end of a flagged poll.
    pub base: Instant,
    /// Threads that polled tasks but found no free slot.
    pub unwatched_threads: AtomicU64,
    /// The park hooks' counts and the watchdog's sleep.
    pub parking: Parking,
    /// A task that waited this long (ns) or longer to be polled is recorded in its worker's
    /// slot (the threshold; the watchdog keeps it up to date). Read by the after-poll hook
    /// with the `schedule-latency` feature only.
    pub wait_floor: WaitFloor,
}

/// [`SlotTable::wait_floor`]: on a cache line of its own, away from the park counters that
/// workers write, since every poll reads it (with `schedule-latency`).
#[repr(align(128))]
pub(crate) struct WaitFloor(pub AtomicU64);

impl SlotTable {
    pub fn new(capacity: usize) -> SlotTable {
        SlotTable {
            slots: (0..capacity.max(1)).map(|_| Slot::new()).collect(),
            used: AtomicUsize::new(0),
            base: Instant::now(),
            unwatched_threads: AtomicU64::new(0),
            parking: Parking::default(),
            wait_floor: WaitFloor(AtomicU64::new(u64::MAX)),
        }
    }

    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// One past the highest slot ever claimed: every slot from here on has never been claimed
    /// (when this was loaded), so no poll ran in it before the load.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::SeqCst).min(self.slots.len())
    }

    /// The slots ever claimed ([`used`](Self::used)).
    pub fn used_slots(&self) -> &[Slot] {
        &self.slots[..self.used()]
    }

    pub fn nanos_since_base(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.base).as_nanos() as u64
    }

    /// Claims a free slot for the calling thread. Rare path: once per thread.
    pub(super) fn claim(&self) -> Option<usize> {
        for (i, s) in self.slots.iter().enumerate() {
            if s.state
                .compare_exchange(FREE, CLAIMING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                // Counted in before the slot can poll: a watchdog that loads `used` without it
                // knows no poll ran in it yet.
                self.used.fetch_max(i + 1, Ordering::SeqCst);
                // The previous owner's last counter store happens before these stores; a
                // watchdog that reads them in a seqlock read sees the counter moved.
                fence(Ordering::Release);
                s.tid.store(current_tid(), Ordering::Relaxed);
                s.parked.store(false, Ordering::Relaxed);
                s.park_since.store(0, Ordering::Relaxed);
                s.locks.clear();
                s.spans.clear();
                // A sample request the previous owner never took died with it.
                s.sample.state.store(super::sample::IDLE, Ordering::Relaxed);
                // `thread::current()` panics once the thread's locals are gone; `claim_slow`
                // checks they are not, and a hook must not panic whatever happens.
                let current = std::panic::catch_unwind(std::thread::current).ok();
                s.thread.store(
                    current.as_ref().map_or(0, |t| super::id_u64(&t.id())),
                    Ordering::Relaxed,
                );
                s.set_name(
                    current
                        .as_ref()
                        .and_then(|t| t.name())
                        .unwrap_or("<unnamed>"),
                );
                s.state.store(ACTIVE, Ordering::Release);
                return Some(i);
            }
        }
        None
    }

    pub(super) fn release(&self, index: usize) {
        if let Some(s) = self.slots.get(index) {
            s.poll.close();
            s.state.store(FREE, Ordering::Release);
        }
    }
}

/// The Linux thread id of the calling thread.
pub(crate) fn current_tid() -> i32 {
    // SAFETY: gettid takes no arguments, cannot fail and touches no memory.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

impl SlotTable {
    /// The table's identity for the per-poll check "the thread's slot is in this table": its
    /// address, never 0. The hooks keep it next to their `Arc`, so that the check is one load
    /// and one compare.
    pub(crate) fn key(table: &Arc<SlotTable>) -> usize {
        Arc::as_ptr(table) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poll_touches_one_cache_line() {
        assert_eq!(std::mem::offset_of!(Slot, poll), 0);
        assert_eq!(std::mem::align_of::<Slot>(), 128);
        // The fields a poll writes or reads: the counter, the task, the flag.
        let (start, end) = PollCell::per_poll_bytes();
        assert!(end <= 64, "{start}..{end}");
    }

    /// A thread's accounting as it exited is read back for that thread only, and not while
    /// another's is being written.
    #[test]
    fn an_exited_threads_accounting_is_read_for_it_alone() {
        let e = Exited::new();
        assert_eq!(e.of(0, 0), None);
        assert_eq!(e.of(5, 0), None);
        // Thread 5 claims the slot at 2 and exits at 8: its polls 3 to 7.
        e.record(5, 2, 8, 10, 20);
        assert_eq!(e.of(5, 7), Some((10, 20)));
        assert_eq!((e.of(5, 1), e.of(5, 8)), (None, None));
        assert_eq!(e.of(6, 7), None);
        // Thread 6 comes and goes through the slot: thread 5's record stays.
        e.record(6, 8, 12, 30, 40);
        assert_eq!((e.of(5, 7), e.of(6, 11)), (Some((10, 20)), Some((30, 40))));
        // Thread 5's id used again by a later owner: each poll is matched to its own owner.
        e.record(5, 12, 16, 50, 60);
        assert_eq!((e.of(5, 7), e.of(5, 13)), (Some((10, 20)), Some((50, 60))));
        // Exited mid-poll (counter 17, odd): that poll is its own, as `close` leaves it.
        e.record(7, 16, 17, 70, 80);
        assert_eq!(e.of(7, 17), Some((70, 80)));
        // The oldest goes past EXITS_KEPT.
        e.record(8, 18, 20, 90, 100);
        assert_eq!((e.of(5, 7), e.of(8, 19)), (None, Some((90, 100))));
        // Mid-write: nobody's.
        let r = &e.records[(e.written.load(Ordering::Relaxed) - 1) % EXITS_KEPT];
        let v = r.lock.version.load(Ordering::Relaxed);
        r.lock.version.store(v + 1, Ordering::Relaxed);
        assert_eq!(e.of(8, 19), None);
        r.lock.version.store(v, Ordering::Relaxed);
        assert_eq!(e.of(8, 19), Some((90, 100)));
        // The calling thread's own, read from /proc (a stint on a CPU is accounted when it
        // ends: a thread not switched out yet reads 0).
        let tid = current_tid();
        e.record_own(tid, 20, 22);
        assert!(e.of(tid, 21).is_some());
        assert_eq!(parse_schedstat("12 34 5\n"), Some((12, 34)));
        assert_eq!(parse_schedstat("12"), None);
    }

    #[test]
    fn a_panic_mark_is_read_whole_and_only_for_its_poll() {
        let u = Unwinding::new();
        let hooks = |nanos, on_cpu, waiting| HookTime {
            nanos,
            on_cpu,
            waiting,
        };
        assert_eq!(u.since(3), None);
        u.mark(3, 100, Some((1_000, 500)));
        let hook = Panicked {
            at: 100,
            resumed: None,
            hooks: HookTime::default(),
        };
        assert_eq!(u.since(3), Some(hook));
        assert_eq!(u.since(5), None, "another poll's mark");
        u.resume(5, 200, Some((1_060, 530)));
        assert_eq!(u.since(3), Some(hook), "resumed by another poll");
        u.resume(3, 200, Some((1_060, 530)));
        let resumed = Panicked {
            resumed: Some(200),
            hooks: hooks(100, 60, 30),
            ..hook
        };
        assert_eq!(u.since(3), Some(resumed));
        u.resume(3, 250, Some((2_000, 2_000)));
        assert_eq!(u.since(3), Some(resumed), "resumed twice");
        // A second panic caught in the same poll: its hook runs again, and adds up; one whose
        // accounting is unread at either end adds its wall time alone.
        u.mark(3, 300, Some((1_100, 600)));
        assert_eq!(
            u.since(3).map(|p| (p.at, p.resumed, p.hooks)),
            Some((300, None, hooks(100, 60, 30)))
        );
        u.resume(3, 330, Some((1_120, 605)));
        assert_eq!(u.since(3).map(|p| p.hooks), Some(hooks(130, 80, 35)));
        u.mark(3, 400, None);
        u.resume(3, 410, Some((1_200, 700)));
        u.mark(3, 500, Some((1_300, 800)));
        u.resume(3, 520, None);
        assert_eq!(u.since(3).map(|p| p.hooks), Some(hooks(160, 80, 35)));
        // Another poll's panic starts from none; the last poll's mark goes, unless it ended
        // flagged or armed: then it stays, whatever panics next.
        let third = u.since(3);
        u.ended(5);
        u.ended(3);
        u.mark(5, 600, Some((1_400, 900)));
        u.resume(5, 610, Some((1_405, 902)));
        assert_eq!(u.since(5).map(|p| p.hooks), Some(hooks(10, 5, 2)));
        u.mark(7, 700, None);
        u.mark(9, 800, None);
        assert_eq!(u.since(3), third);
        assert_eq!(u.since(5), None);
        // The calling thread's own accounting reads (a stint on a CPU is accounted at a tick
        // or when it ends: a thread new to its CPU may read 0).
        assert!(own_schedstat().is_some());
    }

    #[test]
    fn a_reader_never_pairs_a_panic_with_another_resumption() {
        // The owner marks and resumes with matching values; the reader must never see a
        // resumption from another mark (resumed = at + 1, always).
        let u = std::sync::Arc::new(Unwinding::new());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (u, stop) = (u.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut t = 0;
                while !stop.load(Ordering::Relaxed) {
                    t += 2;
                    u.mark(1, t, Some((0, 0)));
                    u.resume(1, t + 1, Some((t, 1)));
                }
            })
        };
        let (mut seen, start) = (0, Instant::now());
        while seen < 10_000 && start.elapsed() < std::time::Duration::from_secs(60) {
            if let Some(p) = u.since(1) {
                if let Some(r) = p.resumed {
                    assert_eq!(r, p.at + 1, "{p:?}");
                    // One nanosecond per hook, one hook per mark (`at` steps by 2), the
                    // accounting read whole with it.
                    let n = p.at / 2;
                    assert_eq!(
                        p.hooks,
                        HookTime {
                            nanos: n,
                            on_cpu: n * (n + 1),
                            waiting: n
                        },
                        "{p:?}"
                    );
                    seen += 1;
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        assert!(seen > 0, "the writer never ran");
    }

    fn stored(name: &str) -> String {
        let slot = Slot::new();
        slot.set_name(name);
        let mut buf: NameBuf = [0; NAME_MAX];
        let n = slot.name_into(&mut buf);
        String::from_utf8(buf[..n].to_vec()).expect("a name is cut at character boundaries")
    }

    #[test]
    fn a_name_is_kept_whole_up_to_name_max_then_keeps_its_start_and_end() {
        let whole = "task::future_monitor_tests::total_duration_includes_the_time_to_first_poll";
        assert!(whole.len() > 48 && whole.len() <= NAME_MAX);
        assert_eq!(stored(whole), whole);
        let exact = "x".repeat(NAME_MAX);
        assert_eq!(stored(&exact), exact);

        let long = format!("{}::{}", "module".repeat(40), "the_test_that_pinned");
        let s = stored(&long);
        assert!(s.len() <= NAME_MAX, "{s}");
        assert!(s.contains(ELLIPSIS), "{s}");
        assert!(s.starts_with("modulemodule"), "{s}");
        assert!(s.ends_with("::the_test_that_pinned"), "{s}");

        // Multi-byte characters on either side of the cut stay whole.
        let wide = "é".repeat(200);
        let s = stored(&wide);
        assert!(s.len() <= NAME_MAX && s.contains(ELLIPSIS), "{s}");
        assert_eq!(
            s.replace(ELLIPSIS, "")
                .chars()
                .filter(|&c| c != 'é')
                .count(),
            0
        );
    }
}
