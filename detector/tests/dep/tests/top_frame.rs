//! A pin inside a dependency's inlined generic `async fn`: the top frame is the dependency's
//! blocking line, named with its path.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pinwatch::{PinnedEvent, Stacks, State};

#[test]
fn the_top_frame_is_the_dependencys_blocking_line_with_a_qualified_name() {
    let events: Arc<Mutex<Vec<PinnedEvent>>> = Arc::default();
    let sink = Arc::clone(&events);
    let mut tokio = tokio::runtime::Builder::new_multi_thread();
    tokio.worker_threads(2).enable_all();
    let (rt, detector) = pinwatch::Builder::new()
        .tracing(false)
        .stacks(Stacks::Full)
        .sink(move |e: &PinnedEvent| sink.lock().unwrap().push(e.clone()))
        .build(&mut tokio)
        .expect("pinwatch runtime");
    let task = rt.spawn(async {
        let s = dep::Session::new(String::from("db:5432"), Duration::from_millis(150)).await;
        s.addr.len()
    });
    let id: u64 = task.id().to_string().parse().unwrap();
    assert_eq!(rt.block_on(task).unwrap(), 7);
    drop(rt);
    detector.shutdown();
    let all = events.lock().unwrap().clone();
    let e = all
        .iter()
        .find(|e| e.state == State::Completed && e.task_id == Some(id))
        .unwrap_or_else(|| panic!("no completed event for task {id}: {all:#?}"));
    let top = e
        .top_frame
        .as_ref()
        .unwrap_or_else(|| panic!("no top frame: {e:#?}"));
    assert!(
        top.file
            .as_deref()
            .is_some_and(|f| f.ends_with("dep/src/lib.rs")),
        "the top frame is not the dependency's: {top:?} in {e:#?}"
    );
    assert_eq!(top.line, Some(dep::BLOCKING_LINE), "{e:#?}");
    // Debug info names the inlined body `{async_fn#0}<alloc::string::String>`: no path, and a
    // line-tables-only build keeps no namespaces (nor a symbol for an inlined body) to say
    // `Session::new`. The crate comes from the file.
    let name = top.function.as_deref().unwrap_or_default();
    assert_eq!(
        name, "dep::{async_fn#0}",
        "the top frame's name is not qualified: {e:#?}"
    );
}
