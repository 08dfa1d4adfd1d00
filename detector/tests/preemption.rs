//! A worker the kernel preempts is late, not pinned. The worker and three CPU hogs share one
//! CPU (affinity), so each short poll takes about four times its CPU time in wall time; none is
//! reported. A poll that is long on its own is still reported, with the time it waited for the
//! CPU in `cpu_wait`.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn first_allowed_cpu() -> usize {
    // SAFETY: `set` is a plain bitmask filled by the kernel.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer and size; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    assert_eq!(rc, 0);
    // SAFETY: CPU_ISSET reads the mask.
    (0..libc::CPU_SETSIZE as usize)
        .find(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .unwrap()
}

fn pin_current_thread(cpu: usize) {
    // SAFETY: zeroed cpu_set_t is the empty set; CPU_SET writes inside it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: valid pointer and size; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    assert_eq!(
        rc,
        0,
        "sched_setaffinity: {}",
        std::io::Error::last_os_error()
    );
}

#[test]
fn preempted_polls_are_not_pinned_but_long_ones_still_are() {
    let cpu = first_allowed_cpu();
    let stop = Arc::new(AtomicBool::new(false));
    let hogs: Vec<_> = (0..3)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                pin_current_thread(cpu);
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            })
        })
        .collect();

    let events = support::Collected::default();
    let mut tokio = tokio::runtime::Builder::new_multi_thread();
    tokio
        .worker_threads(1)
        .enable_all()
        .on_thread_start(move || pin_current_thread(cpu));
    let rt = support::watch(support::builder(&events), &mut tokio);

    let worst_wall = rt
        .block_on(rt.spawn(async {
            let mut worst = Duration::ZERO;
            for _ in 0..20 {
                worst = worst.max(support::spin_cpu(Duration::from_millis(6)));
                tokio::task::yield_now().await;
            }
            worst
        }))
        .unwrap();
    let short_polls = rt.stats().pinned_polls;
    let long = rt.spawn(async { support::spin_cpu(Duration::from_millis(60)) });
    let long_id: u64 = long.id().to_string().parse().unwrap();
    let long_wall = rt.block_on(long).unwrap();
    stop.store(true, Ordering::Relaxed);
    for h in hogs {
        h.join().unwrap();
    }
    rt.shutdown();

    // The contention was real: a 6 ms poll took well over the 20 ms threshold in wall time.
    assert!(worst_wall > Duration::from_millis(25), "{worst_wall:?}");
    assert_eq!(short_polls, 0, "{:#?}", events.all());
    let e = events
        .completed()
        .into_iter()
        .find(|e| e.task_id == Some(long_id))
        .unwrap_or_else(|| panic!("the 60 ms poll was not reported: {:#?}", events.all()));
    assert!(e.duration >= long_wall, "{e:#?}");
    assert!(e.cpu_wait > Duration::from_millis(20), "{e:#?}");
    assert_eq!(e.reason, Some(pinwatch::Reason::Cpu), "{e:#?}");
}
