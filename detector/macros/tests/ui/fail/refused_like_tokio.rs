//! What `#[tokio::main]` / `#[tokio::test]` refuse, refused with tokio's words.

#[pinwatch::main(flavor = "multi_thread", start_paused = true)]
async fn paused_multi_thread() {}

#[pinwatch::test(flavor = "multi_thread", unhandled_panic = "shutdown_runtime")]
async fn unhandled_panic_multi_thread() {}

#[pinwatch::main(flavor = "current_thread", worker_threads = 2)]
async fn workers_on_current_thread() {}

#[pinwatch::test(flavor = "local", worker_threads = 2)]
async fn workers_on_local() {}

#[pinwatch::main(worker_threads = 0)]
async fn no_workers() {}

#[pinwatch::main(flavor = "fast")]
async fn unknown_flavor() {}

#[pinwatch::main(flavor = "threaded_scheduler")]
async fn old_flavor() {}

#[pinwatch::test(flavor = "current_thread", flavor = "multi_thread")]
async fn flavor_twice() {}

#[pinwatch::main(start_paused = true, start_paused = false)]
async fn start_paused_twice() {}

#[pinwatch::main(unhandled_panic = "abort")]
async fn unknown_unhandled_panic() {}

#[pinwatch::main(start_paused = "yes")]
async fn not_a_bool() {}

#[pinwatch::main(crate = "not a path")]
async fn not_a_path() {}

#[pinwatch::main(multi_thread)]
async fn bare_flavor() {}

#[pinwatch::main(core_threads = 2)]
async fn core_threads() {}

#[pinwatch::main(threshold = "50ms")]
async fn threshold_is_for_tests() {}

#[pinwatch::test(retries = 3)]
async fn unknown_argument() {}

#[pinwatch::main]
fn not_async() {}

#[pinwatch::test]
#[test]
async fn second_test_attribute() {}

fn main() {}
