//! The Prometheus exporter, the Grafana dashboard and the alert rules, against real parts:
//! `pin_service` (a sample app that pins) serving `/metrics`, a real Prometheus scraping it
//! every second, promtool and amtool, and a real Alertmanager delivering to a webhook in this
//! test.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use pinwatch::export::prometheus::METRICS;
use support::{get, pin_service, sample, wait_for, Prometheus};

fn scrape(port: u16) -> String {
    let (status, body) = get(
        &format!("http://127.0.0.1:{port}/metrics"),
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    body
}

#[test]
fn every_metric_is_exported_and_every_reason_exists_before_the_first_pin() {
    let (_svc, port) = pin_service(&["--quiet"]);
    let text = scrape(port);
    for m in METRICS {
        assert!(
            text.contains(&format!("# TYPE {} {}\n", m.name, m.kind)),
            "{} ({}) missing:\n{text}",
            m.name,
            m.kind
        );
    }
    for r in pinwatch::Reason::ALL {
        let series = format!("pinwatch_pins_total{{reason=\"{r}\"}}");
        assert_eq!(sample(&text, &series), Some(0.0), "{series} in\n{text}");
    }
    assert_eq!(sample(&text, "pinwatch_workers"), Some(3.0), "{text}");
    assert_eq!(
        sample(&text, "pinwatch_workers_pinned"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(sample(&text, "pinwatch_threshold_seconds"), Some(0.02));
    // Nothing unbounded becomes a label: no task id, no free text (a metric's name may say
    // `tasks`: pinwatch_victim_tasks_total).
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let labels = line.split_once('{').map_or("", |(_, rest)| rest);
        assert!(!labels.contains("task"), "{line}");
    }
    for r in pinwatch::Reason::ALL {
        for name in [
            "pinwatch_victim_tasks_total",
            "pinwatch_victim_wait_seconds_total",
        ] {
            let series = format!("{name}{{reason=\"{r}\"}}");
            assert_eq!(sample(&text, &series), Some(0.0), "{series} in\n{text}");
        }
    }
    assert_eq!(sample(&text, "pinwatch_busy_waits_total"), Some(0.0));
}

#[test]
fn a_scrape_answers_promptly_while_every_worker_is_pinned_and_shows_them() {
    let (_svc, port) = pin_service(&["--stuck", "3", "--quiet"]);
    // The watchdog's view (workers pinned) is live; the by-reason figures wait for the export
    // thread to analyse each pin's first report (its first symbol lookups take a moment).
    let text = wait_for("all 3 workers pinned", Duration::from_secs(30), || {
        let t = scrape(port);
        (sample(&t, "pinwatch_workers_pinned") == Some(3.0)
            && sample(&t, "pinwatch_pins_total{reason=\"other\"}") == Some(3.0))
        .then_some(t)
    });
    assert_eq!(sample(&text, "pinwatch_workers"), Some(3.0));
    // The endpoint runs on pinwatch's own thread: with every worker stuck it still answers,
    // and the stuck workers' time keeps growing.
    let before = sample(&text, "pinwatch_oldest_pin_seconds").unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    let t0 = Instant::now();
    let text = scrape(port);
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(5), "scrape took {took:?}");
    let after = sample(&text, "pinwatch_oldest_pin_seconds").unwrap();
    assert!(after >= before + 1.0, "{before} -> {after}");
    let other = sample(&text, "pinwatch_pinned_seconds_total{reason=\"other\"}").unwrap();
    assert!(
        other >= 3.0 * before,
        "{other} worker-seconds, 3 workers for {before} s"
    );
    assert_eq!(
        sample(&text, "pinwatch_pins_total{reason=\"other\"}"),
        Some(3.0),
        "{text}"
    );
}

/// Runs `pin_service` with `env`, which must stop it at start-up: exit code and stderr.
fn start_up_failure(env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pin_service"))
        .args(["--quiet", "--for", "1s"])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_bad_address_or_a_port_in_use_stops_the_program_naming_the_variable() {
    let (code, err) = start_up_failure(&[("PINWATCH_PROMETHEUS_ADDR", "localhost")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("PINWATCH_PROMETHEUS_ADDR=\"localhost\"") && err.contains("127.0.0.1:9464"),
        "{err}"
    );
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, err) = start_up_failure(&[("PINWATCH_PROMETHEUS_ADDR", &addr)]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("PINWATCH_PROMETHEUS_ADDR={addr}")) && err.contains("free port"),
        "{err}"
    );
}

/// Every `pinwatch_*` metric a text names, with histogram suffixes taken off.
fn metric_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("pinwatch_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        // Recording-rule names (`job_instance:pinwatch_…:rate5m`) are not exported metrics.
        let in_rule_name = i > 0 && rest.as_bytes()[i - 1] == b':';
        if !in_rule_name {
            names.push(base.to_owned());
        }
        rest = &tail[end..];
    }
    names.sort();
    names.dedup();
    names
}

fn dashboard() -> serde_json::Value {
    let text = std::fs::read_to_string(support::repo().join("dashboards/pinwatch.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn dashboards_and_rules_name_only_exported_metrics() {
    let known: Vec<&str> = METRICS.iter().map(|m| m.name).collect();
    for file in [
        "dashboards/pinwatch.json",
        "deploy/prometheus/pinwatch-rules.yml",
    ] {
        let text = std::fs::read_to_string(support::repo().join(file)).unwrap();
        let names = metric_names(&text);
        assert!(!names.is_empty(), "{file}");
        for n in names {
            assert!(
                known.contains(&n.as_str()),
                "{file} uses {n}, which is not exported"
            );
        }
    }
    // Importable as is: a uid, a title, a schema version, a datasource variable and no
    // hard-coded datasource.
    let d = dashboard();
    assert_eq!(d["uid"], "pinwatch");
    assert!(d["title"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(d["schemaVersion"].as_u64().is_some());
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(vars, ["datasource", "job", "instance"]);
    for p in d["panels"].as_array().unwrap() {
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
    }
}

/// Each panel's unit fits what its query computes: a rate of a `_seconds_total` counter is
/// seconds per second — a fraction of time (`percentunit`), or summed over workers a count of
/// workers' time (`short`), never `s` or `ops`; a rate of any other counter is per second
/// (`ops`); a quantile of a `_seconds` histogram is seconds. And "Runtime stalled" — the whole
/// service down — is the top row.
#[test]
fn dashboard_units_fit_their_queries_and_the_stall_row_is_on_top() {
    let d = dashboard();
    let panels = d["panels"].as_array().unwrap();
    let mut checked = 0;
    for p in panels {
        let title = p["title"].as_str().unwrap();
        let unit = p["fieldConfig"]["defaults"]["unit"].as_str();
        for t in p["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap();
            let rate_of = expr
                .split("rate(")
                .nth(1)
                .map(|r| r.split('{').next().unwrap().trim());
            let want: &[&str] = match rate_of {
                _ if expr.starts_with("histogram_quantile(") => &["s"],
                Some(m) if m.ends_with("_bucket") => continue, // the heatmap's buckets
                Some(m) if m.ends_with("_seconds_total") => &["percentunit", "short"],
                Some(m) if m.ends_with("_total") => &["ops"],
                _ => continue,
            };
            assert!(
                unit.is_some_and(|u| want.contains(&u)),
                "{title}: unit {unit:?} for {expr}; want one of {want:?}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 7, "{checked} panels checked");
    let stall = |t: &str| {
        panels
            .iter()
            .find(|p| p["title"] == t)
            .unwrap_or_else(|| panic!("no panel {t:?}"))
    };
    assert_eq!(
        stall("Runtime stalled, share of time")["fieldConfig"]["defaults"]["unit"],
        "percentunit"
    );
    for t in ["Runtime stalled now", "Runtime stalled, share of time"] {
        assert_eq!(stall(t)["gridPos"]["y"], 0, "{t} is not in the top row");
    }
    // No two panels overlap (moving a row must move the others).
    let rect = |p: &serde_json::Value| {
        let g = &p["gridPos"];
        let n = |k: &str| g[k].as_u64().unwrap();
        (n("x"), n("y"), n("x") + n("w"), n("y") + n("h"))
    };
    for (i, a) in panels.iter().enumerate() {
        for b in &panels[i + 1..] {
            let (a, b) = ((rect(a), &a["title"]), (rect(b), &b["title"]));
            let apart =
                a.0 .2 <= b.0 .0 || b.0 .2 <= a.0 .0 || a.0 .3 <= b.0 .1 || b.0 .3 <= a.0 .1;
            assert!(apart, "{} and {} overlap", a.1, b.1);
        }
    }
}

/// Every panel's every query, with the dashboard's variables substituted as Grafana would.
fn panel_queries(job: &str, instance: &str) -> Vec<(String, String)> {
    let d = dashboard();
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            let expr = t["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", "10s")
                .replace("$__range", "1m")
                .replace("$job", job)
                .replace("$instance", instance);
            out.push((p["title"].as_str().unwrap().to_owned(), expr));
        }
    }
    out
}

#[test]
fn every_dashboard_panel_returns_data_from_a_real_prometheus() {
    let (_svc, port) = pin_service(&["--stuck", "1"]);
    let target = format!("127.0.0.1:{port}");
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         scrape_configs:\n  - job_name: pin_service\n    static_configs:\n      - targets: [\"{target}\"]\n"
    );
    let prom = Prometheus::start(&config, &[]);
    // Enough scrapes for rates over 10 s, and completed pins in that window.
    wait_for(
        "pins in Prometheus",
        Duration::from_secs(90),
        || -> Option<()> {
            let v = prom
                .query("sum(increase(pinwatch_pin_duration_seconds_count[10s])) > 0")
                .ok()?;
            let n = v["result"].as_array()?.len();
            let up = prom.query("count_over_time(up[30s]) >= 12").ok()?;
            (n > 0 && !up["result"].as_array()?.is_empty()).then_some(())
        },
    );
    // The variables' own queries.
    let jobs = prom.api("label/job/values?match[]=pinwatch_workers");
    assert_eq!(jobs, serde_json::json!(["pin_service"]), "{}", prom.log());
    let mut empty = Vec::new();
    let queries = panel_queries("pin_service", &target);
    assert!(queries.len() >= 12);
    for (title, expr) in &queries {
        match prom.query(expr) {
            Ok(data) => {
                let result = data["result"].as_array().cloned().unwrap_or_default();
                let has_number = result.iter().any(|r| {
                    r["value"][1]
                        .as_str()
                        .is_some_and(|v| v.parse::<f64>().is_ok_and(f64::is_finite))
                });
                if !has_number {
                    empty.push(format!("{title}: {expr} → {data}"));
                }
            }
            Err(e) => empty.push(format!("{title}: {e}")),
        }
    }
    assert!(
        empty.is_empty(),
        "panels without data:\n{}",
        empty.join("\n")
    );
    // And the variables restrict: another job's selection is empty.
    let (title, expr) = &panel_queries("nobody", ".*")[0];
    let data = prom.query(expr).unwrap();
    assert!(
        data["result"].as_array().unwrap().is_empty() || data["result"][0]["value"][1] == "0",
        "{title}: {data}"
    );
}

fn run_tool(dir: &std::path::Path, tool: &str, package: &str, args: &[&str]) -> String {
    let bin = support::system_binary(tool, package);
    let out = Command::new(bin)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{tool} {args:?}:\n{text}");
    text
}

#[test]
fn rules_and_configs_pass_promtool_and_amtool() {
    let deploy = support::repo().join("deploy");
    let prom = deploy.join("prometheus");
    let out = run_tool(
        &prom,
        "promtool",
        "prometheus",
        &["check", "rules", "pinwatch-rules.yml"],
    );
    assert!(out.contains("SUCCESS: 15 rules found"), "{out}");
    let out = run_tool(
        &prom,
        "promtool",
        "prometheus",
        &["test", "rules", "pinwatch-rules.test.yml"],
    );
    assert!(out.contains("SUCCESS"), "{out}");
    // Every alert has a unit test.
    let rules = std::fs::read_to_string(prom.join("pinwatch-rules.yml")).unwrap();
    let tests = std::fs::read_to_string(prom.join("pinwatch-rules.test.yml")).unwrap();
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert_eq!(alerts.len(), 10, "{alerts:?}");
    for a in &alerts {
        assert!(
            tests.contains(&format!("alertname: {a}\n")),
            "no unit test for {a}"
        );
        assert!(
            rules.contains(&format!(
                "runbook_url: \"docs/runbooks.md#{}\"",
                a.to_lowercase()
            )),
            "no runbook link to the repository's docs for {a}"
        );
        // The runbooks are docs/runbooks.md's `## Alert` sections (the links' anchors).
        let guide = std::fs::read_to_string(support::repo().join("docs/runbooks.md")).unwrap();
        let heading = format!("## {a}\n");
        assert!(guide.contains(&heading), "no runbook section for {a}");
    }
    // The promtool test of the dashboard's "Top locations" count runs the panel's own query.
    let panel = dashboard()["panels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["title"] == "Top locations")
        .expect("a Top locations panel")["targets"][0]["expr"]
        .as_str()
        .unwrap()
        .replace("$__range", "1h")
        .replace("$job", "api")
        .replace("$instance", ".*");
    assert!(
        tests.contains(&format!("          {panel}\n")),
        "pinwatch-rules.test.yml does not test the panel's query {panel}"
    );
    // The header's recipe points every runbook link of both rule files at a copy of the docs
    // (helper-64: it missed the PrometheusRule's unquoted links, and rewrote its own comment).
    let recipe: String = rules
        .lines()
        .skip_while(|l| !l.starts_with("#   sed "))
        .take_while(|l| l.starts_with("#   "))
        .map(|l| l.trim_start_matches('#').trim())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        recipe.ends_with("../kubernetes/prometheusrule.yaml"),
        "{recipe}"
    );
    let copy = tempfile::tempdir().unwrap();
    for dir in ["prometheus", "kubernetes"] {
        std::fs::create_dir(copy.path().join(dir)).unwrap();
    }
    let rules_copy = copy.path().join("prometheus/pinwatch-rules.yml");
    let operator_copy = copy.path().join("kubernetes/prometheusrule.yaml");
    std::fs::copy(prom.join("pinwatch-rules.yml"), &rules_copy).unwrap();
    std::fs::copy(
        deploy.join("kubernetes/prometheusrule.yaml"),
        &operator_copy,
    )
    .unwrap();
    let ran = Command::new("bash")
        .args(["-c", &recipe])
        .current_dir(copy.path().join("prometheus"))
        .output()
        .unwrap();
    assert!(ran.status.success(), "{recipe}: {ran:?}");
    for file in [&rules_copy, &operator_copy] {
        let text = std::fs::read_to_string(file).unwrap();
        let links: Vec<&str> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("runbook_url: "))
            .collect();
        assert_eq!(links.len(), alerts.len(), "{}", file.display());
        assert!(
            links.iter().all(|l| l
                .trim_matches('"')
                .starts_with("https://git.example.com/you/pinwatch/blob/main/docs/runbooks.md#")),
            "{links:?}"
        );
    }
    // The comment itself is left as it was.
    let rewritten = std::fs::read_to_string(&rules_copy).unwrap();
    assert!(
        rewritten.contains(&recipe.replace('\n', "\n#     ")),
        "{rewritten}"
    );
    run_tool(
        &prom,
        "promtool",
        "prometheus",
        &["check", "config", "prometheus.yml"],
    );
    run_tool(
        &deploy.join("alertmanager"),
        "amtool",
        "prometheus-alertmanager",
        &["check-config", "alertmanager.yml"],
    );
}

/// A webhook receiver on loopback: the first Alertmanager notification's JSON.
fn webhook() -> (u16, std::sync::mpsc::Receiver<serde_json::Value>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(20) {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; len];
            let _ = reader.read_exact(&mut body);
            let _ = conn
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            if let Ok(v) = serde_json::from_slice(&body) {
                if tx.send(v).is_err() {
                    return;
                }
            }
        }
    });
    (port, rx)
}

/// A real Alertmanager with `config`, clustering off (it would listen beyond loopback), on a
/// free port of 127.0.0.1: the server (stopped when dropped, its directory with it) and its port.
fn alertmanager(config: &str) -> ((support::Proc, tempfile::TempDir), u16) {
    let am_bin = support::system_binary("prometheus-alertmanager", "prometheus-alertmanager");
    let am_dir = tempfile::tempdir().unwrap();
    std::fs::write(am_dir.path().join("alertmanager.yml"), config).unwrap();
    let am_port = support::free_port();
    let am = support::start_server(
        "alertmanager",
        &am_bin,
        &[
            format!(
                "--config.file={}",
                am_dir.path().join("alertmanager.yml").display()
            ),
            format!("--storage.path={}", am_dir.path().join("data").display()),
            format!("--web.listen-address=127.0.0.1:{am_port}"),
            "--cluster.listen-address=".into(),
        ],
        &am_dir.path().join("am.log"),
        am_port,
    );
    ((am, am_dir), am_port)
}

#[test]
fn a_stuck_service_pages_through_a_real_alertmanager() {
    let (hook_port, notifications) = webhook();
    // Alertmanager, routing to the webhook.
    let (_am, am_port) = alertmanager(&format!(
        "route:\n  receiver: hook\n  group_by: [alertname, instance]\n  group_wait: 1s\n  group_interval: 1s\n\
         receivers:\n  - name: hook\n    webhook_configs:\n      - url: http://127.0.0.1:{hook_port}/alert\n"
    ));

    // The service: every worker stuck for good.
    let (_svc, port) = pin_service(&["--stuck", "3", "--quiet"]);
    // The repository's rules, with their `for:` shortened so the test takes seconds, not
    // minutes; expressions, labels and annotations as they are.
    let rules =
        std::fs::read_to_string(support::repo().join("deploy/prometheus/pinwatch-rules.yml"))
            .unwrap()
            .replace("for: 1m", "for: 2s")
            .replace("for: 30s", "for: 2s")
            .replace("for: 15s", "for: 2s");
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         rule_files: [pinwatch-rules.yml]\n\
         alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: [\"127.0.0.1:{am_port}\"]\n\
         scrape_configs:\n  - job_name: api\n    static_configs:\n      - targets: [\"127.0.0.1:{port}\"]\n"
    );
    let prom = Prometheus::start(&config, &[("pinwatch-rules.yml", &rules)]);

    // The worker-stuck alert needs a pin older than 10 s; all-workers-pinned and
    // runtime-stalled come when their gauges say so. Each reaches `firing`, then the webhook,
    // in whatever order the machine's load makes: wait for all three (bounded).
    let wanted = [
        "PinwatchWorkerStuck",
        "PinwatchAllWorkersPinned",
        "PinwatchRuntimeStalled",
    ];
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut fired: std::collections::BTreeMap<String, serde_json::Value> = Default::default();
    let mut seen = Vec::new();
    while wanted.iter().any(|w| !fired.contains_key(*w)) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "not every alert of {wanted:?} was notified firing; firing: {:?}; got {seen:#?}\n{}",
            fired.keys().collect::<Vec<_>>(),
            prom.log()
        );
        let Ok(n) = notifications.recv_timeout(left) else {
            continue;
        };
        for a in n["alerts"].as_array().cloned().unwrap_or_default() {
            if a["status"] == "firing" {
                if let Some(name) = a["labels"]["alertname"].as_str() {
                    fired.entry(name.to_string()).or_insert_with(|| a.clone());
                }
            }
        }
        seen.push(n);
    }
    let stuck = &fired["PinwatchWorkerStuck"];
    let instance = format!("127.0.0.1:{port}");
    assert_eq!(stuck["labels"]["severity"], "critical", "{stuck}");
    assert_eq!(stuck["labels"]["instance"], instance.as_str(), "{stuck}");
    assert_eq!(stuck["labels"]["job"], "api", "{stuck}");
    let summary = stuck["annotations"]["summary"].as_str().unwrap();
    assert!(
        summary.starts_with(&format!("A tokio worker of {instance} has been pinned for")),
        "{summary}"
    );
    assert!(
        stuck["annotations"]["runbook_url"]
            .as_str()
            .is_some_and(|u| u.ends_with("#pinwatchworkerstuck")),
        "{stuck}"
    );
    // The description names the function of the stuck pins, as the service's own metrics
    // have it (`rx.recv()` in pin_service.rs: the function, its file relative to the crate).
    let scraped = scrape(port);
    let location = scraped
        .lines()
        .filter(|l| l.starts_with("pinwatch_pins_by_location_total{"))
        .filter_map(|l| l.split("location=\"").nth(1)?.split('"').next())
        .find(|l| l.contains("/src/bin/pin_service.rs)"))
        .unwrap_or_else(|| panic!("no pin_service.rs location in\n{scraped}"));
    let description = stuck["annotations"]["description"].as_str().unwrap();
    assert!(
        description.contains(&format!(
            "Most pinned location over the last 15 minutes, not necessarily where a worker \
             is held now (`pinwatch ctl PID status` says that): {location} (pins: 3)."
        )),
        "{description}"
    );
    // The all-workers alert went the same way, naming the worker count.
    let all = &fired["PinwatchAllWorkersPinned"];
    assert_eq!(
        all["annotations"]["summary"],
        format!("All 3 tokio workers of {instance} are pinned").as_str(),
        "{all}"
    );
    // With every worker stuck no timer fires: the runtime is stalled, and that pages too.
    let stalled = &fired["PinwatchRuntimeStalled"];
    assert_eq!(stalled["labels"]["severity"], "critical", "{stalled}");
    assert_eq!(
        stalled["labels"]["instance"],
        instance.as_str(),
        "{stalled}"
    );
}

/// The shipped Alertmanager config, in a real Alertmanager: each critical alert of an instance a
/// page of its own (a group per alert name and instance: helper-66 saw a grouped "all workers
/// pinned" folded into an acknowledged "worker stuck"), and no alert muted (Alertmanager never
/// sends the resolve of an alert muted after it paged: helper-65); a warning goes to chat.
#[test]
fn the_shipped_alertmanager_config_pages_each_critical_alert_and_mutes_none() {
    // Its receivers' gateways are made up: point them at a closed port of this machine.
    let closed = support::free_port();
    let config =
        std::fs::read_to_string(support::repo().join("deploy/alertmanager/alertmanager.yml"))
            .unwrap()
            .replace(
                "pager-gateway.example.invalid",
                &format!("127.0.0.1:{closed}"),
            )
            .replace(
                "chat-gateway.example.invalid",
                &format!("127.0.0.1:{closed}"),
            );
    let (_am, am_port) = alertmanager(&config);
    let alert = |name: &str, instance: &str, severity: &str| {
        serde_json::json!({
            "labels": {"alertname": name, "job": "api", "instance": instance, "severity": severity},
            "annotations": {"summary": name},
        })
    };
    let alerts = serde_json::json!([
        alert("PinwatchAllWorkersPinned", "a:9464", "critical"),
        alert("PinwatchWorkerStuck", "a:9464", "critical"),
        alert("PinwatchRuntimeStalled", "a:9464", "critical"),
        alert("PinwatchRuntimeStalled", "b:9464", "critical"),
        alert("PinwatchTargetDown", "c:9464", "critical"),
        alert("PinwatchWorkerStuck", "c:9464", "critical"),
        alert("PinwatchPinnedTimeHigh", "c:9464", "warning"),
    ]);
    let url = format!("http://127.0.0.1:{am_port}/api/v2/alerts");
    let posted = support::agent(Duration::from_secs(30))
        .post(&url)
        .header("Content-Type", "application/json")
        .send(alerts.to_string())
        .unwrap();
    assert_eq!(posted.status().as_u16(), 200);
    // (receiver, the group's labels, its alerts' names): sorted.
    type Groups = std::collections::BTreeSet<(String, Vec<(String, String)>, Vec<String>)>;
    let expected: Groups = [
        ("pager", "PinwatchAllWorkersPinned", "a:9464"),
        ("pager", "PinwatchWorkerStuck", "a:9464"),
        ("pager", "PinwatchRuntimeStalled", "a:9464"),
        ("pager", "PinwatchRuntimeStalled", "b:9464"),
        ("pager", "PinwatchTargetDown", "c:9464"),
        ("pager", "PinwatchWorkerStuck", "c:9464"),
        ("chat", "PinwatchPinnedTimeHigh", "c:9464"),
    ]
    .into_iter()
    .map(|(receiver, name, instance)| {
        (
            receiver.to_owned(),
            [("alertname", name), ("instance", instance), ("job", "api")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            vec![name.to_owned()],
        )
    })
    .collect();
    // Alertmanager's dispatcher groups the posted alerts on a goroutine of its own: read the
    // groups until they hold every alert (bounded), then compare them, and every alert's state.
    let read_groups = || -> (Groups, Vec<String>) {
        let (status, body) = get(&format!("{url}/groups"), Duration::from_secs(10)).unwrap();
        assert_eq!(status, 200, "{body}");
        let listed: serde_json::Value = serde_json::from_str(&body).unwrap();
        let mut states = Vec::new();
        let groups = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|g| {
                let labels = g["labels"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                    .collect::<std::collections::BTreeMap<_, _>>()
                    .into_iter()
                    .collect();
                let mut names: Vec<String> = g["alerts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| {
                        states.push(a["status"]["state"].as_str().unwrap_or("").to_owned());
                        a["labels"]["alertname"].as_str().unwrap_or("").to_owned()
                    })
                    .collect();
                names.sort();
                (
                    g["receiver"]["name"].as_str().unwrap_or("").to_owned(),
                    labels,
                    names,
                )
            })
            .collect();
        (groups, states)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let (groups, states) = loop {
        let (groups, states) = read_groups();
        if states.len() >= 7 || Instant::now() > deadline {
            break (groups, states);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(groups, expected);
    assert!(states.iter().all(|s| s == "active"), "{states:?}");
}

#[test]
fn kubernetes_manifests_validate_and_the_prometheusrule_is_the_rules_file() {
    let k8s = support::repo().join("deploy/kubernetes");
    let bin = which("kubernetes-validate")
        .expect("kubernetes-validate is missing: `pip install kubernetes-validate` (.ci/run does)");
    let out = Command::new(bin)
        .args(["--strict", "service.yaml"])
        .current_dir(&k8s)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("passed for resource deployment/api")
            && text.contains("passed for resource service/api"),
        "{text}"
    );
    // The PrometheusRule's spec is the rules file, and promtool accepts it as one.
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.yml");
    let script = format!(
        "import yaml, sys\n\
         rule = yaml.safe_load(open('{k8s}/prometheusrule.yaml'))\n\
         rules = yaml.safe_load(open('{k8s}/../prometheus/pinwatch-rules.yml'))\n\
         assert rule['kind'] == 'PrometheusRule', rule['kind']\n\
         assert rule['spec'] == rules, 'prometheusrule.yaml differs from pinwatch-rules.yml'\n\
         yaml.safe_dump(rule['spec'], open('{spec}', 'w'))\n",
        k8s = k8s.display(),
        spec = spec.display()
    );
    support::python(&script);
    let out = run_tool(
        dir.path(),
        "promtool",
        "prometheus",
        &["check", "rules", "spec.yml"],
    );
    assert!(out.contains("SUCCESS: 15 rules found"), "{out}");
}

/// A program on the PATH.
fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join(name))
        .find(|p| p.is_file())
}

#[test]
fn the_guide_metric_table_is_the_exported_list() {
    let readme = std::fs::read_to_string(support::repo().join("docs/prometheus.md")).unwrap();
    let rows: Vec<(String, String)> = readme
        .lines()
        .filter(|l| l.starts_with("| `pinwatch_"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells[1].trim_matches('`');
            let name = name.split('{').next().unwrap().to_owned();
            (name, cells[2].to_owned())
        })
        .collect();
    let code: Vec<(String, String)> = METRICS
        .iter()
        .map(|m| (m.name.to_owned(), m.kind.to_owned()))
        .collect();
    assert_eq!(
        rows, code,
        "docs/prometheus.md's metric table and METRICS differ"
    );
}
