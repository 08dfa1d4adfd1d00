//! A service whose stdout is a full pipe (`svc | sleep 30`, the reader gone quiet): its log
//! blocks both workers, and pinwatch's `tracing` sink writes through the same log. Nothing of
//! pinwatch's waits for it: the recording has the pins while they last and keeps them through
//! a SIGKILL, the control socket and the Prometheus endpoint answer, and the `tracing` sink's
//! lost events are counted under its own name. With a real pipe nobody reads.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::{counter, free_port, get, pinwatch_cli, wait_for, Proc};

const LONG: Duration = Duration::from_secs(60);

/// The recording's events, every line of it parsed (a line cut short fails the test).
fn events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn status(pid: u32) -> Value {
    let out = Command::new(pinwatch_cli())
        .args(["ctl", &pid.to_string(), "status", "--json"])
        .env_remove("PINWATCH_CONTROL")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ctl status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_full_stdout_pipe_holds_back_nothing_of_pinwatch_s() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec.jsonl");
    let port = free_port();
    // The pipe's read end stays open and unread for the whole test: writes block once it holds
    // 64 KiB.
    let (_unread, stdout) = std::io::pipe().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_stdout_logger"))
        .env("PINWATCH_RECORD", &rec)
        .env("PINWATCH_PROMETHEUS_ADDR", format!("127.0.0.1:{port}"))
        // Small queues and frequent reports: the blocked `tracing` sink's queue fills soon.
        .env("PINWATCH_QUEUE_CAPACITY", "16")
        .env("PINWATCH_REPORT_INTERVAL", "100ms")
        .env_remove("PINWATCH")
        .env_remove("PINWATCH_CONTROL")
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut svc = Proc {
        child,
        name: "stdout_logger".into(),
    };
    let pid = svc.child.id();
    // Both workers pinned by the log: one in write(2) on stdout, one waiting for its lock.
    let pins = wait_for("both workers' pins in the recording", LONG, || {
        let evs = events(&rec);
        let writing = evs
            .iter()
            .find(|e| e["blocking_operation"] == "write" && e["state"] == "in_progress")?
            .clone();
        let waiting = evs
            .iter()
            .find(|e| {
                e["blocking_operation"] == "futex"
                    && e["state"] == "in_progress"
                    && e["worker"]["index"] != writing["worker"]["index"]
            })?
            .clone();
        Some((writing, waiting))
    });
    let (writing, waiting) = pins;
    let advice = |e: &Value| e["advice"].as_str().unwrap_or_default().to_owned();
    assert!(
        advice(&writing).contains("tracing_appender::non_blocking"),
        "{writing}"
    );
    assert!(
        advice(&waiting).contains("stdout/stderr lock")
            && !advice(&waiting).contains("tokio::sync::Mutex"),
        "{waiting}"
    );
    // While stdout stays blocked, the recording goes on: later reports of the same pin, which
    // say that the whole runtime stalled (both workers pinned).
    let id = writing["id"].as_u64().unwrap();
    let before = events(&rec).len();
    wait_for("later reports of the blocked write", LONG, || {
        let evs = events(&rec);
        (evs.len() > before
            && evs.iter().any(|e| {
                e["id"] == id
                    && e["report"].as_u64().unwrap_or(0) >= 5
                    && e["runtime_stalled"] == true
            }))
        .then_some(())
    });
    // The `tracing` sink, blocked on the same stdout, loses its own events, counted; the control
    // socket and the metrics answer.
    let st = wait_for("the tracing sink's drops counted", LONG, || {
        let st = status(pid);
        (counter(&st, "dropped_tracing") > 0).then_some(st)
    });
    assert_eq!(st["pinned"].as_array().unwrap().len(), 2, "{st}");
    let (code, metrics) = get(
        &format!("http://127.0.0.1:{port}/metrics"),
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(code, 200);
    let dropped = metrics
        .lines()
        .find_map(|l| l.strip_prefix("pinwatch_events_dropped_total{sink=\"tracing\"} "))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no tracing drops in\n{metrics}"));
    assert!(dropped > 0.0, "{metrics}");
    assert!(metrics.contains("pinwatch_workers_pinned 2"), "{metrics}");
    // SIGKILL: every line written stays, whole; the pins are in it.
    let lines_blocked = events(&rec).len();
    svc.child.kill().unwrap();
    svc.child.wait().unwrap();
    let kept = events(&rec);
    println!(
        "recording: {lines_blocked} lines while stdout was blocked, {} after SIGKILL",
        kept.len()
    );
    assert!(kept.len() >= lines_blocked);
    assert!(kept
        .iter()
        .any(|e| e["id"] == id && e["blocking_operation"] == "write"));
}

/// A service with no `tracing` subscriber (pinwatch's log on stderr, its default) whose stderr
/// is a full pipe: the `tracing` sink blocks on its own thread, and what it cannot take is
/// counted as its drops — not lost unseen in another queue.
#[test]
fn a_full_stderr_pipe_without_a_subscriber_counts_the_lost_reports() {
    let (_unread, stderr) = std::io::pipe().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_pin_service"))
        .args(["--stuck", "1"])
        .env("PINWATCH_QUEUE_CAPACITY", "16")
        .env("PINWATCH_REPORT_INTERVAL", "100ms")
        .env_remove("PINWATCH")
        .env_remove("PINWATCH_CONTROL")
        .env_remove("PINWATCH_TRACING")
        .stdout(Stdio::null())
        .stderr(Stdio::from(stderr))
        .spawn()
        .unwrap();
    let svc = Proc {
        child,
        name: "pin_service".into(),
    };
    let pid = svc.child.id();
    let st = wait_for("the tracing sink's drops counted", LONG, || {
        let st = status(pid);
        (counter(&st, "dropped_tracing") > 0).then_some(st)
    });
    // The service's pins go on being seen.
    assert!(counter(&st, "events") > 16, "{st}");
}
