//! `pinwatch report` in a real browser: headless Chromium (Debian's `chromium`, which `.ci/run`
//! installs) loads the page from disk, runs its script, and the test reads the rendered DOM;
//! it also saves a screenshot.

use std::path::{Path, PathBuf};
use std::process::Command;

use scraper::{Html, Selector};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn chromium() -> PathBuf {
    let path = PathBuf::from("/usr/bin/chromium");
    assert!(
        path.exists(),
        "{} is missing: install Debian's `chromium` package (`.ci/run` does)",
        path.display()
    );
    path
}

/// Writes the report of `recording` into `dir`; its path.
fn report(recording: &Path, dir: &Path) -> PathBuf {
    let page = dir.join("report.html");
    let out = Command::new(env!("CARGO_BIN_EXE_pinwatch"))
        .arg("report")
        .arg(recording)
        .arg("-o")
        .arg(&page)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("wrote"));
    page
}

/// Headless Chromium on `url` with `mode` (`--dump-dom` or `--screenshot=…`), its own profile.
fn browse(dir: &Path, mode: &str, url: &str) -> String {
    let profile = dir.join("profile");
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--window-size=1400,1800",
            // The page must need no network: none is allowed.
            "--proxy-server=127.0.0.1:9",
            "--virtual-time-budget=5000",
            // The page's console on stderr: an error there is the page's own.
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(mode)
        .arg(url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let thrown: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE") && l.contains("Uncaught"))
        .collect();
    assert!(thrown.is_empty(), "the page threw: {thrown:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn select<'a>(dom: &'a Html, css: &str) -> Vec<scraper::ElementRef<'a>> {
    dom.select(&Selector::parse(css).unwrap()).collect()
}

fn text(e: &scraper::ElementRef<'_>) -> String {
    e.text().collect()
}

#[test]
fn the_page_renders_in_a_real_browser() {
    let dir = tempfile::tempdir().unwrap();
    let page = report(&data("report-small.jsonl"), dir.path());
    let url = format!("file://{}", page.display());
    // #pin=3 opens pin 3's details, its bar the second with details (the script's click
    // handler path); #sort=1,asc sorts the hot locations by total time, ascending.
    let dom = Html::parse_document(&browse(
        dir.path(),
        "--dump-dom",
        &format!("{url}#pin=3&sort=1,asc"),
    ));

    // One lane per worker, in order; one bar per pin that was not retracted.
    let lanes: Vec<String> = select(&dom, "#lanes g.lane")
        .iter()
        .map(|g| g.value().attr("data-worker").unwrap().to_owned())
        .collect();
    assert_eq!(lanes, ["worker 0", "worker 1", "block_on (tid 2000)"]);
    let bars = select(&dom, "#lanes rect.bar");
    assert_eq!(bars.len(), 6);
    assert_eq!(select(&dom, "#lanes rect.open").len(), 1, "the running pin");
    let per_lane: Vec<usize> = select(&dom, "#lanes g.lane")
        .iter()
        .map(|g| g.select(&Selector::parse("rect.bar").unwrap()).count())
        .collect();
    assert_eq!(per_lane, [2, 3, 1]);

    // The clicked bar: its pin's details, and it is marked.
    let selected = select(&dom, "#lanes rect.bar.selected");
    assert_eq!(selected.len(), 1);
    assert_eq!(selected[0].value().attr("data-pin"), Some("1"));
    let detail = text(&select(&dom, "#detail")[0]);
    assert!(detail.contains("pin 3 (in_progress)"), "{detail}");
    assert!(detail.contains("reason:    cpu"), "{detail}");
    assert!(
        detail.contains("advice:    move the computation to tokio::task::spawn_blocking"),
        "{detail}"
    );
    assert!(
        detail.contains("top frame: app::hash (src/hash.rs:7)"),
        "{detail}"
    );
    assert!(detail.contains("in_progress"), "{detail}");

    // Hot locations: one group per function (its row, then its lines), sorted by the script
    // (total, ascending). The pin without a stack is no function: it has no lines.
    let functions = select(&dom, "#hot tbody.fn tr.fn");
    assert_eq!(functions.len(), 5);
    assert_eq!(select(&dom, "#hot tbody.fn tr.line").len(), 4);
    let first = text(&functions[0]);
    assert!(
        first.contains("[no stack: stacks_off]") && first.contains("40.0 ms"),
        "{first}"
    );
    assert!(text(&functions[4]).contains("app::hash (app/src/hash.rs)"));
    assert_eq!(select(&dom, "#hot th.asc").len(), 1);

    // The flame graph, with the pinned frames.
    let frames: Vec<String> = select(&dom, "svg#flamegraph g title")
        .iter()
        .map(text)
        .collect();
    assert!(frames.len() >= 8, "{frames:?}");
    assert!(frames.iter().any(|f| f.contains("app::hash")), "{frames:?}");
    assert!(
        frames
            .iter()
            .any(|f| f.starts_with("[no stack: stacks_off]")),
        "{frames:?}"
    );
    // Self-contained: nothing loaded from anywhere (no src, no link but to the page itself).
    for e in select(&dom, "[src], link[href], [href]") {
        let v = e.value();
        let target = v.attr("src").or(v.attr("href")).unwrap_or("");
        assert!(target.starts_with('#'), "the page loads {target:?}");
    }
    // Reasons and header.
    assert_eq!(select(&dom, "#reason-table tbody tr").len(), 5);
    assert_eq!(text(&select(&dom, "#total")[0]), "580.0 ms");

    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-small.png");
    let _ = std::fs::remove_file(&shot);
    browse(
        dir.path(),
        &format!("--screenshot={}", shot.display()),
        &url,
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    println!("screenshot: {}", shot.display());
}

/// A rotated set with a truncated last line: read as one recording, the warning on the page.
/// The hot locations of one function pinned at three lines: one function row with the pins and
/// time summed, its three lines under it; sorting by a column sorts the functions, and each
/// one's lines among themselves, a line never leaving its function.
#[test]
fn hot_locations_are_functions_with_their_lines_under_them() {
    let dir = tempfile::tempdir().unwrap();
    let original = std::fs::read_to_string(data("report-small.jsonl")).unwrap();
    let hash = original
        .lines()
        .find(|l| l.contains(r#""top_frame":{"function":"app::hash""#))
        .unwrap();
    let template: serde_json::Value = serde_json::from_str(hash).unwrap();
    // (id, function, line, ms): app::hash at lines 7, 8 (twice) and 9, 650 ms in all;
    // app::other 400 ms at one line.
    let pins = [
        (3, "app::hash", 7, 100.0),
        (4, "app::hash", 8, 300.0),
        (5, "app::hash", 9, 50.0),
        (6, "app::hash", 8, 200.0),
        (7, "app::other", 1, 400.0),
    ];
    let mut text_ = String::new();
    for (i, (id, function, line, ms)) in pins.into_iter().enumerate() {
        let mut e = template.clone();
        let file = format!("src/{}.rs", function.trim_start_matches("app::"));
        let frame = serde_json::json!({"function": function, "file": file, "line": line});
        e["id"] = id.into();
        e["state"] = "completed".into();
        e["duration_ms"] = ms.into();
        e["start"] = format!("2026-11-30T10:00:0{i}.000Z").into();
        e["top_frame"] = frame.clone();
        e["stack"][0] = frame;
        text_ += &format!("{e}\n");
    }
    let rec = dir.path().join("three-lines.jsonl");
    std::fs::write(&rec, text_).unwrap();

    // The summary says the same.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pinwatch"))
        .arg("summary")
        .arg(&rec)
        .output()
        .unwrap();
    let summary = String::from_utf8(out.stdout).unwrap();
    // The frames table: up to the blank line before the next table ("Who Waited").
    let rows: Vec<&str> = summary
        .lines()
        .skip(4)
        .take_while(|l| !l.is_empty())
        .filter(|l| !l.starts_with("  advice"))
        .collect();
    assert_eq!(rows.len(), 6, "{summary}");
    assert!(
        rows[0].starts_with("app::hash (app/src/hash.rs)")
            && rows[0].contains(" 4 ")
            && rows[0].contains("650.0 ms"),
        "{summary}"
    );
    for (row, (at, total)) in rows[1..4].iter().zip([
        ("app/src/hash.rs:8", "500.0 ms"),
        ("app/src/hash.rs:7", "100.0 ms"),
        ("app/src/hash.rs:9", "50.0 ms"),
    ]) {
        assert!(
            row.trim_start().starts_with(at) && row.contains(total),
            "{summary}"
        );
    }
    assert!(
        rows[4].starts_with("app::other (app/src/other.rs)"),
        "{summary}"
    );

    let page = report(&rec, dir.path());
    let groups = |dom: &Html| -> Vec<Vec<String>> {
        select(dom, "#hot tbody")
            .iter()
            .map(|g| {
                g.select(&Selector::parse("tr").unwrap())
                    .map(|r| {
                        let cells: Vec<String> = r
                            .select(&Selector::parse("td").unwrap())
                            .map(|c| text(&c))
                            .collect();
                        format!("{} {} {}", cells[4], cells[0], cells[1])
                    })
                    .collect()
            })
            .collect()
    };
    // As written (no script needed to read it): most time first, at both levels.
    let written = Html::parse_document(&std::fs::read_to_string(&page).unwrap());
    assert_eq!(
        groups(&written),
        [
            vec![
                "app::hash (app/src/hash.rs)move the computation to tokio::task::spawn_blocking or \
                 rayon, or yield with tokio::task::yield_now().await 4 650.0 ms",
                "app/src/hash.rs:8 2 500.0 ms",
                "app/src/hash.rs:7 1 100.0 ms",
                "app/src/hash.rs:9 1 50.0 ms"
            ],
            vec![
                "app::other (app/src/other.rs)move the computation to tokio::task::spawn_blocking \
                 or rayon, or yield with tokio::task::yield_now().await 1 400.0 ms",
                "app/src/other.rs:1 1 400.0 ms"
            ]
        ]
    );
    // Sorted by the script, total ascending: the functions, and the lines within each.
    let url = format!("file://{}#sort=1,asc", page.display());
    let dom = Html::parse_document(&browse(dir.path(), "--dump-dom", &url));
    let sorted: Vec<Vec<String>> = groups(&dom)
        .into_iter()
        .map(|g| {
            g.into_iter()
                .map(|r| r.split(' ').next().unwrap().to_owned())
                .collect()
        })
        .collect();
    assert_eq!(
        sorted,
        [
            vec!["app::other", "app/src/other.rs:1"],
            vec![
                "app::hash",
                "app/src/hash.rs:9",
                "app/src/hash.rs:7",
                "app/src/hash.rs:8"
            ]
        ]
    );
}

#[test]
fn rotated_and_truncated_recordings_make_a_page_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let recording = std::fs::read_to_string(data("report-small.jsonl")).unwrap();
    let lines: Vec<&str> = recording.lines().collect();
    std::fs::write(dir.path().join("rec.1.jsonl"), lines[..5].join("\n") + "\n").unwrap();
    let last = &lines[5..];
    let cut = last.join("\n");
    std::fs::write(
        dir.path().join("rec.jsonl"),
        &cut[..cut.len() - 20], // the last line cut short, as a crash leaves it
    )
    .unwrap();
    let page = report(&dir.path().join("rec.jsonl"), dir.path());
    let dom = Html::parse_document(&browse(
        dir.path(),
        "--dump-dom",
        &format!("file://{}", page.display()),
    ));
    let warning = text(&select(&dom, "p.warning")[0]);
    assert!(warning.contains("last line is incomplete"), "{warning}");
    // Lines of both files made it: pins of the rotated file and of the current one.
    assert_eq!(select(&dom, "#lanes rect.bar").len(), 5);
}

/// Strings of a recording from anyone (a thread name, a function, a file) that would break
/// out of the page: an HTML comment opener with a script tag (the HTML parser's double-escaped
/// state, which swallowed the page's own script), a script end tag, an attribute break-out.
const ATTACKS: [&str; 3] = [
    "<!--<script>",
    "</script><marquee id=\"x\">",
    "\"><img src=x onerror=alert(1)>",
];

/// `#pin=N` opens pin N — the id its details show — for the first pin, one in the middle and
/// the last (every bar's index in the page's data is one less than its pin's id here, so an
/// index taken for an id opens the next pin, and the last id nothing); `&run=R` picks the
/// run of a recording where two runs have a pin N.
#[test]
fn the_deep_link_opens_the_pin_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let page = report(&data("report-small.jsonl"), dir.path());
    let url = format!("file://{}", page.display());
    // (link, the lane of the bar it opens, the headline of the details)
    let cases = [
        ("pin=1", "worker 0", "pin 1 (completed), 100 ms"),
        ("pin=5", "worker 1", "pin 5 (completed), 40 ms"),
        ("pin=6", "worker 1", "pin 6 (completed), 60 ms"),
        (
            "pin=1&run=bbbbbbbb",
            "block_on (tid 2000)",
            "pin 1 (completed), 30 ms",
        ),
    ];
    for (link, lane, headline) in cases {
        let dom = Html::parse_document(&browse(dir.path(), "--dump-dom", &format!("{url}#{link}")));
        let selected = select(&dom, "#lanes rect.bar.selected");
        assert_eq!(selected.len(), 1, "#{link} opened no pin");
        let detail = text(&select(&dom, "#detail")[0]);
        assert!(
            detail.contains(&format!("· {lane}\n{headline}")),
            "#{link}: {detail}"
        );
    }
    // An id no pin has, and a run that has no such pin, open nothing.
    for link in ["pin=7", "pin=4", "pin=5&run=bbbbbbbb"] {
        let dom = Html::parse_document(&browse(dir.path(), "--dump-dom", &format!("{url}#{link}")));
        assert!(
            select(&dom, "#lanes rect.bar.selected").is_empty(),
            "#{link} opened a pin"
        );
    }
}

/// A page of a recording whose strings are [`ATTACKS`]: none is in the page raw, none becomes
/// markup, and the page's script still runs (the deep link opens the pin, whose details show
/// the strings as text); a crafted `#pin=` cannot stop it either.
#[test]
fn strings_of_the_recording_cannot_break_out_of_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let mut crafted = String::new();
    for line in std::fs::read_to_string(data("report-small.jsonl"))
        .unwrap()
        .lines()
    {
        let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
        v["worker"]["name"] = ATTACKS[0].into();
        v["blocking_operation"] = ATTACKS[1].into();
        v["top_frame"] = serde_json::json!({
            "function": ATTACKS.concat(),
            "file": ATTACKS[2],
            "line": 7
        });
        if let Some(stack) = v["stack"].as_array_mut() {
            for f in stack {
                f["function"] = ATTACKS[1].into();
                f["file"] = ATTACKS[2].into();
            }
        }
        crafted.push_str(&v.to_string());
        crafted.push('\n');
    }
    let recording = dir.path().join("attack.jsonl");
    std::fs::write(&recording, crafted).unwrap();
    let page = report(&recording, dir.path());
    let html = std::fs::read_to_string(&page).unwrap();
    for raw in ATTACKS.iter().chain(&["<!--<", "<img", "<marquee"]) {
        assert!(!html.contains(raw), "the page holds {raw:?} raw");
    }
    // The page's own scripts only: its two.
    assert_eq!(html.matches("</script>").count(), 2);
    assert_eq!(html.matches("<script").count(), 2);

    let url = format!("file://{}", page.display());
    let dom = Html::parse_document(&browse(dir.path(), "--dump-dom", &format!("{url}#pin=1")));
    let selected = select(&dom, "#lanes rect.bar.selected");
    assert_eq!(selected.len(), 1, "the script ran and opened pin 1");
    let detail = text(&select(&dom, "#detail")[0]);
    assert!(detail.contains("pin 1 (completed)"), "{detail}");
    for s in ATTACKS {
        assert!(detail.contains(s), "{s:?} not shown as text in {detail}");
    }
    assert!(
        select(&dom, "img, marquee").is_empty(),
        "input became markup"
    );
    assert!(text(&select(&dom, "#hot")[0]).contains(ATTACKS[0]));

    // A crafted deep link: not a selector's text; the sort after it still runs.
    let dom = Html::parse_document(&browse(
        dir.path(),
        "--dump-dom",
        &format!("{url}#pin=1%22%5D,x&sort=1,asc"),
    ));
    assert!(select(&dom, "#lanes rect.bar.selected").is_empty());
    assert_eq!(select(&dom, "#hot th.asc").len(), 1, "the script went on");
}

/// A completed pin of `ms` in a request to `route` (its uri `uri`), as the tracing layer
/// records it; `trace` its OpenTelemetry trace id.
fn traced_pin(id: u64, ms: f64, route: &str, uri: &str, trace: &str, nested: bool) -> String {
    // With `nested`, an `#[instrument]`ed function's span inside the request.
    let inner = if nested {
        format!(r#",{{"name":"render","target":"app","fields":{{"id":"{id}"}}}}"#)
    } else {
        String::new()
    };
    format!(
        r#"{{"schema":1,"event":"pinned","id":{id},"run_id":"aaaaaaaa-1111-4111-8111-111111111111","pid":100,"state":"completed","start":"2026-11-30T10:00:0{id}.000Z","duration_ms":{ms},"threshold_ms":20.0,"task_id":{id},"worker":{{"index":0,"tid":1000,"name":"tokio-rt-worker"}},"reason":"sleep","blocking_operation":"clock_nanosleep","stack":[{{"function":"app::report","file":"src/report.rs","line":9}}],"held_locks":[],"samples":1,"report":2,"cpu_wait_ms":0.0,"top_frame":{{"function":"app::report","file":"src/report.rs","line":9}},"spans":[{{"name":"request","target":"tower_http::trace::make_span","fields":{{"http.route":"{route}","method":"GET","uri":"{uri}"}}}}{inner}],"trace_id":"{trace}","span_id":"00f067aa0ba902b7"}}"#
    )
}

#[test]
fn the_by_request_table_and_a_pins_request_and_trace_show_in_a_real_browser() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("traced.jsonl");
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let lines = [
        traced_pin(1, 120.0, "/report", "/report?a=1", trace, true),
        traced_pin(
            2,
            300.0,
            "/report",
            "/report?a=2",
            "0af7651916cd43dd8448eb211c80319c",
            false,
        ),
        traced_pin(
            3,
            40.0,
            "/report",
            "/report?a=3",
            "0af7651916cd43dd8448eb211c80319e",
            false,
        ),
        traced_pin(
            4,
            50.0,
            "/users/{id}",
            "/users/9",
            "0af7651916cd43dd8448eb211c80319d",
            false,
        ),
    ];
    std::fs::write(&rec, lines.join("\n") + "\n").unwrap();
    let page = report(&rec, dir.path());
    let url = format!("file://{}#pin=1", page.display());
    let dom = Html::parse_document(&browse(dir.path(), "--dump-dom", &url));

    // One row per request (method and route; the uri does not split it), most pinned time
    // first, with the innermost spans its pins were in.
    let rows: Vec<Vec<String>> = select(&dom, "#request-table tbody tr")
        .iter()
        .map(|tr| {
            tr.select(&Selector::parse("td").unwrap())
                .map(|td| text(&td))
                .collect()
        })
        .collect();
    let rows: Vec<(&str, &str, &str)> = rows
        .iter()
        .map(|r| (r[0].as_str(), r[1].as_str(), r[4].as_str()))
        .collect();
    assert_eq!(
        rows,
        [
            ("GET /report", "3", "request 2, render 1"),
            ("GET /users/{id}", "1", "request 1")
        ]
    );

    // Pin 1's details: its span chain, outermost first, and its trace.
    let detail = text(&select(&dom, "#detail")[0]);
    assert!(
        detail.contains(
            "spans:     request{http.route=/report method=GET uri=/report?a=1} > render{id=1}"
        ),
        "{detail}"
    );
    assert!(detail.contains(&format!("trace:     {trace}")), "{detail}");

    // A recording without spans has no such table.
    let plain = report(&data("report-small.jsonl"), dir.path());
    let dom = Html::parse_document(&browse(
        dir.path(),
        "--dump-dom",
        &format!("file://{}", plain.display()),
    ));
    assert!(select(&dom, "#request-table").is_empty());
}

/// A pin's victims in its details (measured: the waits, each named victim with its wait,
/// spawn place, worker, LIFO slot and spans; not measured: said so, no wait), and the most
/// delayed table, as the browser shows them.
#[test]
fn a_pins_victims_and_the_most_delayed_table_show_in_a_real_browser() {
    let dir = tempfile::tempdir().unwrap();
    let page = report(&data("victims.jsonl"), dir.path());
    let url = format!("file://{}", page.display());
    let dom = Html::parse_document(&browse(dir.path(), "--dump-dom", &format!("{url}#pin=1")));
    let detail = text(&select(&dom, "#detail")[0]);
    assert!(detail.contains("pin 1 (completed)"), "{detail}");
    assert!(
        detail.contains(
            "victims:   11 tasks waited behind it (measured): 1.52 s in all, the longest \
             300.2 ms; local run queue up to 10\n  waited 300.2 ms: task 14 spawned at \
             src/api.rs:88:5, polled by worker 0 [LIFO slot]  in request{uri=/orders}\n"
        ),
        "{detail}"
    );
    assert!(
        detail.contains("  waited 200.0 ms: task 17 spawned at src/api.rs:88:5, polled by worker 1  in conn > request{uri=/health}\n"),
        "{detail}"
    );
    assert!(detail.contains("  … and 6 more, not named\n"), "{detail}");

    // The same pins on a current-thread runtime, which holds its timers and I/O during every
    // poll: the measure leaves out the tasks waiting on them, and says so (helper-60).
    let held_dir = tempfile::tempdir().unwrap();
    let held = held_dir.path().join("held.jsonl");
    let text_of = std::fs::read_to_string(data("victims.jsonl")).unwrap();
    let lines: Vec<String> = text_of
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            if v["event"] == "pinned" {
                v["current_thread"] = true.into();
            }
            v.to_string()
        })
        .collect();
    std::fs::write(&held, lines.join("\n") + "\n").unwrap();
    let held_page = report(&held, held_dir.path());
    let dom = Html::parse_document(&browse(
        held_dir.path(),
        "--dump-dom",
        &format!("file://{}#pin=1", held_page.display()),
    ));
    let detail = text(&select(&dom, "#detail")[0]);
    assert!(
        detail.contains(
            "victims:   11 tasks waited behind it (measured; not counting tasks whose timers \
             or I/O the pin held back): 1.52 s in all"
        ),
        "{detail}"
    );

    let dom = Html::parse_document(&browse(dir.path(), "--dump-dom", &format!("{url}#pin=3")));
    let detail = text(&select(&dom, "#detail")[0]);
    assert!(
        detail.contains(
            "victims:   not measured: the worker ran 3 of the service's tasks right after it (no wait known); \
             local run queue up to 4\n  task 30 spawned at src/api.rs:88:5, polled by worker 0  \
             in request{uri=/orders}\n"
        ),
        "{detail}"
    );
    assert!(!detail.contains("waited "), "{detail}");

    // A pin of an older recording: no victims line.
    let dom = Html::parse_document(&browse(dir.path(), "--dump-dom", &format!("{url}#pin=4")));
    let detail = text(&select(&dom, "#detail")[0]);
    assert!(
        detail.contains("pin 4 (completed)") && !detail.contains("victims:"),
        "{detail}"
    );

    let rows: Vec<Vec<String>> = select(&dom, "#delayed-table tbody tr")
        .iter()
        .map(|tr| {
            tr.select(&Selector::parse("td").unwrap())
                .map(|td| text(&td))
                .collect()
        })
        .collect();
    assert_eq!(
        rows,
        [
            [
                "src/api.rs:88:5",
                "request",
                "3",
                "800.2 ms",
                "300.2 ms",
                "2",
                "2"
            ],
            [
                "src/jobs.rs:20:9",
                "-",
                "2",
                "430.0 ms",
                "250.0 ms",
                "2",
                "0"
            ],
            [
                "src/api.rs:88:5",
                "conn",
                "1",
                "200.0 ms",
                "200.0 ms",
                "1",
                "0"
            ],
            ["(unknown)", "-", "1", "100.0 ms", "100.0 ms", "1", "0"],
        ]
    );
}
