//! `PINWATCH_DUMP_ON_EXIT`'s hold on SIGTERM and SIGINT, as `sigaction` sees it: taken only
//! from the default action, never over a handler or `SIG_IGN` the process had, shared by two
//! detectors, given back (`SIG_DFL`) when the last one stops — unless a handler was installed
//! over pinwatch's meanwhile, which is left as it is. Signal actions belong to the process: one
//! test, in a test binary of its own.

use pinwatch::Control;

/// The `sa_sigaction` installed for `sig` now.
fn action(sig: libc::c_int) -> usize {
    // SAFETY: a zeroed sigaction is plain data for the kernel to fill.
    let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null new action only reads the current one.
    assert_eq!(
        unsafe { libc::sigaction(sig, std::ptr::null(), &mut now) },
        0
    );
    now.sa_sigaction
}

/// Installs `handler` (or `SIG_DFL` / `SIG_IGN`) for `sig`.
fn set(sig: libc::c_int, handler: usize) {
    // SAFETY: a zeroed sigaction is "no flags, empty mask".
    let mut a: libc::sigaction = unsafe { std::mem::zeroed() };
    a.sa_sigaction = handler;
    a.sa_flags = libc::SA_SIGINFO;
    // SAFETY: `handler` is `theirs` below (async-signal-safe: it does nothing), SIG_DFL or
    // SIG_IGN.
    assert_eq!(unsafe { libc::sigaction(sig, &a, std::ptr::null_mut()) }, 0);
}

extern "C" fn theirs(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {}

fn detector(dir: &std::path::Path, name: &str) -> (tokio::runtime::Runtime, pinwatch::Detector) {
    pinwatch::Builder::new()
        .tracing(false)
        .control(Control::Off)
        .dump_on_exit(Some(dir.join(name)))
        .build(tokio::runtime::Builder::new_current_thread().enable_all())
        .unwrap()
}

#[test]
fn exit_signals_are_taken_only_from_the_default_and_given_back() {
    let (term, int) = (libc::SIGTERM, libc::SIGINT);
    let theirs = theirs as *const () as usize;
    let dir = tempfile::tempdir().unwrap();
    // From the default actions, whatever this process inherited: a shell runs a background job
    // (`cargo test &`, as CI may) with SIGINT ignored.
    set(term, libc::SIG_DFL);
    set(int, libc::SIG_DFL);
    assert_eq!((action(term), action(int)), (libc::SIG_DFL, libc::SIG_DFL));

    // Two detectors share the handler; it goes when the last one stops.
    let (rt1, d1) = detector(dir.path(), "one.jsonl");
    let ours = action(term);
    assert!(ours != libc::SIG_DFL && ours != libc::SIG_IGN && ours != theirs);
    assert_eq!(action(int), ours);
    let (rt2, d2) = detector(dir.path(), "two.jsonl");
    assert_eq!((action(term), action(int)), (ours, ours));
    drop(rt1);
    drop(d1);
    assert_eq!(
        (action(term), action(int)),
        (ours, ours),
        "one detector still runs"
    );
    drop(rt2);
    drop(d2);
    assert_eq!((action(term), action(int)), (libc::SIG_DFL, libc::SIG_DFL));
    // Their stops wrote their dumps.
    assert!(dir.path().join("one.jsonl").exists() && dir.path().join("two.jsonl").exists());

    // A handler the process had, and SIG_IGN, are left alone, while it runs and after.
    set(term, theirs);
    set(int, libc::SIG_IGN);
    let (rt, d) = detector(dir.path(), "three.jsonl");
    assert_eq!((action(term), action(int)), (theirs, libc::SIG_IGN));
    drop(rt);
    drop(d);
    assert_eq!((action(term), action(int)), (theirs, libc::SIG_IGN));
    set(term, libc::SIG_DFL);
    set(int, libc::SIG_DFL);

    // A handler installed over pinwatch's while it ran (as tokio's `signal` does) is not
    // replaced by SIG_DFL at the stop; the other signal, still pinwatch's, is given back.
    let (rt, d) = detector(dir.path(), "four.jsonl");
    assert_eq!(action(term), ours, "the same handler, installed again");
    set(term, theirs);
    drop(rt);
    drop(d);
    assert_eq!((action(term), action(int)), (theirs, libc::SIG_DFL));
}
