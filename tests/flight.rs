//! The flight recording, end to end: a sample service (`pin_service --commands`) pins while
//! nothing records; `pinwatch ctl <pid> dump` and `ctl <pid> report` get those pins after the
//! fact, `print` / `summary` / `report` read the dump, a small buffer keeps the newest and
//! says what it dropped, memory stays bounded under a pin storm, and `PINWATCH_DUMP_ON_EXIT`
//! writes the dump when the service stops — and at a real `kill -TERM` / SIGINT of a service
//! that never drops its runtime (`plain_serve`), which then dies of the signal, while one that
//! shuts down gracefully through `tokio::signal` is left to do so.

mod support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use pinwatch::recording::{read_recording, Recording};
use pinwatch::{PinnedEvent, State};
use serde_json::Value;
use support::service::Service;
use support::{counter, pinwatch_cli, wait_for};

const LONG: Duration = Duration::from_secs(60);

fn cli(dir: &Path, args: &[&str]) -> Output {
    Command::new(pinwatch_cli())
        .args(args)
        .env_remove("PINWATCH_CONTROL")
        .current_dir(dir)
        .output()
        .unwrap()
}

/// `pinwatch ARGS` in `dir`, which must succeed; its stdout.
fn ok(dir: &Path, args: &[&str]) -> String {
    let out = cli(dir, args);
    assert!(
        out.status.success(),
        "pinwatch {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn status(pid: u32) -> Value {
    let dir = std::env::temp_dir();
    serde_json::from_str(&ok(&dir, &["ctl", &pid.to_string(), "status", "--json"])).unwrap()
}

/// `ctl <pid> dump NAME --force` in `dir` until the dump holds `until`; the dump read.
fn dump_until(
    dir: &Path,
    pid: u32,
    name: &str,
    what: &str,
    until: impl Fn(&Recording) -> bool,
) -> Recording {
    wait_for(what, LONG, || {
        ok(dir, &["ctl", &pid.to_string(), "dump", name, "--force"]);
        let rec = read_recording(&dir.join(name)).unwrap();
        until(&rec).then_some(rec)
    })
}

/// Every report of each pin, by event id, in the order the dump has them.
fn by_pin(events: &[PinnedEvent]) -> BTreeMap<u64, Vec<&PinnedEvent>> {
    let mut pins: BTreeMap<u64, Vec<&PinnedEvent>> = BTreeMap::new();
    for e in events {
        pins.entry(e.id).or_default().push(e);
    }
    pins
}

/// The line of `pin_service.rs` where its `pin D` command spawns the task that pins: the
/// `spawned_at` of the pins a test asked for (a loaded machine may add pins of its own).
fn pin_command_line() -> u32 {
    let src = include_str!("../sample-apps/src/bin/pin_service.rs");
    let lines: Vec<&str> = src.lines().map(str::trim).collect();
    let i = lines
        .windows(2)
        .position(|w| w == ["rt.spawn(async move {", "std::thread::sleep(d);"])
        .expect("pin_service's `pin` command spawns its task as before");
    i as u32 + 1
}

/// The pins of `pin D` commands, by event id: every report of each, as the dump has them.
fn commanded(rec: &Recording) -> BTreeMap<u64, Vec<&PinnedEvent>> {
    let line = pin_command_line();
    let mut pins = by_pin(&rec.events);
    pins.retain(|_, reports| {
        reports[0]
            .spawned_at
            .as_ref()
            .is_some_and(|l| l.file.ends_with("pin_service.rs") && l.line == line)
    });
    pins
}

fn completed(pins: &BTreeMap<u64, Vec<&PinnedEvent>>) -> usize {
    pins.values()
        .filter(|r| r.last().is_some_and(|e| e.state == State::Completed))
        .count()
}

/// Waits (bounded) until the export thread has handed on every report made so far.
fn drained(pid: u32) {
    wait_for("the export thread to hand on every report", LONG, || {
        let st = status(pid);
        (counter(&st, "delivered") + counter(&st, "block_in_place") >= counter(&st, "events"))
            .then_some(())
    });
}

/// Pins made while nothing records are in `ctl dump`'s file, in order, every report of each,
/// with the process's identity; the file is written where the client runs, never over a file
/// unless asked; `print`, `summary`, `report` and `ctl report` read it and say whose it is.
#[test]
fn a_dump_has_the_pins_made_while_nothing_recorded() {
    let mut svc = Service::start(&[("PINWATCH_REPORT_INTERVAL", "100ms")]);
    // Long enough that a watchdog starved by a loaded machine still sees each one.
    svc.pin("pin 800ms", "pin_service: pin of 800ms done");
    for _ in 0..3 {
        svc.pin("pin 300ms", "pin_service: pin of 300ms done");
    }
    let dir = tempfile::tempdir().unwrap();
    let pid = svc.pid;
    // A relative path: relative to the client.
    let rec = dump_until(dir.path(), pid, "dump.jsonl", "4 completed pins", |r| {
        completed(&commanded(r)) == 4
    });
    assert_eq!(rec.damaged_lines, 0, "{:?}", rec.warnings);
    assert_eq!(rec.dumps.len(), 1);
    let d = &rec.dumps[0];
    assert_eq!((d.pid, d.dropped_events, d.dropped_pins), (pid, 0, 0));
    assert!(d.exe.ends_with("pin_service"), "{}", d.exe);
    assert!(d.run_id.len() >= 16, "{}", d.run_id);
    assert_eq!(d.events, rec.events.len() as u64);
    let started = d.process_started.expect("the process's start time");
    assert!(started <= d.detector_started && d.detector_started <= d.dumped_at);
    // In order: pin after pin, each one's reports 1, 2, … ending with its completion.
    let pins = commanded(&rec);
    assert_eq!(pins.len(), 4, "{:?}", rec.events);
    // Pins in the order they were made: their first reports in id order in the file.
    let first: Vec<u64> = rec
        .events
        .iter()
        .filter(|e| e.report == 1 && pins.contains_key(&e.id))
        .map(|e| e.id)
        .collect();
    assert_eq!(
        first,
        pins.keys().copied().collect::<Vec<_>>(),
        "not in order"
    );
    for (id, reports) in &pins {
        let numbers: Vec<u32> = reports.iter().map(|e| e.report).collect();
        assert_eq!(
            numbers,
            (1..=reports.len() as u32).collect::<Vec<_>>(),
            "pin {id}"
        );
        assert_eq!(reports.last().unwrap().state, State::Completed, "pin {id}");
        assert!(reports.iter().all(|e| e.run_id == d.run_id && e.pid == pid));
    }
    // The 800 ms pin was reported while it ran, every 100 ms: all of those are there.
    let long = pins.values().next().unwrap();
    assert!(long.len() >= 3, "{long:?}");
    assert!(long.last().unwrap().duration >= Duration::from_millis(800));

    // An existing file is not replaced unless asked, and stays whole.
    let before = std::fs::read(dir.path().join("dump.jsonl")).unwrap();
    let out = cli(dir.path(), &["ctl", &pid.to_string(), "dump", "dump.jsonl"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("dump.jsonl exists") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(dir.path().join("dump.jsonl")).unwrap(),
        before
    );

    // The readers say whose it is.
    let whose = format!("flight recording of pid {pid} (");
    let print = ok(dir.path(), &["print", "dump.jsonl"]);
    assert!(print.starts_with(&whose), "{print}");
    assert!(print.contains("nothing was dropped for space"), "{print}");
    let summary = ok(dir.path(), &["summary", "dump.jsonl"]);
    assert!(summary.starts_with(&whose), "{summary}");
    assert!(summary.contains("pin_service"), "{summary}");
    ok(dir.path(), &["report", "dump.jsonl", "-o", "dump.html"]);
    let page = std::fs::read_to_string(dir.path().join("dump.html")).unwrap();
    assert!(page.contains(&whose), "no dump line on the page");
    // `print --json` stays JSON: the dump line is said on stderr.
    let out = cli(dir.path(), &["print", "--json", "dump.jsonl"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(&whose));
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        PinnedEvent::from_json_line(line).unwrap();
    }

    // Dump and page in one step.
    let said = ok(
        dir.path(),
        &["ctl", &pid.to_string(), "report", "-o", "live.html"],
    );
    assert!(
        said.contains("wrote live.html") && said.contains(&whose),
        "{said}"
    );
    let page = std::fs::read_to_string(dir.path().join("live.html")).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>") && page.contains(&whose));
    assert!(page.contains("pin_service"), "no pins on the page");
    let out = cli(
        dir.path(),
        &["ctl", &pid.to_string(), "report", "-o", "live.html"],
    );
    assert!(!out.status.success(), "a page was replaced unasked");
    // Another user's link in a shared (sticky) directory is refused as such, before the dump
    // is asked for, without `--force` suggested: with it the link is refused just the same.
    {
        use std::os::unix::fs::{lchown, symlink, PermissionsExt};
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let link = shared.join("page.html");
        symlink(dir.path().join("victim.html"), &link).unwrap();
        lchown(&link, Some(65534), None).unwrap();
        let pid = pid.to_string();
        for force in [&[][..], &["--force"]] {
            let mut args = vec!["ctl", &*pid, "report", "-o", link.to_str().unwrap()];
            args.extend_from_slice(force);
            let out = cli(dir.path(), &args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{force:?}: {err}");
            assert!(
                err.contains("is a symlink that user 65534 made"),
                "{force:?}: {err}"
            );
            assert!(!err.contains("--force"), "{force:?}: {err}");
        }
        assert!(!dir.path().join("victim.html").exists());
    }
    // To a pipe (`-`, standard output): the dump alone on stdout, no `--force` asked.
    let out = cli(dir.path(), &["ctl", &pid.to_string(), "dump", "-"]);
    assert!(out.status.success(), "{out:?}");
    let piped = String::from_utf8_lossy(&out.stdout);
    let first = piped.lines().next().unwrap_or_default();
    assert!(first.contains(r#""event":"dump""#), "{first}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("wrote standard output: "),
        "{out:?}"
    );
    // And the page, with a file named `-` in the way (it is `./-`).
    std::fs::write(dir.path().join("-"), "kept").unwrap();
    let out = cli(dir.path(), &["ctl", &pid.to_string(), "report", "-o", "-"]);
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.starts_with(b"<!DOCTYPE html>"), "{out:?}");
    assert_eq!(std::fs::read(dir.path().join("-")).unwrap(), b"kept");
    svc.finish();
}

/// A buffer smaller than the pins keeps the newest whole events and says how many earlier ones
/// it dropped: the kept and the dropped add up to every event the detector delivered, and the
/// kept are exactly the last ones a full recording of the same run has, in its order. (Pins on
/// two workers overlap, so the newest events are not always those of the highest pin ids.)
#[test]
fn a_small_flight_keeps_the_newest_and_says_what_it_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let all = dir.path().join("all.jsonl");
    let mut svc = Service::start(&[
        ("PINWATCH_FLIGHT_SIZE", "8KiB"),
        ("PINWATCH_REPORT_INTERVAL", "100ms"),
        ("PINWATCH_RECORD", all.to_str().unwrap()),
    ]);
    svc.pin("storm 40 30ms", "pin_service: storm of 40 done");
    // The last pin: once its completion is in the buffer, every event before it is too.
    svc.pin("pin 250ms", "pin_service: pin of 250ms done");
    let pid = svc.pid;
    let rec = dump_until(dir.path(), pid, "small.jsonl", "the last pin's end", |r| {
        r.events.last().is_some_and(|e| {
            e.state == State::Completed && e.duration >= Duration::from_millis(250)
        })
    });
    let delivered = counter(&status(pid), "delivered");
    let d = &rec.dumps[0];
    assert_eq!(rec.damaged_lines, 0, "{:?}", rec.warnings);
    assert_eq!(d.flight_size, 8192);
    assert!(d.bytes <= 8192, "{d:?}");
    assert!(d.dropped_events > 0 && d.dropped_pins > 0, "{d:?}");
    assert_eq!(d.events, rec.events.len() as u64);
    assert_eq!(
        d.events + d.dropped_events,
        delivered,
        "kept and dropped are not every event delivered: {d:?}"
    );
    let print = ok(dir.path(), &["print", "small.jsonl"]);
    let said = format!(
        "{} earlier events of {} pins were dropped for space",
        d.dropped_events, d.dropped_pins
    );
    assert!(print.lines().next().unwrap().contains(&said), "{print}");
    svc.finish();
    // The newest: the recording's events after the dropped ones, in order (a pin the loaded
    // machine made after the dump would follow them).
    let full = read_recording(&all).unwrap();
    assert_eq!(full.damaged_lines, 0, "{:?}", full.warnings);
    let key = |e: &PinnedEvent| (e.id, e.state, e.duration);
    let newest: Vec<_> = full
        .events
        .iter()
        .skip(d.dropped_events as usize)
        .take(rec.events.len())
        .map(key)
        .collect();
    let kept: Vec<_> = rec.events.iter().map(key).collect();
    assert_eq!(
        kept, newest,
        "the dump is not the recording's newest events"
    );
    let dropped: std::collections::BTreeSet<u64> = full.events[..d.dropped_events as usize]
        .iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(dropped.len() as u64, d.dropped_pins, "{d:?}");
}

/// Memory stays within the buffer's bound under a pin storm: thousands of events with full
/// stacks, tens of times the bound, go through a 1 MiB buffer; the process's RSS grows by no
/// more than the bound and 8 MiB (what a storm costs elsewhere: the allocator's arenas,
/// symbol caches) — less than half of what went through, which an unbounded buffer would keep.
#[test]
fn memory_stays_bounded_under_a_pin_storm() {
    let mut svc = Service::start(&[
        ("PINWATCH_FLIGHT_SIZE", "1MiB"),
        ("PINWATCH_THRESHOLD", "5ms"),
        // One malloc arena: what is measured is the buffer, not how many arenas glibc made
        // for the threads that answered `status` meanwhile.
        ("MALLOC_ARENA_MAX", "1"),
        ("PINWATCH_STACKS", "full"),
    ]);
    // A first storm fills the buffer and warms every cache. Pins of 20 ms: a storm the
    // export thread keeps up with (reports the queue drops leave their pins' `in_progress`
    // reports in `ctl status`'s view for good, which is not what this measures).
    svc.pin("storm 300 20ms", "pin_service: storm of 300 done");
    // Measured with the queue to the export thread empty each time (it holds up to 1024
    // reports of its own, whatever the buffer's bound).
    drained(svc.pid);
    let before = svc.rss_kib();
    let delivered_before = counter(&status(svc.pid), "delivered");
    for _ in 0..8 {
        svc.pin("storm 300 20ms", "pin_service: storm of 300 done");
    }
    drained(svc.pid);
    let after = svc.rss_kib();
    let dir = tempfile::tempdir().unwrap();
    ok(
        dir.path(),
        &["ctl", &svc.pid.to_string(), "dump", "storm.jsonl"],
    );
    let rec = read_recording(&dir.path().join("storm.jsonl")).unwrap();
    let d = &rec.dumps[0];
    let st = status(svc.pid);
    let delivered = counter(&st, "delivered") - delivered_before;
    let queue_dropped = counter(&st, "dropped");
    let through = delivered * d.bytes / d.events.max(1);
    println!(
        "pin storm: {delivered} events (~{} KiB of lines) through a {} KiB buffer holding {} \
         events ({} KiB, {} bytes an event); RSS {before} KiB -> {after} KiB ({:+} KiB); \
         {queue_dropped} reports dropped by the queue",
        through / 1024,
        d.flight_size / 1024,
        d.events,
        d.bytes / 1024,
        d.bytes / d.events.max(1),
        after as i64 - before as i64
    );
    assert!(d.bytes <= 1 << 20, "{d:?}");
    let bound_kib = 1024 + 8 * 1024;
    assert!(
        through / 1024 > 2 * bound_kib,
        "the storm did not push twice the bound through: {delivered} events, {through} bytes"
    );
    assert!(
        after <= before + bound_kib,
        "RSS grew by {} KiB under the storm, past the 1 MiB buffer and 8 MiB",
        after - before
    );
    svc.finish();
}

/// `PINWATCH_DUMP_ON_EXIT`: the dump is written when the service stops cleanly, after the
/// last event was exported (`%p` is the pid); a path whose directory is missing stops the
/// service at start-up, naming the variable and the value.
#[test]
fn dump_on_exit_is_written_after_a_clean_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let pattern = dir.path().join("exit-%p.jsonl");
    let mut svc = Service::start(&[("PINWATCH_DUMP_ON_EXIT", pattern.to_str().unwrap())]);
    svc.pin("pin 300ms", "pin_service: pin of 300ms done");
    let pid = svc.pid;
    svc.finish();
    let path = dir.path().join(format!("exit-{pid}.jsonl"));
    let rec = read_recording(&path).unwrap();
    assert_eq!(rec.dumps.len(), 1);
    assert_eq!(rec.dumps[0].pid, pid);
    let last = rec.events.last().expect("the pin");
    assert_eq!(last.state, State::Completed);
    assert!(last.duration >= Duration::from_millis(300));
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "{leftovers:?}");

    let out = Command::new(env!("CARGO_BIN_EXE_pin_service"))
        .args(["--quiet", "--for", "1ms"])
        .env("PINWATCH_DUMP_ON_EXIT", "/nonexistent-dir/exit.jsonl")
        .env_remove("PINWATCH")
        .env_remove("PINWATCH_FLIGHT_SIZE")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("PINWATCH_DUMP_ON_EXIT=\"/nonexistent-dir/exit.jsonl\""),
        "{err}"
    );
}

/// Clients that never read a dump hold no more than their own connections: a third dump at
/// once is told to try again, and the service answers `status` meanwhile.
#[test]
fn clients_that_never_read_a_dump_hold_up_nobody() {
    let mut svc = Service::start(&[("PINWATCH_STACKS", "full")]);
    // Enough events that a dump is more than the sockets buffer.
    svc.pin("storm 600 30ms", "pin_service: storm of 600 done");
    let pid = svc.pid;
    let socket = status(pid)["socket"].as_str().unwrap().to_owned();
    let stalled: Vec<UnixStream> = (0..2)
        .map(|_| {
            let mut s = UnixStream::connect(&socket).unwrap();
            s.write_all(b"{\"cmd\":\"dump\"}\n").unwrap();
            // Its reply line, then not a byte more is read.
            let mut head = Vec::new();
            let mut byte = [0u8];
            while byte[0] != b'\n' {
                s.read_exact(&mut byte).unwrap();
                head.push(byte[0]);
            }
            let v: Value = serde_json::from_slice(&head).unwrap();
            assert!(v["dump_bytes"].as_u64().unwrap() > 1 << 20, "{v}");
            s
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let out = cli(
        dir.path(),
        &["ctl", &pid.to_string(), "dump", "third.jsonl"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("busy"), "{err}");
    assert!(!dir.path().join("third.jsonl").exists());
    assert!(counter(&status(pid), "delivered") > 0);
    drop(stalled);
    // Once they are gone, a dump goes through.
    wait_for("a dump after the stalled ones", LONG, || {
        cli(
            dir.path(),
            &["ctl", &pid.to_string(), "dump", "third.jsonl"],
        )
        .status
        .success()
        .then_some(())
    });
    svc.finish();
}

/// `plain_serve ARGS` (an `axum::serve` service that pins once at start; `--graceful`: it
/// shuts down on SIGTERM/SIGINT itself) with the environment `envs` and no other `PINWATCH_*`
/// variable; its stdout and stderr lines, read as they come.
struct Plain {
    proc: support::Proc,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Plain {
    fn start(args: &[&str], envs: &[(&str, &str)]) -> Plain {
        use std::io::BufRead;
        use std::process::Stdio;
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plain_serve"));
        cmd.args(args)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, _) in std::env::vars() {
            if k.starts_with("PINWATCH") {
                cmd.env_remove(k);
            }
        }
        cmd.env("PINWATCH_CONTROL", "off")
            .envs(envs.iter().copied());
        // A service started from a terminal: SIGTERM and SIGINT at their default. A shell runs
        // a background job (`cmd &`, as CI may run these tests) with SIGINT ignored, and an
        // ignored signal stays ignored across `exec` — which pinwatch rightly leaves alone.
        // SAFETY: between fork and exec, only `signal`, which is async-signal-safe.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                for sig in [libc::SIGTERM, libc::SIGINT] {
                    if libc::signal(sig, libc::SIG_DFL) == libc::SIG_ERR {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        let out: Box<dyn Read + Send> = Box::new(child.stdout.take().unwrap());
        let err: Box<dyn Read + Send> = Box::new(child.stderr.take().unwrap());
        for stream in [out, err] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(stream)
                    .lines()
                    .map_while(Result::ok)
                {
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            });
        }
        Plain {
            proc: support::Proc {
                child,
                name: "plain_serve".into(),
            },
            lines,
        }
    }

    fn pid(&self) -> u32 {
        self.proc.child.id()
    }

    /// Waits (bounded) for a line that `wanted` accepts; returns it.
    fn expect(&mut self, what: &str, wanted: impl Fn(&str) -> bool) -> String {
        let mut seen = Vec::new();
        loop {
            match self.lines.recv_timeout(LONG) {
                Ok(l) if wanted(&l) => return l,
                Ok(l) => seen.push(l),
                Err(e) => panic!("plain_serve never said {what} ({e}); it said:\n{seen:#?}"),
            }
        }
    }

    /// The start-up line, then the report of its pin's end (once it is on stderr, the flight
    /// recording has it: the log line comes after the recordings).
    fn started_and_pinned(&mut self) -> String {
        let start = self.expect("its start-up line", |l| {
            l.starts_with("INFO pinwatch: watching ")
        });
        self.expect("the report of its pin's end", |l| {
            l.contains("pinned completed for") && l.contains("plain_serve.rs:")
        });
        start
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill only sends a signal, to our own child (not yet waited for).
        assert_eq!(unsafe { libc::kill(self.pid() as libc::pid_t, sig) }, 0);
    }

    /// Waits (bounded) for it to end; its exit status and every line it said after what was
    /// read already.
    fn end(&mut self) -> (std::process::ExitStatus, String) {
        let status = wait_for("plain_serve to exit", LONG, || {
            self.proc.child.try_wait().unwrap()
        });
        // Both pipes reach their end once the process is gone.
        let mut rest = String::new();
        while let Ok(l) = self.lines.recv_timeout(LONG) {
            rest.push_str(&l);
            rest.push('\n');
        }
        (status, rest)
    }
}

/// The pin `plain_serve` made at start, completed, in the dump at `path`.
fn has_plain_serve_pin(path: &Path) {
    let rec = read_recording(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(rec.damaged_lines, 0, "{:?}", rec.warnings);
    assert_eq!(rec.dumps.len(), 1);
    assert!(
        rec.events.iter().any(|e| e.state == State::Completed
            && e.duration >= Duration::from_millis(100)
            && e.spawned_at
                .as_ref()
                .is_some_and(|l| l.file.ends_with("plain_serve.rs"))),
        "no completed pin of plain_serve.rs in {:?}",
        rec.events
    );
}

/// The files in `dir`: the dump only, no temporary file left.
fn only_the_dump(dir: &Path) {
    let names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

/// `PINWATCH_DUMP_ON_EXIT` and a service with no signal handling of its own (`axum::serve`,
/// never dropped): `sig` writes the dump, with the pin, and the process then dies of `sig`
/// as it would have without pinwatch (a shell's `$?` is 128 + `sig`).
fn a_service_that_dies_of(sig: libc::c_int, name: &str) {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let pattern = dir.path().join("exit-%p.jsonl");
    let mut svc = Plain::start(&[], &[("PINWATCH_DUMP_ON_EXIT", pattern.to_str().unwrap())]);
    let path = dir.path().join(format!("exit-{}.jsonl", svc.pid()));
    let start = svc.started_and_pinned();
    let said = format!(
        "; dump on exit to {} (also on SIGTERM/SIGINT)",
        path.display()
    );
    assert!(
        start.ends_with(&said),
        "{said:?} not at the end of {start:?}"
    );
    svc.signal(sig);
    let (status, rest) = svc.end();
    assert_eq!(status.signal(), Some(sig), "{status:?}; it said:\n{rest}");
    assert!(
        rest.contains(&format!(
            "INFO pinwatch: wrote the flight recording to {} (",
            path.display()
        )) && rest.contains(&format!("; PINWATCH_DUMP_ON_EXIT at {name})")),
        "{rest}"
    );
    has_plain_serve_pin(&path);
    only_the_dump(dir.path());
}

#[test]
fn dump_on_exit_is_written_at_sigterm_then_the_service_dies_of_it() {
    a_service_that_dies_of(libc::SIGTERM, "SIGTERM");
}

#[test]
fn dump_on_exit_is_written_at_sigint_then_the_service_dies_of_it() {
    a_service_that_dies_of(libc::SIGINT, "SIGINT");
}

/// A service that shuts down gracefully on SIGTERM and SIGINT (tokio's `signal`, registered
/// after pinwatch's handler, which it calls): pinwatch does not end it. It says its own
/// shutdown lines and exits 0; the dump, written again when its detector stops, has the pin.
#[test]
fn dump_on_exit_leaves_a_graceful_shutdown_alone() {
    for (sig, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGINT, "SIGINT")] {
        let dir = tempfile::tempdir().unwrap();
        let pattern = dir.path().join("exit-%p.jsonl");
        let mut svc = Plain::start(
            &["--graceful"],
            &[("PINWATCH_DUMP_ON_EXIT", pattern.to_str().unwrap())],
        );
        let path = dir.path().join(format!("exit-{}.jsonl", svc.pid()));
        let start = svc.started_and_pinned();
        assert!(start.contains("(also on SIGTERM/SIGINT)"), "{start}");
        svc.signal(sig);
        svc.expect("its own shutdown", |l| {
            l == format!("plain_serve: {name}, shutting down")
        });
        svc.expect("that it shut down", |l| l == "plain_serve: shut down");
        let (status, rest) = svc.end();
        assert_eq!(status.code(), Some(0), "{status:?}; it said after:\n{rest}");
        // The stop's dump, whatever the signal's did.
        assert!(
            rest.contains(&format!(
                "INFO pinwatch: wrote the flight recording to {} (",
                path.display()
            )) && rest.contains("; PINWATCH_DUMP_ON_EXIT)"),
            "{rest}"
        );
        has_plain_serve_pin(&path);
        only_the_dump(dir.path());
    }
}

/// A dump that cannot be written at the signal (its directory was removed after start-up)
/// says why on stderr, and the process still dies of the signal.
#[test]
fn a_dump_that_fails_at_sigterm_says_why_and_the_service_still_dies() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("gone");
    std::fs::create_dir(&sub).unwrap();
    let pattern = sub.join("exit-%p.jsonl");
    let mut svc = Plain::start(&[], &[("PINWATCH_DUMP_ON_EXIT", pattern.to_str().unwrap())]);
    svc.started_and_pinned();
    std::fs::remove_dir(&sub).unwrap();
    svc.signal(libc::SIGTERM);
    let (status, rest) = svc.end();
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}; {rest}");
    let path = sub.join(format!("exit-{}.jsonl", svc.pid()));
    let why = format!(
        "ERROR pinwatch: PINWATCH_DUMP_ON_EXIT at SIGTERM: cannot dump the pinwatch flight \
         recording to {:?}: ",
        path
    );
    assert!(
        rest.lines()
            .any(|l| l.starts_with(&why) && l.contains("No such file or directory")),
        "{why:?} not said:\n{rest}"
    );
}

/// Two runtimes with a dump on exit in one process (`#[pinwatch::main]`'s and one built with
/// `pinwatch::Builder`, each its own file): one SIGTERM writes both, then the process dies of it.
#[test]
fn one_sigterm_writes_the_dump_of_every_runtime() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let main_path = dir.path().join("main-%p.jsonl");
    let second = dir.path().join("second.jsonl");
    let mut svc = Plain::start(
        &["--second-runtime", second.to_str().unwrap()],
        &[("PINWATCH_DUMP_ON_EXIT", main_path.to_str().unwrap())],
    );
    let main_path = dir.path().join(format!("main-{}.jsonl", svc.pid()));
    for n in 0..2 {
        svc.expect(&format!("the report of pin {n}'s end"), |l| {
            l.contains("pinned completed for") && l.contains("plain_serve.rs:")
        });
    }
    svc.signal(libc::SIGTERM);
    let (status, rest) = svc.end();
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}; {rest}");
    for path in [&main_path, &second] {
        assert!(
            rest.contains(&format!(
                "wrote the flight recording to {} (",
                path.display()
            )),
            "{} not written:\n{rest}",
            path.display()
        );
        has_plain_serve_pin(path);
    }
}

/// `pinwatch ctl PID dump /dev/stdout | head`: the pipe's reader gone ends the dump quietly,
/// status 0, as `print` ends; but a service that refuses (its flight recording off) is said
/// and fails, reader or not (helper-62: both were quiet). The pipe's read end is closed before
/// the client starts, so its every write fails.
#[test]
fn a_dump_into_a_closed_pipe_is_quiet_and_a_refusal_is_not() {
    let dump = |pid: u32| {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        Command::new(pinwatch_cli())
            .args(["ctl", &pid.to_string(), "dump", "/dev/stdout"])
            .env_remove("PINWATCH_CONTROL")
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap()
    };
    let mut svc = Service::start(&[]);
    svc.pin("pin 60ms", "pin_service: pin of 60ms done");
    let out = dump(svc.pid);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.is_empty(),
        "{:?}: {err}",
        out.status
    );
    svc.finish();

    let mut off = Service::start(&[("PINWATCH_FLIGHT_SIZE", "off")]);
    let out = dump(off.pid);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("flight recording is off"), "{err}");
    off.finish();
}
