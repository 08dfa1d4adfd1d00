//! The names of a process's control sockets as its detectors come and go: the lowest number
//! free in the directory, so that a process with one detector at a time (a runtime built again)
//! always serves `<pid>.sock`, which `pinwatch ctl PID` finds. Its own test binary: the numbers
//! are the process's.

mod support;

use std::path::Path;

use pinwatch::Control;

fn start(dir: &Path) -> (tokio::runtime::Runtime, pinwatch::Detector) {
    started(Control::Dir(dir.to_owned())).0
}

/// A detector with its control socket as `control`, and its start-up line.
fn started(control: Control) -> ((tokio::runtime::Runtime, pinwatch::Detector), String) {
    support::with_startup_line(|| {
        pinwatch::Builder::new()
            .heartbeat(None)
            .control(control)
            .build(&mut tokio::runtime::Builder::new_current_thread())
            .expect("a detector")
    })
}

fn name(d: &pinwatch::Detector) -> String {
    let path = d.control_socket().expect("a control socket");
    path.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn a_detector_takes_the_lowest_free_socket_name() {
    let dir = tempfile::tempdir().unwrap();
    let pid = std::process::id();
    let (rt_a, a) = start(dir.path());
    let (rt_b, b) = start(dir.path());
    assert_eq!(name(&a), format!("{pid}.sock"));
    assert_eq!(name(&b), format!("{pid}.2.sock"), "two at once");
    drop(rt_a);
    a.shutdown();
    assert!(!dir.path().join(format!("{pid}.sock")).exists(), "removed");
    let (rt_c, c) = start(dir.path());
    assert_eq!(name(&c), format!("{pid}.sock"), "the first, free again");
    // The same directory spelt another way: numbered with the others.
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let (rt_d, d) = start(&dir.path().join("sub/.."));
    assert_eq!(
        name(&d),
        format!("{pid}.3.sock"),
        "the second is still taken"
    );
    // Another directory: numbered on its own.
    let other = tempfile::tempdir().unwrap();
    let (rt_e, e) = start(other.path());
    assert_eq!(
        name(&e),
        format!("{pid}.sock"),
        "the first in its directory"
    );
    for (rt, d) in [(rt_b, b), (rt_c, c), (rt_d, d), (rt_e, e)] {
        drop(rt);
        d.shutdown();
    }
    // The start-up line names what `pinwatch ctl` takes: the socket's path in a directory of
    // its own; `PID`, `PID.2` in the default one.
    let ((rt_f, f), line) = started(Control::Dir(dir.path().to_owned()));
    let path = f.control_socket().unwrap().display().to_string();
    assert!(
        line.contains(&format!("(`pinwatch ctl {path} status`)")),
        "{line}"
    );
    let ((rt_g, g), line_g) = started(Control::On);
    let ((rt_h, h), line_h) = started(Control::On);
    assert!(
        line_g.contains(&format!("(`pinwatch ctl {pid} status`)")),
        "{line_g}"
    );
    assert!(
        line_h.contains(&format!("(`pinwatch ctl {pid}.2 status`)")),
        "{line_h}"
    );
    for (rt, d) in [(rt_f, f), (rt_g, g), (rt_h, h)] {
        drop(rt);
        d.shutdown();
    }

    let (_rt, again) = start(dir.path());
    assert_eq!(
        name(&again),
        format!("{pid}.sock"),
        "a detector started again"
    );
}

/// A control directory whose name holds an escape sequence and a newline is named on one
/// start-up line, escaped, with the `ctl` command as a word bash reads back as the path
/// (helper-91: the line was broken in two, the terminal's bold turned on).
#[test]
fn an_odd_control_directory_is_named_on_one_escaped_line() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("ctl \u{1b}[1m\nq");
    let ((rt, d), line) = started(Control::Dir(dir.clone()));
    assert!(!line.contains('\u{1b}'), "{line:?}");
    assert!(
        line.contains("ctl \\u{1b}[1m\\u{a}q/")
            && line.contains(&format!(
                "(`pinwatch ctl $'{}/ctl \\x1b[1m\\nq/{}.sock' status`)",
                parent.path().display(),
                std::process::id()
            )),
        "{line:?}"
    );
    drop(rt);
    d.shutdown();
}

/// A directory asked for is made in a directory that is there; a typo's parents are not made
/// (helper-60: `PINWATCH_CONTROL=/nonexistent/ctl` made `/nonexistent` at the root), and the
/// error names the missing one.
#[test]
fn a_control_directory_is_made_only_where_its_parent_is() {
    let top = tempfile::tempdir().unwrap();
    let (_made, _) = started(Control::Dir(top.path().join("ctl")));
    assert!(top.path().join("ctl").is_dir());
    let typo = top.path().join("typo").join("ctl");
    let err = pinwatch::Builder::new()
        .heartbeat(None)
        .control(Control::Dir(typo.clone()))
        .build(&mut tokio::runtime::Builder::new_current_thread())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "{} does not exist",
            top.path().join("typo").display()
        )),
        "{err}"
    );
    assert!(!top.path().join("typo").exists());
}
