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
    pub inplace: Option<Inplace>,
    #[serde(rename = "move")]
    pub moved: Option<Move>,
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
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Record::parse(path, &text)
    }

    /// The backend name of index `b` (`?` when out of range or absent).
    pub fn backend_name(&self, b: Option<usize>) -> &str {
        b.and_then(|b| self.backends.get(b))
            .map_or("?", |b| b.name.as_str())
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
}
