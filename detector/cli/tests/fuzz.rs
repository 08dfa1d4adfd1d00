//! Every reader of a recording against crafted input (a recording may come from another
//! machine): the line parser, the recording parser, `print`, `summary`, the HTML report, the
//! pprof profile and the `ctl` reply parser, run in-process on lines mutated from the checked-in recordings. None may
//! panic, and the page never holds a raw string of the input.
//!
//! A seeded xorshift mutator (no dependency): `PINWATCH_FUZZ_SEED=N` and
//! `PINWATCH_FUZZ_CASES=N` replay or widen a run; a failure names its seed and case.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pinwatch::recording;
use pinwatch::PinnedEvent;
use serde_json::{json, Map, Value};

/// Lines of a recording rendered together (print, summary, page) per batch.
const BATCH: usize = 200;
/// What every string the mutator writes carries: the page must never hold it raw.
const MARK: &str = "<x-raw-MARK>";
/// The raw form of [`MARK`] that must not appear in a page.
const RAW: &str = "<x-raw-";

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The checked-in recordings' lines, as JSON objects.
fn seeds() -> Vec<Value> {
    let text = [
        include_str!("data/recording.jsonl"),
        include_str!("data/report-small.jsonl"),
        include_str!("data/victims.jsonl"),
    ]
    .concat();
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            // Most stacks cut to a few frames: the mutator's time goes to the fields, not to
            // copying frames (a debug build's serde_json is slow).
            if i % 8 != 0 {
                if let Some(stack) = v["stack"].as_array_mut() {
                    stack.truncate(3);
                }
            }
            v
        })
        .collect()
}

/// Numbers at and past the edges of every numeric field's type.
fn number(rng: &mut Rng) -> Value {
    match rng.below(22) {
        0 => json!(1e300),
        1 => json!(-1),
        2 => json!(-0.0),
        3 => json!(f64::MAX),
        4 => json!(5e-324),
        5 => json!(u64::MAX),
        6 => json!(i64::MIN),
        7 => json!(u32::MAX as u64 + 1),
        8 => json!(i32::MAX as u64 + 1),
        9 => json!(0),
        10 => json!(1.8446744073709552e22),
        11 => json!(1.844674407370955e22),
        12 => json!(1.8446744073709552e19),
        13 => json!(-1e-300),
        14 => json!(0.5),
        15 => json!(253_402_300_799_999.0_f64),
        16 => json!(u32::MAX),
        17 => json!(i32::MIN),
        18 => json!(1e15),
        19 => json!(usize::MAX),
        _ => json!(rng.next() >> rng.below(64)),
    }
}

/// Strings that each carry [`MARK`], with what breaks HTML, JSON in a script, terminals,
/// folded stacks (`;`, a trailing ` N`), and char boundaries.
fn string(rng: &mut Rng) -> Value {
    let parts = [
        "<!--<script>",
        "</script>",
        "\"><img src=x onerror=alert(1)>",
        "'",
        "&amp;",
        "\u{2028}\u{2029}",
        "\u{1b}[2J\u{1b}]0;title\u{7}",
        "\n}\npinwatch.Pinned {\n",
        "\r",
        "\u{202e}",
        "é日本🦀",
        "a;b;c",
        " 123",
        "{{closure}}",
        "\u{0}",
        "\\",
        "",
        "-",
    ];
    let mut s = String::from(MARK);
    for _ in 0..rng.below(4) {
        let part: &&str = rng.pick(&parts);
        s.push_str(part);
    }
    if rng.below(500) == 0 {
        s.push_str(&"🦀x".repeat(rng.below(5000)));
    }
    if rng.chance(50) {
        s.push_str(MARK);
    }
    Value::String(s)
}

/// Times at the edges of what RFC 3339 and `SystemTime` hold, and broken ones.
fn time(rng: &mut Rng) -> Value {
    let times = [
        "9999-12-31T23:59:59.999999Z",
        "1970-01-01T00:00:00Z",
        "1969-12-31T23:59:59Z",
        "2026-02-30T00:00:00Z",
        "2026-11-30T10:00:00.00000000000000000000001Z",
        "2026-11-30T10:00:00+00:00",
        "2026-11-30T10:00:00.+00:00",
        "2026-11-30T10:00:60Z",
        "2026-11-30 10:00:00Z",
        "99999-01-01T00:00:00Z",
        "2026-11-30T10:00:00é",
        "日本日本日本日本日本日本日本",
        "",
    ];
    json!(rng.pick(&times))
}

fn any_value(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth > 3 { 6 } else { 9 }) {
        0 | 1 => number(rng),
        2 | 3 => string(rng),
        4 => time(rng),
        5 => rng.pick(&[Value::Null, json!(true), json!(false)]).clone(),
        6 => Value::Array(
            (0..rng.below(4))
                .map(|_| any_value(rng, depth + 1))
                .collect(),
        ),
        7 => {
            let mut m = Map::new();
            for _ in 0..rng.below(4) {
                let k = rng.pick(FIELDS).to_string();
                m.insert(k, any_value(rng, depth + 1));
            }
            Value::Object(m)
        }
        _ => json!(rng.pick(ENUMS)),
    }
}

/// Every field name of an event and its parts.
const FIELDS: &[&str] = &[
    "schema",
    "event",
    "id",
    "run_id",
    "pid",
    "state",
    "start",
    "duration_ms",
    "threshold_ms",
    "task_id",
    "block_on",
    "spawned_at",
    "worker",
    "index",
    "tid",
    "name",
    "reason",
    "other_reasons",
    "blocking_operation",
    "top_frame",
    "function",
    "file",
    "line",
    "column",
    "locks",
    "profile",
    "frame",
    "samples",
    "no_stack",
    "stack",
    "held_locks",
    "kind",
    "acquired_at",
    "lock_holder",
    "report",
    "cpu_wait_ms",
    "runtime_stalled",
    "heartbeat_late_ms",
    "tasks_queued_behind",
];

/// Every value of the enumerations (states, reasons) and the `event` tag.
const ENUMS: &[&str] = &[
    "in_progress",
    "completed",
    "retracted",
    "cpu",
    "sleep",
    "io",
    "dns",
    "lock_wait",
    "lock_held",
    "once_init",
    "once_wait",
    "other",
    "pinned",
];

/// A value of the right shape for `key`, at an edge.
fn value_for(rng: &mut Rng, key: &str) -> Value {
    let frame = |rng: &mut Rng| {
        json!({"function": string(rng), "file": string(rng), "line": number(rng),
               "locks": number(rng)})
    };
    let place =
        |rng: &mut Rng| json!({"file": string(rng), "line": number(rng), "column": number(rng)});
    let worker =
        |rng: &mut Rng| json!({"index": number(rng), "tid": number(rng), "name": string(rng)});
    match key {
        "start" => time(rng),
        "state" | "reason" => json!(rng.pick(ENUMS)),
        "other_reasons" => json!([rng.pick(ENUMS), rng.pick(ENUMS)]),
        "run_id" | "blocking_operation" | "no_stack" | "kind" | "name" | "function" | "file" => {
            string(rng)
        }
        "block_on" | "runtime_stalled" => json!(rng.chance(80)),
        "spawned_at" | "acquired_at" => place(rng),
        "worker" => worker(rng),
        "top_frame" | "frame" => frame(rng),
        "stack" => {
            // Past `DETAIL_FRAMES` now and then.
            let n = if rng.chance(5) { 60 } else { 4 };
            Value::Array((0..rng.below(n)).map(|_| frame(rng)).collect())
        }
        "profile" => Value::Array(
            (0..rng.below(4))
                .map(|_| json!({"frame": frame(rng), "samples": number(rng)}))
                .collect(),
        ),
        "held_locks" => Value::Array(
            (0..rng.below(3))
                .map(|_| json!({"kind": string(rng), "acquired_at": place(rng)}))
                .collect(),
        ),
        "lock_holder" => json!({"worker": worker(rng), "acquired_at": place(rng)}),
        _ => number(rng),
    }
}

/// Replaces a random value somewhere in `v` (any depth) with `any_value`.
fn replace_somewhere(rng: &mut Rng, v: &mut Value) {
    match v {
        Value::Object(m) if !m.is_empty() && rng.chance(70) => {
            let k = m.keys().nth(rng.below(m.len())).unwrap().clone();
            replace_somewhere(rng, m.get_mut(&k).unwrap());
        }
        Value::Array(a) if !a.is_empty() && rng.chance(70) => {
            let i = rng.below(a.len());
            replace_somewhere(rng, &mut a[i]);
        }
        _ => *v = any_value(rng, 0),
    }
}

/// Sets every string somewhere in `v` to a marked one (the page must escape them all).
fn mark_strings(rng: &mut Rng, v: &mut Value) {
    match v {
        Value::String(s) if rng.chance(30) => *s = string(rng).as_str().unwrap().to_owned(),
        Value::Object(m) => m.values_mut().for_each(|v| mark_strings(rng, v)),
        Value::Array(a) => a.iter_mut().for_each(|v| mark_strings(rng, v)),
        _ => {}
    }
}

/// One structured mutation of an event object.
fn mutate_value(rng: &mut Rng, v: &mut Value) {
    let Value::Object(m) = v else {
        *v = any_value(rng, 0);
        return;
    };
    match rng.below(10) {
        // A field of the event set to an edge value of its type.
        0..=3 => {
            let k = *rng.pick(FIELDS);
            let new = value_for(rng, k);
            m.insert(k.to_owned(), new);
        }
        4 => {
            let k = *rng.pick(FIELDS);
            m.remove(k);
        }
        5 | 6 => replace_somewhere(rng, v),
        7 => mark_strings(rng, v),
        8 => {
            m.insert("schema".into(), json!(rng.below(4)));
        }
        _ => {
            m.insert("event".into(), json!(rng.pick(ENUMS)));
        }
    }
}

/// Character-level damage to a line: what a torn write, a bad disk or a hand edit leaves.
fn mutate_text(rng: &mut Rng, line: &str) -> String {
    const ALPHABET: &[char] = &[
        '{', '}', '[', ']', '"', ':', ',', '.', '-', '+', 'e', 'E', '0', '1', '9', '\\', 'u', ' ',
        'n', 'l', 't', '<', '>', '&', ';', '\u{2028}', 'é', '🦀', '\u{1b}', '\n',
    ];
    let mut chars: Vec<char> = line.chars().collect();
    for _ in 0..1 + rng.below(4) {
        let n = chars.len();
        let at = if n == 0 { 0 } else { rng.below(n + 1) };
        let alphabet = ALPHABET;
        match rng.below(6) {
            0 => chars.insert(at, *rng.pick(alphabet)),
            1 if at < n => {
                chars.remove(at);
            }
            2 if at < n => chars[at] = *rng.pick(alphabet),
            3 => chars.truncate(at),
            4 if at < n => {
                let end = (at + 1 + rng.below(40)).min(n);
                let copy: Vec<char> = chars[at..end].to_vec();
                let to = rng.below(chars.len() + 1);
                chars.splice(to..to, copy);
            }
            _ => {
                let end = (at + rng.below(20)).min(n);
                chars.drain(at..end);
            }
        }
    }
    chars.into_iter().collect()
}

/// One crafted recording line.
fn crafted_line(rng: &mut Rng, seeds: &[Value]) -> String {
    let mut v = rng.pick(seeds).clone();
    for _ in 0..1 + rng.below(4) {
        mutate_value(rng, &mut v);
    }
    let line = serde_json::to_string(&v).unwrap();
    if rng.chance(25) {
        mutate_text(rng, &line)
    } else {
        line
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "(not a string)".to_owned())
}

thread_local! {
    /// Inside [`no_panic`]: the panic is caught and reported with its input, not printed.
    static CATCHING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Where the last caught panic was, and its backtrace.
    static WHERE: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Runs `f`; a panic fails the test with `what`, the seed and the input.
fn no_panic<T>(what: &str, seed: u64, input: &dyn std::fmt::Debug, f: impl FnOnce() -> T) -> T {
    CATCHING.with(|c| c.set(true));
    let r = catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(false));
    match r {
        Ok(t) => t,
        Err(p) => panic!(
            "{what} panicked ({}) at {} with PINWATCH_FUZZ_SEED={seed} on {input:?}",
            panic_message(&*p),
            WHERE.with(|w| w.borrow().clone())
        ),
    }
}

/// Text for a terminal: no control character but the newlines the view writes.
fn assert_printable(what: &str, seed: u64, text: &str) {
    if let Some(c) = text
        .chars()
        .find(|c| (c.is_control() && *c != '\n') || ('\u{202a}'..='\u{202e}').contains(c))
    {
        let at = text.find(c).unwrap();
        let from = text[..at]
            .char_indices()
            .rev()
            .nth(80)
            .map_or(0, |(i, _)| i);
        panic!(
            "{what} printed the raw character {c:?} (PINWATCH_FUZZ_SEED={seed}): …{:?}",
            &text[from..at + c.len_utf8()]
        );
    }
}

/// The page of crafted events: no raw input string, its own script still whole.
fn assert_page_safe(seed: u64, page: &str) {
    if let Some(at) = page.find(RAW) {
        let from = page[..at]
            .char_indices()
            .rev()
            .nth(200)
            .map_or(0, |(i, _)| i);
        let to = (at + 200..page.len())
            .find(|i| page.is_char_boundary(*i))
            .unwrap_or(page.len());
        panic!(
            "the page holds a raw input string (PINWATCH_FUZZ_SEED={seed}): …{}…",
            &page[from..to]
        );
    }
    for raw in ["<!--<", "<img"] {
        assert!(!page.contains(raw), "the page holds {raw:?} (seed {seed})");
    }
    // The page's two scripts, and the flame graph's settings (inferno's, no input in it).
    let inferno = page
        .matches("<script type=\"text/ecmascript\"><![CDATA[\n        var nametype")
        .count();
    assert!(inferno <= 1);
    for tag in ["<script", "</script>"] {
        assert_eq!(
            page.matches(tag).count(),
            2 + inferno,
            "the page's own scripts only (seed {seed})"
        );
    }
    let json = page
        .split_once("<script type=\"application/json\" id=\"pins\">")
        .and_then(|(_, rest)| rest.split_once("</script>"))
        .map(|(json, _)| json)
        .expect("the pins' script");
    assert!(
        !json.contains(['<', '>', '&', '\u{2028}', '\u{2029}']),
        "markup characters in the script (seed {seed}): {json}"
    );
}

/// A `ctl status` reply with every field, as a service sends it.
fn reply_seed() -> Value {
    json!({
        "ok": true,
        "message": "status",
        "status": {
            "pid": 4242, "socket": "/tmp/pinwatch-1000/4242.sock", "command": "app --serve",
            "version": "0.1.0", "run_id": "aaaaaaaa-1111-4111-8111-111111111111",
            "uptime_ms": 12345, "built_at": "src/main.rs:10", "flavor": "multi_thread",
            "workers": 4, "settings": [["threshold", "20ms"], ["stacks", "short"]],
            "paused": false, "stacks_unavailable": null,
            "recording": {"path": "/tmp/rec.jsonl", "events": 3, "bytes": 4000,
                          "current_size": 4000, "rotations": 0, "write_errors": 0,
                          "max_size": 1000000, "max_age_ms": null, "keep": 3},
            "pinned": [{"id": 1, "for_ms": 250, "worker": 0, "tid": 99, "task_id": 7,
                        "spawned_at": "src/main.rs:3", "reason": "sleep",
                        "blocking_operation": "clock_nanosleep", "top_frame": "app::f",
                        "held_locks": 1, "runtime_stalled": true}],
            "top": [{"frame": "app::f (src/f.rs:3)", "count": 2, "longest_ms": 250.0,
                     "total_ms": 400.0, "reasons": [["sleep", 2]], "in_progress": 1,
                     "stalled": 1}],
            "counters": [["pins", 2], ["dropped", 0]]
        }
    })
}

#[test]
fn every_reader_survives_crafted_recordings() {
    let seed = env_u64("PINWATCH_FUZZ_SEED", 0x5eed_1234_abcd_ef01);
    let cases = env_u64("PINWATCH_FUZZ_CASES", 100_000) as usize;
    let seeds = seeds();
    // The panics caught are the findings, reported with their input; the default hook would
    // print each one first.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if CATCHING.with(|c| c.get()) {
            let at = format!(
                "{:?}\n{}",
                info.location(),
                std::backtrace::Backtrace::capture()
            );
            WHERE.with(|w| *w.borrow_mut() = at);
        } else {
            hook(info)
        }
    }));
    let t0 = std::time::Instant::now();

    let mut rng = Rng(seed | 1);
    let (mut parsed, mut pages) = (0usize, 0usize);
    let mut done = 0;
    while done < cases {
        let n = BATCH.min(cases - done);
        let mut text = String::new();
        let mut events: Vec<PinnedEvent> = Vec::new();
        for case in done..done + n {
            let line = if rng.chance(10) {
                // An untouched line too, so that batches hold good events among bad ones.
                serde_json::to_string(rng.pick(&seeds)).unwrap()
            } else {
                crafted_line(&mut rng, &seeds)
            };
            let what = format!("from_json_line (case {case})");
            if let Ok(e) = no_panic(&what, seed, &line, || PinnedEvent::from_json_line(&line)) {
                // What the reader read, the writer writes back readable (`print --json`).
                let back = no_panic("to_json_line", seed, &e, || e.to_json_line());
                assert!(
                    PinnedEvent::from_json_line(back.trim_end()).is_ok(),
                    "the line written back from {line:?} does not read: {back:?} (seed {seed})"
                );
                events.push(e);
            }
            text.push_str(&line);
            text.push('\n');
        }
        done += n;
        parsed += events.len();

        // Whatever the reader does with bad lines (an error, or skipping them), it does not
        // panic; the cut-off tail of a recording neither.
        let _ = no_panic("parse_recording", seed, &text, || {
            recording::parse_recording(&text, "fuzz.jsonl")
        });
        let cut = (text.len() * 2 / 3..text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(text.len());
        let _ = no_panic("parse_recording (cut)", seed, &&text[..cut], || {
            recording::parse_recording(&text[..cut], "fuzz.jsonl")
        });

        let print = no_panic("render_print", seed, &events, || {
            recording::render_print(&events)
        });
        assert_printable("print", seed, &print);
        let latest: Vec<PinnedEvent> = recording::latest_reports(&events)
            .into_iter()
            .cloned()
            .collect();
        no_panic("render_print --latest", seed, &latest, || {
            recording::render_print(&latest)
        });
        let rows = no_panic("summarize", seed, &events, || recording::summarize(&events));
        let summary = no_panic("render_summary", seed, &rows, || {
            recording::render_summary(&rows)
        });
        assert_printable("summary", seed, &summary);
        no_panic("summary --json", seed, &rows, || {
            serde_json::to_string_pretty(&rows)
        })
        .unwrap();
        let who = no_panic("who_waited", seed, &events, || {
            recording::who_waited(&events)
        });
        let who_text = no_panic("render_who_waited", seed, &who, || {
            recording::render_who_waited(&who)
        });
        assert_printable("who waited", seed, &who_text);

        // The pprof profile: built, encoded and decoded back whole; every pin counted once.
        let profile = no_panic("profile::build", seed, &events, || {
            pinwatch::profile::build(&events, &Default::default())
        });
        let bytes = no_panic("profile::encode", seed, &profile, || {
            pinwatch::profile::encode(&profile)
        });
        assert_eq!(
            pinwatch::profile::decode(&bytes).ok().as_ref(),
            Some(&profile),
            "the profile reads back (seed {seed})"
        );
        let pins = latest
            .iter()
            .filter(|e| e.state != pinwatch::State::Retracted)
            .count();
        let counted: i64 = profile.sample.iter().map(|s| s.value[0]).sum();
        assert_eq!(counted, pins as i64, "pins in the profile (seed {seed})");

        let source = format!("{MARK}rec\"'.jsonl");
        let warnings = vec![format!("{MARK} a warning </script>")];
        let page = no_panic("report::render", seed, &events, || {
            pinwatch_cli::report::render(&events, &source, &warnings)
        });
        match page {
            Ok(page) => {
                assert_page_safe(seed, &page);
                pages += 1;
            }
            Err(e) => panic!("no page for crafted events (seed {seed}): {e}"),
        }
    }

    // The `ctl` reply parser (what `pinwatch ctl` makes of a service's answer): one parse of
    // a small line, so half as many cases make the same coverage for less time.
    let replies = cases / 2;
    let reply = reply_seed();
    let reply_seeds = [reply.clone(), reply["status"].clone()];
    for case in 0..replies {
        let mut v = rng.pick(&reply_seeds).clone();
        for _ in 0..1 + rng.below(4) {
            if rng.chance(50) {
                replace_somewhere(&mut rng, &mut v);
            } else {
                mark_strings(&mut rng, &mut v);
            }
        }
        let mut line = serde_json::to_string(&v).unwrap();
        if rng.chance(30) {
            line = mutate_text(&mut rng, &line);
        }
        no_panic(
            &format!("the ctl reply parser (case {case})"),
            seed,
            &line,
            || serde_json::from_str::<pinwatch::control::protocol::Reply>(line.trim()),
        )
        .ok();
    }

    // The mutator reaches the views: many crafted lines are events.
    assert!(parsed > cases / 10, "only {parsed} of {cases} lines parsed");
    println!(
        "{cases} recording lines ({parsed} events, {pages} pages) and {replies} ctl replies in \
         {:.1?} (PINWATCH_FUZZ_SEED={seed})",
        t0.elapsed()
    );
}
