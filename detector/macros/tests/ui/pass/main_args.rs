//! Each accepted form of `#[pinwatch::main]` on a function of its own, run by `main`. tokio is
//! a dependency under another name (`tokio1`): no `tokio` is in scope.

use std::time::Duration;

#[pinwatch::main]
async fn default_flavor() -> (tokio1::runtime::RuntimeFlavor, usize) {
    let h = tokio1::runtime::Handle::current();
    (h.runtime_flavor(), h.metrics().num_workers())
}

#[pinwatch::main(worker_threads = 3)]
async fn three_workers() -> usize {
    tokio1::runtime::Handle::current().metrics().num_workers()
}

#[pinwatch::main(flavor = "current_thread", start_paused = true)]
async fn paused() -> Duration {
    let start = tokio1::time::Instant::now();
    tokio1::time::sleep(Duration::from_secs(3600)).await;
    start.elapsed()
}

#[pinwatch::main(flavor = "local")]
async fn local() -> u32 {
    let n = std::rc::Rc::new(5);
    let m = n.clone();
    tokio1::task::spawn_local(async move { *m + 1 }).await.unwrap()
}

#[pinwatch::main(flavor = "current_thread", unhandled_panic = "shutdown_runtime")]
async fn shut_down_by_a_panicking_task() {
    tokio1::spawn(async { panic!("the spawned task's own panic") });
    std::future::pending::<()>().await;
}

#[pinwatch::main(flavor = "current_thread", unhandled_panic = "ignore", crate = "tokio1")]
async fn ignoring_a_panicking_task() -> bool {
    tokio1::spawn(async { panic!("the spawned task's own panic") })
        .await
        .unwrap_err()
        .is_panic()
}

#[pinwatch::main(flavor = "multi_thread", worker_threads = 1, name = "by-the-attribute", crate = "tokio1")]
async fn named() -> Option<String> {
    tokio1::runtime::Handle::current().name().map(str::to_owned)
}

mod reexported {
    pub use ::pinwatch as watcher;
}

#[reexported::watcher::main(pinwatch_crate = "reexported::watcher", flavor = "current_thread")]
async fn through_a_reexport() -> Result<u8, String> {
    Ok(1)
}

fn main() {
    // No control socket for these short runtimes; no backtrace for the task that panics on
    // purpose.
    std::env::set_var("PINWATCH_CONTROL", "off");
    std::env::set_var("RUST_BACKTRACE", "0");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(
        default_flavor(),
        (tokio1::runtime::RuntimeFlavor::MultiThread, cores)
    );
    assert_eq!(three_workers(), 3);
    assert!(paused() >= Duration::from_secs(3600));
    assert_eq!(local(), 6);
    let panic = std::panic::catch_unwind(shut_down_by_a_panicking_task).unwrap_err();
    let msg = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    assert!(msg.contains("configured to shut down on unhandled panic"), "{msg}");
    assert!(ignoring_a_panicking_task());
    assert_eq!(named().as_deref(), Some("by-the-attribute"));
    assert_eq!(through_a_reexport(), Ok(1));
}
