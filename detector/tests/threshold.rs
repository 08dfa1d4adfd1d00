//! Where the threshold is: polls blocked for durations around it, many times each. A poll
//! blocked for the threshold plus a scan interval is reported (most of the time even on a
//! loaded machine: the watchdog itself can be kept off a CPU), one blocked for half the
//! threshold never is, and no reported duration is shorter than the poll really ran. The real
//! curve is printed by `cargo run --release -p pinwatch --example threshold_curve`.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use pinwatch::State;
use support::{builder, multi_thread, watch, Collected};

/// Tries per duration.
const TRIES: usize = 40;

/// Whether the kernel keeps time with the CPU's time-stamp counter, so that pinwatch stamps the
/// starts of polls where they are rare.
fn stamps_here() -> bool {
    cfg!(target_arch = "x86_64")
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|s| s.trim() == "tsc")
}

#[test]
fn polls_past_the_threshold_are_reported_and_short_ones_never() {
    let (stats, rate) = threshold_curve(|b| b);
    // Each poll of 10 ms and more is stamped, and looked at first when 7 ms old (some of the
    // first ones run before the counter's rate is known).
    if stamps_here() {
        assert!(stats.stamped_polls >= 150, "{stats:?}");
        // From its stamp a poll's age is exact: one blocked 1 ms past the threshold is no
        // longer left to the timing of the looks (40/40 here, idle or with both cores busy).
        // Loose, for a watchdog that waits for a CPU.
        assert!(
            rate[&21] >= TRIES / 2,
            "21 ms polls reported {}/{TRIES}",
            rate[&21]
        );
    } else {
        println!("no stamps here: the clock source is not the time-stamp counter");
    }
}

/// The first poll of a fresh runtime is stamped: the counter's rate is known before its first
/// task runs. It was found by the scans after 50 ms, and a runtime's first polls were bounded by
/// the looks: its first 19 ms sleep was reported as 21-23 ms in 6 of 10 runs (helper-106).
#[test]
fn the_first_poll_of_a_fresh_runtime_is_stamped() {
    if !stamps_here() {
        println!("no stamps here: the clock source is not the time-stamp counter");
        return;
    }
    let events = Collected::default();
    let rt = watch(builder(&events), &mut multi_thread(2));
    rt.block_on(async {
        tokio::spawn(async { std::thread::sleep(Duration::from_millis(30)) })
            .await
            .unwrap()
    });
    let stats = rt.shutdown();
    assert_eq!(stats.stamped_polls, 1, "{stats:?}");
}

#[test]
fn the_same_with_looks_every_scan_interval() {
    let (stats, _) = threshold_curve(|b| b.__no_stamps());
    assert_eq!(stats.stamped_polls, 0, "{stats:?}");
}

/// Polls that ran 1 ms apart over `polls` ms — timer wake-ups, nothing near the threshold — and
/// the watchdog's scans a second meanwhile.
fn scans_per_second(builder: pinwatch::Builder, polls: u32) -> f64 {
    let rt = watch(builder, &mut multi_thread(2));
    let before = rt.detector.stats().watchdog_scans;
    let start = Instant::now();
    rt.block_on(async {
        tokio::spawn(async move {
            for _ in 0..polls {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .unwrap()
    });
    let scans = rt.detector.stats().watchdog_scans - before;
    scans as f64 / start.elapsed().as_secs_f64()
}

#[test]
fn stamped_polls_let_the_watchdog_look_less_often() {
    let events = Collected::default();
    let rate = scans_per_second(builder(&events), 500);
    println!("stamped: {rate:.0} scans/s");
    if stamps_here() {
        // A scan every 18 ms (56 a second; measured 76) while nothing runs that long, where the
        // watchdog reads the workers' accounting before their polls begin; every 7 ms (143,
        // measured 157) where it cannot; against one every 2 ms (500) without stamps. A loaded
        // machine only makes it scan less.
        let readable = std::fs::read_to_string("/proc/thread-self/schedstat").is_ok();
        let bound = if readable { 110.0 } else { 250.0 };
        assert!(rate < bound, "{rate:.0} scans/s");
    }
}

/// A completed pin is held `VICTIM_WINDOW` (50 ms) for the tasks it delayed before its report
/// goes out. Where polls are stamped (and without `schedule-latency`, whose rings of waits are
/// read every scan interval) that wait is a time to wake at, not a look every 2 ms: the scans
/// from the pin's end to its report's arrival come at the stamped cadence (before: 25 in the
/// window, about 450 a second). With `schedule-latency` they stay every interval. (That the
/// watchdog wakes at the report's time is `stamps::due`'s unit test.)
#[test]
fn a_pin_held_for_its_victims_costs_no_look_every_interval() {
    let events = Collected::default();
    let rt = watch(builder(&events), &mut multi_thread(2));
    let pin = |rt: &support::Watched| {
        rt.block_on(async {
            tokio::spawn(async { std::thread::sleep(Duration::from_millis(60)) })
                .await
                .unwrap()
        })
    };
    let completed = |n: usize| {
        events
            .wait_for(Duration::from_secs(60), |_| events.completed().len() >= n)
            .expect("the pin's completed report")
    };
    // The first pin of a process loads its symbols (a slow report): not in the window.
    pin(&rt);
    completed(1);
    pin(&rt);
    let rate = scans_a_second(&rt, || completed(2));
    println!("from a pin's end to its report: {rate:.0} scans/s");
    // Without the feature, measured 60–90, idle or with both cores busy; with it, 350–450 (a
    // look every 18 ms would be about 70).
    assert_not_every_interval(rate);
}

/// The watchdog's scans a second while `f` runs.
fn scans_a_second<T>(rt: &support::Watched, f: impl FnOnce() -> T) -> f64 {
    let (scans, start) = (rt.stats().watchdog_scans, Instant::now());
    f();
    (rt.stats().watchdog_scans - scans) as f64 / start.elapsed().as_secs_f64()
}

/// Where polls are stamped: `rate` (scans a second) is not a scan every interval (500), but
/// with `schedule-latency`, whose workers' rings of measured waits (16 each) are read every
/// scan while a pin is followed or held. Loose: a late heartbeat, where the drivers cannot be
/// seen, brings back a scan every interval.
fn assert_not_every_interval(rate: f64) {
    if !stamps_here() {
        return;
    }
    if cfg!(feature = "schedule-latency") {
        assert!(rate > 150.0, "{rate:.0} scans/s");
    } else {
        assert!(rate < 250.0, "{rate:.0} scans/s");
    }
}

/// A pin is followed while it runs at its next stack sample or report, at the drivers' next
/// look, and in time for a poll after it (every 7 ms at the defaults), where polls are stamped
/// (and without `schedule-latency`): not every scan interval. The thread stamps the poll's end
/// itself, and the completed report is held 50 ms past it anyway. The scans from the first
/// report of a 400 ms pin to its completed report: before, one every 2 ms for as long as it
/// ran (425 a second).
#[test]
fn a_running_pin_costs_no_look_every_interval() {
    let events = Collected::default();
    let rt = watch(builder(&events), &mut multi_thread(2));
    let pin = |ms: u64| rt.spawn(async move { std::thread::sleep(Duration::from_millis(ms)) });
    let reported = |n: usize, state: State| {
        events
            .wait_for(Duration::from_secs(60), |_| {
                let ids: std::collections::HashSet<u64> = events
                    .all()
                    .into_iter()
                    .filter(|e| e.state == state)
                    .map(|e| e.id)
                    .collect();
                ids.len() >= n
            })
            .expect("the pin's report")
    };
    // The first pin of a process loads its symbols (a slow report): not in the window.
    rt.block_on(pin(60)).unwrap();
    reported(1, State::Completed);
    let running = pin(400);
    reported(2, State::InProgress);
    let rate = scans_a_second(&rt, || {
        rt.block_on(running).unwrap();
        reported(2, State::Completed)
    });
    println!("while a pin runs, and to its report: {rate:.0} scans/s");
    // Every interval while the drivers stand still (until a worker takes them over), then every
    // 7 ms: measured 185.
    assert_not_every_interval(rate);
}

/// A poll that runs on a CPU past the threshold right after its thread blocked, under the
/// threshold, in the poll before (4–15 ms, then 24 ms of CPU time): the reading the watchdog
/// took before the second poll began spans the first one's block, which the thread's
/// accounting cannot tell from time before the poll, so the poll was looked at closely only at
/// 16 ms and credited a quarter of the threshold for it — after 8–15 ms blocks, reported 1 time
/// in 40. A first look that finds its thread blocked before the poll looks at it closely at a
/// quarter of the threshold, still from the reading (dropping the reading instead lost what it
/// credits a poll first seen at 9–14 ms: after 4–6 ms blocks, 0–30 in 40).
#[test]
fn a_cpu_bound_poll_right_after_a_blocked_one_is_reported() {
    let events = Collected::default();
    let rt = watch(builder(&events), &mut multi_thread(2));
    let ids: Vec<u64> = (0..TRIES as u64)
        .map(|i| {
            let id = rt.block_on(async move {
                tokio::spawn(async move {
                    std::thread::sleep(Duration::from_millis(4 + i % 12));
                    tokio::task::yield_now().await;
                    support::spin_cpu(Duration::from_millis(24));
                    tokio::task::id().to_string().parse().unwrap()
                })
                .await
                .unwrap()
            });
            // The next try on a watchdog at its cadence with nothing pinned: a completed pin
            // is held for its victims (50 ms), and the looks around it are denser.
            events.wait_for(Duration::from_secs(1), |e| {
                e.state == State::Completed && e.task_id == Some(id)
            });
            id
        })
        .collect();
    let stats = rt.shutdown();
    let reported: std::collections::HashSet<u64> = events
        .all()
        .into_iter()
        .filter(|e| e.state == State::Completed)
        .filter_map(|e| e.task_id)
        .collect();
    let n = ids.iter().filter(|id| reported.contains(id)).count();
    println!("{n}/{TRIES} reported; {stats:?}");
    // Loose, for a watchdog that waits for a CPU on a loaded machine.
    assert!(n >= TRIES / 2, "{n}/{TRIES} reported");
}

/// A report or sample interval too long to add to an instant ("never") leaves the watchdog
/// following a pin as it does without one: it reports the pin and its end.
#[test]
fn huge_report_and_sample_intervals_still_report_a_pin() {
    for huge in [
        |b: pinwatch::Builder| b.report_interval(Duration::MAX),
        |b: pinwatch::Builder| b.sample_interval(Duration::MAX),
    ] {
        let events = Collected::default();
        let rt = watch(huge(builder(&events)), &mut multi_thread(2));
        rt.block_on(async {
            tokio::spawn(async { std::thread::sleep(Duration::from_millis(150)) })
                .await
                .unwrap()
        });
        let completed = events.wait_for(Duration::from_secs(60), |e| e.state == State::Completed);
        assert!(completed.is_some(), "{:?}", events.all());
    }
}

/// The curve of the test above with the builder `with` makes of the test's: the detector's
/// counters at the end, and how many of the polls of each duration (ms) were reported.
fn threshold_curve(
    with: impl Fn(pinwatch::Builder) -> pinwatch::Builder,
) -> (pinwatch::Stats, HashMap<u64, usize>) {
    let events = Collected::default();
    // The defaults: 20 ms threshold, 2 ms scan interval.
    let rt = watch(with(builder(&events)), &mut multi_thread(2));
    let threshold = rt.detector.settings().unwrap().threshold;
    assert_eq!(threshold, Duration::from_millis(20));
    let durations = [10u64, 19, 21, 22, 25, 30];
    // Per duration, each poll's task id and how long it really blocked (timed inside it).
    let mut runs: Vec<(u64, Vec<(u64, Duration)>)> = Vec::new();
    for &ms in &durations {
        let mut these = Vec::with_capacity(TRIES);
        for _ in 0..TRIES {
            these.push(rt.block_on(async move {
                tokio::spawn(async move {
                    let start = Instant::now();
                    std::thread::sleep(Duration::from_millis(ms));
                    let real = start.elapsed();
                    let id: u64 = tokio::task::id().to_string().parse().unwrap();
                    (id, real)
                })
                .await
                .unwrap()
            }));
        }
        runs.push((ms, these));
    }
    // Every poll has ended: the last scan completes whatever it had flagged.
    let stats = rt.shutdown();
    assert_eq!(stats.dropped, 0, "{stats:?}");
    let completed: HashMap<u64, Duration> = events
        .all()
        .into_iter()
        .filter(|e| e.state == State::Completed)
        .filter_map(|e| Some((e.task_id?, e.duration)))
        .collect();
    let mut rate = HashMap::new();
    for (ms, these) in &runs {
        let mut reported = 0;
        for (id, real) in these {
            if let Some(&d) = completed.get(id) {
                reported += 1;
                // The reported start is at or before the poll's, the end its exact end.
                assert!(d >= *real, "{ms} ms: reported {d:?}, ran {real:?}");
            }
        }
        println!("{ms:>3} ms: {reported}/{TRIES} reported");
        rate.insert(*ms, reported);
    }
    // Half the threshold: idle, never. On a loaded machine a worker that waited for a CPU
    // around its poll can be credited part of that wait (up to a quarter of the threshold
    // before the watchdog's second look, a scheduler tick after it): 1 in 120 such polls was
    // reported in runs with both cores busy. Rare is what is promised there, and tested.
    assert!(
        rate[&10] <= TRIES / 20,
        "10 ms polls reported {}/{TRIES} at a 20 ms threshold",
        rate[&10]
    );
    // The threshold plus one scan interval: reported nearly always while the watchdog looks on
    // time (the curve above; the bound is loose for a loaded machine, on which the watchdog
    // itself waits for a CPU). Before the fix: 0–3 in 40.
    assert!(
        rate[&22] >= TRIES / 2,
        "22 ms polls reported {}/{TRIES}",
        rate[&22]
    );
    assert!(
        rate[&30] >= TRIES * 7 / 10,
        "30 ms polls reported {}/{TRIES}",
        rate[&30]
    );
    (stats, rate)
}
