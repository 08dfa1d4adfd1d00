//! The first pin of a process: its report does not wait for (nor hold in memory) the whole
//! debug info. Run in a child process (this test binary, re-executed) so that its pin is the
//! very first of the process, with nothing symbolized before.

mod support;

use std::sync::mpsc;
use std::time::Duration;

use pinwatch::{PinnedEvent, Stacks, State};

const CHILD: &str = "PINWATCH_TEST_FIRST_PIN_CHILD";

/// `RssAnon` and `VmRSS` of this process, in KiB.
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/self/status"))
    };
    (field("RssAnon:"), field("VmRSS:"))
}

/// The size of this executable's `.debug_*` sections, in KiB (read from its ELF section
/// headers).
fn debug_info_kib() -> u64 {
    let exe = std::fs::read("/proc/self/exe").unwrap();
    let u16_at = |o: usize| u16::from_le_bytes(exe[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(exe[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(exe[o..o + 8].try_into().unwrap()) as usize;
    assert_eq!(&exe[..5], b"\x7fELF\x02", "a 64-bit ELF");
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let section = |i: usize| shoff + i * shentsize;
    let names = u64_at(section(shstrndx) + 0x18);
    let mut total = 0;
    for i in 0..shnum {
        let s = section(i);
        let name = &exe[names + u32_at(s)..];
        let name = &name[..name.iter().position(|&b| b == 0).unwrap()];
        if name.starts_with(b".debug_") {
            total += u64_at(s + 0x20);
        }
    }
    total as u64 / 1024
}

#[test]
fn the_first_report_reads_only_the_debug_info_it_shows() {
    let out = support::rerun("first_pin_child", CHILD).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| Some(l.split_once("first pin: ")?.1))
        .unwrap_or_else(|| panic!("no result from the child:\n{stdout}"));
    let value = |key: &str| -> u64 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {line:?}"))
    };
    let (anon, rss, debug) = (value("anon_kib"), value("rss_kib"), value("debug_kib"));
    // Resolving the first pin's stack all at once (backtrace's whole-file Context, every
    // unit it touched parsed whole, libc's separate debug info decompressed) added 40+ MiB of
    // anonymous memory and mapped most of the debug info. The lazy resolver adds ~2 MiB in a
    // debug build; the bound is issue 22's goal (8 MiB), far below what the whole debug info
    // takes.
    assert!(
        anon <= 8 * 1024,
        "the first report added {anon} KiB of anonymous memory ({line})"
    );
    // Nor does it keep the debug info it read resident (file pages included).
    assert!(
        rss < debug / 4,
        "the first report added {rss} KiB resident, of {debug} KiB of debug info ({line})"
    );
}

/// The child's half (does nothing unless the test above started it).
#[test]
fn first_pin_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let (tx, rx) = mpsc::channel();
    let sink = move |e: &PinnedEvent| {
        if e.state == State::InProgress {
            // The memory as the first report reaches a sink, before anything else runs.
            let _ = tx.send((memory(), e.clone()));
        }
    };
    let mut tokio = tokio::runtime::Builder::new_multi_thread();
    tokio.worker_threads(2).enable_all();
    let (rt, detector) = pinwatch::Builder::new()
        .tracing(false)
        .stacks(Stacks::Full)
        .sink(sink)
        .build(&mut tokio)
        .unwrap();
    let debug = debug_info_kib();
    // Settle: the runtime's and the detector's threads have started and allocated.
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(200)).await });
    let (before_tx, before_rx) = mpsc::channel();
    let line = line!() + 3;
    let pin = rt.spawn(async move {
        let _ = before_tx.send(memory());
        std::thread::sleep(Duration::from_millis(300));
    });
    let before = before_rx.recv().unwrap();
    let (after, event) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("a report within 60 s");
    rt.block_on(pin).unwrap();
    drop(rt);
    drop(detector);
    // The frames are complete: the blocking line, std's sleep, libc's (named from its symbol
    // table).
    let top = event.top_frame.as_ref().expect("a top frame");
    assert!(
        top.file
            .as_deref()
            .is_some_and(|f| f.ends_with("first_pin.rs"))
            && top.line == Some(line),
        "{top:?} (line {line})\n{:#?}",
        event.stack
    );
    let names: Vec<&str> = event
        .stack
        .iter()
        .filter_map(|f| f.function.as_deref())
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("std::thread::")),
        "{names:#?}"
    );
    assert!(names.iter().any(|n| n.contains("nanosleep")), "{names:#?}");
    println!(
        "first pin: anon_kib={} rss_kib={} debug_kib={debug}",
        after.0.saturating_sub(before.0),
        after.1.saturating_sub(before.1),
    );
}
