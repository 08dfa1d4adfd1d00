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

fn runtime(events: &Collected) -> pinwatch::Runtime {
    support::builder(events)
        .stacks(Stacks::Full)
        .build(&mut multi_thread(2))
        .unwrap()
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
fn cpu() {
    let _s = serial();
    let events = Collected::default();
    let rt = runtime(&events);
    let line = line!() + 5;
    let h = rt.spawn(async {
        let start = Instant::now();
        let mut x = 1u64;
        while start.elapsed() < Duration::from_millis(300) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        x
    });
    let id = h.id();
    rt.block_on(h).unwrap();
    rt.shutdown();
    let e = completed_for(&events, id);
    assert_eq!(e.reason, Some(Reason::Cpu), "{e:#?}");
    assert_eq!(e.blocking_operation.as_deref(), Some("running"));
    let top = e.top_frame.as_ref().expect("top frame");
    assert!(
        top.file.as_deref().unwrap().ends_with("reasons.rs"),
        "{e:#?}"
    );
    // The loop is three lines; the sample lands on one of them.
    let l = top.line.unwrap();
    assert!((line - 1..=line + 1).contains(&l), "{l} vs {line}: {e:#?}");
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
    let holder = rt.spawn(async move {
        let _g = m2.lock().unwrap();
        std::thread::sleep(Duration::from_millis(400));
    });
    std::thread::sleep(Duration::from_millis(50));
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
    let lock_line = line!() + 2;
    let holder = rt.spawn(async move {
        let _g = m2.lock().unwrap();
        std::thread::sleep(Duration::from_millis(400));
    });
    let holder_id = holder.id();
    std::thread::sleep(Duration::from_millis(50));
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
}

static SLOW_CONFIG: LazyLock<u32> = LazyLock::new(|| {
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
    std::thread::sleep(Duration::from_millis(50));
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
