//! Who paid for a pin: the decisions, as functions of the waits and pins they are given.
//!
//! With the `schedule-latency` feature, tokio measures how long each task waited between being
//! woken and being polled; a worker records the waits at or past the threshold in its slot
//! ([`crate::poll::waits`]), and the watchdog hands each one to [`blame`]: the pins that ran
//! while it waited, those on the worker that finally ran it first. A wait no pin overlapped is
//! a busy runtime's, counted apart. Without the feature nothing is measured: a pin names the
//! tasks its worker polled first once it ended ([`Tally::victims`] with `measured = false`).

// Without the feature only the unmeasured answer is used; the attribution is still built and
// tested, so that both builds keep its decisions the same.
#![cfg_attr(not(feature = "schedule-latency"), allow(dead_code))]

use std::time::{Duration, Instant};

use crate::event::{SourceLocation, SpanInfo, Victim, Victims, MAX_VICTIMS_NAMED};
use crate::poll::waits::Polled;

/// Whether a task spawned at `file` is one of pinwatch's own (the watchdog's heartbeat, the
/// empty task that wakes a worker): its wait is the runtime's, not a victim's. Both are spawned
/// in `heartbeat.rs` beside this file, named as the compiler named this one: a path of the
/// service's is another path even where it has the same directories (a module `src/watch/` of
/// its own, a build that names files from each crate's root).
pub(super) fn is_own_task(file: &str) -> bool {
    std::path::Path::new(file) == std::path::Path::new(file!()).with_file_name("heartbeat.rs")
}

/// Whether `task` is one of pinwatch's own, by where it was spawned ([`is_own_task`]).
pub(super) fn is_own(task: &Polled) -> bool {
    location(task.spawned_at).is_some_and(|l| is_own_task(&l.file))
}

/// A task that waited at least the threshold before a poll, as the watchdog read it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Wait {
    pub task: Polled,
    pub wait: Duration,
    /// When its poll began (its wait ended then).
    pub polled: Instant,
    /// The worker that polled it.
    pub worker: Option<usize>,
    /// The innermost span its poll entered (layer, id).
    pub span: Option<(u64, u64)>,
}

impl Wait {
    /// When it began to wait.
    pub fn began(&self) -> Instant {
        self.polled.checked_sub(self.wait).unwrap_or(self.polled)
    }
}

/// A pin as [`blame`] sees it: its task, its worker and when it ran (`end`: none while it runs).
#[derive(Clone, Copy, Debug)]
pub(super) struct PinSpan {
    pub task: Option<u64>,
    pub worker: Option<usize>,
    pub start: Instant,
    pub end: Option<Instant>,
}

/// The pins (indices into `pins`) that `w` waited behind: those that ran while it waited, on the
/// worker that polled it when any did (the pin held the queue it waited in), else all of them
/// that held a worker (it waited on a pinned worker's queue until another worker was free to
/// steal it, or in the global queue while every worker was held; a `block_on` body of a
/// multi-thread runtime holds no worker, and no task waits behind it). Empty: no pin ran while
/// it waited. A task never waits behind its own pin (it was running it).
pub(super) fn blame(w: &Wait, pins: &[PinSpan]) -> Vec<usize> {
    let same: Vec<usize> = (0..pins.len())
        .filter(|&i| {
            overlaps(w, &pins[i]) && pins[i].worker.is_some() && pins[i].worker == w.worker
        })
        .collect();
    if !same.is_empty() {
        return same;
    }
    (0..pins.len())
        .filter(|&i| overlaps(w, &pins[i]) && pins[i].worker.is_some())
        .collect()
}

/// Whether `p` ran while `w` waited (and is not `w`'s own poll).
fn overlaps(w: &Wait, p: &PinSpan) -> bool {
    p.task != Some(w.task.task_id) && p.start < w.polled && p.end.is_none_or(|e| e > w.began())
}

/// Whether `w` may have waited in its worker's LIFO slot rather than in a queue: for a stretch
/// of at least `min_free` of its wait, some other worker of the runtime's `workers` was free
/// (pinned by none of `pins`). A task in a queue is stolen by a free worker, so a whole-pin
/// wait then means the LIFO slot; one that waited while every other worker was pinned may have
/// waited for that alone, and the LIFO slot is not claimed. The stretch is long (a quarter of
/// the threshold, say) because a worker whose own pin just ended drains its own backlog before
/// it steals. `w.worker` unknown (its thread handed the worker over): every pin is another's.
pub(super) fn lifo_possible(
    w: &Wait,
    pins: &[PinSpan],
    workers: usize,
    min_free: Duration,
) -> bool {
    let others = workers.saturating_sub(1);
    if others == 0 {
        return false;
    }
    let (from, to) = (w.began(), w.polled);
    // The other workers' pins within the wait, as (when, worker, +1 begins / -1 ends); ends
    // first where one ends as another begins.
    let mut changes: Vec<(Instant, i32, usize)> = Vec::new();
    for p in pins {
        let Some(worker) = p.worker.filter(|&i| Some(i) != w.worker && i < workers) else {
            continue;
        };
        if p.end.is_some_and(|e| e < p.start) || !overlaps(w, p) {
            continue;
        }
        changes.push((p.start.max(from), 1, worker));
        changes.push((p.end.map_or(to, |e| e.min(to)), -1, worker));
    }
    changes.sort_by_key(|&(at, d, _)| (at, d));
    // Pins running per worker (one at a time on a worker, but counted, not assumed), and how
    // many workers have one.
    let mut running = vec![0i32; workers];
    let mut held = 0usize;
    let mut free_since = Some(from);
    for (at, d, worker) in changes {
        if free_since.is_some_and(|since| at.saturating_duration_since(since) >= min_free) {
            return true;
        }
        let before = running[worker];
        running[worker] += d;
        match (before > 0, running[worker] > 0) {
            (false, true) => held += 1,
            (true, false) => held -= 1,
            _ => {}
        }
        free_since = if held < others {
            free_since.or(Some(at))
        } else {
            None
        };
    }
    free_since.is_some_and(|since| to.saturating_duration_since(since) >= min_free)
}

/// A pin's victims so far.
#[derive(Clone, Debug, Default)]
pub(super) struct Tally {
    tasks: usize,
    total: Duration,
    max: Duration,
    /// The longest waits, longest first, with when each began and whether it may have been in
    /// its worker's LIFO slot ([`lifo_possible`]).
    worst: Vec<(Victim, Instant, bool)>,
}

impl Tally {
    /// Adds `w`; `lifo` ([`lifo_possible`]) and `spans` (its spans) are asked only when it is
    /// among the worst.
    pub fn add(
        &mut self,
        w: &Wait,
        lifo: impl FnOnce() -> bool,
        spans: impl FnOnce() -> Vec<SpanInfo>,
    ) {
        self.tasks += 1;
        self.total += w.wait;
        self.max = self.max.max(w.wait);
        let at = self
            .worst
            .partition_point(|(v, _, _)| v.wait >= Some(w.wait));
        if at >= MAX_VICTIMS_NAMED {
            return;
        }
        let victim = Victim {
            task_id: w.task.task_id,
            spawned_at: location(w.task.spawned_at),
            wait: Some(w.wait),
            worker: w.worker,
            lifo: false,
            spans: spans(),
        };
        self.worst.insert(at, (victim, w.began(), lifo()));
        self.worst.truncate(MAX_VICTIMS_NAMED);
    }

    pub fn tasks(&self) -> usize {
        self.tasks
    }

    /// What the event says. `measured`: waits were measured (the tally is the answer; on a
    /// multi-thread runtime (`lifo_slot`), the task polled first after the pin on its own
    /// worker, woken while the pin ran, sat in that worker's LIFO slot). Not measured: the tasks
    /// polled after the pin (`after`), named in order, no wait claimed, pinwatch's own tasks
    /// left out (they ran for the runtime, not for the service). `pin` is the pin;
    /// `queue_max` the deepest local queue seen.
    pub fn victims(
        &self,
        measured: bool,
        lifo_slot: bool,
        after: &[Polled],
        pin: PinSpan,
        queue_max: Option<usize>,
    ) -> Option<Victims> {
        if measured {
            let first = after.first().map(|p| p.task_id).filter(|_| lifo_slot);
            let worst = self
                .worst
                .iter()
                .map(|(v, began, lifo)| {
                    let mut v = v.clone();
                    v.lifo = *lifo
                        && Some(v.task_id) == first
                        && v.worker.is_some()
                        && v.worker == pin.worker
                        && *began >= pin.start;
                    v
                })
                .collect();
            return Some(Victims {
                measured: true,
                tasks: self.tasks,
                total_wait: Some(self.total),
                max_wait: Some(self.max),
                worst,
                queue_depth_max: queue_max,
            });
        }
        let service: Vec<&Polled> = after.iter().filter(|p| !is_own(p)).collect();
        // None of the service's tasks ran after it, and its queue held no more tasks than
        // pinwatch's own that did: nothing to say.
        let own = after.len() - service.len();
        if service.is_empty() && queue_max.unwrap_or(0) <= own {
            return None;
        }
        Some(Victims {
            measured: false,
            tasks: service.len(),
            total_wait: None,
            max_wait: None,
            worst: service
                .iter()
                .map(|p| Victim {
                    task_id: p.task_id,
                    spawned_at: location(p.spawned_at),
                    wait: None,
                    worker: pin.worker,
                    lifo: false,
                    spans: Vec::new(),
                })
                .collect(),
            queue_depth_max: queue_max,
        })
    }
}

/// A spawn location from the address the hooks stored (0: none).
fn location(addr: usize) -> Option<SourceLocation> {
    if addr == 0 {
        return None;
    }
    // SAFETY: the address was stored by the poll hooks from a `&'static Location<'static>`
    // (tokio's `TaskMeta::spawned_at`), and locations are never freed.
    Some(SourceLocation::from_std(unsafe {
        &*(addr as *const std::panic::Location<'static>)
    }))
}

/// The runtime-level advice for a pin whose victim waited in the pinned worker's LIFO slot.
pub(super) const LIFO_ADVICE: &str = "a task woken by the pinned poll waited for the whole \
    pin in its worker's LIFO slot, which no other worker may steal from (tokio#4941): tokio's \
    Builder::disable_lifo_slot() (unstable) lets another worker run it, at the cost of the \
    LIFO slot's locality (a task woken by the task it talks to no longer runs next, on the \
    same warm cache: message-passing workloads get slower)";

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn wait(t0: Instant, task: u64, began_ms: u64, polled_ms: u64, worker: usize) -> Wait {
        Wait {
            task: Polled {
                task_id: task,
                spawned_at: 0,
            },
            wait: ms(polled_ms - began_ms),
            polled: t0 + ms(polled_ms),
            worker: Some(worker),
            span: None,
        }
    }

    fn pin(t0: Instant, worker: usize, start_ms: u64, end_ms: Option<u64>) -> PinSpan {
        PinSpan {
            task: Some(1000 + start_ms),
            worker: Some(worker),
            start: t0 + ms(start_ms),
            end: end_ms.map(|e| t0 + ms(e)),
        }
    }

    #[test]
    fn a_wait_is_blamed_on_the_pins_that_ran_while_it_waited_its_own_workers_first() {
        let t0 = Instant::now();
        let pins = [
            pin(t0, 0, 100, Some(400)),
            pin(t0, 1, 150, Some(300)),
            pin(t0, 0, 500, None),
        ];
        // Queued on worker 0 during its pin, run there when it ended: that pin only, though
        // worker 1 was pinned meanwhile too.
        assert_eq!(blame(&wait(t0, 1, 110, 401, 0), &pins), vec![0]);
        // Run by worker 1 once its own pin ended, having waited through both: its own worker's.
        assert_eq!(blame(&wait(t0, 2, 120, 310, 1), &pins), vec![1]);
        // Run by worker 2, which pinned nothing: every pin that ran while it waited.
        assert_eq!(blame(&wait(t0, 3, 200, 350, 2), &pins), vec![0, 1]);
        // Waited only after every pin ended, or between them: a busy runtime, no pin's.
        assert!(blame(&wait(t0, 4, 420, 480, 0), &pins).is_empty());
        // The running pin (no end yet) is blamed for a wait that overlaps it.
        assert_eq!(blame(&wait(t0, 5, 490, 530, 0), &pins), vec![2]);
        // Touching is not overlapping: began exactly when the pin ended.
        assert!(blame(&wait(t0, 6, 400, 450, 0), &pins[..1]).is_empty());
        // A task that waited, then pinned: never its own victim, the pin before it is blamed.
        let own = PinSpan {
            task: Some(7),
            ..pin(t0, 0, 410, Some(510))
        };
        assert_eq!(blame(&wait(t0, 7, 110, 410, 0), &[pins[0], own]), vec![0]);
        // A pin that holds no worker (a multi-thread runtime's `block_on` body) is nobody's
        // queue: a wait it overlapped, run on a worker that pinned nothing, is not its victim.
        let body = PinSpan {
            task: None,
            worker: None,
            ..pin(t0, 0, 100, Some(400))
        };
        assert!(blame(&wait(t0, 8, 200, 350, 1), &[body]).is_empty());
        assert_eq!(blame(&wait(t0, 8, 200, 350, 2), &[body, pins[1]]), vec![1]);
    }

    #[test]
    fn the_lifo_slot_is_possible_only_while_another_worker_was_free() {
        let t0 = Instant::now();
        // Woken at 105 ms on worker 0, pinned 100–400 ms; polled there at 401 ms.
        let w = wait(t0, 99, 105, 401, 0);
        let own = pin(t0, 0, 100, Some(400));
        assert!(lifo_possible(&w, &[own], 2, ms(1)));
        // One worker has nobody to be stolen by.
        assert!(!lifo_possible(&w, &[own], 1, ms(1)));
        // Worker 1 pinned for the whole wait: nobody was free to steal it from a queue.
        assert!(!lifo_possible(&w, &[own, pin(t0, 1, 50, None)], 2, ms(1)));
        assert!(!lifo_possible(
            &w,
            &[own, pin(t0, 1, 50, Some(250)), pin(t0, 1, 250, Some(402))],
            2,
            ms(1)
        ));
        // Worker 1 pinned for part of it only: free from 200 ms on, it would have stolen it.
        assert!(lifo_possible(
            &w,
            &[own, pin(t0, 1, 50, Some(200))],
            2,
            ms(1)
        ));
        assert!(lifo_possible(&w, &[own, pin(t0, 1, 300, None)], 2, ms(1)));
        // Three workers: worker 2 free throughout, though worker 1 was pinned at the start.
        assert!(lifo_possible(
            &w,
            &[own, pin(t0, 1, 50, Some(106))],
            3,
            ms(1)
        ));
        // Both others pinned for the whole wait, one after the other on worker 2.
        assert!(!lifo_possible(
            &w,
            &[
                own,
                pin(t0, 1, 50, None),
                pin(t0, 2, 60, Some(200)),
                pin(t0, 2, 200, Some(500))
            ],
            3,
            ms(1)
        ));
        // A body that holds no worker takes none from the runtime.
        let body = PinSpan {
            task: None,
            worker: None,
            ..pin(t0, 0, 0, None)
        };
        assert!(lifo_possible(&w, &[own, body], 2, ms(1)));
        // Free, but for less than the stretch asked: a worker whose pin just ended drains its
        // own backlog first.
        assert!(!lifo_possible(
            &w,
            &[own, pin(t0, 1, 50, Some(390))],
            2,
            ms(20)
        ));
        assert!(lifo_possible(
            &w,
            &[own, pin(t0, 1, 50, Some(370))],
            2,
            ms(20)
        ));
        // A worker counted once however many pins it shows at once: worker 2 free throughout.
        let twice = pin(t0, 1, 50, None);
        assert!(lifo_possible(&w, &[own, twice, twice], 3, ms(1)));
        // A pin that ends before it begins (no such pin is made) frees nobody.
        let inverted = PinSpan {
            end: Some(t0 + ms(10)),
            ..pin(t0, 1, 200, None)
        };
        assert!(!lifo_possible(
            &w,
            &[own, pin(t0, 1, 50, None), inverted],
            2,
            ms(1)
        ));
    }

    #[test]
    fn the_tally_keeps_the_longest_waits_and_marks_the_lifo_victim() {
        let t0 = Instant::now();
        let p = pin(t0, 0, 100, Some(400));
        let mut t = Tally::default();
        // Ten stolen tasks that waited a little past the threshold on worker 1, and the one in
        // the LIFO slot: woken at 105 ms, polled first on worker 0 when the pin ended.
        for k in 0..10 {
            t.add(&wait(t0, 10 + k, 110, 135 + k, 1), || true, Vec::new);
        }
        t.add(
            &wait(t0, 99, 105, 401, 0),
            || true,
            || vec![SpanInfo::for_test("request", "svc", &[("uri", "/orders")])],
        );
        let after = [Polled {
            task_id: 99,
            spawned_at: 0,
        }];
        let v = t.victims(true, true, &after, p, Some(3)).unwrap();
        assert!(v.measured);
        assert_eq!(v.tasks, 11);
        assert_eq!(v.max_wait, Some(ms(296)));
        let total: Duration = (0..10).map(|k| ms(25 + k)).sum::<Duration>() + ms(296);
        assert_eq!(v.total_wait, Some(total));
        assert_eq!(v.worst.len(), MAX_VICTIMS_NAMED);
        assert_eq!(v.worst[0].task_id, 99);
        assert!(v.worst[0].lifo);
        assert_eq!(v.worst[0].spans[0].name, "request");
        assert!(v.worst[1..].iter().all(|w| !w.lifo));
        let waits: Vec<_> = v.worst.iter().map(|w| w.wait.unwrap()).collect();
        assert!(waits.windows(2).all(|w| w[0] >= w[1]), "{waits:?}");
        assert_eq!(v.queue_depth_max, Some(3));
        // The same task, woken before the pin began: not the LIFO slot's.
        let mut t = Tally::default();
        t.add(&wait(t0, 99, 90, 401, 0), || true, Vec::new);
        assert!(!t.victims(true, true, &after, p, None).unwrap().worst[0].lifo);
        // Polled first after the pin, but on another worker: not the LIFO slot's.
        let mut t = Tally::default();
        t.add(&wait(t0, 99, 105, 401, 1), || true, Vec::new);
        assert!(!t.victims(true, true, &after, p, None).unwrap().worst[0].lifo);
        // A current-thread runtime has no LIFO slot.
        let mut t = Tally::default();
        t.add(&wait(t0, 99, 105, 401, 0), || true, Vec::new);
        assert!(!t.victims(true, false, &after, p, None).unwrap().worst[0].lifo);
        // Another worker pinned while it waited: it may have waited in a queue nobody was free
        // to steal from, and the LIFO slot is not claimed.
        let mut t = Tally::default();
        t.add(&wait(t0, 99, 105, 401, 0), || false, Vec::new);
        assert!(!t.victims(true, true, &after, p, None).unwrap().worst[0].lifo);
    }

    #[test]
    fn pinwatchs_own_tasks_are_told_by_their_file() {
        let heartbeat = file!().replace("victims.rs", "heartbeat.rs");
        assert!(is_own_task(&heartbeat));
        // No other file of pinwatch's spawns on the watched runtime.
        assert!(!is_own_task(file!()));
        assert!(!is_own_task("src/main.rs"));
        // A service's file in a directory of the same name, or named as pinwatch's would be
        // by a build that names files from each crate's root, is the service's.
        assert!(!is_own_task(&file!().replace("victims.rs", "handlers.rs")));
        assert!(!is_own_task("src/watch/victims.rs"));
        assert!(!is_own_task(&format!("app/{heartbeat}")));
    }

    #[test]
    fn unmeasured_victims_name_the_next_tasks_and_claim_no_wait() {
        let t0 = Instant::now();
        let p = pin(t0, 1, 0, Some(300));
        let t = Tally::default();
        assert_eq!(t.victims(false, true, &[], p, None), None);
        assert_eq!(t.victims(false, true, &[], p, Some(0)), None);
        let after = [
            Polled {
                task_id: 5,
                spawned_at: 0,
            },
            Polled {
                task_id: 6,
                spawned_at: 0,
            },
        ];
        let v = t.victims(false, true, &after, p, Some(2)).unwrap();
        assert!(!v.measured);
        // pinwatch's own tasks (spawned in this directory, as its heartbeat is) are left out:
        // the same answer with one of them polled first, and none when it was the only one.
        let own = Polled {
            task_id: 4,
            spawned_at: super::super::heartbeat::a_location_in_it() as *const _ as usize,
        };
        assert!(is_own(&own) && !is_own(&after[0]));
        let with_own = [own, after[0], after[1]];
        assert_eq!(
            t.victims(false, true, &with_own, p, Some(2)),
            Some(v.clone())
        );
        assert_eq!(t.victims(false, true, &[own], p, None), None);
        // A queue that held no more than pinwatch's own tasks says nothing either; one that
        // held more held the service's, which other workers may have run.
        assert_eq!(t.victims(false, true, &[own], p, Some(1)), None);
        let queued = t.victims(false, true, &[own], p, Some(2)).unwrap();
        assert_eq!((queued.tasks, queued.worst.len()), (0, 0));
        assert_eq!(queued.queue_depth_max, Some(2));
        assert_eq!(v.tasks, 2);
        assert_eq!((v.total_wait, v.max_wait), (None, None));
        assert_eq!(
            v.worst
                .iter()
                .map(|w| (w.task_id, w.wait, w.worker, w.lifo))
                .collect::<Vec<_>>(),
            vec![(5, None, Some(1), false), (6, None, Some(1), false)]
        );
        // Measured with nothing delayed: still said, as none.
        let v = t.victims(true, true, &[], p, None).unwrap();
        assert_eq!((v.measured, v.tasks), (true, 0));
    }
}
