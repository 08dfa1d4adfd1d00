//! `#[pinwatch::test]` as a user meets it: `cargo test` on a crate built like a user's
//! (`tests/user-crate`, its own workspace), run as a child; which tests fail, and what they say.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

#[test]
fn pinning_tests_fail_with_the_blocking_line_and_the_others_pass() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let krate = root.join("tests/user-crate");
    // A target directory of its own: the outer `cargo test` holds the workspace's.
    let target = root.join("target/user-crate");
    let out = Command::new(env!("CARGO"))
        .args([
            "test",
            "--locked",
            "--test",
            "pins",
            "--",
            "--test-threads",
            "16",
        ])
        .current_dir(&krate)
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("PINWATCH")
        .env_remove("PINWATCH_THRESHOLD")
        .env_remove("RUSTFLAGS")
        .output()
        .expect("run cargo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let results: BTreeMap<&str, &str> = stdout
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("test ")?;
            let (name, verdict) = rest.rsplit_once(" ... ")?;
            Some((name, verdict))
        })
        .collect();
    assert_eq!(results.len(), 59, "every test ran:\n{stdout}\n{stderr}");
    for (name, verdict) in &results {
        let expected = if name.starts_with("fails_") {
            "FAILED"
        } else {
            "ok"
        };
        assert_eq!(*verdict, expected, "{name}:\n{stdout}");
    }
    // The failures say what pinned and where.
    let failure = |name: &str| -> &str {
        let start = stdout
            .find(&format!("---- {name} stdout ----"))
            .unwrap_or_else(|| panic!("no output of {name}:\n{stdout}"));
        let rest = &stdout[start..];
        let end = rest[5..].find("---- ").map_or(rest.len(), |e| e + 5);
        &rest[..end]
    };
    let body = failure("fails_blocking_in_the_body");
    assert!(
        body.contains("1 poll pinned a worker for 20ms or more"),
        "{body}"
    );
    assert!(
        body.contains("the block_on body (at tests/pins.rs:"),
        "{body}"
    );
    assert!(body.contains("reason=sleep"), "{body}");
    assert!(body.contains("src/lib.rs:7"), "the blocking line: {body}");
    let task = failure("fails_blocking_in_a_task");
    assert!(task.contains(" spawned at tests/pins.rs:19:"), "{task}");
    assert!(task.contains("src/lib.rs:7"), "{task}");
    let own = failure("fails_on_its_own_and_pinned_too");
    assert!(
        own.contains("the test's own failure"),
        "its own message stays: {own}"
    );
    assert!(
        own.contains("1 poll pinned a worker"),
        "the pins are added: {own}"
    );
    // With `pinwatch::tracing_layer()` in the test's subscriber, the span the pin was in.
    let spanned = failure("fails_in_a_request_span");
    assert!(
        spanned.contains(" in request{method=GET uri=/orders/7}, worker "),
        "{spanned}"
    );
    let crowd = failure("fails_crowd_50_pins");
    assert!(crowd.contains("1 poll pinned a worker"), "{crowd}");
}

/// `cargo test` on the user crate's test `name`, with `env` set and the detection variables of
/// this process removed; the verdicts by test name and the output.
fn user_crate_test(name: &str, env: &[(&str, String)]) -> (BTreeMap<String, String>, Output) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(env!("CARGO"))
        .args([
            "test",
            "--locked",
            "--test",
            name,
            "--",
            "--test-threads",
            "2",
        ])
        .current_dir(root.join("tests/user-crate"))
        .env("CARGO_TARGET_DIR", root.join("target/user-crate"))
        .env_remove("PINWATCH")
        .env_remove("PINWATCH_THRESHOLD")
        .env_remove("RUSTFLAGS")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("run cargo");
    let results = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (name, verdict) = l.strip_prefix("test ")?.rsplit_once(" ... ")?;
            Some((name.to_owned(), verdict.to_owned()))
        })
        .collect();
    (results, out)
}

#[test]
fn tests_take_detection_settings_from_the_environment_but_no_exporter_recording_or_socket() {
    // The Prometheus port is held here all along: a test that tried to serve it would fail
    // with "Address already in use", as the second of two parallel tests did.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let outputs = [
        ("PINWATCH_PROMETHEUS_ADDR", format!("127.0.0.1:{port}")),
        (
            "PINWATCH_RECORD",
            dir.path().join("rec.jsonl").display().to_string(),
        ),
        ("PINWATCH_RECORD_MAX_SIZE", "1KB".to_owned()),
        (
            "PINWATCH_CONTROL",
            dir.path().join("ctl").display().to_string(),
        ),
    ];
    let tests = ["env_pins_in_a_task", "env_pins_in_the_body"];
    // The 100 ms pins pass under PINWATCH_THRESHOLD=200ms: it is taken from the environment.
    let mut env = outputs.to_vec();
    env.push(("PINWATCH_THRESHOLD", "200ms".to_owned()));
    let (results, out) = user_crate_test("env", &env);
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let names: Vec<&str> = results.keys().map(String::as_str).collect();
    assert_eq!(names, tests, "both ran:\n{text}");
    for (name, verdict) in &results {
        assert_eq!(verdict, "ok", "{name}:\n{text}");
    }
    // No recording, no rotated file, no control directory or socket.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "the tests wrote {left:?}");
    // Without it, the default 20 ms threshold catches the same pins: the tests above passed
    // because of the variable, not because nothing was watched.
    let (results, out) = user_crate_test("env", &outputs);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let names: Vec<&str> = results.keys().map(String::as_str).collect();
    assert_eq!(names, tests, "both ran:\n{stdout}");
    for (name, verdict) in &results {
        assert_eq!(verdict, "FAILED", "{name}:\n{stdout}");
    }
    assert_eq!(
        stdout
            .matches("1 poll pinned a worker for 20ms or more")
            .count(),
        2,
        "{stdout}"
    );
    drop(held);
}
