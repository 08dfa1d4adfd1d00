//! `#[pinwatch::test]` with `#[should_panic]`: any panic passes such a test, so a pin that its
//! `expected` does not name, which fails other tests by panicking, must fail it another way — by
//! returning; a pin that `expected` names passes it. Each case runs in a child process (this
//! test binary, re-executed on one `#[ignore]`d test), whose result is checked.

use std::process::Command;
use std::time::Duration;

/// Runs the ignored test `name` alone in a child process: whether it passed, and its output.
fn child(name: &str) -> (bool, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--ignored", "--test-threads=1"])
        .env_remove("PINWATCH")
        .env_remove("PINWATCH_THRESHOLD")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn a_should_panic_test_that_pins_and_does_not_panic_fails() {
    let (passed, out) = child("child_pins_without_panicking");
    assert!(!passed, "the test passed:\n{out}");
    assert!(out.contains("pinned a worker"), "{out}");
    assert!(out.contains("it fails by not panicking"), "{out}");
}

#[test]
fn a_should_panic_test_that_pins_then_panics_as_expected_fails() {
    let (passed, out) = child("child_pins_then_panics_as_expected");
    assert!(!passed, "the test passed:\n{out}");
    assert!(out.contains("pinned a worker"), "{out}");
    assert!(out.contains("the body's own panic was caught"), "{out}");
}

/// `expected` meant for the body's own panic does not let a pin through by matching the pin
/// report's file or function names: only the failure's first line is matched.
#[test]
fn an_expected_string_in_the_pins_stack_does_not_pass_the_pin() {
    let (passed, out) = child("child_pins_with_expected_in_its_function_name");
    assert!(!passed, "the test passed:\n{out}");
    assert!(out.contains("pinned a worker"), "{out}");
}

#[pinwatch::test]
#[ignore = "run in a child process by the test above it"]
#[should_panic(expected = "with_expected_in_its_function_name")]
async fn child_pins_with_expected_in_its_function_name() {
    std::thread::sleep(Duration::from_millis(200));
}

#[test]
fn a_should_panic_test_that_panics_without_pinning_passes() {
    let (passed, out) = child("child_panics_without_pinning");
    assert!(passed, "the test failed:\n{out}");
    assert!(out.contains("1 passed"), "{out}");
}

#[pinwatch::test]
#[ignore = "run in a child process by the test above it"]
#[should_panic]
async fn child_pins_without_panicking() {
    std::thread::sleep(Duration::from_millis(200));
}

#[pinwatch::test]
#[ignore = "run in a child process by the test above it"]
#[should_panic(expected = "the body fails")]
async fn child_pins_then_panics_as_expected() {
    std::thread::sleep(Duration::from_millis(200));
    panic!("the body fails");
}

#[test]
fn a_should_panic_test_that_expects_the_pin_passes() {
    let (passed, out) = child("child_pins_as_expected");
    assert!(passed, "the test failed:\n{out}");
    let (passed, out) = child("child_pins_as_expected_name_value");
    assert!(passed, "the test failed:\n{out}");
}

#[pinwatch::test]
#[ignore = "run in a child process by the test above it"]
#[should_panic(expected = "pinned a worker")]
async fn child_pins_as_expected() {
    std::thread::sleep(Duration::from_millis(200));
}

#[pinwatch::test]
#[ignore = "run in a child process by the test above it"]
#[should_panic = "pinned a worker"]
async fn child_pins_as_expected_name_value() {
    std::thread::sleep(Duration::from_millis(200));
}

#[pinwatch::test]
#[ignore = "run in a child process by the test above it"]
#[should_panic(expected = "the body fails")]
async fn child_panics_without_pinning() {
    tokio1::task::yield_now().await;
    panic!("the body fails");
}
