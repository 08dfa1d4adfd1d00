//! `pinwatch profile`: a sample app's recording as a pprof profile, read by the real
//! `go tool pprof` (Debian's `golang-go`, which `tests/run.sh` installs).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

mod support;

const LONG: std::time::Duration = std::time::Duration::from_secs(60);

/// One sample app at a time (they would stretch each other's polls).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs sample app `bin` (its bad variant) with a recording into `dir`; returns the recording.
fn record(bin: &str, dir: &Path, env: &[(&str, &str)]) -> PathBuf {
    let path = dir.join("pinned.jsonl");
    let out = Command::new(bin)
        .args(["--variant", "bad"])
        .env_remove("PINWATCH")
        .env_remove("PINWATCH_THRESHOLD")
        .env_remove("PINWATCH_STACKS")
        .env("PINWATCH_RECORD", &path)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{bin}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

/// The recording's pins: the last report of each (run, id) that is not retracted, as JSON.
fn pins(recording: &Path) -> Vec<serde_json::Value> {
    let mut last: BTreeMap<(String, u64), serde_json::Value> = BTreeMap::new();
    for line in std::fs::read_to_string(recording).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["event"] == "pinned" {
            let key = (
                v["run_id"].as_str().unwrap().to_owned(),
                v["id"].as_u64().unwrap(),
            );
            last.insert(key, v);
        }
    }
    last.into_values()
        .filter(|v| v["state"] != "retracted")
        .collect()
}

/// `pinwatch profile ARGS`: its stdout; fails the test when it fails.
fn profile(args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(support::pinwatch_cli())
        .arg("profile")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pinwatch profile {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `go tool pprof -symbolize=none ARGS FILE`, offline, with its caches in `dir`.
fn go_pprof(dir: &Path, args: &[&str], file: &Path) -> String {
    let go = support::system_binary("go", "golang-go");
    let home = dir.join("go-home");
    std::fs::create_dir_all(&home).unwrap();
    let out = Command::new(go)
        .args(["tool", "pprof", "-symbolize=none"])
        .args(args)
        .arg(file)
        .current_dir(dir)
        .env("HOME", &home)
        .env("GOCACHE", home.join("cache"))
        .env("GOPATH", home.join("path"))
        .env("PPROF_TMPDIR", &home)
        // Never reach for a toolchain or module over the network.
        .env("GOTOOLCHAIN", "local")
        .env("GOPROXY", "off")
        .env("GOFLAGS", "")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "go tool pprof {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The rows of `go tool pprof -top`: (flat, cum, name), in its order.
fn top_rows(text: &str) -> Vec<(f64, f64, String)> {
    let number = |cell: &str| -> f64 {
        cell.trim_end_matches("ms")
            .parse()
            .unwrap_or_else(|_| panic!("{cell:?} in\n{text}"))
    };
    text.lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            (number(cells[0]), number(cells[3]), cells[5..].join(" "))
        })
        .collect()
}

/// The total of `-top`'s header: `Showing nodes accounting for X, 100% of T total`.
fn top_total(text: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| l.starts_with("Showing nodes"))
        .unwrap_or_else(|| panic!("no total in\n{text}"));
    let t = line.split(" of ").nth(1).unwrap();
    t.trim_end_matches(" total")
        .trim_end_matches("ms")
        .parse()
        .unwrap_or_else(|_| panic!("{line}"))
}

/// `lock_sleep` (8 tasks sleeping 100 ms inside a std lock) with the default stacks: in
/// `go tool pprof -top`, the sleeping closure is the top entry, with all the pinned time —
/// the sum of the recording's pins' durations; `-sample_index=pins` counts the recording's
/// pins; `-traces` shows the `reason` and `spawned_at` labels.
#[test]
fn go_tool_pprof_reads_the_profile_the_blocking_closure_on_top_with_all_the_pinned_time() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = record(env!("CARGO_BIN_EXE_lock_sleep"), dir.path(), &[]);
    let pins = pins(&rec);
    assert!(!pins.is_empty(), "no pins recorded");
    let total_ms: f64 = pins
        .iter()
        .map(|p| p["duration_ms"].as_f64().unwrap())
        .sum();
    let out = dir.path().join("pinned.pb.gz");
    let said = profile(&[rec.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    assert!(said.contains(&format!("{} pins", pins.len())), "{said}");

    let top = go_pprof(dir.path(), &["-top", "-unit=ms"], &out);
    let rows = top_rows(&top);
    let (flat, cum, name) = &rows[0];
    assert!(
        closure_of(name, "sample_apps::lock_sleep"),
        "the blocking closure is the top entry:\n{top}"
    );
    // pprof prints two decimals; the recording has microseconds.
    assert!(
        (flat - total_ms).abs() < 0.02,
        "{flat} vs {total_ms}:\n{top}"
    );
    assert!((cum - total_ms).abs() < 0.02, "{cum} vs {total_ms}:\n{top}");
    assert!((top_total(&top) - total_ms).abs() < 0.02, "{top}");
    assert!(
        top.contains("Type: pinned"),
        "the default sample type:\n{top}"
    );

    let count = go_pprof(dir.path(), &["-top", "-sample_index=pins"], &out);
    assert!(count.contains("Type: pins"), "{count}");
    assert_eq!(top_total(&count), pins.len() as f64, "{count}");

    let traces = go_pprof(dir.path(), &["-traces"], &out);
    assert!(traces.contains("reason:  sleep"), "{traces}");
    assert!(
        traces.contains("spawned_at:  sample-apps/src/lib.rs:"),
        "{traces}"
    );
    assert!(
        traces
            .lines()
            .filter_map(|l| l.split_whitespace().last())
            .any(|f| closure_of(f, "sample_apps::lock_sleep")),
        "{traces}"
    );

    // `-lines`: the sleep's own line.
    let lines = go_pprof(dir.path(), &["-top", "-lines"], &out);
    let sleep_line = include_str!("../sample-apps/src/lib.rs")
        .lines()
        .position(|l| l.contains("// pinned: sleeps holding a std lock"))
        .unwrap()
        + 1;
    assert!(
        lines.contains(&format!("sample-apps/src/lib.rs:{sleep_line}")),
        "line {sleep_line}:\n{lines}"
    );
}

/// `blocking_io` with full stacks: the blocking system call's libc frame is the leaf and the
/// sample app's closure is below it in every trace, with the `io` reason; each of the two
/// blocking functions (a file read, a socket read) carries its pins' time, and the closure's
/// cumulative time is the whole recording's pinned time.
#[test]
fn full_stacks_keep_every_frame_in_order_leaf_first() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = record(
        env!("CARGO_BIN_EXE_blocking_io"),
        dir.path(),
        &[("PINWATCH_STACKS", "full")],
    );
    let pins = pins(&rec);
    assert!(!pins.is_empty(), "no pins recorded");
    let total_ms: f64 = pins
        .iter()
        .map(|p| p["duration_ms"].as_f64().unwrap())
        .sum();
    let out = dir.path().join("full.pb.gz");
    profile(&[rec.as_os_str(), "--output".as_ref(), out.as_os_str()]);

    let top = go_pprof(dir.path(), &["-top", "-unit=ms"], &out);
    assert!((top_total(&top) - total_ms).abs() < 0.02, "{top}");
    let rows = top_rows(&top);
    // One node for both blocking blocks (`{{closure}}`, full debug info), or one each (line
    // tables: `{async_block#2}`, `{async_block#3}`); none is inside another.
    let closure: f64 = rows
        .iter()
        .filter(|(_, _, n)| closure_of(n, "sample_apps::blocking_io"))
        .map(|(_, cum, _)| *cum)
        .sum();
    assert!(
        (closure - total_ms).abs() < 0.02,
        "{closure} vs {total_ms}:\n{top}"
    );

    let traces = go_pprof(dir.path(), &["-traces"], &out);
    let mut blocks = 0;
    for block in traces.split("-----------+").skip(1) {
        let lines: Vec<&str> = block.lines().skip(1).collect();
        // The labels, then the first frame after the sample's value (`  117.81ms   __libc_read`),
        // then one frame a line.
        let Some(first) = lines
            .iter()
            .position(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        else {
            continue;
        };
        blocks += 1;
        assert!(
            lines[..first].iter().any(|l| l.trim() == "reason:  io"),
            "{block}"
        );
        let mut frames: Vec<&str> = lines[first + 1..].iter().map(|l| l.trim()).collect();
        frames.insert(
            0,
            lines[first].trim_start().split_once(' ').unwrap().1.trim(),
        );
        let app = frames
            .iter()
            .position(|f| closure_of(f, "sample_apps::blocking_io"))
            .unwrap_or_else(|| panic!("no app frame in {block}"));
        let read = frames
            .iter()
            .position(|f| f.contains("::read") || f.contains("::recv"))
            .unwrap_or_else(|| panic!("no read in {block}"));
        assert!(
            read < app,
            "the read is a callee of (above) the closure: {block}"
        );
        assert!(
            app + 1 < frames.len(),
            "the closure's callers follow it: {block}"
        );
    }
    assert!(blocks > 0, "{traces}");
}

/// The errors: no such file, a file that is no recording, an empty recording; `-o` naming the
/// recording itself is refused, leaving it whole; `--seconds` keeps the recording's last
/// seconds.
#[test]
fn clear_errors_and_the_recording_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&std::ffi::OsStr]| {
        let out = Command::new(support::pinwatch_cli())
            .arg("profile")
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let missing = dir.path().join("missing.jsonl");
    let (code, err) = run(&[missing.as_os_str()]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("cannot read") && err.contains("missing.jsonl"),
        "{err}"
    );

    let not_rec = dir.path().join("notes.txt");
    std::fs::write(&not_rec, "hello\nworld\n").unwrap();
    let (code, err) = run(&[not_rec.as_os_str()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("is it a recording"), "{err}");

    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let (code, err) = run(&[empty.as_os_str()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("holds no pins: no profile written"), "{err}");
    assert!(!dir.path().join("empty.pb.gz").exists());

    // A recording of two pins 10 s apart (lines as pinwatch writes them).
    let rec = dir.path().join("rec.jsonl");
    let line = |id: u32, start: &str, ms: &str| {
        format!(
            r#"{{"schema":2,"event":"pinned","id":{id},"run_id":"r","pid":1,"state":"completed","start":"{start}","duration_ms":{ms},"threshold_ms":20.0,"task_id":1,"spawned_at":null,"worker":{{"index":0,"tid":1,"name":"w"}},"reason":"sleep","blocking_operation":"clock_nanosleep","top_frame":{{"function":"app::f","file":"src/app.rs","line":3}},"stack":[{{"function":"app::f","file":"src/app.rs","line":3}}],"held_locks":[],"samples":1,"report":1}}"#
        ) + "\n"
    };
    let text =
        line(1, "2026-05-28T20:26:40.123456Z", "30.5") + &line(2, "2026-05-28T20:26:50Z", "10.0");
    std::fs::write(&rec, &text).unwrap();
    let (code, err) = run(&[rec.as_os_str(), "-o".as_ref(), rec.as_os_str()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("is the recording"), "{err}");
    assert_eq!(std::fs::read_to_string(&rec).unwrap(), text);

    // The default output: beside the recording, `.pb.gz`, replaced when it exists.
    let written = dir.path().join("rec.pb.gz");
    std::fs::write(&written, "old").unwrap();
    let said = profile(&[rec.as_os_str()]);
    assert!(
        said.contains("rec.pb.gz (2 pins, 40.5 ms pinned, 1 profile sample)"),
        "{said}"
    );
    let p = pinwatch::profile::decode(&std::fs::read(&written).unwrap()).unwrap();
    assert_eq!(p.sample[0].value, [2, 40_500_000]);

    let said = profile(&[rec.as_os_str(), "--seconds".as_ref(), "5".as_ref()]);
    assert!(
        said.contains("(1 pin, 10.0 ms pinned, 1 profile sample)"),
        "{said}"
    );
    let p = pinwatch::profile::decode(&std::fs::read(&written).unwrap()).unwrap();
    assert_eq!(p.sample[0].value, [1, 10_000_000]);
}

/// A profile as comparable data: for each (stack of `function file:line`, labels), its
/// `pins` and `pinned` values summed.
type Canonical = BTreeMap<(Vec<String>, Vec<(String, String)>), (i64, i64)>;

fn canonical(bytes: &[u8]) -> Canonical {
    let p = pinwatch::profile::decode(bytes).expect("a profile pinwatch can read back");
    let s = |i: i64| p.string_table[i as usize].clone();
    let mut out = Canonical::new();
    for sample in &p.sample {
        let stack: Vec<String> = sample
            .location_id
            .iter()
            .flat_map(|id| {
                let loc = p.location.iter().find(|l| l.id == *id).unwrap();
                loc.line.iter().map(|line| {
                    let f = p
                        .function
                        .iter()
                        .find(|f| f.id == line.function_id)
                        .unwrap();
                    format!("{} {}:{}", s(f.name), s(f.filename), line.line)
                })
            })
            .collect();
        let mut labels: Vec<(String, String)> =
            sample.label.iter().map(|l| (s(l.key), s(l.str))).collect();
        labels.sort();
        let v = out.entry((stack, labels)).or_default();
        v.0 += sample.value[0];
        v.1 += sample.value[1];
    }
    out
}

/// GET `url`: status and body, as bytes.
fn get_bytes(url: &str) -> (u16, Vec<u8>) {
    let mut r = support::agent(std::time::Duration::from_secs(30))
        .get(url)
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = r.status().as_u16();
    let body = r
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_vec()
        .unwrap();
    (status, body)
}

/// A live service's pins as a profile three ways — `/debug/pprof/pinned` on its Prometheus
/// endpoint, `pinwatch ctl <pid> profile -o`, and `pinwatch profile` of its recording — give the
/// same samples, and `go tool pprof -top` reads the endpoint's with the same rows and total as
/// the recording's. `seconds` picks the pins of the last N seconds; a bad one is refused.
#[test]
fn the_endpoint_ctl_and_a_recording_give_the_same_profile() {
    use support::service::Service;
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec.jsonl");
    let port = support::free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut svc = Service::start(&[
        ("PINWATCH_RECORD", rec.to_str().unwrap()),
        ("PINWATCH_PROMETHEUS_ADDR", &addr),
    ]);
    for ms in [300, 150, 300] {
        svc.pin(
            &format!("pin {ms}ms"),
            &format!("pin_service: pin of {ms}ms done"),
        );
    }
    let url = format!("http://{addr}{}", "/debug/pprof/pinned");
    // The pins have ended; wait until the last one's completion is exported everywhere.
    let endpoint = support::wait_for("the three pins in the profile", LONG, || {
        let (status, body) = get_bytes(&url);
        if status == 503 {
            // Asked again before as long as the last profile took to make: try later.
            return None;
        }
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        // Every pin completed in the recording, and the profile's time is theirs (a pin whose
        // last report in the buffer is still `in_progress` counts only its time so far).
        let done: Vec<_> = pins(&rec)
            .into_iter()
            .filter(|p| p["state"] == "completed")
            .collect();
        let recorded: f64 = done
            .iter()
            .map(|p| p["duration_ms"].as_f64().unwrap())
            .sum();
        let profiled = canonical(&body);
        let counted: i64 = profiled.values().map(|v| v.0).sum();
        let nanos: i64 = profiled.values().map(|v| v.1).sum();
        (done.len() == 3 && counted == 3 && (nanos as f64 / 1e6 - recorded).abs() < 0.01)
            .then_some(body)
    });
    let from_endpoint = canonical(&endpoint);
    let nanos: i64 = from_endpoint.values().map(|v| v.1).sum();
    let recorded: f64 = pins(&rec)
        .iter()
        .map(|p| p["duration_ms"].as_f64().unwrap())
        .sum();
    assert!(
        (nanos as f64 / 1e6 - recorded).abs() < 0.01 && recorded >= 750.0,
        "{nanos} ns vs {recorded} ms recorded"
    );
    assert!(
        from_endpoint
            .keys()
            .all(|(_, labels)| labels.iter().any(|(k, v)| k == "reason" && v == "sleep")),
        "{from_endpoint:?}"
    );

    let ctl_out = dir.path().join("ctl.pb.gz");
    let pid = svc.pid.to_string();
    let out = Command::new(support::pinwatch_cli())
        .args(["ctl", &pid, "profile", "-o"])
        .arg(&ctl_out)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("3 pins"),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(canonical(&std::fs::read(&ctl_out).unwrap()), from_endpoint);
    // An existing file is not replaced unasked.
    let again = Command::new(support::pinwatch_cli())
        .args(["ctl", &pid, "profile", "-o"])
        .arg(&ctl_out)
        .output()
        .unwrap();
    assert!(
        !again.status.success() && String::from_utf8_lossy(&again.stderr).contains("--force"),
        "{again:?}"
    );

    let rec_out = dir.path().join("rec.pb.gz");
    profile(&[rec.as_os_str(), "-o".as_ref(), rec_out.as_os_str()]);
    assert_eq!(canonical(&std::fs::read(&rec_out).unwrap()), from_endpoint);

    let served = dir.path().join("served.pb.gz");
    std::fs::write(&served, &endpoint).unwrap();
    let top_served = go_pprof(dir.path(), &["-top", "-unit=ms"], &served);
    let top_rec = go_pprof(dir.path(), &["-top", "-unit=ms"], &rec_out);
    assert_eq!(
        top_rows(&top_served),
        top_rows(&top_rec),
        "{top_served}\n{top_rec}"
    );
    assert!(
        (top_total(&top_served) - recorded).abs() < 0.02,
        "{top_served}"
    );

    // `seconds`: an hour holds every pin; a bad value is refused, naming it; POST is not GET.
    let body = support::wait_for("a profile of the last hour", LONG, || {
        let (status, body) = get_bytes(&format!("{url}?seconds=3600"));
        // 503: asked sooner than the last profile took to make (see docs/profiling.md).
        (status != 503).then(|| {
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
            body
        })
    });
    assert_eq!(canonical(&body), from_endpoint);
    for bad in ["abc", "0", "-5", "99999999999999999999"] {
        let (status, body) = get_bytes(&format!("{url}?seconds={bad}"));
        let text = String::from_utf8_lossy(&body);
        assert!(
            status == 400 && text.contains(&format!("seconds={bad} is not")),
            "{status} {text}"
        );
    }
    let post = support::agent(std::time::Duration::from_secs(30))
        .post(&url)
        .send("")
        .unwrap();
    assert_eq!(post.status().as_u16(), 405);
    svc.finish();
}

/// Without the flight recording there is nothing to profile: the endpoint says so (404) and
/// `ctl profile` fails naming the setting.
#[test]
fn without_the_flight_recording_the_endpoint_says_it_is_off() {
    use support::service::Service;
    let _serial = serial();
    let port = support::free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut svc = Service::start(&[
        ("PINWATCH_PROMETHEUS_ADDR", &addr),
        ("PINWATCH_FLIGHT_SIZE", "off"),
    ]);
    let (status, body) = get_bytes(&format!("http://{addr}/debug/pprof/pinned"));
    let text = String::from_utf8_lossy(&body);
    assert!(
        status == 404 && text.contains("PINWATCH_FLIGHT_SIZE=off"),
        "{status} {text}"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(support::pinwatch_cli())
        .args(["ctl", &svc.pid.to_string(), "profile", "-o"])
        .arg(dir.path().join("p.pb.gz"))
        .output()
        .unwrap();
    assert!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("PINWATCH_FLIGHT_SIZE=off"),
        "{out:?}"
    );
    assert!(!dir.path().join("p.pb.gz").exists());
    svc.finish();
}

/// Whether `name` is a closure or async block of the function `module`, as the symbolizer names
/// it from full debug info (`module::{{closure}}`, the symbol's demangled name) or from line
/// tables only, as the workspace builds (`module::{async_fn#0}::{closure#0}::…`: the DWARF
/// name, which says which block).
fn closure_of(name: &str, module: &str) -> bool {
    name.strip_prefix(module)
        .and_then(|rest| rest.strip_prefix("::"))
        .is_some_and(|rest| {
            ["{{closure}}", "{async_fn#", "{closure#", "{async_block#"]
                .iter()
                .any(|c| rest.starts_with(c))
        })
}
