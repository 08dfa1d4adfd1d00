//! tokio-console, through a real console client: the `deadlock` sample runs with
//! `PINWATCH_CONSOLE=on`, and the test speaks the console's own gRPC protocol to it (console-api's
//! `InstrumentClient`, what `tokio-console` uses) to read pinwatch's worker resources live.

mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use console_api::field::{Name, Value};
use console_api::instrument::instrument_client::InstrumentClient;
use console_api::instrument::{InstrumentRequest, Update};
use console_api::resources::resource::kind::Kind;
use support::{free_port, Proc};

/// What the client has seen so far: it applies each update as `tokio-console` does.
#[derive(Default, Debug)]
struct Seen {
    /// pinwatch worker resources: console id → attributes.
    workers: HashMap<u64, HashMap<String, Value>>,
    /// Resources of other kinds (their ids), to tell them apart in stats updates.
    other: Vec<u64>,
    /// Tasks: console id → (fields, location file).
    tasks: HashMap<u64, (HashMap<String, Value>, String)>,
    /// The file the resources must name as their location: where the runtime was built.
    built_in: &'static str,
}

fn name(n: &Option<Name>) -> String {
    match n {
        Some(Name::StrName(s)) => s.clone(),
        Some(Name::NameIdx(i)) => format!("#{i}"),
        None => String::new(),
    }
}

impl Seen {
    fn apply(&mut self, u: Update) {
        if let Some(r) = u.resource_update {
            for res in r.new_resources {
                let id = res.id.map_or(0, |i| i.id);
                let kind = res.kind.and_then(|k| k.kind);
                match kind {
                    Some(Kind::Other(k)) if k == "pinwatch.worker" => {
                        assert_eq!(res.concrete_type, "pinwatch::Worker");
                        let loc = res.location.unwrap_or_default();
                        assert!(
                            loc.file.as_deref().unwrap_or("").ends_with(self.built_in),
                            "the resources' location is where the runtime was built: {loc:?}"
                        );
                        self.workers.entry(id).or_default();
                    }
                    _ => self.other.push(id),
                }
            }
            for (id, stats) in r.stats_update {
                if let Some(attrs) = self.workers.get_mut(&id) {
                    for a in stats.attributes {
                        let f = a.field.unwrap_or_default();
                        if let Some(v) = f.value {
                            attrs.insert(name(&f.name), v);
                        }
                    }
                }
            }
        }
        if let Some(t) = u.task_update {
            for task in t.new_tasks {
                let fields = task
                    .fields
                    .into_iter()
                    .filter_map(|f| Some((name(&f.name), f.value?)))
                    .collect();
                let file = task.location.and_then(|l| l.file).unwrap_or_default();
                self.tasks
                    .insert(task.id.map_or(0, |i| i.id), (fields, file));
            }
        }
    }

    /// The workers' attributes, by the `worker` index the test cannot see: in console id order.
    fn workers(&self) -> Vec<&HashMap<String, Value>> {
        let mut ids: Vec<_> = self.workers.keys().copied().collect();
        ids.sort();
        ids.iter().map(|id| &self.workers[id]).collect()
    }
}

fn bool_attr(a: &HashMap<String, Value>, k: &str) -> Option<bool> {
    match a.get(k)? {
        Value::BoolVal(b) => Some(*b),
        _ => None,
    }
}

fn u64_attr(a: &HashMap<String, Value>, k: &str) -> Option<u64> {
    match a.get(k)? {
        Value::U64Val(n) => Some(*n),
        _ => None,
    }
}

fn str_attr<'a>(a: &'a HashMap<String, Value>, k: &str) -> Option<&'a str> {
    match a.get(k)? {
        Value::StrVal(s) | Value::DebugVal(s) => Some(s),
        _ => None,
    }
}

/// A task's tokio id, from the `task.id` field of tokio's spawn span.
fn task_id(fields: &HashMap<String, Value>) -> Option<u64> {
    match fields.get("task.id")? {
        Value::U64Val(n) => Some(*n),
        Value::DebugVal(s) | Value::StrVal(s) => s.parse().ok(),
        _ => None,
    }
}

/// Connects to the console server on `port` (it starts with the process: retried for a bounded
/// while) and subscribes to its updates, as `tokio-console` does.
async fn watch(port: u16) -> tonic::Streaming<Update> {
    let started = Instant::now();
    let mut client = loop {
        match InstrumentClient::connect(format!("http://127.0.0.1:{port}")).await {
            Ok(c) => break c,
            Err(_) if started.elapsed() < Duration::from_secs(60) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("cannot connect to the console server on port {port}: {e}"),
        }
    };
    client
        .watch_updates(InstrumentRequest {})
        .await
        .expect("watch_updates")
        .into_inner()
}

/// Reads updates until `done` holds of what was seen, for at most `timeout`.
async fn until(
    stream: &mut tonic::Streaming<Update>,
    seen: &mut Seen,
    timeout: Duration,
    what: &str,
    done: impl Fn(&Seen) -> bool,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !done(seen) {
        match tokio::time::timeout_at(deadline, stream.message()).await {
            Ok(Ok(Some(u))) => seen.apply(u),
            Ok(Ok(None)) => panic!("the console server closed the stream; seen: {seen:#?}"),
            Ok(Err(e)) => panic!("console stream error: {e}; seen: {seen:#?}"),
            Err(_) => panic!("gave up after {timeout:?} waiting for {what}; seen: {seen:#?}"),
        }
    }
}

#[test]
fn stuck_workers_show_pinned_in_the_console_and_idle_after() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr");
    let mut child = Command::new(env!("CARGO_BIN_EXE_deadlock"))
        .args(["--stuck", "2", "--release-on-stdin"])
        .env("PINWATCH_CONSOLE", "on")
        .env("TOKIO_CONSOLE_BIND", format!("127.0.0.1:{port}"))
        .env("PINWATCH_REPORT_INTERVAL", "300ms")
        .env_remove("PINWATCH")
        .env_remove("PINWATCH_THRESHOLD")
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let child = Proc {
        child,
        name: "deadlock".into(),
    };
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    // "2 worker(s) stuck in … (task ids 3 4); …"
    let stuck_ids: Vec<u64> = line
        .split("task ids ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .unwrap_or_else(|| panic!("no task ids in {line:?}"))
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(stuck_ids.len(), 2, "{line}");
    // Without RUST_LOG, the console's fmt layer still prints pinwatch's start-up line (written
    // as the runtime was built, before the service's first line): it says where the console
    // listens (helper-60: the default `warn` hid it).
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("pinwatch: watching") && said.contains(&format!("127.0.0.1:{port}")),
        "{said}"
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut stream = watch(port).await;
        let mut seen = Seen {
            built_in: "src/bin/deadlock.rs",
            ..Seen::default()
        };

        // Both workers pinned, each by one of the stuck tasks, with the reason and top frame.
        until(
            &mut stream,
            &mut seen,
            Duration::from_secs(60),
            "both pinwatch workers pinned",
            |s| {
                s.workers.len() == 2
                    && s.workers().iter().all(|a| {
                        bool_attr(a, "pinned") == Some(true)
                            && str_attr(a, "top_frame").is_some_and(|f| f != "-")
                    })
            },
        )
        .await;
        let mut held: Vec<u64> = seen
            .workers()
            .iter()
            .map(|a| u64_attr(a, "task_id").unwrap())
            .collect();
        held.sort();
        let mut expected = stuck_ids.clone();
        expected.sort();
        assert_eq!(held, expected, "each worker shows the task that holds it");
        for a in seen.workers() {
            assert_eq!(str_attr(a, "reason"), Some("other"), "{a:?}");
            assert_eq!(str_attr(a, "blocking_op"), Some("futex"), "{a:?}");
            assert!(
                str_attr(a, "advice").is_some_and(|s| s.contains("spawn_blocking")),
                "{a:?}"
            );
            let top = str_attr(a, "top_frame").unwrap();
            assert!(top.contains("deadlock.rs:"), "top frame {top:?}");
            assert_eq!(u64_attr(a, "pins"), Some(1), "{a:?}");
            // No pin of this worker has completed yet: no victims to show.
            assert_eq!(str_attr(a, "victims"), Some("-"), "{a:?}");
        }
        // `pinned_for` grows while the pin lasts.
        let first: Vec<u64> = seen
            .workers()
            .iter()
            .map(|a| u64_attr(a, "pinned_for").unwrap())
            .collect();
        assert!(first.iter().all(|&ms| ms >= 20), "{first:?}");
        until(
            &mut stream,
            &mut seen,
            Duration::from_secs(60),
            "pinned_for to grow",
            |s| {
                s.workers()
                    .iter()
                    .zip(&first)
                    .all(|(a, f)| u64_attr(a, "pinned_for").is_some_and(|ms| ms > *f + 200))
            },
        )
        .await;
        // The user can go from a worker to its task: the console lists the stuck tasks, by
        // tokio's task id, spawned in the sample.
        until(
            &mut stream,
            &mut seen,
            Duration::from_secs(30),
            "the stuck tasks in the console's task list",
            |s| {
                stuck_ids.iter().all(|id| {
                    s.tasks
                        .values()
                        .any(|(f, file)| task_id(f) == Some(*id) && file.ends_with("deadlock.rs"))
                })
            },
        )
        .await;

        // Release: both workers show not pinned, and what they went through.
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
        until(
            &mut stream,
            &mut seen,
            Duration::from_secs(60),
            "both workers idle after the release",
            |s| {
                s.workers()
                    .iter()
                    .all(|a| bool_attr(a, "pinned") == Some(false))
            },
        )
        .await;
        for a in seen.workers() {
            assert_eq!(u64_attr(a, "task_id"), Some(0), "{a:?}");
            assert_eq!(str_attr(a, "reason"), Some("-"), "{a:?}");
            assert_eq!(u64_attr(a, "pinned_for"), Some(0), "{a:?}");
            assert_eq!(u64_attr(a, "pins"), Some(1), "{a:?}");
            assert!(u64_attr(a, "pinned_total").unwrap() >= 200, "{a:?}");
            // The completed pin's victims: counted when tokio measured the waits (the
            // `schedule-latency` feature), else `not measured`; `-` when the event had none.
            let victims = str_attr(a, "victims").unwrap_or_else(|| panic!("{a:?}"));
            assert!(
                ["-", "not measured", "none delayed"].contains(&victims)
                    || victims.contains(" delayed"),
                "{victims:?}"
            );
        }
    });
    drop(child);
}

/// A service that installs its own subscriber, with the console layer, after pinwatch started
/// (what the body of `#[pinwatch::main]` does): `PINWATCH_CONSOLE=resources` gives it the
/// worker resources through its layer. And `on`, with a subscriber already there, says what to do.
#[test]
fn a_service_with_its_own_subscriber_gets_the_resources_through_its_layer() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    let (rt, detector) = pinwatch::Builder::new()
        .console(pinwatch::Console::Resources)
        .tracing(false)
        .build(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all(),
        )
        .unwrap();
    let port = free_port();
    tracing_subscriber::registry()
        .with(
            console_subscriber::ConsoleLayer::builder()
                .server_addr(([127, 0, 0, 1], port))
                .spawn(),
        )
        .init();

    let err = pinwatch::Builder::new()
        .console(pinwatch::Console::On)
        .build(tokio::runtime::Builder::new_current_thread().enable_all())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("installed one already")
            && err.contains("pinwatch::console_layer()")
            && err.contains("PINWATCH_CONSOLE=resources"),
        "{err}"
    );

    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let stuck = rt.spawn(async move {
        let _ = rx.recv();
    });
    let stuck_id: u64 = stuck.id().to_string().parse().unwrap();
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    client_rt.block_on(async {
        let mut stream = watch(port).await;
        let mut seen = Seen {
            built_in: "tests/console.rs",
            ..Seen::default()
        };
        until(
            &mut stream,
            &mut seen,
            Duration::from_secs(60),
            "a worker pinned by the stuck task",
            |s| {
                s.workers.len() == 2
                    && s.workers().iter().any(|a| {
                        bool_attr(a, "pinned") == Some(true)
                            && u64_attr(a, "task_id") == Some(stuck_id)
                    })
            },
        )
        .await;
        tx.send(()).unwrap();
        until(
            &mut stream,
            &mut seen,
            Duration::from_secs(60),
            "the worker idle after the release",
            |s| {
                s.workers()
                    .iter()
                    .all(|a| bool_attr(a, "pinned") == Some(false))
                    && s.workers().iter().any(|a| u64_attr(a, "pins") == Some(1))
            },
        )
        .await;
    });
    rt.block_on(stuck).unwrap();
    drop(rt);
    assert_eq!(detector.shutdown().pinned_polls, 1);
}

/// A `TOKIO_CONSOLE_*` value that console-subscriber would panic on stops the service at
/// start-up with an error naming it (helper-95: `TOKIO_CONSOLE_RETENTION=forever` was a
/// panic, status 101).
#[test]
fn a_console_variable_it_cannot_read_is_a_start_up_error() {
    let err = support::start_up_error(
        env!("CARGO_BIN_EXE_first_pin"),
        &[
            ("PINWATCH_CONSOLE", "on"),
            ("TOKIO_CONSOLE_RETENTION", "forever"),
        ],
    );
    assert!(
        err.contains("TOKIO_CONSOLE_RETENTION=\"forever\" is not a duration"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}
