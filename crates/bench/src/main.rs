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
//!    and on HRX0 when the HRX library exists and loads (the probe preloaded there too).
//!
//! The table is printed and written to `<out>/report.md` and `<out>/report.json`
//! (`<out>` defaults to `target/bench`).

mod archs;
mod archs_cycle;
mod arms;
mod cbuild;
mod e2e;
mod probe;
mod report;
mod sched;
mod stats;

use anyhow::{bail, Context, Result};
use arms::{loadavg, Arm, Machine};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Command-line options; see the crate documentation.
struct Options {
    a: Option<PathBuf>,
    b: Option<PathBuf>,
    rounds: u32,
    iters: u32,
    e2e_rounds: u32,
    e2e_reps: u32,
    hrx: Option<PathBuf>,
    no_hrx: bool,
    no_e2e: bool,
    no_callgrind: bool,
    archs_rounds: u32,
    archs_filter: Option<String>,
    cycle_rounds: u32,
    no_build: bool,
    e2e_budget_s: u64,
    graphs: Vec<String>,
    out: Option<PathBuf>,
}

fn parse_args(args: &[String]) -> Result<Options> {
    let mut o = Options {
        a: None,
        b: None,
        rounds: 20,
        iters: 100,
        e2e_rounds: 8,
        e2e_reps: 2,
        hrx: None,
        no_hrx: false,
        no_e2e: false,
        no_callgrind: false,
        archs_rounds: 3,
        archs_filter: None,
        cycle_rounds: 20,
        no_build: false,
        e2e_budget_s: 900,
        graphs: vec!["smollm2".into(), "deepseek".into()],
        out: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--a" => o.a = Some(PathBuf::from(value()?)),
            "--b" => o.b = Some(PathBuf::from(value()?)),
            "--rounds" => o.rounds = value()?.parse()?,
            "--iters" => o.iters = value()?.parse()?,
            "--e2e-rounds" => o.e2e_rounds = value()?.parse()?,
            "--e2e-reps" => o.e2e_reps = value()?.parse()?,
            "--hrx" => o.hrx = Some(PathBuf::from(value()?)),
            "--no-hrx" => o.no_hrx = true,
            "--no-e2e" => o.no_e2e = true,
            "--no-callgrind" => o.no_callgrind = true,
            "--archs-rounds" => o.archs_rounds = value()?.parse()?,
            "--archs-filter" => o.archs_filter = Some(value()?.clone()),
            "--cycle-rounds" => o.cycle_rounds = value()?.parse()?,
            "--no-build" => o.no_build = true,
            "--e2e-budget" => o.e2e_budget_s = value()?.parse()?,
            "--graphs" => o.graphs = value()?.split(',').map(str::to_string).collect(),
            "--out" => o.out = Some(PathBuf::from(value()?)),
            "-h" | "--help" => {
                println!(
                    "usage: bench [--a LIB] [--b LIB] [--rounds N] [--iters N] [--e2e-rounds N] \
                     [--e2e-reps N] [--hrx LIB | --no-hrx] [--no-e2e] [--no-callgrind] \
                     [--e2e-budget SECONDS] [--archs-rounds N] [--archs-filter REGEX] [--cycle-rounds N] \
                     [--no-build] \
                     [--graphs smollm2,deepseek] [--out DIR]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other} (try --help)"),
        }
    }
    if o.rounds == 0 || o.iters == 0 || o.e2e_rounds == 0 || o.e2e_reps == 0 {
        bail!("--rounds, --iters, --e2e-rounds and --e2e-reps must be at least 1");
    }
    Ok(o)
}

fn workspace_root() -> Result<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize()
        .with_context(|| format!("workspace root {}", root.display()))
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
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = real_main(&args) {
        eprintln!("bench: error: {e:#}");
        std::process::exit(1);
    }
}

fn real_main(args: &[String]) -> Result<()> {
    let opts = parse_args(args)?;
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
    let a_src = opts.a.clone().unwrap_or_else(|| stock_lib.clone());
    let a_label = if opts.a.is_some() { "A" } else { "stock" };
    let (b_src, b_label) = match &opts.b {
        Some(p) => (p.clone(), "B".to_string()),
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
    let arm_a = Arm::prepare("A", a_label.to_string(), &a_src, &arm_root)?;
    let mut arm_b = Arm::prepare("B", b_label, &b_src, &arm_root)?;
    if arm_b.sha256 == arm_a.sha256 {
        arm_b.label = format!("{} (same file as A)", arm_a.label);
    }
    progress(&format!(
        "arm A = {} ({})",
        arm_a.source.display(),
        arm_a.label
    ));
    progress(&format!(
        "arm B = {} ({})",
        arm_b.source.display(),
        arm_b.label
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
                    e2e_probe.push(report::E2eProbe {
                        device: dev.name.clone(),
                        runs: probes,
                    });
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
    let md = rep.markdown();
    std::fs::write(out.join("report.md"), &md)?;
    std::fs::write(out.join("report.json"), serde_json::to_string_pretty(&rep)?)?;
    println!("{md}");
    progress(&format!(
        "wrote {} and {}",
        out.join("report.md").display(),
        out.join("report.json").display()
    ));
    Ok(())
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
