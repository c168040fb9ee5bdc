//! The proof: which library files the processes of a run really mapped, as recorded from
//! inside them by the probe, checked against the arm's intended `libggml-base`; and which
//! file really provides ggml's symbols to each process (the probe's `binding` lines).

use crate::swap::Arm;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One line of the probe's output: a mapped library (`"event"` `startup` or `dlopen`, with
/// `name`) or the file that provides one of ggml's symbols (`"event":"binding"`, with
/// `symbol` and no `name`).
#[derive(Debug, Clone, Deserialize)]
pub struct Record {
    pub pid: u32,
    /// `startup`, `dlopen` or `binding` (empty in lines from before the field existed).
    #[serde(default)]
    pub event: String,
    /// The library name of a mapping; empty on a binding line.
    #[serde(default)]
    pub name: String,
    /// The symbol of a binding line (`ggml_init`, ...); `None` on a mapping line.
    #[serde(default)]
    pub symbol: Option<String>,
    /// The mapped file, or the (canonical) file that provides `symbol`.
    pub path: String,
    /// `None` when the probe could not read the file.
    pub sha256: Option<String>,
    #[serde(default)]
    pub exe: String,
    #[serde(default)]
    pub deleted: bool,
}

/// One mapped library as reported: name, path, sha256.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Library {
    /// The base name up to its first `.so` (`libggml-base`, `libllama`).
    pub name: String,
    /// The file the process mapped, as `/proc/self/maps` names it (without ` (deleted)`).
    pub path: String,
    /// sha256 of that file, read by the probe inside the process; null when it could not
    /// read it.
    pub sha256: Option<String>,
}

/// The verdict for one run.
#[derive(Debug, Clone, Serialize)]
pub struct Proof {
    /// True when every process that mapped `libggml-base` mapped the arm's copy, with the
    /// intended sha256, and (when expected) at least one process mapped it.
    pub ok: bool,
    /// Processes that recorded any ggml/llama library.
    pub processes: usize,
    /// Processes that mapped `libggml-base`.
    pub base_processes: usize,
    /// Why the proof failed, one line per distinct wrong mapping (names both paths and hashes).
    pub errors: Vec<String>,
    /// Remarks that do not fail the run (for example an extra backend nobody loaded).
    pub notes: Vec<String>,
    /// Every distinct library mapped by the run's processes.
    pub libraries: Vec<Library>,
}

impl Record {
    /// True for a `binding` line (which file provides a symbol), false for a mapping.
    pub fn is_binding(&self) -> bool {
        self.event == "binding" || self.symbol.is_some()
    }
}

/// Reads the probe's JSON lines; a missing file means no process recorded anything. Lines
/// that do not parse (a process killed mid-write) are skipped.
pub fn read_records(path: &Path) -> Result<Vec<Record>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

fn same_file(a: &str, b: &Path) -> bool {
    let a = Path::new(a);
    a == b
        || match (a.canonicalize(), b.canonicalize()) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        }
}

/// Checks `records` against `arm`: every `libggml-base` mapping must be the arm's copy
/// (`arm.lib_copy`) with the arm's sha256, and every binding line (the file that provides
/// `ggml_init`, ... to a process) must name a file with the arm's sha256, so that a
/// preloaded library of another name that takes over ggml's symbols fails the run. A process
/// without binding lines (ggml not in its global scope) is not failed by the second rule.
/// `expect_base` makes "nobody mapped libggml-base" a failure too.
pub fn check(records: &[Record], arm: &Arm, expect_base: bool) -> Proof {
    let (bindings, records): (Vec<&Record>, Vec<&Record>) =
        records.iter().partition(|r| r.is_binding());
    let pids: BTreeSet<u32> = records.iter().map(|r| r.pid).collect();
    let libraries: BTreeSet<Library> = records
        .iter()
        .map(|r| Library {
            name: r.name.clone(),
            path: r.path.clone(),
            sha256: r.sha256.clone(),
        })
        .collect();
    // Wrong mappings grouped by (path, sha256), with the pids and programs involved.
    type Mapping = (String, Option<String>);
    let mut wrong: BTreeMap<Mapping, (BTreeSet<u32>, BTreeSet<String>)> = BTreeMap::new();
    let mut base_pids = BTreeSet::new();
    for r in records.iter().filter(|r| r.name == "libggml-base") {
        base_pids.insert(r.pid);
        let hash_ok = r.sha256.as_deref() == Some(arm.sha256.as_str());
        let path_ok = same_file(&r.path, &arm.lib_copy);
        if !(hash_ok && path_ok) {
            let e = wrong.entry((r.path.clone(), r.sha256.clone())).or_default();
            e.0.insert(r.pid);
            e.1.insert(r.exe.clone());
        }
    }
    let mut errors = Vec::new();
    for ((path, sha), (pids, exes)) in &wrong {
        let sha = sha.as_deref().unwrap_or("(unreadable)");
        let why = if sha == arm.sha256 {
            "same bytes, but not through the swap: the swap did not take effect"
        } else {
            "a different file: the swap did not take effect"
        };
        errors.push(format!(
            "{} process(es) ({}) mapped libggml-base from {} (sha256 {}), but the intended file is {} (copy of {}, sha256 {}): {}",
            pids.len(),
            exes.iter().cloned().collect::<Vec<_>>().join(", "),
            path,
            sha,
            arm.lib_copy.display(),
            arm.resolved.display(),
            arm.sha256,
            why
        ));
    }
    errors.extend(binding_errors(&bindings, arm));
    if expect_base && base_pids.is_empty() {
        errors.push(format!(
            "no process of this run mapped libggml-base (intended {}, sha256 {}): nothing was proven",
            arm.lib_copy.display(),
            arm.sha256
        ));
    }
    let mut notes = Vec::new();
    let deleted: BTreeSet<&str> = records
        .iter()
        .filter(|r| r.deleted)
        .map(|r| r.path.as_str())
        .collect();
    for d in deleted {
        notes.push(format!(
            "{d} was deleted while mapped: its sha256 is of whatever file now has that name"
        ));
    }
    if let Some((b, sha)) = &arm.backend {
        let loaded = records
            .iter()
            .any(|r| r.sha256.as_deref() == Some(sha.as_str()));
        if !loaded && !records.is_empty() {
            notes.push(format!(
                "backend {} (sha256 {}) was not mapped by any process of this run",
                b.display(),
                sha
            ));
        }
    }
    Proof {
        ok: errors.is_empty(),
        processes: pids.len(),
        base_processes: base_pids.len(),
        errors,
        notes,
        libraries: libraries.into_iter().collect(),
    }
}

/// The processes (at most this many named per error) in a binding error.
const NAMED_PROCESSES: usize = 5;

/// One error per (symbol, file, sha256) whose sha256 is not the arm's, naming the processes
/// (pid and program) bound to it.
fn binding_errors(bindings: &[&Record], arm: &Arm) -> Vec<String> {
    type Binding<'a> = (&'a str, &'a str, Option<&'a str>);
    let mut wrong: BTreeMap<Binding, BTreeSet<(u32, &str)>> = BTreeMap::new();
    for r in bindings {
        if r.sha256.as_deref() != Some(arm.sha256.as_str()) {
            let symbol = r.symbol.as_deref().unwrap_or("(unnamed symbol)");
            wrong
                .entry((symbol, r.path.as_str(), r.sha256.as_deref()))
                .or_default()
                .insert((r.pid, r.exe.as_str()));
        }
    }
    wrong
        .into_iter()
        .map(|((symbol, path, sha), procs)| {
            let mut named: Vec<String> = procs
                .iter()
                .take(NAMED_PROCESSES)
                .map(|(pid, exe)| format!("pid {pid} ({exe})"))
                .collect();
            if procs.len() > NAMED_PROCESSES {
                named.push(format!("and {} more", procs.len() - NAMED_PROCESSES));
            }
            format!(
                "{} process(es) [{}] bound {} to {} (sha256 {}), not to the arm's libggml-base {} (sha256 {}): another library provides ggml's symbols (an LD_PRELOAD?)",
                procs.len(),
                named.join(", "),
                symbol,
                path,
                sha.unwrap_or("(unreadable)"),
                arm.lib_copy.display(),
                arm.sha256
            )
        })
        .collect()
}

/// A short human summary: `proof OK: 3 processes mapped the arm's libggml-base` or the errors.
pub fn summary(p: &Proof) -> String {
    if p.ok {
        format!(
            "proof OK: {} of {} recorded process(es) mapped libggml-base, all the intended file",
            p.base_processes, p.processes
        )
    } else {
        format!("PROOF FAILED:\n  {}", p.errors.join("\n  "))
    }
}

/// The libraries of a proof as `name  path  sha256` lines.
pub fn library_lines(p: &Proof) -> Vec<String> {
    p.libraries
        .iter()
        .map(|l| {
            format!(
                "{:<16} {}  {}",
                l.name,
                l.path,
                l.sha256.as_deref().unwrap_or("(unreadable)")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arm(dir: &Path) -> Arm {
        Arm {
            name: "t".into(),
            source: dir.join("orig.so"),
            resolved: dir.join("orig.so"),
            sha256: "aaa".into(),
            lib_dir: dir.to_path_buf(),
            lib_copy: dir.join("libggml-base.so.0"),
            backend: None,
            preload: None,
            _lock: None,
        }
    }

    fn rec(pid: u32, name: &str, path: &str, sha: &str) -> Record {
        Record {
            pid,
            event: "startup".into(),
            name: name.into(),
            symbol: None,
            path: path.into(),
            sha256: Some(sha.into()),
            exe: "/bin/x".into(),
            deleted: false,
        }
    }

    #[test]
    fn the_intended_copy_passes() {
        let a = arm(Path::new("/arm"));
        let r = vec![
            rec(1, "libggml-base", "/arm/libggml-base.so.0", "aaa"),
            rec(1, "libggml", "/b/libggml.so.0", "ccc"),
            rec(2, "libggml-base", "/arm/libggml-base.so.0", "aaa"),
        ];
        let p = check(&r, &a, true);
        assert!(p.ok, "{:?}", p.errors);
        assert_eq!(p.processes, 2);
        assert_eq!(p.base_processes, 2);
        assert_eq!(p.libraries.len(), 2);
    }

    #[test]
    fn another_file_fails_naming_both_paths_and_hashes() {
        let a = arm(Path::new("/arm"));
        let r = vec![
            rec(1, "libggml-base", "/trap/libggml-base.so.0", "bbb"),
            rec(2, "libggml-base", "/arm/libggml-base.so.0", "aaa"),
        ];
        let p = check(&r, &a, true);
        assert!(!p.ok);
        assert_eq!(p.errors.len(), 1);
        let e = &p.errors[0];
        for want in [
            "/trap/libggml-base.so.0",
            "bbb",
            "/arm/libggml-base.so.0",
            "aaa",
        ] {
            assert!(e.contains(want), "{e} lacks {want}");
        }
    }

    #[test]
    fn same_bytes_elsewhere_fails_too() {
        let a = arm(Path::new("/arm"));
        let r = vec![rec(
            1,
            "libggml-base",
            "/elsewhere/libggml-base.so.0",
            "aaa",
        )];
        let p = check(&r, &a, true);
        assert!(!p.ok);
        assert!(p.errors[0].contains("same bytes"));
    }

    fn bind(pid: u32, symbol: &str, path: &str, sha: &str) -> Record {
        let line = format!(
            r#"{{"pid":{pid},"event":"binding","symbol":"{symbol}","path":"{path}","sha256":"{sha}","exe":"/bin/x"}}"#
        );
        serde_json::from_str(&line).unwrap()
    }

    #[test]
    fn probe_lines_of_both_kinds_parse() {
        let dir = std::env::temp_dir().join(format!("ab-proof-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("p.jsonl");
        std::fs::write(
            &f,
            concat!(
                r#"{"pid":3,"event":"startup","name":"libggml-base","path":"/arm/libggml-base.so.0","sha256":"aaa","exe":"/bin/x"}"#,
                "\n",
                r#"{"pid":3,"event":"binding","symbol":"ggml_init","path":"/s/libtrace.so","sha256":"bbb","exe":"/bin/x"}"#,
                "\n",
                "{\"pid\":3,\"ev",
            ),
        )
        .unwrap();
        let r = read_records(&f).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(r.len(), 2);
        assert!(!r[0].is_binding());
        assert_eq!(r[0].name, "libggml-base");
        assert!(r[1].is_binding());
        assert_eq!(r[1].symbol.as_deref(), Some("ggml_init"));
        assert_eq!(r[1].path, "/s/libtrace.so");
        assert_eq!(r[1].sha256.as_deref(), Some("bbb"));
    }

    #[test]
    fn a_binding_to_the_arms_bytes_passes_and_is_no_library() {
        let a = arm(Path::new("/arm"));
        let r = vec![
            rec(1, "libggml-base", "/arm/libggml-base.so.0", "aaa"),
            bind(1, "ggml_init", "/real/arm/libggml-base.so.0", "aaa"),
            bind(
                1,
                "ggml_backend_sched_graph_compute",
                "/real/arm/libggml-base.so.0",
                "aaa",
            ),
            // A process with bindings only (its mapping line lost) is still one process.
            bind(2, "ggml_init", "/arm/libggml-base.so.0", "aaa"),
        ];
        let p = check(&r, &a, true);
        assert!(p.ok, "{:?}", p.errors);
        assert_eq!(p.processes, 1);
        assert_eq!(p.base_processes, 1);
        assert_eq!(p.libraries.len(), 1);
        assert_eq!(p.libraries[0].name, "libggml-base");
    }

    #[test]
    fn a_binding_to_another_file_fails_naming_it() {
        let a = arm(Path::new("/arm"));
        let r = vec![
            rec(7, "libggml-base", "/arm/libggml-base.so.0", "aaa"),
            bind(7, "ggml_init", "/shim/libtrace.so", "bbb"),
            bind(8, "ggml_init", "/shim/libtrace.so", "bbb"),
            bind(
                7,
                "ggml_backend_sched_graph_compute",
                "/arm/libggml-base.so.0",
                "aaa",
            ),
        ];
        let p = check(&r, &a, true);
        assert!(!p.ok);
        assert_eq!(p.errors.len(), 1, "{:?}", p.errors);
        let e = &p.errors[0];
        for want in [
            "2 process(es)",
            "pid 7 (/bin/x)",
            "pid 8 (/bin/x)",
            "ggml_init",
            "/shim/libtrace.so",
            "sha256 bbb",
            "/arm/libggml-base.so.0",
            "sha256 aaa",
        ] {
            assert!(e.contains(want), "{e} lacks {want}");
        }
        assert!(!e.contains("ggml_backend_sched_graph_compute"), "{e}");
        assert!(summary(&p).contains("/shim/libtrace.so"));
    }

    #[test]
    fn an_unreadable_binding_fails_and_names_are_capped() {
        let a = arm(Path::new("/arm"));
        let mut r: Vec<Record> = (1..=7)
            .map(|pid| bind(pid, "ggml_init", "/shim/libtrace.so", "bbb"))
            .collect();
        let mut unreadable = bind(9, "ggml_init", "/gone.so", "x");
        unreadable.sha256 = None;
        r.push(unreadable);
        let p = check(&r, &a, false);
        assert_eq!(p.errors.len(), 2, "{:?}", p.errors);
        assert!(p.errors[0].contains("/gone.so") && p.errors[0].contains("(unreadable)"));
        assert!(p.errors[1].contains("7 process(es)") && p.errors[1].contains("and 2 more"));
        assert!(!p.errors[1].contains("pid 6 "), "{}", p.errors[1]);
    }

    #[test]
    fn nothing_mapped_is_not_a_proof() {
        let a = arm(Path::new("/arm"));
        assert!(!check(&[], &a, true).ok);
        assert!(check(&[], &a, false).ok);
    }
}
