//! What `/proc/self/status` says about this process: threads, resident memory, its peak.

fn field(name: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Threads of this process now.
pub fn threads() -> u64 {
    field("Threads:").unwrap_or(0)
}

/// Peak resident memory of this process so far, in KiB (`VmHWM`).
pub fn peak_rss_kib() -> u64 {
    field("VmHWM:").unwrap_or(0)
}

/// Samples the thread count every 2 ms on a thread of its own until dropped; keeps the peak.
pub struct ThreadPeak {
    peak: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl ThreadPeak {
    /// Starts sampling.
    pub fn start() -> ThreadPeak {
        use std::sync::atomic::Ordering;
        let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(threads()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(threads(), Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        });
        ThreadPeak {
            peak,
            stop,
            handle: Some(handle),
        }
    }

    /// Stops sampling; the peak, not counting the sampling thread itself.
    pub fn finish(mut self) -> u64 {
        use std::sync::atomic::Ordering;
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.peak.load(Ordering::Relaxed).saturating_sub(1)
    }
}
