//! A misspelled `PINWATCH_…` variable is said once a process, by the first detector that says
//! anything — not swallowed by a test's detector that ran before it. Run in a child process
//! (this test binary, re-executed) whose environment has the misspelling.

mod support;

const CHILD: &str = "PINWATCH_TEST_UNKNOWN_ENV_CHILD";
const WARNING: &str = "PINWATCH_TRESHOLD is not a pinwatch variable and is ignored; did you \
                       mean PINWATCH_THRESHOLD?";
const MARK: &str = "child: a test's detector has run";

#[test]
fn a_misspelled_variable_is_said_once_by_the_first_detector_that_speaks() {
    let out = support::rerun("unknown_env_child", CHILD)
        .env("PINWATCH_TRESHOLD", "5ms")
        .env("PINWATCH_CONTROL", "off")
        .env_remove("PINWATCH")
        .env_remove("PINWATCH_THRESHOLD")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child failed:\n{}\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    let mark = stderr
        .find(MARK)
        .unwrap_or_else(|| panic!("no mark:\n{stderr}"));
    let warning = stderr
        .find(WARNING)
        .unwrap_or_else(|| panic!("no warning:\n{stderr}"));
    // Said by the first detector that says anything, after the test's silent one; and once,
    // though two such detectors ran.
    assert!(mark < warning, "{stderr}");
    assert_eq!(stderr.matches(WARNING).count(), 1, "{stderr}");
    // The known variable it stands beside is no warning.
    assert!(!stderr.contains("PINWATCH_CONTROL is not"), "{stderr}");
}

/// The child's half: a test's detector (it reads the environment too), then two detectors
/// from the environment, one after the other.
#[test]
fn unknown_env_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let ((), pins) = pinwatch::testing::Check::new().run(async {});
    assert!(pins.is_empty());
    eprintln!("{MARK}");
    for _ in 0..2 {
        let (rt, detector) = pinwatch::Builder::from_env()
            .unwrap()
            .build(tokio::runtime::Builder::new_current_thread().enable_all())
            .unwrap();
        rt.block_on(async {});
        drop(rt);
        drop(detector);
    }
}
