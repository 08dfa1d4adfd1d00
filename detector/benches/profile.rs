//! Cost of a pinned-time profile (`pinwatch::profile::pprof`): what `pinwatch profile` and a
//! `/debug/pprof/pinned` scrape pay. Builds the profile of N pins with full stacks (40 frames
//! drawn from 400 functions, 4 reasons, 32 spans) and prints the time to build it and to encode and gzip it, the
//! events' size as a recording, and the profile's size.
//!
//! `cargo bench -p pinwatch --bench profile`

use std::time::Instant;

use pinwatch::profile::{self, Options};
use pinwatch::PinnedEvent;

/// Pin `i` as a recording line: a full stack of 40 frames.
fn line(i: usize) -> String {
    let mut x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let frames: Vec<String> = (0..40)
        .map(|k| {
            let f = next() % 400;
            format!(
                r#"{{"function":"svc::module{}::function_{f}::{{{{closure}}}}","file":"src/module{}.rs","line":{}}}"#,
                f % 20,
                f % 20,
                10 + k
            )
        })
        .collect();
    let reason = ["sleep", "io", "lock_held", "cpu"][i % 4];
    let start_us = 1_800_000_000_000_000u64 + i as u64 * 10_000;
    let start = humantime::format_rfc3339_micros(
        std::time::UNIX_EPOCH + std::time::Duration::from_micros(start_us),
    );
    format!(
        r#"{{"schema":2,"event":"pinned","id":{i},"run_id":"r","pid":1,"state":"completed","start":"{start}","duration_ms":{}.5,"threshold_ms":20.0,"task_id":{i},"spawned_at":{{"file":"src/main.rs","line":9,"column":5}},"worker":{{"index":0,"tid":1,"name":"w"}},"reason":"{reason}","blocking_operation":"read","top_frame":{},"stack":[{}],"held_locks":[],"samples":1,"report":1,"spans":[{{"name":"request","target":"svc","fields":{{"http.route":"/r/{}"}}}}]}}"#,
        20 + i % 200,
        frames[0],
        frames.join(","),
        i % 32
    )
}

fn main() {
    println!(
        "pins    | recording | build      | gzip      | per pin   | profile (gzipped) | samples"
    );
    println!(
        "------- | --------- | ---------- | --------- | --------- | ----------------- | -------"
    );
    for n in [1_000usize, 10_000, 100_000] {
        let lines: Vec<String> = (0..n).map(line).collect();
        let bytes: usize = lines.iter().map(|l| l.len() + 1).sum();
        let events: Vec<PinnedEvent> = lines
            .iter()
            .map(|l| PinnedEvent::from_json_line(l).expect("a pinned line"))
            .collect();
        // Best of 3, building (`build`) and encoding (`encode`: protobuf and gzip) apart.
        let (mut build, mut gzip) = (std::time::Duration::MAX, std::time::Duration::MAX);
        let mut out = Vec::new();
        for _ in 0..3 {
            let t = Instant::now();
            let p = profile::build(&events, &Options::default());
            build = build.min(t.elapsed());
            let t = Instant::now();
            out = profile::encode(&p);
            gzip = gzip.min(t.elapsed());
        }
        let samples = profile::decode(&out).expect("reads back").sample.len();
        println!(
            "{n:>7} | {:>5.1} MiB | {:>7.1} ms | {:>6.1} ms | {:>6.1} µs | {:>13.1} KiB | {samples}",
            bytes as f64 / (1 << 20) as f64,
            build.as_secs_f64() * 1e3,
            gzip.as_secs_f64() * 1e3,
            (build + gzip).as_secs_f64() * 1e6 / n as f64,
            out.len() as f64 / 1024.0,
        );
    }
}
