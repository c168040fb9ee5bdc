//! `bench`: ours against stock, in one run.
//!
//! ```text
//! cargo run --release -p bench -- [--a LIB] [--b LIB] [--rounds 20] [--iters 100]
//!     [--e2e-rounds 8] [--e2e-reps 2] [--e2e-budget 900] [--hrx LIB | --no-hrx] [--no-e2e]
//!     [--no-callgrind] [--archs-rounds 3] [--archs-filter REGEX] [--cycle-rounds 20]
//!     [--no-build] [--graphs smollm2,deepseek] [--out DIR]
//! ```
//!
//! It builds first, unless `--no-build`: the stock llama.cpp when missing (`ab build-stock`),
//! and ours always (`ab build-ours`, which does nothing when the sources did not change).
//!
//! Arm A is the baseline (default: the stock `target/llama-stock/bin/libggml-base.so.0`), arm
//! B the candidate (default: the newer of `target/ours/lib/libggml-base.so.0` and
//! `target/release/libggml_base.so`; with `--no-build` and neither present, stock again,
//! labelled so). Every ratio is B/A. HRX: the newer of `target/ours/lib/libggml-hrx.so` and
//! `target/release/libggml_hrx.so`, or `--hrx`.
//!
//! 1. Scheduler overhead: `cabi-tests/sched-bench` per graph and backend count, one process
//!    per arm per round, A B then B A; per-process medians summarized per arm.
//! 2. Instruction counts: one callgrind run per arm and configuration, timed section only.
//! 3. Memory: compute buffer sizes per backend, scheduler heap traffic, both arms.
//! 4. Real graphs: `test-llama-archs` (every architecture) per arm, alternating, with an
//!    LD_PRELOAD probe timing `ggml_backend_sched_alloc_graph`/`reserve` inside the process.
//! 5. Real graphs, steady cycle, 2 and 3 backends: every model `test-llama-archs -o` writes,
//!    run by `cabi-tests/sched-bench/archs_cycle.c` on HRX0 and on HRX0/HRX1 with graph reuse
//!    off, one process per arm per round, A B then B A (needs the HRX library).
//! 6. End to end: `llama-bench -p 512 -n 128 -t 2` on SmolLM2, arms alternating, on the CPU
//!    and on HRX0 when the HRX library exists and loads (the probe preloaded there too); each
//!    round also `-p 0 -n 128` with `LLAMA_GRAPH_REUSE_DISABLE=1`, where every token's graph
//!    goes through the scheduler.
//!
//! The table is printed and written to `<out>/report.md` and `<out>/report.json`
//! (`<out>` defaults to `target/bench`).
//!
//! `bench gpu ...` is a separate mode for a GPU build of llama.cpp, which runs from an
//! `ab bundle` folder too: see [`gpu`].

mod archs;
mod archs_cycle;
mod arms;
mod buffers;
mod cbuild;
mod e2e;
mod gpu;
mod llama_bench;
mod probe;
mod report;
mod sched;
mod stats;

use anyhow::{bail, Context, Result};
use arms::{loadavg, Arm, Machine};
use clap::Parser;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Command-line options; see the crate documentation.
#[derive(Parser, Debug)]
#[command(
    name = "bench",
    about = "Benchmarks two libggml-base arms against each other (B/A): scheduler overhead, \
             instruction counts, memory, real graphs, llama-bench end to end",
    after_help = "Writes <OUT>/report.md and <OUT>/report.json. See docs/bench.md.\n\n\
                  `bench gpu --help`: the GPU mode (a CUDA build of llama.cpp, runs from a bundle).",
    // The hand-written parser this replaces let a repeated flag's last value win.
    args_override_self = true
)]
struct Options {
    /// libggml-base of arm A, the baseline: a file, or the sha256 (a unique prefix of 6+ hex
    /// digits) of one in the store, target/ab/store (default:
    /// target/llama-stock/bin/libggml-base.so.0).
    #[arg(long, value_name = "LIB")]
    a: Option<PathBuf>,
    /// libggml-base of arm B, the candidate: a file or a stored sha256 (prefix), as --a
    /// (default: the newer of target/ours/lib/libggml-base.so.0 and
    /// target/release/libggml_base.so).
    #[arg(long, value_name = "LIB")]
    b: Option<PathBuf>,
    /// Scheduler-overhead rounds (one process per arm per round).
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = at_least_one())]
    rounds: u32,
    /// Timed iterations inside each scheduler-overhead process.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = at_least_one())]
    iters: u32,
    /// End-to-end (llama-bench) rounds per device.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = at_least_one())]
    e2e_rounds: u32,
    /// llama-bench repetitions inside each end-to-end run (its -r).
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = at_least_one())]
    e2e_reps: u32,
    /// The HRX backend library (default: the newer of target/ours/lib/libggml-hrx.so and
    /// target/release/libggml_hrx.so).
    #[arg(long, value_name = "LIB", value_parser = bundle::caller_path_parser())]
    hrx: Option<PathBuf>,
    /// Run nothing on HRX devices (no steady cycle, no end to end on HRX0).
    #[arg(long)]
    no_hrx: bool,
    /// Skip the end-to-end llama-bench runs.
    #[arg(long)]
    no_e2e: bool,
    /// Skip the callgrind instruction counts.
    #[arg(long)]
    no_callgrind: bool,
    /// test-llama-archs rounds (0: none).
    #[arg(long, value_name = "N", default_value_t = 3)]
    archs_rounds: u32,
    /// Only the architectures this matches (test-llama-archs -a), in every test-llama-archs run.
    #[arg(long, value_name = "REGEX")]
    archs_filter: Option<String>,
    /// Steady-cycle rounds on HRX0 and HRX0/HRX1 (0: not run).
    #[arg(long, value_name = "N", default_value_t = 20)]
    cycle_rounds: u32,
    /// Build nothing: use the stock and our libraries as they are.
    #[arg(long)]
    no_build: bool,
    /// Wall-clock budget of the end-to-end runs, in seconds, shared by the devices.
    #[arg(long = "e2e-budget", value_name = "SECONDS", default_value_t = 900)]
    e2e_budget_s: u64,
    /// Scheduler-overhead graphs, comma-separated.
    #[arg(
        long,
        value_name = "GRAPHS",
        value_delimiter = ',',
        // Set, not append: `--graphs a --graphs b` means b, as before.
        action = clap::ArgAction::Set,
        default_value = "smollm2,deepseek"
    )]
    graphs: Vec<String>,
    /// Output folder (default: target/bench).
    #[arg(long, value_name = "DIR", value_parser = bundle::caller_path_parser())]
    out: Option<PathBuf>,
}

/// Counts of rounds, iterations and repetitions: 0 would measure nothing.
fn at_least_one() -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(1..)
}

/// Parses the arguments after the program name.
fn parse_args(args: &[String]) -> Result<Options, clap::Error> {
    Options::try_parse_from(std::iter::once("bench").chain(args.iter().map(String::as_str)))
}

fn workspace_root() -> Result<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize()
        .with_context(|| format!("workspace root {}", root.display()))
}

/// Writes `<out>/report.md` (`md`, also printed) and `<out>/report.json` (`rep`).
pub(crate) fn write_report<T: serde::Serialize>(out: &Path, md: &str, rep: &T) -> Result<()> {
    write_report_files(out, md, rep)?;
    // The table on stdout is a copy of report.md, written above: a reader that closed the
    // pipe (`bench ... | head`) loses only the copy, and the run is not failed for it
    // (`println!` would panic on the broken pipe).
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = writeln!(stdout, "{md}").and_then(|()| stdout.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(e.into());
        }
    }
    progress(&format!(
        "wrote {} and {}",
        out.join("report.md").display(),
        out.join("report.json").display()
    ));
    Ok(())
}

/// Writes `<out>/report.md` and `<out>/report.json` (replacing them) without printing: a
/// long run's report so far.
pub(crate) fn write_report_files<T: serde::Serialize>(out: &Path, md: &str, rep: &T) -> Result<()> {
    std::fs::write(out.join("report.md"), md)?;
    std::fs::write(out.join("report.json"), serde_json::to_string_pretty(rep)?)?;
    Ok(())
}

fn utc_now() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn progress(msg: &str) {
    eprintln!("bench: {msg}");
}

fn main() {
    // First, while this is the only thread: the folder the user's relative paths are taken
    // from (bundle::caller_path), for the arguments parsed below.
    bundle::take_caller_dir();
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `bench gpu ...`: its own options, nothing of the CPU bench runs.
    if args.first().map(String::as_str) == Some("gpu") {
        gpu::main(&args[1..]);
        return;
    }
    let opts = match parse_args(&args) {
        Ok(o) => o,
        // --help: printed on stdout, status 0.
        Err(e) if !e.use_stderr() => e.exit(),
        // bench has always exited 1 on every error, a usage error included.
        Err(e) => {
            let _ = e.print();
            std::process::exit(1);
        }
    };
    if let Err(e) = real_main(&args, opts) {
        eprintln!("bench: error: {e:#}");
        std::process::exit(1);
    }
}

/// The whole run; `args` (as given) are recorded in the report.
fn real_main(args: &[String], opts: Options) -> Result<()> {
    let ws = workspace_root()?;
    let target = ws.join("target");
    let out = opts.out.clone().unwrap_or_else(|| target.join("bench"));
    std::fs::create_dir_all(&out)?;
    // The stock build: `AB_STOCK_BUILD` when run as `ab bench`, else target/llama-stock;
    // built with `ab build-stock` when missing (a fresh clone).
    let stock_build = std::env::var_os("AB_STOCK_BUILD")
        .map(PathBuf::from)
        .unwrap_or_else(|| target.join("llama-stock"));
    let stock_dir = stock_build.join("bin");
    let stock_lib = stock_dir.join("libggml-base.so.0");
    let needed = ["libggml-base.so.0", "llama-bench", "test-llama-archs"];
    if needed.iter().any(|f| !stock_dir.join(f).exists()) {
        if opts.no_build {
            bail!(
                "{} lacks one of {needed:?}: build it with `cargo run --release -p ab -- build-stock`",
                stock_dir.display()
            );
        }
        ab(&ws, &["build-stock"])?;
    }
    let pins = pins::Pins::load(&ws).map_err(|e| anyhow::anyhow!("{e}"))?;
    let upstream = pins
        .ensure_upstream(&target)
        .map_err(|e| anyhow::anyhow!("{e}"))?;

    // Arms.
    let a_src = match &opts.a {
        Some(p) => arms::named(&target, p)?,
        None => stock_lib.clone(),
    };
    let a_label = if opts.a.is_some() { "A" } else { "stock" };
    let (b_src, b_label) = match &opts.b {
        Some(p) => (arms::named(&target, p)?, "B".to_string()),
        None => {
            let ours = [
                target.join("ours/lib/libggml-base.so.0"),
                target.join("release/libggml_base.so"),
            ];
            if !opts.no_build {
                // Always: cargo does nothing when the sources did not change, and a library
                // older than its sources would be measured as "ours" otherwise.
                ab(&ws, &["build-ours"])?;
            }
            match newest(&ours) {
                Some(p) => (p.clone(), "ours".to_string()),
                None => {
                    progress("no Rust libggml-base found: comparing stock against stock");
                    (stock_lib.clone(), "stock (as B)".to_string())
                }
            }
        }
    };
    let arm_root = out.join("arms");
    arms::check_sources(&arm_root, &[("A", &a_src), ("B", &b_src)])?;
    let arm_a = Arm::prepare("A", a_label.to_string(), &a_src, &arm_root)?;
    let mut arm_b = Arm::prepare("B", b_label, &b_src, &arm_root)?;
    if arm_b.sha256 == arm_a.sha256 {
        arm_b.label = format!("{} (the same file as arm A)", arm_b.label);
    }
    arms::keep_or_warn(&target, &[&arm_a, &arm_b]);
    progress(&format!(
        "arm A = {} ({}, sha256 {})",
        arm_a.source.display(),
        arm_a.label,
        &arm_a.sha256[..12]
    ));
    progress(&format!(
        "arm B = {} ({}, sha256 {})",
        arm_b.source.display(),
        arm_b.label,
        &arm_b.sha256[..12]
    ));

    let machine = Machine::probe();
    let started = utc_now();
    let load_start = loadavg();
    let clock = Instant::now();

    // 1-3: scheduler overhead, instruction counts, memory.
    let program = sched::build_program(&ws, &upstream, &stock_dir, &out)?;
    let configs: Vec<sched::Config> = opts
        .graphs
        .iter()
        .flat_map(|g| {
            [2u32, 3].map(|n| sched::Config {
                graph: g.clone(),
                backends: n,
            })
        })
        .collect();
    let sched_rows = report::run_sched(
        &program,
        [&arm_a, &arm_b],
        &stock_dir,
        &configs,
        &opts,
        &out.join("callgrind"),
    );

    // HRX, for 5 and 6.
    let hrx = opts.hrx.clone().unwrap_or_else(|| {
        newest(&[
            target.join("ours/lib/libggml-hrx.so"),
            target.join("release/libggml_hrx.so"),
        ])
        .unwrap_or_else(|| target.join("ours/lib/libggml-hrx.so"))
    });

    // 4: real graphs in test-llama-archs.
    let probe_lib = probe::build(&ws, &upstream, &out)?;
    let probe_out = out.join("probe.jsonl");
    let mut archs_runs: [Vec<archs::ArchsRun>; 2] = [vec![], vec![]];
    let mut archs_error = None;
    'rounds: for round in 0..opts.archs_rounds {
        progress(&format!(
            "test-llama-archs round {}/{}",
            round + 1,
            opts.archs_rounds
        ));
        for k in report::round_order(round) {
            let arm = [&arm_a, &arm_b][k];
            match archs::run(
                &stock_dir.join("test-llama-archs"),
                &stock_dir,
                &probe_lib,
                &probe_out,
                arm,
                opts.archs_filter.as_deref(),
            ) {
                Ok(r) => archs_runs[k].push(r),
                Err(e) => {
                    progress(&format!("test-llama-archs: {e:#}"));
                    archs_error = Some(format!("{e:#}"));
                    break 'rounds;
                }
            }
        }
    }

    // 5: real graphs, steady cycle, 2 and 3 backends (HRX devices).
    let mut cycle_configs = Vec::new();
    let mut cycle_error = None;
    let mut cycle_models = 0;
    if opts.cycle_rounds == 0 {
        cycle_error = Some("not run: --cycle-rounds 0".to_string());
    } else if opts.no_hrx || !hrx.exists() {
        cycle_error = Some(format!(
            "not run: needs the HRX library ({})",
            if opts.no_hrx {
                "--no-hrx".to_string()
            } else {
                format!("{} not found", hrx.display())
            }
        ));
    } else {
        match run_cycle(
            &ws,
            &upstream,
            &stock_dir,
            &out,
            &probe_lib,
            &probe_out,
            &hrx,
            [&arm_a, &arm_b],
            &opts,
        ) {
            Ok((n, configs)) => {
                cycle_models = n;
                cycle_configs = configs;
            }
            Err(e) => {
                progress(&format!("archs cycle: {e:#}"));
                cycle_error = Some(format!("{e:#}"));
            }
        }
    }

    // 6: end to end.
    let mut e2e_rows = Vec::new();
    let mut e2e_probe = Vec::new();
    let mut e2e_errors = Vec::new();
    let mut e2e_devices = Vec::new();
    if !opts.no_e2e {
        let model = target.join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
        let model = if model.exists() {
            model
        } else {
            pins.ensure_model(&target)
                .map_err(|e| anyhow::anyhow!("{e}"))?
        };
        let setup = e2e::Setup {
            llama_bench: stock_dir.join("llama-bench"),
            stock_lib_dir: stock_dir.clone(),
            model,
            threads: 2,
            reps: opts.e2e_reps,
            probe: probe_lib.clone(),
            probe_out: probe_out.clone(),
        };
        let mut devices = vec![e2e::Device {
            name: "CPU".into(),
            backend_path: None,
        }];
        if !opts.no_hrx && hrx.exists() {
            devices.push(e2e::Device {
                name: "HRX0".into(),
                backend_path: Some(hrx.canonicalize()?),
            });
        } else if !opts.no_hrx {
            e2e_errors.push(format!("HRX0: {} not found, not run", hrx.display()));
        }
        e2e_devices = devices.clone();
        let e2e_start = Instant::now();
        for (i, dev) in devices.iter().enumerate() {
            // What is left of the budget, shared equally by the devices still to run.
            let left = opts
                .e2e_budget_s
                .saturating_sub(e2e_start.elapsed().as_secs());
            let share = left / (devices.len() - i) as u64;
            let deadline = Instant::now() + std::time::Duration::from_secs(share);
            match report::run_e2e(&setup, [&arm_a, &arm_b], dev, opts.e2e_rounds, deadline) {
                Ok((mut rows, probes)) => {
                    e2e_rows.append(&mut rows);
                    for (workload, runs) in e2e::Workload::ALL.into_iter().zip(probes) {
                        e2e_probe.push(report::E2eProbe {
                            device: dev.name.clone(),
                            reuse_off: workload == e2e::Workload::ReuseOff,
                            runs,
                        });
                    }
                }
                Err(e) => {
                    progress(&format!("end to end on {}: {e:#}", dev.name));
                    e2e_errors.push(format!("{}: {e:#}", dev.name));
                }
            }
        }
    }

    let rep = report::Report {
        command: if args.is_empty() {
            "cargo run --release -p bench".to_string()
        } else {
            format!("cargo run --release -p bench --{}", render_args(args))
        },
        started_utc: started,
        finished_utc: utc_now(),
        wall_seconds: clock.elapsed().as_secs_f64(),
        machine,
        loadavg_start: load_start,
        loadavg_end: loadavg(),
        arms: [arm_a, arm_b],
        rounds: opts.rounds,
        iters: opts.iters,
        e2e_rounds: opts.e2e_rounds,
        e2e_reps: opts.e2e_reps,
        sched: sched_rows,
        archs_rounds: opts.archs_rounds,
        archs_filter: opts.archs_filter.clone(),
        archs: archs_runs,
        archs_error,
        hrx: hrx
            .canonicalize()
            .ok()
            .filter(|_| !opts.no_hrx)
            .and_then(|p| {
                let sha = pins::sha256_file(&p).ok()?;
                Some((p.display().to_string(), sha))
            }),
        cycle_rounds: opts.cycle_rounds,
        cycle_models,
        cycle: cycle_configs,
        cycle_error,
        e2e: e2e_rows,
        e2e_probe,
        e2e_errors,
        e2e_devices,
    };
    write_report(&out, &rep.markdown(), &rep)
}

/// 5: writes the models, then runs `archs-cycle` per round, per device configuration, per
/// arm (A B, then B A). Returns the number of model files and one entry per configuration; a
/// round in which either arm's process failed is left out for both arms and its error kept.
#[allow(clippy::too_many_arguments)]
fn run_cycle(
    ws: &Path,
    upstream: &Path,
    stock_dir: &Path,
    out: &Path,
    probe_lib: &Path,
    probe_out: &Path,
    hrx: &Path,
    arms: [&Arm; 2],
    opts: &Options,
) -> Result<(usize, Vec<archs_cycle::CycleConfig>)> {
    let program = archs_cycle::build(ws, upstream, stock_dir, out)?;
    progress("writing the test-llama-archs models");
    let models = archs_cycle::write_models(
        &stock_dir.join("test-llama-archs"),
        stock_dir,
        &out.join("archs-models"),
        opts.archs_filter.as_deref(),
    )?;
    let hrx = hrx.canonicalize()?;
    let setup = archs_cycle::Setup {
        program: &program,
        stock_dir,
        probe_lib,
        probe_out,
        hrx: &hrx,
        models: &models,
    };
    let mut configs: Vec<archs_cycle::CycleConfig> = ["HRX0", "HRX0/HRX1"]
        .into_iter()
        .map(|d| archs_cycle::CycleConfig {
            devices: d.to_string(),
            runs: [vec![], vec![]],
            errors: Vec::new(),
        })
        .collect();
    for round in 0..opts.cycle_rounds {
        progress(&format!(
            "archs cycle round {}/{} ({} models)",
            round + 1,
            opts.cycle_rounds,
            models.len()
        ));
        for c in configs.iter_mut() {
            let mut got: [Option<Vec<archs_cycle::ModelRun>>; 2] = [None, None];
            for k in report::round_order(round) {
                match archs_cycle::run(&setup, arms[k], &c.devices) {
                    Ok(r) => got[k] = Some(r),
                    Err(e) => {
                        progress(&format!("archs cycle {}: {e:#}", c.devices));
                        c.errors.push(format!("round {}: {e:#}", round + 1));
                        break;
                    }
                }
            }
            // Only rounds where both arms finished are kept, so that they stay paired.
            if let [Some(a), Some(b)] = got {
                c.runs[0].push(a);
                c.runs[1].push(b);
            }
        }
    }
    // 0.9 GB of random weights: written again by every run, so not kept.
    let _ = std::fs::remove_dir_all(out.join("archs-models"));
    Ok((models.len(), configs))
}

/// The most recently modified of `paths` that exists.
fn newest(paths: &[PathBuf]) -> Option<PathBuf> {
    paths
        .iter()
        .filter_map(|p| Some((std::fs::metadata(p).ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p.clone())
}

/// Runs the harness: `cargo run --release -q -p ab -- ARGS` in the workspace.
fn ab(ws: &Path, args: &[&str]) -> Result<()> {
    progress(&format!("running `ab {}`", args.join(" ")));
    let status = std::process::Command::new("cargo")
        .args(["run", "--release", "-q", "-p", "ab", "--"])
        .args(args)
        .current_dir(ws)
        .status()
        .context("running cargo")?;
    if !status.success() {
        bail!("`ab {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

fn render_args(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if a.chars().any(|c| c.is_whitespace()) {
                format!(" '{a}'")
            } else {
                format!(" {a}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;

    fn parse(args: &[&str]) -> Result<Options, clap::Error> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        parse_args(&args)
    }

    #[test]
    fn defaults() {
        let o = parse(&[]).unwrap();
        assert_eq!(
            (o.rounds, o.iters, o.e2e_rounds, o.e2e_reps),
            (20, 100, 8, 2)
        );
        assert_eq!(
            (o.archs_rounds, o.cycle_rounds, o.e2e_budget_s),
            (3, 20, 900)
        );
        assert_eq!(o.graphs, ["smollm2", "deepseek"]);
        assert!(!(o.no_hrx || o.no_e2e || o.no_callgrind || o.no_build));
        assert_eq!((o.a, o.b, o.hrx, o.out), (None, None, None, None));
        assert_eq!(o.archs_filter, None);
    }

    /// The full run the README's figures come from.
    #[test]
    fn the_readme_full_run() {
        let o = parse(&["--e2e-rounds", "10", "--e2e-budget", "900"]).unwrap();
        assert_eq!((o.e2e_rounds, o.e2e_budget_s), (10, 900));
        assert_eq!(o.rounds, 20);
    }

    /// The README's quick settings (the fresh-clone measurement).
    #[test]
    fn the_readme_quick_run() {
        let o = parse(&[
            "--rounds",
            "2",
            "--iters",
            "10",
            "--no-callgrind",
            "--archs-rounds",
            "1",
            "--cycle-rounds",
            "2",
            "--e2e-rounds",
            "1",
            "--e2e-budget",
            "120",
        ])
        .unwrap();
        assert_eq!(
            (o.rounds, o.iters, o.archs_rounds, o.cycle_rounds),
            (2, 10, 1, 2)
        );
        assert_eq!((o.e2e_rounds, o.e2e_budget_s), (1, 120));
        assert!(o.no_callgrind);
    }

    /// docs/bench.md's noise baseline, and the remaining flags.
    #[test]
    fn every_other_flag() {
        let o = parse(&[
            "--b",
            "target/llama-stock/bin/libggml-base.so.0",
            "--out",
            "target/bench-noise",
            "--a",
            "/a.so",
            "--e2e-reps",
            "3",
            "--hrx",
            "/h.so",
            "--no-hrx",
            "--no-e2e",
            "--archs-filter",
            "llama|qwen",
            "--no-build",
            "--graphs",
            "smollm2",
        ])
        .unwrap();
        // An arm stays as given (it may be a stored sha256): the store resolves it.
        assert_eq!(
            o.b.as_deref(),
            Some(Path::new("target/llama-stock/bin/libggml-base.so.0"))
        );
        // A folder is taken from the caller's folder (this test's current directory).
        let out = o.out.unwrap();
        assert!(out.is_absolute(), "{}", out.display());
        assert_eq!(out, bundle::caller_path(Path::new("target/bench-noise")));
        assert_eq!(o.a.as_deref(), Some(Path::new("/a.so")));
        assert_eq!(o.hrx.as_deref(), Some(Path::new("/h.so")));
        assert_eq!(o.e2e_reps, 3);
        assert!(o.no_hrx && o.no_e2e && o.no_build);
        assert_eq!(o.archs_filter.as_deref(), Some("llama|qwen"));
        assert_eq!(o.graphs, ["smollm2"]);
    }

    #[test]
    fn a_repeated_flag_takes_its_last_value() {
        let o = parse(&[
            "--graphs", "a,b", "--graphs", "c", "--rounds", "4", "--rounds", "5",
        ]);
        let o = o.unwrap();
        assert_eq!(o.graphs, ["c"]);
        assert_eq!(o.rounds, 5);
    }

    #[test]
    fn bad_values_are_errors() {
        let e = parse(&["--rounds", "0"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ValueValidation);
        assert!(
            e.to_string().contains("'0'") && e.to_string().contains("--rounds"),
            "{e}"
        );
        let e = parse(&["--e2e-budget", "15m"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ValueValidation);
        assert!(e.to_string().contains("--e2e-budget"), "{e}");
        let e = parse(&["--e2e-round", "3"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnknownArgument);
        assert!(e.use_stderr());
        // --help is not an error: main prints it and exits 0.
        assert!(!parse(&["--help"]).unwrap_err().use_stderr());
    }
}
