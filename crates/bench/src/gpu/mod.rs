//! `bench gpu`: the two arms inside an unchanged GPU (CUDA) build of llama.cpp, end to end.
//!
//! ```text
//! bench gpu --model FILE [--llama-build DIR] [--a LIB] [--b LIB] [--rounds 10]
//!     [--partial-ngl 8] [--reps 5] [--npl 1,4,8] [--threads N] [--sched-probe LIB]
//!     [--ggml-include DIR] [--no-sched-probe] [--timeout 900] [--out DIR]
//!     [--devices CUDA0,CUDA1 | RPC0,CUDA0] [--rpc-port 50754]
//! ```
//!
//! Per round and arm (A B, then B A the next round) it runs three processes of the build's
//! own tools, each with the arm's `libggml-base.so.0` first on `LD_LIBRARY_PATH`:
//!
//! 1. `llama-bench -p 512 -n 128 -ngl 99,P -r R -o json`: pp512 and tg128 at full and at
//!    partial offload;
//! 2. `LLAMA_GRAPH_REUSE_DISABLE=1 llama-bench -p 0 -n 128 -ngl 99 -r R -o json`: tg128 with
//!    one scheduler cycle per token;
//! 3. `llama-batched-bench -ngl 99 -c 4096 -npp 128 -ntg 128 -npl 1,4,8`.
//!
//! With `--devices` every tool splits the model over those devices (`-dev`, equal `-ts`); a
//! list naming `RPC0` has each arm start its own `ggml-rpc-server` on loopback for its three
//! processes ([`rpc`]), so that one GPU paired with itself runs llama.cpp's pipeline
//! parallelism.
//!
//! The scheduler probe (`cabi-tests/sched-bench/sched_probe.c`) is preloaded into each and
//! gives the time per `ggml_backend_sched_alloc_graph` and `_reset` call. Every process proves
//! it mapped the arm's file (the loader's log, the probe, and `libab_probe.so` when present).
//!
//! It runs from a workspace or from a bundle (`ab bundle`: the binaries with [`bundle::MARKER`]
//! beside them) and never builds, fetches or calls cargo: everything comes from the options,
//! the llama.cpp build and the bundle (or `target/` in a workspace).

mod parse;
mod rpc;
mod run;
mod table;

use crate::arms::{loadavg, Arm, Machine};
use crate::report::round_order;
use crate::{progress, utc_now};
use anyhow::{bail, Context, Result};
use clap::Parser;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `bench gpu` options; see the module documentation.
#[derive(Parser, Debug)]
#[command(
    name = "bench gpu",
    about = "Benchmarks two libggml-base arms (B/A) inside a GPU build of llama.cpp: llama-bench \
             at full and partial offload, with graph reuse off, llama-batched-bench, and the \
             scheduler's time per call",
    after_help = "Writes <OUT>/report.md and <OUT>/report.json. See docs/bench.md, \"GPU bench\".",
    args_override_self = true
)]
pub struct GpuOptions {
    /// The GGUF model to run.
    #[arg(long, value_name = "FILE", value_parser = bundle::caller_path_parser())]
    model: PathBuf,
    /// The llama.cpp build: its bin/ holds llama-bench, llama-batched-bench and
    /// libggml-base.so.0 (default in a workspace: target/llama-stock; required in a bundle).
    #[arg(long, value_name = "DIR", value_parser = bundle::caller_path_parser())]
    llama_build: Option<PathBuf>,
    /// Arm A, the baseline: a libggml-base file, or the sha256 (a unique prefix of 6+ hex
    /// digits) of one in the store, target/ab/store (default: the build's own
    /// bin/libggml-base.so.0).
    #[arg(long, value_name = "LIB")]
    a: Option<PathBuf>,
    /// Arm B, the candidate: a file or a stored sha256 (prefix), as --a (default: ours, the
    /// bundle's lib/libggml-base.so.0, in a workspace target/ours/lib/libggml-base.so.0).
    #[arg(long, value_name = "LIB")]
    b: Option<PathBuf>,
    /// Rounds; each runs every process once per arm, A B then B A (10 or more recommended).
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// The partial offload's -ngl (below 99, the full offload's).
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(0..99))]
    partial_ngl: u32,
    /// llama-bench repetitions per test inside one process (its -r; 5 is llama-bench's own
    /// default).
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    reps: u32,
    /// llama-batched-bench's parallel sequence counts (its -npl).
    #[arg(long, value_name = "LIST", value_delimiter = ',', action = clap::ArgAction::Set,
          default_value = "1,4,8", value_parser = clap::value_parser!(u32).range(1..))]
    npl: Vec<u32>,
    /// CPU threads for the tools (-t; default: theirs).
    #[arg(long, value_name = "N")]
    threads: Option<u32>,
    /// A prebuilt scheduler probe (default: the bundle's lib/libsched-probe.so, else
    /// cabi-tests/sched-bench/sched_probe.c compiled with cc).
    #[arg(long, value_name = "LIB", value_parser = bundle::caller_path_parser())]
    sched_probe: Option<PathBuf>,
    /// ggml's include directory, to compile the probe (default: the pinned sources in a
    /// workspace, else the build's CMakeCache.txt names the source tree).
    #[arg(long, value_name = "DIR", value_parser = bundle::caller_path_parser())]
    ggml_include: Option<PathBuf>,
    /// Run without the scheduler probe (no per-call scheduler rows).
    #[arg(long)]
    no_sched_probe: bool,
    /// Seconds one tool process may run before it is killed (and the round counted failed).
    #[arg(long = "timeout", value_name = "SECONDS", default_value_t = 900,
          value_parser = clap::value_parser!(u64).range(1..))]
    timeout_s: u64,
    /// Output folder (default: target/bench-gpu, under the bundle in a bundle).
    #[arg(long, value_name = "DIR", value_parser = bundle::caller_path_parser())]
    out: Option<PathBuf>,
    /// Split every tool's model over these devices, comma-separated (`CUDA0,CUDA1`; default:
    /// the tools' own choice), with an equal tensor split. Naming `RPC0` (`RPC0,CUDA0`: one GPU
    /// paired with itself, pipeline parallelism on) starts a `ggml-rpc-server` of the build in
    /// each arm on 127.0.0.1 for that arm's processes, proven like them.
    #[arg(long, value_name = "LIST")]
    devices: Option<String>,
    /// The loopback port of that server.
    #[arg(long, value_name = "PORT", default_value_t = 50754,
          value_parser = clap::value_parser!(u16).range(1..))]
    rpc_port: u16,
}

/// Where bench runs from: the folder holding `cabi-tests/`, `target/` and our libraries.
#[derive(Debug, Clone)]
enum Layout {
    /// A bundle root ([`bundle::root`]): libraries in `lib/`.
    Bundle(PathBuf),
    /// A workspace checkout: libraries in `target/ours/lib`, `target/release`.
    Workspace(PathBuf),
}

impl Layout {
    fn find() -> Result<Layout> {
        Ok(match bundle::root().map_err(anyhow::Error::msg)? {
            Some(r) => {
                bundle::verify(&r).map_err(anyhow::Error::msg)?;
                Layout::Bundle(r)
            }
            None => Layout::Workspace(crate::workspace_root()?),
        })
    }

    fn root(&self) -> &Path {
        match self {
            Layout::Bundle(r) | Layout::Workspace(r) => r,
        }
    }

    /// Our library, the default arm B.
    fn ours(&self) -> PathBuf {
        match self {
            Layout::Bundle(r) => bundle::lib_dir(r).join("libggml-base.so.0"),
            Layout::Workspace(r) => r.join("target/ours/lib/libggml-base.so.0"),
        }
    }

    /// `libab_probe.so`, the in-process proof of the mapped files, when it exists.
    fn ab_probe(&self) -> Option<PathBuf> {
        let p = match self {
            Layout::Bundle(r) => bundle::lib_dir(r).join("libab_probe.so"),
            Layout::Workspace(r) => std::env::var_os("AB_PROBE")
                .map(PathBuf::from)
                .unwrap_or_else(|| r.join("target/release/libab_probe.so")),
        };
        p.is_file().then_some(p)
    }
}

/// Parses `bench gpu`'s arguments (those after `gpu`).
pub fn parse_args(args: &[String]) -> Result<GpuOptions, clap::Error> {
    GpuOptions::try_parse_from(std::iter::once("bench gpu").chain(args.iter().map(String::as_str)))
}

/// `bench gpu ARGS`: parses, runs, prints the table; exits 1 on any error.
pub fn main(args: &[String]) {
    let opts = match parse_args(args) {
        Ok(o) => o,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            let _ = e.print();
            std::process::exit(1);
        }
    };
    if let Err(e) = real_main(args, &opts) {
        eprintln!("bench gpu: error: {e:#}");
        std::process::exit(1);
    }
}

fn real_main(args: &[String], opts: &GpuOptions) -> Result<()> {
    let layout = Layout::find()?;
    let root = layout.root().to_path_buf();
    progress(&match &layout {
        Layout::Bundle(r) => format!("bundle {}", r.display()),
        Layout::Workspace(r) => format!("workspace {}", r.display()),
    });
    let build = match (&opts.llama_build, &layout) {
        (Some(d), _) => d.clone(),
        (None, Layout::Workspace(r)) => std::env::var_os("AB_STOCK_BUILD")
            .map(PathBuf::from)
            .unwrap_or_else(|| r.join("target/llama-stock")),
        (None, Layout::Bundle(_)) => bail!("--llama-build DIR is required in a bundle"),
    };
    let build = build
        .canonicalize()
        .with_context(|| format!("llama.cpp build {}", build.display()))?;
    let bin = build.join("bin");
    for tool in ["llama-bench", "llama-batched-bench", "libggml-base.so.0"] {
        if !bin.join(tool).exists() {
            bail!("{} has no {tool}", bin.display());
        }
    }
    let devices = opts
        .devices
        .as_deref()
        .map(rpc::parse_devices)
        .transpose()?;
    if !opts.model.is_file() {
        bail!(
            "model {} {}",
            opts.model.display(),
            if opts.model.exists() {
                "is not a file"
            } else {
                "does not exist"
            }
        );
    }
    if let Some(pl) = opts
        .npl
        .iter()
        .enumerate()
        .find_map(|(i, pl)| opts.npl[..i].contains(pl).then_some(pl))
    {
        bail!("--npl names {pl} twice");
    }
    let model = opts.model.canonicalize()?;
    let out = opts
        .out
        .clone()
        .unwrap_or_else(|| root.join("target/bench-gpu"));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let out = out.canonicalize()?;
    // The arms' folders under it and the build's bin/ go on LD_LIBRARY_PATH: say which option
    // to change, before anything is copied (a split path would load the build's own
    // libggml-base and fail the first process's proof).
    for (what, dir) in [("--out", &out), ("--llama-build", &bin)] {
        if let Some(c) = bundle::loader_split_char("LD_LIBRARY_PATH", dir) {
            bail!(
                "{what} {} contains {c:?}, which the dynamic loader splits LD_LIBRARY_PATH at: \
                 name a folder without it",
                dir.display()
            );
        }
    }
    // Held to the end of the run: a second bench writing here would replace the arms' copies
    // and the report under this one.
    let _out_lock = bundle::lock_dir(&out).map_err(|e| {
        if e.contains("in use by another") {
            anyhow::anyhow!("{e}, or give this one another --out DIR")
        } else {
            anyhow::Error::msg(e)
        }
    })?;

    // Arms.
    let target = layout.root().join("target");
    let a_src = match &opts.a {
        Some(p) => crate::arms::named(&target, p)?,
        None => bin.join("libggml-base.so.0"),
    };
    let b_src = match &opts.b {
        Some(p) => crate::arms::named(&target, p)?,
        None => layout.ours(),
    };
    if !b_src.is_file() {
        bail!(
            "arm B {} does not exist{}",
            b_src.display(),
            if opts.b.is_none() && matches!(layout, Layout::Workspace(_)) {
                " (build ours with `./ab build-ours`, or name a file with --b)"
            } else {
                ""
            }
        );
    }
    let arm_root = out.join("arms");
    let a_label = if opts.a.is_some() { "A" } else { "stock" };
    let b_label = if opts.b.is_some() { "B" } else { "ours" };
    crate::arms::check_sources(&arm_root, &[("A", &a_src), ("B", &b_src)])?;
    let arm_a = Arm::prepare("A", a_label.into(), &a_src, &arm_root)?;
    let mut arm_b = Arm::prepare("B", b_label.into(), &b_src, &arm_root)?;
    if arm_b.sha256 == arm_a.sha256 {
        arm_b.label = format!("{} (the same file as arm A)", arm_b.label);
    }
    crate::arms::keep_or_warn(&target, &[&arm_a, &arm_b]);
    for arm in [&arm_a, &arm_b] {
        progress(&format!(
            "arm {} = {} ({}, sha256 {})",
            arm.key,
            arm.source.display(),
            arm.label,
            &arm.sha256[..12]
        ));
    }

    let sched_probe = if opts.no_sched_probe {
        None
    } else {
        Some(run::sched_probe(&layout, opts, &build, &out)?)
    };
    let ab_probe = layout.ab_probe();
    for p in sched_probe.iter().chain(&ab_probe) {
        match bundle::loader_split_char("LD_PRELOAD", p) {
            // The probe compiled into --out: that folder is what to move.
            Some(c) if p.starts_with(&out) => bail!(
                "{} contains {c:?}, which the dynamic loader splits LD_PRELOAD at (compiled into \
                 --out {}): name an --out without it, or pass --sched-probe LIB or \
                 --no-sched-probe",
                p.display(),
                out.display()
            ),
            Some(_) => bundle::check_loader_path("LD_PRELOAD", p).map_err(anyhow::Error::msg)?,
            None => {}
        }
    }
    if ab_probe.is_none() {
        progress(
            "libab_probe.so not found: the loader's log and the scheduler probe prove the arms",
        );
    }
    let ctx = run::Ctx {
        bin: bin.clone(),
        model: model.clone(),
        sched_probe: sched_probe.clone(),
        ab_probe: ab_probe.clone(),
        out: out.clone(),
        timeout_s: opts.timeout_s,
        threads: opts.threads,
        reps: opts.reps,
        partial_ngl: opts.partial_ngl,
        npl: opts.npl.clone(),
        devices: devices.clone(),
        rpc_port: opts.rpc_port,
    };

    if opts.rounds < 10 {
        progress(&format!(
            "{} rounds: fewer than the 10 recommended, the spread will be wide",
            opts.rounds
        ));
    }
    let machine = Machine::probe();
    let gpu = run::gpu_info();
    let started = utc_now();
    let load_start = loadavg();
    let clock = Instant::now();
    let arms = [&arm_a, &arm_b];
    // The report of the rounds done so far; written after every round, so that a machine
    // taken away in the middle of a run (as lent GPU machines are) leaves what it measured.
    let report = |rounds: &[[run::ArmRound; 2]], errors: &[String]| table::GpuReport {
        command: format!("bench gpu{}", crate::render_args(args)),
        layout: match &layout {
            Layout::Bundle(_) => "bundle".into(),
            Layout::Workspace(_) => "workspace".into(),
        },
        root: root.display().to_string(),
        started_utc: started.clone(),
        finished_utc: utc_now(),
        wall_seconds: clock.elapsed().as_secs_f64(),
        machine: machine.clone(),
        gpu: gpu.clone(),
        loadavg_start: load_start,
        loadavg_end: loadavg(),
        llama_build: build.display().to_string(),
        model: model.display().to_string(),
        model_bytes: std::fs::metadata(&model).map_or(0, |m| m.len()),
        arms: [arm_a.clone(), arm_b.clone()],
        sched_probe: sched_probe.as_ref().map(|p| p.display().to_string()),
        ab_probe: ab_probe.as_ref().map(|p| p.display().to_string()),
        rounds_asked: opts.rounds,
        reps: opts.reps,
        partial_ngl: opts.partial_ngl,
        npl: opts.npl.clone(),
        devices: devices.as_ref().map(|d| d.join(",")),
        threads: opts.threads,
        rows: table::rows(rounds, opts.partial_ngl, &opts.npl),
        errors: errors.to_vec(),
        rounds: rounds.to_vec(),
    };
    let mut rounds = Vec::new();
    let mut errors = Vec::new();
    // Replaces a report of an earlier run in this folder at once: a run cut off in its first
    // round must not leave another run's figures beside its own arms.
    let rep = report(&rounds, &errors);
    crate::write_report_files(&out, &rep.markdown(), &rep)?;
    for round in 0..opts.rounds {
        progress(&format!("round {}/{}", round + 1, opts.rounds));
        let mut got: [Option<run::ArmRound>; 2] = [None, None];
        for k in round_order(round) {
            let r = run::arm_round(&ctx, arms[k])?;
            for e in &r.errors {
                progress(&format!("round {} arm {}: {e}", round + 1, arms[k].key));
                errors.push(format!("round {} arm {}: {e}", round + 1, arms[k].key));
            }
            got[k] = Some(r);
        }
        if let [Some(a), Some(b)] = got {
            rounds.push([a, b]);
        }
        if round + 1 < opts.rounds {
            let rep = report(&rounds, &errors);
            crate::write_report_files(&out, &rep.markdown(), &rep)?;
        }
    }
    let rep = report(&rounds, &errors);
    crate::write_report(&out, &rep.markdown(), &rep)?;
    if !table::any_paired(&rep.rows) {
        bail!(
            "no measure has a value in both arms in any of the {} rounds: every round had a \
             failed process (listed under the table in {})",
            opts.rounds,
            out.join("report.md").display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<GpuOptions, clap::Error> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        parse_args(&args)
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let o = parse(&["--model", "m.gguf"]).unwrap();
        assert_eq!((o.rounds, o.partial_ngl, o.reps), (10, 8, 5));
        assert_eq!(o.npl, [1, 4, 8]);
        assert_eq!(o.timeout_s, 900);
        assert_eq!((o.a, o.b, o.llama_build, o.out), (None, None, None, None));
        assert!(!o.no_sched_probe && o.threads.is_none());
    }

    #[test]
    fn options_that_would_run_wrongly_are_refused() {
        for bad in [
            &["--npl", "0"][..],
            &["--npl", "1,0"],
            &["--partial-ngl", "99"],
            &["--timeout", "0"],
            &["--rpc-port", "0"],
        ] {
            let mut args = vec!["--model", "m"];
            args.extend(bad);
            assert!(parse(&args).is_err(), "{bad:?}");
        }
        assert!(parse(&["--model", "m", "--partial-ngl", "0"]).is_ok());
    }

    /// A llama.cpp build whose tools are shell scripts that fail, the first of them after
    /// copying the report present in `out` to `out/seen.md` (or writing "none" there); its libraries are any
    /// file (the arms are copies, not loaded by a shell).
    fn fake_build(dir: &Path) -> PathBuf {
        let bin = dir.join("build/bin");
        std::fs::create_dir_all(&bin).unwrap();
        for tool in ["llama-bench", "llama-batched-bench"] {
            let p = bin.join(tool);
            bundle::write_script(
                &p,
                &format!(
                    "#!/bin/sh\n[ -e {o}/seen.md ] || cp {o}/report.md {o}/seen.md 2>/dev/null || \
                     echo none > {o}/seen.md\n\
                     echo fake tool fails >&2\nexit 1\n",
                    o = dir.join("out").display()
                ),
            )
            .unwrap();
        }
        std::fs::write(bin.join("libggml-base.so.0"), b"stock").unwrap();
        std::fs::write(dir.join("b.so"), b"ours").unwrap();
        std::fs::write(dir.join("m.gguf"), b"GGUF").unwrap();
        dir.join("build")
    }

    fn run_fake(dir: &Path, extra: &[&str]) -> Result<()> {
        let build = fake_build(dir);
        let mut args: Vec<String> = [
            "--llama-build",
            &build.display().to_string(),
            "--model",
            &dir.join("m.gguf").display().to_string(),
            "--b",
            &dir.join("b.so").display().to_string(),
            "--rounds",
            "2",
            "--no-sched-probe",
            "--timeout",
            "20",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if !extra.contains(&"--out") {
            args.extend(["--out".into(), dir.join("out").display().to_string()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let opts = parse_args(&args).unwrap();
        real_main(&args, &opts)
    }

    /// Arm B given the build's own library: labelled as B, the same file as arm A.
    #[test]
    fn an_arm_b_that_is_arm_a_says_so() {
        let dir = std::env::temp_dir().join(format!("bench-gpu-same-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let build = fake_build(&dir);
        let args: Vec<String> = [
            "--llama-build".to_string(),
            build.display().to_string(),
            "--model".into(),
            dir.join("m.gguf").display().to_string(),
            "--b".into(),
            build.join("bin/libggml-base.so.0").display().to_string(),
            "--rounds".into(),
            "1".into(),
            "--no-sched-probe".into(),
            "--timeout".into(),
            "20".into(),
            "--out".into(),
            dir.join("out").display().to_string(),
        ]
        .into();
        let opts = parse_args(&args).unwrap();
        // the fake tools fail: nothing measured, but the report names the arms
        assert!(real_main(&args, &opts).is_err());
        let rep: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("out/report.json")).unwrap())
                .unwrap();
        assert_eq!(rep["arms"][0]["label"], "stock");
        assert_eq!(rep["arms"][1]["label"], "B (the same file as arm A)");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_run_replaces_an_earlier_report_first_and_fails_when_nothing_was_measured() {
        let dir = std::env::temp_dir().join(format!("bench-gpu-fake-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("out")).unwrap();
        std::fs::write(dir.join("out/report.md"), "an earlier run's report\n").unwrap();
        let e = run_fake(&dir, &[]).unwrap_err().to_string();
        // Every process failed: an error, not a report of nothing with exit status 0.
        assert!(e.contains("no measure has a value in both arms"), "{e}");
        // The first process already saw this run's report (0 rounds), not the earlier one, as
        // a run cut off in its first round leaves it.
        let seen = std::fs::read_to_string(dir.join("out/seen.md")).unwrap();
        assert!(seen.contains("- Rounds: 0 of 2 asked"), "{seen}");
        let md = std::fs::read_to_string(dir.join("out/report.md")).unwrap();
        assert!(md.contains("- Rounds: 2 of 2 asked"), "{md}");
        assert!(md.contains("fake tool fails"), "{md}");
        // Refused before anything runs: a repeated -npl, an --out the loader would split.
        let e = run_fake(&dir, &["--npl", "1,4,1"]).unwrap_err().to_string();
        assert!(e.contains("--npl names 1 twice"), "{e}");
        let colon = dir.join("o:ut").display().to_string();
        let e = run_fake(&dir, &["--out", &colon]).unwrap_err().to_string();
        assert!(
            e.starts_with("--out ") && e.contains("LD_LIBRARY_PATH"),
            "{e}"
        );
        let e = run_fake(&dir, &["--model", &dir.display().to_string()])
            .unwrap_err()
            .to_string();
        assert!(e.ends_with("is not a file"), "{e}");
        // A folder another bench holds: the message says that another --out is enough.
        let held = bundle::lock_dir(&dir.join("out")).unwrap();
        let e = run_fake(&dir, &[]).unwrap_err().to_string();
        assert!(e.contains("in use by another harness process"), "{e}");
        assert!(e.ends_with("or give this one another --out DIR"), "{e}");
        drop(held);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_h200_command_line_parses() {
        let o = parse(&[
            "--llama-build",
            "/opt/llama.cpp/build",
            "--model",
            "/models/r1b.gguf",
            "--rounds",
            "12",
            "--partial-ngl",
            "6",
            "--reps",
            "5",
            "--npl",
            "1,2",
            "--out",
            "/tmp/o",
        ])
        .unwrap();
        assert_eq!(
            o.llama_build.as_deref(),
            Some(Path::new("/opt/llama.cpp/build"))
        );
        assert_eq!((o.rounds, o.partial_ngl, o.reps), (12, 6, 5));
        assert_eq!(o.npl, [1, 2]);
        assert_eq!(o.devices, None);
        let o = parse(&[
            "--model",
            "m",
            "--devices",
            "RPC0,CUDA0",
            "--rpc-port",
            "50999",
        ])
        .unwrap();
        assert_eq!(o.devices.as_deref(), Some("RPC0,CUDA0"));
        assert_eq!(o.rpc_port, 50999);
        assert!(parse(&["--rounds", "3"]).is_err(), "--model is required");
        assert!(parse(&["--model", "m", "--rounds", "0"]).is_err());
    }
}
