//! The poll protocol (`src/poll/protocol.rs`, compiled here against loom's atomics) over every
//! interleaving loom explores: a worker's polls against the watchdog's read, flag and
//! completion.
//!
//! The asymmetric fence (a compiler fence on the worker, `membarrier` on the watchdog) is
//! modelled as `fence(SeqCst)` on both sides: membarrier makes every running thread execute a
//! full barrier, which is what a SeqCst fence on the worker's side at that point would give.

#[allow(dead_code)]
mod atomic {
    pub use loom::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};

    pub fn light_fence() {
        fence(Ordering::SeqCst);
    }

    pub fn heavy_fence() {
        fence(Ordering::SeqCst);
    }

    /// loom's atomics have no `const` constructor: the `fn` stays as it is.
    macro_rules! const_with_std {
        ($(#[$m:meta])* $v:vis fn $($rest:tt)*) => {
            $(#[$m])* $v fn $($rest)*
        };
    }
    pub(crate) use const_with_std;
}

#[allow(dead_code)]
#[path = "../src/poll/protocol.rs"]
mod protocol;

use loom::sync::Arc;
use loom::thread;
use protocol::PollCell;

/// Task ids and spawn locations of poll k (1-based): distinct per poll, so a torn read shows.
fn task(k: u64) -> (u64, usize) {
    (100 + k, 1000 + k as usize)
}

#[test]
fn a_read_never_mixes_two_polls() {
    loom::model(|| {
        let cell = Arc::new(PollCell::new());
        let worker = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || {
                for k in 1..=2 {
                    let (id, at) = task(k);
                    cell.begin(id, at, || 0);
                    let _ = cell.end();
                }
            })
        };
        if let Some(snap) = cell.read() {
            // Poll k has counter 2k - 1; its data must be poll k's.
            let k = snap.seq.div_ceil(2);
            assert_eq!((snap.task_id, snap.spawned_at), task(k), "{snap:?}");
        }
        worker.join().unwrap();
    });
}

#[test]
fn a_stamp_read_beside_a_running_poll_is_that_polls() {
    loom::model(|| {
        let cell = Arc::new(PollCell::new());
        // Poll 1 begins unstamped; stamping goes on (its ticks read before, 1000: the
        // generation); polls 2 and 3 are stamped 1000 + k.
        let (id, at) = task(1);
        cell.begin(id, at, || unreachable!("stamping is off"));
        let _ = cell.end();
        let turned_on = 1000;
        cell.set_stamping(turned_on);
        let worker = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || {
                for k in 2..=3 {
                    let (id, at) = task(k);
                    cell.begin(id, at, || 1000 + k);
                    let _ = cell.end();
                }
            })
        };
        if let Some((seq, stamp, generation)) = cell.read_stamp() {
            let k = seq.div_ceil(2);
            // A valid stamp (of stamping's generation) is the running poll's own.
            if generation == turned_on {
                assert_eq!(stamp, 1000 + k, "seq {seq}");
            }
        }
        worker.join().unwrap();
    });
}

#[test]
fn a_stamp_read_after_stamping_goes_off_and_on_again_is_the_polls_own() {
    use loom::sync::atomic::{AtomicU64, Ordering};
    // Three preemptions: the interleaving that matters needs two (the stale `on` is the memory
    // model's, not the scheduler's); unbounded, the model passes too, in minutes.
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let cell = Arc::new(PollCell::new());
        // The time-stamp counter: one shared count that only goes up.
        let counter = Arc::new(AtomicU64::new(2));
        // What each poll really stamped (0: none), for the check after the join.
        let truth = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
        let worker = {
            let (cell, counter, truth) =
                (Arc::clone(&cell), Arc::clone(&counter), Arc::clone(&truth));
            thread::spawn(move || {
                for k in 1..=2 {
                    let (id, at) = task(k);
                    cell.begin(id, at, || {
                        let t = counter.fetch_add(1, Ordering::Relaxed);
                        truth[k as usize].store(t, Ordering::Relaxed);
                        t
                    });
                    let _ = cell.end();
                }
            })
        };
        // The watchdog: stamping on, off (a burst), on again, each `on` with the ticks read
        // before it as its generation; then a read of the running poll's stamp.
        cell.set_stamping(1);
        cell.set_stamping(0);
        let turned_on = counter.fetch_add(1, Ordering::Relaxed);
        cell.set_stamping(turned_on);
        let read = cell.read_stamp();
        worker.join().unwrap();
        if let Some((seq, stamp, generation)) = read {
            let k = seq.div_ceil(2) as usize;
            // A stamp of the last `on`'s generation is the running poll's own: never the one
            // an earlier poll left in place (one that saw an earlier `on` late, or stamping
            // off). With "no earlier than the ticks read before `on`" instead, loom finds
            // poll 1 stamped after that read, under the first `on` seen late, and poll 2 not
            // stamped: poll 1's stamp read as poll 2's.
            if generation == turned_on {
                assert_eq!(stamp, truth[k].load(Ordering::Relaxed), "seq {seq}");
            }
        }
    });
}

#[test]
fn a_flag_that_finds_the_poll_running_is_seen_when_it_ends() {
    flag_while_it_ends(1);
}

/// A poll armed at its second look (flagged) and flagged again when found pinned: the second
/// flag adds no barrier, and still says "running" only if the worker will record the end.
#[test]
fn a_second_flag_of_the_same_poll_keeps_the_first_ones_promise() {
    flag_while_it_ends(2);
}

/// The watchdog flags poll 1 `flags` times while its worker ends it and runs poll 2: any flag
/// that found it running was seen by the worker, which recorded the end.
fn flag_while_it_ends(flags: usize) {
    loom::model(move || {
        let cell = Arc::new(PollCell::new());
        let (id, at) = task(1);
        cell.begin(id, at, || 0);
        let worker = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || {
                // The end of poll 1: returns its counter if it saw the flag, and records the
                // end as the after-poll hook does.
                let flagged = cell.end();
                if let Some(seq) = flagged {
                    cell.record_end(seq, 42);
                }
                // The next poll must not inherit the flag.
                let (id, at) = task(2);
                cell.begin(id, at, || 0);
                let again = cell.end();
                (flagged, again)
            })
        };
        let mut still_running = false;
        for _ in 0..flags {
            still_running |= cell.flag(1);
        }
        let (flagged, again) = worker.join().unwrap();
        assert_eq!(again, None, "poll 2 was never flagged");
        if still_running {
            // No store-buffering miss: the worker saw the flag and recorded the end.
            assert_eq!(flagged, Some(1));
            assert_eq!(cell.ended(1), Some(42));
        }
        assert_eq!(cell.ended(3), None);
    });
}

#[test]
fn completion_reads_the_end_of_the_right_poll() {
    loom::model(|| {
        let cell = Arc::new(PollCell::new());
        let worker = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || {
                for k in 1..=2u64 {
                    let (id, at) = task(k);
                    cell.begin(id, at, || 0);
                    let seq = 2 * k - 1;
                    // Both polls flagged: their ends are recorded one after the other.
                    cell.record_end(seq, 10 * k);
                    let _ = cell.end();
                }
            })
        };
        // Whatever interleaving, an end read for poll 1 is poll 1's.
        if let Some(nanos) = cell.ended(1) {
            assert_eq!(nanos, 10);
        }
        worker.join().unwrap();
        assert_eq!(cell.ended(3), Some(20));
    });
}

#[test]
fn the_counter_never_repeats() {
    loom::model(|| {
        let cell = PollCell::new();
        let mut seen = Vec::new();
        for k in 0..3 {
            let (id, at) = task(k);
            cell.begin(id, at, || 0);
            seen.push(cell.seq());
            if k == 1 {
                // The owner went away mid-poll (slot released), and a new one begins.
                cell.close();
            } else {
                let _ = cell.end();
            }
        }
        seen.dedup();
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert!(seen.iter().all(|s| s & 1 == 1), "{seen:?}");
    });
}

#[test]
fn an_end_without_a_begin_leaves_the_cell_idle_and_unflagged() {
    loom::model(|| {
        let cell = Arc::new(PollCell::new());
        let worker = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || {
                // Ends with no poll running (the after-poll hook of a thread whose slot is not
                // the hook's table's): nothing moves, nothing is flagged.
                assert_eq!(cell.end(), None);
                let (id, at) = task(1);
                cell.begin(id, at, || 0);
                let flagged = cell.end();
                assert_eq!(cell.end(), None, "a second end is not the flagged poll's");
                flagged
            })
        };
        let flagged_running = cell.read().is_some_and(|snap| cell.flag(snap.seq));
        let flagged = worker.join().unwrap();
        assert_eq!(cell.seq(), 2, "one poll, counter even");
        if flagged_running {
            assert_eq!(flagged, Some(1));
        }
    });
}
