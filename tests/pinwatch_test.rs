//! `#[pinwatch::test]` as a user meets it: `cargo test` on a crate built like a user's
//! (`tests/user-crate`, its own workspace), run as a child; which tests fail, and what they say.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

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
    assert_eq!(results.len(), 58, "every test ran:\n{stdout}\n{stderr}");
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
    assert!(task.contains("(spawned at tests/pins.rs:19:"), "{task}");
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
    let crowd = failure("fails_crowd_50_pins");
    assert!(crowd.contains("1 poll pinned a worker"), "{crowd}");
}
