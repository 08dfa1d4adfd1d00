//! `PINWATCH_WATCHDOG_NICE` (`Builder::watchdog_nice`): the watchdog thread runs at the nice
//! value asked for, and no other thread does; where the process may not lower it, the runtime is
//! not built, and the error says what is missing.

mod support;

use std::time::Duration;

const CHILD: &str = "PINWATCH_TEST_NICE_CHILD";

/// Each thread of this process: its name and nice value (`/proc/self/task/*/stat`, field 19).
fn threads() -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue; // gone since the listing
        };
        // The name is in parentheses and may hold spaces: the fields after it, from the third.
        let (name, rest) = stat.split_once(" (").unwrap().1.rsplit_once(") ").unwrap();
        let nice = rest.split(' ').nth(16).unwrap().parse().unwrap();
        out.push((name.to_owned(), nice));
    }
    out
}

/// The nice values of this process's watchdog threads.
fn watchdogs() -> Vec<i64> {
    threads()
        .into_iter()
        .filter(|(name, _)| name.starts_with("pinwatch-watchd"))
        .map(|(_, nice)| nice)
        .collect()
}

/// A runtime whose watchdog asks for `nice`.
fn build(nice: i8) -> Result<support::Watched, pinwatch::Error> {
    let events = support::Collected::default();
    let mut tokio = support::multi_thread(2);
    let (rt, detector) = support::builder(&events)
        .watchdog_nice(Some(nice))
        .build(&mut tokio)?;
    Ok(support::Watched { rt, detector })
}

/// A higher nice value needs no privilege: the watchdog takes it, and the waker thread it
/// starts (the heartbeat's timer, the rescue's wake-ups) with it; the workers keep theirs.
/// (Each test here asks for a value of its own: they run side by side in this process.)
#[test]
fn the_watchdog_runs_at_the_nice_value_asked_for_and_no_other_thread_does() {
    let rt = build(7).unwrap();
    rt.block_on(async {
        tokio::spawn(async { std::thread::sleep(Duration::from_millis(30)) })
            .await
            .unwrap()
    });
    let at_seven: Vec<String> = threads()
        .into_iter()
        .filter(|(_, nice)| *nice == 7)
        .map(|(name, _)| name)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        at_seven,
        ["pinwatch-waker", "pinwatch-watchd"],
        "{:?}",
        threads()
    );
    drop(rt);
    assert!(!watchdogs().contains(&7), "{:?}", threads());
}

/// A lower one needs `CAP_SYS_NICE` (or `RLIMIT_NICE`): as root, it is taken.
#[test]
fn a_privileged_process_runs_its_watchdog_ahead_of_its_workers() {
    assert_eq!(
        // SAFETY: geteuid cannot fail.
        unsafe { libc::geteuid() },
        0,
        "this test lowers a thread's nice value: run it as root (CI does)"
    );
    let rt = build(-4).unwrap();
    assert!(watchdogs().contains(&-4), "{:?}", threads());
    drop(rt);
}

/// Without the privilege (the child has `CAP_SYS_NICE` taken away and `RLIMIT_NICE` at 0), the
/// build fails naming what is missing, and leaves no watchdog behind.
#[test]
fn an_unprivileged_process_is_told_what_a_lower_nice_needs() {
    let test = support::rerun("unprivileged_child", CHILD);
    // As root, without `CAP_SYS_NICE` in the bounding set: exec gives the child every
    // capability but that one. (Not root: it has none to take away.)
    // SAFETY: geteuid cannot fail.
    let mut command = if unsafe { libc::geteuid() } == 0 {
        let mut setpriv = std::process::Command::new("setpriv");
        setpriv
            .arg("--bounding-set=-sys_nice")
            .arg(test.get_program())
            .args(test.get_args())
            .env(CHILD, "1");
        setpriv
    } else {
        test
    };
    let out = command
        .output()
        .expect("setpriv (util-linux) runs the child");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("child: refused as it should be"), "{said}");
}

#[test]
fn unprivileged_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `setrlimit` reads the struct it is given, which lives across the call.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NICE, &limit) }, 0);
    let Err(e) = build(-3) else {
        panic!(
            "a nice of -3 was taken without CAP_SYS_NICE: {:?}",
            threads()
        );
    };
    let message = e.to_string();
    assert!(
        matches!(e, pinwatch::Error::WatchdogNice { nice: -3, .. }),
        "{message}"
    );
    for needed in [
        "nice value to -3",
        "PINWATCH_WATCHDOG_NICE",
        "CAP_SYS_NICE",
        "RLIMIT_NICE of at least 23",
    ] {
        assert!(message.contains(needed), "{needed:?} not in {message}");
    }
    assert!(watchdogs().is_empty(), "{:?}", threads());
    // A higher value is still anyone's.
    let rt = build(3).unwrap();
    assert_eq!(watchdogs(), [3]);
    drop(rt);
    println!("child: refused as it should be");
}
