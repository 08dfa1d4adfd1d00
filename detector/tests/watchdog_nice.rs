//! `PINWATCH_WATCHDOG_NICE` (`Builder::watchdog_nice`): the watchdog thread runs at the nice
//! value asked for, and no other thread does; where the process may not lower it, the runtime is
//! not built, and the error says what is missing.

mod support;

use std::time::Duration;

const CHILD: &str = "PINWATCH_TEST_NICE_CHILD";

/// Each thread of this process: its name and nice value (`stat`, field 19).
fn threads() -> Vec<(String, i64)> {
    support::threads_with(|task| {
        let stat = std::fs::read_to_string(task.join("stat")).ok()?;
        // The name is in parentheses and may hold spaces: the fields after it, from the third.
        let rest = stat.rsplit_once(") ")?.1;
        rest.split(' ').nth(16)?.parse().ok()
    })
}

/// The calling thread's nice value: what the threads it starts begin with. The tests ask for
/// values relative to it, so that they hold in a process started at any nice.
fn own_nice() -> i8 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let rest = stat.rsplit_once(") ").unwrap().1;
    rest.split(' ').nth(16).unwrap().parse().unwrap()
}

/// `base + by`, kept within the nice values; it must differ from `base` for a test to show
/// anything.
fn nice_from(base: i8, by: i8) -> i8 {
    let nice = (base + by).clamp(-20, 19);
    assert!(
        nice != base,
        "this test needs a nice value {} the process's {base}: run it at another",
        if by > 0 { "above" } else { "below" }
    );
    nice
}

/// Whether this process may lower a thread's nice value to `nice`: `CAP_SYS_NICE`, or an
/// `RLIMIT_NICE` of at least 20 minus it.
fn may_lower_to(nice: i8) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let caps = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|c| u64::from_str_radix(c.trim(), 16).ok())
        .unwrap_or(0);
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes the struct it is given, which lives across the call.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NICE, &mut limit) }, 0);
    const CAP_SYS_NICE: u32 = 23; // linux/capability.h
    caps & (1 << CAP_SYS_NICE) != 0 || limit.rlim_cur >= (20 - i64::from(nice)) as u64
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
    let up = nice_from(own_nice(), 7);
    let rt = build(up).unwrap();
    rt.block_on(async {
        tokio::spawn(async { std::thread::sleep(Duration::from_millis(30)) })
            .await
            .unwrap()
    });
    let at_up: Vec<String> = threads()
        .into_iter()
        .filter(|(_, nice)| *nice == i64::from(up))
        .map(|(name, _)| name)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        at_up,
        ["pinwatch-waker", "pinwatch-watchd"],
        "{:?}",
        threads()
    );
    drop(rt);
    assert!(!watchdogs().contains(&i64::from(up)), "{:?}", threads());
}

/// A lower one needs `CAP_SYS_NICE` (or `RLIMIT_NICE`): where the process has it, it is taken.
#[test]
fn a_privileged_process_runs_its_watchdog_ahead_of_its_workers() {
    let down = nice_from(own_nice(), -4);
    assert!(
        may_lower_to(down),
        "this test lowers a thread's nice value: run it with CAP_SYS_NICE (as root, as CI does) \
         or an RLIMIT_NICE of at least {}",
        20 - i16::from(down)
    );
    let rt = build(down).unwrap();
    assert!(watchdogs().contains(&i64::from(down)), "{:?}", threads());
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
    let base = own_nice();
    let down = nice_from(base, -3);
    let Err(e) = build(down) else {
        panic!(
            "a nice of {down} was taken without CAP_SYS_NICE: {:?}",
            threads()
        );
    };
    let message = e.to_string();
    assert!(
        matches!(e, pinwatch::Error::WatchdogNice { nice, .. } if nice == down),
        "{message}"
    );
    for needed in [
        format!("nice value to {down}"),
        "PINWATCH_WATCHDOG_NICE".to_owned(),
        "CAP_SYS_NICE".to_owned(),
        format!("RLIMIT_NICE of at least {}", 20 - i16::from(down)),
    ] {
        assert!(message.contains(&needed), "{needed:?} not in {message}");
    }
    assert!(watchdogs().is_empty(), "{:?}", threads());
    // A higher value is still anyone's.
    let up = nice_from(base, 3);
    let rt = build(up).unwrap();
    assert_eq!(watchdogs(), [i64::from(up)]);
    drop(rt);
    println!("child: refused as it should be");
}
