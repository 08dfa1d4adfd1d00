//! `http_server`: an axum service whose handler waits 100 ms for a fake database —
//! `std::thread::sleep` (bad) or `tokio::time::sleep` (fixed) — under a bounded load from a
//! built-in client on 127.0.0.1: N concurrent keep-alive connections for a fixed time.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::Variant;

/// The bad handler: the fake database call blocks the worker.
async fn blocking_handler() -> &'static str {
    std::thread::sleep(Duration::from_millis(100)); // pinned: a blocking "database" wait
    "ok"
}

/// The fixed handler: the same wait, awaited.
async fn async_handler() -> &'static str {
    tokio::time::sleep(Duration::from_millis(100)).await;
    "ok"
}

/// Results of one load run.
#[derive(Debug, Clone)]
pub struct Load {
    /// Completed requests.
    pub requests: usize,
    /// Requests per second.
    pub throughput: f64,
    /// Latency percentiles.
    pub p50: Duration,
    /// 95th percentile.
    pub p95: Duration,
    /// 99th percentile.
    pub p99: Duration,
}

impl std::fmt::Display for Load {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.0} req/s, p50 {:.0} ms, p95 {:.0} ms, p99 {:.0} ms",
            self.throughput,
            self.p50.as_secs_f64() * 1e3,
            self.p95.as_secs_f64() * 1e3,
            self.p99.as_secs_f64() * 1e3
        )
    }
}

/// Serves on 127.0.0.1 (on the current pinwatch runtime), loads it from a separate thread with
/// its own runtime (as wrk would from another process), and reports the load's numbers.
pub async fn run(variant: Variant, connections: usize, full: bool) -> Option<String> {
    let app = match variant {
        Variant::Fixed => axum::Router::new().route("/", axum::routing::get(async_handler)),
        _ => axum::Router::new().route("/", axum::routing::get(blocking_handler)),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1");
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let duration = if full {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(2)
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("client runtime");
        let _ = tx.send(rt.block_on(load(addr, connections, duration)));
    });
    let result = rx.await.expect("load client");
    server.abort();
    Some(result.to_string())
}

/// `connections` keep-alive clients, each sending GET / back to back for `duration`. Requests
/// still in flight at the end are not counted.
pub async fn load(addr: SocketAddr, connections: usize, duration: Duration) -> Load {
    let start = Instant::now();
    let deadline = start + duration;
    let clients: Vec<_> = (0..connections)
        .map(|_| tokio::spawn(client(addr, deadline)))
        .collect();
    let mut latencies = Vec::new();
    for c in clients {
        latencies.extend(c.await.unwrap_or_default());
    }
    let elapsed = start.elapsed().min(duration + Duration::from_secs(1));
    latencies.sort();
    let pct = |p: f64| {
        if latencies.is_empty() {
            Duration::ZERO
        } else {
            latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)]
        }
    };
    Load {
        requests: latencies.len(),
        throughput: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50: pct(0.50),
        p95: pct(0.95),
        p99: pct(0.99),
    }
}

async fn client(addr: SocketAddr, deadline: Instant) -> Vec<Duration> {
    let mut out = Vec::new();
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return out;
    };
    let mut buf = vec![0u8; 4096];
    while Instant::now() < deadline {
        let t = Instant::now();
        if stream
            .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .is_err()
        {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now()) + Duration::from_millis(500);
        match tokio::time::timeout(left, read_response(&mut stream, &mut buf)).await {
            Ok(true) => {
                if Instant::now() <= deadline {
                    out.push(t.elapsed());
                }
            }
            _ => break,
        }
    }
    out
}

/// Reads one HTTP/1.1 response with a Content-Length body. `false` on error or close.
async fn read_response(stream: &mut tokio::net::TcpStream, buf: &mut [u8]) -> bool {
    let mut have = 0usize;
    loop {
        let Ok(n) = stream.read(&mut buf[have..]).await else {
            return false;
        };
        if n == 0 {
            return false;
        }
        have += n;
        let text = &buf[..have];
        if let Some(end) = text.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&text[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if have >= end + 4 + len {
                return true;
            }
        }
        if have == buf.len() {
            return false;
        }
    }
}
