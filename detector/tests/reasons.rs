//! Each reason is produced by a real case, and the top frame is this file's own line.

mod support;

use std::io::{Read, Write};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use pinwatch::{PinnedEvent, Reason, Stacks, State};
use support::{multi_thread, Collected};

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn runtime(events: &Collected) -> support::Watched {
    support::watch(
        support::builder(events).stacks(Stacks::Full),
        &mut multi_thread(2),
    )
}

/// [`runtime`], probed every 10 ms: many probes of a pin of a few hundred ms.
fn sampled_every_10ms(events: &Collected) -> support::Watched {
    support::watch(
        support::builder(events)
            .stacks(Stacks::Full)
            .sample_interval(Duration::from_millis(10)),
        &mut multi_thread(2),
    )
}

/// The completed event of task `id`.
fn completed_for(events: &Collected, id: tokio::task::Id) -> PinnedEvent {
    let id: u64 = id.to_string().parse().unwrap();
    events
        .completed()
        .into_iter()
        .find(|e| e.task_id == Some(id))
        .unwrap_or_else(|| panic!("no completed event for task {id}: {:#?}", events.all()))
}

fn assert_top_frame_here(e: &PinnedEvent, line: u32) {
    let top = e
        .top_frame
        .as_ref()
        .unwrap_or_else(|| panic!("no top frame: {e:#?}"));
    assert!(
        top.file
            .as_deref()
            .is_some_and(|f| f.ends_with("reasons.rs")),
        "{top:?} in {e:#?}"
    );
    assert_eq!(top.line, Some(line), "{e:#?}");
}

#[test]
fn sleep() {
    let _s = serial();
    let events = Collected::default();
    let rt = runtime(&events);
    let line = line!() + 1;
    let h = rt.spawn(async { std::thread::sleep(Duration::from_millis(150)) });
    let id = h.id();
    rt.block_on(h).unwrap();
    rt.shutdown();
    let e = completed_for(&events, id);
    assert_eq!(e.reason, Some(Reason::Sleep), "{e:#?}");
    assert_eq!(e.blocking_operation.as_deref(), Some("clock_nanosleep"));
    assert_top_frame_here(&e, line);
    assert!(e.samples >= 1);
    assert!(!e.stack.is_empty());
}

#[test]
fn cpu_top_frame_is_the_hot_line() {
    let _s = serial();
    let events = Collected::default();
    let rt = sampled_every_10ms(&events);
    const K: u64 = 6364136223846793005;
    let hot_line = line!() + 6;
    let h = rt.spawn(async {
        let start = Instant::now();
        let mut x = 1u64;
        while start.elapsed() < Duration::from_millis(400) {
            // The hot line: nearly all of the time goes here.
            x = (0..20_000).fold(x, |x, _| std::hint::black_box(x.wrapping_mul(K) ^ 1));
            x = std::hint::black_box(x.wrapping_add(1));
        }
        x
    });
    let id = h.id();
    rt.block_on(h).unwrap();
    rt.shutdown();
    let e = completed_for(&events, id);
    assert_eq!(e.reason, Some(Reason::Cpu), "{e:#?}");
    assert_eq!(e.blocking_operation.as_deref(), Some("running"));
    assert_top_frame_here(&e, hot_line);
    // Many samples, and the profile says where they were: the hot line first.
    assert!(e.samples >= 5, "{e:#?}");
    let first = e
        .profile
        .first()
        .unwrap_or_else(|| panic!("no profile: {e:#?}"));
    assert_eq!(first.frame.line, Some(hot_line), "{e:#?}");
    let total: u32 = e.profile.iter().map(|p| p.samples).sum();
    assert_eq!(total, e.samples, "{e:#?}");
    assert!(first.samples * 2 > total, "{e:#?}");
}

#[test]
fn a_sleep_then_a_longer_loop_is_cpu_at_the_loop() {
    // Probes every 100 ms: about three see the sleep, fifteen the loop. The loop's probes find
    // the thread running, as did the probe before, with no voluntary context switch between
    // (a woken sleeper waiting for a CPU reads as running too, but its sleep was a switch, or
    // the probe before found it asleep): those count against the sleep's, and outnumber them.
    let _s = serial();
    let events = Collected::default();
    let rt = runtime(&events);
    const K: u64 = 6364136223846793005;
    let hot_line = line!() + 7;
    let h = rt.spawn(async {
        std::thread::sleep(Duration::from_millis(250));
        let start = Instant::now();
        let mut x = 1u64;
        while start.elapsed() < Duration::from_millis(1500) {
            // The hot line.
            x = (0..20_000).fold(x, |x, _| std::hint::black_box(x.wrapping_mul(K) ^ 1));
        }
        x
    });
    let id = h.id();
    rt.block_on(h).unwrap();
    rt.shutdown();
    let e = completed_for(&events, id);
    assert_eq!(e.reason, Some(Reason::Cpu), "{e:#?}");
    assert_eq!(e.blocking_operation.as_deref(), Some("running"));
    assert_eq!(e.other_reasons, vec![Reason::Sleep], "{e:#?}");
    assert_top_frame_here(&e, hot_line);
}

#[test]
fn a_handler_that_sleeps_in_short_bursts_inside_a_lock_is_sleep() {
    // 2 ms asleep, 200 µs on the CPU, for 600 ms, inside a std mutex, probed every 10 ms: on a
    // loaded machine many probes find it running (woken, waiting for a CPU), but it blocked
    // between any two of them: none counts toward cpu, and the sixty probes see it asleep too.
    let _s = serial();
    let events = Collected::default();
    let rt = sampled_every_10ms(&events);
    let lock = Arc::new(std::sync::Mutex::new(0u64));
    let h = rt.spawn(async move {
        let mut held = lock.lock().unwrap();
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(600) {
            std::thread::sleep(Duration::from_millis(2));
            let spin = Instant::now();
            while spin.elapsed() < Duration::from_micros(200) {
                *held = std::hint::black_box(*held + 1);
            }
        }
    });
    let id = h.id();
    rt.block_on(h).unwrap();
    rt.shutdown();
    let e = completed_for(&events, id);
    assert_eq!(e.reason, Some(Reason::Sleep), "{e:#?}");
}

#[test]
fn io() {
    let _s = serial();
    let events = Collected::default();
    let rt = runtime(&events);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let writer = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        conn.write_all(b"x").unwrap();
    });
    let line = line!() + 4;
    let h = rt.spawn(async move {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        let mut buf = [0u8; 1];
        s.read_exact(&mut buf).unwrap();
    });
    let id = h.id();
    rt.block_on(h).unwrap();
    writer.join().unwrap();
    rt.shutdown();
    let e = completed_for(&events, id);
    assert_eq!(e.reason, Some(Reason::Io), "{e:#?}");
    assert!(
        matches!(e.blocking_operation.as_deref(), Some("recvfrom" | "read")),
        "{e:#?}"
    );
    assert_top_frame_here(&e, line);
}

#[test]
fn lock_wait_on_a_std_mutex() {
    let _s = serial();
    let events = Collected::default();
    let rt = runtime(&events);
    let m = Arc::new(std::sync::Mutex::new(0));
    let m2 = Arc::clone(&m);
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let holder = rt.spawn(async move {
        let _g = m2.lock().unwrap();
        held_tx.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(400));
    });
    held_rx.recv().unwrap();
    let line = line!() + 1;
    let waiter = rt.spawn(async move { *m.lock().unwrap() += 1 });
    let id = waiter.id();
    rt.block_on(async {
        holder.await.unwrap();
        waiter.await.unwrap();
    });
    rt.shutdown();
    let e = completed_for(&events, id);
    assert_eq!(e.reason, Some(Reason::LockWait), "{e:#?}");
    assert_eq!(e.blocking_operation.as_deref(), Some("futex"));
    assert_top_frame_here(&e, line);
}

#[test]
fn lock_held_on_a_pinwatch_mutex_and_lock_wait_names_the_holder() {
    let _s = serial();
    let events = Collected::default();
    let rt = runtime(&events);
    let m = Arc::new(pinwatch::sync::Mutex::new(0));
    let m2 = Arc::clone(&m);
    let lock_line = line!() + 3;
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let holder = rt.spawn(async move {
        let _g = m2.lock().unwrap();
        held_tx.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(400));
    });
    let holder_id = holder.id();
    held_rx.recv().unwrap();
    let waiter = rt.spawn(async move { *m.lock().unwrap() += 1 });
    let waiter_id = waiter.id();
    rt.block_on(async {
        holder.await.unwrap();
        waiter.await.unwrap();
    });
    rt.shutdown();

    let e = completed_for(&events, holder_id);
    assert_eq!(e.reason, Some(Reason::LockHeld), "{e:#?}");
    assert_eq!(e.held_locks.len(), 1, "{e:#?}");
    let at = &e.held_locks[0].acquired_at;
    assert!(
        at.file.ends_with("reasons.rs") && at.line == lock_line,
        "{at}"
    );
    assert_eq!(e.held_locks[0].kind, "mutex");
    assert!(e.stack.iter().any(|f| f.locks == 1), "{e:#?}");

    let w = completed_for(&events, waiter_id);
    assert_eq!(w.reason, Some(Reason::LockWait), "{w:#?}");
    let by = w.lock_holder.as_ref().expect("holder named");
    assert_eq!(by.acquired_at.line, lock_line);
    assert_eq!(by.worker.tid, e.worker.tid);
    // And the worker it runs (it was always null: helper-106).
    assert!(e.worker.index.is_some(), "{e:#?}");
    assert_eq!(by.worker.index, e.worker.index, "{w:#?}");
}

/// Met by the initializer once it runs, and by the test before it starts the bystander.
static INIT_STARTED: std::sync::Barrier = std::sync::Barrier::new(2);

static SLOW_CONFIG: LazyLock<u32> = LazyLock::new(|| {
    INIT_STARTED.wait();
    std::thread::sleep(Duration::from_millis(400));
    42
});

#[test]
fn once_init_and_once_wait() {
    let _s = serial();
    let events = Collected::default();
    let rt = runtime(&events);
    let init = rt.spawn(async { *SLOW_CONFIG });
    let init_id = init.id();
    INIT_STARTED.wait();
    let line = line!() + 1;
    let wait = rt.spawn(async { *SLOW_CONFIG });
    let wait_id = wait.id();
    rt.block_on(async {
        assert_eq!(init.await.unwrap(), 42);
        assert_eq!(wait.await.unwrap(), 42);
    });
    rt.shutdown();
    let e = completed_for(&events, init_id);
    assert_eq!(e.reason, Some(Reason::OnceInit), "{e:#?}");
    let top = e.top_frame.as_ref().unwrap();
    // The initializer's own sleep line is the top application frame.
    assert!(
        top.file.as_deref().unwrap().ends_with("reasons.rs"),
        "{e:#?}"
    );
    let w = completed_for(&events, wait_id);
    assert_eq!(w.reason, Some(Reason::OnceWait), "{w:#?}");
    assert_top_frame_here(&w, line);
    assert!(events
        .all()
        .iter()
        .all(|e| e.state == State::InProgress || e.reason.is_some()));
}
