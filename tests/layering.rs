//! The library's modules refer to one another without cycles, checked from the source: every
//! `crate::a::b` path and every `super::x` path of a module (comments and its trailing test
//! module left out) is an edge to the longest module path it names, and the graph of those
//! edges must sort topologically. So a module family that needs another's internals makes
//! the dependency point one way (e.g. buffer types make buffers, so `buffer.rs` may use
//! `buffer_type.rs` and not the reverse).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// `(module path, file)` for every `.rs` file under `src/` (`""` for the crate root).
fn modules(src: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(src).unwrap().with_extension("");
                let mut parts: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
                    parts.pop();
                }
                out.push((parts.join("::"), p));
            }
        }
    }
    out
}

/// The code of a file without comment lines and without its trailing `mod tests`.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = text
        .find("#[cfg(test)]\nmod tests")
        .map_or(text.as_str(), |i| &text[..i]);
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The identifier path that starts at byte `at` of `code` (`a::b::c`).
fn path_at(code: &str, at: usize) -> Vec<&str> {
    let end = code[at..]
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .map_or(code.len(), |n| at + n);
    code[at..end]
        .split("::")
        .filter(|s| !s.is_empty())
        .collect()
}

/// The modules `module` (whose code is `code`) refers to, among `known`.
fn edges(module: &str, code: &str, known: &BTreeSet<String>) -> BTreeSet<String> {
    let longest = |parts: &[&str]| {
        (1..=parts.len())
            .rev()
            .map(|k| parts[..k].join("::"))
            .find(|m| known.contains(m))
    };
    let mut out = BTreeSet::new();
    for (i, m) in code.match_indices("crate::") {
        if let Some(t) = longest(&path_at(code, i + m.len())) {
            out.insert(t);
        }
    }
    for (i, _) in code.match_indices("super::") {
        if code[..i].ends_with("super::") {
            continue; // the rest of a chain already read
        }
        let parts = path_at(code, i);
        let ups = parts.iter().take_while(|p| **p == "super").count();
        let mut base: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
        base.truncate(base.len().saturating_sub(ups));
        base.extend(&parts[ups..]);
        if let Some(t) = longest(&base) {
            out.insert(t);
        }
    }
    // A module may use itself and its own submodules; the crate root is above everything.
    out.retain(|t| !t.is_empty() && t != module && !t.starts_with(&format!("{module}::")));
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&src);
    let known: BTreeSet<String> = mods.iter().map(|(m, _)| m.clone()).collect();
    mods.iter()
        .map(|(m, f)| (m.clone(), edges(m, &code(f), &known)))
        .collect()
}

#[test]
fn modules_refer_to_one_another_without_cycles() {
    let g = graph();
    // Kahn's algorithm: repeatedly take the modules no remaining module depends on.
    let mut users: BTreeMap<&str, usize> = g.keys().map(|m| (m.as_str(), 0)).collect();
    for deps in g.values() {
        for d in deps {
            *users.get_mut(d.as_str()).unwrap() += 1;
        }
    }
    let mut ready: Vec<&str> = users
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(m, _)| *m)
        .collect();
    let mut sorted = 0;
    while let Some(m) = ready.pop() {
        sorted += 1;
        for d in &g[m] {
            let n = users.get_mut(d.as_str()).unwrap();
            *n -= 1;
            if *n == 0 {
                ready.push(d);
            }
        }
    }
    let in_cycles: Vec<String> = users
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(m, _)| {
            let deps: Vec<&String> = g[*m].iter().filter(|d| users[d.as_str()] > 0).collect();
            format!("{m} -> {deps:?}")
        })
        .collect();
    assert_eq!(
        sorted,
        g.len(),
        "import cycles: these modules are in a cycle or below one:\n{}",
        in_cycles.join("\n")
    );
}

/// The checker sees the edges that matter (so that a cycle would be found at all).
#[test]
fn known_edges_are_seen() {
    let g = graph();
    assert!(g.len() > 25, "{} modules found", g.len());
    assert!(g["buffer"].contains("buffer_type"), "{:?}", g["buffer"]);
    assert!(g["multi_buffer"].contains("buffer"));
    assert!(g["sched::query"].contains("sched::caps"));
    assert!(g["sched::query"].contains("sched::table"));
    assert!(!g["buffer_type"].contains("buffer"));
    // `super::inspect` from sched::caps resolves to the sibling module.
    assert!(g["sched::caps"].contains("sched::inspect"));
}

#[test]
fn paths_resolve_to_the_modules_they_name() {
    let known: BTreeSet<String> = ["a", "a::b", "c"].iter().map(|s| s.to_string()).collect();
    let e = edges(
        "a::b",
        "use super::super::c; fn f() { crate::a::x(); }",
        &known,
    );
    // `crate::a::x` is an item of `a`; `super::super::c` names `c` through the root.
    let want: BTreeSet<String> = ["a", "c"].iter().map(|s| s.to_string()).collect();
    assert_eq!(e, want);
    let e = edges("c", "use crate::a::b::thing;", &known);
    assert_eq!(e, ["a::b".to_string()].into_iter().collect());
}
