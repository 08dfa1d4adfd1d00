//! `tour`, end to end: every bad case detected with its expected reason, every fixed case
//! clean, and the exit status says so.

use std::process::Command;

#[test]
fn tour_detects_every_bad_case_and_no_fixed_one() {
    let out = Command::new(env!("CARGO_BIN_EXE_tour"))
        .env_remove("PINWATCH")
        .env_remove("PINWATCH_THRESHOLD")
        .env_remove("PINWATCH_RECORD")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("verdict: every bad case detected"),
        "{stdout}"
    );
    for (case, reason) in [
        ("lock_sleep", "sleep"),
        ("lock_sleep (pinwatch Mutex)", "lock_held"),
        ("lazy_init", "once_init"),
        ("ffi_block", "sleep"),
        ("cpu_hog", "cpu"),
        ("blocking_io", "io"),
        ("lock_contention", "lock_wait"),
        ("blocking_wait", "other"),
    ] {
        let row = stdout
            .lines()
            .find(|l| l.split('|').next().map(str::trim) == Some(case))
            .unwrap_or_else(|| panic!("no row for {case}:\n{stdout}"));
        assert!(
            row.contains(reason) && row.trim_end().ends_with("ok"),
            "{row}"
        );
    }
    assert!(stdout.contains("pinwatch.Pinned {"), "{stdout}");
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
