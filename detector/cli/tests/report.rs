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
    // #pin=1 opens the second single-pin bar's details (the script's click handler path);
    // #sort=1,asc sorts the hot locations by total time, ascending.
    let dom = Html::parse_document(&browse(
        dir.path(),
        "--dump-dom",
        &format!("{url}#pin=1&sort=1,asc"),
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

    // Hot locations: one row per top frame, sorted by the script (total, ascending).
    let rows = select(&dom, "#hot tbody tr");
    assert_eq!(rows.len(), 5);
    let first = text(&rows[0]);
    assert!(
        first.contains("N/A") && first.contains("40.0 ms"),
        "{first}"
    );
    assert!(text(&rows[4]).contains("app::hash"));
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
    // The page's own scripts only: its two and the flame graph's (inferno's settings).
    assert_eq!(html.matches("</script>").count(), 3);
    assert_eq!(html.matches("<script").count(), 3);

    let url = format!("file://{}", page.display());
    let dom = Html::parse_document(&browse(dir.path(), "--dump-dom", &format!("{url}#pin=1")));
    let selected = select(&dom, "#lanes rect.bar.selected");
    assert_eq!(selected.len(), 1, "the script ran and opened pin 1");
    assert_eq!(selected[0].value().attr("data-pin"), Some("1"));
    let detail = text(&select(&dom, "#detail")[0]);
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
