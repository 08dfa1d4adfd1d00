//! Nothing to pay while nothing pins: while every worker is parked the watchdog sleeps (no
//! wake-ups at all) and the heartbeat does not beat; a worker that unparks and blocks is still
//! reported, with a start that does not reach back into the sleep.

use std::collections::HashMap;
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use pinwatch::{Control, PinnedEvent, State};

const LONG: Duration = Duration::from_secs(60);

/// Calls `f` with each of this process's threads: its id, its name, and a reader of its files
/// in `/proc` (empty where unreadable).
fn each_thread(mut f: impl FnMut(String, &str, &dyn Fn(&str) -> String)) {
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let read = |file: &str| std::fs::read_to_string(e.path().join(file)).unwrap_or_default();
        let comm = read("comm");
        f(
            e.file_name().to_string_lossy().into_owned(),
            comm.trim(),
            &read,
        );
    }
}

/// Context switches so far of each of this process's threads whose name starts with `prefix`,
/// by thread id.
fn switches(prefix: &str) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    each_thread(|tid, comm, read| {
        if !comm.starts_with(prefix) {
            return;
        }
        let n = read("status")
            .lines()
            .filter(|l| l.contains("ctxt_switches"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum::<u64>();
        out.insert(tid, n);
    });
    out
}

/// Time on a CPU and time waiting for one so far (`schedstat`, ns) of this process's threads
/// whose name starts with `prefix`, summed.
fn cpu_times(prefix: &str) -> (u64, u64) {
    let mut sum = (0, 0);
    each_thread(|_, comm, read| {
        if !comm.starts_with(prefix) {
            return;
        }
        let stat = read("schedstat");
        let mut n = stat
            .split_whitespace()
            .map(|v| v.parse::<u64>().unwrap_or(0));
        sum.0 += n.next().unwrap_or(0);
        sum.1 += n.next().unwrap_or(0);
    });
    sum
}

/// Context switches since `before` of the threads alive at both reads.
fn since(before: &HashMap<String, u64>, prefix: &str) -> u64 {
    switches(prefix)
        .iter()
        .filter_map(|(tid, n)| Some(n.saturating_sub(*before.get(tid)?)))
        .sum()
}

/// The tests of this file measure threads by name: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Waits (bounded) until `f` holds.
fn wait_for(what: &str, f: impl FnMut() -> bool) {
    wait_explained(what, f, String::new);
}

/// Waits (bounded) until `f` holds; a timeout says what `explain` and the threads' states say.
fn wait_explained(what: &str, mut f: impl FnMut() -> bool, explain: impl Fn() -> String) {
    let deadline = Instant::now() + LONG;
    while !f() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {}; threads (tid name state wchan): {}",
            explain(),
            thread_states()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Each pinwatch and tokio thread of this process: its id, name, state and kernel wait channel.
fn thread_states() -> String {
    let mut out = Vec::new();
    each_thread(|tid, comm, read| {
        if !comm.starts_with("pinwatch") && !comm.starts_with("tokio") {
            return;
        }
        let stat = read("stat");
        let state = stat
            .rsplit_once(") ")
            .map_or("?", |(_, r)| &r[..1.min(r.len())]);
        out.push(format!("{tid} {comm} {state} {}", read("wchan")));
    });
    out.join(", ")
}

/// A runtime watched by pinwatch (no tracing, no control socket), and its events.
fn watched(
    tokio: &mut tokio::runtime::Builder,
) -> (
    tokio::runtime::Runtime,
    pinwatch::Detector,
    mpsc::Receiver<PinnedEvent>,
) {
    let (tx, events) = mpsc::channel::<PinnedEvent>();
    let (rt, detector) = pinwatch::Builder::new()
        .tracing(false)
        .control(Control::Off)
        .sink(move |e: &PinnedEvent| {
            let _ = tx.send(e.clone());
        })
        .build(tokio)
        .unwrap();
    (rt, detector, events)
}

fn idle_then_pin(mut tokio: tokio::runtime::Builder, in_body: bool) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let (rt, detector, events) = watched(&mut tokio);
    let pin = Duration::from_millis(150);
    // A `block_on` body, on a thread of its own, that blocks (itself, or in a task it spawns)
    // when told to: a current-thread runtime runs only inside it.
    let (go, mut orders) = tokio::sync::mpsc::unbounded_channel::<()>();
    std::thread::scope(|scope| {
        let body = detector.watch_block_on(async move {
            while orders.recv().await.is_some() {
                if in_body {
                    std::thread::sleep(pin);
                } else {
                    tokio::spawn(async move { std::thread::sleep(pin) });
                }
            }
        });
        let rt = &rt;
        scope.spawn(move || rt.block_on(body));
        let sleeps = || detector.stats().watchdog_sleeps;
        // Every worker parks once it has nothing to do; the watchdog then sleeps.
        wait_for("the watchdog to sleep", || sleeps() >= 1);
        let (watchdog, workers) = (switches("pinwatch-watchd"), switches("tokio-rt-worker"));
        let window = Duration::from_secs(3);
        std::thread::sleep(window);
        let watchdog = since(&watchdog, "pinwatch-watchd");
        let workers = since(&workers, "tokio-rt-worker");
        // Scanning every 2 ms would be ~1,500 wake-ups; the heartbeat beating 20 times a second
        // ~60 on the workers.
        assert!(
            watchdog <= 3,
            "the watchdog woke {watchdog} times in {window:?} while every worker was parked"
        );
        assert!(
            workers <= 15,
            "the workers woke {workers} times in {window:?} with nothing to run (a heartbeat?)"
        );
        // A worker unparks and blocks: reported all the same.
        let slept = sleeps();
        let blocked = std::time::SystemTime::now();
        go.send(()).unwrap();
        let completed = loop {
            let e = events.recv_timeout(LONG).expect("the pin is reported");
            // Its start's lower bound is the wake, not the last look before the sleep (3 s
            // earlier).
            assert!(
                e.start + Duration::from_millis(500) >= blocked,
                "the pin's start {:?} reaches back into the idle period (blocked at {blocked:?})",
                e.start
            );
            if e.state == State::Completed {
                break e;
            }
        };
        assert_eq!(completed.block_on, in_body);
        assert!(completed.duration >= pin, "{:?}", completed.duration);
        assert!(
            completed.duration < pin + Duration::from_secs(1),
            "the reported duration {:?} counts the watchdog's sleep",
            completed.duration
        );
        // The pin woke it; once idle again, it sleeps again.
        wait_for("the watchdog to sleep again", || sleeps() > slept);
        drop(go);
    });
    drop(rt);
    drop(detector);
}

#[test]
fn a_multi_thread_runtime_idles_without_wake_ups_and_still_catches_a_pin() {
    let mut tokio = tokio::runtime::Builder::new_multi_thread();
    tokio.worker_threads(2);
    idle_then_pin(tokio, false);
}

#[test]
fn a_multi_thread_body_that_blocks_after_an_idle_period_is_caught() {
    let mut tokio = tokio::runtime::Builder::new_multi_thread();
    tokio.worker_threads(2);
    idle_then_pin(tokio, true);
}

#[test]
fn a_current_thread_runtime_idles_without_wake_ups_and_still_catches_a_pin() {
    idle_then_pin(tokio::runtime::Builder::new_current_thread(), false);
}

/// A detector whose park hooks were not installed (hooks chained by hand, without the park
/// ones) never sleeps: it cannot know the workers are parked.
#[test]
fn without_the_park_hooks_the_watchdog_keeps_looking() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let prepared = pinwatch::Builder::new()
        .tracing(false)
        .control(Control::Off)
        .prepare()
        .unwrap();
    let (before, after) = (prepared.hooks(), prepared.hooks());
    let mut tokio = tokio::runtime::Builder::new_multi_thread();
    tokio
        .worker_threads(2)
        .enable_all()
        .on_before_task_poll(move |m| before.before_poll(m))
        .on_after_task_poll(move |m| after.after_poll(m));
    let rt = tokio.build().unwrap();
    let detector = prepared.start(rt.handle()).unwrap();
    // A thread takes its name once it runs.
    wait_for("the watchdog's name", || {
        !switches("pinwatch-watchd").is_empty()
    });
    let scans = switches("pinwatch-watchd");
    // Idle, it goes on waking to look (a sleeping watchdog would time this out).
    wait_for("the watchdog to scan", || {
        since(&scans, "pinwatch-watchd") > 50
    });
    assert_eq!(detector.stats().watchdog_sleeps, 0);
    drop(rt);
    drop(detector);
}

/// Pins that start at every phase of the watchdog's way into sleep (just idle, deciding,
/// asleep): each one is reported, none slept through. `in_body`: the `block_on` body blocks
/// (woken through `poll_begins`), else a task it spawns (woken through the unpark hook).
fn pins_at_every_phase_of_falling_asleep(mut tokio: tokio::runtime::Builder, in_body: bool) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let (rt, detector, events) = watched(&mut tokio);
    // Well past the threshold (20 ms): a loaded machine delays the watchdog, not the verdict.
    let pin = Duration::from_millis(120);
    let (go, mut orders) = tokio::sync::mpsc::unbounded_channel::<()>();
    std::thread::scope(|scope| {
        let body = detector.watch_block_on(async move {
            while orders.recv().await.is_some() {
                if in_body {
                    std::thread::sleep(pin);
                } else {
                    tokio::spawn(async move { std::thread::sleep(pin) });
                }
            }
        });
        let rt = &rt;
        scope.spawn(move || rt.block_on(body));
        let rounds = 40u32;
        // Sleeps counted before the last pin was let go: a sleep after it counts more (it may
        // be asleep already when its report arrives). None before the first: the watchdog may
        // have gone to sleep before this line, and then sleeps on (nothing wakes it until the
        // first pin), which round 0 waited for in vain.
        let mut slept = 0;
        for round in 0..rounds {
            // Half the rounds wait until it sleeps; the others start the pin after a spin of
            // 0–6 ms, while it goes idle and decides (the phase, not an ordering).
            if round % 2 == 0 {
                wait_explained(
                    "the watchdog to sleep",
                    || detector.stats().watchdog_sleeps > slept,
                    || format!("round {round}, {:?}", detector.stats()),
                );
            } else {
                let spin = Duration::from_micros(u64::from(round * 157 % 6000));
                let t = Instant::now();
                while t.elapsed() < spin {
                    std::hint::spin_loop();
                }
            }
            let watchdog = cpu_times("pinwatch-watchd");
            go.send(()).unwrap();
            slept = detector.stats().watchdog_sleeps;
            let mut seen = Vec::new();
            let e = loop {
                let e = events.recv_timeout(LONG).unwrap_or_else(|_| {
                    // A watchdog kept off the CPU through the whole pin misses it (see
                    // docs/how-it-works.md): its waits for a CPU since tell that case apart.
                    let now = cpu_times("pinwatch-watchd");
                    panic!(
                        "round {round}: the pin was never reported (reports: {seen:?}; {:?}; \
                         since the pin was let go the watchdog ran {} µs and waited {} µs for a \
                         CPU; threads (tid name state wchan): {})",
                        detector.stats(),
                        now.0.saturating_sub(watchdog.0) / 1000,
                        now.1.saturating_sub(watchdog.1) / 1000,
                        thread_states()
                    )
                });
                if e.state == State::Completed {
                    break e;
                }
                seen.push((e.state, e.duration));
            };
            assert!(e.duration >= pin, "round {round}: {:?}", e.duration);
        }
        drop(go);
    });
    assert!(detector.stats().watchdog_sleeps >= 20);
    drop(rt);
    drop(detector);
}

#[test]
fn multi_thread_task_pins_at_every_phase_of_falling_asleep_are_reported() {
    let mut tokio = tokio::runtime::Builder::new_multi_thread();
    tokio.worker_threads(2);
    pins_at_every_phase_of_falling_asleep(tokio, false);
}

#[test]
fn multi_thread_body_pins_at_every_phase_of_falling_asleep_are_reported() {
    let mut tokio = tokio::runtime::Builder::new_multi_thread();
    tokio.worker_threads(2);
    pins_at_every_phase_of_falling_asleep(tokio, true);
}

#[test]
fn current_thread_pins_at_every_phase_of_falling_asleep_are_reported() {
    pins_at_every_phase_of_falling_asleep(tokio::runtime::Builder::new_current_thread(), false);
}

/// A detector stopped while its watchdog sleeps — the runtime shut down first, or still
/// running — stops (its drop joins the watchdog): the stop wakes it.
#[test]
fn a_sleeping_watchdog_stops_with_its_detector() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for runtime_first in [true, false] {
        let mut tokio = tokio::runtime::Builder::new_multi_thread();
        tokio.worker_threads(2);
        let (rt, detector) = pinwatch::Builder::new()
            .tracing(false)
            .control(Control::Off)
            .build(&mut tokio)
            .unwrap();
        wait_for("the watchdog to sleep", || {
            detector.stats().watchdog_sleeps >= 1
        });
        let (done, dropped) = mpsc::channel();
        let rt = if runtime_first {
            drop(rt);
            None
        } else {
            Some(rt)
        };
        std::thread::spawn(move || {
            drop(detector);
            let _ = done.send(());
        });
        dropped.recv_timeout(LONG).unwrap_or_else(|_| {
            panic!("the detector's drop hangs (runtime dropped first: {runtime_first})")
        });
        drop(rt);
    }
}

/// The ids of this process's threads whose name starts with `prefix`.
fn threads(prefix: &str) -> std::collections::HashSet<String> {
    switches(prefix).into_keys().collect()
}

/// A current-thread runtime gets no heartbeat: neither pinwatch's task on it nor the
/// `pinwatch-waker` thread (its one thread drives its timers and I/O between polls: the looks
/// tell a stall there without one). A multi-thread runtime gets the thread.
#[test]
fn a_current_thread_runtime_starts_no_heartbeat_thread() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for (mut tokio, wakers) in [
        (tokio::runtime::Builder::new_current_thread(), 0),
        (tokio::runtime::Builder::new_multi_thread(), 1),
    ] {
        let (before, watchdogs) = (threads("pinwatch-waker"), threads("pinwatch-watchd"));
        // (Its start waits for the heartbeat's start: the thread is made by then.)
        let (rt, detector, events) = watched(&mut tokio);
        let new = |now: std::collections::HashSet<String>, before| now.difference(before).count();
        assert_eq!(new(threads("pinwatch-watchd"), &watchdogs), 1);
        assert_eq!(new(threads("pinwatch-waker"), &before), wakers);
        // Nothing is missing: a pin on the current-thread runtime stalls it, as it says; on
        // the multi-thread one, the other worker drives its timers and I/O.
        rt.block_on(rt.spawn(async {
            std::thread::sleep(Duration::from_millis(60));
        }))
        .unwrap();
        drop(rt);
        detector.shutdown();
        let completed: Vec<PinnedEvent> = events
            .try_iter()
            .filter(|e| e.state == State::Completed)
            .collect();
        assert_eq!(completed.len(), 1, "{completed:#?}");
        assert_eq!(completed[0].runtime_stalled, wakers == 0, "{completed:#?}");
    }
}
