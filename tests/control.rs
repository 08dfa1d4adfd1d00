//! `pinwatch ctl` against a running sample service (`pin_service --commands`), driven only
//! through the CLI and the control socket: status, pins seen live, settings changed at run time,
//! recordings started, stopped and rotated; and the socket's security.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;
use support::service::Service;
use support::{counter, pinwatch_cli, wait_for};

const LONG: Duration = Duration::from_secs(60);

fn ctl_in(dir: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = Command::new(pinwatch_cli());
    cmd.arg("ctl").args(args).env_remove("PINWATCH_CONTROL");
    if let Some(d) = dir {
        cmd.current_dir(d);
    }
    cmd.output().unwrap()
}

/// `pinwatch ctl ARGS`, which must succeed; its stdout.
fn ctl(args: &[&str]) -> String {
    ok(ctl_in(None, args), args)
}

fn ok(out: Output, args: &[&str]) -> String {
    assert!(
        out.status.success(),
        "pinwatch ctl {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn status(target: &str) -> Value {
    serde_json::from_str(&ctl(&[target, "status", "--json"])).unwrap()
}

fn setting(st: &Value, key: &str) -> String {
    st["settings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c[0] == key)
        .unwrap()[1]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Waits until the service's status satisfies `f`.
fn status_until(target: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    wait_for(what, LONG, || {
        let st = status(target);
        f(&st).then_some(st)
    })
}

#[test]
fn status_pins_settings_and_recording_through_ctl() {
    let mut svc = Service::start(&[]);
    let pid = svc.pid.to_string();

    // Its workers, its settings, and the list of services.
    let st = status(&pid);
    assert_eq!(st["workers"], 3);
    assert_eq!(st["flavor"], "multi_thread");
    assert_eq!(st["pinned"].as_array().unwrap().len(), 0);
    assert_eq!(setting(&st, "threshold"), "20ms");
    assert!(st["built_at"]
        .as_str()
        .unwrap()
        .contains("sample-apps/src/bin/pin_service.rs"));
    let socket = PathBuf::from(st["socket"].as_str().unwrap());
    assert_eq!(
        socket,
        pinwatch::control::default_dir().join(format!("{pid}.sock"))
    );
    let list = ctl(&["list"]);
    assert!(
        list.lines()
            .any(|l| l.starts_with(&format!("{pid} ")) && l.contains("pin_service")),
        "{list}"
    );
    // And as JSON: what `ctl` takes, the socket, and the status `status --json` gives.
    let listed: Value = serde_json::from_str(&ctl(&["list", "--json"])).unwrap();
    let me = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["target"] == pid.as_str())
        .unwrap_or_else(|| panic!("{pid} not in {listed:#}"));
    assert_eq!(me["socket"], st["socket"], "{me:#}");
    assert_eq!(me["status"]["pid"], svc.pid, "{me:#}");
    assert_eq!(me["status"]["workers"], 3, "{me:#}");
    assert!(me["error"].is_null(), "{me:#}");
    // In the order the docs give, the status in its own (`pid` first, as `status --json`).
    let text = ctl(&["list", "--json"]);
    let at = |key: &str| text.find(&format!("\"{key}\":")).unwrap_or(usize::MAX);
    assert!(
        at("target") < at("socket") && at("socket") < at("status") && at("status") < at("pid"),
        "{text}"
    );
    assert!(text.contains("\"status\": {\n      \"pid\": "), "{text}");

    // A pin, shown while it lasts.
    svc.send("hold");
    svc.expect("pin_service: holding a worker");
    let st = status_until(&pid, "the held worker in status", |st| {
        st["pinned"][0]["reason"].is_string()
    });
    let pin = &st["pinned"][0];
    assert_eq!(st["pinned"].as_array().unwrap().len(), 1, "{st}");
    assert_eq!(pin["reason"], "other", "{pin}");
    assert!(pin["task_id"].as_u64().is_some(), "{pin}");
    assert!(pin["for_ms"].as_u64().unwrap() >= 20, "{pin}");
    assert!(
        pin["top_frame"]
            .as_str()
            .unwrap()
            .contains("pin_service.rs"),
        "{pin}"
    );
    assert!(
        pin["advice"]
            .as_str()
            .is_some_and(|a| a.contains("spawn_blocking")),
        "{pin}"
    );
    let text = ctl(&[&pid, "status"]);
    assert!(text.contains("pinned now: 1 of 3 workers"), "{text}");
    assert!(text.contains("other (futex)"), "{text}");
    assert!(
        text.contains("advice (other): move the blocking call to tokio::task::spawn_blocking"),
        "{text}"
    );
    let watched = ctl(&[
        &pid,
        "status",
        "--watch",
        "--interval",
        "100ms",
        "--count",
        "2",
    ]);
    assert_eq!(
        watched.matches("pinned now: 1 of 3 workers").count(),
        2,
        "{watched}"
    );
    svc.send("release");
    svc.expect("pin_service: released");
    status_until(&pid, "the released worker to leave status", |st| {
        st["pinned"].as_array().unwrap().is_empty()
    });
    let before = counter(&status(&pid), "pinned_polls");
    assert_eq!(before, 1);

    // A raised threshold hides a 50 ms pin; a 1 s one after it is still seen. Reports come in
    // order, so when the second is counted the first would have been. The margins are wide (a
    // sleep overrun by a loaded machine stays far from 500 ms) and each count is waited for as
    // "at least", then checked exactly, so that a miscount fails here with the count, not as a
    // wait that never ends.
    // Values under their floors are refused, all of them (then nothing changes: the threshold
    // is still 20 ms below).
    for (pair, floor) in [("threshold=1ns", "1ms"), ("sample_interval=1us", "10ms")] {
        let out = ctl_in(None, &[&pid, "set", "stacks=full", pair]);
        let err = String::from_utf8_lossy(&out.stderr);
        let (key, value) = pair.split_once('=').unwrap();
        assert!(
            !out.status.success()
                && err.contains(&format!("{key}={value:?}"))
                && err.contains(&format!("floor of {floor}")),
            "{err}"
        );
    }
    // A key given twice is refused whole (which was meant?): the threshold is still 20 ms.
    let out = ctl_in(
        None,
        &[
            &pid,
            "set",
            "threshold=30ms",
            "stacks=full",
            "threshold=40ms",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains(
                r#"`threshold` is given twice (threshold="30ms", then threshold="40ms")"#
            ),
        "{err}"
    );
    // An unknown key is refused as that, given twice or not (helper-89).
    let out = ctl_in(None, &[&pid, "set", "foo=1", "foo=2"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("unknown setting") && !err.contains("twice"),
        "{err}"
    );
    let said = ctl(&[&pid, "set", "threshold=500ms"]);
    assert!(said.contains("threshold: 20ms -> 500ms"), "{said}");
    svc.send("pin 50ms");
    svc.expect("pin_service: pin of 50ms done");
    svc.send("pin 1000ms");
    svc.expect("pin_service: pin of 1000ms done");
    // Both pins have ended: each was flagged while it ran, if at all.
    let st = status_until(&pid, "the 1 s pin to be counted", |st| {
        counter(st, "pinned_polls") > before
    });
    assert_eq!(counter(&st, "pinned_polls"), before + 1, "{st}");
    assert_eq!(setting(&st, "threshold"), "500ms");

    // Lowered again, a 100 ms pin is reported.
    let said = ctl(&[&pid, "set", "threshold=20ms"]);
    assert!(said.contains("threshold: 500ms -> 20ms"), "{said}");
    svc.send("pin 100ms");
    svc.expect("pin_service: pin of 100ms done");
    let st = status_until(&pid, "the 100 ms pin to be counted", |st| {
        counter(st, "pinned_polls") > before + 1
    });
    assert_eq!(counter(&st, "pinned_polls"), before + 2, "{st}");

    // A scan interval past a quarter of the threshold is taken, and the one in force is shown.
    let said = ctl(&[&pid, "set", "scan_interval=1h"]);
    assert!(
        said.contains("scan_interval: 2ms -> 1h (5ms in force: never more than a quarter"),
        "{said}"
    );
    let st = status(&pid);
    assert_eq!(setting(&st, "scan_interval"), "1h");
    assert_eq!(st["scan_interval_in_force"], "5ms", "{st}");
    let text = ctl(&[&pid, "status"]);
    assert!(text.contains("scan_interval=1h (5ms in force)"), "{text}");
    ctl(&[&pid, "set", "scan_interval=2ms"]);
    let st = status(&pid);
    assert!(st.get("scan_interval_in_force").is_none(), "{st}");
    // A threshold that moves the scan period in force says so too (paused meanwhile: no poll
    // of the idle service is to be reported at 4 ms).
    ctl(&[&pid, "pause"]);
    let said = ctl(&[&pid, "set", "threshold=4ms"]);
    assert!(
        said.contains("scan interval in force: 2ms -> 1ms"),
        "{said}"
    );
    let said = ctl(&[&pid, "set", "threshold=20ms"]);
    assert!(
        said.contains("scan interval in force: 1ms -> 2ms"),
        "{said}"
    );
    ctl(&[&pid, "resume"]);

    // A recording started and stopped at run time, read by `pinwatch print`.
    let dir = tempfile::tempdir().unwrap();
    let said = ok(
        ctl_in(
            Some(dir.path()),
            &[&pid, "record", "start", "incident.jsonl"],
        ),
        &["record start"],
    );
    let rec = dir.path().join("incident.jsonl");
    assert!(said.contains(&rec.display().to_string()), "{said}");
    // A second recording of the same file is refused (two writers would interleave).
    let again = ctl_in(None, &[&pid, "record", "start", &rec.display().to_string()]);
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("recording 1 writes"), "{err}");
    svc.send("pin 150ms");
    svc.expect("pin_service: pin of 150ms done");
    status_until(&pid, "the recorded pin's end", |st| {
        st["recording"]["events"].as_u64() >= Some(2) && st["pinned"].as_array().unwrap().is_empty()
    });
    let said = ctl(&[&pid, "record", "stop"]);
    assert!(said.contains("stopped recording"), "{said}");
    let printed = Command::new(pinwatch_cli())
        .args(["print", "--latest"])
        .arg(&rec)
        .output()
        .unwrap();
    let printed = ok(printed, &["print"]);
    assert!(printed.contains("state = \"completed\""), "{printed}");
    assert!(printed.contains("pinnedReason = \"sleep\""), "{printed}");
    let stop_again = ctl_in(None, &[&pid, "record", "stop"]);
    assert!(String::from_utf8_lossy(&stop_again.stderr).contains("no recording is running"));

    // Paused: a pin goes unreported; resumed: reported again.
    assert!(ctl(&[&pid, "pause"]).contains("paused"));
    let polls = counter(&status(&pid), "pinned_polls");
    svc.send("pin 100ms");
    svc.expect("pin_service: pin of 100ms done");
    assert!(ctl(&[&pid, "resume"]).contains("resumed"));
    svc.send("pin 120ms");
    svc.expect("pin_service: pin of 120ms done");
    let st = status_until(&pid, "the pin after resume", |st| {
        counter(st, "pinned_polls") > polls && st["pinned"].as_array().unwrap().is_empty()
    });
    assert_eq!(counter(&st, "pinned_polls"), polls + 1, "{st}");

    // The socket goes with the process.
    svc.finish();
    assert!(!socket.exists(), "{} left behind", socket.display());
}

#[test]
fn rotation_keeps_the_recording_bounded_under_an_event_storm() {
    // A queue that drops nothing: every report of the storm reaches the recording.
    let mut svc = Service::start(&[("PINWATCH_QUEUE_CAPACITY", "65536")]);
    let pid = svc.pid.to_string();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("storm.jsonl");
    ctl(&[&pid, "set", "threshold=5ms"]);
    let rec_s = rec.display().to_string();
    // A bound that would make a file of every report is refused (helper-60), and nothing starts.
    let small = ctl_in(None, &[&pid, "record", "start", &rec_s, "--max-size", "10"]);
    let err = String::from_utf8_lossy(&small.stderr);
    assert!(
        !small.status.success() && err.contains("below the floor of 64KB"),
        "{err}"
    );
    assert!(!rec.exists());
    let said = ctl(&[
        &pid,
        "record",
        "start",
        &rec_s,
        "--max-size",
        "128KB",
        "--keep",
        "2",
    ]);
    // Large enough for the kept files to hold dozens of pins whatever each pin's reports weigh
    // (a loaded machine makes more of them: stalls, resends): at 32 kB a run held only 10.
    assert!(said.contains("rotating at 128.0 kB"), "{said}");
    svc.send("storm 400 8ms");
    svc.expect("pin_service: storm of 400 done");
    // Every report handed to the sinks, so the recording has all that it will get.
    let st = status_until(&pid, "the storm's reports to be delivered", |st| {
        st["pinned"].as_array().unwrap().is_empty()
            && counter(st, "delivered") >= counter(st, "events")
    });
    assert_eq!(counter(&st, "dropped"), 0, "{st}");
    let rotations = st["recording"]["rotations"].as_u64().unwrap();
    assert!(rotations >= 3, "{st}");
    let said = ctl(&[&pid, "record", "stop"]);
    assert!(said.contains("stopped recording"), "{said}");

    let files: Vec<PathBuf> = ["storm.2.jsonl", "storm.1.jsonl", "storm.jsonl"]
        .iter()
        .map(|f| dir.path().join(f))
        .collect();
    assert!(!dir.path().join("storm.3.jsonl").exists());
    let mut lines = 0;
    // The first report of each pin, by id; and each pin's reports in the order read.
    let mut firsts = Vec::new();
    let mut reports: std::collections::HashMap<u64, Vec<u32>> = Default::default();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        assert!(
            text.len() as u64 <= 128_000,
            "{} is {} bytes",
            f.display(),
            text.len()
        );
        assert!(text.ends_with('\n'), "{} ends mid-line", f.display());
        for l in text.lines() {
            let e = pinwatch::PinnedEvent::from_json_line(l)
                .unwrap_or_else(|err| panic!("{}: {err}: {l}", f.display()));
            if e.report == 1 {
                firsts.push(e.id);
            }
            reports.entry(e.id).or_default().push(e.report);
            lines += 1;
        }
    }
    // Pins are numbered as they are found, and each pin's reports are numbered in turn: read
    // oldest file first, the set meets both in order (the oldest kept file may begin with later
    // reports of pins whose first went with a deleted file).
    assert!(firsts.len() > 10, "{firsts:?}");
    assert!(firsts.windows(2).all(|w| w[0] < w[1]), "{firsts:?}");
    for (id, r) in &reports {
        assert!(r.windows(2).all(|w| w[0] < w[1]), "pin {id}: reports {r:?}");
    }
    let printed = Command::new(pinwatch_cli())
        .args(["print", "--json"])
        .arg(&rec)
        .output()
        .unwrap();
    let printed = ok(printed, &["print"]);
    assert_eq!(printed.lines().count(), lines);
    svc.finish();
}

/// `pin_service --quiet --commands` started in `dir` with `PINWATCH_RECORD=startup.jsonl` (a
/// path relative to the service's directory).
fn service_recording_in(dir: &Path) -> Service {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pin_service"));
    cmd.current_dir(dir);
    Service::start_as(cmd, &[("PINWATCH_RECORD", "startup.jsonl")])
}

/// `pinwatch ctl ARGS` run in `dir`, which must fail; its stderr.
fn refused(dir: &Path, args: &[&str]) -> String {
    let out = ctl_in(Some(dir), args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "pinwatch ctl {args:?} was not refused: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    err
}

/// The pins' events in a recording file: `(id, report, state)` in file order.
fn reports_in(path: &Path) -> Vec<(u64, u32, String)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| {
            let e: Value = serde_json::from_str(l)
                .unwrap_or_else(|err| panic!("{}: {err}: {l}", path.display()));
            let field = |k: &str| e[k].as_u64().unwrap_or_else(|| panic!("no {k} in {l}"));
            (
                field("id"),
                field("report") as u32,
                e["state"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Makes one 300 ms pin and waits until its last report (`completed`) is in `file`, the file
/// of a recording running now: then every recording running got all of it, and one started
/// later gets none of it. The pin's id. (A 60 ms pin went unseen once beside `stress-ng`: a
/// watchdog kept from a CPU for most of a short pin may not look at it twice, and the test
/// waited for a report that never came.)
fn pin_into(svc: &mut Service, file: &Path, seen: &mut Vec<u64>) -> u64 {
    svc.send("pin 300ms");
    svc.expect("pin_service: pin of 300ms done");
    let id = wait_for(
        &format!("the pin's completed report in {}", file.display()),
        LONG,
        || {
            reports_in(file)
                .into_iter()
                .find(|(id, _, state)| state == "completed" && !seen.contains(id))
                .map(|(id, _, _)| id)
        },
    );
    seen.push(id);
    id
}

/// The pins in a recording, each once with all its reports (numbered 1, 2, … and ending
/// `completed`), in order.
fn whole_pins(path: &Path) -> Vec<u64> {
    let mut pins: Vec<(u64, Vec<(u32, String)>)> = Vec::new();
    for (id, report, state) in reports_in(path) {
        match pins.iter_mut().find(|(p, _)| *p == id) {
            Some((_, r)) => r.push((report, state)),
            None => pins.push((id, vec![(report, state)])),
        }
    }
    for (id, r) in &pins {
        let numbers: Vec<u32> = r.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            numbers,
            (1..=r.len() as u32).collect::<Vec<_>>(),
            "{}: pin {id} is not whole: {r:?}",
            path.display()
        );
        assert_eq!(
            r.last().unwrap().1,
            "completed",
            "{}: pin {id}",
            path.display()
        );
    }
    pins.into_iter().map(|(id, _)| id).collect()
}

/// The start-up recording and two started with `ctl` run at once and are stopped in another
/// order than started (A, then the start-up one by its file, then B without an id): each
/// file holds exactly the pins made while it ran, each pin whole. Pins are ordered by waiting
/// for each one's last report in a running recording before the next step.
#[test]
fn three_recordings_at_once_each_get_exactly_the_pins_of_their_span() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut svc = service_recording_in(d);
    let pid = svc.pid.to_string();
    let (startup, a, b) = (
        d.join("startup.jsonl"),
        d.join("a.jsonl"),
        d.join("b.jsonl"),
    );
    let mut seen = Vec::new();
    let p1 = pin_into(&mut svc, &startup, &mut seen);

    let said = ok(
        ctl_in(Some(d), &[&pid, "record", "start", "a.jsonl"]),
        &["start a"],
    );
    assert!(
        said.contains(&format!("recording 1 to {}", a.display())),
        "{said}"
    );
    let p2 = pin_into(&mut svc, &a, &mut seen);
    let p3 = pin_into(&mut svc, &a, &mut seen);
    let said = ok(
        ctl_in(
            Some(d),
            &[&pid, "record", "start", "b.jsonl", "--max-size", "1MB"],
        ),
        &["start b"],
    );
    assert!(said.contains("recording 2 to"), "{said}");
    let p4 = pin_into(&mut svc, &b, &mut seen);
    let p5 = pin_into(&mut svc, &b, &mut seen);

    // Three run: `record stop` alone does not guess, and stops none.
    let err = refused(d, &[&pid, "record", "stop"]);
    assert!(
        err.contains("3 recordings are running")
            && err.contains("0 (startup)")
            && err.contains(&a.display().to_string())
            && err.contains(&b.display().to_string()),
        "{err}"
    );
    let list: Value = serde_json::from_str(&ctl(&[&pid, "record", "list", "--json"])).unwrap();
    let ids: Vec<u64> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [0, 1, 2], "{list}");
    assert_eq!(list[0]["startup"], true, "{list}");
    assert_eq!(list[2]["max_size"], 1_000_000, "{list}");

    let said = ctl(&[&pid, "record", "stop", "1"]);
    assert!(
        said.contains(&format!("stopped recording 1 to {}", a.display())),
        "{said}"
    );
    let p6 = pin_into(&mut svc, &b, &mut seen);
    let p7 = pin_into(&mut svc, &b, &mut seen);
    // By its file: the service named it relative to its own directory, `ctl` absolute.
    let said = ok(
        ctl_in(Some(d), &[&pid, "record", "stop", "startup.jsonl"]),
        &["stop"],
    );
    assert!(said.contains("stopped recording 0 to"), "{said}");
    let p8 = pin_into(&mut svc, &b, &mut seen);
    let said = ctl(&[&pid, "record", "stop"]);
    assert!(said.contains("stopped recording 2 to"), "{said}");
    let st = status(&pid);
    assert!(
        st["recording"].is_null() && st["recordings"] == serde_json::json!([]),
        "{st}"
    );

    assert_eq!(whole_pins(&startup), [p1, p2, p3, p4, p5, p6, p7]);
    assert_eq!(whole_pins(&a), [p2, p3, p4, p5]);
    assert_eq!(whole_pins(&b), [p4, p5, p6, p7, p8]);
    svc.finish();
}

/// What `ctl` refuses with several recordings: a second recording of a running one's file
/// (absolute for a relative one, through a symlinked directory, or one of its rotated names),
/// one past the bound of 8, a `record stop` that would have to guess, an unknown id. And what
/// `record list` and `status` show of eight recordings.
#[test]
fn ctl_refuses_a_second_writer_of_a_file_past_the_bound_and_every_guess() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("recs");
    std::fs::create_dir(&d).unwrap();
    std::os::unix::fs::symlink(&d, dir.path().join("link")).unwrap();
    let mut svc = service_recording_in(&d);
    let pid = svc.pid.to_string();
    let startup = d.join("startup.jsonl");
    for same in [
        startup.clone(),
        dir.path().join("link/startup.jsonl"),
        d.join("startup.1.jsonl"),
    ] {
        let err = refused(&d, &[&pid, "record", "start", &same.display().to_string()]);
        assert!(
            err.contains("recording 0 (startup) writes") && err.contains("record stop 0"),
            "{}: {err}",
            same.display()
        );
    }
    for k in 1..8 {
        let said = ctl(&[
            &pid,
            "record",
            "start",
            &d.join(format!("r{k}.jsonl")).display().to_string(),
        ]);
        assert!(said.contains(&format!("recording {k} to")), "{said}");
    }
    let err = refused(&d, &[&pid, "record", "start", "r8.jsonl"]);
    assert!(
        err.contains("8 recordings are running") && err.contains("record stop ID"),
        "{err}"
    );
    assert!(!d.join("r8.jsonl").exists());
    let err = refused(&d, &[&pid, "record", "stop"]);
    assert!(
        err.contains("8 recordings are running") && err.contains("r7.jsonl"),
        "{err}"
    );
    let err = refused(&d, &[&pid, "record", "stop", "99"]);
    assert!(err.contains("no recording 99 is running"), "{err}");
    let err = refused(&d, &[&pid, "record", "stop", "r8.jsonl"]);
    assert!(err.contains("no recording writes"), "{err}");

    let list = ctl(&[&pid, "record", "list"]);
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 9, "{list}");
    for h in [
        "ID",
        "SINCE",
        "EVENTS",
        "BYTES",
        "ROTATIONS",
        "WRITE ERRORS",
        "FILE",
    ] {
        assert!(lines[0].contains(h), "{list}");
    }
    assert!(
        // Named absolute, though PINWATCH_RECORD named it relative to the service's directory.
        lines[1].starts_with("0 (startup)")
            && lines[1].ends_with(&format!(" {}", startup.display())),
        "{list}"
    );
    let st = status(&pid);
    assert_eq!(st["recordings"].as_array().unwrap().len(), 8, "{st}");
    assert_eq!(st["recording"]["id"], 0, "{st}");
    let text = ctl(&[&pid, "status"]);
    assert_eq!(text.matches("\nrecording  ").count(), 8, "{text}");
    assert!(text.contains("recording  0 (startup) "), "{text}");

    // Stopped by name, the start-up one frees a place.
    assert!(ctl(&[&pid, "record", "stop", "startup"]).contains("stopped recording 0"));
    let said = ok(
        ctl_in(Some(&d), &[&pid, "record", "start", "r8.jsonl"]),
        &["start"],
    );
    assert!(said.contains("recording 8 to"), "{said}");
    svc.finish();
}

/// The directory `dir`, mode `mode`.
fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Sends `bytes` on a fresh connection and returns the reply.
fn raw(socket: &Path, bytes: &[u8]) -> Value {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(LONG)).unwrap();
    // The service may answer and close before it has read everything sent.
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut answer = String::new();
    // Closed with part of an oversized request unread, the service's end resets the
    // connection after its answer: the answer is read all the same.
    let _ = s.read_to_string(&mut answer);
    serde_json::from_str(answer.trim()).unwrap_or_else(|e| panic!("{e}: {answer:?}"))
}

/// A socket file nobody listens on, as a process that died leaves.
fn stale_socket(dir: &Path) -> PathBuf {
    let pid = (4_000_000..)
        .find(|p| {
            !Path::new(&format!("/proc/{p}")).exists() && !dir.join(format!("{p}.sock")).exists()
        })
        .unwrap();
    let path = dir.join(format!("{pid}.sock"));
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    path
}

#[test]
fn only_the_owner_or_root_gets_in_and_bad_requests_do_no_harm() {
    assert_eq!(
        // SAFETY: geteuid cannot fail.
        unsafe { libc::geteuid() },
        0,
        "this test runs a client as `nobody` with setpriv: run it as root (CI does)"
    );
    let setpriv = support::system_binary("setpriv", "util-linux");
    let top = tempfile::tempdir().unwrap();
    chmod(top.path(), 0o755);
    let dir = top.path().join("ctl");
    std::fs::create_dir(&dir).unwrap();
    chmod(&dir, 0o755); // too open: the service tightens it
    let early = stale_socket(&dir);
    let mut svc = Service::start(&[("PINWATCH_CONTROL", dir.to_str().unwrap())]);
    let pid = svc.pid.to_string();
    let socket = dir.join(format!("{pid}.sock"));
    assert!(socket.exists());
    assert!(!early.exists(), "the service left a dead process's socket");
    assert_eq!(mode(&dir), 0o700, "directory mode");
    assert_eq!(mode(&socket), 0o600, "socket mode");

    // A copy of the CLI that `nobody` may run.
    let bin = top.path().join("pinwatch");
    std::fs::copy(pinwatch_cli(), &bin).unwrap();
    chmod(&bin, 0o755);
    let as_nobody = || {
        Command::new(&setpriv)
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&bin)
            .args(["ctl", socket.to_str().unwrap(), "status"])
            .output()
            .unwrap()
    };
    let out = as_nobody();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("permission denied"), "{err}");
    // With the files opened up, the service itself still refuses another uid.
    chmod(&dir, 0o755);
    chmod(&socket, 0o666);
    // `ctl` itself will not talk into a directory of another user's...
    let out = as_nobody();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("belongs to uid 0") && err.contains("not to uid 65534"),
        "{err}"
    );
    // ...and a client that does gets a refusal from the service.
    let sock = socket.clone();
    let reply = as_uid(65534, move || raw(&sock, b"{\"cmd\":\"status\"}\n"));
    let msg = reply["message"].as_str().unwrap();
    assert_eq!(reply["ok"], false, "{reply}");
    assert!(
        msg.contains("refused: this service runs as uid 0") && msg.contains("uid 65534"),
        "{msg}"
    );
    chmod(&socket, 0o600);
    chmod(&dir, 0o700);

    // Malformed, oversized and invalid requests get errors.
    for (bytes, says) in [
        (b"garbage\n".to_vec(), "malformed request"),
        (b"{\"cmd\":\"status\"".to_vec(), "malformed request"),
        (b"{\"cmd\":\"launch\"}\n".to_vec(), "malformed request"),
        (
            b"{\"cmd\":\"pause\",\"for\":\"10s\"}\n".to_vec(),
            "unknown field `for`: `pause` takes none",
        ),
        (b"\n".to_vec(), "empty request"),
        (vec![b'x'; 200_000], "longer than 65536 bytes"),
        (
            b"{\"cmd\":\"set\",\"settings\":[[\"threshold\",\"0ms\"]]}\n".to_vec(),
            "must be greater than zero",
        ),
        (
            b"{\"cmd\":\"record_start\",\"path\":\"relative.jsonl\"}\n".to_vec(),
            "not an absolute path",
        ),
    ] {
        let reply = raw(&socket, &bytes);
        assert_eq!(reply["ok"], false, "{reply}");
        let msg = reply["message"].as_str().unwrap();
        assert!(msg.contains(says), "{says:?} not in {msg:?}");
    }
    // A client that connects and says nothing holds nobody up for long, and the service is
    // undisturbed: settings as they were, pins still reported.
    let silent = UnixStream::connect(&socket).unwrap();
    let st = status(socket.to_str().unwrap());
    drop(silent);
    assert_eq!(setting(&st, "threshold"), "20ms");
    svc.send("pin 100ms");
    svc.expect("pin_service: pin of 100ms done");
    status_until(
        socket.to_str().unwrap(),
        "the pin after bad requests",
        |st| counter(st, "pinned_polls") == 1,
    );

    // `ctl list` removes what a dead process left, and lists the live one.
    let late = stale_socket(&dir);
    let out = ctl_in(None, &["--dir", dir.to_str().unwrap(), "list"]);
    let listed = ok(out.clone(), &["list"]);
    assert!(listed.contains(&pid), "{listed}");
    assert!(!late.exists());
    assert!(String::from_utf8_lossy(&out.stderr).contains("removed"));
    svc.finish();
    assert!(!socket.exists());
}

/// Runs `f` on a thread of its own whose credentials are `uid`'s (the raw system call changes
/// the calling thread only, not the test process's other threads).
fn as_uid<T: Send + 'static>(uid: u32, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        // SAFETY: a plain system call; it changes this thread's credentials only (glibc's
        // setresuid would change every thread's), and this thread ends after `f`.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_setresgid,
                uid as libc::c_long,
                uid as libc::c_long,
                uid as libc::c_long,
            )
        };
        assert_eq!(rc, 0, "setresgid: {}", std::io::Error::last_os_error());
        // SAFETY: as above.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_setresuid,
                uid as libc::c_long,
                uid as libc::c_long,
                uid as libc::c_long,
            )
        };
        assert_eq!(rc, 0, "setresuid: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .unwrap()
}

fn require_root(what: &str) {
    assert_eq!(
        // SAFETY: geteuid cannot fail.
        unsafe { libc::geteuid() },
        0,
        "{what}: run it as root (CI does)"
    );
}

/// A `/tmp/pinwatch-<uid>` that did not exist before the test, removed (whatever it has
/// become) when dropped.
struct TmpDefaultDir(PathBuf);

impl TmpDefaultDir {
    fn unused(from: u32) -> TmpDefaultDir {
        let uid = (from..from + 10_000)
            .find(|u| std::fs::symlink_metadata(format!("/tmp/pinwatch-{u}")).is_err())
            .unwrap();
        TmpDefaultDir(PathBuf::from(format!("/tmp/pinwatch-{uid}")))
    }

    fn uid(&self) -> u32 {
        self.0.to_str().unwrap()["/tmp/pinwatch-".len()..]
            .parse()
            .unwrap()
    }
}

impl Drop for TmpDefaultDir {
    fn drop(&mut self) {
        match std::fs::symlink_metadata(&self.0) {
            Ok(m) if m.is_dir() => {
                let _ = std::fs::remove_dir_all(&self.0);
            }
            Ok(_) => {
                let _ = std::fs::remove_file(&self.0);
            }
            Err(_) => {}
        }
    }
}

#[test]
fn ctl_list_as_root_removes_nothing_through_a_symlink_nor_anything_but_a_dead_socket() {
    require_root("this test plants files in other users' control directories");
    // A symlinked `/tmp/pinwatch-N` pointing at a directory with a regular file in it.
    let target = tempfile::tempdir().unwrap();
    let victim = target.path().join("424242.sock");
    std::fs::write(&victim, "precious").unwrap();
    let link = TmpDefaultDir::unused(77777);
    std::os::unix::fs::symlink(target.path(), &link.0).unwrap();

    // And in a directory of root's: a regular file and another uid's socket, both with the
    // names of dead processes' sockets.
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o700);
    let file = dir.path().join("424243.sock");
    std::fs::write(&file, "also precious").unwrap();
    let foreign = stale_socket(dir.path());
    std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
    let dead = stale_socket(dir.path());

    let out = ctl_in(None, &["list"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert!(
        err.contains(&format!("{} is not a directory", link.0.display())),
        "{err}"
    );

    let out = ctl_in(None, &["--dir", dir.path().to_str().unwrap(), "list"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "also precious");
    assert!(foreign.exists(), "removed another uid's socket: {err}");
    assert!(!dead.exists(), "left a dead process's socket: {err}");
    assert!(err.contains("not a socket (left alone)"), "{err}");
    assert!(err.contains("a socket of uid 65534"), "{err}");
}

#[test]
fn a_default_directory_of_another_user_gets_no_socket_and_ctl_will_not_talk_into_it() {
    require_root("this test runs a service as another uid");
    // The victim: a uid with no `/tmp/pinwatch-<uid>` yet. The attacker (65534) makes it
    // first, open to all, and listens in it.
    let dir = TmpDefaultDir::unused(60001);
    let victim_uid = dir.uid();
    std::fs::create_dir(&dir.0).unwrap();
    chmod(&dir.0, 0o777);
    std::os::unix::fs::chown(&dir.0, Some(65534), Some(65534)).unwrap();
    let fake_pid = std::process::id();
    let fake = dir.0.join(format!("{fake_pid}.sock"));
    let listener = std::os::unix::net::UnixListener::bind(&fake).unwrap();
    listener.set_nonblocking(true).unwrap();
    std::os::unix::fs::chown(&fake, Some(65534), Some(65534)).unwrap();

    // The victim's service, as the victim (a copy of the binary that uid may run).
    let bin_dir = tempfile::tempdir().unwrap();
    chmod(bin_dir.path(), 0o755);
    let bin = bin_dir.path().join("pin_service");
    std::fs::copy(env!("CARGO_BIN_EXE_pin_service"), &bin).unwrap();
    chmod(&bin, 0o755);
    let log = bin_dir.path().join("stderr");
    let mut cmd = Command::new(&bin);
    {
        use std::os::unix::process::CommandExt;
        cmd.uid(victim_uid)
            .gid(victim_uid)
            .current_dir(bin_dir.path())
            .stderr(std::fs::File::create(&log).unwrap());
    }
    let mut svc = Service::start_as(cmd, &[]);
    let pid = svc.pid.to_string();
    let sockets: Vec<_> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        sockets.len(),
        1,
        "the service made a socket there: {sockets:?}"
    );
    // Its `ctl` cannot reach it, and says why.
    let out = ctl_in(None, &[&pid, "status"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("belongs to uid 65534"), "{err}");

    // Root's `ctl` will not talk to the attacker's socket there, by pid nor by path; `list`
    // skips the directory and says why.
    for args in [
        vec![fake_pid.to_string(), "status".to_owned()],
        vec![fake.display().to_string(), "status".to_owned()],
        vec!["list".to_owned()],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = ctl_in(None, &args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            err.contains(&format!(
                "{} belongs to uid 65534 (mode 777), not to uid {victim_uid}",
                dir.0.display()
            )),
            "{args:?}: {err}"
        );
        if args[0] != "list" {
            assert!(!out.status.success(), "{args:?}: {err}");
        }
        // Said once, as skipped: `list` notes it on a line of its own, a pid's search after
        // what it found.
        let skipped = format!("skipped {} belongs", dir.0.display());
        let said = if args[0] == "list" {
            format!("pinwatch ctl: {skipped}")
        } else {
            format!("; {skipped}")
        };
        if args[0] != fake.display().to_string() {
            assert!(err.contains(&said), "{args:?}: {err}");
            assert_eq!(err.matches("skipped").count(), 1, "{args:?}: {err}");
        }
        match listener.accept() {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            other => panic!("{args:?}: ctl connected to the attacker's socket: {other:?}"),
        }
    }
    svc.finish();
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.is_empty() || said.contains("no control socket"),
        "the service said: {said}"
    );
}

/// A fake service on a socket `<this process's pid>.sock` in a directory of root's (`ctl` checks
/// that the process answering is the one the name says): each connection's request line is
/// read, then `serve` is called with the stream and the line, up to `conns` connections.
fn fake_service(
    conns: usize,
    serve: impl Fn(UnixStream, String) + Send + 'static,
) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o700);
    let path = dir.path().join(format!("{}.sock", std::process::id()));
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        for _ in 0..conns {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            let mut line = String::new();
            let _ = BufReader::new(&stream).read_line(&mut line);
            serve(stream, line);
        }
    });
    (dir, path)
}

#[test]
fn ctl_gives_up_on_a_reply_that_trickles() {
    let (stop, stopped) = mpsc::channel::<()>();
    let stopped = std::sync::Mutex::new(stopped);
    let (_dir, sock) = fake_service(1, move |mut s, _| {
        // One byte a second, for at most a minute.
        let stopped = stopped.lock().unwrap();
        for _ in 0..60 {
            if s.write_all(b" ").is_err()
                || stopped.recv_timeout(Duration::from_secs(1))
                    != Err(mpsc::RecvTimeoutError::Timeout)
            {
                return;
            }
        }
    });
    let started = std::time::Instant::now();
    let out = ctl_in(None, &[sock.to_str().unwrap(), "status"]);
    let took = started.elapsed();
    drop(stop);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(took < Duration::from_secs(30), "took {took:?}: {err}");
    assert!(
        err.contains("no whole answer") && err.contains("within 5s"),
        "{err}"
    );
}

/// `pinwatch ctl ARGS` and its peak memory (max RSS, kB).
// The child is reaped by `wait4`, which also gives its resource usage.
#[allow(clippy::zombie_processes)]
fn ctl_with_rss(args: &[&str]) -> (bool, String, i64) {
    let mut child = Command::new(pinwatch_cli())
        .arg("ctl")
        .args(args)
        .env_remove("PINWATCH_CONTROL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut status = 0;
    // SAFETY: rusage is plain data; zeroes are a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pid is our child's, not yet waited for; `status` and `usage` are valid for
    // writing.
    let rc = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(rc, child.id() as libc::pid_t);
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    (ok, reader.join().unwrap(), usage.ru_maxrss)
}

/// `ctl list --json`: a process that answers with a refusal is listed with its `error` and no
/// `status`; a `--json` before an action is refused, saying where it goes.
#[test]
fn ctl_list_json_gives_what_came_instead_of_a_status() {
    let (_dir, sock) = fake_service(1, |mut s, _| {
        let _ = s.write_all(b"{\"ok\":false,\"message\":\"busy: try later\"}\n");
    });
    let dir = sock.parent().unwrap().to_str().unwrap();
    let listed: Value = serde_json::from_str(&ok(
        ctl_in(None, &["--dir", dir, "list", "--json"]),
        &["list"],
    ))
    .unwrap();
    let want = serde_json::json!([{
        "target": std::process::id().to_string(),
        "socket": sock.to_str().unwrap(),
        "status": null,
        "error": "busy: try later",
    }]);
    assert_eq!(listed, want);
    // None at all: an empty array, not a sentence.
    let empty = tempfile::tempdir().unwrap();
    chmod(empty.path(), 0o700);
    let out = ok(
        ctl_in(
            None,
            &["--dir", empty.path().to_str().unwrap(), "list", "--json"],
        ),
        &["list"],
    );
    assert_eq!(out, "[]\n");
    for (args, said) in [
        (
            &["1", "--json", "status"][..],
            "--json goes after the action: `pinwatch ctl 1 status --json`",
        ),
        (
            &["1", "--json", "record", "list"],
            "--json goes after the action: `pinwatch ctl 1 record list --json`",
        ),
        (&["1", "--json", "pause"], "`pause` prints no JSON"),
    ] {
        let out = ctl_in(None, args);
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(said),
            "{args:?}: {out:?}"
        );
    }
}

#[test]
fn ctl_caps_a_flooding_reply() {
    let (_dir, sock) = fake_service(1, |mut s, _| {
        // 256 MiB of one endless line, or until the client hangs up.
        let chunk = vec![b'a'; 64 * 1024];
        for _ in 0..4096 {
            if s.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    let (ok, err, rss_kb) = ctl_with_rss(&[sock.to_str().unwrap(), "status"]);
    eprintln!("ctl's peak memory against a flood: {rss_kb} kB");
    assert!(rss_kb < 64 * 1024, "ctl grew to {rss_kb} kB: {err}");
    assert!(!ok, "{err}");
    assert!(err.contains("answered more than 4194304 bytes"), "{err}");
}

/// What a hostile answer puts in its strings: retitle the terminal, clear the screen.
const EVIL: &str = "\x1b]0;pwned\x07\x1b[2J";
const EVIL_SHOWN: &str = r"\u{1b}]0;pwned\u{7}\u{1b}[2J";

#[test]
fn ctl_shows_control_characters_in_replies_escaped() {
    let status = serde_json::json!({
        "ok": true,
        "message": "",
        "status": {
            "pid": 1, "socket": format!("/tmp/{EVIL}.sock"), "command": EVIL,
            "version": EVIL, "run_id": EVIL, "uptime_ms": 1000, "built_at": EVIL,
            "flavor": EVIL, "workers": 1,
            "settings": [[EVIL, EVIL]], "paused": false, "stacks_unavailable": EVIL,
            "recording": null,
            "pinned": [{
                "id": 1, "for_ms": 30, "worker": 0, "tid": 2, "task_id": 3,
                "spawned_at": EVIL, "reason": EVIL, "blocking_operation": EVIL,
                "top_frame": EVIL, "held_locks": 0
            }],
            "top": [{
                "frame": EVIL, "count": 1, "longest_ms": 30.0, "total_ms": 30.0,
                "reasons": [[EVIL, 1]], "in_progress": 1
            }],
            "counters": [[EVIL, 1]]
        }
    })
    .to_string();
    let (_dir, sock) = fake_service(7, move |mut s, line| {
        let answer = if line.contains("status") {
            status.clone()
        } else if line.contains("pause") {
            serde_json::json!({"ok": false, "message": EVIL}).to_string()
        } else {
            serde_json::json!({"ok": true, "message": format!("{EVIL}\n{EVIL}")}).to_string()
        };
        let _ = s.write_all(format!("{answer}\n").as_bytes());
    });
    let sock = sock.to_str().unwrap();
    let dir = Path::new(sock).parent().unwrap().to_str().unwrap();
    for args in [
        vec![sock, "status"],
        vec![sock, "status", "--json"],
        vec![sock, "status", "--watch", "--count", "1"],
        vec![sock, "set", "threshold=1ms"],
        vec![sock, "pause"],
        vec!["--dir", dir, "list"],
        vec!["--dir", dir, "list", "--json"],
    ] {
        let out = ctl_in(None, &args);
        for (what, text) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
            let text = String::from_utf8_lossy(text);
            assert!(
                !text.contains(EVIL) && !text.contains('\x07') && !text.contains("\x1b]"),
                "{args:?}: raw control characters on {what}: {text:?}"
            );
        }
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let shown = if args.contains(&"--json") {
            r"\u001b]0;pwned\u0007\u001b[2J"
        } else {
            EVIL_SHOWN
        };
        assert!(all.contains(shown), "{args:?}: {all}");
    }
}

/// A client that sends `byte` every 300 ms, on its own thread, until `stop` goes or a minute is
/// up; gives back what it was answered and when.
fn trickle(
    socket: &Path,
    stop: &std::sync::Arc<std::sync::Mutex<mpsc::Receiver<()>>>,
) -> std::thread::JoinHandle<(String, Duration)> {
    let mut s = UnixStream::connect(socket).unwrap();
    let stop = std::sync::Arc::clone(stop);
    std::thread::spawn(move || {
        let started = std::time::Instant::now();
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut answer = Vec::new();
        for _ in 0..200 {
            if s.write_all(b" ").is_err() {
                break;
            }
            let mut buf = [0u8; 4096];
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    answer.extend_from_slice(&buf[..n]);
                    if answer.contains(&b'\n') {
                        break;
                    }
                }
                Err(_) => {}
            }
            let stopped = stop.lock().unwrap().try_recv();
            if stopped != Err(mpsc::TryRecvError::Empty) {
                break;
            }
        }
        (
            String::from_utf8_lossy(&answer).into_owned(),
            started.elapsed(),
        )
    })
}

#[test]
fn trickling_clients_get_one_deadline_and_cannot_keep_ctl_out() {
    let dir = tempfile::tempdir().unwrap();
    let mut svc = Service::start(&[("PINWATCH_CONTROL", dir.path().to_str().unwrap())]);
    let socket = dir.path().join(format!("{}.sock", svc.pid));
    let (stop, stopped) = mpsc::channel::<()>();
    let stopped = std::sync::Arc::new(std::sync::Mutex::new(stopped));

    // One slow client is answered at its request's deadline, not when it stops sending.
    let (answer, took) = trickle(&socket, &stopped).join().unwrap();
    assert!(answer.contains("no whole request within 5s"), "{answer:?}");
    assert!(took < Duration::from_secs(30), "answered after {took:?}");

    // Eight of them at once (connected first: the service accepts in order), then `ctl`.
    let slow: Vec<_> = (0..8).map(|_| trickle(&socket, &stopped)).collect();
    let out = ctl_in(
        Some(dir.path()),
        &[
            "--dir",
            dir.path().to_str().unwrap(),
            &svc.pid.to_string(),
            "status",
        ],
    );
    drop(stop);
    let text = ok(out, &["status behind 8 slow clients"]);
    assert!(text.contains("pinned now: 0 of 3 workers"), "{text}");
    for t in slow {
        let (answer, _) = t.join().unwrap();
        assert!(
            answer.is_empty() || answer.contains("\"ok\":false"),
            "{answer:?}"
        );
    }
    svc.finish();
}

/// Sockets that never answer (a local user may make any number) cannot keep `ctl list` waiting
/// past its total bound: the ones not asked by then are listed as not asked. `list` asks 16 at
/// a time, each for at most 2 s, 20 s in all: 12 rounds of 16 cannot all be asked.
#[test]
fn ctl_list_is_bounded_in_all_by_sockets_that_never_answer() {
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o700);
    // Bound but never accepted: a connection waits in the backlog and no answer comes. Named
    // after this process, which is alive (none of them is stale) and listens on them.
    let n = 12 * 16;
    let me = std::process::id();
    let listeners: Vec<_> = (1..=n)
        .map(|n| {
            std::os::unix::net::UnixListener::bind(dir.path().join(format!("{me}.{n}.sock")))
                .unwrap()
        })
        .collect();
    let started = std::time::Instant::now();
    let out = ctl_in(None, &["--dir", dir.path().to_str().unwrap(), "list"]);
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(took < Duration::from_secs(45), "took {took:?}");
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with(&format!("{me}.")))
            .count(),
        n,
        "{stdout}\n{stderr}"
    );
    let not_asked = stdout.lines().filter(|l| l.contains("not asked")).count();
    assert!(
        (16..n).contains(&not_asked),
        "{not_asked}: {stdout}\n{stderr}"
    );
    drop(listeners);
}
