//! The sample binaries at small sizes: each runs, prints its table, and shows what it should.

use std::process::Command;

/// One sample at a time: two sharing two cores would stretch each other's polls past the
/// threshold and make a fixed variant look pinned.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn run(bin: &str, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args(args)
        .env_remove("PINWATCH")
        .env_remove("PINWATCH_RECORD")
        .env_remove("PINWATCH_THRESHOLD")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{bin} {args:?}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs `cmd` (`what` names it) to its end and returns its output, waited for on a thread: one
/// that still runs after 120 s is killed and fails the test, instead of hanging the suite.
fn output_within_120_s(what: &str, cmd: &mut Command) -> std::process::Output {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(std::time::Duration::from_secs(120)) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("{what} still ran after 120 s");
        }
    }
}

fn row<'a>(table: &'a str, first: &str) -> Vec<&'a str> {
    table
        .lines()
        .find(|l| l.split('|').next().map(str::trim) == Some(first))
        .unwrap_or_else(|| panic!("no row {first:?} in\n{table}"))
        .split('|')
        .map(str::trim)
        .collect()
}

#[test]
fn http_server_reports_the_handler_line_and_the_fixed_one_is_clean() {
    let _serial = serial();
    let out = run(
        env!("CARGO_BIN_EXE_http_server"),
        &["--quick", "--tasks", "20"],
    );
    let bad = row(&out, "bad");
    let fixed = row(&out, "fixed");
    // variant | workers | tasks | time | measured | pinned | reasons | stalled runtime | top frame
    assert!(bad[5].parse::<u32>().unwrap() > 0, "{out}");
    assert!(bad[6].contains("sleep"), "{out}");
    assert!(bad[8].contains("src/http.rs:"), "{out}");
    assert_eq!(fixed[5], "0", "{out}");
    let rps = |cell: &str| -> f64 { cell.split(" req/s").next().unwrap().parse().unwrap() };
    assert!(rps(fixed[4]) > rps(bad[4]) * 3.0, "{out}");
}

/// The pinned events of a recording (`PINWATCH_RECORD`): the completed `pinned` lines.
fn completed_pins(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "pinned" && v["state"] == "completed")
        .collect()
}

/// `blocking_dns`, under pinwatch with a recording, resolving with its own nameserver on
/// loopback (in namespaces of its own: as root in CI, or in a user namespace): each blocking
/// lookup is a `dns` pin at the `to_socket_addrs` line, with advice to use `lookup_host`; the
/// fixed variant (`tokio::net::lookup_host`) pins nothing.
#[test]
fn blocking_dns_is_a_dns_pin_at_the_lookup_line_and_lookup_host_is_clean() {
    let _serial = serial();
    let source = include_str!("../sample-apps/src/dns.rs");
    let line = source
        .lines()
        .position(|l| l.contains(".to_socket_addrs(); // pinned"))
        .expect("the blocking lookup in dns.rs")
        + 1;
    let dir = tempfile::tempdir().unwrap();
    let record = |variant: &str| {
        let path = dir.path().join(format!("{variant}.jsonl"));
        let out = Command::new(env!("CARGO_BIN_EXE_blocking_dns"))
            .args(["--variant", variant, "--tasks", "4"])
            .env_remove("PINWATCH")
            .env_remove("PINWATCH_THRESHOLD")
            .env("PINWATCH_RECORD", &path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "blocking_dns --variant {variant}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (completed_pins(&path), stdout)
    };
    let (pins, out) = record("bad");
    assert!(pins.len() >= 2, "{} pins: {out}", pins.len());
    for p in &pins {
        assert_eq!(p["reason"], "dns", "{p}");
        let top = &p["top_frame"];
        assert!(
            top["file"]
                .as_str()
                .is_some_and(|f| f.ends_with("sample-apps/src/dns.rs")),
            "{p}"
        );
        assert_eq!(top["line"], line, "{p}");
        assert!(
            p["advice"]
                .as_str()
                .is_some_and(|a| a.contains("lookup_host")),
            "{p}"
        );
    }
    let (pins, out) = record("fixed");
    assert!(pins.is_empty(), "{pins:?}\n{out}");
    assert_eq!(row(&out, "fixed")[5], "0", "{out}");
}

#[test]
fn io_bench_small() {
    let _serial = serial();
    let out = run(env!("CARGO_BIN_EXE_io_bench"), &["--tasks", "1000"]);
    let tokio = row(&out, "tokio");
    // mode | tasks | wall time | peak OS threads | peak RSS | notes
    assert!(tokio[3].parse::<u32>().unwrap() < 50, "{out}");
    assert_eq!(tokio[5], "pinned polls: 0", "{out}");
    let threads = row(&out, "thread-per-task");
    assert!(threads[3].parse::<u32>().unwrap() > 50, "{out}");
    assert!(row(&out, "pool-200")[2].ends_with("ms"), "{out}");
}

#[test]
fn cpu_bench_small() {
    let _serial = serial();
    let out = run(
        env!("CARGO_BIN_EXE_cpu_bench"),
        &["--tasks", "40", "--limit", "5000", "--rounds", "1"],
    );
    for mode in ["tokio tasks", "pool of cores", "rayon"] {
        assert!(row(&out, mode)[2].ends_with("ms"), "{out}");
    }
}

#[test]
fn semaphore_keeps_the_downstream_within_its_limit() {
    let _serial = serial();
    let out = run(
        env!("CARGO_BIN_EXE_semaphore"),
        &["--tasks", "400", "--latency", "2ms"],
    );
    let fixed = row(&out, "Semaphore(limit)");
    // variant | tasks | limit | max concurrency | calls over limit | ...
    assert_eq!(fixed[3], "20", "{out}");
    assert_eq!(fixed[4], "0", "{out}");
    let unlimited = row(&out, "no limit");
    assert!(unlimited[3].parse::<u32>().unwrap() > 20, "{out}");
}

#[test]
fn every_case_binary_has_help() {
    let _serial = serial();
    for bin in [
        env!("CARGO_BIN_EXE_lock_sleep"),
        env!("CARGO_BIN_EXE_lazy_init"),
        env!("CARGO_BIN_EXE_ffi_block"),
        env!("CARGO_BIN_EXE_blocking_dns"),
        env!("CARGO_BIN_EXE_cpu_hog"),
        env!("CARGO_BIN_EXE_blocking_io"),
        env!("CARGO_BIN_EXE_lock_contention"),
        env!("CARGO_BIN_EXE_blocking_wait"),
        env!("CARGO_BIN_EXE_http_server"),
        env!("CARGO_BIN_EXE_library_cpu"),
        env!("CARGO_BIN_EXE_blocked_log"),
        env!("CARGO_BIN_EXE_block_on_in_drop"),
        env!("CARGO_BIN_EXE_large_drop"),
        env!("CARGO_BIN_EXE_spin_read"),
    ] {
        let out = run(bin, &["--help"]);
        assert!(
            out.contains("--workers") && out.contains("--variant"),
            "{out}"
        );
    }
}

/// The binaries that are not pinning cases — tests' fixtures, benchmarks, `tour` — answer
/// `--help` with their usage and start no service of theirs (under `#[pinwatch::main]`,
/// `first_pin`'s and `plain_serve`'s detector has started): `stdout_logger` and
/// `fmt_then_console` used to ignore it and start their service (the first logs until killed),
/// `first_pin` and `plain_serve` refused it. Each is waited for on a thread, so that one that
/// serves instead fails here after a bound instead of hanging the suite.
#[test]
fn every_other_binary_answers_help_and_starts_no_service() {
    for bin in [
        env!("CARGO_BIN_EXE_first_pin"),
        env!("CARGO_BIN_EXE_plain_serve"),
        env!("CARGO_BIN_EXE_stdout_logger"),
        env!("CARGO_BIN_EXE_fmt_then_console"),
        env!("CARGO_BIN_EXE_pin_service"),
        env!("CARGO_BIN_EXE_deadlock"),
        env!("CARGO_BIN_EXE_traced_service"),
        env!("CARGO_BIN_EXE_semaphore"),
        env!("CARGO_BIN_EXE_cpu_bench"),
        env!("CARGO_BIN_EXE_io_bench"),
        env!("CARGO_BIN_EXE_tour"),
    ] {
        let out = output_within_120_s(
            &format!("{bin} --help"),
            Command::new(bin)
                .arg("--help")
                .env("PINWATCH_CONTROL", "off")
                .env_remove("PINWATCH_RECORD")
                .env_remove("PINWATCH_DUMP_ON_EXIT"),
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("Usage:"),
            "{bin} --help: {:?}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A fixture refuses an argument it does not take, naming it, and two where it takes one, with
/// its usage.
#[test]
fn a_fixture_refuses_an_argument_it_does_not_take() {
    let refused = |bin: &str, args: &[&str], says: &str| {
        let out = Command::new(bin)
            .args(args)
            .env("PINWATCH_CONTROL", "off")
            .env_remove("PINWATCH_RECORD")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(says) && stderr.contains("Usage:"),
            "{args:?}: {stderr}"
        );
    };
    refused(
        env!("CARGO_BIN_EXE_fmt_then_console"),
        &["--verbose"],
        "unknown argument \"--verbose\"",
    );
    refused(
        env!("CARGO_BIN_EXE_first_pin"),
        &["--fmt", "--console-layer"],
        "one argument at most",
    );
}

/// Under `#[pinwatch::main]` the detector has started when the arguments are read: `--help` and
/// a refused argument return from `main`, so the detector's shutdown runs and writes the dump
/// that `PINWATCH_DUMP_ON_EXIT` asks for. (`std::process::exit` skipped it: no file at all.)
#[test]
fn under_pinwatch_main_help_and_a_refusal_still_dump_on_exit() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &[&str], i32); 4] = [
        (env!("CARGO_BIN_EXE_first_pin"), &["--help"], 0),
        (env!("CARGO_BIN_EXE_first_pin"), &["--verbose"], 2),
        (env!("CARGO_BIN_EXE_plain_serve"), &["-h"], 0),
        (
            env!("CARGO_BIN_EXE_plain_serve"),
            &["--graceful", "--verbose"],
            2,
        ),
    ];
    for (k, (bin, args, code)) in cases.into_iter().enumerate() {
        let dump = dir.path().join(format!("dump-{k}.jsonl"));
        let out = output_within_120_s(
            &format!("{bin} {args:?}"),
            Command::new(bin)
                .args(args)
                .env("PINWATCH_CONTROL", "off")
                .env("PINWATCH_DUMP_ON_EXIT", &dump)
                .env_remove("PINWATCH_RECORD"),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{bin} {args:?}: {stderr}");
        let written = std::fs::read_to_string(&dump).unwrap_or_else(|e| {
            panic!(
                "{bin} {args:?}: no dump at {}: {e}\n{stderr}",
                dump.display()
            )
        });
        assert!(
            written.starts_with('{') && written.contains("\"event\":\"dump\""),
            "{bin} {args:?}: {written}"
        );
    }
}

#[test]
fn pin_service_with_stuck_workers_ends_at_its_for() {
    // Its stuck workers never return, so its runtime could never be dropped: `--for` must end
    // the process all the same — with all three workers stuck too, when no timer of the
    // runtime fires (helper-60 found that one running after 10 minutes). Waited for on a
    // thread, so that a run that never ends fails here (after a bound far past the 200 ms asked
    // for) instead of hanging the suite.
    for stuck in ["2", "3"] {
        let out = output_within_120_s(
            &format!("pin_service --stuck {stuck} --for 200ms"),
            Command::new(env!("CARGO_BIN_EXE_pin_service"))
                .args(["--stuck", stuck, "--quiet", "--for", "200ms"])
                .env("PINWATCH_CONTROL", "off")
                .env_remove("PINWATCH_RECORD"),
        );
        assert!(out.status.success(), "{}", out.status);
        let said = String::from_utf8_lossy(&out.stdout);
        let line = format!("pin_service: stopped ({stuck} workers still stuck)");
        assert_eq!(said.matches(&line).count(), 1, "{said}");
    }
}
