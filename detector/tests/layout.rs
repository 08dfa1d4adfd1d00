//! The detector's layout: modules depend on each other one way, in pipeline order, and the code
//! that runs on every poll or in the signal handler stays free of allocation, locks and panics.
//! Reads the sources; fails on a cycle or a backward import, naming the files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The pipeline, first to last: a module may use the ones before it, never one after it.
const PIPELINE: &[&str] = &[
    "poll", "signal", "sync", "spans", "watch", "analyze", "export", "control", "runtime",
    "builder", "testing",
];
/// Leaves every stage may use; they use no pipeline module, except `report` (which reads
/// recordings of events) and `profile` (which turns events into a pprof profile).
const LEAVES: &[&str] = &["error", "config", "event", "files", "report", "profile"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            out.extend(files(&p));
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
    out
}

/// The top-level module a file belongs to (`poll/slot.rs` → `poll`, `event.rs` → `event`).
fn module_of(file: &Path) -> String {
    let rel = file.strip_prefix(src()).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_owned()
}

/// The code of a file without comments and without its `#[cfg(test)]` tail.
fn code(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap();
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The crate's top-level modules `file` refers to with `crate::X` (or `super::X` from a
/// module's root file).
fn uses(file: &Path) -> BTreeSet<String> {
    let code = code(file);
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.insert(name);
        }
    }
    // `use crate::{a, b}` groups.
    for (i, _) in code.match_indices("crate::{") {
        let rest = &code[i + "crate::{".len()..];
        let group = &rest[..rest.find('}').unwrap_or(0)];
        for part in group.split(',') {
            let name: String = part
                .trim()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

fn graph() -> Graph {
    let known: BTreeSet<&str> = PIPELINE.iter().chain(LEAVES).copied().collect();
    let mut g = Graph::new();
    for f in files(&src()) {
        let from = module_of(&f);
        if from == "lib" {
            continue;
        }
        assert!(
            known.contains(from.as_str()),
            "{} is in module `{from}`, which the layout test does not know: add it to PIPELINE \
             or LEAVES",
            f.display()
        );
        let entry = g.entry(from.clone()).or_default();
        for to in uses(&f) {
            if to != from && known.contains(to.as_str()) {
                entry.insert((to, f.clone()));
            }
        }
    }
    g
}

fn rank(m: &str) -> Option<usize> {
    PIPELINE.iter().position(|p| *p == m)
}

type Graph = BTreeMap<String, BTreeSet<(String, PathBuf)>>;

/// A cycle in `g`, if there is one, as the modules along it.
fn find_cycle(g: &Graph) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        g: &Graph,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(pos) = stack.iter().position(|s| s == m) {
            let mut cycle = stack[pos..].to_vec();
            cycle.push(m.to_owned());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        stack.push(m.to_owned());
        for (to, _) in g.get(m).into_iter().flatten() {
            if let Some(c) = visit(to, g, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(m.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|m| visit(m, g, &mut Vec::new(), &mut done))
}

#[test]
fn modules_depend_on_each_other_one_way_in_pipeline_order() {
    let mut wrong = Vec::new();
    for (from, tos) in &graph() {
        for (to, file) in tos {
            let ok = match (rank(from), rank(to)) {
                // Down the pipeline only.
                (Some(a), Some(b)) => b < a,
                // Any stage may use a leaf.
                (Some(_), None) => true,
                // A leaf never uses a stage.
                (None, Some(_)) => false,
                // Leaves among themselves: the cycle check decides.
                (None, None) => true,
            };
            if !ok {
                wrong.push(format!("{} ({from}) uses {to}", file.display()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the pipeline order:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn there_is_no_import_cycle() {
    let g = graph();
    assert!(g.contains_key("poll") && g.contains_key("runtime"), "{g:?}");
    if let Some(cycle) = find_cycle(&g) {
        panic!("import cycle: {}", cycle.join(" → "));
    }
}

#[test]
fn a_cycle_is_found() {
    let mut g = Graph::new();
    let edge = |to: &str| (to.to_owned(), PathBuf::new());
    g.entry("a".into()).or_default().insert(edge("b"));
    g.entry("b".into()).or_default().insert(edge("c"));
    assert_eq!(find_cycle(&g), None);
    g.entry("c".into()).or_default().insert(edge("a"));
    assert_eq!(
        find_cycle(&g),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}

/// What may not appear in per-poll and signal-handler code.
const FORBIDDEN: &[&str] = &[
    "Mutex",
    "RwLock",
    "Condvar",
    ".lock()",
    "Box::new",
    "vec!",
    "Vec::",
    "String",
    "format!",
    "to_string",
    "to_owned",
    "panic!",
    ".unwrap()",
    ".expect(",
    "unreachable!",
    "println!",
    "eprintln!",
];

#[test]
fn per_poll_and_signal_handler_code_neither_allocates_nor_locks_nor_panics() {
    let mut hot: Vec<PathBuf> = files(&src().join("poll"));
    hot.push(src().join("signal/handler.rs"));
    let mut found = Vec::new();
    for f in &hot {
        let code = code(f);
        for line in code.lines() {
            for bad in FORBIDDEN {
                if line.contains(bad) {
                    found.push(format!("{}: `{bad}` in `{}`", f.display(), line.trim()));
                }
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}
