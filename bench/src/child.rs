//! One measurement in a process of its own: one configuration (a runtime and the tool on it),
//! one workload, one JSON line of results on stdout. A process each, because some tools install
//! the process's `tracing` subscriber and none can be taken off again.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

/// A runtime and the tool watching it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Config {
    /// tokio, no hooks.
    Plain,
    /// tokio with two empty poll hooks: tokio's own cost of calling them.
    Hooks,
    /// tokio with one empty poll hook (before the poll only): what a design that needs one
    /// hook would start from.
    Hook1,
    /// pinwatch with its defaults.
    Pinwatch,
    /// pinwatch with the JSON-lines recording, the Prometheus endpoint (scraped every second)
    /// and OTLP (to a receiver in the process, metrics every second) all on.
    PinwatchAll,
    /// tokio-metrics' `TaskMonitor` instrumenting every spawned task.
    TokioMetrics,
    /// tokio, no hooks, from the build with tokio's `tracing` feature: that feature's floor.
    PlainTracing,
    /// console-subscriber's layer, what `tokio-console` users run.
    Console,
    /// pinwatch with `PINWATCH_CONSOLE=on`: console-subscriber plus pinwatch's worker resources.
    PinwatchConsole,
    /// tokio-blocked's layer (reports polls longer than 20 ms, after they return).
    TokioBlocked,
    /// pinwatch, the http service with tower-http's `TraceLayer` (a span per request) and a
    /// `tracing_subscriber::registry()` with a layer that does nothing instead of pinwatch's:
    /// the denominator of the next.
    PinwatchTrace,
    /// The same with `pinwatch::tracing_layer()` in the registry (each pin names its request).
    PinwatchTraceLayer,
    /// tokio with `Builder::enable_eager_driver_handoff()` (tokio 1.52+, unstable): a worker
    /// that leaves the drivers to poll a task first wakes another to take them.
    EagerHandoff,
    /// pinwatch with `PINWATCH_RESCUE=off`: a stall is reported, never ended.
    PinwatchNoRescue,
    /// Plain tokio and a thread that does nothing but wake every [`WAKER_PERIOD`] (the
    /// watchdog's cadence on a busy service): what the wake-ups alone cost on this machine,
    /// the floor of pinwatch's busy row. Busy workload only.
    Waker,
}

impl Config {
    /// In table order.
    pub const ALL: [Config; 15] = [
        Config::Plain,
        Config::Hook1,
        Config::Hooks,
        Config::Pinwatch,
        Config::PinwatchAll,
        Config::TokioMetrics,
        Config::PlainTracing,
        Config::Console,
        Config::PinwatchConsole,
        Config::TokioBlocked,
        Config::PinwatchTrace,
        Config::PinwatchTraceLayer,
        Config::EagerHandoff,
        Config::PinwatchNoRescue,
        Config::Waker,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Config::Plain => "plain",
            Config::Hooks => "hooks",
            Config::Hook1 => "hook1",
            Config::Pinwatch => "pinwatch",
            Config::PinwatchAll => "pinwatch-all",
            Config::TokioMetrics => "tokio-metrics",
            Config::PlainTracing => "plain-tracing",
            Config::Console => "console",
            Config::PinwatchConsole => "pinwatch-console",
            Config::TokioBlocked => "tokio-blocked",
            Config::PinwatchTrace => "pinwatch-trace",
            Config::PinwatchTraceLayer => "pinwatch-trace-layer",
            Config::EagerHandoff => "eager-handoff",
            Config::PinwatchNoRescue => "pinwatch-no-rescue",
            Config::Waker => "waker",
        }
    }

    /// What the table calls it.
    pub fn label(self) -> &'static str {
        match self {
            Config::Plain => "plain tokio",
            Config::Hooks => "tokio + 2 empty poll hooks",
            Config::Hook1 => "tokio + 1 empty poll hook (before only)",
            Config::Pinwatch => "pinwatch (defaults)",
            Config::PinwatchAll => "pinwatch + recording + Prometheus + OTLP",
            Config::TokioMetrics => "tokio-metrics TaskMonitor on every task",
            Config::PlainTracing => "plain tokio, `tracing` feature built in",
            Config::Console => "console-subscriber",
            Config::PinwatchConsole => "pinwatch + `PINWATCH_CONSOLE=on`",
            Config::TokioBlocked => "tokio-blocked",
            Config::PinwatchTrace => "pinwatch, TraceLayer spans, registry + a no-op layer",
            Config::PinwatchTraceLayer => "pinwatch, TraceLayer spans, registry + tracing_layer()",
            Config::EagerHandoff => "tokio + enable_eager_driver_handoff()",
            Config::PinwatchNoRescue => "pinwatch, PINWATCH_RESCUE=off",
            Config::Waker => "plain tokio + a bare thread waking every 18 ms",
        }
    }

    /// Measured on the http workload only (a span per request is all they add).
    pub fn http_only(self) -> bool {
        matches!(self, Config::PinwatchTrace | Config::PinwatchTraceLayer)
    }

    /// Measured on the http and stall workloads only: what they change is what a stall does,
    /// and what that costs an ordinary service.
    pub fn stall_pair(self) -> bool {
        matches!(self, Config::EagerHandoff | Config::PinwatchNoRescue)
    }

    /// Measured on the busy workload only (its waking thread is all it adds).
    pub fn busy_only(self) -> bool {
        self == Config::Waker
    }

    /// Runs the busy workload: pinwatch's configurations (their own threads' CPU), plain tokio
    /// and the empty hooks beside them (the process's), and the bare waking thread.
    pub fn in_busy(self) -> bool {
        matches!(
            self,
            Config::Plain
                | Config::Waker
                | Config::Hooks
                | Config::Pinwatch
                | Config::PinwatchAll
                | Config::PinwatchConsole
                | Config::PinwatchTraceLayer
        )
    }

    /// Runs the stall workload.
    pub fn in_stall(self) -> bool {
        matches!(
            self,
            Config::Plain | Config::EagerHandoff | Config::Pinwatch | Config::PinwatchNoRescue
        )
    }

    pub fn parse(s: &str) -> Option<Config> {
        Config::ALL.into_iter().find(|c| c.name() == s)
    }

    /// Needs the build with tokio's `tracing` feature (the `tracing-tools` cargo feature).
    pub fn needs_tracing(self) -> bool {
        matches!(
            self,
            Config::PlainTracing | Config::Console | Config::PinwatchConsole | Config::TokioBlocked
        )
    }

    /// Reports a stuck worker while it is stuck (so its detection latency can be measured).
    pub fn reports_stuck(self) -> bool {
        matches!(
            self,
            Config::Pinwatch
                | Config::PinwatchAll
                | Config::PinwatchConsole
                | Config::PinwatchTrace
                | Config::PinwatchTraceLayer
                | Config::PinwatchNoRescue
        )
    }
}

/// What runs on the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// N tasks × 10 `yield_now`: the per-poll cost, nothing else.
    Storm,
    /// An axum service under a fixed-rate keep-alive load from a client on its own runtime.
    Http,
    /// The same, with one request in 500 pinning its worker for 30 ms (`std::thread::sleep`).
    Mixed,
    /// A task blocks its worker for good: how long until the tool says so.
    Stuck,
    /// The service does nothing (its only task sleeps): CPU and wake-ups per second.
    Idle,
    /// The first pin of a fresh process: how long until the tool reports it, and the memory
    /// that report added.
    FirstPin,
    /// The http service under a light load while a task woken by a timer — run by the worker
    /// that drove the timers and I/O — blocks that worker for [`STALL_PIN`]: the requests
    /// answered meanwhile.
    Stall,
    /// The http workload's service and load, nothing pinned: the CPU and wake-ups per second
    /// of pinwatch's own threads (`pinwatch-*`: the watchdog, the exporters) while the
    /// workers are busy.
    Busy,
}

impl Workload {
    pub const ALL: [Workload; 8] = [
        Workload::Storm,
        Workload::Http,
        Workload::Mixed,
        Workload::Stuck,
        Workload::Idle,
        Workload::FirstPin,
        Workload::Stall,
        Workload::Busy,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Storm => "storm",
            Workload::Http => "http",
            Workload::Mixed => "mixed",
            Workload::Stuck => "stuck",
            Workload::Idle => "idle",
            Workload::FirstPin => "first-pin",
            Workload::Stall => "stall",
            Workload::Busy => "busy",
        }
    }

    pub fn parse(s: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == s)
    }
}

/// Sizes of the workloads.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    pub tasks: usize,
    pub http: Duration,
    pub rate: u32,
    pub conns: usize,
    /// The idle workload's window (after [`IDLE_WARMUP`]).
    pub idle: Duration,
}

/// The idle workload measures after this long, once the tool's threads have started.
pub const IDLE_WARMUP: Duration = Duration::from_secs(1);

/// The first-pin workload holds the worker of a tool that does not report while stuck this long,
/// releases it, and reads the memory this much later again (tokio-blocked reports a poll when it
/// returns).
pub const UNREPORTED_HOLD: Duration = Duration::from_millis(250);

/// Threads whose names start so are the bench's own stand-ins for what would be other
/// processes (the Prometheus scraper and the OTLP receiver of `pinwatch-all`): the idle sums
/// leave them out.
const OWN_THREAD_PREFIX: &str = "bench-";

/// The `waker` configuration's period: the default threshold less one scan interval, how
/// often the watchdog wakes while a busy service's polls are stamped and its workers' accounting
/// read before each.
pub const WAKER_PERIOD: Duration = Duration::from_millis(18);

/// The `waker` configuration's thread, counted by the busy workload as the tool's.
const WAKER_THREAD: &str = "bench-waker";

/// How long the stall workload's pin holds its worker.
pub const STALL_PIN: Duration = Duration::from_secs(2);

/// The stall workload's load: requests a second, each on a new connection, so few that the
/// workers park between them (as a service's do most of the time).
pub const STALL_RATE: u32 = 50;

/// One request in this many pins its worker in the mixed workload.
const PIN_EVERY: u64 = 500;
const PIN_FOR: Duration = Duration::from_millis(30);

/// Spawns the workload's tasks, through tokio-metrics' monitor when that is the configuration.
#[derive(Clone)]
struct Spawner(Option<tokio_metrics::TaskMonitor>);

impl Spawner {
    fn spawn<F>(&self, f: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.0 {
            Some(m) => tokio::spawn(m.instrument(f)),
            None => tokio::spawn(f),
        }
    }
}

/// The configuration, set up: the runtime, and what must live as long as it.
struct Setup {
    rt: tokio::runtime::Runtime,
    spawner: Spawner,
    detector: Option<pinwatch::Detector>,
    /// When a pinwatch sink first got an `in_progress` event of each task, by task id.
    first_report: Arc<Mutex<std::collections::HashMap<u64, Instant>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    helpers: Vec<std::thread::JoinHandle<()>>,
    record: Option<std::path::PathBuf>,
    /// The http service's requests are `TraceLayer` spans.
    trace: bool,
    /// Of the traced requests the handler looked at (one in [`SPAN_SAMPLE`]), how many ran
    /// inside a span: (looked at, in a span).
    request_spans: Arc<(AtomicU64, AtomicU64)>,
}

/// With `TraceLayer`, the handler checks one request in this many for its span (the check asks
/// the subscriber for the current span, so not every request pays for it).
const SPAN_SAMPLE: u64 = 64;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn setup(config: Config, workload: Workload) -> Setup {
    let mut tokio = tokio::runtime::Builder::new_multi_thread();
    tokio.worker_threads(2).enable_all();
    let first_report = Arc::new(Mutex::new(std::collections::HashMap::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut helpers = Vec::new();
    let mut record = None;
    let first = Arc::clone(&first_report);
    // The bench's own sink, where a workload times the first report with it (a sink of the
    // user's runs on a thread of pinwatch's: elsewhere it would count as pinwatch's cost).
    let timed = matches!(workload, Workload::Stuck | Workload::FirstPin);
    let sink = timed.then_some(move |e: &pinwatch::PinnedEvent| {
        if let (pinwatch::State::InProgress, Some(task)) = (e.state, e.task_id) {
            let mut f = first.lock().unwrap_or_else(|p| p.into_inner());
            f.entry(task).or_insert_with(Instant::now);
        }
    });
    let with_sink = |b: pinwatch::Builder| match sink.clone() {
        Some(sink) => b.sink(sink),
        None => b,
    };
    let (rt, detector) = match config {
        Config::Plain | Config::TokioMetrics | Config::PlainTracing => {
            (tokio.build().expect("runtime"), None)
        }
        Config::Console | Config::TokioBlocked => {
            install_tracing_tool(config);
            (tokio.build().expect("runtime"), None)
        }
        Config::Hooks => {
            tokio.on_before_task_poll(|_| {}).on_after_task_poll(|_| {});
            (tokio.build().expect("runtime"), None)
        }
        Config::Hook1 => {
            tokio.on_before_task_poll(|_| {});
            (tokio.build().expect("runtime"), None)
        }
        Config::EagerHandoff => {
            tokio.enable_eager_driver_handoff();
            (tokio.build().expect("runtime"), None)
        }
        Config::Waker => {
            helpers.push(waker(Arc::clone(&stop)));
            (tokio.build().expect("runtime"), None)
        }
        Config::PinwatchNoRescue => {
            let (rt, d) = with_sink(pinwatch::Builder::new())
                .rescue(false)
                .build(&mut tokio)
                .expect("pinwatch");
            (rt, Some(d))
        }
        Config::Pinwatch => {
            let mut b = with_sink(pinwatch::Builder::new());
            if workload == Workload::Idle {
                // What the idle goal is about: the defaults (heartbeat and control
                // socket on) with the Prometheus endpoint on too, not scraped.
                b = b.prometheus_addr(([127, 0, 0, 1], free_port()).into());
            }
            let (rt, d) = b.build(&mut tokio).expect("pinwatch");
            (rt, Some(d))
        }
        Config::PinwatchConsole => {
            pinwatch_console(&mut tokio, with_sink(pinwatch::Builder::new()))
        }
        Config::PinwatchTrace | Config::PinwatchTraceLayer => {
            use tracing_subscriber::prelude::*;
            // Not `registry().with(Option<layer>)`: a `None` layer's level hint is `OFF`, so
            // the denominator would make no spans or events at all (`LevelFilter::current()`
            // turns `span!` into `Span::none()` before any subscriber is asked), and the
            // difference between the two rows would be all of tracing's cost. Nor a registry
            // with no layer: it never frees a closed span (tokio-rs/tracing#900, the close
            // path runs only under a `Layered`), so it would grow its slab by a span a
            // request. A layer that does nothing: the registry as any real subscriber uses it.
            if config == Config::PinwatchTraceLayer {
                tracing_subscriber::registry()
                    .with(pinwatch::tracing_layer())
                    .init();
            } else {
                tracing_subscriber::registry()
                    .with(tracing_subscriber::layer::Identity::new())
                    .init();
            }
            let (rt, d) = with_sink(pinwatch::Builder::new())
                .build(&mut tokio)
                .expect("pinwatch");
            (rt, Some(d))
        }
        Config::PinwatchAll => {
            let otlp = otlp_receiver(&stop, &mut helpers);
            // Read by the OpenTelemetry SDK when the exporter starts, before any thread of
            // this process exists but the receiver's.
            std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{otlp}"));
            std::env::set_var("OTEL_METRIC_EXPORT_INTERVAL", "1000");
            let metrics: SocketAddr = ([127, 0, 0, 1], free_port()).into();
            let path =
                std::env::temp_dir().join(format!("pinwatch-bench-{}.jsonl", std::process::id()));
            record = Some(path.clone());
            let (rt, d) = with_sink(pinwatch::Builder::new())
                .record(path)
                .prometheus_addr(metrics)
                .otlp(true)
                .build(&mut tokio)
                .expect("pinwatch");
            helpers.push(scraper(metrics, Arc::clone(&stop)));
            (rt, Some(d))
        }
    };
    let spawner = Spawner((config == Config::TokioMetrics).then(tokio_metrics::TaskMonitor::new));
    Setup {
        rt,
        spawner,
        detector,
        first_report,
        stop,
        helpers,
        record,
        trace: config.http_only(),
        request_spans: Arc::default(),
    }
}

#[cfg(feature = "tracing-tools")]
fn install_tracing_tool(config: Config) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    match config {
        Config::Console => tracing_subscriber::registry()
            .with(
                console_subscriber::ConsoleLayer::builder()
                    .server_addr(([127, 0, 0, 1], free_port()))
                    .spawn(),
            )
            .init(),
        _ => tracing_subscriber::registry()
            .with(
                tokio_blocked::TokioBlockedLayer::new()
                    .with_warn_busy_single_poll(Some(Duration::from_millis(20))),
            )
            .init(),
    }
}

#[cfg(not(feature = "tracing-tools"))]
fn install_tracing_tool(config: Config) {
    eprintln!(
        "compare: {} needs the build with the `tracing-tools` feature",
        config.name()
    );
    std::process::exit(2);
}

#[cfg(feature = "tracing-tools")]
fn pinwatch_console(
    tokio: &mut tokio::runtime::Builder,
    builder: pinwatch::Builder,
) -> (tokio::runtime::Runtime, Option<pinwatch::Detector>) {
    std::env::set_var("TOKIO_CONSOLE_BIND", format!("127.0.0.1:{}", free_port()));
    let (rt, d) = builder
        .console(pinwatch::Console::On)
        .build(tokio)
        .expect("pinwatch");
    (rt, Some(d))
}

#[cfg(not(feature = "tracing-tools"))]
fn pinwatch_console(
    _: &mut tokio::runtime::Builder,
    _: pinwatch::Builder,
) -> (tokio::runtime::Runtime, Option<pinwatch::Detector>) {
    install_tracing_tool(Config::PinwatchConsole);
    unreachable!()
}

/// An OTLP/HTTP receiver that takes everything (an empty protobuf answer is a valid export
/// response), on a thread of its own.
fn otlp_receiver(
    stop: &Arc<std::sync::atomic::AtomicBool>,
    helpers: &mut Vec<std::thread::JoinHandle<()>>,
) -> SocketAddr {
    let server = tiny_http::Server::http("127.0.0.1:0").expect("OTLP receiver");
    let addr = server.server_addr().to_ip().expect("an IP address");
    let stop = Arc::clone(stop);
    let receiver = move || {
        while !stop.load(Ordering::Relaxed) {
            if let Ok(Some(mut req)) = server.recv_timeout(Duration::from_millis(100)) {
                let _ = std::io::copy(req.as_reader(), &mut std::io::sink());
                let header =
                    tiny_http::Header::from_bytes("Content-Type", "application/x-protobuf")
                        .expect("header");
                let _ = req.respond(tiny_http::Response::empty(200).with_header(header));
            }
        }
    };
    helpers.push(
        std::thread::Builder::new()
            .name(format!("{OWN_THREAD_PREFIX}otlp"))
            .spawn(receiver)
            .expect("OTLP receiver thread"),
    );
    addr
}

/// Scrapes `/metrics` every second, as a (busy) Prometheus would.
fn scraper(
    addr: SocketAddr,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let scrape = move || {
        while !stop.load(Ordering::Relaxed) {
            let _ = get_metrics(addr);
            for _ in 0..10 {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    std::thread::Builder::new()
        .name(format!("{OWN_THREAD_PREFIX}scraper"))
        .spawn(scrape)
        .expect("scraper thread")
}

/// The `waker` configuration's thread: sleeps [`WAKER_PERIOD`] at a time, as the watchdog
/// waits (`park_timeout`), and does nothing else until `stop`.
fn waker(stop: Arc<std::sync::atomic::AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name(WAKER_THREAD.into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::park_timeout(WAKER_PERIOD);
            }
        })
        .expect("waker thread")
}

/// `GET /metrics` from `addr`: the whole answer.
fn get_metrics(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// Runs `workload` on `config` and returns its results.
pub fn run(config: Config, workload: Workload, sizes: Sizes) -> serde_json::Value {
    let s = setup(config, workload);
    let mut out = match workload {
        Workload::Storm => storm(&s, sizes.tasks),
        Workload::Http => http(&s, sizes, false),
        Workload::Mixed => http(&s, sizes, true),
        Workload::Stuck => stuck(&s),
        Workload::Idle => idle(&s, sizes.idle),
        Workload::FirstPin => first_pin(&s, config.reports_stuck()),
        Workload::Stall => stall(&s),
        Workload::Busy => busy(&s, sizes),
    };
    let monitored = s
        .spawner
        .0
        .as_ref()
        .map(|m| m.cumulative().instrumented_count);
    let polls: u64 = {
        let m = s.rt.metrics();
        (0..m.num_workers()).map(|i| m.worker_poll_count(i)).sum()
    };
    let Setup {
        rt,
        detector,
        stop,
        helpers,
        record,
        ..
    } = s;
    drop(rt);
    let stats = detector.map(|d| d.shutdown());
    stop.store(true, Ordering::Relaxed);
    for h in helpers {
        let _ = h.join();
    }
    if let Some(path) = record {
        let _ = std::fs::remove_file(path);
    }
    out["config"] = json!(config.name());
    out["workload"] = json!(workload.name());
    out["polls"] = json!(polls);
    out["peak_rss_kib"] = json!(peak_rss_kib());
    out["pinned_polls"] = json!(stats.map(|s| s.pinned_polls));
    out["monitored_tasks"] = json!(monitored);
    out["debug_build"] = json!(cfg!(debug_assertions));
    out
}

fn storm(s: &Setup, tasks: usize) -> serde_json::Value {
    let sp = s.spawner.clone();
    let start = Instant::now();
    s.rt.block_on(async move {
        let handles: Vec<_> = (0..tasks)
            .map(|_| {
                sp.spawn(async {
                    for _ in 0..10 {
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        for h in handles {
            h.await.expect("storm task");
        }
    });
    json!({ "wall_ms": start.elapsed().as_secs_f64() * 1e3, "task_polls": tasks * 11 })
}

fn cpu_time() -> Duration {
    let u = usage();
    u.user + u.sys
}

/// The process's CPU time, user and system apart, and its context switches so far.
struct Usage {
    user: Duration,
    sys: Duration,
    /// Voluntary (a thread blocked: parked, waited) and involuntary (preempted).
    switches: (u64, u64),
}

fn usage() -> Usage {
    // SAFETY: getrusage writes into the zeroed struct we own; RUSAGE_SELF is always valid.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Usage {
        user: tv(ru.ru_utime),
        sys: tv(ru.ru_stime),
        switches: (ru.ru_nvcsw as u64, ru.ru_nivcsw as u64),
    }
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The service: `GET /` answers `ok`; in the mixed workload one request in [`PIN_EVERY`] sleeps
/// [`PIN_FOR`] on its worker first. Served by an accept loop of our own so that every
/// connection task goes through the spawner (tokio-metrics sees them all).
fn serve(s: &Setup, pins: bool) -> SocketAddr {
    use axum::routing::get;
    let counter = Arc::new(AtomicU64::new(0));
    let (trace, spans) = (s.trace, Arc::clone(&s.request_spans));
    let app = axum::Router::new().route(
        "/",
        get(move || {
            let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
            if trace && n % SPAN_SAMPLE == 1 {
                // That the configuration's requests are spans at all (a subscriber whose level
                // hint is `OFF` would leave every `TraceLayer` span disabled). axum calls the
                // handler while the request's future is polled, inside its span.
                let seen = tracing::dispatcher::get_default(|d| d.current_span().id().is_some());
                spans.0.fetch_add(1, Ordering::Relaxed);
                spans.1.fetch_add(u64::from(seen), Ordering::Relaxed);
            }
            async move {
                if pins && n.is_multiple_of(PIN_EVERY) {
                    std::thread::sleep(PIN_FOR);
                }
                "ok"
            }
        }),
    );
    let app = if s.trace {
        app.layer(tower_http::trace::TraceLayer::new_for_http())
    } else {
        app
    };
    let sp = s.spawner.clone();
    let listener =
        s.rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("listen");
    let addr = listener.local_addr().expect("address");
    let sp2 = sp.clone();
    let _guard = s.rt.enter();
    sp.spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let svc = hyper_util::service::TowerToHyperService::new(app.clone());
            sp2.spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

fn http(s: &Setup, sizes: Sizes, pins: bool) -> serde_json::Value {
    let addr = serve(s, pins);
    if pins {
        mixed_warm_up(s, addr, sizes);
    }
    // With pins (mixed) and pinwatch: what its own threads spend on them, over the load (timed
    // here: it also holds the client's start and end).
    let pinned = || s.detector.as_ref().map_or(0, |d| d.stats().pinned_polls);
    let own0 = (pins && s.detector.is_some()).then(|| (threads(), Instant::now(), pinned()));
    let u0 = usage();
    let (latencies, elapsed) = load(addr, sizes);
    let u1 = usage();
    let own = own0.map(|(before, start, pins)| {
        let took = start.elapsed().as_secs_f64();
        let own = Spent::between(&before, &threads(), took, |name| {
            name.starts_with(PINWATCH_THREAD_PREFIX)
        });
        (own.cpu_ns as f64 / 1e6, took, pinned() - pins)
    });
    let (user, sys) = (u1.user - u0.user, u1.sys - u0.sys);
    let cpu = user + sys;
    let mut l = latencies;
    l.sort_unstable();
    let pct = |p: f64| {
        l.get(((l.len() as f64 * p) as usize).min(l.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    // Per request answered (never a division by zero).
    let per_req = |x: f64| x / l.len().max(1) as f64;
    json!({
        "requests": l.len(),
        "req_per_s": l.len() as f64 / elapsed.as_secs_f64(),
        "p50_us": pct(0.50),
        "p99_us": pct(0.99),
        "cpu_us_per_req": per_req(cpu.as_secs_f64() * 1e6),
        // What the whole above is made of: the process's own code, the kernel's on its behalf
        // (most of it: sockets, epoll, futex wake-ups), and how often its threads blocked.
        "user_us_per_req": per_req(user.as_secs_f64() * 1e6),
        "sys_us_per_req": per_req(sys.as_secs_f64() * 1e6),
        "switches_per_req": per_req((u1.switches.0 - u0.switches.0) as f64),
        "preempted_per_req": per_req((u1.switches.1 - u0.switches.1) as f64),
        // pinwatch's threads (`pinwatch-*`) over the load, in all (mixed only): with the
        // detector's `pinned_polls`, what a pin costs them.
        "own_cpu_ms": own.map(|o| o.0),
        "own_window_s": own.map(|o| o.1),
        "own_pins": own.map(|o| o.2),
        "request_spans": s.trace.then(|| json!({
            "sampled": s.request_spans.0.load(Ordering::Relaxed),
            "in_span": s.request_spans.1.load(Ordering::Relaxed),
        })),
    })
}

/// How long the mixed workload's load runs before its window: its first pins (8), among them
/// the process's first, whose report loads the debug information pinwatch's symbols need once
/// a process (the idle table's first-pin columns measure that).
pub const MIXED_WARMUP: Duration = Duration::from_secs(1);

/// The mixed workload's warm-up: [`MIXED_WARMUP`] of the load, for every configuration alike;
/// with pinwatch, until its first pin's reports have reached the sinks as well (10 s at most),
/// so that the window measures a service that has pinned before.
fn mixed_warm_up(s: &Setup, addr: SocketAddr, sizes: Sizes) {
    let _ = load(
        addr,
        Sizes {
            http: MIXED_WARMUP,
            ..sizes
        },
    );
    if let Some(d) = &s.detector {
        let deadline = Instant::now() + Duration::from_secs(10);
        while d.stats().delivered < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The client: `conns` keep-alive connections on a runtime of its own (one thread), together
/// sending `rate` requests a second on a fixed schedule for `sizes.http`. A latency is counted
/// from when the request was due, not when it went out, so a stalled server is not hidden by
/// a client that waited for it.
fn load(addr: SocketAddr, sizes: Sizes) -> (Vec<u32>, Duration) {
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                client.block_on(async {
                    let period = Duration::from_secs_f64(sizes.conns as f64 / sizes.rate as f64);
                    let start = tokio::time::Instant::now() + Duration::from_millis(50);
                    let end = start + sizes.http;
                    let mut tasks = Vec::new();
                    for c in 0..sizes.conns {
                        let offset = period.mul_f64(c as f64 / sizes.conns as f64);
                        tasks.push(tokio::spawn(connection(addr, start + offset, end, period)));
                    }
                    let mut all = Vec::new();
                    for t in tasks {
                        all.extend(t.await.expect("client connection"));
                    }
                    (all, sizes.http)
                })
            })
            .join()
            .expect("client thread")
    })
}

async fn connection(
    addr: SocketAddr,
    mut due: tokio::time::Instant,
    end: tokio::time::Instant,
    period: Duration,
) -> Vec<u32> {
    use http_body_util::BodyExt;
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("handshake");
    tokio::spawn(conn);
    let mut latencies = Vec::new();
    while due < end {
        tokio::time::sleep_until(due).await;
        let req = hyper::Request::get("/")
            .header(hyper::header::HOST, "bench")
            .body(http_body_util::Empty::<hyper::body::Bytes>::new())
            .expect("request");
        let resp = sender.send_request(req).await.expect("response");
        let _ = resp.into_body().collect().await.expect("body");
        latencies.push(due.elapsed().as_micros().min(u32::MAX as u128) as u32);
        due += period;
    }
    latencies
}

/// The busy workload measures after this long under load (connections made, the tool's
/// threads started), for the http workload's duration.
pub const BUSY_WARMUP: Duration = Duration::from_secs(1);

/// Threads whose names start so are pinwatch's own.
const PINWATCH_THREAD_PREFIX: &str = "pinwatch";

/// The http service under the http workload's load, nothing pinned: after [`BUSY_WARMUP`], for
/// `sizes.http`, the CPU time and context switches of pinwatch's own threads, and of the whole
/// process, per second.
fn busy(s: &Setup, sizes: Sizes) -> serde_json::Value {
    let addr = serve(s, false);
    let window = sizes.http;
    // The load outlasts the window on both sides: it starts 50 ms after `load` is called.
    let loaded = Sizes {
        http: BUSY_WARMUP + window + Duration::from_millis(300),
        ..sizes
    };
    std::thread::scope(|scope| {
        let client = scope.spawn(move || load(addr, loaded));
        std::thread::sleep(BUSY_WARMUP + Duration::from_millis(50));
        let (before, cpu0) = (threads(), cpu_time());
        let start = Instant::now();
        std::thread::sleep(window);
        let (after, cpu1) = (threads(), cpu_time());
        let took = start.elapsed().as_secs_f64();
        let (latencies, elapsed) = client.join().expect("client thread");
        let own = Spent::between(&before, &after, took, |name| {
            name.starts_with(PINWATCH_THREAD_PREFIX) || name == WAKER_THREAD
        });
        let (cpu_ns, switches, by_thread) = (own.cpu_ns, own.switches, own.by_thread);
        json!({
            "window_s": took,
            "req_per_s": latencies.len() as f64 / elapsed.as_secs_f64(),
            "own_cpu_ms_per_s": cpu_ns as f64 / 1e6 / took,
            "own_wakeups_per_s": switches as f64 / took,
            "own_cpu_ms_per_s_by_thread": by_thread,
            "process_cpu_ms_per_s": (cpu1 - cpu0).as_secs_f64() * 1e3 / took,
        })
    })
}

/// The http service under [`STALL_RATE`] requests a second; 500 ms in, a task sleeps 300 ms on
/// the timer — the worker that drives the timers and I/O wakes it and runs it — and then blocks
/// that worker for [`STALL_PIN`]. Counts the requests due while it blocks (but the last 100 ms)
/// and those of them answered before it ended.
fn stall(s: &Setup) -> serde_json::Value {
    let addr = serve(s, false);
    let sizes = Sizes {
        tasks: 0,
        http: Duration::from_millis(500)
            + Duration::from_millis(300)
            + STALL_PIN
            + Duration::from_millis(500),
        rate: STALL_RATE,
        conns: 1,
        idle: Duration::ZERO,
    };
    let (blocked_tx, blocked_rx) = std::sync::mpsc::channel::<Instant>();
    let pinner = {
        let _guard = s.rt.enter();
        s.spawner.spawn(async move {
            tokio::time::sleep(Duration::from_millis(800)).await;
            let _ = blocked_tx.send(Instant::now());
            std::thread::sleep(STALL_PIN);
        })
    };
    let requests = load_timed(addr, sizes);
    let blocked_at = blocked_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the pin ran");
    let _ = s.rt.block_on(pinner);
    let end = blocked_at + STALL_PIN;
    let during: Vec<&(Instant, Option<Instant>)> = requests
        .iter()
        .filter(|(due, _)| *due >= blocked_at && *due + Duration::from_millis(100) < end)
        .collect();
    let answered = during
        .iter()
        .filter(|(_, done)| done.is_some_and(|d| d < end))
        .count();
    json!({ "asked": during.len(), "answered": answered })
}

/// Requests at `sizes.rate` a second for `sizes.http`, each on a connection of its own (a stalled
/// server must accept it too), each sent when due even while earlier ones wait: when each was
/// due, and when its answer came (`None`: none within 10 s).
fn load_timed(addr: SocketAddr, sizes: Sizes) -> Vec<(Instant, Option<Instant>)> {
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                client.block_on(async {
                    let period = Duration::from_secs_f64(1.0 / f64::from(sizes.rate));
                    let mut due = tokio::time::Instant::now() + Duration::from_millis(50);
                    let end = due + sizes.http;
                    let mut pending = Vec::new();
                    while due < end {
                        tokio::time::sleep_until(due).await;
                        let at = due.into_std();
                        pending.push(tokio::spawn(async move {
                            let answer = tokio::time::timeout(Duration::from_secs(10), get(addr));
                            (at, answer.await.ok().flatten().map(|()| Instant::now()))
                        }));
                        due += period;
                    }
                    let mut all = Vec::new();
                    for p in pending {
                        all.push(p.await.expect("client request"));
                    }
                    all
                })
            })
            .join()
            .expect("client thread")
    })
}

/// `GET /` on a new connection to `addr`; `None` if it failed.
async fn get(addr: SocketAddr) -> Option<()> {
    use http_body_util::BodyExt;
    let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .ok()?;
    tokio::spawn(conn);
    let req = hyper::Request::get("/")
        .header(hyper::header::HOST, "bench")
        .body(http_body_util::Empty::<hyper::body::Bytes>::new())
        .ok()?;
    let resp = sender.send_request(req).await.ok()?;
    resp.into_body().collect().await.ok()?;
    Some(())
}

/// Blocks a worker until the tool reports it, twice: the first report of a process loads the
/// debug info that symbols need (once), the second shows the steady state.
fn stuck(s: &Setup) -> serde_json::Value {
    let cold = stuck_once(s);
    let warm = stuck_once(s);
    json!({ "detect_cold_ms": cold, "detect_ms": warm })
}

/// Blocks a worker, waits (bounded) for the tool's first `in_progress` report, releases it:
/// milliseconds from blocking to the report.
fn stuck_once(s: &Setup) -> Option<f64> {
    block_worker(s, None, || ()).0
}

/// Blocks a worker until the tool reports it (bounded: 30 s) or, with `hold`, for that long
/// without looking for a report; runs `then` while the worker is still blocked, and releases
/// it. Returns the milliseconds from blocking to the report, and what `then` returned.
fn block_worker<T>(
    s: &Setup,
    hold: Option<Duration>,
    then: impl FnOnce() -> T,
) -> (Option<f64>, T) {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (blocked_tx, blocked_rx) = std::sync::mpsc::channel::<Instant>();
    let _guard = s.rt.enter();
    let task = s.spawner.spawn(async move {
        let _ = blocked_tx.send(Instant::now());
        let _ = rx.recv();
    });
    let id: u64 = task
        .id()
        .to_string()
        .parse()
        .expect("a task id is a number");
    let blocked_at = blocked_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the stuck task ran");
    if let Some(hold) = hold {
        std::thread::sleep(hold.saturating_sub(blocked_at.elapsed()));
        let t = then();
        let _ = tx.send(());
        let _ = s.rt.block_on(task);
        return (None, t);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let reported = loop {
        let first = s
            .first_report
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .copied();
        if let Some(t) = first {
            break Some(t);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    let t = then();
    let _ = tx.send(());
    let _ = s.rt.block_on(task);
    (
        reported.map(|t| t.saturating_duration_since(blocked_at).as_secs_f64() * 1e3),
        t,
    )
}

/// Per thread of this process (name, tid): nanoseconds on CPU (`schedstat`'s first field) and
/// context switches (voluntary + involuntary, from `status`).
fn threads() -> BTreeMap<(String, String), (u64, u64)> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for e in dir.flatten() {
        let p = e.path();
        let tid = e.file_name().to_string_lossy().into_owned();
        let name = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        let cpu = std::fs::read_to_string(p.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        let switches = std::fs::read_to_string(p.join("status"))
            .unwrap_or_default()
            .lines()
            .filter(|l| {
                l.starts_with("voluntary_ctxt_switches:")
                    || l.starts_with("nonvoluntary_ctxt_switches:")
            })
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        out.insert((name.trim().to_owned(), tid), (cpu, switches));
    }
    out
}

/// What the threads of [`threads`] whose names `count` took between two reads of it, `took`
/// seconds apart. A thread that ends in between takes its share with it; one that starts counts
/// from zero.
struct Spent {
    cpu_ns: u64,
    switches: u64,
    /// Threads counted.
    threads: usize,
    /// CPU milliseconds per second, by thread name (threads of one name summed).
    by_thread: BTreeMap<String, f64>,
}

impl Spent {
    fn between(
        before: &BTreeMap<(String, String), (u64, u64)>,
        after: &BTreeMap<(String, String), (u64, u64)>,
        took: f64,
        count: impl Fn(&str) -> bool,
    ) -> Spent {
        let mut spent = Spent {
            cpu_ns: 0,
            switches: 0,
            threads: 0,
            by_thread: BTreeMap::new(),
        };
        for (key, (c1, s1)) in after.iter().filter(|(k, _)| count(&k.0)) {
            let (c0, s0) = before.get(key).copied().unwrap_or((0, 0));
            let dc = c1.saturating_sub(c0);
            spent.cpu_ns += dc;
            spent.switches += s1.saturating_sub(s0);
            spent.threads += 1;
            *spent.by_thread.entry(key.0.clone()).or_default() += dc as f64 / 1e6 / took;
        }
        spent
    }
}

/// A service with nothing to do: its only task sleeps (a second at a time). After
/// [`IDLE_WARMUP`], every thread's CPU time and context switches over `window`, but the bench's
/// own helpers' ([`OWN_THREAD_PREFIX`]). A thread that ends inside the window takes its share
/// with it; one that starts counts from zero.
fn idle(s: &Setup, window: Duration) -> serde_json::Value {
    let task = {
        let _guard = s.rt.enter();
        s.spawner.spawn(async {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };
    std::thread::sleep(IDLE_WARMUP);
    let before = threads();
    let start = Instant::now();
    std::thread::sleep(window);
    let after = threads();
    let took = start.elapsed().as_secs_f64();
    task.abort();
    let spent = Spent::between(&before, &after, took, |name| {
        !name.starts_with(OWN_THREAD_PREFIX)
    });
    let (cpu_ns, switches, counted, by_thread) =
        (spent.cpu_ns, spent.switches, spent.threads, spent.by_thread);
    // The settings the row claims, read back from the detector, and the endpoint answering
    // (after the window: the scrape is not measured).
    let settings = s.detector.as_ref().and_then(|d| d.config()).map(|c| {
        let served = c
            .prometheus_addr
            .map(|a| get_metrics(a).is_ok_and(|m| m.contains("pinwatch_workers")));
        json!({
            "heartbeat": c.heartbeat.is_some(),
            "control_socket": s.detector.as_ref().and_then(|d| d.control_socket()).is_some_and(|p| p.exists()),
            "prometheus_served": served,
        })
    });
    json!({
        "idle_s": took,
        "cpu_ms_per_s": cpu_ns as f64 / 1e6 / took,
        "wakeups_per_s": switches as f64 / took,
        "threads": counted,
        "cpu_ms_per_s_by_thread": by_thread,
        "pinwatch": settings,
    })
}

/// `VmRSS` and `RssAnon` from `/proc/self/status`, KiB.
fn memory_kib() -> (i64, i64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let get = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0)
    };
    (get("VmRSS:"), get("RssAnon:"))
}

/// The first pin of this process (nothing blocked, so nothing symbolized, before): from a
/// worker blocking to the tool's first report, and the memory added from before the pin to
/// right after that report. A tool that does not report while stuck (`reports` false): the
/// worker is held [`UNREPORTED_HOLD`], released, and the memory read [`UNREPORTED_HOLD`] later.
fn first_pin(s: &Setup, reports: bool) -> serde_json::Value {
    // Both workers up and the tool's threads started before the "before".
    {
        let _guard = s.rt.enter();
        let warm: Vec<_> = (0..4).map(|_| s.spawner.spawn(async {})).collect();
        for t in warm {
            s.rt.block_on(t).expect("warm-up task");
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    let (rss0, anon0) = memory_kib();
    let (detect_ms, (rss1, anon1)) = if reports {
        block_worker(s, None, memory_kib)
    } else {
        let _ = block_worker(s, Some(UNREPORTED_HOLD), || ());
        std::thread::sleep(UNREPORTED_HOLD);
        (None, memory_kib())
    };
    json!({
        "detect_ms": detect_ms,
        "rss_before_kib": rss0,
        "anon_before_kib": anon0,
        "rss_added_kib": rss1 - rss0,
        "anon_added_kib": anon1 - anon0,
    })
}
