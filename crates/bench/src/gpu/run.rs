//! Running the llama.cpp tools for one arm, with the probes preloaded, and proving which
//! `libggml-base` each process mapped.

use super::parse::{self, BatchedRow, BenchTest};
use super::rpc;
use super::{GpuOptions, Layout};
use crate::arms::Arm;
use crate::e2e::{mapped_libs, without_ld_debug};
use crate::probe::{self, ProbeStats};
use crate::sched::tail;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// What every process of a run shares.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The llama.cpp build's `bin/`: the tools, and second on `LD_LIBRARY_PATH`.
    pub bin: PathBuf,
    /// The GGUF model.
    pub model: PathBuf,
    /// The scheduler probe, preloaded when present.
    pub sched_probe: Option<PathBuf>,
    /// `libab_probe.so`, preloaded when present.
    pub ab_probe: Option<PathBuf>,
    /// The output folder (the probes' files go there, read and removed after each process).
    pub out: PathBuf,
    /// Seconds a process may run.
    pub timeout_s: u64,
    /// `-t` for the tools, when given.
    pub threads: Option<u32>,
    /// llama-bench `-r`.
    pub reps: u32,
    /// The partial offload's `-ngl`.
    pub partial_ngl: u32,
    /// llama-batched-bench `-npl`.
    pub npl: Vec<u32>,
    /// The devices every tool splits the model over (`--devices`); `None`: the tools' own
    /// choice.
    pub devices: Option<Vec<String>>,
    /// The loopback port of the arm's `ggml-rpc-server` when `devices` names RPC0.
    pub rpc_port: u16,
}

/// One tool process's result: what it measured, the scheduler probe's line, its wall time.
#[derive(Debug, Clone, Serialize)]
pub struct Proc<T> {
    /// The parsed figures.
    pub value: T,
    /// The scheduler probe's counters (times in ns); `None` without a probe.
    pub probe: Option<ProbeStats>,
    /// Wall time of the process, s (model load included).
    pub wall_s: f64,
}

/// One arm's three processes in one round; a process that failed is `None`, its error in
/// `errors`.
#[derive(Debug, Clone, Serialize)]
pub struct ArmRound {
    /// `llama-bench -p 512 -n 128 -ngl 99,P`.
    pub bench: Option<Proc<Vec<BenchTest>>>,
    /// `LLAMA_GRAPH_REUSE_DISABLE=1 llama-bench -p 0 -n 128 -ngl 99`.
    pub no_reuse: Option<Proc<Vec<BenchTest>>>,
    /// `llama-batched-bench -ngl 99 -c 4096 -npp 128 -ntg 128 -npl ...`.
    pub batched: Option<Proc<Vec<BatchedRow>>>,
    /// Why a process failed, one line each.
    pub errors: Vec<String>,
}

/// Runs the three processes for `arm`. A process that fails or prints nothing readable is
/// recorded in `errors` and the others still run; a process that mapped another
/// libggml-base than the arm's is an error of the whole run (its figures would be of the
/// wrong library).
pub fn arm_round(ctx: &Ctx, arm: &Arm) -> Result<ArmRound> {
    // The arm's own server, for its three processes, when the split names RPC0.
    let server = match &ctx.devices {
        Some(d) if d.iter().any(|d| d == "RPC0") => Some(rpc::Server::start(ctx, arm)?),
        _ => None,
    };
    let round = tools_round(ctx, arm);
    // Stopped (and proven) whatever the tools did; the tools' own error comes first.
    let stopped = server.map(|s| s.stop(ctx, arm)).transpose();
    let round = round?;
    if let Err(e) = stopped {
        // The server's failure ends the run; what its clients said goes with it.
        if round.errors.is_empty() {
            return Err(e);
        }
        return Err(e.context(format!(
            "the arm's tools failed first: {}",
            round.errors.join("; ")
        )));
    }
    Ok(round)
}

/// The three processes of [`arm_round`].
fn tools_round(ctx: &Ctx, arm: &Arm) -> Result<ArmRound> {
    let mut errors = Vec::new();
    let split = |sep: &str| match &ctx.devices {
        Some(d) => rpc::split_args(d, ctx.rpc_port, sep),
        None => Vec::new(),
    };
    let mut common: Vec<String> = vec!["-m".into(), ctx.model.display().to_string()];
    if let Some(t) = ctx.threads {
        common.extend(["-t".into(), t.to_string()]);
    }
    let reps = ctx.reps.to_string();
    let bench_args = |ngl: &str, p: &str| -> Vec<String> {
        let mut a = common.clone();
        a.extend(split("/"));
        a.extend(["-p", p, "-n", "128", "-ngl", ngl, "-r", &reps, "-o", "json"].map(String::from));
        a
    };
    let llama_bench = ctx.bin.join("llama-bench");

    let ngl = format!("99,{}", ctx.partial_ngl);
    let bench = run_parsed(
        ctx,
        arm,
        &llama_bench,
        &bench_args(&ngl, "512"),
        &[],
        parse::llama_bench_json,
    )?
    .map_err(|e| errors.push(format!("llama-bench: {e}")))
    .ok();

    let no_reuse = run_parsed(
        ctx,
        arm,
        &llama_bench,
        &bench_args("99", "0"),
        &[("LLAMA_GRAPH_REUSE_DISABLE", "1")],
        parse::llama_bench_json,
    )?
    .map_err(|e| errors.push(format!("llama-bench (graph reuse off): {e}")))
    .ok();

    let mut args = common.clone();
    args.extend(split(","));
    let npl = ctx
        .npl
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    args.extend(
        [
            "-ngl", "99", "-c", "4096", "-npp", "128", "-ntg", "128", "-npl", &npl,
        ]
        .map(String::from),
    );
    let batched = run_parsed(
        ctx,
        arm,
        &ctx.bin.join("llama-batched-bench"),
        &args,
        &[],
        parse::batched_bench_table,
    )?
    .map_err(|e| errors.push(format!("llama-batched-bench: {e}")))
    .ok();

    Ok(ArmRound {
        bench,
        no_reuse,
        batched,
        errors,
    })
}

/// Runs one tool process for `arm` and parses its stdout with `parse`. The outer error is
/// fatal (the proof failed, or the process could not start); the inner one is a failed
/// measurement (the tool failed, timed out or printed nothing `parse` reads).
fn run_parsed<T>(
    ctx: &Ctx,
    arm: &Arm,
    exe: &Path,
    args: &[String],
    env: &[(&str, &str)],
    parse: impl Fn(&str) -> Result<T>,
) -> Result<Result<Proc<T>, String>> {
    let name = exe
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let sched_out = ctx.out.join("sched-probe.jsonl");
    let ab_out = ctx.out.join("ab-probe.jsonl");
    let _ = std::fs::remove_file(&sched_out);
    let _ = std::fs::remove_file(&ab_out);
    let mut cmd = tool_command(ctx, arm, exe, args, env, &sched_out, &ab_out);
    let t0 = Instant::now();
    let output = cmd
        .output()
        .with_context(|| format!("starting {}", exe.display()))?;
    let wall_s = t0.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        let useful = without_ld_debug(&stderr);
        return Ok(Err(format!(
            "{name} failed ({}{}): {}",
            output.status,
            if output.status.code() == Some(124) {
                format!(", killed after {} s", ctx.timeout_s)
            } else {
                String::new()
            },
            tail(&useful, 1500)
        )));
    }
    prove(ctx, arm, &name, &stderr, &ab_out)?;
    let probe = match &ctx.sched_probe {
        Some(_) => {
            let p = probe::take(&sched_out)?;
            arm.check_mapped(&p.lib, &format!("{name} scheduler calls"))?;
            Some(p)
        }
        None => None,
    };
    Ok(match parse(&stdout) {
        Ok(value) => Ok(Proc {
            value,
            probe,
            wall_s,
        }),
        Err(e) => Err(format!("{name}: {e:#}")),
    })
}

/// The command of one tool process: under `timeout`, the arm's library first on
/// `LD_LIBRARY_PATH`, the loader's log on, the probes preloaded, `env` set. What the caller's
/// environment holds of the variables the rows are labelled by is removed:
/// `LLAMA_GRAPH_REUSE_DISABLE` (set only where `env` sets it: the processes labelled "graph
/// reuse on" must have it on) and `LD_PRELOAD` (only the probes).
fn tool_command(
    ctx: &Ctx,
    arm: &Arm,
    exe: &Path,
    args: &[String],
    env: &[(&str, &str)],
    sched_out: &Path,
    ab_out: &Path,
) -> Command {
    // Bounded: a hung process (a deadlock in the arm under test) must not hang the bench.
    let mut cmd = Command::new("timeout");
    cmd.args(["--kill-after=10", &ctx.timeout_s.to_string()])
        .arg(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", arm.ld_library_path(&ctx.bin))
        .env("LD_DEBUG", "libs");
    let preload: Vec<String> = [&ctx.sched_probe, &ctx.ab_probe]
        .into_iter()
        .flatten()
        .map(|p| p.display().to_string())
        .collect();
    cmd.env_remove("LLAMA_GRAPH_REUSE_DISABLE");
    if preload.is_empty() {
        cmd.env_remove("LD_PRELOAD");
    } else {
        cmd.env("LD_PRELOAD", preload.join(":"));
    }
    if ctx.sched_probe.is_some() {
        cmd.env("SCHED_PROBE_OUT", sched_out);
    }
    if ctx.ab_probe.is_some() {
        cmd.env("GGML_AB_PROBE_OUT", ab_out);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    // (`timeout` passes the SIGTERM on to the tool it runs.)
    bundle::die_with_parent(&mut cmd);
    cmd
}

/// The proof that a finished process ran the arm's file: every `libggml-base` the loader
/// initialised (`LD_DEBUG=libs`) is the arm's, and so is every one `libab_probe.so` found
/// mapped (path and sha256), when it was preloaded.
pub(super) fn prove(ctx: &Ctx, arm: &Arm, name: &str, stderr: &str, ab_out: &Path) -> Result<()> {
    let bases: Vec<String> = mapped_libs(stderr)
        .into_iter()
        .filter(|p| {
            Path::new(p)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libggml-base.so"))
        })
        .collect();
    if bases.is_empty() {
        bail!("{name} arm {}: libggml-base not in the loader log", arm.key);
    }
    for b in &bases {
        arm.check_mapped(b, name)?;
    }
    if ctx.ab_probe.is_some() {
        let text = std::fs::read_to_string(ab_out)
            .with_context(|| format!("{name}: libab_probe.so wrote no {}", ab_out.display()))?;
        let _ = std::fs::remove_file(ab_out);
        let mut seen = 0;
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line)
                .with_context(|| format!("{name}: libab_probe.so line {line}"))?;
            if v["name"] != "libggml-base" {
                continue;
            }
            seen += 1;
            let path = v["path"].as_str().unwrap_or("");
            arm.check_mapped(path, &format!("{name} (libab_probe.so)"))?;
            if v["sha256"].as_str() != Some(arm.sha256.as_str()) {
                bail!(
                    "{name} arm {}: libab_probe.so saw sha256 {} in {path}, the arm's is {}",
                    arm.key,
                    v["sha256"],
                    arm.sha256
                );
            }
        }
        if seen == 0 {
            bail!("{name} arm {}: libab_probe.so saw no libggml-base", arm.key);
        }
    }
    Ok(())
}

/// The scheduler probe to preload: `--sched-probe`, else the bundle's `lib/libsched-probe.so`,
/// else `cabi-tests/sched-bench/sched_probe.c` compiled into `<out>/libsched-probe.so` against
/// ggml's headers (`--ggml-include`; in a workspace the pinned sources; else the source tree
/// the build's `CMakeCache.txt` names). Errors say how to get one, or to run without.
pub fn sched_probe(
    layout: &Layout,
    opts: &GpuOptions,
    build: &Path,
    out: &Path,
) -> Result<PathBuf> {
    if let Some(p) = &opts.sched_probe {
        if !p.is_file() {
            bail!("--sched-probe {} does not exist", p.display());
        }
        return Ok(p.canonicalize()?);
    }
    if let Layout::Bundle(r) = layout {
        let p = bundle::lib_dir(r).join("libsched-probe.so");
        if p.is_file() {
            return Ok(p);
        }
    }
    let include = match (&opts.ggml_include, layout) {
        (Some(d), _) => Some(d.clone()),
        (None, Layout::Workspace(ws)) => {
            let pins = pins::Pins::load(ws).map_err(|e| anyhow::anyhow!("{e}"))?;
            let up = pins
                .ensure_upstream(&ws.join("target"))
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            Some(up.join("ggml/include"))
        }
        (None, Layout::Bundle(_)) => cmake_ggml_include(build),
    };
    if let Some(d) = &opts.ggml_include {
        if !d.join("ggml-backend.h").is_file() {
            bail!(
                "--ggml-include {} holds no ggml-backend.h: name ggml's include directory \
                 (ggml/include in llama.cpp's sources)",
                d.display()
            );
        }
    }
    let Some(include) = include.filter(|d| d.join("ggml-backend.h").is_file()) else {
        bail!(
            "no scheduler probe: put a prebuilt lib/libsched-probe.so in the bundle, or name one \
             with --sched-probe LIB, or ggml's headers with --ggml-include DIR (the build's \
             CMakeCache.txt names no source tree holding ggml/include/ggml-backend.h), or run \
             with --no-sched-probe (no per-call scheduler rows)"
        );
    };
    let lib = probe::build_with(layout.root(), &include, out)
        .context("compiling the scheduler probe (needs cc)")?;
    Ok(lib.canonicalize()?)
}

/// ggml's include directory in the source tree a CMake build was configured from
/// (`ggml_SOURCE_DIR` or `CMAKE_HOME_DIRECTORY` in `CMakeCache.txt`), when it exists.
fn cmake_ggml_include(build: &Path) -> Option<PathBuf> {
    let cache = std::fs::read_to_string(build.join("CMakeCache.txt")).ok()?;
    cmake_ggml_include_from(&cache).filter(|d| d.join("ggml-backend.h").is_file())
}

fn cmake_ggml_include_from(cache: &str) -> Option<PathBuf> {
    let value = |key: &str| {
        cache.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.split(':').next() == Some(key)).then(|| PathBuf::from(v.trim()))
        })
    };
    value("ggml_SOURCE_DIR")
        .map(|d| d.join("include"))
        .or_else(|| value("CMAKE_HOME_DIRECTORY").map(|d| d.join("ggml/include")))
}

/// `nvidia-smi`'s GPU name, driver and memory per GPU, `None` where it is missing.
pub fn gpu_info() -> Option<String> {
    let o = Command::new("nvidia-smi")
        .args([
            "--query-gpu=name,driver_version,memory.total",
            "--format=csv,noheader",
        ])
        .output()
        .ok()?;
    let s = String::from_utf8_lossy(&o.stdout)
        .trim()
        .replace('\n', "; ");
    (o.status.success() && !s.is_empty()).then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_gets_graph_reuse_off_and_preloads_only_where_the_bench_sets_them() {
        let ctx = Ctx {
            bin: "/b/bin".into(),
            model: "/m.gguf".into(),
            sched_probe: None,
            ab_probe: None,
            out: "/o".into(),
            timeout_s: 5,
            threads: None,
            reps: 1,
            partial_ngl: 8,
            npl: vec![1],
            devices: None,
            rpc_port: 1,
        };
        let arm = Arm {
            key: "A",
            label: "stock".into(),
            source: "/s.so".into(),
            dir: "/o/arms/a".into(),
            file: "/o/arms/a/libggml-base.so.0".into(),
            sha256: String::new(),
        };
        let env_of = |cmd: &Command, key: &str| {
            cmd.get_envs()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.map(|v| v.to_string_lossy().into_owned()))
        };
        let (s, a) = (Path::new("/o/s.jsonl"), Path::new("/o/a.jsonl"));
        // Whatever the caller's environment holds, a "graph reuse on" process has it removed
        // (Some(None): removed), and LD_PRELOAD too when there is no probe.
        let cmd = tool_command(&ctx, &arm, Path::new("/b/bin/llama-bench"), &[], &[], s, a);
        assert_eq!(env_of(&cmd, "LLAMA_GRAPH_REUSE_DISABLE"), Some(None));
        assert_eq!(env_of(&cmd, "LD_PRELOAD"), Some(None));
        assert_eq!(
            env_of(&cmd, "LD_LIBRARY_PATH"),
            Some(Some("/o/arms/a:/b/bin".into()))
        );
        let cmd = tool_command(
            &ctx,
            &arm,
            Path::new("/b/bin/llama-bench"),
            &[],
            &[("LLAMA_GRAPH_REUSE_DISABLE", "1")],
            s,
            a,
        );
        assert_eq!(
            env_of(&cmd, "LLAMA_GRAPH_REUSE_DISABLE"),
            Some(Some("1".into()))
        );
    }

    #[test]
    fn the_cmake_cache_names_ggml_sources() {
        let cache = "# comment\nggml_SOURCE_DIR:STATIC=/src/llama.cpp/ggml\n\
                     CMAKE_HOME_DIRECTORY:INTERNAL=/src/llama.cpp\n";
        assert_eq!(
            cmake_ggml_include_from(cache),
            Some(PathBuf::from("/src/llama.cpp/ggml/include"))
        );
        assert_eq!(
            cmake_ggml_include_from("CMAKE_HOME_DIRECTORY:INTERNAL=/s\n"),
            Some(PathBuf::from("/s/ggml/include"))
        );
        assert_eq!(cmake_ggml_include_from("X:STRING=1\n"), None);
    }
}
