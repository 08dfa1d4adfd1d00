//! The blast radius of a pin: a task woken by a timer that then blocks its worker stops the
//! whole multi-thread runtime's timers and I/O (the worker that was parked on the driver ran it;
//! the other worker sleeps on its condvar), and pinwatch says so with `runtime_stalled`; a pin
//! that leaves the timers running does not get it, not even on a machine whose CPUs are busy.
// The gauges are read through the Prometheus collector.
#![cfg(feature = "prometheus")]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use pinwatch::{Control, PinnedEvent, State};

const LONG: Duration = Duration::from_secs(30);

struct Service {
    rt: tokio::runtime::Runtime,
    detector: pinwatch::Detector,
    events: mpsc::Receiver<PinnedEvent>,
    registry: prometheus::Registry,
    ticks: Arc<AtomicU64>,
}

/// Two workers, four tasks ticking on 100 ms timers, pinwatch at its defaults (heartbeat on).
fn service() -> Service {
    let (tx, events) = mpsc::channel();
    let registry = prometheus::Registry::new();
    let (rt, detector) = pinwatch::Builder::new()
        .tracing(false)
        .control(Control::Off)
        .prometheus_registry(&registry)
        .sink(move |e: &PinnedEvent| {
            let _ = tx.send(e.clone());
        })
        .build(tokio::runtime::Builder::new_multi_thread().worker_threads(2))
        .unwrap();
    let ticks = Arc::new(AtomicU64::new(0));
    for _ in 0..4 {
        let ticks = Arc::clone(&ticks);
        rt.spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                ticks.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    // Let the runtime settle: both workers idle, one of them parked on the driver.
    let settled = Arc::clone(&ticks);
    while settled.load(Ordering::Relaxed) < 8 {
        std::thread::sleep(Duration::from_millis(20));
    }
    Service {
        rt,
        detector,
        events,
        registry,
        ticks,
    }
}

fn gauge(registry: &prometheus::Registry, name: &str) -> f64 {
    let mut text = Vec::new();
    prometheus::Encoder::encode(
        &prometheus::TextEncoder::new(),
        &registry.gather(),
        &mut text,
    )
    .unwrap();
    String::from_utf8(text)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name}"))
}

/// The next event `f` accepts, within `LONG`.
fn next(
    events: &mpsc::Receiver<PinnedEvent>,
    what: &str,
    f: impl Fn(&PinnedEvent) -> bool,
) -> PinnedEvent {
    let deadline = Instant::now() + LONG;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(e) if f(&e) => return e,
            Ok(_) => continue,
            Err(_) => panic!("no event: {what}"),
        }
    }
}

/// A `std::sync::Mutex` held by the test until it drops the guard it gets back.
fn held_lock() -> (Arc<Mutex<()>>, mpsc::Sender<()>) {
    let lock = Arc::new(Mutex::new(()));
    let (held_tx, held_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let holder = Arc::clone(&lock);
    std::thread::spawn(move || {
        let _g = holder.lock().unwrap();
        held_tx.send(()).unwrap();
        let _ = release_rx.recv();
    });
    held_rx.recv().unwrap();
    (lock, release_tx)
}

/// Whether the tickers stand still for 400 ms.
fn frozen(ticks: &AtomicU64) -> bool {
    let before = ticks.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(400));
    ticks.load(Ordering::Relaxed) == before
}

#[test]
fn a_timer_woken_pin_stalls_the_whole_runtime_and_is_reported_so() {
    let svc = service();
    // Whether the worker that ran the driver takes the task depends on where the other worker
    // is at that moment; on a loaded machine it is sometimes awake and takes the driver over.
    // Try until the runtime really stalls (it does in most tries).
    for attempt in 1..=10 {
        let (lock, release) = held_lock();
        let (blocking_tx, blocking_rx) = mpsc::channel();
        svc.rt.spawn(async move {
            tokio::time::sleep(Duration::from_millis(1)).await; // woken by the timer…
            blocking_tx.send(Instant::now()).unwrap();
            drop(lock.lock().unwrap()); // …then blocks the worker that ran the driver
        });
        let blocked_at = blocking_rx.recv_timeout(LONG).unwrap();
        if !frozen(&svc.ticks) {
            println!("attempt {attempt}: the other worker took the driver; again");
            release.send(()).unwrap();
            next(&svc.events, "the pin's completion", |e| {
                e.state == State::Completed
            });
            continue;
        }
        let stalled = next(&svc.events, "a runtime_stalled report", |e| {
            e.runtime_stalled
        });
        let latency = stalled.start + stalled.duration;
        println!(
            "attempt {attempt}: runtime_stalled reported {:?} after the worker blocked",
            latency
                .duration_since(std::time::SystemTime::now() - blocked_at.elapsed())
                .unwrap_or_default()
        );
        assert_eq!(stalled.state, State::InProgress);
        assert_eq!(
            stalled.reason,
            Some(pinwatch::Reason::LockWait),
            "{stalled:?}"
        );
        let late = stalled.heartbeat_late.expect("heartbeat_late");
        assert!(late > stalled.threshold, "{late:?}");
        assert!(stalled.tasks_queued_behind.is_some(), "{stalled:?}");
        assert!(stalled
            .headline()
            .contains("timers of the whole runtime stalled for"));
        assert_eq!(gauge(&svc.registry, "pinwatch_runtime_stalled"), 1.0);

        release.send(()).unwrap();
        let done = next(&svc.events, "the pin's completion", |e| {
            e.id == stalled.id && e.state == State::Completed
        });
        assert!(done.runtime_stalled);
        assert!(done.heartbeat_late.unwrap() >= late);
        // The timers run again, and the stall is over.
        let before = svc.ticks.load(Ordering::Relaxed);
        while svc.ticks.load(Ordering::Relaxed) < before + 4 {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(gauge(&svc.registry, "pinwatch_runtime_stalled"), 0.0);
        assert!(gauge(&svc.registry, "pinwatch_runtime_stall_seconds_total") > 0.2);
        let stats = svc.detector.stats();
        assert!(
            stats.runtime_stalled_time > Duration::from_millis(200),
            "{stats:?}"
        );
        drop(svc.rt);
        return;
    }
    panic!("the runtime never stalled in 10 tries");
}

/// The same blocking call in a task spawned by a task — not woken by a timer: the runtime's
/// timers keep running on the other worker, and the pin is reported without a stall. On a
/// machine whose CPUs are both busy with other threads too.
#[test]
fn a_pin_that_leaves_the_timers_running_is_no_stall_even_on_a_busy_machine() {
    let svc = service();
    let stop = Arc::new(AtomicBool::new(false));
    let hogs: Vec<_> = (0..2)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut x = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        })
        .collect();
    // Rarely, on a loaded machine, the scheduler leaves the driver with the blocked worker
    // anyway; then the runtime is stalled and must be reported so. Try until the timers run.
    let mut checked = false;
    for attempt in 1..=10 {
        let (lock, release) = held_lock();
        let (blocking_tx, blocking_rx) = mpsc::channel();
        svc.rt.spawn(async move {
            tokio::spawn(async move {
                blocking_tx.send(()).unwrap();
                drop(lock.lock().unwrap()); // blocks its worker; the driver is elsewhere
            })
            .await
            .unwrap();
        });
        blocking_rx.recv_timeout(LONG).unwrap();
        let pin = next(&svc.events, "the pin's first report", |e| e.report == 1);
        let stood_still = frozen(&svc.ticks);
        release.send(()).unwrap();
        let done = next(&svc.events, "the pin's completion", |e| {
            e.id == pin.id && e.state == State::Completed
        });
        if stood_still {
            println!("attempt {attempt}: the timers stood still after all; again");
            assert!(done.runtime_stalled, "a stall not reported: {done:?}");
            continue;
        }
        assert!(done.duration >= Duration::from_millis(400), "{done:?}");
        assert!(!pin.runtime_stalled && !done.runtime_stalled, "{done:?}");
        assert_eq!(done.heartbeat_late, None);
        checked = true;
        break;
    }
    stop.store(true, Ordering::Relaxed);
    for h in hogs {
        h.join().unwrap();
    }
    assert!(checked, "the timers never ran on in 10 tries");
    drop(svc.rt);
}

/// `PINWATCH_HEARTBEAT=off`: no heartbeat task, so no stall is ever reported.
#[test]
fn without_a_heartbeat_no_stall_is_reported() {
    let (tx, events) = mpsc::channel();
    let (rt, _detector) = pinwatch::Builder::new()
        .tracing(false)
        .control(Control::Off)
        .heartbeat(None)
        .sink(move |e: &PinnedEvent| {
            let _ = tx.send(e.clone());
        })
        .build(tokio::runtime::Builder::new_current_thread().enable_all())
        .unwrap();
    // On a current-thread runtime any pin stops the timers: still no stall without a heartbeat.
    rt.block_on(async {
        tokio::spawn(async { std::thread::sleep(Duration::from_millis(300)) })
            .await
            .unwrap();
    });
    let done = next(&events, "the pin's completion", |e| {
        e.state == State::Completed
    });
    assert!(
        !done.runtime_stalled && done.heartbeat_late.is_none(),
        "{done:?}"
    );
}

/// A current-thread runtime, pinwatch at its defaults (heartbeat on); its events.
fn current_thread_service() -> (
    tokio::runtime::Runtime,
    pinwatch::Detector,
    mpsc::Receiver<PinnedEvent>,
) {
    let (tx, events) = mpsc::channel();
    let (rt, detector) = pinwatch::Builder::new()
        .tracing(false)
        .control(Control::Off)
        .sink(move |e: &PinnedEvent| {
            let _ = tx.send(e.clone());
        })
        .build(&mut tokio::runtime::Builder::new_current_thread())
        .unwrap();
    (rt, detector, events)
}

/// On a current-thread runtime, a pin longer than the threshold plus the stall floor stalls
/// everything, and says so.
#[test]
fn a_long_pin_on_a_current_thread_runtime_is_a_stall() {
    let (rt, _detector, events) = current_thread_service();
    rt.block_on(async {
        tokio::time::sleep(Duration::from_millis(200)).await; // the heartbeat runs meanwhile
        tokio::spawn(async { std::thread::sleep(Duration::from_millis(800)) })
            .await
            .unwrap();
    });
    let done = next(&events, "the pin's completion", |e| {
        e.state == State::Completed
    });
    assert!(done.runtime_stalled, "{done:?}");
    assert_eq!(done.worker.index, Some(0));
}

/// Only a pin that was running when the heartbeat was due can have stalled the runtime: on a
/// current-thread runtime, a task queued behind a long pin runs while the heartbeat is still
/// late — for the long pin, not for it.
#[test]
fn a_pin_that_starts_after_the_stall_began_is_not_blamed_for_it() {
    let (rt, _detector, events) = current_thread_service();
    let (long_task, short_task) = rt.block_on(async {
        // The heartbeat runs meanwhile.
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Both queued at once: the short one runs right after the long one, before the
        // runtime gets back to its timers.
        let long = tokio::spawn(async { std::thread::sleep(Duration::from_millis(1000)) });
        let short = tokio::spawn(async { std::thread::sleep(Duration::from_millis(150)) });
        let ids = (long.id(), short.id());
        long.await.unwrap();
        short.await.unwrap();
        ids
    });
    let id = |t: tokio::task::Id| t.to_string().parse::<u64>().unwrap();
    let (long_task, short_task) = (id(long_task), id(short_task));
    let mut long = None;
    let mut short = None;
    while long.is_none() || short.is_none() {
        let e = next(&events, "both completions", |e| e.state == State::Completed);
        if e.task_id == Some(long_task) {
            long = Some(e);
        } else if e.task_id == Some(short_task) {
            short = Some(e);
        }
    }
    let (long, short) = (long.unwrap(), short.unwrap());
    assert!(long.runtime_stalled, "{long:?}");
    assert!(
        !short.runtime_stalled && short.heartbeat_late.is_none(),
        "the short pin began after the heartbeat was due: {short:?}"
    );
}

/// A multi-thread runtime's `block_on` body runs on a thread that is none of the workers:
/// blocked at the same time as one worker, it leaves one of the two workers pinned — and is
/// counted on its own gauge.
#[test]
fn a_blocked_block_on_body_is_not_counted_among_the_pinned_workers() {
    let s = service();
    let (task_lock, release_task) = held_lock();
    let (body_lock, release_body) = held_lock();
    let task = s.rt.spawn(async move {
        let _g = task_lock.lock().unwrap(); // pins a worker until released
    });
    let body = s.detector.watch_block_on(async move {
        let _g = body_lock.lock().unwrap(); // blocks the body's thread until released
    });
    std::thread::scope(|scope| {
        let rt = &s.rt;
        let runner = scope.spawn(move || rt.block_on(body));
        let mut worker_pin = None;
        let mut body_pin = None;
        while worker_pin.is_none() || body_pin.is_none() {
            let e = next(&s.events, "the worker's pin and the body's", |e| {
                e.state == State::InProgress
            });
            if e.block_on {
                body_pin = Some(e);
            } else {
                worker_pin = Some(e);
            }
        }
        let (worker_pin, body_pin) = (worker_pin.unwrap(), body_pin.unwrap());
        assert!(worker_pin.worker.index.is_some(), "{worker_pin:?}");
        assert_eq!(body_pin.worker.index, None, "{body_pin:?}");
        assert!(
            body_pin.headline().contains("holding no worker"),
            "{}",
            body_pin.headline()
        );
        // Both still run (neither lock is released yet).
        assert_eq!(gauge(&s.registry, "pinwatch_workers_pinned"), 1.0);
        assert_eq!(gauge(&s.registry, "pinwatch_workers"), 2.0);
        assert_eq!(gauge(&s.registry, "pinwatch_block_on_blocked"), 1.0);
        drop(release_body);
        runner.join().unwrap();
        drop(release_task);
    });
    s.rt.block_on(task).unwrap();
    next(&s.events, "the worker's pin completed", |e| {
        e.state == State::Completed && !e.block_on
    });
    // The gauges are the watchdog's live view, which it updates just after it sends the
    // completion: they reach zero within a scan or two (bounded wait, not a fixed sleep).
    let deadline = Instant::now() + Duration::from_secs(10);
    while gauge(&s.registry, "pinwatch_workers_pinned") != 0.0
        || gauge(&s.registry, "pinwatch_block_on_blocked") != 0.0
    {
        assert!(
            Instant::now() < deadline,
            "still pinned 10 s after the completions: workers {} bodies {}",
            gauge(&s.registry, "pinwatch_workers_pinned"),
            gauge(&s.registry, "pinwatch_block_on_blocked")
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
