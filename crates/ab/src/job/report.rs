//! The report types: what `target/ab/report.json` holds, field by field. They are the file's
//! contract with whoever reads it (people, CI, scripts): a field's name, type and meaning
//! change only together with [`Report::version`].
//!
//! Units: times in seconds (floating point, wall clock), hashes as lowercase hex sha256,
//! paths as the harness used them (absolute unless the user named a relative one).

use super::catalogue::Kind;
use crate::proof::{Library, Proof};
use anyhow::{Context, Result};
use serde::Serialize;
use std::path::Path;

/// One run of one work in one arm.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// The work's name (`llama-simple`, `backend-ops ADD`, `ctest`); the same in both arms.
    pub name: String,
    /// What kind of result the work gives: `generation`, `backend_ops` or `ctest`.
    pub kind: Kind,
    /// The program and its arguments, as run.
    pub command: Vec<String>,
    /// The exit code; null when the process did not exit by itself (a signal ended it,
    /// or the harness killed it at the time limit).
    pub exit_code: Option<i32>,
    /// The signal that ended the process, by name (`SIGSEGV`); null when it exited.
    pub signal: Option<String>,
    /// True when the harness killed the process for running past the work's time limit.
    pub timed_out: bool,
    /// Cases (`backend_ops`) or tests (`ctest`) that passed; null for generation.
    pub passed: Option<u64>,
    /// Cases or tests that failed; null for generation.
    pub failed: Option<u64>,
    /// test-backend-ops cases the backend does not support; null for ctest and generation.
    pub not_supported: Option<u64>,
    /// The failing cases' or tests' names, in output order; empty for generation.
    pub failed_tests: Vec<String>,
    /// The generated text, stdout decoded as UTF-8 (invalid bytes replaced); null for the
    /// suites.
    pub output_text: Option<String>,
    /// sha256 of stdout's bytes, for every kind.
    pub output_sha256: String,
    /// Seconds from start to exit.
    pub seconds: f64,
    /// Which libraries the run's processes mapped, read inside each process, and whether
    /// every one that mapped libggml-base mapped the arm's copy.
    pub proof: Proof,
    /// The run's log file (stdout, then stderr).
    pub log: String,
    /// The probe's raw records (JSON lines, one per process and library).
    pub probe_records: String,
}

/// One arm: the library it meant to run with, what its processes mapped, its runs.
#[derive(Debug, Clone, Serialize)]
pub struct ArmReport {
    /// `stock` and `ours` for the default arms, `a` and `b` for `--a` and `--b` files.
    pub name: String,
    /// The file as named, the resolved file, its sha256.
    pub intended: Intended,
    /// The copy processes should map (`target/ab/arms/<name>/lib/libggml-base.so.0`).
    pub swap_copy: String,
    /// The `--backend` file (`GGML_BACKEND_PATH`); `source` and `path` are both the file as
    /// named. Null without `--backend`.
    pub backend: Option<Intended>,
    /// Every library mapped by any process of this arm (name, path, sha256), sorted, each
    /// once.
    pub libraries: Vec<Library>,
    /// True when every run's proof held.
    pub proof_ok: bool,
    /// The runs, in the order of the work list.
    pub runs: Vec<RunReport>,
}

/// A file the user meant.
#[derive(Debug, Clone, Serialize)]
pub struct Intended {
    /// The file as named (on the command line, or the default's path).
    pub source: String,
    /// The same file with every symbolic link resolved.
    pub path: String,
    /// sha256 of its bytes.
    pub sha256: String,
}

/// One work compared across the arms.
#[derive(Debug, Clone, Serialize)]
pub struct RunComparison {
    /// The work's name.
    pub name: String,
    /// Both ended the same way (same exit code, signal and time-out).
    pub same_end: bool,
    /// Generation: texts equal byte for byte. Suites: null.
    pub outputs_equal: Option<bool>,
    /// Suites: pass, fail and not-supported counts and failing names equal. Generation: null.
    pub counts_equal: Option<bool>,
    /// Suites: both arms' counts are whole, so they compare: each arm counted at least one
    /// test, and neither was cut off by its time limit or a signal (equal counts of two
    /// cut-off runs say nothing about the rest). Generation: true (a failed generation is
    /// in `outputs_equal`).
    pub complete: bool,
    /// `same_end`, `complete`, and every comparison of the two above that applies.
    pub equal: bool,
}

/// The `comparison` section.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The two intended files have the same sha256.
    pub same_file: bool,
    /// Every run in both arms proved the intended library was mapped.
    pub proofs_ok: bool,
    /// One entry per work that ran in both arms, in arm A's order (a work B has not run
    /// yet, in a partial report, is left out).
    pub runs: Vec<RunComparison>,
    /// Every generation work's texts are equal (true when there is none).
    pub all_outputs_equal: bool,
    /// Every suite's counts are equal (true when there is none).
    pub all_counts_equal: bool,
    /// Every entry of `runs` is equal.
    pub all_equal: bool,
}

/// The whole report (`target/ab/report.json`). After a run with the default arms, `ab ab`
/// adds one more key, `inplace_reproducer`: `target/repro/report.json` as it is (or a
/// string saying it was not written); unless `--no-view`, one more, `pages`: the placement
/// pages of the generation works (`crate::views::Page`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The format's version, 1; raised when a field changes meaning.
    pub version: u32,
    /// False while the job runs (the report is rewritten after every run) or when it was cut
    /// short.
    pub complete: bool,
    /// The llama.cpp build folder whose programs ran, resolved.
    pub llama_build: String,
    /// The probe library preloaded into every process.
    pub probe: String,
    /// When the job started, in seconds since the Unix epoch (0 if the clock is before it).
    pub started_unix: u64,
    /// Seconds since the job started, when this report was written.
    pub seconds: f64,
    /// The two arms, A then B.
    pub arms: Vec<ArmReport>,
    /// How the two arms compare.
    pub comparison: Comparison,
    /// Works the job would run that this build does not offer, each with its reason
    /// (`ctest: DIR has no tests ...`); empty when none.
    pub left_out: Vec<String>,
}

/// Writes `r` to `path` through a `.json.part` file and a rename, so that a reader never
/// sees half a report.
pub fn write(path: &Path, r: &Report) -> Result<()> {
    let tmp = path.with_extension("json.part");
    std::fs::write(&tmp, serde_json::to_string_pretty(r)?)
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{differing_report, readme_report};
    use serde_json::{json, Value};

    fn keys(v: &Value) -> Vec<&str> {
        let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        k.sort_unstable();
        k
    }

    /// The keys readers of report.json rely on: renaming a field breaks them, so it must
    /// show up here.
    #[test]
    fn the_json_keys_are_the_contract() {
        let v = serde_json::to_value(readme_report()).unwrap();
        assert_eq!(
            keys(&v),
            [
                "arms",
                "comparison",
                "complete",
                "left_out",
                "llama_build",
                "probe",
                "seconds",
                "started_unix",
                "version"
            ]
        );
        assert_eq!(v["version"], 1);
        let arm = &v["arms"][0];
        assert_eq!(
            keys(arm),
            [
                "backend",
                "intended",
                "libraries",
                "name",
                "proof_ok",
                "runs",
                "swap_copy"
            ]
        );
        assert_eq!(keys(&arm["intended"]), ["path", "sha256", "source"]);
        assert_eq!(keys(&arm["libraries"][0]), ["name", "path", "sha256"]);
        assert_eq!(arm["backend"], Value::Null);
        let run = &arm["runs"][0];
        assert_eq!(
            keys(run),
            [
                "command",
                "exit_code",
                "failed",
                "failed_tests",
                "kind",
                "log",
                "name",
                "not_supported",
                "output_sha256",
                "output_text",
                "passed",
                "probe_records",
                "proof",
                "seconds",
                "signal",
                "timed_out"
            ]
        );
        assert_eq!(
            keys(&v["comparison"]),
            [
                "all_counts_equal",
                "all_equal",
                "all_outputs_equal",
                "proofs_ok",
                "runs",
                "same_file"
            ]
        );
        assert_eq!(
            keys(&v["comparison"]["runs"][0]),
            [
                "complete",
                "counts_equal",
                "equal",
                "name",
                "outputs_equal",
                "same_end"
            ]
        );
    }

    /// Kinds in snake case; what is not measured is null, not 0 or "".
    #[test]
    fn kinds_and_nulls() {
        let v = serde_json::to_value(differing_report()).unwrap();
        let ours = &v["arms"][1]["runs"];
        assert_eq!(ours[0]["kind"], "generation");
        assert_eq!(ours[0]["passed"], Value::Null);
        assert_eq!(ours[0]["not_supported"], Value::Null);
        assert_eq!(ours[0]["output_text"], "The capital of France is Lyon.\n");
        assert_eq!(ours[1]["kind"], "backend_ops");
        assert_eq!(ours[1]["exit_code"], Value::Null);
        assert_eq!(ours[1]["signal"], "SIGSEGV");
        assert_eq!(ours[1]["not_supported"], 0);
        assert_eq!(ours[1]["output_text"], Value::Null);
        assert_eq!(ours[2]["timed_out"], true);
        assert_eq!(ours[2]["seconds"], 1800.0);
        assert_eq!(ours[3]["kind"], "ctest");
        assert_eq!(ours[3]["not_supported"], Value::Null);
        assert_eq!(ours[3]["failed_tests"], json!(["test-rope"]));
        assert_eq!(ours[3]["proof"]["ok"], false);
        let c = &v["comparison"]["runs"];
        assert_eq!(c[0]["counts_equal"], Value::Null);
        assert_eq!(c[1]["outputs_equal"], Value::Null);
        // ours's libggml-rpc could not be read by the probe.
        let rpc = v["arms"][1]["libraries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == "libggml-rpc")
            .unwrap();
        assert_eq!(rpc["sha256"], Value::Null);
    }
}
