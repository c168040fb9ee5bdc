//! Scheduler overhead: builds `cabi-tests/sched-bench` against the pinned headers and the
//! stock `libggml-base`, runs it once per arm per round (the arm chosen by `LD_LIBRARY_PATH`),
//! and runs it under callgrind for instruction counts.

use crate::arms::Arm;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One graph configuration: which graph the C program builds and over how many backends.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// `smollm2` or `deepseek` (the C program's `--graph`).
    pub graph: String,
    /// 2 (FAKE0 + FCPU) or 3 (FAKE0 + FAKE1 + FCPU).
    pub backends: u32,
}

impl Config {
    /// Short name used in file names and tables, e.g. `deepseek-3`.
    pub fn name(&self) -> String {
        format!("{}-{}", self.graph, self.backends)
    }
}

/// A distribution of per-iteration times inside one process, nanoseconds.
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
pub struct Dist {
    /// Median over the process's iterations, ns.
    pub median: i64,
    /// Fastest iteration, ns.
    pub min: i64,
    /// Slowest iteration, ns.
    pub max: i64,
    /// 25th percentile, ns.
    pub p25: i64,
    /// 75th percentile, ns.
    pub p75: i64,
}

/// Per-iteration times of the phases the C program measures.
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
pub struct Phases {
    /// reset + alloc_graph (split + allocation) + graph_compute (dispatch to no-op backends).
    pub cycle: Dist,
    /// reset + alloc_graph.
    pub alloc_graph: Dist,
    /// graph_compute alone.
    pub compute: Dist,
    /// reset + split_graph alone (a separate loop).
    pub split_graph: Dist,
    /// ggml_backend_sched_reserve on a fresh graph (a third loop).
    pub reserve: Dist,
    /// The first alloc_graph of a new scheduler, after its reserve (a fourth loop: what
    /// llama.cpp does once per context); absent from older programs' lines.
    #[serde(default)]
    pub first_alloc_graph: Option<Dist>,
}

/// Heap traffic in one measured window (bytes are `malloc_usable_size` bytes).
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
pub struct HeapWindow {
    /// `malloc`-family calls inside the window.
    pub allocs: i64,
    /// `free` calls inside the window.
    pub frees: i64,
    /// Bytes requested by those allocations, in total.
    pub bytes: i64,
    /// Highest live-byte count above the window's start.
    pub peak: i64,
    /// Bytes still live when the window closed.
    pub net: i64,
}

/// The heap windows: `sched_new`, the first `alloc_graph` (which reserves the buffers), one
/// `split_graph`, one full cycle and one `reserve` (each the iteration with the highest peak).
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
pub struct Heap {
    /// `ggml_backend_sched_new`.
    pub sched_new: HeapWindow,
    /// The first `alloc_graph`, which reserves the compute buffers.
    pub first_alloc: HeapWindow,
    /// One `split_graph`.
    pub split_graph: HeapWindow,
    /// One full cycle (reset, alloc_graph, graph_compute).
    pub cycle: HeapWindow,
    /// One `ggml_backend_sched_reserve`.
    pub reserve: HeapWindow,
}

/// A compute buffer size the scheduler reported for one backend.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
pub struct BufferSize {
    /// The backend's name (`FAKE0`, `FCPU`, ...).
    pub backend: String,
    /// Its compute buffer, bytes (`ggml_backend_sched_get_buffer_size`).
    pub bytes: u64,
}

/// What one run of the C program printed.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Run {
    /// The libggml-base file the process actually mapped (resolved with `dladdr`).
    pub lib: String,
    /// The benchmark graph (`smollm2`, `deepseek`).
    pub graph: String,
    /// Backends the scheduler was made with (the fake devices, CPU last).
    pub backends: u32,
    /// Tokens in the graph's batch.
    pub tokens: u32,
    /// Nodes of the graph.
    pub nodes: u32,
    /// Leafs of the graph.
    pub leafs: u32,
    /// Splits the scheduler made.
    pub splits: u32,
    /// Pipeline copies of the scheduler (`ggml_backend_sched_get_n_copies`: 1 without `parallel`).
    pub copies: u32,
    /// Timed iterations.
    pub iters: u32,
    /// Iterations inside the callgrind-instrumented section (0 when not run under callgrind).
    pub callgrind_iters: u32,
    /// Compute buffer size per backend after the run.
    pub buffer_sizes: Vec<BufferSize>,
    /// Per-iteration times of each phase.
    pub ns: Phases,
    /// Heap traffic of each window.
    pub heap: Heap,
}

/// Compiles the C program into `<out>/sched-bench` ([`crate::cbuild::compile_sources`]), with the
/// shared fake backend (`cabi-tests/common`): headers from the pinned tree (`ggml/include`,
/// `ggml/src`), linked to `<stock_lib_dir>/libggml-base.so.0`.
pub fn build_program(
    ws: &Path,
    upstream: &Path,
    stock_lib_dir: &Path,
    out: &Path,
) -> Result<PathBuf> {
    let common = ws.join("cabi-tests/common");
    crate::cbuild::compile_sources(
        &[
            &ws.join("cabi-tests/sched-bench/sched_bench.c"),
            &common.join("fake_backend.c"),
        ],
        &out.join("sched-bench"),
        &[
            upstream.join("ggml/include"),
            upstream.join("ggml/src"),
            common,
        ],
        &[],
        &[
            "-L".as_ref(),
            stock_lib_dir.as_os_str(),
            "-l:libggml-base.so.0".as_ref(),
            "-lm".as_ref(),
            "-ldl".as_ref(),
        ],
    )
}

/// Runs the program once for `arm` and checks that the arm's file is the one mapped.
pub fn run(
    program: &Path,
    arm: &Arm,
    stock_lib_dir: &Path,
    cfg: &Config,
    iters: u32,
    warmup: u32,
) -> Result<Run> {
    let output = Command::new(program)
        .env("LD_LIBRARY_PATH", arm.ld_library_path(stock_lib_dir))
        .args([
            "--graph",
            &cfg.graph,
            "--backends",
            &cfg.backends.to_string(),
        ])
        .args([
            "--iters",
            &iters.to_string(),
            "--warmup",
            &warmup.to_string(),
        ])
        .output()
        .with_context(|| format!("starting {}", program.display()))?;
    let run = parse(&output, cfg, arm)?;
    arm.check_mapped(&run.lib, "sched-bench")?;
    Ok(run)
}

fn parse(output: &std::process::Output, cfg: &Config, arm: &Arm) -> Result<Run> {
    if !output.status.success() {
        bail!(
            "sched-bench {} arm {} failed ({}): {}",
            cfg.name(),
            arm.key,
            output.status,
            tail(&String::from_utf8_lossy(&output.stderr), 1500)
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .with_context(|| {
            format!(
                "sched-bench {} printed no JSON: {}",
                cfg.name(),
                tail(&stdout, 500)
            )
        })?;
    serde_json::from_str(line).with_context(|| format!("parsing sched-bench output: {line}"))
}

/// Instruction counts of the timed cycle under callgrind.
#[derive(Debug, Clone, Serialize)]
pub struct Callgrind {
    /// Instructions executed per cycle (total Ir of the instrumented section / iterations).
    pub ir_per_cycle: u64,
    /// Iterations instrumented (the annotated counts are totals over these).
    pub iters: u32,
    /// The callgrind output file.
    pub out_file: PathBuf,
    /// The top functions by self cost (from `callgrind_annotate`), as printed.
    pub top: Vec<String>,
    /// The top functions by inclusive cost.
    pub top_inclusive: Vec<String>,
}

/// Which timed section callgrind instruments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// reset + alloc_graph + graph_compute (`--callgrind`).
    Cycle,
    /// ggml_backend_sched_reserve (`--callgrind-reserve`).
    Reserve,
}

/// Runs the program under `valgrind --tool=callgrind --instr-atstart=no`; the program turns
/// instrumentation on only around the chosen timed section, so the total Ir is that
/// section's alone (divided by the iterations).
pub fn callgrind(
    program: &Path,
    arm: &Arm,
    stock_lib_dir: &Path,
    cfg: &Config,
    iters: u32,
    section: Section,
    out_dir: &Path,
) -> Result<Callgrind> {
    fs::create_dir_all(out_dir)?;
    let (tag, flag) = match section {
        Section::Cycle => ("cycle", "--callgrind"),
        Section::Reserve => ("reserve", "--callgrind-reserve"),
    };
    let out_file = out_dir.join(format!(
        "{}-{tag}-{}.callgrind",
        cfg.name(),
        arm.key.to_lowercase()
    ));
    let output = Command::new("valgrind")
        .env("LD_LIBRARY_PATH", arm.ld_library_path(stock_lib_dir))
        .args(["--tool=callgrind", "--instr-atstart=no"])
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(program)
        .args([
            "--graph",
            &cfg.graph,
            "--backends",
            &cfg.backends.to_string(),
        ])
        .args(["--iters", &iters.to_string(), "--warmup", "1", flag])
        .output()
        .context("starting valgrind (is it installed?)")?;
    let run = parse(&output, cfg, arm)?;
    arm.check_mapped(&run.lib, "sched-bench under callgrind")?;
    let text =
        fs::read_to_string(&out_file).with_context(|| format!("reading {}", out_file.display()))?;
    let total: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("totals:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no totals line in {}", out_file.display()))?;
    let top = annotate(&out_file, false, 12).unwrap_or_default();
    let top_inclusive = annotate(&out_file, true, 25).unwrap_or_default();
    Ok(Callgrind {
        ir_per_cycle: total / u64::from(run.callgrind_iters.max(1)),
        iters: run.callgrind_iters,
        out_file,
        top,
        top_inclusive,
    })
}

/// The first lines of `callgrind_annotate`'s per-function table, self cost (`inclusive`
/// false) or inclusive cost; the whole output is saved beside the callgrind file as
/// `.self.txt` / `.inclusive.txt`.
fn annotate(out_file: &Path, inclusive: bool, n: usize) -> Result<Vec<String>> {
    let output = Command::new("callgrind_annotate")
        .arg("--threshold=99")
        .arg(format!(
            "--inclusive={}",
            if inclusive { "yes" } else { "no" }
        ))
        .arg(out_file)
        .output()?;
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    let ext = if inclusive {
        "inclusive.txt"
    } else {
        "self.txt"
    };
    fs::write(out_file.with_extension(ext), &text)?;
    // The function table follows the line holding "file:function".
    let mut lines = text.lines().skip_while(|l| !l.contains("file:function"));
    lines.next();
    Ok(lines
        .filter(|l| !l.trim().is_empty() && !l.starts_with("--"))
        .take(n)
        .map(short_function_line)
        .collect())
}

/// "1,234 (5.6%)  /path/file.rs:crate::f [object]" becomes "1,234 (5.6%)  crate::f".
fn short_function_line(line: &str) -> String {
    let line = line.split(" [").next().unwrap_or(line).trim_end();
    let Some(pct_end) = line.find(")  ") else {
        return line.to_string();
    };
    let (count, rest) = line.split_at(pct_end + 3);
    let rest = rest.trim_start();
    let func = [".rs:", ".c:", ".cpp:", ".h:", ".S:", "???:"]
        .iter()
        .filter_map(|ext| rest.find(ext).map(|i| i + ext.len()))
        .min()
        .map_or(rest, |i| &rest[i..]);
    format!("{count}{func}")
}

/// The last `n` bytes of `s` (on a char boundary), for error messages.
pub fn tail(s: &str, n: usize) -> &str {
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line the C program printed (stock arm, smollm2 over 3 backends, 3 iterations).
    const LINE: &str = "{\"lib\":\"/repo/target/llama-stock/bin/libggml-base.so.0.25.3\",\"graph\":\"smollm2\",\"backends\":3,\"tokens\":512,\"nodes\":906,\"leafs\":339,\"graph_size\":3072,\"splits\":63,\"copies\":1,\"iters\":3,\"warmup\":1,\"callgrind_iters\":0,\"computed_nodes_per_iter\":906,\"buffer_sizes\":[{\"backend\":\"FAKE0\",\"bytes\":12331008},{\"backend\":\"FAKE1\",\"bytes\":12722176},{\"backend\":\"FCPU\",\"bytes\":1716288}],\"ns\":{\"cycle\":{\"median\":213156,\"min\":192986,\"max\":253776,\"p25\":192986,\"p75\":253776},\"alloc_graph\":{\"median\":208069,\"min\":188079,\"max\":247627,\"p25\":188079,\"p75\":247627},\"compute\":{\"median\":5087,\"min\":4907,\"max\":6149,\"p25\":4907,\"p75\":6149},\"split_graph\":{\"median\":117564,\"min\":108531,\"max\":141280,\"p25\":108531,\"p75\":141280},\"reserve\":{\"median\":472200,\"min\":296059,\"max\":652857,\"p25\":296059,\"p75\":652857}},\"heap\":{\"sched_new\":{\"allocs\":19,\"frees\":0,\"bytes\":65249744,\"peak\":65249744,\"net\":65249744},\"first_alloc\":{\"allocs\":81,\"frees\":2,\"bytes\":540048,\"peak\":533888,\"net\":533888},\"split_graph\":{\"allocs\":1,\"frees\":1,\"bytes\":40,\"peak\":0,\"net\":0},\"cycle\":{\"allocs\":1,\"frees\":1,\"bytes\":40,\"peak\":0,\"net\":0},\"reserve\":{\"allocs\":8,\"frees\":8,\"bytes\":12912,\"peak\":0,\"net\":0}}}";

    #[test]
    fn program_output_parses() {
        let run: Run = serde_json::from_str(LINE).unwrap();
        assert_eq!(run.graph, "smollm2");
        assert_eq!(run.backends, 3);
        assert_eq!(run.nodes, 906);
        assert_eq!(run.splits, 63);
        assert_eq!(run.iters, 3);
        let names: Vec<&str> = run
            .buffer_sizes
            .iter()
            .map(|b| b.backend.as_str())
            .collect();
        assert_eq!(names, ["FAKE0", "FAKE1", "FCPU"]);
        assert_eq!(run.buffer_sizes[2].bytes, 1716288);
        assert!(run.ns.cycle.min <= run.ns.cycle.median && run.ns.cycle.median <= run.ns.cycle.max);
        assert_eq!(run.heap.cycle.allocs, run.heap.cycle.frees);
    }

    #[test]
    fn annotate_lines_are_shortened() {
        assert_eq!(
            short_function_line(
                "19,435,475 (22.70%)  /repo/src/sched/inplace.rs:ggml_base::sched::inplace::colocate [/x/libggml-base.so.0]"
            ),
            "19,435,475 (22.70%)  ggml_base::sched::inplace::colocate"
        );
        assert_eq!(
            short_function_line("3,757,500 ( 4.39%)  ???:ggml_nbytes [/x/lib.so]"),
            "3,757,500 ( 4.39%)  ggml_nbytes"
        );
        assert_eq!(
            short_function_line("2,008,133 ( 2.35%)  ./string/../memset-vec-unaligned-erms.S:__memset_avx2_unaligned_erms"),
            "2,008,133 ( 2.35%)  __memset_avx2_unaligned_erms"
        );
    }

    #[test]
    fn config_names() {
        let c = Config {
            graph: "deepseek".into(),
            backends: 3,
        };
        assert_eq!(c.name(), "deepseek-3");
    }

    #[test]
    fn tail_respects_char_boundaries() {
        assert_eq!(tail("aµb", 2), "b");
        assert_eq!(tail("abc", 10), "abc");
    }
}
