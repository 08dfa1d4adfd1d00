//! The detector's layout: modules depend on each other one way, in pipeline order, and the code
//! that runs on every poll or in the signal handler stays free of allocation, locks and panics.
//! Reads the sources; fails on a cycle or a backward import, naming the files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// CONTRIBUTING.md's line that starts with `label:`, its names in order (split on `sep`).
fn contributing(label: &str, sep: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../CONTRIBUTING.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{label}: ")))
        .unwrap_or_else(|| panic!("{} has no `{label}:` line", path.display()));
    line.split(sep).map(|m| m.trim().to_owned()).collect()
}

/// The pipeline, first to last: a module may use the ones before it, never one after it.
fn pipeline() -> Vec<String> {
    contributing("pipeline", "→")
}

/// Leaves every stage may use; they use no pipeline module, except `recording` (which reads
/// recordings of events) and `profile` (which turns events into a pprof profile).
fn leaves() -> Vec<String> {
    contributing("leaves", ",")
}

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
    let (pipeline, leaves) = (pipeline(), leaves());
    let known: BTreeSet<&str> = pipeline.iter().chain(&leaves).map(String::as_str).collect();
    let mut g = Graph::new();
    for f in files(&src()) {
        let from = module_of(&f);
        if from == "lib" {
            continue;
        }
        assert!(
            known.contains(from.as_str()),
            "{} is in module `{from}`, which CONTRIBUTING.md's module list does not name: add it \
             to its `pipeline:` or `leaves:` line",
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
    pipeline().iter().position(|p| p == m)
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

/// Within a module folder, which sibling files each file names (`super::sibling`, or
/// `crate::module::sibling`): the module's root (`mod.rs`) is left out, as its children's
/// index.
fn file_graph() -> Graph {
    let mut g = Graph::new();
    for f in files(&src()) {
        let Some(dir) = f.parent().filter(|d| *d != src()) else {
            continue;
        };
        let stem = f.file_stem().unwrap().to_string_lossy().into_owned();
        if stem == "mod" {
            continue;
        }
        let module = dir.file_name().unwrap().to_string_lossy().into_owned();
        let siblings: BTreeSet<String> = files(dir)
            .iter()
            .filter(|s| s.parent() == Some(dir))
            .map(|s| s.file_stem().unwrap().to_string_lossy().into_owned())
            .filter(|s| s != "mod" && *s != stem)
            .collect();
        let code = code(&f);
        let from = format!("{module}/{stem}");
        let entry = g.entry(from).or_default();
        for prefix in ["super::".to_owned(), format!("crate::{module}::")] {
            for (i, _) in code.match_indices(&prefix) {
                let rest = &code[i + prefix.len()..];
                let mut names: Vec<String> = Vec::new();
                if let Some(group) = rest.strip_prefix('{') {
                    let group = &group[..group.find('}').unwrap_or(0)];
                    names.extend(group.split(',').map(|p| p.trim().to_owned()));
                } else {
                    names.push(rest.to_owned());
                }
                for n in names {
                    let name: String = n
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if siblings.contains(&name) {
                        entry.insert((format!("{module}/{name}"), f.clone()));
                    }
                }
            }
        }
    }
    g
}

#[test]
fn no_two_files_of_a_module_use_each_other() {
    let g = file_graph();
    assert!(g.contains_key("poll/claim"), "{g:?}");
    assert!(
        g["poll/claim"].iter().any(|(to, _)| to == "poll/current"),
        "the file graph sees `super::current` in poll/claim.rs: {g:?}"
    );
    if let Some(cycle) = find_cycle(&g) {
        panic!("import cycle between files: {}", cycle.join(" → "));
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

/// The crate docs name the modules in the same order as CONTRIBUTING.md, and the crate
/// declares exactly those modules: one description of the layout, checked.
#[test]
fn the_crate_docs_and_the_crate_agree_with_contributing_md() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let section: String = lib
        .split("//! ## The pipeline")
        .nth(1)
        .expect("lib.rs has a `## The pipeline` section")
        .lines()
        .take_while(|l| !l.starts_with("//! ##"))
        .collect::<Vec<_>>()
        .join(" ");
    // The stages: the backticked names before the first `:`, in order.
    let stages: Vec<String> = section
        .split(':')
        .next()
        .unwrap()
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    assert_eq!(stages, pipeline(), "lib.rs's pipeline");
    for leaf in leaves() {
        assert!(
            section.contains(&format!("`{leaf}`")),
            "lib.rs's pipeline section does not name the leaf `{leaf}`"
        );
    }
    // Every top-level module declared in lib.rs, and only those, is in the list.
    let declared: BTreeSet<String> = code(&src().join("lib.rs"))
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            let name = l.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.to_owned())
        })
        .collect();
    let listed: BTreeSet<String> = pipeline().into_iter().chain(leaves()).collect();
    assert_eq!(
        declared, listed,
        "lib.rs's modules against CONTRIBUTING.md's"
    );
}
