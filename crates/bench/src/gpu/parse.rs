//! Reading what the llama.cpp tools print: `llama-bench -o json` and `llama-batched-bench`'s
//! table.

use anyhow::{bail, Context, Result};
use serde::Serialize;

pub use crate::llama_bench::{llama_bench_json, BenchTest};

/// One line of llama-batched-bench's table: one (prompt, generation, parallel) case.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BatchedRow {
    /// Prompt tokens per sequence (`PP`, from `-npp`).
    pub pp: u32,
    /// Generated tokens per sequence (`TG`, from `-ntg`).
    pub tg: u32,
    /// Parallel sequences (`B`, from `-npl`).
    pub pl: u32,
    /// KV cells the case needs (`N_KV`).
    pub n_kv: u32,
    /// Prompt time, s (`T_PP s`).
    pub t_pp: f64,
    /// Prompt speed, tokens/s (`S_PP t/s`).
    pub s_pp: f64,
    /// Generation time, s (`T_TG s`).
    pub t_tg: f64,
    /// Generation speed over all sequences, tokens/s (`S_TG t/s`).
    pub s_tg: f64,
    /// Total time, s (`T s`).
    pub t: f64,
    /// Total speed, prompt and generated tokens over the total time, tokens/s (`S t/s`).
    pub s: f64,
}

/// The columns llama-batched-bench's header names, in order; a table with other columns is
/// refused rather than read wrongly.
const BATCHED_HEADER: [&str; 10] = [
    "PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s",
];

/// Parses llama-batched-bench's markdown table (its default output, on stdout) into its rows,
/// in the order printed. Lines that are not table rows (log lines, `LD_DEBUG` lines) are
/// skipped. Errors when no header with the expected columns is found, or a row after it does
/// not have ten numbers.
pub fn batched_bench_table(text: &str) -> Result<Vec<BatchedRow>> {
    let mut rows = Vec::new();
    let mut header = false;
    for line in text.lines() {
        let line = line.trim();
        if !line.starts_with('|') {
            continue;
        }
        let cells: Vec<&str> = line
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim())
            .collect();
        if cells == BATCHED_HEADER {
            header = true;
            continue;
        }
        if !header || cells.iter().all(|c| c.chars().all(|ch| ch == '-')) {
            continue;
        }
        if cells.len() != BATCHED_HEADER.len() {
            bail!(
                "llama-batched-bench row {line:?}: {} cells, expected 10",
                cells.len()
            );
        }
        let int = |i: usize| -> Result<u32> {
            cells[i]
                .parse()
                .with_context(|| format!("llama-batched-bench row {line:?}: cell {}", i + 1))
        };
        let num = |i: usize| -> Result<f64> {
            cells[i]
                .parse()
                .with_context(|| format!("llama-batched-bench row {line:?}: cell {}", i + 1))
        };
        rows.push(BatchedRow {
            pp: int(0)?,
            tg: int(1)?,
            pl: int(2)?,
            n_kv: int(3)?,
            t_pp: num(4)?,
            s_pp: num(5)?,
            t_tg: num(6)?,
            s_tg: num(7)?,
            t: num(8)?,
            s: num(9)?,
        });
    }
    if !header {
        bail!("llama-batched-bench printed no table (no header {BATCHED_HEADER:?})");
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from the stock CPU build: `llama-batched-bench -m SmolLM2-135M-Instruct.Q4_1.gguf
    /// -ngl 99 -c 4096 -npp 128 -ntg 128 -npl 1,4,8 -t 2` (stdout, whole), with a loader line
    /// as `LD_DEBUG=libs` would interleave it on a shared stream.
    const BATCHED: &str = include_str!("testdata/batched-bench.txt");

    /// Captured from the stock CPU build: `llama-bench -m SmolLM2-135M-Instruct.Q4_1.gguf
    /// -p 512 -n 128 -ngl 99,8 -r 1 -t 2 -o json` (stdout, whole).
    const LLAMA_BENCH: &str = include_str!("testdata/llama-bench.json");

    #[test]
    fn batched_bench_table_rows_are_read_in_order() {
        let rows = batched_bench_table(BATCHED).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows.iter().map(|r| r.pl).collect::<Vec<_>>(), vec![1, 4, 8]);
        let r = rows[1];
        assert_eq!((r.pp, r.tg, r.n_kv), (128, 128, 1024));
        assert_eq!((r.t_pp, r.s_pp), (5.204, 98.39));
        assert_eq!((r.t_tg, r.s_tg), (38.388, 13.34));
        assert_eq!((r.t, r.s), (43.592, 23.49));
        assert_eq!(rows[2].s_tg, 12.03);
    }

    #[test]
    fn batched_bench_without_a_table_or_with_a_bad_row_is_an_error() {
        let e = batched_bench_table("main: error: unable to load model\n").unwrap_err();
        assert!(e.to_string().contains("no table"), "{e}");
        let broken = BATCHED.replace("|   128 |    128 |    4 |", "|   128 |    abc |    4 |");
        let e = batched_bench_table(&broken).unwrap_err();
        assert!(format!("{e:#}").contains("cell 2"), "{e:#}");
        // Other columns (a future version): refused, not misread.
        let other = BATCHED.replace("S_TG t/s", "S_GEN t/s");
        assert!(batched_bench_table(&other).is_err());
    }

    #[test]
    fn llama_bench_json_gives_test_and_offload_per_entry() {
        let t = llama_bench_json(LLAMA_BENCH).unwrap();
        let keys: Vec<(&str, i64)> = t.iter().map(|t| (t.test.as_str(), t.ngl)).collect();
        assert_eq!(
            keys,
            vec![("pp512", 99), ("tg128", 99), ("pp512", 8), ("tg128", 8)]
        );
        // The capture's figures (a loaded 2-core machine); samples are printed with 6
        // significant digits, the mean with 6 decimals.
        assert_eq!(t[0].samples_ts, vec![88.8287]);
        assert_eq!(t[0].avg_ts, 88.828714);
        assert_eq!(t[1].samples_ts, vec![1.93587]);
        assert_eq!(t[3].avg_ts, 4.310250);
        for t in &t {
            assert_eq!(t.samples_ts.len(), 1, "-r 1");
            assert!(
                (t.samples_ts[0] - t.avg_ts).abs() < 1e-5 * t.avg_ts,
                "{t:?}"
            );
        }
    }

    #[test]
    fn llama_bench_without_json_is_an_error() {
        assert!(llama_bench_json("error: failed to load model\n").is_err());
        assert!(llama_bench_json("[\n  {\"n_prompt\": 512}\n]\n").is_err());
    }
}
