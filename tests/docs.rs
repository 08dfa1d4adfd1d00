//! The docs check: what the README and the guides in `docs/` say is what the code does — the
//! `PINWATCH_*` variables, the CLI commands shown with `$ pinwatch …`, the alerts and the metric
//! lists, the links between the guides — and an example of `detector/examples/` run as a user
//! runs it: a real process that serves, gets a request that pins, and is scraped.

mod support;

use std::collections::BTreeSet;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use pinwatch::export::prometheus::METRICS;

fn read(path: impl AsRef<Path>) -> String {
    let path = support::repo().join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The README and every guide, with their paths relative to the repository.
fn documents() -> Vec<(String, String)> {
    let mut docs = vec![("README.md".to_owned(), read("README.md"))];
    let mut guides: Vec<PathBuf> = std::fs::read_dir(support::repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    guides.sort();
    for p in guides {
        let name = format!("docs/{}", p.file_name().unwrap().to_string_lossy());
        docs.push((name, std::fs::read_to_string(&p).unwrap()));
    }
    docs
}

/// `PINWATCH` and `PINWATCH_X…` names in `text` (a trailing `_`, as in `PINWATCH_RECORD_*`, is
/// not part of the name).
fn variables(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("PINWATCH") {
        let before = rest[..i].chars().next_back();
        let tail = &rest[i..];
        let len = tail
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let name = tail[..len].trim_end_matches('_');
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.insert(name.to_owned());
        }
        rest = &tail[len.max(1)..];
    }
    out
}

/// The Rust sources under `dir`, each without its `#[cfg(test)]` module (the variables tests
/// set for themselves are not the library's).
fn sources(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            let code = match text.find("\n#[cfg(test)]") {
                Some(i) => text[..i].to_owned(),
                None => text,
            };
            out.push((p, code));
        }
    }
}

#[test]
fn every_variable_the_code_reads_is_in_the_configuration_guide_and_back() {
    let mut files = Vec::new();
    sources(&support::repo().join("detector/src"), &mut files);
    let code: BTreeSet<String> = files.iter().flat_map(|(_, t)| variables(t)).collect();
    let guide = variables(&read("docs/configuration.md"));
    assert!(code.len() > 10, "found only {code:?} in detector/src");
    let undocumented: Vec<_> = code.difference(&guide).collect();
    let unknown: Vec<_> = guide.difference(&code).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "in the code, not in docs/configuration.md: {undocumented:?}; \
         in docs/configuration.md, not in the code: {unknown:?}"
    );
    // Every variable any guide names is one the code reads too.
    for (name, text) in documents() {
        let unknown: Vec<_> = variables(&text).difference(&code).cloned().collect();
        assert!(
            unknown.is_empty(),
            "{name} names {unknown:?}, which no code reads"
        );
    }
}

/// The subcommands of a `--help` text (its `Commands:` section).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// The arguments a `--help` text's usage line puts after its own command, before `COMMAND`.
fn positionals(help: &str, command: &str) -> usize {
    let usage = help
        .lines()
        .find_map(|l| l.strip_prefix("Usage: "))
        .unwrap_or("");
    let own = usage
        .rsplit_once(&format!(" {command} "))
        .map_or(usage, |(_, rest)| rest);
    own.split_whitespace()
        .take_while(|w| !w.contains("COMMAND"))
        .filter(|w| w.starts_with('<'))
        .count()
}

fn help(cli: &Path, words: &[&str]) -> String {
    let out = Command::new(cli)
        .args(words)
        .arg("--help")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pinwatch {} --help failed: {}",
        words.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every command the docs show — `$ pinwatch …` lines, and the `pinwatch ctl` table's first
/// column — exists in the built CLI: each subcommand is listed by its parent's `--help`, and each
/// `--option` is in the `--help` of the subcommand it follows.
#[test]
fn every_command_the_guides_show_is_in_the_cli_help() {
    let cli = support::pinwatch_cli();
    let mut commands = Vec::new();
    for (name, text) in documents() {
        for line in text.lines() {
            if let Some(cmd) = line.strip_prefix("$ pinwatch ") {
                commands.push((name.clone(), cmd.to_owned()));
            } else if let Some(cell) = line.strip_prefix("| `pinwatch ") {
                let cmd = cell.split('`').next().unwrap();
                // `pause` / `resume` in one cell: each is a command.
                for part in cmd.split(" / ") {
                    let part = if part.starts_with("ctl") {
                        part.to_owned()
                    } else {
                        format!("ctl PID {part}")
                    };
                    commands.push((name.clone(), part.replace(['[', ']'], "")));
                }
            }
        }
    }
    assert!(commands.len() >= 10, "found only {commands:?}");
    for (doc, cmd) in &commands {
        let words: Vec<&str> = cmd
            .split_whitespace()
            .take_while(|w| !w.starts_with('|') && !w.starts_with('#'))
            .map(|w| if w == "PID" { "4242" } else { w })
            .collect();
        let mut path: Vec<&str> = Vec::new();
        let mut text = help(&cli, &[]);
        let mut values = 0;
        let mut command = "pinwatch";
        for w in &words {
            if let Some(opt) = w.strip_prefix("--") {
                let opt = opt.split('=').next().unwrap();
                assert!(
                    text.contains(&format!("--{opt}")),
                    "{doc}: `pinwatch {cmd}`: no --{opt} in `pinwatch {} --help`",
                    path.join(" ")
                );
                continue;
            }
            let subs = subcommands(&text);
            path.push(w);
            if subs.iter().any(|s| s == w) {
                text = help(&cli, &path);
                values = 0;
                command = w;
                continue;
            }
            // A value (a pid, a file, `threshold=50ms`): where a command takes subcommands, only
            // as many as its usage line has arguments before the subcommand.
            let before = positionals(&text, command);
            assert!(
                subs.is_empty() || values < before,
                "{doc}: `pinwatch {cmd}`: `{w}` is not a command of `pinwatch {}` ({subs:?})",
                path[..path.len() - 1].join(" ")
            );
            values += 1;
        }
    }
}

/// The alerts: the rule files' names, the table in docs/prometheus.md, a runbook section each in
/// docs/runbooks.md, and every "N alerts" any document states.
#[test]
fn the_alerts_the_docs_name_and_count_are_the_rule_files() {
    let names = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.trim().strip_prefix("- alert: "))
            .map(|s| s.trim().to_owned())
            .collect()
    };
    let rules = names(&read("deploy/prometheus/pinwatch-rules.yml"));
    let operator = names(&read("deploy/kubernetes/prometheusrule.yaml"));
    assert_eq!(rules, operator, "the two rule files name different alerts");
    let table: Vec<String> = read("docs/prometheus.md")
        .lines()
        .filter_map(|l| l.strip_prefix("| `Pinwatch"))
        .map(|l| format!("Pinwatch{}", l.split('`').next().unwrap()))
        .collect();
    assert_eq!(table, rules, "docs/prometheus.md's alert table");
    let runbooks: Vec<String> = read("docs/runbooks.md")
        .lines()
        .filter_map(|l| l.strip_prefix("## Pinwatch"))
        .map(|l| format!("Pinwatch{}", l.trim()))
        .collect();
    assert_eq!(runbooks, rules, "docs/runbooks.md's sections");
    const WORDS: [&str; 13] = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve",
    ];
    let mut docs = documents();
    docs.push(("deploy/README.md".to_owned(), read("deploy/README.md")));
    let mut stated = 0;
    for (name, text) in &docs {
        let words: Vec<String> = text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        for pair in words.windows(2) {
            if pair[1] != "alerts" {
                continue;
            }
            let n = WORDS
                .iter()
                .position(|w| *w == pair[0])
                .or_else(|| pair[0].parse().ok());
            if let Some(n) = n {
                stated += 1;
                assert_eq!(
                    n,
                    rules.len(),
                    "{name} says \"{} alerts\"; the rule file has {}",
                    pair[0],
                    rules.len()
                );
            }
        }
    }
    assert!(stated >= 2, "no document states the alert count");
}

/// A rule of `deploy/prometheus/pinwatch-rules.yml`: `record` or `alert`, its name, its
/// expression as written, its `for` and its `severity` label (none for a recording rule).
#[derive(Debug)]
struct Rule {
    kind: &'static str,
    name: String,
    expr: String,
    for_: Option<String>,
    severity: Option<String>,
}

/// The rules of a Prometheus rule file written as pinwatch's is: each rule a `- record:` or
/// `- alert:` item, its `expr` on one line or as a literal block (`expr: |`). Any other form of
/// `expr` (quoted, folded) fails here rather than being misread.
fn rule_file(text: &str) -> Vec<Rule> {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut rules: Vec<Rule> = Vec::new();
    let mut key_indent = 0;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        i += 1;
        for kind in ["record", "alert"] {
            if let Some(name) = trimmed.strip_prefix(&format!("- {kind}: ")) {
                key_indent = indent(line) + 2;
                rules.push(Rule {
                    kind,
                    name: name.trim().to_owned(),
                    expr: String::new(),
                    for_: None,
                    severity: None,
                });
            }
        }
        let Some(rule) = rules.last_mut() else {
            continue;
        };
        if indent(line) == key_indent {
            if let Some(expr) = trimmed.strip_prefix("expr: ") {
                if expr == "|" {
                    // The block: the lines indented deeper than `expr`, less the first one's
                    // indentation.
                    let block: Vec<&str> = lines[i..]
                        .iter()
                        .take_while(|l| l.trim().is_empty() || indent(l) > key_indent)
                        .copied()
                        .collect();
                    i += block.len();
                    let depth = block.first().map_or(0, |l| indent(l));
                    let body: Vec<&str> =
                        block.iter().map(|l| l.get(depth..).unwrap_or("")).collect();
                    rule.expr = body.join("\n").trim_end().to_owned();
                } else {
                    assert!(
                        !expr.starts_with(['"', '\'', '>', '|']),
                        "{}: an expr written as {expr:?}: write it plain or as `expr: |`",
                        rule.name
                    );
                    rule.expr = expr.trim().to_owned();
                }
            } else if let Some(f) = trimmed.strip_prefix("for: ") {
                rule.for_ = Some(f.trim().to_owned());
            }
        } else if let Some(sev) = trimmed.strip_prefix("severity: ") {
            rule.severity = Some(sev.trim().to_owned());
        }
    }
    for r in &rules {
        assert!(!r.expr.is_empty(), "{}: no expr found", r.name);
    }
    rules
}

/// docs/prometheus.md gives every rule of the rule file, in its order, under a `#### `NAME``
/// heading: the expression exactly as the file has it (the first `promql` block after the
/// heading), and for an alert a first line after it that states its `for` and severity. The
/// alert table's `for` and severity columns say the same.
#[test]
fn the_guide_gives_every_rule_with_the_rule_files_expression() {
    let rules = rule_file(&read("deploy/prometheus/pinwatch-rules.yml"));
    assert!(
        rules.iter().filter(|r| r.kind == "alert").count() >= 9
            && rules.iter().filter(|r| r.kind == "record").count() >= 5,
        "read only {rules:?}"
    );
    let guide = read("docs/prometheus.md");
    let mut documented: Vec<(String, String, Option<String>)> = Vec::new();
    let mut lines = guide.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line
            .strip_prefix("#### `")
            .and_then(|l| l.strip_suffix('`'))
        else {
            continue;
        };
        let mut expr = Vec::new();
        let mut in_block = false;
        let mut after = None;
        for l in lines.by_ref() {
            if in_block {
                if l == "```" {
                    in_block = false;
                    continue;
                }
                expr.push(l);
            } else if l == "```promql" {
                assert!(
                    expr.is_empty(),
                    "docs/prometheus.md: {name} has two promql blocks"
                );
                in_block = true;
            } else if !expr.is_empty() && !l.trim().is_empty() {
                after = Some(l.to_owned());
                break;
            } else if l.starts_with('#') {
                panic!("docs/prometheus.md: no promql block under {name}");
            }
        }
        documented.push((name.to_owned(), expr.join("\n"), after));
    }
    let names: Vec<&str> = documented.iter().map(|d| d.0.as_str()).collect();
    let want: Vec<&str> = rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, want, "docs/prometheus.md's rule sections");
    for (rule, (name, expr, after)) in rules.iter().zip(&documented) {
        assert_eq!(
            expr, &rule.expr,
            "docs/prometheus.md gives {name}'s expression otherwise than pinwatch-rules.yml"
        );
        if rule.kind == "alert" {
            let severity = rule.severity.as_deref().expect("an alert has a severity");
            let stated = match &rule.for_ {
                Some(f) => format!("**for `{f}`, {severity}.**"),
                None => format!("**no `for`, {severity}.**"),
            };
            let after = after.as_deref().unwrap_or("");
            assert!(
                after.starts_with(&stated),
                "docs/prometheus.md, {name}: the line after the expression must begin \
                 {stated:?}: {after:?}"
            );
        }
    }
    // The overview table: `| `Name` | fires when | for | severity |`.
    for row in guide.lines().filter(|l| l.starts_with("| `Pinwatch")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let name = cells[1].trim_matches('`');
        let rule = rules
            .iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("docs/prometheus.md's table names {name}, no rule"));
        assert_eq!(
            (cells[3], Some(cells[4])),
            (
                rule.for_.as_deref().unwrap_or("—"),
                rule.severity.as_deref()
            ),
            "docs/prometheus.md's table row of {name}: its `for` and severity"
        );
    }
}

/// The `pinwatch_…` names in `text` that stand alone: not inside a recording rule's name
/// (`job_instance:pinwatch_pins:rate5m`), a path (`pinwatch_macros::test`), a file's
/// (`pinwatch_test.rs`) or a longer word; a Markdown escape (`pinwatch\_x`) is read as the name.
fn metric_names(text: &str) -> BTreeSet<String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let text = text.replace("\\_", "_");
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("pinwatch_") {
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| word(c) || c == ':') {
            continue;
        }
        let rest = &text[i..];
        let end = rest.find(|c: char| !word(c)).unwrap_or(rest.len());
        // Followed by `:` or `.` and more of a name: a rule's name, a path, a file name.
        let mut after = rest[end..].chars();
        if matches!(after.next(), Some(':' | '.'))
            && after.next().is_some_and(|c| word(c) || c == ':')
        {
            continue;
        }
        out.insert(rest[..end].to_owned());
    }
    out
}

/// Every metric name the README and the guides give is one pinwatch serves (`METRICS`, a
/// histogram's series included): blast-radius.md named a `pinwatch_driver_rescues_total` that
/// never existed (helper-71), and an alert or a panel written from it would find nothing.
#[test]
fn every_metric_the_docs_name_is_one_pinwatch_serves() {
    let mut served: BTreeSet<String> = METRICS.iter().map(|m| m.name.to_owned()).collect();
    for m in METRICS.iter().filter(|m| m.kind == "histogram") {
        for part in ["_bucket", "_sum", "_count"] {
            served.insert(format!("{}{part}", m.name));
        }
    }
    // Not metrics: the test macros' argument, the collector's own never-exported description,
    // and the prefix a `grep` example matches.
    for other in ["pinwatch_crate", "pinwatch_collector", "pinwatch_"] {
        served.insert(other.to_owned());
    }
    let mut docs = documents();
    docs.push(("deploy/README.md".to_owned(), read("deploy/README.md")));
    let mut unknown = Vec::new();
    for (name, text) in &docs {
        for metric in metric_names(text) {
            if !served.contains(&metric) {
                unknown.push(format!("{name}: {metric}"));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "not metrics pinwatch serves: {unknown:#?}"
    );
    assert_eq!(
        metric_names(
            "`pinwatch_driver_rescues_total` and job:pinwatch_pins:rate5m, pinwatch_test.rs, \
             pinwatch_rules.yml, pinwatch_macros::test; pinwatch_bogus_total: counts \
             pinwatch\\_escaped, pinwatch_workers."
        ),
        BTreeSet::from(
            [
                "pinwatch_bogus_total",
                "pinwatch_driver_rescues_total",
                "pinwatch_escaped",
                "pinwatch_workers"
            ]
            .map(str::to_owned)
        )
    );
}

/// The labels the docs give a metric, `name{label}` or `name{label="value"}` (also `=~`, `!=`,
/// `!~`), as (metric, label, value): a Grafana selector variable (`{$sel}`) gives none.
fn metric_labels(text: &str) -> Vec<(String, String, Option<String>)> {
    let text = text.replace("\\_", "_");
    let mut out = Vec::new();
    for metric in metric_names(&text) {
        for (i, _) in text.match_indices(&format!("{metric}{{")) {
            let inside = &text[i + metric.len() + 1..];
            // Up to the closing brace outside a quoted value.
            let mut quoted = false;
            let end = inside
                .char_indices()
                .find(|&(_, c)| {
                    quoted ^= c == '"';
                    !quoted && c == '}'
                })
                .map_or(inside.len(), |(k, _)| k);
            let mut rest = &inside[..end];
            while !rest.is_empty() {
                let name_end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                let (name, after) = rest.split_at(name_end);
                if name.is_empty() {
                    break;
                }
                let after = after.trim_start_matches(['=', '!', '~']);
                let (value, tail) = match after.strip_prefix('"') {
                    Some(v) => {
                        let close = v.find('"').unwrap_or(v.len());
                        (Some(v[..close].to_owned()), &v[(close + 1).min(v.len())..])
                    }
                    None => (None, after),
                };
                out.push((metric.clone(), name.to_owned(), value));
                rest = tail.trim_start_matches([',', ' ']);
            }
        }
    }
    out
}

/// Every label the docs give a metric is one of its labels (or a label Prometheus adds to
/// every series, `job` and `instance`; `le` of a histogram's buckets), and every `reason` value
/// is one pinwatch gives: a query written from the docs would otherwise find nothing.
#[test]
fn every_label_the_docs_give_a_metric_is_one_it_has() {
    let reasons: Vec<&str> = pinwatch::Reason::ALL.iter().map(|r| r.as_str()).collect();
    let mut docs = documents();
    docs.push(("deploy/README.md".to_owned(), read("deploy/README.md")));
    let mut wrong = Vec::new();
    let mut seen = 0;
    for (doc, text) in &docs {
        for (metric, label, value) in metric_labels(text) {
            seen += 1;
            let base = metric.strip_suffix("_bucket").unwrap_or(&metric);
            let labels = METRICS
                .iter()
                .find(|m| m.name == metric || m.name == base)
                .map_or(&[][..], |m| m.labels);
            // The collector's own description, never exported, has one constant label.
            let known = labels.contains(&label.as_str())
                || ["job", "instance"].contains(&label.as_str())
                || (metric == "pinwatch_collector" && label == "collector")
                || (label == "le" && metric.ends_with("_bucket"));
            if !known {
                wrong.push(format!("{doc}: {metric}{{{label}}}"));
            }
            if let Some(v) = value.filter(|_| label == "reason") {
                if !reasons.contains(&v.as_str()) {
                    wrong.push(format!("{doc}: {metric}{{reason=\"{v}\"}}"));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "labels the metrics do not have: {wrong:#?}"
    );
    assert!(seen >= 10, "only {seen} labels found in the docs");
    assert_eq!(
        metric_labels(
            "pinwatch_pins_total{reason=\"sleep\", job=~\"a}b\"} pinwatch_x{$sel} \
             pinwatch_y{location}"
        ),
        vec![
            (
                "pinwatch_pins_total".into(),
                "reason".into(),
                Some("sleep".into())
            ),
            (
                "pinwatch_pins_total".into(),
                "job".into(),
                Some("a}b".into())
            ),
            ("pinwatch_y".into(), "location".into(), None),
        ]
    );
}

/// docs/otlp.md's metric table: the names the OTLP exporter registers (read from its source),
/// and, translated, `METRICS`.
#[test]
fn the_otlp_metric_table_is_what_the_exporter_registers() {
    let source = read("detector/src/export/otlp.rs");
    let mut code = BTreeSet::new();
    for kind in ["_counter(\"", "_gauge(\"", "_histogram(\""] {
        for (i, _) in source.match_indices(kind) {
            let name = &source[i + kind.len()..];
            code.insert(name[..name.find('"').unwrap()].to_owned());
        }
    }
    assert!(code.len() >= METRICS.len(), "{code:?}");
    let guide = read("docs/otlp.md");
    let section = guide
        .split("\n## Metrics\n")
        .nth(1)
        .expect("docs/otlp.md has a ## Metrics section");
    let section = section.split("\n## ").next().unwrap();
    let rows: Vec<Vec<String>> = section
        .lines()
        .filter(|l| l.starts_with("| `pinwatch."))
        .map(|l| {
            l.split('|')
                .map(|c| c.trim().trim_matches('`').to_owned())
                .collect()
        })
        .collect();
    let documented: BTreeSet<String> = rows.iter().map(|r| r[1].clone()).collect();
    assert_eq!(
        documented, code,
        "docs/otlp.md's metrics and otlp.rs differ"
    );
    let translated: BTreeSet<&str> = rows.iter().map(|r| r[4].as_str()).collect();
    let exported: BTreeSet<&str> = METRICS.iter().map(|m| m.name).collect();
    assert_eq!(
        translated, exported,
        "docs/otlp.md's Prometheus names and METRICS differ"
    );
}

/// GitHub's anchor for a heading.
/// The README's list of the other examples (the quick start's `web_service` aside) names every
/// example in `detector/examples/`, and only those: it named three of twelve (helper-71).
#[test]
fn the_readme_names_every_example() {
    let readme = read("README.md");
    let list = readme
        .split_once("The other examples in `detector/examples/`")
        .map(|(_, rest)| rest.split("\n\n").next().unwrap_or(""))
        .expect("the README's list of examples");
    // Each item of the list (`` `name` `` then `(`, `,` or `and`, not a path) is an example.
    let pieces: Vec<&str> = list.split('`').collect();
    let mut listed: Vec<&str> = pieces
        .iter()
        .zip(pieces.iter().skip(1))
        .skip(1)
        .step_by(2)
        .filter(|(w, after)| {
            w.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                && ["(", ",", "and "]
                    .iter()
                    .any(|a| after.trim_start().starts_with(a))
        })
        .map(|(w, _)| *w)
        .collect();
    listed.push("web_service");
    listed.sort_unstable();
    let mut examples: Vec<String> = std::fs::read_dir(support::repo().join("detector/examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    examples.sort();
    assert!(examples.len() >= 12, "{examples:?}");
    assert_eq!(
        listed, examples,
        "the README's list, and detector/examples/"
    );
}

fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every relative link of the README and the guides points at a file that exists, and at a
/// heading of it when it names one.
#[test]
fn every_link_between_the_docs_resolves() {
    let repo = support::repo();
    for (name, text) in documents() {
        let dir = repo.join(&name).parent().unwrap().to_owned();
        let mut fence = false;
        for line in text.lines() {
            if line.starts_with("```") {
                fence = !fence;
            }
            if fence {
                continue;
            }
            for (i, _) in line.match_indices("](") {
                let rest = &line[i + 2..];
                let link = &rest[..rest.find(')').unwrap_or(rest.len())];
                if link.starts_with("http") || link.contains(' ') {
                    continue;
                }
                let (file, heading) = link.split_once('#').unwrap_or((link, ""));
                let target = if file.is_empty() {
                    repo.join(&name)
                } else {
                    dir.join(file)
                };
                assert!(target.exists(), "{name}: broken link {link}");
                if !heading.is_empty() && (file.is_empty() || file.ends_with(".md")) {
                    let body = std::fs::read_to_string(&target).unwrap();
                    let mut fenced = false;
                    let found = body.lines().any(|l| {
                        if l.starts_with("```") {
                            fenced = !fenced;
                        }
                        !fenced
                            && l.starts_with('#')
                            && anchor(l.trim_start_matches('#')) == heading
                    });
                    assert!(found, "{name}: no heading #{heading} in {file}");
                }
            }
        }
    }
}

/// Builds an example of the `pinwatch` crate as a user would (`cargo build --example`) and
/// returns its executable.
fn example(name: &str) -> PathBuf {
    let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args([
            "build",
            "--locked",
            "-p",
            "pinwatch",
            "--example",
            name,
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(support::repo())
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "building the example {name} failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == name)
        .find_map(|v| v["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo named no executable for the example {name}"))
}

/// `detector/examples/web_service.rs`, the README's quick start, run for real: it serves on a
/// port the OS picks, `GET /slow` blocks its worker, and pinwatch's own endpoint counts the pin
/// under `sleep` at the example's blocking line, which its WARN event names too.
#[test]
fn the_web_service_example_reports_its_blocking_handler() {
    let source = read("detector/examples/web_service.rs");
    let line = source
        .lines()
        .position(|l| l.contains("std::thread::sleep("))
        .expect("the example blocks somewhere")
        + 1;
    let at = format!("examples/web_service.rs:{line}");
    // Prometheus counts it per function, its file as every build machine names it.
    let function = "web_service::slow::{{closure}} (web_service/examples/web_service.rs)\"}";
    let bin = example("web_service");
    let metrics = format!("127.0.0.1:{}", support::free_port());
    let mut child = support::Proc {
        child: Command::new(&bin)
            .env("LISTEN", "127.0.0.1:0")
            .env("PINWATCH_PROMETHEUS_ADDR", &metrics)
            .env("PINWATCH_CONTROL", "off")
            .env("RUST_LOG", "warn")
            .env("NO_COLOR", "1")
            .env_remove("PINWATCH_THRESHOLD")
            .env_remove("PINWATCH")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
        name: "web_service".into(),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stdout).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let first = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the example printed nothing within 60 s");
    let app = first
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("first line: {first:?}"))
        .to_owned();
    let (status, body) = support::get(&format!("{app}/slow"), Duration::from_secs(30)).unwrap();
    assert_eq!((status, body.as_str()), (200, "slow\n"));
    let counted = "pinwatch_pins_by_location_total{location=";
    let page = support::wait_for("the pin in /metrics", Duration::from_secs(60), || {
        let (_, page) =
            support::get(&format!("http://{metrics}/metrics"), Duration::from_secs(5)).ok()?;
        page.lines()
            .any(|l| l.starts_with(counted) && l.contains(function) && !l.ends_with(" 0"))
            .then_some(page)
    });
    let sleep = page
        .lines()
        .find_map(|l| l.strip_prefix("pinwatch_pins_total{reason=\"sleep\"} "))
        .expect("pinwatch_pins_total{reason=\"sleep\"}");
    assert!(sleep.parse::<f64>().unwrap() >= 1.0, "{page}");
    // The WARN event on the service's output names the same line.
    let warned = (0..1000)
        .map_while(|_| rx.recv_timeout(Duration::from_secs(30)).ok())
        .find(|l| l.contains("WARN pinwatch: pinned"))
        .expect("no WARN event from pinwatch on the example's output");
    assert!(
        warned.contains(&at) && warned.contains("reason=sleep"),
        "{warned}"
    );
}
