//! Test harness: runtimes whose events are collected in memory.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pinwatch::{PinnedEvent, State};

/// Events collected by a sink, shared with the test.
#[derive(Clone, Default)]
pub struct Collected(pub Arc<Mutex<Vec<PinnedEvent>>>);

impl Collected {
    pub fn sink(&self) -> impl FnMut(&PinnedEvent) + Send + 'static {
        let events = Arc::clone(&self.0);
        move |e: &PinnedEvent| events.lock().unwrap().push(e.clone())
    }

    pub fn all(&self) -> Vec<PinnedEvent> {
        self.0.lock().unwrap().clone()
    }

    pub fn completed(&self) -> Vec<PinnedEvent> {
        self.all()
            .into_iter()
            .filter(|e| e.state == State::Completed)
            .collect()
    }

    /// Waits (bounded) until `pred` holds for some event; returns it.
    pub fn wait_for(
        &self,
        timeout: Duration,
        pred: impl Fn(&PinnedEvent) -> bool,
    ) -> Option<PinnedEvent> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.all().into_iter().find(|e| pred(e)) {
                return Some(e);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// A pinwatch builder with the tracing sink off and a collecting sink on.
pub fn builder(events: &Collected) -> pinwatch::Builder {
    pinwatch::Builder::new().tracing(false).sink(events.sink())
}

/// A tokio runtime and its detector, dropped in that order. Derefs to the runtime.
pub struct Watched {
    pub rt: tokio::runtime::Runtime,
    pub detector: pinwatch::Detector,
}

impl std::ops::Deref for Watched {
    type Target = tokio::runtime::Runtime;
    fn deref(&self) -> &tokio::runtime::Runtime {
        &self.rt
    }
}

impl Watched {
    /// Drops the runtime, then stops the detector; its final stats.
    pub fn shutdown(self) -> pinwatch::Stats {
        drop(self.rt);
        self.detector.shutdown()
    }

    pub fn stats(&self) -> pinwatch::Stats {
        self.detector.stats()
    }
}

/// Builds `tokio` with `builder` watching it.
pub fn watch(builder: pinwatch::Builder, tokio: &mut tokio::runtime::Builder) -> Watched {
    let (rt, detector) = builder.build(tokio).expect("pinwatch runtime");
    Watched { rt, detector }
}

pub fn multi_thread(workers: usize) -> tokio::runtime::Builder {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(workers).enable_all();
    b
}

/// A multi-thread runtime of one worker, pinned to `cpu` (to share it with [`Hogs`]).
pub fn one_worker_on(cpu: usize) -> tokio::runtime::Builder {
    let mut b = multi_thread(1);
    b.on_thread_start(move || pin_current_thread(cpu));
    b
}

pub fn current_thread() -> tokio::runtime::Builder {
    let mut b = tokio::runtime::Builder::new_current_thread();
    b.enable_all();
    b
}

/// Each thread of this process still there when read: its name (`comm`) and what `read` takes
/// from its `/proc/self/task/<tid>` directory (a thread gone since the listing is left out).
pub fn threads_with<T>(read: impl Fn(&std::path::Path) -> Option<T>) -> Vec<(String, T)> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter_map(|task| {
            let name = std::fs::read_to_string(task.path().join("comm")).ok()?;
            Some((name.trim_end().to_owned(), read(&task.path())?))
        })
        .collect()
}

/// The CPU time this thread has used.
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Spins until this thread has used `cpu` of CPU time; returns the wall time it took.
pub fn spin_cpu(cpu: Duration) -> Duration {
    let wall = Instant::now();
    let start = thread_cpu_time();
    let mut x = 1u64;
    while thread_cpu_time() - start < cpu {
        for _ in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    wall.elapsed()
}

/// The calling thread's CPU affinity.
pub fn affinity() -> libc::cpu_set_t {
    // SAFETY: a zeroed `cpu_set_t` is the empty set, a plain bitmask the kernel fills.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a live, writable set of the size given; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    assert_eq!(
        rc,
        0,
        "sched_getaffinity: {}",
        std::io::Error::last_os_error()
    );
    set
}

/// Sets the calling thread's CPU affinity to `set`.
pub fn set_affinity(set: &libc::cpu_set_t) {
    // SAFETY: a live set of the size given, only read; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(set), set) };
    assert_eq!(
        rc,
        0,
        "sched_setaffinity: {}",
        std::io::Error::last_os_error()
    );
}

/// The first CPU the calling thread may run on.
pub fn first_allowed_cpu() -> usize {
    let set = affinity();
    // SAFETY: CPU_ISSET reads the mask, at indexes below its size.
    (0..libc::CPU_SETSIZE as usize)
        .find(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .unwrap()
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) {
    // SAFETY: a zeroed `cpu_set_t` is the empty set; CPU_SET writes inside it (it checks the
    // index).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    set_affinity(&set);
}

/// Threads spinning on one CPU, each pinned to it: what a poll pinned there shares it with.
/// They stop when `stop` is set, and are stopped and joined when dropped.
pub struct Hogs {
    pub stop: Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Hogs {
    /// `n` threads spinning on `cpu`.
    pub fn start(cpu: usize, n: usize) -> Hogs {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    pin_current_thread(cpu);
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Hogs { stop, threads }
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Spins the CPU for `d` without yielding.
pub fn spin(d: Duration) -> u64 {
    let start = Instant::now();
    let mut x = 0u64;
    while start.elapsed() < d {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        std::hint::black_box(x);
    }
    x
}

/// What a `tracing` subscriber is given to write.
#[derive(Clone, Default)]
struct Written(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Written {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What `start` returns (a detector started in it), and the start-up line it said, through a
/// `tracing` subscriber of this thread's.
pub fn with_startup_line<T>(start: impl FnOnce() -> T) -> (T, String) {
    let written = Written::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer({
            let w = written.clone();
            move || w.clone()
        })
        .with_ansi(false)
        .finish();
    let started = tracing::subscriber::with_default(subscriber, start);
    let text = String::from_utf8_lossy(&written.0.lock().unwrap()).into_owned();
    let line = text
        .lines()
        .find(|l| l.contains("pinwatch: watching "))
        .unwrap_or_else(|| panic!("no start-up line in {text:?}"))
        .to_owned();
    (started, line)
}

/// This test binary again, running only its test `test` with `child` set, so that the test
/// knows it is the child's half: how a test gets a process of its own (a first pin, a first
/// panic, an environment of its own).
pub fn rerun(test: &str, child: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(child, "1");
    cmd
}
