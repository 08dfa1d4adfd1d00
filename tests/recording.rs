//! The recording and the environment, end to end, through a real sample binary.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn deadlock() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_deadlock"));
    c.env_remove("PINWATCH")
        .env_remove("PINWATCH_THRESHOLD")
        .env_remove("PINWATCH_RECORD")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

#[test]
fn a_stuck_worker_is_on_disk_when_the_process_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pinned.jsonl");
    let mut child = deadlock()
        .env("PINWATCH_RECORD", &path)
        .env("PINWATCH_REPORT_INTERVAL", "200ms")
        .spawn()
        .unwrap();
    // Wait (bounded) for two reports of the stuck worker, then SIGKILL.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if text.matches("\"in_progress\"").count() >= 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no in_progress events in {text:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let child_pid = child.id();
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.ends_with('\n'), "last line cut: {text:?}");
    let events: Vec<pinwatch::PinnedEvent> = text
        .lines()
        .map(|l| pinwatch::PinnedEvent::from_json_line(l).expect(l))
        .collect();
    assert!(events.len() >= 2);
    for e in &events {
        assert_eq!(e.state, pinwatch::State::InProgress);
        assert_eq!(e.id, events[0].id, "one stuck poll");
        assert!(e.spawned_at.as_ref().unwrap().file.ends_with("deadlock.rs"));
    }
    let v: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(v["schema"], pinwatch::event::RECORD_SCHEMA);
    assert_eq!(v["pid"], child_pid);
    assert!(v["run_id"].as_str().is_some_and(|r| r.len() >= 16), "{v}");
    assert_eq!(v["event"], "pinned");
}

/// Runs `cmd`, which must fail at start-up; its exit code and standard error.
fn failure(mut cmd: Command) -> (Option<i32>, String) {
    let mut child = cmd.spawn().unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.code(), err)
}

#[test]
fn a_bad_environment_value_stops_the_program_and_names_the_variable() {
    for (var, value) in [
        ("PINWATCH_THRESHOLD", "fast"),
        ("PINWATCH_STACKS", "medium"),
        ("PINWATCH", "perhaps"),
    ] {
        let mut cmd = deadlock();
        cmd.env(var, value);
        let (code, err) = failure(cmd);
        assert_eq!(code, Some(2), "{var}={value}: {err}");
        assert!(err.contains(var) && err.contains(value), "{err}");
    }
}

#[test]
fn an_unwritable_recording_is_an_error_naming_the_path() {
    let mut cmd = deadlock();
    cmd.env("PINWATCH_RECORD", "/nonexistent-dir/pinned.jsonl");
    let (code, err) = failure(cmd);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("/nonexistent-dir/pinned.jsonl"), "{err}");
}
