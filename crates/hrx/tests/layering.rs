//! The crate's layering, checked from its source: `runtime/` refers to nothing outside
//! `runtime/` (a runtime knows nothing of the ggml-facing layer), and the layer's modules
//! refer to one another without cycles. Test code (each file's trailing `#[cfg(test)] mod
//! tests`, the test-only `testing` module) sits above everything and is not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The file's code without comment lines and without its trailing test module.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => &text,
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first path segment after each `crate::` in `code`.
fn crate_refs(code: &str) -> BTreeSet<String> {
    code.match_indices("crate::")
        .map(|(i, m)| {
            code[i + m.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn runtime_refers_to_nothing_above_it() {
    let mut files = Vec::new();
    rust_files(&src().join("runtime"), &mut files);
    assert!(files.len() >= 5, "runtime/ not found");
    for f in files {
        let c = code(&f);
        let outside: Vec<String> = crate_refs(&c)
            .into_iter()
            .filter(|m| m != "runtime")
            .collect();
        assert!(
            outside.is_empty(),
            "{} refers to crate::{outside:?} (runtime/ must not use the ggml-facing layer)",
            f.display()
        );
        assert!(
            !c.contains("super::super::super"),
            "{} climbs out of runtime/",
            f.display()
        );
    }
}

#[test]
fn layer_modules_form_a_dag() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in std::fs::read_dir(src()).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        if p.is_dir() || name == "lib" || name == "testing" {
            continue;
        }
        let refs = crate_refs(&code(&p));
        graph.insert(name, refs);
    }
    // `runtime` is below every layer module and never refers back (checked above)
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for (m, deps) in graph.iter_mut() {
        // anything else is an item of the crate root, which sits above every module
        let root: Vec<&String> = deps
            .iter()
            .filter(|d| !modules.contains(*d) && *d != "runtime")
            .collect();
        assert!(
            root.is_empty(),
            "{m} refers to the crate root: crate::{root:?}"
        );
        deps.retain(|d| modules.contains(d));
    }
    // depth-first search for a back edge
    fn visit<'a>(
        m: &'a str,
        g: &'a BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) {
        if done.contains(m) {
            return;
        }
        if let Some(i) = path.iter().position(|p| *p == m) {
            panic!("import cycle: {} -> {m}", path[i..].join(" -> "));
        }
        path.push(m);
        for d in &g[m] {
            if d != m {
                visit(d, g, path, done);
            }
        }
        path.pop();
        done.insert(m);
    }
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        visit(m, &graph, &mut Vec::new(), &mut done);
    }
    assert!(graph.contains_key("backend") && graph["backend"].contains("buffer"));
}
