//! The `pinwatch` CLI: golden output on a checked-in recording (made by `tour` with
//! `PINWATCH_RECORD`, paths made relative), and bad input.

use std::path::{Path, PathBuf};
use std::process::Command;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn pinwatch(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pinwatch"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// `pinwatch report RECORDING -o OUTPUT`.
fn report_to(recording: &str, output: &str) -> (i32, String, String) {
    pinwatch(&["report", recording, "-o", output])
}

/// Source line numbers replaced by `N`, so that a golden file survives edits of the sources it
/// names.
fn normalise(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(".rs:") {
        out.push_str(&rest[..i + 4]);
        rest = &rest[i + 4..];
        let digits = rest.chars().take_while(|c| c.is_ascii_digit()).count();
        if digits > 0 {
            out.push('N');
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

fn golden(args: &[&str], file: &str) {
    golden_of("recording.jsonl", args, file);
}

/// The output of `pinwatch ARGS RECORDING` is the golden file `file`'s.
fn golden_of(recording: &str, args: &[&str], file: &str) {
    let rec = data(recording);
    let mut all = args.to_vec();
    all.push(rec.to_str().unwrap());
    let (code, out, err) = pinwatch(&all);
    assert_eq!(code, 0, "{err}");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(data(file), &out).unwrap();
    }
    let want = std::fs::read_to_string(data(file)).unwrap();
    assert_eq!(
        normalise(&out),
        normalise(&want),
        "output differs from {file} (UPDATE_GOLDEN=1 rewrites it)"
    );
}

#[test]
fn print_matches_golden() {
    golden(&["print"], "print.golden");
}

#[test]
fn summary_matches_golden() {
    golden(&["summary"], "summary.golden");
}

#[test]
fn json_outputs_parse() {
    let rec = data("recording.jsonl");
    let (code, out, _) = pinwatch(&["summary", "--json", rec.to_str().unwrap()]);
    assert_eq!(code, 0);
    let summary: serde_json::Value = serde_json::from_str(&out).unwrap();
    // Every table of the text: the locations, and who waited (nobody measured here).
    assert_eq!(summary["who_waited"]["measured_pins"], 0);
    assert_eq!(summary["who_waited"]["rows"], serde_json::json!([]));
    let rows = summary["locations"].as_array().unwrap();
    assert!(!rows.is_empty());
    // Sorted by total time, descending.
    let totals: Vec<f64> = rows
        .iter()
        .map(|r| r["total_ms"].as_f64().unwrap())
        .collect();
    assert!(totals.windows(2).all(|w| w[0] >= w[1]), "{totals:?}");
    let (code, out, _) = pinwatch(&["print", "--json", rec.to_str().unwrap()]);
    assert_eq!(code, 0);
    let original = std::fs::read_to_string(&rec).unwrap();
    assert_eq!(out.lines().count(), original.lines().count());
    for line in out.lines() {
        pinwatch::PinnedEvent::from_json_line(line).unwrap();
    }
}

/// A recording with victims (`victims.jsonl`: measured ones, a pin whose waits were not
/// measured, one from before victims, a running and a retracted one): `print` shows each pin's,
/// `summary` a "who waited" table of the completed pins'.
#[test]
fn print_of_victims_matches_golden() {
    golden_of("victims.jsonl", &["print"], "victims-print.golden");
}

#[test]
fn summary_of_victims_matches_golden() {
    golden_of("victims.jsonl", &["summary"], "victims-summary.golden");
}

/// `summary --json` holds the same "who waited" table as the text.
#[test]
fn summary_json_has_the_who_waited_table() {
    let rec = data("victims.jsonl");
    let (code, out, err) = pinwatch(&["summary", "--json", rec.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let who = &v["who_waited"];
    assert_eq!(
        (&who["measured_pins"], &who["unmeasured_pins"]),
        (&3.into(), &1.into())
    );
    let rows: Vec<(String, String, u64, f64, f64, u64, u64)> = who["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["spawned_at"].as_str().unwrap().to_owned(),
                r["span"].as_str().unwrap_or("-").to_owned(),
                r["tasks"].as_u64().unwrap(),
                r["total_wait_ms"].as_f64().unwrap(),
                r["max_wait_ms"].as_f64().unwrap(),
                r["pins"].as_u64().unwrap(),
                r["lifo"].as_u64().unwrap(),
            )
        })
        .collect();
    let row =
        |a: &str, s: &str, t, total, max, p, l| (a.to_owned(), s.to_owned(), t, total, max, p, l);
    assert_eq!(
        rows,
        [
            row("src/api.rs:88:5", "request", 3, 800.2, 300.2, 2, 2),
            row("src/jobs.rs:20:9", "-", 2, 430.0, 250.0, 2, 0),
            row("src/api.rs:88:5", "conn", 1, 200.0, 200.0, 1, 0),
            row("(unknown)", "-", 1, 100.0, 100.0, 1, 0),
        ]
    );
    assert_eq!(
        (&who["unnamed_tasks"], &who["unnamed_wait_ms"]),
        (&6.into(), &390.3.into())
    );
    // The text shows the same rows.
    let (_, text, _) = pinwatch(&["summary", rec.to_str().unwrap()]);
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != "Who Waited")
        .skip(4)
        .take(4)
        .collect();
    for (line, r) in table.iter().zip(&rows) {
        assert!(
            line.starts_with(&r.0) && line.contains(&format!(" {} ", r.1)),
            "{line} vs {r:?}"
        );
    }
}

fn with_lines(lines: &[&str], trailing_newline: bool) -> tempfile::NamedTempFile {
    let mut text = lines.join("\n");
    if trailing_newline {
        text.push('\n');
    }
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), text).unwrap();
    f
}

fn first_lines(n: usize) -> Vec<String> {
    std::fs::read_to_string(data("recording.jsonl"))
        .unwrap()
        .lines()
        .take(n)
        .map(str::to_owned)
        .collect()
}

/// `report` counts in words that agree: `1 event, 1 pin` (helper-93: `1 pins`).
#[test]
fn report_says_one_pin_in_the_singular() {
    let good = first_lines(1);
    let f = with_lines(&[&good[0]], true);
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("one.html");
    let (code, out, err) = report_to(f.path().to_str().unwrap(), page.to_str().unwrap());
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(" (1 event, 1 pin)"), "{out}");
}

#[test]
fn a_line_that_is_not_json_is_skipped_with_its_number() {
    let good = first_lines(2);
    let f = with_lines(&[&good[0], "this is not json", &good[1]], true);
    let (code, out, err) = pinwatch(&["print", "--json", f.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("skipped 1 damaged line (") && err.contains(":2)"),
        "{err}"
    );
    assert_eq!(out.lines().count(), 2);
}

/// The recording with its line 30 torn the way a full disk tears it (half the line, the next
/// event appended to it): `print`, `summary` and `report` succeed, show every other event, and
/// name the damaged line.
#[test]
fn a_torn_middle_line_is_skipped_by_every_command() {
    let original = std::fs::read_to_string(data("recording.jsonl")).unwrap();
    let lines: Vec<&str> = original.lines().collect();
    assert!(lines.len() > 40, "{} lines", lines.len());
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec.jsonl");
    let mut torn: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    torn[29] = format!("{}{}", &lines[29][..lines[29].len() / 2], lines[30]);
    torn.remove(30);
    std::fs::write(&rec, torn.join("\n") + "\n").unwrap();
    // What survives: every line but the torn one and the one appended to it.
    let mut good: Vec<&str> = lines.clone();
    good.drain(29..31);
    let clean = dir.path().join("clean.jsonl");
    std::fs::write(&clean, good.join("\n") + "\n").unwrap();
    let said = "skipped 1 damaged line (";
    let at = format!("{}:30)", rec.display());

    let (code, out, err) = pinwatch(&["print", "--json", rec.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(said) && err.contains(&at), "{err}");
    assert_eq!(out.lines().count(), good.len());

    for cmd in [
        &["print", "--json"][..],
        &["print"],
        &["summary"],
        &["summary", "--json"],
    ] {
        let (code, out, err) = pinwatch(&[cmd, &[rec.to_str().unwrap()]].concat());
        assert_eq!(code, 0, "{cmd:?}: {err}");
        assert!(err.contains(said) && err.contains(&at), "{cmd:?}: {err}");
        let (code, want, err) = pinwatch(&[cmd, &[clean.to_str().unwrap()]].concat());
        assert_eq!(code, 0, "{cmd:?}: {err}");
        assert!(
            out == want,
            "{cmd:?}: not the output of the recording without the torn line"
        );
    }

    let page = dir.path().join("rec.html");
    let (code, out, err) = pinwatch(&["report", rec.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(said), "{err}");
    assert!(out.contains(&format!("({} events,", good.len())), "{out}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains(&format!("warning: {said}")) && html.contains(&at),
        "no warning on the page"
    );
}

/// A file with no event at all is an error that says first what the file is, then what its
/// lines were: some other file is asked about, with no full disk blamed; a recording whose
/// event lines are all damaged is said to be one.
#[test]
fn a_file_of_garbage_is_an_error() {
    let before = |err: &str, a: &str, b: &str| matches!((err.find(a), err.find(b)), (Some(x), Some(y)) if x < y);
    let f = with_lines(&["\u{1}\u{2}garbage", "service exited"], false);
    let (code, out, err) = pinwatch(&["summary", f.path().to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        before(
            &err,
            "holds no pinwatch event; is it a recording",
            "skipped 2 lines ("
        ),
        "{err}"
    );
    assert!(err.contains("; the first: not a pinwatch event"), "{err}");
    for no in ["disk", "every other line", "cut off"] {
        assert!(!err.contains(no), "{no:?}: {err}");
    }
    let f = with_lines(&["\u{1}\u{2}garbage", "{\"schema\":2,\"ev"], false);
    let (code, out, err) = pinwatch(&["summary", f.path().to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        before(
            &err,
            "holds no readable pinwatch event: every event line in it is damaged",
            "skipped 2 damaged lines ("
        ),
        "{err}"
    );
    assert!(
        err.contains("full disk") && err.contains("the recording was cut off"),
        "{err}"
    );
    assert!(!err.contains("is it a recording"), "{err}");
}

/// `--json` output goes to terminals too: a crafted recording's DEL, C1 (`U+009B` is CSI) and
/// bidi overrides, which JSON lets through raw, are written as `\u` escapes — the same JSON —
/// like the text views and `ctl status --json` do.
#[test]
fn json_output_escapes_what_a_terminal_would_obey() {
    let good = first_lines(1);
    let mut e: serde_json::Value = serde_json::from_str(&good[0]).unwrap();
    let hostile = "\u{9b}2J\u{7f}\u{202e}txt\u{2066}";
    e["worker"]["name"] = hostile.into();
    e["top_frame"] = serde_json::json!({"function": hostile, "file": "a.rs", "line": 1});
    let f = with_lines(&[&e.to_string()], true);
    for cmd in [&["print", "--json"][..], &["summary", "--json"]] {
        let (code, out, err) = pinwatch(&[cmd, &[f.path().to_str().unwrap()]].concat());
        assert_eq!(code, 0, "{cmd:?}: {err}");
        assert!(
            !out.contains(['\u{9b}', '\u{7f}', '\u{202e}', '\u{2066}']),
            "{cmd:?}: raw control characters in {out:?}"
        );
        let back: serde_json::Value = serde_json::from_str(out.lines().next().unwrap())
            .or_else(|_| serde_json::from_str(&out))
            .unwrap();
        assert!(back.to_string().contains(hostile), "{cmd:?}: {back}");
    }
}

/// A recording of another schema version is refused, saying so; one such line among events
/// this pinwatch reads is skipped, saying so, and the rest is read.
#[test]
fn another_schema_is_an_error_that_says_so() {
    let good = first_lines(2);
    let other = |line: &str| {
        line.replace("\"schema\":1,", "\"schema\":99,")
            .replace("\"schema\":2,", "\"schema\":99,")
    };
    assert_ne!(other(&good[0]), good[0]);
    let all_other = with_lines(&[&other(&good[0]), &other(&good[1])], true);
    let (code, _, err) = pinwatch(&["summary", all_other.path().to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("recording schema 99")
            && err.contains("written by another pinwatch version")
            && !err.contains("damaged"),
        "{err}"
    );
    let one_other = with_lines(&[&good[0], &other(&good[1])], true);
    let (code, _, err) = pinwatch(&["summary", one_other.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("skipped 1 line written by another pinwatch version (recording schema 99;"),
        "{err}"
    );
}

#[test]
fn a_truncated_last_line_is_skipped_with_a_warning() {
    let good = first_lines(3);
    let cut = &good[2][..good[2].len() / 2];
    let f = with_lines(&[&good[0], &good[1], cut], false);
    let (code, out, err) = pinwatch(&["print", "--json", f.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("warning") && err.contains(":3 (last line is incomplete"),
        "{err}"
    );
    assert_eq!(out.lines().count(), 2);
}

/// A pipe with a line far longer than any pinwatch writes (256 MiB, as `cat /dev/zero` or a
/// crafted file gives) between two events is read in bounded memory: with the data segment
/// limited to 192 MiB, `print` names the line as too long and shows both events. Reading the
/// whole input into memory first (as pinwatch did before) fails to allocate.
#[test]
fn a_line_longer_than_memory_allows_is_skipped_from_a_pipe() {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let good = first_lines(2);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pinwatch"));
    cmd.args(["print", "--json", "/dev/stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: between fork and exec the closure calls only setrlimit, which is
    // async-signal-safe, on a value on its own stack.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 192 << 20,
                rlim_max: 192 << 20,
            };
            if libc::setrlimit(libc::RLIMIT_DATA, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || -> std::io::Result<()> {
        writeln!(stdin, "{}", good[0])?;
        let block = vec![b'x'; 1 << 20];
        for _ in 0..256 {
            stdin.write_all(&block)?;
        }
        writeln!(stdin)?;
        writeln!(stdin, "{}", good[1])
    });
    let out = child.wait_with_output().unwrap();
    let wrote = writer.join().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{:?}: {err}", out.status);
    wrote.unwrap();
    assert!(
        err.contains("skipped 1 damaged line (/dev/stdin:2)") && err.contains("longer than 64 MiB"),
        "{err}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let (code, _, err) = pinwatch(&["print", "/nonexistent/recording.jsonl"]);
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/recording.jsonl"), "{err}");
}

/// A number out of a duration's range (`"duration_ms": 1e300`, from another machine or a bad
/// disk) is a bad line like any other, not a panic of the reader.
#[test]
fn a_duration_out_of_range_is_a_bad_line_not_a_panic() {
    let good = first_lines(2);
    for (bad, shown) in [
        ("1e300", "1e300"),
        ("1.8446744073709552e22", "1.8446744073709552e22"),
        ("-1", "-1.0"),
    ] {
        let line = good[1].replacen(
            &format!(
                "\"duration_ms\":{}",
                serde_json::from_str::<serde_json::Value>(&good[1]).unwrap()["duration_ms"]
            ),
            &format!("\"duration_ms\":{bad}"),
            1,
        );
        assert_ne!(line, good[1]);
        let f = with_lines(&[&good[0], &line], true);
        for cmd in ["print", "summary", "report"] {
            let (code, _, err) = pinwatch(&[cmd, f.path().to_str().unwrap()]);
            assert!(
                !err.contains("panicked") && code != 101,
                "{cmd} with duration_ms {bad}: status {code}: {err}"
            );
        }
        // The line is skipped and named (file and line), the other one read.
        let (code, out, err) = pinwatch(&["print", f.path().to_str().unwrap()]);
        assert_eq!(code, 0, "duration_ms {bad}: {err}");
        assert!(
            err.contains("skipped 1 damaged line") && err.contains(":2)") && err.contains(shown),
            "duration_ms {bad}: {err}"
        );
        assert_eq!(out.matches("pinwatch.Pinned {").count(), 1, "{out}");
        assert!(!out.contains(shown), "duration_ms {bad} was shown: {out}");
    }
}

/// A frame name longer than a formatter's width limit (65,535): every view shows it, none
/// panics.
#[test]
fn a_name_longer_than_any_column_is_shown_not_a_panic() {
    let good = first_lines(2);
    let mut v: serde_json::Value = serde_json::from_str(&good[1]).unwrap();
    let long = "f".repeat(70_000);
    v["top_frame"]["function"] = long.clone().into();
    let f = with_lines(&[&good[0], &v.to_string()], true);
    for cmd in ["print", "summary", "report"] {
        let (code, out, err) = pinwatch(&[cmd, f.path().to_str().unwrap()]);
        assert_eq!(code, 0, "{cmd}: {err}");
        if cmd != "report" {
            assert!(out.contains(&long), "{cmd} did not show the name");
        }
    }
}

/// A file with no event, stderr a pipe whose reader is gone: the message is lost, the status
/// is still 1 (no panic).
#[test]
fn no_event_with_stderr_closed_is_status_1() {
    use std::process::Stdio;
    let f = with_lines(&["{\"not\": \"an event\"}", "garbage"], true);
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = Command::new(env!("CARGO_BIN_EXE_pinwatch"))
        .args(["print", f.path().to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(writer)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1));
}

/// `pinwatch print rec | head`: the reader closes the pipe after a line; pinwatch stops
/// quietly (no panic, no message, status 0), for each command that writes much.
/// The checked-in recording `n` times, ids made distinct (so that `--latest` keeps every
/// copy).
fn copies(n: u64) -> String {
    let lines = std::fs::read_to_string(data("recording.jsonl")).unwrap();
    let mut text = String::new();
    for copy in 0..n {
        for line in lines.lines() {
            let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
            v["id"] = (copy * 1000 + v["id"].as_u64().unwrap()).into();
            text.push_str(&v.to_string());
            text.push('\n');
        }
    }
    text
}

/// `print` writes a long recording a piece at a time: every event once, in order, in text and
/// in JSON, across many pieces (the output is ~40 times the piece).
#[test]
fn a_long_print_is_every_event_once_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.jsonl");
    let text = copies(100);
    std::fs::write(&big, &text).unwrap();
    let path = big.to_str().unwrap();
    // The ids of a recording's lines, in order.
    let ids_of = |jsonl: &str| -> Vec<u64> {
        jsonl
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                    .as_u64()
                    .unwrap()
            })
            .collect()
    };
    let ids = ids_of(&text);
    let (code, out, err) = pinwatch(&["print", "--json", path]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(ids_of(&out), ids);
    let (code, out, err) = pinwatch(&["print", path]);
    assert_eq!(code, 0, "{err}");
    assert!(out.len() > 20 * 64 * 1024, "{}", out.len());
    let got: Vec<u64> = out
        .lines()
        .filter_map(|l| l.strip_prefix("  id = "))
        .map(|id| id.parse().unwrap())
        .collect();
    assert_eq!(got, ids);
    assert_eq!(out.matches("pinwatch.Pinned {").count(), ids.len());
}

#[test]
fn a_closed_pipe_ends_the_output_quietly() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    // Far more output than a pipe holds (64 KiB), so that pinwatch is still writing when the
    // reader goes away.
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.jsonl");
    std::fs::write(&big, copies(100)).unwrap();
    for args in [&["print"][..], &["print", "--json"], &["print", "--latest"]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pinwatch"))
            .args(args)
            .arg(&big)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        out.read_line(&mut first).unwrap();
        assert!(!first.is_empty(), "{args:?} printed nothing");
        drop(out); // like `head -1`
        let done = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&done.stderr);
        assert!(err.is_empty(), "{args:?}: stderr: {err}");
        assert_eq!(done.status.code(), Some(0), "{args:?}: {:?}", done.status);
    }
}

/// `pinwatch report rec -o /dev/stdout | head -c 10` with a page larger than the pipe holds:
/// the reader is gone before the page is written, and pinwatch ends quietly, status 0, as
/// `print` does (helper-60: `cannot write /dev/stdout: Broken pipe`, status 1). The pipe's read
/// end is closed before pinwatch starts, so every write of it fails.
#[test]
fn a_closed_pipe_ends_a_page_or_profile_written_to_stdout_quietly() {
    for args in [&["report"][..], &["profile"]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let done = Command::new(env!("CARGO_BIN_EXE_pinwatch"))
            .args(args)
            .arg(data("recording.jsonl"))
            .args(["-o", "/dev/stdout"])
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&done.stderr);
        assert!(err.is_empty(), "{args:?}: stderr: {err}");
        assert_eq!(done.status.code(), Some(0), "{args:?}: {:?}", done.status);
    }
    // A file that cannot be written still fails, saying so.
    let (code, _, err) = report_to(data("recording.jsonl").to_str().unwrap(), "/proc/version");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot write /proc/version"), "{err}");
}

/// The recording's first pin, in a request (spans as the tracing layer writes them), as pin
/// `id` of `ms` on `route`.
fn in_request(id: u64, ms: f64, route: &str) -> String {
    let first = &first_lines(1)[0];
    let v: serde_json::Value = serde_json::from_str(first).unwrap();
    let mut v = v.as_object().unwrap().clone();
    v.insert("id".into(), id.into());
    v.insert("state".into(), "completed".into());
    v.insert("duration_ms".into(), ms.into());
    v.insert(
        "spans".into(),
        serde_json::json!([{"name": "request", "target": "tower_http::trace::make_span",
            "fields": {"http.route": route, "method": "GET", "uri": format!("{route}?id={id}")}}]),
    );
    v.insert("trace_id".into(), "4bf92f3577b34da6a3ce929d0e0e4736".into());
    serde_json::Value::Object(v).to_string()
}

#[test]
fn print_shows_the_request_and_summary_has_a_by_request_table_text_and_json() {
    let lines = [
        in_request(1, 120.0, "/report"),
        in_request(2, 300.0, "/report"),
        in_request(3, 40.0, "/health"),
    ];
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let rec = with_lines(&lines, true);
    let path = rec.path().to_str().unwrap();
    let (code, out, err) = pinwatch(&["print", path]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "  spans = [\n    request{http.route=/report method=GET uri=/report?id=1} \
             (tower_http::trace::make_span)\n  ]"
        ),
        "{out}"
    );
    assert!(
        out.contains("  traceId = 4bf92f3577b34da6a3ce929d0e0e4736"),
        "{out}"
    );
    let (code, out, err) = pinwatch(&["summary", path]);
    assert_eq!(code, 0, "{err}");
    let table = out
        .split("By Request\n")
        .nth(1)
        .unwrap_or_else(|| panic!("{out}"));
    let rows: Vec<&str> = table.lines().skip(3).collect();
    assert!(
        rows[0].starts_with("GET /report ") && rows[0].ends_with("420.0 ms  request 2"),
        "{out}"
    );
    assert!(
        rows[1].starts_with("GET /health ") && rows[1].ends_with("40.0 ms  request 1"),
        "{out}"
    );
    // The same table in `summary --json`, beside the others.
    let (code, json, err) = pinwatch(&["summary", "--json", path]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let by: Vec<(String, u64, f64)> = v["by_request"]
        .as_array()
        .unwrap_or_else(|| panic!("{json}"))
        .iter()
        .map(|r| {
            (
                r["request"].as_str().unwrap().to_owned(),
                r["count"].as_u64().unwrap(),
                r["total_ms"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        by,
        [
            ("GET /report".to_owned(), 2, 420.0),
            ("GET /health".to_owned(), 1, 40.0)
        ]
    );
    assert_eq!(
        v["by_request"][0]["innermost"],
        serde_json::json!([["request", 2]])
    );
    assert!(
        v["locations"].as_array().is_some_and(|l| !l.is_empty()),
        "{json}"
    );
    assert!(v["who_waited"].is_object(), "{json}");
    // The recording without spans: no such table (the golden output stays as it was).
    let (_, out, _) = pinwatch(&["summary", data("recording.jsonl").to_str().unwrap()]);
    assert!(!out.contains("By Request"), "{out}");
}

/// A file of many `dump` lines (crafted, or many dumps concatenated) names a few of them at the
/// head of `print` and `summary` and counts the rest: the view itself is not buried under a
/// line per dump.
#[test]
fn many_dump_lines_are_named_a_few_and_counted() {
    let dump = r#"{"schema":2,"event":"dump","pid":7,"exe":"/svc","run_id":"r","detector_started":"2026-12-01T10:00:00Z","dumped_at":"2026-12-01T10:00:00Z","flight_size":4194304,"events":1,"bytes":1,"dropped_events":0,"dropped_pins":0}"#;
    let mut lines: Vec<String> = vec![dump.to_owned(); 1000];
    lines.extend(first_lines(4));
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let rec = with_lines(&refs, true);
    let path = rec.path().to_str().unwrap();
    for view in ["print", "summary"] {
        let (code, out, err) = pinwatch(&[view, path]);
        assert_eq!(code, 0, "{err}");
        let named = out.matches("flight recording of pid 7").count();
        assert!((1..=3).contains(&named), "{view}: {named} dumps named");
        assert!(
            out.contains(&format!("and {} more dumps", 1000 - named)),
            "{view}: {}",
            out.lines().take(5).collect::<Vec<_>>().join("\n")
        );
    }
    let (code, _, err) = pinwatch(&["print", "--json", path]);
    assert_eq!(code, 0, "{err}");
    assert!(err.lines().count() <= 5, "{}", err.lines().count());
    assert!(err.contains("more dumps"), "{err}");
}

/// `--seconds 0` is refused naming the option, as the endpoint refuses `seconds=0`: it asked
/// for the pins of no time at all (and got one pin, the last to end).
#[test]
fn profile_seconds_zero_is_refused_naming_it() {
    let out = tempfile::tempdir().unwrap();
    let page = out.path().join("p.pb.gz");
    let rec = data("recording.jsonl");
    let (code, _, err) = pinwatch(&[
        "profile",
        rec.to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
        "--seconds",
        "0",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--seconds"), "{err}");
    assert!(!page.exists());
    let (code, _, err) = pinwatch(&["ctl", "1", "profile", "-o", "x.pb.gz", "--seconds", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--seconds"), "{err}");
}

/// `report -o` replaces the page whole: a symlink at the name is replaced, never written
/// through (the file it pointed to is left as it was), and the page is its owner's only.
#[test]
fn report_replaces_a_symlink_instead_of_writing_through_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "keep\n").unwrap();
    let page = dir.path().join("page.html");
    std::os::unix::fs::symlink(&victim, &page).unwrap();
    let rec = data("recording.jsonl");
    let (code, _, err) = report_to(rec.to_str().unwrap(), page.to_str().unwrap());
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
    let meta = std::fs::symlink_metadata(&page).unwrap();
    assert!(meta.is_file(), "{meta:?}");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert!(std::fs::read_to_string(&page)
        .unwrap()
        .starts_with("<!DOCTYPE html>"));
}

/// Another user's symlink in a sticky directory anyone may write to (`/tmp`), to a device or
/// to one of this process's own descriptors, is not written through: `-o` refuses it, as the
/// kernel's `fs.protected_symlinks` would (here whatever the sysctl says). Needs root, to give
/// the links to another user.
#[test]
fn output_never_follows_another_users_symlink_in_a_shared_directory() {
    use std::os::unix::fs::{lchown, symlink, PermissionsExt};
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "run as root (CI does): the test gives links to uid 65534"
    );
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let rec = data("recording.jsonl");
    for (name, target) in [("null.html", "/dev/null"), ("fd.html", "/proc/self/fd/1")] {
        let link = tmp.join(name);
        symlink(target, &link).unwrap();
        lchown(&link, Some(65534), None).unwrap();
        let (code, out, err) = report_to(rec.to_str().unwrap(), link.to_str().unwrap());
        assert_eq!(code, 1, "{target}: {err}");
        assert!(
            err.contains("is a symlink that user 65534 made"),
            "{target}: {err}"
        );
        assert!(
            !out.contains("<!DOCTYPE"),
            "{target}: the page went through the link"
        );
        // The same link, the service's user's own: followed.
        lchown(&link, Some(0), None).unwrap();
        let (code, _, err) = report_to(rec.to_str().unwrap(), link.to_str().unwrap());
        assert_eq!(code, 0, "{target}: {err}");
    }
}

/// A directory holding `rec.jsonl`, a copy of the checked-in recording, and its bytes: to
/// check that the copy is never written over.
fn a_copy_of_the_recording() -> (tempfile::TempDir, PathBuf, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec.jsonl");
    std::fs::copy(data("recording.jsonl"), &rec).unwrap();
    let bytes = std::fs::read(&rec).unwrap();
    (dir, rec, bytes)
}

/// `report -o` never writes over the recording it reads (named directly or through a
/// symlink), and writes to `/dev/stdout` (a pipe here) as it is, instead of trying to replace
/// it with a file.
#[test]
fn report_refuses_its_own_recording_and_writes_to_dev_stdout() {
    let (dir, rec, before) = a_copy_of_the_recording();
    let link = dir.path().join("link.html");
    std::os::unix::fs::symlink(&rec, &link).unwrap();
    for out in [&rec, &link] {
        let (code, _, err) =
            pinwatch(&["report", rec.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("is the recording"), "{err}");
        assert_eq!(
            std::fs::read(&rec).unwrap(),
            before,
            "the recording changed"
        );
    }
    let (code, out, err) = pinwatch(&["report", rec.to_str().unwrap(), "-o", "/dev/stdout"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("<!DOCTYPE html>"),
        "{}",
        &out[..out.len().min(200)]
    );
    // No file to open in a browser: the page went down a pipe (helper-83).
    assert!(
        err.starts_with("wrote /dev/stdout (") && !err.contains("browser"),
        "{err}"
    );
    // A file is one.
    let page = dir.path().join("page.html");
    let (code, out, err) = report_to(rec.to_str().unwrap(), page.to_str().unwrap());
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("; open it in a browser"), "{out}");
}

/// `report -o /proc/self/fd/1` (or `/dev/fd/1`) with stdout redirected to a file (`>> out`):
/// the page goes through the descriptor as it is, after what the file held (the shell's
/// append), and the 'wrote' line goes to stderr, not after the page. It was taken for a file
/// to replace: a temporary file made beside it (in `/proc/self/fd`, refused; for `/dev/stdout`,
/// in `/dev`, which root may write: not named here, so that this test never replaces
/// `/dev/stdout` when run on a build without the fix).
#[test]
fn report_writes_through_its_own_stdout_when_that_is_a_file() {
    let dir = tempfile::tempdir().unwrap();
    for (i, out) in ["/proc/self/fd/1", "/dev/fd/1"].into_iter().enumerate() {
        let file = dir.path().join(format!("out{i}.html"));
        std::fs::write(&file, "kept\n").unwrap();
        let stdout = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        let run = Command::new(env!("CARGO_BIN_EXE_pinwatch"))
            .args([
                "report",
                data("recording.jsonl").to_str().unwrap(),
                "-o",
                out,
            ])
            .stdout(stdout)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "-o {out}: {err}");
        let page = std::fs::read_to_string(&file).unwrap();
        assert!(
            page.starts_with("kept\n<!DOCTYPE html>"),
            "-o {out}: {}",
            &page[..page.len().min(200)]
        );
        assert!(
            !page.contains("wrote "),
            "-o {out}: the 'wrote' line is in the page"
        );
        assert!(err.contains(&format!("wrote {out}")), "-o {out}: {err}");
        // A file, to open (helper-89: the hint was left out for any descriptor).
        assert!(err.contains("; open it in a browser"), "-o {out}: {err}");
    }
}

/// `pinwatch ARGS` run in `cwd` with `stdin` (the recording, `< rec.jsonl`, unless given):
/// status, stdout (bytes), stderr.
fn pinwatch_reading(
    cwd: &Path,
    args: &[&str],
    stdin: Option<std::process::Stdio>,
) -> (i32, Vec<u8>, String) {
    let rec = || std::fs::File::open(data("recording.jsonl")).unwrap().into();
    let out = Command::new(env!("CARGO_BIN_EXE_pinwatch"))
        .args(args)
        .current_dir(cwd)
        .stdin(stdin.unwrap_or_else(rec))
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    (out.status.code().unwrap_or(-1), out.stdout, err)
}

/// `-` is the standard stream, as for `cat`: a recording read from stdin, a page or profile
/// written to stdout. It was a file named `-` in the current directory (written by `-o -`); and
/// a recording read from a stream had its page named after it (`/dev/stdin.html`, made in `/dev`
/// for root): now `-o` is asked for.
#[test]
fn a_dash_is_the_standard_stream_and_a_stream_names_no_output() {
    let cwd = tempfile::tempdir().unwrap();
    let rec = data("recording.jsonl");
    let rec = rec.to_str().unwrap();
    let (code, from_stdin, err) = pinwatch_reading(cwd.path(), &["summary", "-"], None);
    assert_eq!(code, 0, "{err}");
    let (_, from_file, _) = pinwatch(&["summary", rec]);
    assert_eq!(String::from_utf8(from_stdin).unwrap(), from_file);
    let (code, page, err) = pinwatch_reading(cwd.path(), &["report", "-", "-o", "-"], None);
    assert_eq!(code, 0, "{err}");
    assert!(page.starts_with(b"<!DOCTYPE html>"), "{err}");
    assert!(err.starts_with("wrote standard output ("), "{err}");
    let (code, profile, err) = pinwatch_reading(cwd.path(), &["profile", rec, "-o", "-"], None);
    assert_eq!(code, 0, "{err}");
    assert!(profile.starts_with(&[0x1f, 0x8b]), "not gzip: {err}");
    for command in ["report", "profile"] {
        for (input, named) in [("-", "standard input"), ("/dev/stdin", "/dev/stdin")] {
            let (code, out, err) = pinwatch_reading(cwd.path(), &[command, input], None);
            assert_eq!(code, 2, "{command} {input}: {err}");
            assert!(out.is_empty(), "{command} {input}");
            assert!(
                err.contains(&format!("read from {named}, which names no file"))
                    && err.contains("-o FILE (-o - for standard output)")
                    && err.contains(&format!("pinwatch {command} [OPTIONS]")),
                "{command} {input}: {err}"
            );
        }
    }
    // What is not a recording is said as such, not taken for a stream to name the page after.
    let (code, _, err) = pinwatch(&["report", "/dev/null"]);
    assert_eq!(code, 1, "{err}");
    // A pipe is read (helper-93: the message said a FIFO was not).
    assert!(
        err.contains(
            "cannot read /dev/null: not a regular file or a pipe (a directory or a device)"
        ),
        "{err}"
    );
    for action in ["start", "stop"] {
        let (code, _, err) =
            pinwatch_reading(cwd.path(), &["ctl", "1", "record", action, "-"], None);
        assert_eq!(code, 2, "record {action} -: {err}");
        assert!(err.contains("(`./-` for one called `-`)"), "{err}");
    }
    // A descriptor not given is said to be so.
    let (code, _, err) = pinwatch_reading(cwd.path(), &["report", rec, "-o", "/dev/fd/9"], None);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("descriptor 9 is not open"), "{err}");
    let left: Vec<_> = std::fs::read_dir(cwd.path()).unwrap().collect();
    assert!(
        left.is_empty(),
        "written in the current directory: {left:?}"
    );
    // A file called `-` is `./-`.
    std::fs::copy(data("recording.jsonl"), cwd.path().join("-")).unwrap();
    let (code, out, err) = pinwatch_reading(cwd.path(), &["summary", "./-"], None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(String::from_utf8(out).unwrap(), from_file);
}

/// `-` is read and written through the descriptors as they are, as `cat -` does (helper-90):
/// a socket (what Node gives a child for piped stdio) on either side was refused, since
/// `/dev/stdin` cannot be opened when it is one; and a file given as stdin was read from its
/// start, not from where the reader before had left it.
#[test]
fn a_dash_is_the_descriptor_as_it_is_a_socket_or_a_file_part_read() {
    use std::io::{BufRead as _, Read as _, Seek as _, Write as _};
    use std::os::unix::net::UnixStream;
    let cwd = tempfile::tempdir().unwrap();
    let (mut ours, theirs) = UnixStream::pair().unwrap();
    let text = std::fs::read(data("recording.jsonl")).unwrap();
    let writer = std::thread::spawn(move || {
        ours.write_all(&text).unwrap();
        ours.shutdown(std::net::Shutdown::Write).unwrap();
    });
    let stdin = std::process::Stdio::from(std::os::fd::OwnedFd::from(theirs));
    let (code, out, err) = pinwatch_reading(cwd.path(), &["print", "--json", "-"], Some(stdin));
    writer.join().unwrap();
    assert_eq!(code, 0, "{err}");
    let (_, all, _) = pinwatch(&["print", "--json", data("recording.jsonl").to_str().unwrap()]);
    assert_eq!(String::from_utf8(out).unwrap(), all);
    // Stdin already read past its first 40 lines: the rest, as `cat -` would read it.
    let mut file = std::fs::File::open(data("recording.jsonl")).unwrap();
    let mut skipped = 0;
    {
        let mut lines = std::io::BufReader::new(&mut file);
        let mut line = String::new();
        for _ in 0..40 {
            line.clear();
            skipped += lines.read_line(&mut line).unwrap();
        }
    }
    file.seek(std::io::SeekFrom::Start(skipped as u64)).unwrap();
    let (code, out, err) =
        pinwatch_reading(cwd.path(), &["print", "--json", "-"], Some(file.into()));
    assert_eq!(code, 0, "{err}");
    let rest: Vec<&str> = all.lines().skip(40).collect();
    assert_eq!(
        String::from_utf8(out).unwrap().lines().collect::<Vec<_>>(),
        rest
    );
    // Stdout a socket: `-o -` writes into it.
    let (mut ours, theirs) = UnixStream::pair().unwrap();
    let reader = std::thread::spawn(move || {
        let mut page = Vec::new();
        ours.read_to_end(&mut page).unwrap();
        page
    });
    let run = Command::new(env!("CARGO_BIN_EXE_pinwatch"))
        .args([
            "report",
            data("recording.jsonl").to_str().unwrap(),
            "-o",
            "-",
        ])
        .stdout(std::os::fd::OwnedFd::from(theirs))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert!(
        reader.join().unwrap().starts_with(b"<!DOCTYPE html>"),
        "{err}"
    );
    // One socket as both (inetd, systemd's `Accept=yes`, socat's `EXEC:`): the recording is
    // read whole before the page is written, and a socket is nothing to write over (helper-91:
    // "/dev/stdout is the recording").
    let (mut ours, theirs) = UnixStream::pair().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_pinwatch"))
        .args(["report", "-", "-o", "-"])
        .stdin(std::os::fd::OwnedFd::from(theirs.try_clone().unwrap()))
        .stdout(std::os::fd::OwnedFd::from(theirs))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    ours.write_all(&std::fs::read(data("recording.jsonl")).unwrap())
        .unwrap();
    ours.shutdown(std::net::Shutdown::Write).unwrap();
    let mut page = Vec::new();
    ours.read_to_end(&mut page).unwrap();
    let run = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert!(page.starts_with(b"<!DOCTYPE html>"), "{err}");
}

/// `-` is the descriptor, not a path to it: with neither `/dev` nor `/proc` (a chroot, a
/// container's bare `/dev`) the page still goes to stdout, and the recording on stdin is still
/// not written over. It was `/dev/stdout`: made as a file in a `/dev` without it, the page lost
/// (helper-91), and the check for the recording read `/proc/self/fd/0`, and was skipped.
#[test]
fn a_dash_needs_neither_dev_nor_proc() {
    use std::os::unix::process::CommandExt as _;
    let (cwd, rec, before) = a_copy_of_the_recording();
    let bare = |args: &[&str], stdout: std::process::Stdio| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pinwatch"));
        cmd.args(args)
            .current_dir(cwd.path())
            .stdin(std::fs::File::open(&rec).unwrap())
            .stdout(stdout);
        let (tmpfs, dev, proc, root) = (c"tmpfs", c"/dev", c"/proc", c"/");
        // SAFETY: between fork and exec the closure makes only system calls (unshare, mount),
        // which are async-signal-safe, on strings made before the fork.
        unsafe {
            cmd.pre_exec(move || {
                let ok = |rc: libc::c_int| {
                    if rc == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                };
                ok(libc::unshare(libc::CLONE_NEWNS))?;
                let private = libc::MS_REC | libc::MS_PRIVATE;
                let none = std::ptr::null();
                ok(libc::mount(
                    none,
                    root.as_ptr(),
                    none,
                    private,
                    std::ptr::null(),
                ))?;
                for dir in [dev, proc] {
                    let (fs, at) = (tmpfs.as_ptr(), dir.as_ptr());
                    ok(libc::mount(fs, at, fs, 0, std::ptr::null()))?;
                }
                Ok(())
            });
        }
        let out = cmd.output().expect(
            "a mount namespace: unshare needs CAP_SYS_ADMIN (root, as .ci/run runs; not \
                     in a container whose seccomp profile forbids it)",
        );
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), out.stdout, err)
    };
    let piped = std::process::Stdio::piped;
    let (code, page, err) = bare(&["report", "rec.jsonl", "-o", "-"], piped());
    assert_eq!(code, Some(0), "{err}");
    assert!(page.starts_with(b"<!DOCTYPE html>"), "{err}");
    assert!(err.starts_with("wrote standard output ("), "{err}");
    let (code, _, err) = bare(&["report", "-", "-o", "rec.jsonl"], piped());
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("rec.jsonl is the recording standard input"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&rec).unwrap(),
        before,
        "the recording changed"
    );
}

/// `report -o` a Unix socket's path is refused, saying it is a socket: it was taken for a
/// stream to write to, and open() failed with "No such device or address".
#[test]
fn report_refuses_a_socket() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let (code, _, err) = report_to(
        data("recording.jsonl").to_str().unwrap(),
        sock.to_str().unwrap(),
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("it is a socket"), "{err}");
}

/// A terminal is refused as `-o` (a page, a profile or a service's raw dump is never for one):
/// a real pseudo-terminal's device, named by its path.
#[test]
fn report_refuses_a_terminal() {
    // SAFETY: posix_openpt/grantpt/unlockpt take the descriptor they return; ptsname's result
    // is copied at once, before any other call could reuse its buffer.
    let (master, tty) = unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(master >= 0, "{}", std::io::Error::last_os_error());
        assert_eq!(libc::grantpt(master), 0);
        assert_eq!(libc::unlockpt(master), 0);
        let name = libc::ptsname(master);
        assert!(!name.is_null());
        let tty = std::ffi::CStr::from_ptr(name).to_str().unwrap().to_owned();
        (master, tty)
    };
    let rec = data("recording.jsonl");
    let (code, _, err) = pinwatch(&["report", rec.to_str().unwrap(), "-o", &tty]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("is a terminal") || err.contains("it is a terminal"),
        "{err}"
    );
    // Nor is `-` read from one: nothing would end the read but ^D.
    let stdin = std::fs::File::open(&tty).unwrap();
    let (code, _, err) = pinwatch_reading(Path::new("/"), &["summary", "-"], Some(stdin.into()));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("cannot read standard input: it is a terminal; send a recording through"),
        "{err}"
    );
    // SAFETY: `master` is the descriptor opened above, closed once.
    unsafe { libc::close(master) };
}

/// The subcommands a `--help` text lists (its `Commands:` section), `help` left out.
fn help_commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

/// `pinwatch ctl --help`'s summary (the line `pinwatch --help` shows for `ctl` too) names every
/// action the ctl parser takes, and every `record` action, as the parser lists them: an action
/// added to the code and not to the summary fails here. So does the hint of `ctl PID` with no
/// action.
#[test]
fn ctl_help_summary_names_every_ctl_subcommand() {
    let (code, help, err) = pinwatch(&["ctl", "--help"]);
    assert_eq!(code, 0, "{err}");
    let summary = help.split("\n\nUsage:").next().unwrap();
    let actions = help_commands(&help);
    assert!(
        actions.len() >= 8 && actions.iter().any(|a| a == "profile"),
        "read {actions:?} from\n{help}"
    );
    // `list` is a target, not an action: the summary names it as `ctl list`.
    assert!(summary.contains("`ctl list`"), "{summary}");
    for action in &actions {
        assert!(
            summary.contains(&format!("`{action}"))
                || summary.contains(&format!("`ctl <PID> {action}")),
            "`pinwatch ctl --help`'s summary leaves out `{action}`:\n{summary}"
        );
    }
    let (code, record, err) = pinwatch(&["ctl", "1", "record", "--help"]);
    assert_eq!(code, 0, "{err}");
    let record_actions = help_commands(&record);
    assert!(record_actions.len() >= 3, "{record}");
    for action in &record_actions {
        assert!(
            summary.contains(&format!("`record {action}")),
            "`pinwatch ctl --help`'s summary leaves out `record {action}`:\n{summary}"
        );
    }
    // The top-level help's line for `ctl` is the same summary's first sentence.
    let (_, top, _) = pinwatch(&["--help"]);
    let line = top
        .lines()
        .find(|l| l.trim_start().starts_with("ctl "))
        .unwrap_or_else(|| panic!("no ctl in\n{top}"));
    assert!(
        summary.starts_with(line.trim_start()["ctl".len()..].trim()),
        "{line}"
    );
    // `ctl PID` with no action says which it takes: all of them.
    let (code, _, err) = pinwatch(&["ctl", "4242"]);
    assert_eq!(code, 1, "{err}");
    for action in &actions {
        assert!(
            err.contains(&format!(" {action},")) || err.contains(&format!(" {action} (")),
            "the hint leaves out {action}: {err}"
        );
    }
}

/// `profile` says how to read what it wrote, with `-symbolize=none` (the profile has no
/// addresses; without it `go tool pprof` tries to symbolize them).
#[test]
fn profile_says_to_read_it_with_symbolize_none() {
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("p.pb.gz");
    let rec = data("recording.jsonl");
    let (code, said, err) = pinwatch(&[
        "profile",
        rec.to_str().unwrap(),
        "-o",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        said.contains(&format!(
            "; read it with: go tool pprof -symbolize=none -top {}\n",
            file.display()
        )),
        "{said}"
    );
    let (_, help, _) = pinwatch(&["ctl", "1", "profile", "--help"]);
    assert!(
        help.contains("go tool pprof -symbolize=none -top FILE"),
        "{help}"
    );
}

/// Arguments that cannot work together, or would spin, are refused before anything is asked,
/// each saying what is wrong in words.
#[test]
fn arguments_that_cannot_work_are_refused_in_words() {
    for (args, said) in [
        (
            &["ctl", "1", "status", "--json", "--watch"][..],
            "'--json' cannot be used with '--watch'",
        ),
        (
            &["ctl", "1", "status", "--watch", "--interval", "0s"],
            "must be at least 100ms",
        ),
        (&["ctl", "1", "status", "--count", "2"], "--watch"),
        (&["ctl", "list", "status"], "`list` takes no action"),
        // The action without the service before it: where it goes, not the parser's "required
        // arguments were not provided".
        (
            &["ctl", "status", "--json"],
            "which service should `status` go to? give its pid before the action, as in \
             `pinwatch ctl 4242 status`",
        ),
        (
            &["ctl", "--dir", "/nonexistent", "pause"],
            "which service should `pause` go to?",
        ),
        // Before the action's own arguments are missed, and with a pid given after it.
        (&["ctl", "dump"], "which service should `dump` go to?"),
        (
            &["ctl", "record", "start", "/tmp/x.jsonl"],
            "as in `pinwatch ctl 4242 record start …`",
        ),
        (&["ctl", "status", "123"], "as in `pinwatch ctl 123 status`"),
        // After `--`, the action is taken for the pid: said as such.
        (
            &["ctl", "--", "status"],
            "`status` is an action: give the service's pid before it, as in `pinwatch ctl 4242 \
             status`",
        ),
        (
            &["ctl"],
            "give the service's pid, as in `pinwatch ctl 4242 status`",
        ),
        (
            &["profile", "rec.jsonl", "--seconds", "0"],
            "must be at least 1 (a whole number of seconds)",
        ),
        (
            &["ctl", "1", "profile", "-o", "p.pb.gz", "--seconds", "0"],
            "must be at least 1 (a whole number of seconds)",
        ),
    ] {
        let (code, _, err) = pinwatch(args);
        assert_ne!(code, 0, "{args:?}");
        assert!(err.contains(said), "{args:?}: {err}");
    }
    // Any other missing argument keeps the parser's words, and its status.
    let (code, _, err) = pinwatch(&["print"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("required arguments were not provided"),
        "{err}"
    );
    let (code, _, err) = pinwatch(&["ctl", "status"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = pinwatch(&["ctl", "--", "status"]);
    assert_eq!(code, 2, "{err}");
    // `help` after `--` is help too, as `ctl help` is: not a pid asked what it should do.
    let (code, help, err) = pinwatch(&["ctl", "help"]);
    assert_eq!(code, 0, "{err}");
    assert!(help.contains("Usage: pinwatch ctl"), "{help}");
    assert_eq!(pinwatch(&["ctl", "--", "help"]), (0, help, String::new()));
    // An unknown option is named as such, not hidden behind the pid's place.
    let (code, _, err) = pinwatch(&["ctl", "-x", "status"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unexpected argument '-x'"), "{err}");
}

/// The ids of the events `print --json` shows of `recording`, in order, and its stderr.
fn printed_ids(recording: &Path, run_as: &[&str]) -> (Vec<u64>, String) {
    let out = Command::new(
        run_as
            .first()
            .copied()
            .unwrap_or(env!("CARGO_BIN_EXE_pinwatch")),
    )
    .args(run_as.iter().skip(1))
    .args(["print", "--json", recording.to_str().unwrap()])
    .output()
    .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{err}");
    let ids = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .collect();
    (ids, err)
}

/// Files named like rotated files of a recording but numbered past its others — another
/// recording named by a date or a pid — are not read as part of it (they were, silently:
/// helper-105), and are named; a gap of one number, as a crash between two renames leaves, is
/// not one.
#[test]
fn a_file_numbered_past_the_rotated_ones_is_another_recording_left_out() {
    let dir = tempfile::tempdir().unwrap();
    for (name, id) in [
        ("rec.3.jsonl", 1),
        ("rec.1.jsonl", 2),
        ("rec.jsonl", 3),
        ("rec.20261201.jsonl", 100),
        ("rec.12345.jsonl", 200),
    ] {
        std::fs::write(dir.path().join(name), in_request(id, 30.0, "/a") + "\n").unwrap();
    }
    let (ids, err) = printed_ids(&dir.path().join("rec.jsonl"), &[]);
    assert_eq!(ids, [1, 2, 3], "{err}");
    assert!(err.contains("left out"), "{err}");
    assert!(
        err.contains("rec.20261201.jsonl") && err.contains("rec.12345.jsonl"),
        "{err}"
    );
    assert!(err.contains("its rotated files go up to 3"), "{err}");
}

/// A directory that can be entered but not listed (mode 0711, as a home directory often is):
/// the recording named is read, and the reader is told that its rotated files could not be
/// looked for (it was an error blaming the file: helper-105). Needs root, to read as uid 65534.
#[test]
fn a_recording_in_a_directory_that_cannot_be_listed_is_read_alone() {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "run as root (CI does): the test reads as uid 65534 with setpriv"
    );
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("setpriv is missing: apt-get install -y util-linux (tests/run.sh does)");
    let mode = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    };
    let top = tempfile::tempdir().unwrap();
    mode(top.path(), 0o755);
    let bin = top.path().join("pinwatch");
    std::fs::copy(env!("CARGO_BIN_EXE_pinwatch"), &bin).unwrap();
    mode(&bin, 0o755);
    let dir = top.path().join("home");
    std::fs::create_dir(&dir).unwrap();
    for (name, id) in [("rec.1.jsonl", 1), ("rec.jsonl", 2)] {
        let f = dir.join(name);
        std::fs::write(&f, in_request(id, 30.0, "/a") + "\n").unwrap();
        mode(&f, 0o644);
    }
    mode(&dir, 0o711);
    let nobody = [
        setpriv,
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        bin.to_str().unwrap(),
    ];
    let (ids, err) = printed_ids(&dir.join("rec.jsonl"), &nobody);
    assert_eq!(ids, [2], "{err}");
    assert!(err.contains("could not look for rotated files"), "{err}");
    // Listed, both are read.
    mode(&dir, 0o755);
    let (ids, err) = printed_ids(&dir.join("rec.jsonl"), &nobody);
    assert_eq!(ids, [1, 2], "{err}");
}
