//! Run by `tests/pinwatch_test.rs` with the exporter, recording and control variables set
//! (`PINWATCH_PROMETHEUS_ADDR` on a port the parent holds, `PINWATCH_RECORD`,
//! `PINWATCH_CONTROL`), and `PINWATCH_THRESHOLD=200ms` or not: a test takes only the detection
//! settings from the environment. Both tests pin for 100 ms, at the same time.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// Both tests' runtimes are up before either pins (bounded: a test that never comes does not
/// hang the other).
async fn meet() {
    static ARRIVED: Mutex<usize> = Mutex::new(0);
    static CV: Condvar = Condvar::new();
    tokio::task::spawn_blocking(|| {
        let mut n = ARRIVED.lock().unwrap();
        *n += 1;
        CV.notify_all();
        let _ = CV
            .wait_timeout_while(n, Duration::from_secs(60), |n| *n < 2)
            .unwrap();
    })
    .await
    .unwrap();
}

fn block_100ms() {
    std::thread::sleep(Duration::from_millis(100));
}

#[pinwatch::test]
async fn env_pins_in_the_body() {
    meet().await;
    block_100ms();
}

#[pinwatch::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_pins_in_a_task() {
    meet().await;
    tokio::spawn(async { block_100ms() }).await.unwrap();
}
