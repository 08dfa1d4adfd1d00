//! The first minutes with pinwatch, as a newcomer's service runs it: a real child process
//! (`first_pin`: `#[pinwatch::main]` and one 100 ms pin) with no `tracing` subscriber, with
//! `tracing_subscriber::fmt().init()`, and with `PINWATCH_TRACING=off`.

use std::process::{Command, Output};

/// Runs `first_pin` with `args` and `env` (the control socket off: the child's pid is not
/// the test's business); its output, once it has ended.
fn first_pin(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_first_pin"));
    // fmt's lines without colours, to read them.
    cmd.args(args).env_remove("RUST_LOG").env("NO_COLOR", "1");
    for (k, _) in std::env::vars() {
        if k.starts_with("PINWATCH") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "first_pin {args:?} failed: {}",
        text(&out.stderr)
    );
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The report of the pin's end, led by its top frame (the sleep in `first_pin.rs`).
fn completed_reports(s: &str) -> usize {
    s.lines()
        .filter(|l| {
            l.contains("WARN pinwatch: pinned completed for") && l.contains("first_pin.rs:")
        })
        .count()
}

#[test]
fn with_no_subscriber_the_report_and_the_start_up_line_go_to_stderr() {
    let out = first_pin(&[], &[]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(stdout.is_empty(), "{stdout}");
    let start: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("INFO pinwatch: watching "))
        .collect();
    assert_eq!(start.len(), 1, "{stderr}");
    for part in [
        "for polls of 20ms or more",
        "; control socket /",
        "status`)",
        "; Prometheus off",
        "; OTLP off",
        "; console off",
        "; no recording",
    ] {
        assert!(start[0].contains(part), "{part:?} not in {:?}", start[0]);
    }
    assert_eq!(completed_reports(&stderr), 1, "{stderr}");
    assert!(
        stderr.contains("reason=sleep"),
        "the report names the reason: {stderr}"
    );
    // Room for every thread: nothing said of unwatched ones.
    assert!(!stderr.contains("max_threads"), "{stderr}");
}

#[test]
fn with_a_fmt_subscriber_the_report_goes_through_it_once() {
    let out = first_pin(
        &["--fmt"],
        &[
            ("PINWATCH_PROMETHEUS_ADDR", "127.0.0.1:0"),
            ("PINWATCH_CONTROL", "off"),
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    // fmt prints to stdout; the report is there, once, and not on stderr.
    assert_eq!(completed_reports(&stdout), 1, "{stdout}");
    assert!(!stderr.contains("pinned"), "printed twice: {stderr}");
    // The runtime (and its start-up line) came before the service's `fmt().init()`: that line
    // is on stderr, naming the endpoint's real address.
    let start = stderr
        .lines()
        .find(|l| l.starts_with("INFO pinwatch: watching "))
        .unwrap_or_else(|| panic!("no start-up line: {stderr}"));
    assert!(start.contains("; no control socket"), "{start}");
    assert!(start.contains("; Prometheus http://127.0.0.1:"), "{start}");
    assert!(!start.contains("127.0.0.1:0/"), "{start}");
}

/// A relative `PINWATCH_RECORD` and `PINWATCH_DUMP_ON_EXIT` are named in full in the start-up
/// line, as `ctl status` names them: whoever reads the line need not know the service's working
/// directory. The files are where the line says.
#[test]
fn relative_outputs_are_named_in_full_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().canonicalize().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_first_pin"));
    cmd.current_dir(&dir).env_remove("RUST_LOG");
    for (k, _) in std::env::vars() {
        if k.starts_with("PINWATCH") {
            cmd.env_remove(k);
        }
    }
    cmd.envs([
        ("PINWATCH_CONTROL", "off"),
        ("PINWATCH_RECORD", "pins.jsonl"),
        ("PINWATCH_DUMP_ON_EXIT", "dump.jsonl"),
    ]);
    let out = cmd.output().unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let start = stderr
        .lines()
        .find(|l| l.starts_with("INFO pinwatch: watching "))
        .unwrap_or_else(|| panic!("no start-up line: {stderr}"));
    for (part, file) in [
        ("; recording to ", "pins.jsonl"),
        ("; dump on exit to ", "dump.jsonl"),
    ] {
        let path = dir.join(file);
        assert!(
            start.contains(&format!("{part}{} ", path.display()))
                || start.contains(&format!("{part}{};", path.display()))
                || start.ends_with(&format!("{part}{}", path.display())),
            "{part}{file} not named in full: {start}"
        );
        assert!(path.is_file(), "no {}: {stderr}", path.display());
    }
}

#[test]
fn max_threads_below_the_polling_threads_is_said_at_start_up() {
    // Two workers and the watched body: three threads poll, one can be watched.
    let out = first_pin(&[], &[("PINWATCH_MAX_THREADS", "1")]);
    let stderr = text(&out.stderr);
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("max_threads (PINWATCH_MAX_THREADS)"))
        .collect();
    assert_eq!(said.len(), 1, "{stderr}");
    for part in [
        "WARN pinwatch: max_threads (PINWATCH_MAX_THREADS) is 1, fewer than the 3 threads",
        "pins unreported",
        "raise it to 3 or more",
    ] {
        assert!(said[0].contains(part), "{part:?} not in {:?}", said[0]);
    }
}

#[test]
fn tracing_off_silences_both() {
    let out = first_pin(&[], &[("PINWATCH_TRACING", "off")]);
    assert!(
        out.stdout.is_empty() && out.stderr.is_empty(),
        "{}",
        text(&out.stderr)
    );
}

/// Runs `bin` with `args` and `env` (no `PINWATCH*` from the test's environment), whatever its
/// exit status.
fn run(bin: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(bin);
    cmd.args(args).env_remove("RUST_LOG").env("NO_COLOR", "1");
    for (k, _) in std::env::vars() {
        if k.starts_with("PINWATCH") || k.starts_with("TOKIO_CONSOLE") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied()).output().unwrap()
}

fn free_bind() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// The most common setup: `#[pinwatch::main]` (the runtime, and the console's subscriber, come
/// first) and `tracing_subscriber::fmt().init()` in the body. It cannot work — a process has one
/// global subscriber — so it fails at once, and pinwatch's message says what to write.
#[test]
fn console_on_and_fmt_init_in_the_body_fail_with_pinwatchs_message() {
    let bind = free_bind();
    let out = run(
        env!("CARGO_BIN_EXE_first_pin"),
        &["--fmt"],
        &[
            ("PINWATCH_CONSOLE", "on"),
            ("TOKIO_CONSOLE_BIND", &bind),
            ("PINWATCH_CONTROL", "off"),
        ],
    );
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("pinwatch: PINWATCH_CONSOLE=on installed the process's tracing subscriber"),
        "not pinwatch's message: {stderr}"
    );
    for what in ["pinwatch::console_layer()", "PINWATCH_CONSOLE=resources"] {
        assert!(stderr.contains(what), "{what} not said: {stderr}");
    }
}

/// What the message says to write works: the service's own subscriber with pinwatch's console
/// layer in it, and `PINWATCH_CONSOLE=resources`.
#[test]
fn the_console_layer_in_the_services_own_subscriber_works() {
    let bind = free_bind();
    let out = run(
        env!("CARGO_BIN_EXE_first_pin"),
        &["--console-layer"],
        &[
            ("PINWATCH_CONSOLE", "resources"),
            ("TOKIO_CONSOLE_BIND", &bind),
            ("PINWATCH_CONTROL", "off"),
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(completed_reports(&stdout), 1, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("console resources in the service's subscriber"),
        "{stderr}"
    );
}

/// The other order: the service's subscriber first, then pinwatch's `Builder` with
/// `PINWATCH_CONSOLE=on`: an error at start-up with the same advice.
#[test]
fn a_subscriber_installed_before_the_builder_gets_pinwatchs_message() {
    let bind = free_bind();
    let out = run(
        env!("CARGO_BIN_EXE_fmt_then_console"),
        &[],
        &[
            ("PINWATCH_CONSOLE", "on"),
            ("TOKIO_CONSOLE_BIND", &bind),
            ("PINWATCH_CONTROL", "off"),
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for what in [
        "the service has installed one already",
        "pinwatch::console_layer()",
        "PINWATCH_CONSOLE=resources",
    ] {
        assert!(stderr.contains(what), "{what} not said: {stderr}");
    }
}
