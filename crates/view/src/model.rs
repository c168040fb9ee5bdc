//! The `GGML_SCHED_DUMP` record, format `ggml-sched-dump` version 1, as `docs/sched-dump.md`
//! documents it: only the fields the page uses are typed here; the page embeds the record
//! whole, so fields added later reach it without a change here.

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The format name and the one version this viewer reads.
pub const FORMAT: &str = "ggml-sched-dump";
pub const VERSION: u64 = 1;

/// A reference to a node (`kind` `node`), a leaf (`leaf`) or another tensor (`other`).
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct TRef {
    pub kind: String,
    #[serde(default)]
    pub index: Option<usize>,
    pub name: String,
}

#[derive(Deserialize, Debug, Clone)]
pub struct Backend {
    pub name: String,
    pub cpu: bool,
}

#[derive(Deserialize, Debug, Clone)]
pub struct Input {
    pub tensor: TRef,
    pub from_backend: Option<usize>,
    pub bytes: u64,
}

#[derive(Deserialize, Debug, Clone)]
pub struct Split {
    pub index: usize,
    pub backend: usize,
    pub first_node: usize,
    pub end_node: usize,
    pub n_ops: usize,
    pub inputs: Vec<Input>,
    pub bytes_in: u64,
}

#[derive(Deserialize, Debug, Clone)]
pub struct Move {
    pub from: Option<usize>,
    pub to: usize,
    pub call: String,
}

#[derive(Deserialize, Debug, Clone)]
pub struct Inplace {
    /// The tensor owning the storage the writer writes.
    pub root: TRef,
    #[serde(default)]
    pub root_backend: Option<usize>,
    pub same_backend: bool,
    /// Whether the writer's backend can use the storage (on the root's backend, or host
    /// memory it supports); absent in records written before the field was added.
    #[serde(default)]
    pub usable: Option<bool>,
}

impl Inplace {
    /// The defect of issue 5: the writer runs apart from its storage, on a backend that
    /// cannot use it (a writer of host memory its backend supports is not one).
    pub fn apart(&self) -> bool {
        !self.same_backend && self.usable != Some(true)
    }
}

#[derive(Deserialize, Debug, Clone)]
pub struct Tensor {
    pub index: usize,
    pub name: String,
    pub op: String,
    pub backend: Option<usize>,
    pub cause: Option<String>,
    pub split: Option<usize>,
    pub is_view: bool,
    #[serde(default)]
    pub view_src: Option<TRef>,
    pub inplace: Option<Inplace>,
    #[serde(rename = "move")]
    pub moved: Option<Move>,
    /// Sources (nodes; empty or absent for leafs).
    #[serde(default)]
    pub srcs: Vec<Src>,
}

/// A node's source.
#[derive(Deserialize, Debug, Clone)]
pub struct Src {
    pub tensor: TRef,
}

#[derive(Deserialize, Debug, Clone)]
pub struct GraphInfo {
    pub structure_hash: String,
}

/// One record, typed where the viewer needs it, with the raw JSON kept for the page.
#[derive(Debug, Clone)]
pub struct Record {
    /// Where it was read from.
    pub path: PathBuf,
    pub graph: GraphInfo,
    pub backends: Vec<Backend>,
    pub splits: Vec<Split>,
    pub nodes: Vec<Tensor>,
    pub leafs: Vec<Tensor>,
    /// The record as read.
    pub raw: serde_json::Value,
}

#[derive(Deserialize)]
struct Typed {
    format: String,
    version: u64,
    graph: GraphInfo,
    backends: Vec<Backend>,
    splits: Vec<Split>,
    nodes: Vec<Tensor>,
    leafs: Vec<Tensor>,
    #[serde(default)]
    graph_inputs: Vec<TRef>,
}

impl Record {
    /// Parses one record from JSON text; refuses other formats and versions by name.
    pub fn parse(path: &Path, text: &str) -> Result<Record> {
        let raw: serde_json::Value =
            serde_json::from_str(text).with_context(|| format!("{}: not JSON", path.display()))?;
        let format = raw["format"].as_str().unwrap_or("");
        if format != FORMAT {
            bail!("{}: format '{format}', expected '{FORMAT}'", path.display());
        }
        if raw["version"].as_u64() != Some(VERSION) {
            bail!(
                "{}: version {}, this viewer reads version {VERSION}",
                path.display(),
                raw["version"]
            );
        }
        let t: Typed = serde_json::from_value(raw.clone())
            .with_context(|| format!("{}: not a version-{VERSION} record", path.display()))?;
        debug_assert!(t.format == FORMAT && t.version == VERSION);
        check_indices(&t).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        Ok(Record {
            path: path.to_path_buf(),
            graph: t.graph,
            backends: t.backends,
            splits: t.splits,
            nodes: t.nodes,
            leafs: t.leafs,
            raw,
        })
    }

    /// Reads a record file.
    pub fn read(path: &Path) -> Result<Record> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        // Only a regular file (or a link to one): reading a FIFO waits for a writer, which
        // may never come, and a device or socket is no record either. Opened without
        // blocking (a FIFO's open would wait too) and checked through the open file itself,
        // so that a file replaced by a FIFO between a check and the open is refused as well.
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .with_context(|| format!("reading {}", path.display()))?;
        let meta = file
            .metadata()
            .with_context(|| format!("reading {}", path.display()))?;
        if !meta.is_file() {
            bail!(
                "{}: not a regular file ({}), not read",
                path.display(),
                file_kind(&meta.file_type())
            );
        }
        let mut text = String::new();
        file.read_to_string(&mut text)
            .with_context(|| format!("reading {}", path.display()))?;
        Record::parse(path, &text)
    }

    /// The backend name of index `b` (`?` when out of range or absent).
    pub fn backend_name(&self, b: Option<usize>) -> &str {
        b.and_then(|b| self.backends.get(b))
            .map_or("?", |b| b.name.as_str())
    }
}

/// Every index a record carries must point into the list it names: the overview, the node
/// layout, the A/B list and the page's script index with them (`splits[n.split]`,
/// `nodes[src.index]`, a split's box by its `index`), so a record with one out of range is
/// refused here, naming the field, rather than making the viewer panic or the page throw.
/// Positions (`index` of a split, node or leaf) must be the element's own position, as the
/// format defines them, so that indexing by them finds the element itself.
fn check_indices(t: &Typed) -> std::result::Result<(), String> {
    let (nb, ns, nn, nl) = (
        t.backends.len(),
        t.splits.len(),
        t.nodes.len(),
        t.leafs.len(),
    );
    let backend = |field: String, b: Option<usize>| match b {
        Some(b) if b >= nb => Err(format!(
            "{field} is {b}, but the record has {nb} backend(s)"
        )),
        _ => Ok(()),
    };
    let tref = |field: String, r: &TRef| {
        let len = match r.kind.as_str() {
            "node" => nn,
            "leaf" => nl,
            // A tensor in neither list: its index (if any) is not used.
            "other" => return Ok(()),
            k => {
                return Err(format!(
                    "{field}.kind is '{k}', expected node, leaf or other"
                ))
            }
        };
        match r.index {
            None => Err(format!("{field}.index is missing (kind {})", r.kind)),
            Some(i) if i >= len => Err(format!(
                "{field}.index is {i}, but the record has {len} {}(s)",
                r.kind
            )),
            Some(_) => Ok(()),
        }
    };
    for (i, s) in t.splits.iter().enumerate() {
        if s.index != i {
            return Err(format!(
                "splits[{i}].index is {}, expected {i} (its position)",
                s.index
            ));
        }
        backend(format!("splits[{i}].backend"), Some(s.backend))?;
        if s.first_node > s.end_node || s.end_node > nn {
            return Err(format!(
                "splits[{i}] runs nodes {}..{}, not a range of the record's {nn} node(s)",
                s.first_node, s.end_node
            ));
        }
        for (j, x) in s.inputs.iter().enumerate() {
            tref(format!("splits[{i}].inputs[{j}].tensor"), &x.tensor)?;
            backend(
                format!("splits[{i}].inputs[{j}].from_backend"),
                x.from_backend,
            )?;
        }
    }
    for (list, ts) in [("nodes", &t.nodes), ("leafs", &t.leafs)] {
        for (i, n) in ts.iter().enumerate() {
            let at = format!("{list}[{i}]");
            if n.index != i {
                return Err(format!(
                    "{at}.index is {}, expected {i} (its position)",
                    n.index
                ));
            }
            backend(format!("{at}.backend"), n.backend)?;
            if let Some(s) = n.split.filter(|&s| s >= ns) {
                return Err(format!(
                    "{at}.split is {s}, but the record has {ns} split(s)"
                ));
            }
            if let Some(v) = &n.view_src {
                tref(format!("{at}.view_src"), v)?;
            }
            if let Some(p) = &n.inplace {
                tref(format!("{at}.inplace.root"), &p.root)?;
                backend(format!("{at}.inplace.root_backend"), p.root_backend)?;
            }
            if let Some(m) = &n.moved {
                backend(format!("{at}.move.from"), m.from)?;
                backend(format!("{at}.move.to"), Some(m.to))?;
            }
            for (j, s) in n.srcs.iter().enumerate() {
                tref(format!("{at}.srcs[{j}].tensor"), &s.tensor)?;
            }
        }
    }
    for (i, r) in t.graph_inputs.iter().enumerate() {
        tref(format!("graph_inputs[{i}]"), r)?;
    }
    Ok(())
}

/// What a file that is not a regular one is, for the message refusing it.
fn file_kind(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "not a file"
    }
}

/// Where a record file goes in a directory's order: `sched-PID-SEQ.json` by PID, then SEQ,
/// as numbers (SEQ has 3 digits or more, so by name `sched-1-1000.json` would come before
/// `sched-1-999.json`); any other name after those, by name.
fn order_key(p: &Path) -> (u8, u64, u64, String) {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nums = name
        .strip_prefix("sched-")
        .and_then(|r| r.strip_suffix(".json"))
        .and_then(|r| r.split_once('-'))
        .and_then(|(pid, seq)| Some((pid.parse::<u64>().ok()?, seq.parse::<u64>().ok()?)));
    match nums {
        Some((pid, seq)) => (0, pid, seq, name),
        None => (1, 0, 0, name),
    }
}

/// The records of `path`: the file itself, or every `sched-*.json` of a directory in the
/// order of `sched-PID-SEQ.json`'s numbers (a process's records in the order it wrote them).
pub fn load(path: &Path) -> Result<Vec<Record>> {
    if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("reading {}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("sched-") && n.ends_with(".json"))
            })
            .collect();
        files.sort_by_cached_key(|p| order_key(p));
        if files.is_empty() {
            bail!(
                "{}: no sched-*.json records (was GGML_SCHED_DUMP set to it?)",
                path.display()
            );
        }
        files.iter().map(|f| Record::read(f)).collect()
    } else {
        Ok(vec![Record::read(path)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process's records in the order it wrote them, past SEQ 999 too (4 digits).
    #[test]
    fn a_directory_is_read_in_write_order() {
        let d = std::env::temp_dir().join(format!("view-order-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let fixture = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/repro-rule1.json"),
        )
        .unwrap();
        let names = [
            "sched-99-000.json",
            "sched-100-000.json",
            "sched-100-999.json",
            "sched-100-1000.json",
        ];
        for n in names {
            std::fs::write(d.join(n), &fixture).unwrap();
        }
        let got: Vec<String> = load(&d)
            .unwrap()
            .iter()
            .map(|r| r.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        std::fs::remove_dir_all(&d).unwrap();
        assert_eq!(got, names);
    }
    /// The fixture record with `f` applied to its JSON, parsed.
    fn mutated(f: impl FnOnce(&mut serde_json::Value)) -> Result<Record> {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/repro-rule1.json"),
        )
        .unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        f(&mut v);
        Record::parse(Path::new("bad.json"), &v.to_string())
    }

    /// Every index a record carries is checked when it is read: one out of range (or a
    /// position that is not the element's own) refuses the record, naming the file and the
    /// field, instead of a panic in the overview (`splits[1].index = 7`) or a page whose
    /// script throws (`nodes[1].split = 9`).
    #[test]
    fn a_record_with_an_index_out_of_range_is_refused_by_field() {
        use serde_json::json;
        type Mutation = Box<dyn FnOnce(&mut serde_json::Value)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (
                Box::new(|v| v["splits"][1]["index"] = json!(7)),
                "bad.json: splits[1].index is 7, expected 1 (its position)",
            ),
            (
                Box::new(|v| v["splits"][1]["index"] = json!(0)),
                "bad.json: splits[1].index is 0, expected 1 (its position)",
            ),
            (
                Box::new(|v| v["splits"][0]["backend"] = json!(5)),
                "bad.json: splits[0].backend is 5, but the record has 2 backend(s)",
            ),
            (
                Box::new(|v| v["splits"][1]["end_node"] = json!(9)),
                "bad.json: splits[1] runs nodes 3..9, not a range of the record's 4 node(s)",
            ),
            (
                Box::new(
                    |v| v["splits"][1]["inputs"] = json!([{"tensor": {"kind": "node", "index": 4, "name": "x"}, "from_backend": 0, "bytes": 1}]),
                ),
                "bad.json: splits[1].inputs[0].tensor.index is 4, but the record has 4 node(s)",
            ),
            (
                Box::new(
                    |v| v["splits"][1]["inputs"] = json!([{"tensor": {"kind": "node", "index": 0, "name": "x"}, "from_backend": 2, "bytes": 1}]),
                ),
                "bad.json: splits[1].inputs[0].from_backend is 2, but the record has 2 backend(s)",
            ),
            (
                Box::new(|v| v["nodes"][1]["index"] = json!(99)),
                "bad.json: nodes[1].index is 99, expected 1 (its position)",
            ),
            (
                Box::new(|v| v["nodes"][1]["split"] = json!(9)),
                "bad.json: nodes[1].split is 9, but the record has 2 split(s)",
            ),
            (
                Box::new(|v| v["leafs"][0]["split"] = json!(2)),
                "bad.json: leafs[0].split is 2, but the record has 2 split(s)",
            ),
            (
                Box::new(|v| v["nodes"][2]["backend"] = json!(2)),
                "bad.json: nodes[2].backend is 2, but the record has 2 backend(s)",
            ),
            (
                Box::new(|v| v["nodes"][1]["srcs"][0]["tensor"]["index"] = json!(99)),
                "bad.json: nodes[1].srcs[0].tensor.index is 99, but the record has 3 leaf(s)",
            ),
            (
                Box::new(|v| v["nodes"][1]["srcs"][0]["tensor"]["kind"] = json!("weight")),
                "bad.json: nodes[1].srcs[0].tensor.kind is 'weight', expected node, leaf or other",
            ),
            (
                Box::new(|v| {
                    v["nodes"][1]["view_src"]["index"].take();
                }),
                "bad.json: nodes[1].view_src.index is missing (kind node)",
            ),
            (
                Box::new(|v| v["nodes"][1]["inplace"]["root"]["index"] = json!(4)),
                "bad.json: nodes[1].inplace.root.index is 4, but the record has 4 node(s)",
            ),
            (
                Box::new(|v| v["nodes"][1]["inplace"]["root_backend"] = json!(3)),
                "bad.json: nodes[1].inplace.root_backend is 3, but the record has 2 backend(s)",
            ),
            (
                Box::new(|v| v["nodes"][0]["move"]["to"] = json!(2)),
                "bad.json: nodes[0].move.to is 2, but the record has 2 backend(s)",
            ),
            (
                Box::new(|v| v["nodes"][0]["move"]["from"] = json!(7)),
                "bad.json: nodes[0].move.from is 7, but the record has 2 backend(s)",
            ),
            (
                Box::new(|v| {
                    v["graph_inputs"] = json!([{"kind": "leaf", "index": 3, "name": "x"}])
                }),
                "bad.json: graph_inputs[0].index is 3, but the record has 3 leaf(s)",
            ),
        ];
        for (f, want) in cases {
            let e = mutated(f).unwrap_err();
            assert_eq!(format!("{e:#}"), want);
        }
        // The record itself, and a reference to a tensor in neither list, are fine.
        mutated(|_| {}).unwrap();
        mutated(|v| {
            v["nodes"][1]["srcs"][0]["tensor"] = serde_json::json!({"kind": "other", "name": "x"})
        })
        .unwrap();
    }

    /// A FIFO named like a record is refused by path, not opened (which would wait for a
    /// writer forever): given itself, and found in a directory.
    #[test]
    fn a_fifo_is_refused_not_read() {
        let d = std::env::temp_dir().join(format!("view-fifo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let fifo = d.join("sched-1-000.json");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("no mkfifo here: nothing to check");
            return;
        }
        let want = format!("{}: not a regular file (a FIFO), not read", fifo.display());
        for p in [fifo.clone(), d.clone()] {
            // In a thread, so that a reader that opens the FIFO (and so waits for a writer
            // that never comes) fails the test rather than hanging it.
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || tx.send(load(&p).map(|r| r.len())));
            let got = rx
                .recv_timeout(std::time::Duration::from_secs(20))
                .expect("load() did not return within 20 s: it opened the FIFO");
            assert_eq!(format!("{:#}", got.unwrap_err()), want);
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}
