//! `tour`, end to end: every bad case detected with its expected reason, every fixed case
//! clean, and the exit status says so.

use std::process::Command;

#[test]
fn tour_detects_every_bad_case_and_no_fixed_one() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("tour.html");
    let out = Command::new(env!("CARGO_BIN_EXE_tour"))
        .arg("--report")
        .arg(&report)
        .env_remove("PINWATCH")
        .env_remove("PINWATCH_THRESHOLD")
        .env_remove("PINWATCH_RECORD")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // What failed first: a CI log that keeps only part of a long message keeps this.
    let failed = stdout
        .split_once("verdict: FAILED")
        .map_or("", |(_, rest)| rest);
    assert!(
        out.status.success(),
        "tour failed:{failed}\n\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("verdict: every bad case detected"),
        "{stdout}"
    );
    for (case, reason) in [
        ("lock_sleep", "sleep"),
        ("lock_sleep (pinwatch Mutex)", "lock_held"),
        ("lazy_init", "once_init"),
        ("ffi_block", "sleep"),
        ("blocking_dns", "dns"),
        ("cpu_hog", "cpu"),
        ("blocking_io", "io"),
        ("lock_contention", "lock_wait"),
        ("blocking_wait", "other"),
        ("traced_service", "sleep"),
        ("stalled_runtime", "lock_wait"),
        ("stalled_runtime (not timer-woken)", "lock_wait"),
        // Each also names the service's own line and the advice that fits (the tour checks).
        ("library_cpu", "cpu"),
        ("blocked_log", "io"),
        ("block_on_in_drop", "other"),
        ("large_drop", "cpu"),
        ("spin_read", "cpu"),
    ] {
        let row = stdout
            .lines()
            .find(|l| l.split('|').next().map(str::trim) == Some(case))
            .unwrap_or_else(|| panic!("no row for {case}:\n{stdout}"));
        assert!(
            row.contains(reason) && row.trim_end().ends_with("ok"),
            "{row}"
        );
        // A dependency's file (library_cpu's top frame is in flate2 or miniz_oxide) from its
        // package on, not from cargo's home.
        assert!(!row.contains("/registry/src/"), "{row}");
    }
    assert!(stdout.contains("pinwatch.Pinned {"), "{stdout}");
    // Each stalled_runtime row's verdict says pinwatch's `runtime_stalled` matched whether the
    // tickers stood still (checked above: both rows end in "ok").
    // The run's report: said where, with a lane per pinned worker and every case's reason.
    assert!(
        stdout.contains(&format!("report: {}", report.display())),
        "{stdout}"
    );
    let page = std::fs::read_to_string(&report).unwrap();
    assert!(
        page.matches("<g class=\"lane\"").count() >= 8,
        "too few lanes"
    );
    for reason in [
        "sleep",
        "lock_held",
        "once_init",
        "cpu",
        "dns",
        "io",
        "lock_wait",
        "other",
    ] {
        assert!(
            page.contains(&format!("data-reason=\"{reason}\"")),
            "no {reason} bar in the report"
        );
    }
    assert!(page.contains("<svg id=\"flamegraph\""));
}

#[test]
fn tour_rejects_an_unknown_case() {
    let out = Command::new(env!("CARGO_BIN_EXE_tour"))
        .args(["--only", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("lock_sleep"));
}

/// The README's two commands are what CI runs: `.ci/run` ends with the README's test command
/// (the script that installs what the tests need on a fresh machine), and the main job is
/// `tour`.
#[test]
fn the_readme_commands_are_the_ones_ci_runs() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let command = |row: &str| -> String {
        let line = readme
            .lines()
            .find(|l| l.starts_with(&format!("| {row}")))
            .unwrap_or_else(|| panic!("no README row {row:?}"));
        let cell = line
            .trim_end_matches('|')
            .rsplit('|')
            .next()
            .unwrap()
            .trim();
        cell.trim_matches('`').to_owned()
    };
    let test = command("every test");
    let tour = command("the main job");
    assert!(tour.ends_with("--bin tour"), "{tour}");
    let ci = std::fs::read_to_string(format!("{root}/.ci/run")).unwrap();
    let last = ci
        .lines()
        .rfind(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .unwrap();
    assert_eq!(
        last.trim(),
        test,
        ".ci/run must end with the README's test command"
    );
    let script = test.strip_prefix("bash ").unwrap();
    let body = std::fs::read_to_string(format!("{root}/{script}")).unwrap();
    assert!(
        body.contains("cargo test --workspace --locked"),
        "{script} runs every test"
    );
    assert!(
        body.contains("apt-get install"),
        "{script} installs what the tests need"
    );
}
