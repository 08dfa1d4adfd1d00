//! The code under test: a handler that blocks its worker, and one that does not.

use std::time::Duration;

/// Blocks the thread it runs on: called from async code, it pins a worker.
pub fn slow_lookup() -> u32 {
    std::thread::sleep(Duration::from_millis(300));
    42
}

/// The same lookup done right.
pub async fn lookup() -> u32 {
    tokio::task::spawn_blocking(slow_lookup).await.unwrap()
}
