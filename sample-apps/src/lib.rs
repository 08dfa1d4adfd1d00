//! The pinning cases, each with a bad and a fixed variant, run on a pinwatch runtime whose events
//! are collected. The binaries in `src/bin` and `tour` are thin wrappers around [`run`].

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, LazyLock, Mutex};
use std::time::{Duration, Instant};

use pinwatch::{PinnedEvent, Reason, State};

pub mod dns;
pub mod http;
pub mod procstat;
pub mod services;
pub mod table;
pub mod traced;

/// Which variant of a case to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Variant {
    /// The pinning code.
    Bad,
    /// The same work without pinning.
    Fixed,
    /// `lock_sleep` only: the bad code with `pinwatch::sync::Mutex`, reported as `lock_held`.
    PinwatchMutex,
    /// `stalled_runtime` only: the same blocking call in a task that was not woken by a timer
    /// (it leaves the runtime's timers running).
    NotTimerWoken,
}

/// Common command-line options of the sample binaries.
#[derive(Clone, Debug, clap::Args)]
pub struct Opts {
    /// Which variant to run; both `bad` and `fixed` when not given.
    #[arg(long, value_enum)]
    pub variant: Option<Variant>,
    /// Worker threads (default: the case's own, as in the article).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Number of tasks (default: the case's own).
    #[arg(long)]
    pub tasks: Option<usize>,
    /// The tour's short durations (a 300 ms initializer or computation, 2 s of HTTP load)
    /// instead of the article's.
    #[arg(long)]
    pub quick: bool,
}

/// What one run of a case measured.
#[derive(Debug)]
pub struct Outcome {
    /// The case's wall time.
    pub elapsed: Duration,
    /// A case-specific measurement (e.g. worst lateness of a bystander), if any.
    pub metric: Option<String>,
    /// Completed pinned events (one per pinned poll).
    pub events: Vec<PinnedEvent>,
}

impl Outcome {
    /// Whether the events of a bad variant are what `case` expects: at least three quarters of
    /// `min` (and at least one) with `expected`, every one with a reason in `allowed`, and every
    /// one that has a stack sample with a top frame in the sample apps' own code (and at least
    /// one such). `Err` says what is wrong.
    ///
    /// The slack is for a machine whose CPUs are all busy: a watchdog that gets no CPU for most
    /// of a pin's duration first sees the poll late, and a poll's age counts only from then (a
    /// duration is never longer than the poll really ran), so a 100 ms pin can go unseen; and a
    /// thread that waits for a CPU runs its sampling signal's handler late, so a short pin can
    /// end before its stack is taken (it says why: `no_stack`). Neither is a wrong answer.
    pub fn check(&self, expected: Reason, allowed: &[Reason], min: usize) -> Result<(), String> {
        let hits = self
            .events
            .iter()
            .filter(|e| e.reason == Some(expected))
            .count();
        let needed = (min - min / 4).max(1);
        if hits < needed {
            return Err(format!(
                "expected at least {needed} `{expected}` events (of {min} pins), got {hits} ({})",
                self.reasons_cell()
            ));
        }
        if let Some(e) = self
            .events
            .iter()
            .find(|e| !e.reason.is_some_and(|r| allowed.contains(&r)))
        {
            return Err(format!(
                "an event with reason {:?}, expected one of {allowed:?}: {}",
                e.reason,
                e.headline()
            ));
        }
        // The service's own line: the top frame, or the line that called the library the
        // time went to.
        let in_samples = |e: &PinnedEvent| {
            e.app_frame
                .as_ref()
                .and_then(|f| f.file.as_deref())
                .is_some_and(|f| f.contains("sample-apps/"))
        };
        // A pin whose stack was not sampled says why (`no_stack`) and has no frame to judge.
        let unsampled = |e: &PinnedEvent| e.top_frame.is_none() && e.no_stack.is_some();
        if let Some(e) = self.events.iter().find(|e| !unsampled(e) && !in_samples(e)) {
            return Err(format!(
                "an event whose own frame is not in the sample apps: {:?} ({})",
                e.app_frame,
                e.headline()
            ));
        }
        if !self.events.iter().any(in_samples) {
            return Err("no event has a stack sample with a frame in the sample apps".into());
        }
        Ok(())
    }

    /// The pinned polls that stalled the whole runtime (`runtime_stalled`), and the heartbeat's
    /// worst lateness among them: `-`, or `1 (1.0 s)`.
    pub fn stalled_cell(&self) -> String {
        let stalled: Vec<&PinnedEvent> = self.events.iter().filter(|e| e.runtime_stalled).collect();
        if stalled.is_empty() {
            return "-".into();
        }
        let handed: Vec<Duration> = stalled
            .iter()
            .filter_map(|e| e.drivers.as_ref()?.taken_over_after)
            .collect();
        if let Some(after) = handed.iter().max() {
            return format!(
                "{} (handed over after {:.0} ms)",
                stalled.len(),
                after.as_secs_f64() * 1e3
            );
        }
        let late = stalled
            .iter()
            .filter_map(|e| e.drivers.as_ref().map(|d| d.undriven).or(e.heartbeat_late))
            .max()
            .unwrap_or_default();
        format!("{} ({:.1} s)", stalled.len(), late.as_secs_f64())
    }

    /// Reasons and how many completed events had each.
    pub fn reasons(&self) -> Vec<(Reason, usize)> {
        let mut v: Vec<(Reason, usize)> = Vec::new();
        for e in &self.events {
            if let Some(r) = e.reason {
                match v.iter_mut().find(|(x, _)| *x == r) {
                    Some((_, n)) => *n += 1,
                    None => v.push((r, 1)),
                }
            }
        }
        v.sort_by_key(|r| std::cmp::Reverse(r.1));
        v
    }

    /// The reasons as a table cell: `sleep×3 lock_wait×1`, or `-` when there are none.
    pub fn reasons_cell(&self) -> String {
        let cells: Vec<String> = self
            .reasons()
            .iter()
            .map(|(r, n)| format!("{r}×{n}"))
            .collect();
        if cells.is_empty() {
            "-".into()
        } else {
            cells.join(" ")
        }
    }

    /// The top frame of the first event with `reason`.
    pub fn top_frame(&self, reason: Reason) -> Option<String> {
        self.events
            .iter()
            .find(|e| e.reason == Some(reason))
            .and_then(|e| e.top_frame.as_ref())
            .map(|f| {
                // A dependency's file from its package on, as `print` shows it.
                let file = pinwatch::event::short_path(f.file.as_deref().unwrap_or("?"));
                let file = file.rsplit_once("sample-apps/").map_or(file, |(_, f)| f);
                format!(
                    "{} ({}:{})",
                    f.function.as_deref().unwrap_or("?"),
                    file,
                    f.line.unwrap_or(0)
                )
            })
    }
}

type BoxFuture = Pin<Box<dyn Future<Output = Option<String>> + Send>>;

/// A pinning case.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// Its name (and binary name).
    pub name: &'static str,
    /// What it shows.
    pub about: &'static str,
    /// The reason pinwatch must report for the bad variant.
    pub expected: Reason,
    /// The reasons the bad variant's events may have (the expected one among them).
    pub allowed: &'static [Reason],
    /// How many of the bad variant's events must have the expected reason, at the tour's size.
    pub min_expected: usize,
    /// Workers, as in the article.
    pub workers: usize,
    /// Tasks at full size / in the tour.
    pub tasks: (usize, usize),
    body: fn(Variant, usize, bool) -> BoxFuture,
}

/// Every pinning case, in tour order.
pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "lock_sleep",
            about: "N tasks, each with its own std Mutex, sleep 100 ms inside the lock",
            expected: Reason::Sleep,
            allowed: &[Reason::Sleep],
            min_expected: 8,
            workers: 2,
            tasks: (100, 8),
            body: |v, n, _| Box::pin(lock_sleep(v, n)),
        },
        Case {
            name: "lazy_init",
            about: "a LazyLock initializer sleeps while 100 bystander tasks sleep 10 ms, 1 worker",
            expected: Reason::OnceInit,
            allowed: &[Reason::OnceInit],
            min_expected: 1,
            workers: 1,
            tasks: (100, 100),
            body: |v, n, full| Box::pin(lazy_init(v, n, full)),
        },
        Case {
            name: "ffi_block",
            about: "a blocking C call (libc::usleep through FFI) inside a task",
            expected: Reason::Sleep,
            allowed: &[Reason::Sleep],
            min_expected: 2,
            workers: 2,
            tasks: (4, 2),
            body: |v, n, _| Box::pin(ffi_block(v, n)),
        },
        Case {
            name: "blocking_dns",
            about: "tasks resolve a name with std::net::ToSocketAddrs (a blocking getaddrinfo); \
                    the nameserver, on loopback, answers after 150 ms",
            expected: Reason::Dns,
            allowed: &[Reason::Dns],
            min_expected: 2,
            workers: 2,
            tasks: (8, 4),
            body: |v, n, _| Box::pin(dns::blocking_dns(v, n)),
        },
        Case {
            name: "cpu_hog",
            about: "a long computation on 1 worker while a 10 ms ticker runs",
            expected: Reason::Cpu,
            allowed: &[Reason::Cpu],
            min_expected: 1,
            workers: 1,
            tasks: (1, 1),
            body: |v, _, full| Box::pin(cpu_hog(v, full)),
        },
        Case {
            name: "blocking_io",
            about: "std::net and std::fs blocking reads (a slow server, a slow pipe) inside tasks",
            expected: Reason::Io,
            allowed: &[Reason::Io],
            min_expected: 4,
            workers: 2,
            tasks: (8, 4),
            body: |v, n, _| Box::pin(blocking_io(v, n)),
        },
        Case {
            name: "lock_contention",
            about: "tasks contend one std Mutex with a 50 ms critical section",
            expected: Reason::LockWait,
            allowed: &[Reason::LockWait, Reason::Sleep],
            min_expected: 1,
            workers: 2,
            tasks: (8, 4),
            body: |v, n, _| Box::pin(lock_contention(v, n)),
        },
        Case {
            name: "http_server",
            about:
                "an axum handler waits 100 ms for a fake database, under 100 connections of load",
            expected: Reason::Sleep,
            allowed: &[Reason::Sleep],
            min_expected: 2,
            workers: 2,
            tasks: (100, 100),
            body: |v, n, full| Box::pin(http::run(v, n, full)),
        },
        Case {
            name: "traced_service",
            about: "an axum service with TraceLayer request spans and OpenTelemetry traces; \
                    GET /report blocks 80 ms, GET /health does not",
            expected: Reason::Sleep,
            allowed: &[Reason::Sleep],
            min_expected: 3,
            workers: 2,
            tasks: (20, 4),
            body: |v, n, full| Box::pin(traced::run(v, n, full)),
        },
        Case {
            name: "blocking_wait",
            about: "std mpsc recv, Condvar wait and futures::executor::block_on inside tasks",
            expected: Reason::Other,
            allowed: &[Reason::Other],
            min_expected: 3,
            workers: 2,
            tasks: (6, 3),
            body: |v, n, _| Box::pin(blocking_wait(v, n)),
        },
        Case {
            name: "stalled_runtime",
            about: "a task woken by a timer blocks on a std Mutex (1 s) while 4 tasks tick on \
                    100 ms timers and a TCP echo answers a client every 20 ms, 2 workers",
            expected: Reason::LockWait,
            allowed: &[Reason::LockWait],
            min_expected: 1,
            workers: 2,
            tasks: (4, 4),
            body: |v, n, full| Box::pin(stalled_runtime(v, n, full)),
        },
        Case {
            name: "library_cpu",
            about: "request handlers compress a 64 KiB upload with flate2 for 150 ms: the time \
                    goes inside a library, the line to change is the handler's",
            expected: Reason::Cpu,
            allowed: &[Reason::Cpu],
            min_expected: 4,
            workers: 2,
            tasks: (4, 4),
            body: |v, n, full| Box::pin(services::library_cpu(v, n, full)),
        },
        Case {
            name: "blocked_log",
            about: "tasks log through a tracing fmt writer on a pipe left unread for 300 ms \
                    (stdout piped into a reader that stopped)",
            expected: Reason::Io,
            allowed: &[Reason::Io],
            min_expected: 2,
            workers: 2,
            tasks: (4, 4),
            body: |v, n, full| Box::pin(services::blocked_log(v, n, full)),
        },
        Case {
            name: "block_on_in_drop",
            about: "a connection's Drop waits 100 ms for its peer with \
                    futures::executor::block_on",
            expected: Reason::Other,
            allowed: &[Reason::Other],
            min_expected: 4,
            workers: 2,
            tasks: (4, 4),
            body: |v, n, _| Box::pin(services::block_on_in_drop(v, n)),
        },
        Case {
            name: "large_drop",
            about: "tasks evict a cache of a million entries (built off the workers) by \
                    dropping it on the worker",
            expected: Reason::Cpu,
            allowed: &[Reason::Cpu],
            min_expected: 2,
            workers: 2,
            tasks: (2, 2),
            body: |v, n, full| Box::pin(services::large_drop(v, n, full)),
        },
        Case {
            name: "spin_read",
            about: "tasks loop 600 ms on a buffered read that returns Ok(0) at once (the peer \
                    closed; no system call)",
            expected: Reason::Cpu,
            allowed: &[Reason::Cpu],
            min_expected: 2,
            workers: 2,
            tasks: (2, 2),
            body: |v, n, full| Box::pin(services::spin_read(v, n, full)),
        },
    ]
}

/// One task blocks 1 s (3 s at full size) on a `std::sync::Mutex` that a plain thread holds,
/// while `tickers` tasks sleep 100 ms in a loop and a TCP echo server on the same runtime
/// answers a client thread every 20 ms. Measures how long the tickers were frozen (their
/// longest gap past 100 ms) and the echo's worst round trip.
///
/// `Bad`: the task is woken by a timer first. The worker that was parked on the runtime's
/// driver (timers and I/O) takes the task it woke and runs it; it blocks, the driver is not
/// polled again, and the other worker sleeps on its condvar: nothing wakes it. `NotTimerWoken`:
/// the same blocking in a task spawned from a task. `Fixed`: the blocking call in
/// `spawn_blocking`.
async fn stalled_runtime(variant: Variant, tickers: usize, full: bool) -> Option<String> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let block = if full {
        Duration::from_secs(3)
    } else {
        Duration::from_secs(1)
    };
    let stop = Arc::new(AtomicBool::new(false));
    let ticks: Vec<_> = (0..tickers)
        .map(|_| {
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                let mut last = Instant::now();
                let mut worst = Duration::ZERO;
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let now = Instant::now();
                    worst = worst.max(now - last);
                    last = now;
                }
                worst
            })
        })
        .collect();
    let echo = echo_round_trips(Arc::clone(&stop)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let lock = Arc::new(Mutex::new(()));
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    {
        let lock = Arc::clone(&lock);
        std::thread::spawn(move || {
            let _held = lock.lock().unwrap();
            let _ = held_tx.send(());
            std::thread::sleep(block);
        });
    }
    held_rx.await.expect("the holder thread");
    let blocker = match variant {
        Variant::Bad | Variant::PinwatchMutex => tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1)).await; // woken by the timer…
            drop(lock.lock().unwrap()); // …then blocks its worker, which held the driver
        }),
        Variant::NotTimerWoken => tokio::spawn(async move {
            drop(lock.lock().unwrap()); // blocks its worker; the driver is elsewhere
        }),
        Variant::Fixed => tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            tokio::task::spawn_blocking(move || drop(lock.lock().unwrap()))
                .await
                .expect("blocking task");
        }),
    };
    blocker.await.expect("blocker");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let mut frozen = Duration::ZERO;
    for t in ticks {
        frozen = frozen.max(t.await.expect("ticker"));
    }
    let frozen = frozen.saturating_sub(Duration::from_millis(100));
    let rtt = echo.join().expect("echo client");
    Some(format!(
        "tickers frozen {} ms, echo worst {} ms",
        frozen.as_millis(),
        rtt.as_millis()
    ))
}

/// A TCP echo server on this runtime and a client on a plain thread that sends a byte every
/// 20 ms until `stop`; the client's thread returns the worst round trip.
async fn echo_round_trips(
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Duration> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move {
        let Ok((mut conn, _)) = listener.accept().await else {
            return;
        };
        let mut byte = [0u8; 1];
        while conn.read_exact(&mut byte).await.is_ok() {
            if conn.write_all(&byte).await.is_err() {
                return;
            }
        }
    });
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        let mut conn = std::net::TcpStream::connect(addr).expect("connect to the echo");
        conn.set_nodelay(true).expect("nodelay");
        let mut worst = Duration::ZERO;
        let mut byte = [7u8; 1];
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let sent = Instant::now();
            if conn
                .write_all(&byte)
                .and_then(|_| conn.read_exact(&mut byte))
                .is_err()
            {
                break;
            }
            worst = worst.max(sent.elapsed());
            std::thread::sleep(Duration::from_millis(20));
        }
        worst
    })
}

/// What `case` needs done before any thread starts (so before the runtime): `blocking_dns`
/// enters its sandbox with the loopback nameserver ([`dns::sandbox`]). `Err` says why the case
/// cannot run here; the others are unaffected.
pub fn prepare(case: &Case) -> Result<(), String> {
    match case.name {
        "blocking_dns" => dns::sandbox(),
        _ => Ok(()),
    }
}

/// `traced_service` only: its subscriber (`tracing-opentelemetry` with a tracer that exports
/// nowhere, and `pinwatch::tracing_layer()`) as the default of every thread of the runtime
/// being built, so that the other cases keep their own; the provider lives as long as the run.
fn traced_subscriber(
    case: &Case,
    tokio: &mut tokio::runtime::Builder,
) -> Option<opentelemetry_sdk::trace::SdkTracerProvider> {
    if case.name != "traced_service" {
        return None;
    }
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let dispatch = traced::dispatch(&provider, false);
    tokio.on_thread_start(move || {
        // The thread keeps it until it ends (a guard dropped would restore the global one).
        std::mem::forget(tracing::dispatcher::set_default(&dispatch));
    });
    Some(provider)
}

/// Finds a case by name.
pub fn case(name: &str) -> Option<Case> {
    cases().into_iter().find(|c| c.name == name)
}

/// Runs `case` on a fresh pinwatch runtime (configured from the environment, so that
/// `PINWATCH_RECORD` works) and collects its completed events.
pub fn run(case: &Case, variant: Variant, workers: usize, tasks: usize, full: bool) -> Outcome {
    let events: Arc<Mutex<Vec<PinnedEvent>>> = Arc::default();
    let sink = Arc::clone(&events);
    let mut tokio = tokio::runtime::Builder::new_multi_thread();
    tokio.worker_threads(workers).enable_all();
    let _provider = traced_subscriber(case, &mut tokio);
    let builder = match pinwatch::Builder::from_env() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("pinwatch: {e}");
            std::process::exit(2);
        }
    };
    let (rt, detector) = builder
        .tracing(false)
        .sink(move |e: &PinnedEvent| {
            if e.state == State::Completed {
                sink.lock().unwrap().push(e.clone());
            }
        })
        .build(&mut tokio)
        .unwrap_or_else(|e| {
            eprintln!("pinwatch: {e}");
            std::process::exit(2);
        });
    let start = Instant::now();
    let body = (case.body)(variant, tasks, full);
    // The body runs as a task: the `block_on` future itself is not watched.
    let metric = rt.block_on(rt.spawn(body)).expect("case panicked");
    let elapsed = start.elapsed();
    drop(rt);
    detector.shutdown();
    // What this case freed, merged here, with no runtime running: glibc's malloc keeps the
    // small blocks freed into an arena unmerged, and a thread that exits leaves its arena to
    // the next thread started, which merges them on its first large allocation. After
    // `large_drop`, a fresh runtime's worker that took over its arena was pinned 390 ms in its
    // first `tokio::spawn`, in the next case (docs/reasons.md, "time inside glibc's malloc").
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes an integer and only works on the allocator's own state.
    unsafe {
        libc::malloc_trim(0);
    }
    let events = std::mem::take(&mut *events.lock().unwrap());
    Outcome {
        elapsed,
        metric,
        events,
    }
}

async fn join_all<T: Send + 'static>(handles: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.expect("task panicked"));
    }
    out
}

async fn lock_sleep(variant: Variant, n: usize) -> Option<String> {
    let handles = (0..n)
        .map(|_| match variant {
            Variant::Bad | Variant::NotTimerWoken => tokio::spawn(async {
                let lock = Mutex::new(0u32);
                let mut g = lock.lock().unwrap();
                std::thread::sleep(Duration::from_millis(100)); // pinned: sleeps holding a std lock
                *g += 1;
            }),
            Variant::PinwatchMutex => tokio::spawn(async {
                let lock = pinwatch::sync::Mutex::new(0u32);
                let mut g = lock.lock().unwrap();
                std::thread::sleep(Duration::from_millis(100)); // pinned, lock_held
                *g += 1;
            }),
            Variant::Fixed => tokio::spawn(async {
                let lock = tokio::sync::Mutex::new(0u32);
                let mut g = lock.lock().await;
                tokio::time::sleep(Duration::from_millis(100)).await;
                *g += 1;
            }),
        })
        .collect();
    join_all(handles).await;
    None
}

async fn lazy_init(variant: Variant, bystanders: usize, full: bool) -> Option<String> {
    let init_time = if full {
        Duration::from_secs(1)
    } else {
        Duration::from_millis(300)
    };
    let start = Instant::now();
    let init = match variant {
        Variant::Fixed => {
            let cell = Arc::new(tokio::sync::OnceCell::<u64>::new());
            tokio::spawn(async move {
                *cell
                    .get_or_init(|| async move {
                        tokio::time::sleep(init_time).await;
                        42
                    })
                    .await
            })
        }
        _ => {
            let lazy: Arc<LazyLock<u64, Box<dyn FnOnce() -> u64 + Send>>> =
                Arc::new(LazyLock::new(Box::new(move || {
                    std::thread::sleep(init_time); // pinned: a blocking initializer
                    42
                })));
            tokio::spawn(async move { **lazy })
        }
    };
    let handles = (0..bystanders)
        .map(|_| {
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                start.elapsed()
            })
        })
        .collect();
    let worst = join_all(handles)
        .await
        .into_iter()
        .max()
        .unwrap_or_default();
    init.await.expect("init");
    Some(format!("bystander worst {}", table::ms(worst)))
}

async fn ffi_block(variant: Variant, n: usize) -> Option<String> {
    let handles = (0..n)
        .map(|_| match variant {
            Variant::Fixed => tokio::spawn(async {
                tokio::task::spawn_blocking(|| c_sleep(Duration::from_millis(200)))
                    .await
                    .unwrap();
            }),
            _ => tokio::spawn(async {
                c_sleep(Duration::from_millis(200)); // pinned: a blocking native call
            }),
        })
        .collect();
    join_all(handles).await;
    None
}

/// A blocking C call: `nanosleep` through FFI, resumed after a signal with the time left, as
/// careful C code does (a bare `usleep` would return early when pinwatch samples the thread).
fn c_sleep(d: Duration) {
    let mut req = libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    };
    loop {
        let mut rem = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: both pointers are to live, writable timespecs.
        let rc = unsafe { libc::nanosleep(&req, &mut rem) };
        if rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
        req = rem;
    }
}

fn compute(d: Duration) -> u64 {
    let start = Instant::now();
    let mut x = 1u64;
    while start.elapsed() < d {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        // pinned: CPU
    }
    x
}

async fn cpu_hog(variant: Variant, full: bool) -> Option<String> {
    let work = if full {
        Duration::from_secs(2)
    } else {
        Duration::from_millis(300)
    };
    let ticker = tokio::spawn(async move {
        let mut worst = Duration::ZERO;
        let end = Instant::now() + work + Duration::from_millis(100);
        while Instant::now() < end {
            let t = Instant::now();
            tokio::time::sleep(Duration::from_millis(10)).await;
            worst = worst.max(t.elapsed().saturating_sub(Duration::from_millis(10)));
        }
        worst
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let job = match variant {
        Variant::Fixed => tokio::spawn(async move {
            tokio::task::spawn_blocking(move || compute(work))
                .await
                .unwrap()
        }),
        _ => tokio::spawn(async move { compute(work) }),
    };
    job.await.unwrap();
    Some(format!(
        "ticker worst lateness {}",
        table::ms(ticker.await.unwrap())
    ))
}

/// A server on 127.0.0.1 that answers each connection after 100 ms. Stops after `n` answers.
fn slow_server(n: usize) -> std::net::SocketAddr {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for _ in 0..n {
            let Ok((mut conn, _)) = listener.accept() else {
                return;
            };
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                let _ = conn.write_all(b"ok\n");
            });
        }
    });
    addr
}

/// A named pipe whose writer, once a reader has opened it, waits 100 ms and writes a line.
fn slow_fifo() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let path = std::env::temp_dir().join(format!(
        "pinwatch-sample-{}-{}.fifo",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: `c` is a valid NUL-terminated path.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        panic!(
            "mkfifo {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }
    let p = path.clone();
    std::thread::spawn(move || {
        use std::io::Write;
        // Opening for writing waits for the reader.
        if let Ok(mut w) = std::fs::OpenOptions::new().write(true).open(&p) {
            std::thread::sleep(Duration::from_millis(100));
            let _ = w.write_all(b"ok\n");
        }
        let _ = std::fs::remove_file(&p);
    });
    path
}

async fn blocking_io(variant: Variant, n: usize) -> Option<String> {
    let addr = slow_server(n);
    let handles = (0..n)
        .map(|i| match (variant, i % 2) {
            (Variant::Fixed, 0) => tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
                let mut buf = [0u8; 3];
                s.read_exact(&mut buf).await.unwrap();
            }),
            (Variant::Fixed, _) => tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                let mut f = tokio::fs::File::open(slow_fifo()).await.unwrap();
                let mut buf = [0u8; 3];
                f.read_exact(&mut buf).await.unwrap();
            }),
            (_, 0) => tokio::spawn(async move {
                use std::io::Read;
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                let mut buf = [0u8; 3];
                s.read_exact(&mut buf).unwrap(); // pinned: blocking socket read
            }),
            (_, _) => tokio::spawn(async move {
                use std::io::Read;
                let mut f = std::fs::File::open(slow_fifo()).unwrap(); // pinned: blocking open
                let mut buf = [0u8; 3];
                f.read_exact(&mut buf).unwrap(); // pinned: blocking file read
            }),
        })
        .collect();
    join_all(handles).await;
    None
}

async fn lock_contention(variant: Variant, n: usize) -> Option<String> {
    let std_lock = Arc::new(Mutex::new(0u64));
    let tokio_lock = Arc::new(tokio::sync::Mutex::new(0u64));
    let handles = (0..n)
        .map(|_| {
            let (s, t) = (Arc::clone(&std_lock), Arc::clone(&tokio_lock));
            match variant {
                Variant::Fixed => tokio::spawn(async move {
                    let mut g = t.lock().await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    *g += 1;
                }),
                _ => tokio::spawn(async move {
                    let mut g = s.lock().unwrap(); // pinned: waits for a contended std lock
                    std::thread::sleep(Duration::from_millis(50));
                    *g += 1;
                }),
            }
        })
        .collect();
    join_all(handles).await;
    None
}

/// Runs `f` on a new thread after 100 ms: the event a blocking wait waits for.
fn after_100ms(f: impl FnOnce() + Send + 'static) {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        f();
    });
}

async fn blocking_wait(variant: Variant, n: usize) -> Option<String> {
    let handles = (0..n)
        .map(|i| match (variant, i % 3) {
            (Variant::Fixed, 0) => tokio::spawn(async {
                let (tx, mut rx) = tokio::sync::mpsc::channel::<u32>(1);
                after_100ms(move || {
                    let _ = tx.blocking_send(1);
                });
                rx.recv().await;
            }),
            (Variant::Fixed, 1) => tokio::spawn(async {
                let notify = Arc::new(tokio::sync::Notify::new());
                let n2 = Arc::clone(&notify);
                after_100ms(move || n2.notify_one());
                notify.notified().await;
            }),
            (Variant::Fixed, _) => tokio::spawn(async {
                let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
                after_100ms(move || {
                    let _ = tx.send(1);
                });
                let _ = rx.await;
            }),
            (_, 0) => tokio::spawn(async {
                let (tx, rx) = std::sync::mpsc::channel::<u32>();
                after_100ms(move || {
                    let _ = tx.send(1);
                });
                let _ = rx.recv(); // pinned: blocking channel receive
            }),
            (_, 1) => tokio::spawn(async {
                let pair = Arc::new((Mutex::new(false), Condvar::new()));
                let p2 = Arc::clone(&pair);
                after_100ms(move || {
                    *p2.0.lock().unwrap() = true;
                    p2.1.notify_one();
                });
                let (m, cv) = &*pair;
                let mut ready = m.lock().unwrap();
                while !*ready {
                    ready = cv.wait(ready).unwrap(); // pinned: Condvar wait
                }
            }),
            (_, _) => tokio::spawn(async {
                let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
                after_100ms(move || {
                    let _ = tx.send(1);
                });
                let _ = futures::executor::block_on(rx); // pinned: a nested executor
            }),
        })
        .collect();
    join_all(handles).await;
    None
}

/// What the article measured for a case, printed beside ours.
fn article(name: &str) -> &'static str {
    match name {
        "lock_sleep" => {
            "article: 100 tasks on 2 carriers, synchronized 5,022 ms vs ReentrantLock 135 ms; \
             8 tasks on 4 carriers 2,012 ms vs 1,001 ms. Expected here: N x 100 ms / W vs 100 ms"
        }
        "lazy_init" => "article: 1 carrier, 100 bystanders of 10 ms finish at 960 ms vs 11 ms",
        "ffi_block" => "article: a native call (usleep via FFM) still pins on Java 25",
        "blocking_dns" => {
            "a blocking name lookup pins a worker for as long as the nameserver takes; \
             tokio::net::lookup_host resolves in spawn_blocking"
        }
        "cpu_hog" => "article: a 2 s computation on one carrier blocks every other task",
        "blocking_io" => "article: blocking I/O pins a carrier as long as it waits",
        "lock_contention" => "article: threads waiting for a monitor pin their carriers",
        "blocking_wait" => "article: a blocking wait inside a virtual thread pins its carrier",
        "stalled_runtime" => {
            "measured (tokio 1.54, 2 workers): one pinned worker froze all 4 tickers though the \
             other worker was free, in about half the runs (those where the other worker slept \
             on its condvar as the timer fired); in Java a pinned carrier costs one carrier"
        }
        "traced_service" => {
            "every request of an axum service is spawned at the same line of axum; the request \
             span (method, uri) and its OpenTelemetry trace id say which request pinned"
        }
        "library_cpu" => {
            "seen in an axum service hashing passwords with argon2: every pin's top frame in \
             argon2, the handler's line in none until pinwatch named the caller"
        }
        "blocked_log" => {
            "seen in a service logging to stdout piped into a reader that stopped: both \
             workers blocked in write(2) and on stdout's lock"
        }
        "block_on_in_drop" => "seen in a connection pool whose Drop blocked on its close",
        "large_drop" => "seen in a service evicting a two-million-entry map",
        "spin_read" => {
            "oxidecomputer/omicron#9619: a TLS read loop spinning on Ok(0) wedged a sled agent"
        }
        "http_server" => {
            "article (wrk, 100 ms DB wait): pool of 200 threads 450 req/s, 220 ms; virtual \
             threads 1,200 req/s, 82 ms"
        }
        _ => "",
    }
}

/// For a binary that is a test's fixture, not a pinning case: whether its arguments ask for its
/// usage (`--help` or `-h`), which is then printed.
pub fn fixture_help(usage: &str, args: &[String]) -> bool {
    let asked = args.iter().any(|a| a == "--help" || a == "-h");
    if asked {
        println!("{usage}");
    }
    asked
}

/// A fixture's one argument, if any, of those in `takes`; `Err` with the code to exit with once
/// its usage is printed (`--help`, 0; [`fixture_help`]) or the arguments refused, naming the
/// one not in `takes`, or all of them when there are more than one (2).
///
/// `main` returns the code rather than exiting here: under `#[pinwatch::main]` the runtime and
/// its detector have started already, and `std::process::exit` would skip the detector's
/// shutdown (a recording file asked for by `PINWATCH_RECORD` left empty).
pub fn fixture_arg(
    name: &str,
    usage: &str,
    takes: &[&str],
) -> Result<Option<String>, std::process::ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if fixture_help(usage, &args) {
        return Err(std::process::ExitCode::SUCCESS);
    }
    if let Some(other) = args.iter().find(|a| !takes.contains(&a.as_str())) {
        eprintln!("{name}: unknown argument {other:?}\n\n{usage}");
        return Err(std::process::ExitCode::from(2));
    }
    if args.len() > 1 {
        eprintln!("{name}: one argument at most, not {args:?}\n\n{usage}");
        return Err(std::process::ExitCode::from(2));
    }
    Ok(args.into_iter().next())
}

/// `main` of a sample binary: runs the case's variants at full size and prints a table.
pub fn cli_main(name: &str) {
    use clap::{Args as _, Command};
    let case = case(name).unwrap_or_else(|| panic!("no case {name} (this is a bug)"));
    let cmd = Opts::augment_args(
        Command::new(case.name)
            .about(case.about)
            .after_help(article(case.name)),
    );
    let matches = cmd.get_matches();
    let opts =
        <Opts as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let workers = opts.workers.unwrap_or(case.workers);
    let tasks = opts.tasks.unwrap_or(case.tasks.0);
    if workers == 0 {
        eprintln!("{name}: --workers must be at least 1");
        std::process::exit(2);
    }
    if let Err(why) = prepare(&case) {
        eprintln!("{name}: cannot run here: {why}");
        std::process::exit(2);
    }
    let variants = match opts.variant {
        Some(v) => vec![v],
        None if case.name == "lock_sleep" => {
            vec![Variant::Bad, Variant::PinwatchMutex, Variant::Fixed]
        }
        None if case.name == "stalled_runtime" => {
            vec![Variant::Bad, Variant::NotTimerWoken, Variant::Fixed]
        }
        None => vec![Variant::Bad, Variant::Fixed],
    };
    println!("{}: {}", case.name, case.about);
    println!("{}\n", article(case.name));
    let mut rows = Vec::new();
    for v in variants {
        eprintln!("{name}: running {v:?} with {workers} workers, {tasks} tasks…");
        let o = run(&case, v, workers, tasks, !opts.quick);
        let top = o
            .reasons()
            .first()
            .and_then(|(r, _)| o.top_frame(*r))
            .unwrap_or_else(|| "-".into());
        rows.push(vec![
            format!("{v:?}").to_lowercase(),
            workers.to_string(),
            tasks.to_string(),
            table::ms(o.elapsed),
            o.metric.clone().unwrap_or_default(),
            o.events.len().to_string(),
            o.reasons_cell(),
            o.stalled_cell(),
            top,
        ]);
    }
    print!(
        "{}",
        table::render(
            &[
                "variant",
                "workers",
                "tasks",
                "time",
                "measured",
                "pinned",
                "reasons",
                "stalled runtime",
                "top frame"
            ],
            &rows
        )
    );
}
