//! `#[pinwatch::test]` in a user's crate. The tests named `fails_*` fail on purpose.

use std::time::Duration;

#[pinwatch::test]
async fn passes_when_nothing_blocks() {
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(tokio::spawn(pinning_tests::lookup()).await.unwrap(), 42);
}

#[pinwatch::test]
async fn fails_blocking_in_the_body() {
    let n = pinning_tests::slow_lookup(); // blocks the test's own thread: the body is watched
    assert_eq!(n, 42);
}

#[pinwatch::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_blocking_in_a_task() {
    let n = tokio::spawn(async { pinning_tests::slow_lookup() }).await.unwrap();
    assert_eq!(n, 42);
}

#[pinwatch::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_with_spawn_blocking() {
    assert_eq!(pinning_tests::lookup().await, 42);
}

#[pinwatch::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_with_block_in_place() {
    let n = tokio::spawn(async { tokio::task::block_in_place(pinning_tests::slow_lookup) })
        .await
        .unwrap();
    assert_eq!(n, 42);
}

#[pinwatch::test(allow = "sleep")]
async fn passes_when_the_reason_is_allowed() {
    pinning_tests::slow_lookup();
}

#[pinwatch::test(threshold = "2s")]
async fn passes_under_a_higher_threshold() {
    pinning_tests::slow_lookup();
}

#[pinwatch::test]
async fn fails_on_its_own_and_pinned_too() {
    pinning_tests::slow_lookup();
    panic!("the test's own failure");
}

/// Fifty tests at once, each on its own watched runtime; one of them pins.
macro_rules! crowd {
    ($($name:ident)*) => {$(
        #[pinwatch::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(10)).await;
                tokio::spawn(async {}).await.unwrap();
            }
        }
    )*};
}

crowd!(
    crowd_01 crowd_02 crowd_03 crowd_04 crowd_05 crowd_06 crowd_07 crowd_08 crowd_09 crowd_10
    crowd_11 crowd_12 crowd_13 crowd_14 crowd_15 crowd_16 crowd_17 crowd_18 crowd_19 crowd_20
    crowd_21 crowd_22 crowd_23 crowd_24 crowd_25 crowd_26 crowd_27 crowd_28 crowd_29 crowd_30
    crowd_31 crowd_32 crowd_33 crowd_34 crowd_35 crowd_36 crowd_37 crowd_38 crowd_39 crowd_40
    crowd_41 crowd_42 crowd_43 crowd_44 crowd_45 crowd_46 crowd_47 crowd_48 crowd_49
);

#[pinwatch::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_crowd_50_pins() {
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::spawn(async { pinning_tests::slow_lookup() }).await.unwrap();
}

/// With `pinwatch::tracing_layer()` in the test's subscriber, the failure names the span the
/// pin was in (docs/testing.md). A thread's default subscriber: the span carries it to the worker
/// that polls the task.
#[pinwatch::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_in_a_request_span() {
    use tracing::Instrument as _;
    use tracing_subscriber::prelude::*;
    let _subscriber = tracing::subscriber::set_default(
        tracing_subscriber::registry().with(pinwatch::tracing_layer()),
    );
    let span = tracing::info_span!("request", method = "GET", uri = "/orders/7");
    let n = tokio::spawn(async { pinning_tests::slow_lookup() }.instrument(span))
        .await
        .unwrap();
    assert_eq!(n, 42);
}
