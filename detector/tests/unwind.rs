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
