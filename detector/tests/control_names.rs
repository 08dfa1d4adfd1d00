//! The names of a process's control sockets as its detectors come and go: the lowest free
//! number, so that a process with one detector at a time (a runtime built again) always serves
//! `<pid>.sock`, which `pinwatch ctl PID` finds. Its own test binary: the numbers are the
//! process's.

use std::path::Path;

use pinwatch::Control;

fn start(dir: &Path) -> (tokio::runtime::Runtime, pinwatch::Detector) {
    pinwatch::Builder::new()
        .tracing(false)
        .heartbeat(None)
        .control(Control::Dir(dir.to_owned()))
        .build(&mut tokio::runtime::Builder::new_current_thread())
        .expect("a detector")
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
    let (rt_d, d) = start(dir.path());
    assert_eq!(
        name(&d),
        format!("{pid}.3.sock"),
        "the second is still taken"
    );
    for (rt, d) in [(rt_b, b), (rt_c, c), (rt_d, d)] {
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
