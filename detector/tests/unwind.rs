//! Polls that end by unwinding: the time the panic machinery takes (the panic hook printing the
//! message and, with `RUST_BACKTRACE=1`, symbolizing a backtrace inside the poll — hundreds of
//! milliseconds the first time in a debug build) is not a pin. Each case runs in a child
//! process (this test binary, re-executed with `RUST_BACKTRACE=1`), so that its panic is the
//! first of the process and its backtrace symbolized from nothing.

mod support;

use std::process::Output;
use std::time::{Duration, Instant};

use pinwatch::State;

const CHILD: &str = "PINWATCH_TEST_UNWIND_CHILD";

/// What the slow panic hook of the task cases adds, on top of std's: a panic hook that takes
/// this long (std's symbolizing a backtrace takes about as long, but not reliably).
const SLOW_HOOK: Duration = Duration::from_millis(300);

fn child(name: &str, ignored: bool) -> Output {
    let mut cmd = support::rerun(name, CHILD);
    if ignored {
        cmd.arg("--ignored");
    }
    cmd.env("RUST_BACKTRACE", "1")
        // The detection settings the child's checks take from the environment: the defaults.
        .env_remove("PINWATCH")
        .env_remove("PINWATCH_THRESHOLD")
        .output()
        .unwrap()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Sets a panic hook that runs the one before it (std's), then sleeps: as std's own when it
/// symbolizes a first backtrace, but always slow. Set before the detector starts, so that
/// pinwatch's hook runs first and then calls this one.
fn slow_panic_hook() {
    let std_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        std_hook(info);
        std::thread::sleep(SLOW_HOOK);
    }));
}

#[test]
fn a_pinwatch_test_that_panics_reports_no_pin() {
    let out = child("unwind_child_pinwatch_test_panics", true);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(
        stderr.contains("the test fails here") && stderr.contains("stack backtrace"),
        "the child's panic, with its backtrace:\n{stderr}"
    );
    // Check::run prints the pins of a test that panics before the panic goes on.
    assert!(
        !stderr.contains("pinned a worker"),
        "a pin reported for the panic machinery:\n{stderr}"
    );
}

/// The child's half: a `#[pinwatch::test]` whose body panics (only when the test above runs it).
#[pinwatch::test]
#[ignore = "run by a_pinwatch_test_that_panics_reports_no_pin, in a child process"]
#[should_panic(expected = "the test fails here")]
async fn unwind_child_pinwatch_test_panics() {
    tokio::task::yield_now().await;
    assert_eq!(1 + 1, 3, "the test fails here");
}

#[test]
fn a_task_that_panics_reports_no_pin() {
    let out = child("unwind_child_task_panics", false);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(
        stderr.contains("the task fails here") && stderr.contains("stack backtrace"),
        "the child's panic, with its backtrace:\n{stderr}"
    );
    assert!(
        stdout.contains("unwind child: 0 pins"),
        "{stdout}\n{stderr}"
    );
}

#[test]
fn unwind_child_task_panics() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    slow_panic_hook();
    let (joined, pins) = pinwatch::testing::Check::new()
        .multi_thread(Some(2))
        .run(async { tokio::spawn(async { panic!("the task fails here") }).await });
    assert!(joined.unwrap_err().is_panic());
    println!("unwind child: {} pins {pins:#?}", pins.len());
}

#[test]
fn a_task_pinned_before_it_panics_is_reported_without_the_panic() {
    let out = child("unwind_child_pinned_task_panics", false);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    let line = result(&stdout, &stderr);
    let (pins, reported, blocked, machinery) = (
        ms(line, "pins"),
        ms(line, "reported_ms"),
        ms(line, "blocked_ms"),
        ms(line, "machinery_ms"),
    );
    assert_eq!(pins, 1, "{stdout}");
    // The panic hook and the unwinding took longer than the block: were they counted, the
    // report would be the block plus them.
    assert!(machinery >= SLOW_HOOK.as_millis() as u64, "{line}");
    assert!(reported >= blocked, "{line}");
    assert!(
        reported < blocked + SLOW_HOOK.as_millis() as u64 / 2,
        "the report counts the panic machinery: {line}"
    );
}

#[test]
fn unwind_child_pinned_task_panics() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    slow_panic_hook();
    let ((blocked, machinery), pins) =
        pinwatch::testing::Check::new()
            .multi_thread(Some(2))
            .run(async {
                let (tx, rx) = std::sync::mpsc::channel();
                let joined = tokio::spawn(async move {
                    let start = Instant::now();
                    std::thread::sleep(Duration::from_millis(100));
                    let _ = tx.send((start.elapsed(), Instant::now()));
                    panic!("the task fails here");
                })
                .await;
                let done = Instant::now();
                assert!(joined.unwrap_err().is_panic());
                let (blocked, panicked) = rx.recv().unwrap();
                (blocked, done.duration_since(panicked))
            });
    let completed: Vec<_> = pins
        .iter()
        .filter(|p| p.state == State::Completed)
        .collect();
    println!(
        "unwind child: pins={} reported_ms={} blocked_ms={} machinery_ms={}",
        completed.len(),
        completed.first().map_or(0, |p| p.duration.as_millis()),
        blocked.as_millis(),
        machinery.as_millis(),
    );
}

/// A poll that catches a panic (`catch_unwind`) and goes on is watched after the catch: a
/// block before the panic and one after it are one pin, timed without the panic hook.
#[test]
fn a_poll_that_catches_a_panic_is_watched_after_it() {
    let out = child("unwind_child_caught_then_blocks", false);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(
        stderr.contains("caught here"),
        "the child's panic:\n{stderr}"
    );
    let line = result(&stdout, &stderr);
    let hook = SLOW_HOOK.as_millis() as u64;
    assert_eq!(ms(line, "pins"), 1, "{line}");
    let (reported, blocked) = (ms(line, "reported_ms"), ms(line, "blocked_ms"));
    assert!(
        reported >= blocked,
        "the block after the catch is missing: {line}"
    );
    assert!(
        reported < blocked + hook / 2,
        "the pin counts the hook: {line}"
    );
}

#[test]
fn unwind_child_caught_then_blocks() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    slow_panic_hook();
    let (blocked, pins) = pinwatch::testing::Check::new()
        .multi_thread(Some(2))
        .run(async {
            tokio::spawn(async {
                let start = Instant::now();
                std::thread::sleep(Duration::from_millis(100));
                let before = start.elapsed();
                let caught = std::panic::catch_unwind(|| panic!("caught here"));
                assert!(caught.is_err());
                let start = Instant::now();
                std::thread::sleep(Duration::from_millis(150));
                before + start.elapsed()
            })
            .await
            .unwrap()
        });
    print_result(&pins, blocked);
}

/// A poll that catches one panic after another, each sooner than the threshold after the
/// last, and blocks between them holds its worker for all the blocks: one pin, for their sum,
/// none of the hooks' time in it (a timing restarted at each panic would see no pin at all).
#[test]
fn a_poll_that_catches_many_panics_is_one_pin_without_their_hooks() {
    let out = child("unwind_child_catches_many", false);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    let line = result(&stdout, &stderr);
    let hooks = MANY * MANY_HOOK.as_millis() as u64;
    assert_eq!(ms(line, "pins"), 1, "{line}");
    let (reported, blocked) = (ms(line, "reported_ms"), ms(line, "blocked_ms"));
    assert!(reported >= blocked, "{line}");
    assert!(
        reported < blocked + hooks / 2,
        "the pin counts the hooks: {line}"
    );
}

/// Panics the many-panics child catches, and how long each one's hook takes; the block after
/// each is shorter than the threshold.
const MANY: u64 = 30;
const MANY_HOOK: Duration = Duration::from_millis(15);

#[test]
fn unwind_child_catches_many() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    // Instead of std's (30 messages): only slow. Set before the detector starts, so that
    // pinwatch's hook calls it.
    std::panic::set_hook(Box::new(|_| std::thread::sleep(MANY_HOOK)));
    let (blocked, pins) = pinwatch::testing::Check::new()
        .multi_thread(Some(2))
        .run(async {
            tokio::spawn(async {
                let mut blocked = Duration::ZERO;
                for _ in 0..MANY {
                    let caught = std::panic::catch_unwind(|| panic!("caught again"));
                    assert!(caught.is_err());
                    let start = Instant::now();
                    std::thread::sleep(Duration::from_millis(10));
                    blocked += start.elapsed();
                }
                blocked
            })
            .await
            .unwrap()
        });
    print_result(&pins, blocked);
}

/// The child's result line: its completed pins and, of the first, how long it was reported;
/// `blocked`, how long the task blocked by its own clock.
fn print_result(pins: &[pinwatch::PinnedEvent], blocked: Duration) {
    let completed: Vec<_> = pins
        .iter()
        .filter(|p| p.state == State::Completed)
        .collect();
    println!(
        "unwind child: pins={} reported_ms={} blocked_ms={}",
        completed.len(),
        completed.first().map_or(0, |p| p.duration.as_millis()),
        blocked.as_millis(),
    );
}

/// How long a pin held its worker by the wall clock, less its waits for a CPU.
fn held_ms(pin: &pinwatch::PinnedEvent) -> u128 {
    pin.duration.saturating_sub(pin.cpu_wait).as_millis()
}

/// The result line a child printed.
fn result<'a>(stdout: &'a str, stderr: &str) -> &'a str {
    stdout
        .lines()
        .find_map(|l| Some(l.split_once("unwind child: ")?.1))
        .unwrap_or_else(|| panic!("no result from the child:\n{stdout}\n{stderr}"))
}

/// The value of `key=` in a result line.
fn ms(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
}

/// How long each panic hook of the contended child waits for a CPU at least.
const HOOK_WAIT: Duration = Duration::from_millis(250);

/// The contended hooks' waits for a CPU, summed (ns), as each hook read its own.
static HOOKS_WAITED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The calling thread's time on a CPU and waiting for one, from the kernel's accounting.
fn own_schedstat() -> (Duration, Duration) {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    let mut f = text.split_whitespace().map(|n| n.parse::<u64>().unwrap());
    let (on, waiting) = (f.next().unwrap(), f.next().unwrap());
    (Duration::from_nanos(on), Duration::from_nanos(waiting))
}

/// Sets a panic hook that, after std's, computes on a CPU it shares with a spinning thread
/// until it has waited [`HOOK_WAIT`] for that CPU (as std's symbolizing a backtrace computes,
/// on a busy machine): a hook whose time on and off the CPU is all the panic machinery's.
fn contended_panic_hook() {
    let std_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        std_hook(info);
        let cpu = support::first_allowed_cpu();
        let affinity = support::affinity();
        support::pin_current_thread(cpu);
        let spinner = support::Hogs::start(cpu, 1);
        let (_, waited_before) = own_schedstat();
        let give_up = Instant::now() + Duration::from_secs(20);
        let mut waited = Duration::ZERO;
        while waited < HOOK_WAIT && Instant::now() < give_up {
            waited = own_schedstat().1 - waited_before;
        }
        drop(spinner);
        support::set_affinity(&affinity);
        HOOKS_WAITED.fetch_add(
            waited.as_nanos() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }));
}

/// A pinned poll that panics, catches it, blocks again and then panics out: its panic hooks
/// computed and waited for a CPU (as std's symbolizing a backtrace on a busy machine does),
/// yet the pin's reason is the sleep that pinned it, and its `cpu_wait` leaves their waits
/// out. The hooks' time was left out of the duration only: their CPU time made the probe after
/// them `cpu`, and their waits counted as the pin's (helper-106).
#[test]
fn a_pins_panic_hooks_count_neither_in_its_reason_nor_its_cpu_wait() {
    let out = child("unwind_child_contended_hooks", false);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    let line = result(&stdout, &stderr);
    assert_eq!(ms(line, "pins"), 1, "{line}");
    let hooks = ms(line, "hooks_waited_ms");
    assert!(
        hooks >= 2 * HOOK_WAIT.as_millis() as u64,
        "the hooks did not wait: {line}"
    );
    assert!(line.contains("reason=sleep"), "{line}");
    // It slept 200 ms, and its own waits for a CPU (a loaded machine) lengthen it as much as
    // they count: what is left is its sleeps, less the few ms between the hook's clock and its
    // accounting. Had the hooks' 500 ms of waits counted, nothing would be.
    assert!(
        ms(line, "held_ms") >= 150,
        "the pin's cpu_wait counts the hooks' waits: {line}"
    );
}

#[test]
fn unwind_child_contended_hooks() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    contended_panic_hook();
    // The runtime is kept until the pin's completed report has come: its thread's accounting
    // is read then (read after the thread has ended, it would say no wait at all).
    let (tx, rx) = std::sync::mpsc::channel();
    let builder = pinwatch::Builder::new()
        .tracing(false)
        .sink(move |e: &pinwatch::PinnedEvent| {
            if e.state == State::Completed {
                let _ = tx.send(e.clone());
            }
        });
    let rt = support::watch(builder, &mut support::multi_thread(2));
    let joined = rt.block_on(async {
        tokio::spawn(async {
            std::thread::sleep(Duration::from_millis(100));
            assert!(std::panic::catch_unwind(|| panic!("caught here")).is_err());
            std::thread::sleep(Duration::from_millis(100));
            panic!("the task fails here");
        })
        .await
    });
    assert!(joined.unwrap_err().is_panic());
    let pin = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("a completed pin");
    rt.shutdown();
    let later: Vec<_> = rx.try_iter().collect();
    println!(
        "unwind child: pins={} reason={} cpu_wait_ms={} held_ms={} hooks_waited_ms={}",
        1 + later.len(),
        pin.reason.map_or("none", |r| r.as_str()),
        pin.cpu_wait.as_millis(),
        held_ms(&pin),
        HOOKS_WAITED.load(std::sync::atomic::Ordering::Relaxed) / 1_000_000,
    );
}

/// Polls whose panic hook ran before they were found pinned: the hook waited for a CPU (as
/// std's symbolizing a backtrace on a busy machine does) after the poll's baseline was read,
/// and each pin's `cpu_wait` leaves that out as it leaves out a hook's after the flag
/// (helper-108: 394–545 ms of a 215 ms pin). Four rounds, a runtime each: in each, a hook
/// after the baseline (rather than before the look that reads it) is a matter of the
/// watchdog's timing, and the old code went wrong in about half of them.
#[test]
fn a_hook_before_a_pin_is_flagged_counts_not_in_its_cpu_wait() {
    // Each slept 212 ms (see the contended hooks' test).
    waiting_hook_rounds_held("unwind_child_hook_before_the_flag", ROUNDS, 160);
}

/// The hook-before-the-flag child's rounds.
const ROUNDS: u64 = 4;

#[test]
fn unwind_child_hook_before_the_flag() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    // Past the look that reads the poll's baseline (a quarter of the threshold), short of the
    // flag. A runtime of its own each: on a thread the watchdog has read before, the baseline
    // is read later, after the hook.
    rounds_across_a_waiting_hook(ROUNDS, Duration::from_millis(20), (12, 200));
}

/// Runs a child of [`rounds_across_a_waiting_hook`]: each of its `rounds` polls is one pin,
/// its hooks waited, and each pin held its worker, less its waits for a CPU, at least `held`
/// ms.
fn waiting_hook_rounds_held(name: &str, rounds: u64, held: u64) {
    let out = child(name, false);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    let line = result(&stdout, &stderr);
    assert_eq!(ms(line, "pins"), rounds, "{line}\n{stdout}");
    assert!(
        ms(line, "hooks_waited_ms") >= rounds * HOOK_WAIT.as_millis() as u64,
        "the hooks did not wait: {line}"
    );
    assert!(ms(line, "least_held_ms") >= held, "{line}");
}

/// The child's half of [`waiting_hook_rounds_held`]: `rounds` runtimes under `threshold`, a
/// task each that sleeps `sleeps.0` ms, catches a panic whose hook waits for a CPU
/// ([`contended_panic_hook`]) and sleeps `sleeps.1` ms more; prints their pins.
fn rounds_across_a_waiting_hook(rounds: u64, threshold: Duration, sleeps: (u64, u64)) {
    contended_panic_hook();
    let mut pins = Vec::new();
    for _ in 0..rounds {
        let (tx, rx) = std::sync::mpsc::channel();
        let builder = pinwatch::Builder::new()
            .tracing(false)
            .threshold(threshold)
            .sink(move |e: &pinwatch::PinnedEvent| {
                if e.state == State::Completed {
                    let _ = tx.send(e.clone());
                }
            });
        let rt = support::watch(builder, &mut support::multi_thread(2));
        rt.block_on(async move {
            tokio::spawn(async move {
                std::thread::sleep(Duration::from_millis(sleeps.0));
                assert!(std::panic::catch_unwind(|| panic!("caught here")).is_err());
                std::thread::sleep(Duration::from_millis(sleeps.1));
            })
            .await
            .unwrap()
        });
        // The runtime is kept until the pin's report has come (see the contended hooks' child);
        // a poll found no pin has none: the shutdown's last scan judges it.
        let got = rx.recv_timeout(Duration::from_secs(60));
        rt.shutdown();
        pins.extend(got.into_iter().chain(rx.try_iter()));
    }
    println!(
        "unwind child: pins={} most_cpu_wait_ms={} least_held_ms={} hooks_waited_ms={}",
        pins.len(),
        pins.iter()
            .map(|p| p.cpu_wait.as_millis())
            .max()
            .unwrap_or(0),
        pins.iter().map(held_ms).min().unwrap_or(0),
        HOOKS_WAITED.load(std::sync::atomic::Ordering::Relaxed) / 1_000_000,
    );
}

/// A poll that catches a panic and ends between two looks is judged with every wait for a
/// CPU, as a running one is: its hook's waits are left out of its `cpu_wait` only, and never
/// more than the hook took. Leaving out all the interval's waits, and in the judgement too,
/// made polls of 75 ms held (35 ms on a CPU shared with three spinning threads, 40 ms asleep)
/// 175 ms pins under a 100 ms threshold, in 7 of 8 rounds (helper-109).
#[test]
fn a_caught_panic_makes_no_pin_of_a_preempted_poll() {
    let out = child("unwind_child_preempted_catch", false);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    let line = result(&stdout, &stderr);
    assert_eq!(ms(line, "rounds"), 4, "{line}");
    assert_eq!(ms(line, "pins"), 0, "{line}\n{stdout}");
}

#[test]
fn unwind_child_preempted_catch() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    // A hook of microseconds.
    std::panic::set_hook(Box::new(|_| {}));
    let cpu = support::first_allowed_cpu();
    let hogs = support::Hogs::start(cpu, 3);
    let events = support::Collected::default();
    let builder = support::builder(&events).threshold(Duration::from_millis(100));
    let rt = support::watch(builder, &mut support::one_worker_on(cpu));
    let rounds = 4;
    for _ in 0..rounds {
        rt.block_on(rt.spawn(async {
            support::spin_cpu(Duration::from_millis(20));
            std::thread::sleep(Duration::from_millis(30));
            support::spin_cpu(Duration::from_millis(15));
            assert!(std::panic::catch_unwind(|| panic!("caught here")).is_err());
            std::thread::sleep(Duration::from_millis(10));
        }))
        .unwrap();
    }
    drop(hogs);
    let stats = rt.shutdown();
    println!(
        "unwind child: rounds={rounds} pins={} {:?}",
        stats.pinned_polls,
        events.all()
    );
}

/// A poll that blocks for 200 ms in all, across a caught panic whose hook waited for a CPU
/// (as std's symbolizing a backtrace on a busy machine does), holds its worker for those
/// 200 ms: it is a pin. Its hook's waits, counted against the poll's time off a CPU, made it
/// none: judged by its time on a CPU or blocked less the hook's waits (helper-110: a 130 ms
/// block, 0 of 6).
#[test]
fn a_hook_that_waited_for_a_cpu_hides_no_pin() {
    // (See the contended hooks' test.)
    waiting_hook_rounds_held(
        "unwind_child_blocked_across_a_waiting_hook",
        ACROSS_ROUNDS,
        150,
    );
}

/// The rounds of the children that panic across a poll, a runtime each.
const ACROSS_ROUNDS: u64 = 3;

#[test]
fn unwind_child_blocked_across_a_waiting_hook() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    // Past the look that reads the poll's baseline (a quarter of the threshold), short of half
    // the threshold; then 160 ms more: 200 ms blocked, a margin for a late look at a loaded
    // machine (it credits at most a quarter of the threshold before it).
    rounds_across_a_waiting_hook(ACROSS_ROUNDS, Duration::from_millis(100), (40, 160));
}

/// How long the computing hook of the preempted child computes, by its thread's CPU clock.
const HOOK_CPU: Duration = Duration::from_millis(150);

/// A poll that computes 35 ms on a CPU it shares with three spinning threads (so it holds its
/// worker some 140 ms by the wall clock, most of it waiting for the CPU), across a caught
/// panic whose hook computes 150 ms, held its worker for 35 ms of its own: no pin under a
/// 100 ms threshold. The hook's CPU time counted as the poll's made it one (helper-110: 6 of
/// 6).
#[test]
fn a_hook_that_computed_makes_no_pin_of_a_preempted_poll() {
    let out = child("unwind_child_preempted_across_a_computing_hook", false);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    let line = result(&stdout, &stderr);
    assert_eq!(ms(line, "rounds"), ACROSS_ROUNDS, "{line}");
    assert_eq!(ms(line, "pins"), 0, "{line}\n{stdout}");
}

#[test]
fn unwind_child_preempted_across_a_computing_hook() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    std::panic::set_hook(Box::new(|_| {
        support::spin_cpu(HOOK_CPU);
    }));
    let cpu = support::first_allowed_cpu();
    let hogs = support::Hogs::start(cpu, 3);
    let events = support::Collected::default();
    let builder = support::builder(&events).threshold(Duration::from_millis(100));
    let rt = support::watch(builder, &mut support::one_worker_on(cpu));
    for _ in 0..ACROSS_ROUNDS {
        rt.block_on(rt.spawn(async {
            support::spin_cpu(Duration::from_millis(20));
            assert!(std::panic::catch_unwind(|| panic!("caught here")).is_err());
            support::spin_cpu(Duration::from_millis(15));
        }))
        .unwrap();
    }
    drop(hogs);
    let stats = rt.shutdown();
    println!(
        "unwind child: rounds={ACROSS_ROUNDS} pins={} {:?}",
        stats.pinned_polls,
        events.all()
    );
}

/// A pinned poll that catches a panic whose hook sleeps, then yields; the task's next poll, on
/// the same worker, panics at once, before the watchdog has seen the first poll end. The first
/// is a pin of its block alone: its hook's mark outlives the next poll's panic. With one mark a
/// slot, the next panic overwrote it, and the pin was 250 ms for a 50 ms block, in 12 rounds of
/// 12 (helper-112).
#[test]
fn a_pins_hooks_are_left_out_when_the_next_poll_panics_first() {
    pins_held_without_their_hooks("unwind_child_next_poll_panics");
}

/// Runs a child whose [`ACROSS_ROUNDS`] polls each pin, and whose hooks sleep
/// ([`slow_hook_when_set`]): each pin held its worker, less its waits for a CPU (a loaded
/// machine lengthens it as much), for less than one hook.
fn pins_held_without_their_hooks(name: &str) {
    let out = child(name, false);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    let line = result(&stdout, &stderr);
    assert_eq!(ms(line, "pins"), ACROSS_ROUNDS, "{line}\n{stdout}");
    assert!(
        ms(line, "most_held_ms") < SLOW_HOOK.as_millis() as u64,
        "{line}\n{stdout}"
    );
}

/// Sets a panic hook that sleeps [`SLOW_HOOK`] when the flag it returns is set (clearing it),
/// and does nothing otherwise.
fn slow_hook_when_set() -> &'static std::sync::atomic::AtomicBool {
    static SLOW: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    std::panic::set_hook(Box::new(|_| {
        if SLOW.swap(false, std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(SLOW_HOOK);
        }
    }));
    &SLOW
}

/// The child's result line for [`pins_held_without_their_hooks`].
fn print_pins_held(events: &support::Collected, stats: pinwatch::Stats) {
    let pins = events.completed();
    println!(
        "unwind child: pins={} most_held_ms={} stats_pinned={}",
        pins.len(),
        pins.iter().map(held_ms).max().unwrap_or(0),
        stats.pinned_polls,
    );
}

#[test]
fn unwind_child_next_poll_panics() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let slow = slow_hook_when_set();
    let events = support::Collected::default();
    let cpu = support::first_allowed_cpu();
    let rt = support::watch(support::builder(&events), &mut support::one_worker_on(cpu));
    for _ in 0..ACROSS_ROUNDS {
        rt.block_on(rt.spawn(async {
            std::thread::sleep(Duration::from_millis(50));
            slow.store(true, std::sync::atomic::Ordering::SeqCst);
            assert!(std::panic::catch_unwind(|| panic!("slow hook")).is_err());
            tokio::task::yield_now().await;
            assert!(std::panic::catch_unwind(|| panic!("fast hook")).is_err());
        }))
        .unwrap();
    }
    print_pins_held(&events, rt.shutdown());
}

/// Tasks that panic out one after another on one worker: the first after blocking past the
/// threshold, with a slow hook; the next two at once, before the watchdog looks again. The
/// first is a pin of its block alone: its mark outlives the next two panics (its end keeps
/// it). With the last two polls' marks kept, the third panic dropped it, and its hook was
/// counted: a 19 ms block was a 219 ms pin in 7 of 8 rounds (helper-113).
#[test]
fn a_hooks_mark_outlives_the_panics_of_the_tasks_after_it() {
    pins_held_without_their_hooks("unwind_child_tasks_panic_out_in_a_row");
}

#[test]
fn unwind_child_tasks_panic_out_in_a_row() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let slow = slow_hook_when_set();
    let events = support::Collected::default();
    let cpu = support::first_allowed_cpu();
    let rt = support::watch(
        support::builder(&events).threshold(Duration::from_millis(100)),
        &mut support::one_worker_on(cpu),
    );
    let (tx, next_panicked) = std::sync::mpsc::channel();
    for _ in 0..ACROSS_ROUNDS {
        let tx = tx.clone();
        let first = rt.spawn(async move {
            // Past the threshold: flagged, its end recorded.
            std::thread::sleep(Duration::from_millis(120));
            // The next two run on this worker right after this poll ends, and panic at once.
            tokio::spawn(async move {
                tokio::spawn(async move {
                    let _ = tx.send(());
                    panic!("third");
                });
                panic!("second");
            });
            slow.store(true, std::sync::atomic::Ordering::SeqCst);
            panic!("first");
        });
        assert!(rt.block_on(first).unwrap_err().is_panic());
        next_panicked
            .recv_timeout(Duration::from_secs(60))
            .expect("the third task ran");
    }
    print_pins_held(&events, rt.shutdown());
}
