//! `llama-bench -o json`: the one reader of its output, for the CPU bench's end-to-end runs and
//! the GPU bench.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// One llama-bench test of one process: which test at which offload, and its tokens/s.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchTest {
    /// `pp512` or `tg128` (prompt processing of 512 tokens, generation of 128).
    pub test: String,
    /// The `-ngl` value the test ran with (llama-bench's `n_gpu_layers`).
    pub ngl: i64,
    /// Tokens/s of each repetition (`-r`), in order.
    pub samples_ts: Vec<f64>,
    /// llama-bench's own mean over the repetitions, tokens/s.
    pub avg_ts: f64,
}

#[derive(Deserialize)]
struct BenchJson {
    n_prompt: u32,
    n_gen: u32,
    n_gpu_layers: i64,
    #[serde(default)]
    samples_ts: Vec<f64>,
    avg_ts: f64,
}

/// Parses `llama-bench -o json` output: one JSON array of test objects, possibly after other
/// text (a build that logs to stdout). Errors when there is no array or a test lacks a field.
pub fn llama_bench_json(stdout: &str) -> Result<Vec<BenchTest>> {
    let start = stdout
        .find("[\n")
        .or_else(|| stdout.find('['))
        .context("llama-bench printed no JSON array")?;
    let parsed: Vec<BenchJson> =
        serde_json::from_str(stdout[start..].trim_end()).context("parsing llama-bench JSON")?;
    Ok(parsed
        .into_iter()
        .map(|r| BenchTest {
            // llama-bench runs a test as either prompt processing or generation; a combined
            // pg test (-pg) would have both counts and is not run here.
            test: if r.n_gen > 0 {
                format!("tg{}", r.n_gen)
            } else {
                format!("pp{}", r.n_prompt)
            },
            ngl: r.n_gpu_layers,
            samples_ts: r.samples_ts,
            avg_ts: r.avg_ts,
        })
        .collect())
}
