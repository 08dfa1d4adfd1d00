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

pub fn current_thread() -> tokio::runtime::Builder {
    let mut b = tokio::runtime::Builder::new_current_thread();
    b.enable_all();
    b
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
