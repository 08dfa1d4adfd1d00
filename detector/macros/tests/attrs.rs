//! `#[pinwatch::test]` with each of `#[tokio::test]`'s arguments: each does what it says on a
//! real runtime. tokio is a dependency under another name here (`tokio1`), as a user who renamed
//! it has it: the attribute needs no crate called `tokio` (and `crate = "tokio1"` names it).

use std::time::Duration;

#[pinwatch::test(start_paused = true)]
async fn start_paused_pauses_tokio_s_clock() {
    let start = tokio1::time::Instant::now();
    let wall = std::time::Instant::now();
    // A paused clock jumps to the next timer when the runtime idles.
    tokio1::time::sleep(Duration::from_secs(3600)).await;
    assert!(start.elapsed() >= Duration::from_secs(3600));
    assert!(
        wall.elapsed() < Duration::from_secs(600),
        "{:?}",
        wall.elapsed()
    );
}

#[pinwatch::test(flavor = "current_thread", start_paused = false)]
async fn start_paused_false_leaves_the_clock_running() {
    let start = tokio1::time::Instant::now();
    let wall = std::time::Instant::now();
    tokio1::time::sleep(Duration::from_millis(30)).await;
    assert!(wall.elapsed() >= Duration::from_millis(30));
    assert!(start.elapsed() >= Duration::from_millis(30));
}

#[pinwatch::test(flavor = "multi_thread", worker_threads = 3)]
async fn worker_threads_3_makes_3_workers() {
    let h = tokio1::runtime::Handle::current();
    assert_eq!(
        h.runtime_flavor(),
        tokio1::runtime::RuntimeFlavor::MultiThread
    );
    assert_eq!(h.metrics().num_workers(), 3);
}

#[pinwatch::test(flavor = "multi_thread")]
async fn multi_thread_alone_has_tokio_s_default_workers() {
    let h = tokio1::runtime::Handle::current();
    assert_eq!(
        h.runtime_flavor(),
        tokio1::runtime::RuntimeFlavor::MultiThread
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(h.metrics().num_workers(), cores);
}

#[pinwatch::test]
async fn the_default_is_current_thread_as_tokio_test() {
    let h = tokio1::runtime::Handle::current();
    assert_eq!(
        h.runtime_flavor(),
        tokio1::runtime::RuntimeFlavor::CurrentThread
    );
}

#[pinwatch::test(flavor = "local")]
async fn flavor_local_is_a_local_runtime_spawn_local_runs_a_non_send_future() {
    let shared = std::rc::Rc::new(std::cell::Cell::new(0));
    let s = shared.clone();
    tokio1::task::spawn_local(async move { s.set(7) })
        .await
        .unwrap();
    assert_eq!(shared.get(), 7);
}

// The threshold: with RUST_BACKTRACE set, the panic hook symbolizes its backtrace inside the
// task's poll, for longer than 20 ms in a debug build (issue 26, item 2, not this test's concern).
#[pinwatch::test(unhandled_panic = "shutdown_runtime", threshold = "60s")]
#[should_panic(
    expected = "a spawned task panicked and the runtime is configured to shut down on unhandled panic"
)]
async fn unhandled_panic_shutdown_runtime_a_panicking_task_shuts_the_runtime_down() {
    tokio1::spawn(async { panic!("the spawned task's own panic") });
    // Never wakes: only the runtime's shutdown ends the body.
    std::future::pending::<()>().await;
}

#[pinwatch::test(unhandled_panic = "ignore", threshold = "60s")]
async fn unhandled_panic_ignore_a_panicking_task_is_its_join_handle_s_error() {
    let err = tokio1::spawn(async { panic!("the spawned task's own panic") })
        .await
        .unwrap_err();
    assert!(err.is_panic());
}

#[pinwatch::test(crate = "tokio1", name = "named-by-the-attribute")]
async fn crate_names_the_renamed_tokio_and_name_names_the_runtime() {
    assert_eq!(
        tokio1::runtime::Handle::current().name(),
        Some("named-by-the-attribute")
    );
}

mod reexported {
    /// A crate that re-exports pinwatch (an in-house wrapper) names it with `pinwatch_crate`.
    pub use ::pinwatch as watcher;
}

#[reexported::watcher::test(pinwatch_crate = "reexported::watcher", threshold = "40ms")]
async fn pinwatch_crate_names_a_reexported_pinwatch() {
    tokio1::task::yield_now().await;
}

/// A test that pins still fails with tokio's options given (the check is not lost).
#[pinwatch::test(
    flavor = "current_thread",
    start_paused = true,
    unhandled_panic = "ignore"
)]
#[should_panic(expected = "pinned a worker")]
async fn a_pin_still_fails_the_test_with_tokio_s_options() {
    std::thread::sleep(Duration::from_millis(200));
}

/// A `LocalRuntime`'s `spawn_local` tasks run tokio's poll hooks: a pin in one fails the test.
#[pinwatch::test(flavor = "local")]
#[should_panic(expected = "pinned a worker")]
async fn flavor_local_a_pin_in_a_spawn_local_task_fails_the_test() {
    let not_send = std::rc::Rc::new(());
    tokio1::task::spawn_local(async move {
        let _keep = not_send;
        std::thread::sleep(Duration::from_millis(200));
    })
    .await
    .unwrap();
}

/// An inner attribute of the body (`#![…]`) is the function's, as with tokio's attributes: it
/// is moved out in front of the function (left in place, `#![…]` before `fn` is refused).
#[pinwatch::test]
async fn an_inner_attribute_of_the_body_applies_to_the_function() {
    #![allow(unused_variables)]
    let unused = tokio1::task::yield_now().await;
}

mod inner_attribute_main {
    /// The same for `#[pinwatch::main]`.
    #[pinwatch::main(flavor = "current_thread")]
    pub async fn run() -> u32 {
        #![allow(unused_variables)]
        let unused = tokio1::task::yield_now().await;
        7
    }

    #[test]
    fn runs() {
        assert_eq!(run(), 7);
    }
}

/// Each accepted form of `#[pinwatch::main]` on a function of its own, run by a test: it does
/// what it says (built by the tests' own build: `ui/` holds only what must fail to compile, so
/// trybuild checks it without building and linking a second copy of the dependencies).
mod main_forms {
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
        tokio1::task::spawn_local(async move { *m + 1 })
            .await
            .unwrap()
    }

    #[pinwatch::main(flavor = "current_thread", unhandled_panic = "shutdown_runtime")]
    async fn shut_down_by_a_panicking_task() {
        tokio1::spawn(async { panic!("the spawned task's own panic") });
        std::future::pending::<()>().await;
    }

    #[pinwatch::main(
        flavor = "current_thread",
        unhandled_panic = "ignore",
        crate = "tokio1"
    )]
    async fn ignoring_a_panicking_task() -> bool {
        tokio1::spawn(async { panic!("the spawned task's own panic") })
            .await
            .unwrap_err()
            .is_panic()
    }

    #[pinwatch::main(
        flavor = "multi_thread",
        worker_threads = 1,
        name = "by-the-attribute",
        crate = "tokio1"
    )]
    async fn named() -> Option<String> {
        tokio1::runtime::Handle::current().name().map(str::to_owned)
    }

    mod reexported {
        pub use ::pinwatch as watcher;
    }

    #[self::reexported::watcher::main(
        pinwatch_crate = "self::reexported::watcher",
        flavor = "current_thread"
    )]
    async fn through_a_reexport() -> Result<u8, String> {
        Ok(1)
    }

    #[test]
    fn the_default_is_multi_thread_with_a_worker_per_core() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(
            default_flavor(),
            (tokio1::runtime::RuntimeFlavor::MultiThread, cores)
        );
    }

    #[test]
    fn worker_threads_3() {
        assert_eq!(three_workers(), 3);
    }

    #[test]
    fn start_paused() {
        assert!(paused() >= Duration::from_secs(3600));
    }

    #[test]
    fn flavor_local_runs_a_local_task() {
        assert_eq!(local(), 6);
    }

    #[test]
    #[should_panic(expected = "configured to shut down on unhandled panic")]
    fn unhandled_panic_shutdown_runtime() {
        shut_down_by_a_panicking_task();
    }

    #[test]
    fn unhandled_panic_ignore() {
        assert!(ignoring_a_panicking_task());
    }

    #[test]
    fn name_and_crate() {
        assert_eq!(named().as_deref(), Some("by-the-attribute"));
    }

    #[test]
    fn pinwatch_crate_through_a_reexport() {
        assert_eq!(through_a_reexport(), Ok(1));
    }
}

/// `allow` takes every reason pinwatch reports, by the name recordings use: were one missing
/// from the attribute's list, this would not compile. The pin here is allowed.
#[pinwatch::test(allow = "cpu, sleep, io, dns, lock_wait, lock_held, once_init, once_wait, other")]
async fn allow_takes_every_reason() {
    std::thread::sleep(Duration::from_millis(60));
}

/// The list above is every reason there is: a reason added to `Reason::ALL` fails here until
/// it is added above (and to the attribute's list).
#[test]
fn the_allow_list_above_is_every_reason() {
    let names: Vec<&str> = pinwatch::Reason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        names.join(", "),
        "cpu, sleep, io, dns, lock_wait, lock_held, once_init, once_wait, other"
    );
}
