//! `ab pipeline`: the scheduler's pipeline parallelism, checked by perplexity and greedy text.
//! llama.cpp turns it on when a model is split by layers over more than one device: the scheduler
//! then keeps several copies of the graph inputs and orders the devices with events, so that one
//! micro-batch (`-ub`) is computed on the second device while the next enters the first. Upstream
//! has got this wrong before (a graph evaluated with the wrong copy, a missing wait: perplexity far
//! off with `-ub 512 -b 2048` on two devices). `llama-perplexity` over a fixed text, `-c 2048 -b
//! 2048 -ub 512` (four micro-batches a batch), runs on one device and on two, in the stock arm and
//! in ours, every process proven. It passes when each two-device run says "pipeline parallelism
//! enabled" and its estimate is within 0.1 % of the same arm's one-device estimate, and when the
//! arms' estimates agree within 0.1 % too. Then `llama-completion` generates greedy text (`--greedy
//! N` tokens, default 32) on the same two configurations in both arms: each arm's split text must
//! equal its one-device text, and ours stock's. Text equality needs the split and the one device to
//! take the same numeric path (the same kernels: CUDA0 against CUDA0,CUDA1 or RPC0,CUDA0 served by
//! the same card, simulated HRX devices); a pairing whose devices run other kernels (HRX0 on the
//! CUDA runtime beside CUDA0) is checked by perplexity alone (`--greedy 0`).
//!
//! The devices default to two simulated HRX devices (`GGML_HRX_DEVICES=2`, our HRX backend):
//! on a machine without a GPU that is the only way to have two. On a build with two GPUs the
//! same command takes `--one CUDA0 --two CUDA0,CUDA1`. With one GPU, `--two RPC0,CUDA0` pairs
//! the card with itself through ggml-rpc: a configuration that names `RPC0` starts a
//! `ggml-rpc-server` of the same arm on a loopback port for that run (both ends the arm's
//! library, the server proven like the client), and llama.cpp enables pipeline parallelism
//! across the two devices.

mod judge;
mod runner;

use crate::paths::{self, Paths};
use crate::say;
use crate::swap::Arm;
use anyhow::{bail, Result};
use judge::{compare, judge};
use runner::{Measure, RunResult, Runner};
use std::path::PathBuf;

/// What `ab pipeline` is given (its command-line options).
#[derive(Debug, clap::Args)]
pub struct PipelineOptions {
    /// A llama.cpp build folder (default: target/llama-stock).
    #[arg(long, value_name = "DIR", value_parser = bundle::caller_path_parser())]
    pub llama_build: Option<PathBuf>,
    /// The GGUF model (default: the pinned SmolLM2; required from a bundle).
    #[arg(long, value_name = "FILE", value_parser = bundle::caller_path_parser())]
    pub model: Option<PathBuf>,
    /// The text (default: docs/build.md of the pinned llama.cpp tree, 43 KB; required from a
    /// bundle).
    #[arg(long, value_name = "FILE", value_parser = bundle::caller_path_parser())]
    pub text: Option<PathBuf>,
    /// The one-device configuration (-dev).
    #[arg(long, default_value = "HRX0")]
    pub one: String,
    /// The two-device configuration (-dev); HRX devices get GGML_HRX_DEVICES (one more than
    /// the highest named) unless it is set.
    #[arg(long, default_value = "HRX0,HRX1")]
    pub two: String,
    /// A backend library for GGML_BACKEND_PATH, in both arms (default: our HRX backend when a
    /// device named is an HRX one).
    #[arg(long, value_name = "FILE", value_parser = bundle::caller_path_parser())]
    pub backend: Option<PathBuf>,
    /// Chunks of `--ctx` tokens to evaluate (at least 1).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub chunks: u32,
    /// The perplexity runs' context in tokens (`-c`, and `-b`: one batch a chunk).
    #[arg(long, value_name = "TOKENS", default_value_t = 2048, value_parser = clap::value_parser!(u32).range(16..))]
    pub ctx: u32,
    /// The perplexity runs' micro-batch in tokens (`-ub`); smaller ones put more batches in
    /// flight at once across the pipeline.
    #[arg(long, value_name = "TOKENS", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    pub ubatch: u32,
    /// Layers offloaded to the devices (`-ngl`) in every run; the rest run on the CPU.
    #[arg(long, value_name = "N", default_value_t = 99)]
    pub ngl: u32,
    /// Greedy tokens `llama-completion` generates on each configuration in each arm, whose
    /// texts must be equal (0: no text check, for devices that take different numeric paths).
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub greedy: u32,
    /// The loopback port of the `ggml-rpc-server` a configuration naming `RPC0` starts.
    #[arg(long, default_value_t = 50753)]
    pub rpc_port: u16,
    /// The split runs need not enable pipeline parallelism: llama.cpp enables it only when
    /// every layer is offloaded, so with a partial offload (`--ngl` below the model's layer
    /// count) this checks the split across the devices alone. Not with `--self-test`, whose
    /// fault acts on pipeline copies.
    #[arg(long, conflicts_with = "self_test")]
    pub no_pipeline: bool,
    /// Then also run ours on the two devices with a planted fault
    /// (`GGML_SCHED_TEST_FAULT=wrong-pipeline-copy`: split inputs copied into the next pipeline
    /// copy) and require the check to catch it: the check's own test.
    #[arg(long)]
    pub self_test: bool,
}

/// `--one` names one device and `--two` at least two distinct ones: otherwise the comparison
/// would not be one device against a split.
pub fn check_devices(one: &str, two: &str) -> Result<()> {
    let a = rpc_loopback::parse_devices(one, 1).map_err(|e| anyhow::anyhow!("--one {e}"))?;
    if a.len() != 1 {
        bail!("--one {one:?} must name exactly one device");
    }
    rpc_loopback::parse_devices(two, 2).map_err(|e| anyhow::anyhow!("--two {e}"))?;
    Ok(())
}

/// The HRX device count a split needs: one more than the highest `HRXn` it names; `None`
/// when it names none.
pub fn hrx_devices_needed(devices: &str) -> Option<usize> {
    devices
        .split(',')
        .filter_map(|d| d.trim().strip_prefix("HRX"))
        .filter_map(|n| n.parse::<usize>().ok())
        .max()
        .map(|n| n + 1)
}

/// Runs the four perplexity runs (two arms × two configurations), then the four greedy ones;
/// 0 when every check holds.
pub fn run(paths: &Paths, o: &PipelineOptions) -> Result<u8> {
    check_devices(&o.one, &o.two)?;
    // Settings only our library reads at run time would make the arms differ by setting, not
    // by library (stock fixes its copies at build time), and the fault is the self-test's.
    for var in ["GGML_SCHED_MAX_COPIES", "GGML_SCHED_TEST_FAULT"] {
        if std::env::var_os(var).is_some() {
            bail!(
                "{var} is set: only our arm would read it (stock fixes its pipeline copies at \
                 build time, and the fault is --self-test's); unset it for `ab pipeline`"
            );
        }
    }
    let build = crate::default_build(paths, o.llama_build.clone())?;
    let probe = crate::ensure_probe(paths)?;
    let model = crate::default_model(paths, o.model.as_deref())?;
    let text = match &o.text {
        Some(t) => t.clone(),
        None if paths.bundle.is_some() => bail!("from a bundle, name the text: --text FILE"),
        None => pins::Pins::load(&paths.root)?
            .upstream_dir(&paths.target)
            .join("docs/build.md"),
    };
    if !text.is_file() {
        bail!("the text {} is not a file", text.display());
    }
    // Builds (or, from a bundle, finds) our libraries, the HRX backend among them.
    let ours = crate::ours::build(paths)?.base;
    let hrx_devices = [&o.one, &o.two]
        .map(|d| hrx_devices_needed(d))
        .into_iter()
        .max()
        .flatten();
    let backend = match (&o.backend, hrx_devices) {
        (Some(b), _) => Some(b.clone()),
        (None, Some(_)) => Some(paths.ours_lib().join("libggml-hrx.so")),
        (None, None) => None,
    };
    if let Some(n) = hrx_devices {
        if std::env::var_os("GGML_HRX_DEVICES").is_none() {
            // Inherited by every run: as many simulated devices as the configurations name.
            std::env::set_var("GGML_HRX_DEVICES", n.to_string());
        }
    }
    if o.ubatch > o.ctx {
        bail!(
            "--ubatch {} is larger than --ctx {}: a micro-batch is part of a chunk",
            o.ubatch,
            o.ctx
        );
    }
    let shape = runner::Shape {
        chunks: o.chunks,
        ctx: o.ctx,
        ubatch: o.ubatch,
        ngl: o.ngl,
    };
    // Runs of another shape keep their own logs (`ab test` runs two shapes in turn).
    let ab_dir = paths.ab_dir().join(if shape.is_default() {
        "pipeline".to_string()
    } else {
        format!("pipeline-c{}-ub{}-ngl{}", o.ctx, o.ubatch, o.ngl)
    });
    let stock = paths::bin_dir(&build).join("libggml-base.so.0");
    let mut arms = [
        Arm::prepare(&ab_dir, "stock", &stock, backend.as_deref())?,
        Arm::prepare(&ab_dir, "ours", &ours, backend.as_deref())?,
    ];
    crate::abi::check_arms(&build, &mut arms)?;
    let runner = Runner {
        build: build.clone(),
        ab_dir,
        probe,
        arms,
        model,
        text,
        shape,
        rpc_port: o.rpc_port,
    };
    say(&format!(
        "pipeline: model {}, text {}, -c {ctx} -b {ctx} -ub {} -ngl {}, {} chunks; devices {} and {}",
        runner.model.display(),
        runner.text.display(),
        o.ubatch,
        o.ngl,
        o.chunks,
        o.one,
        o.two,
        ctx = o.ctx
    ));
    let mut measures = vec![Measure::Perplexity];
    if o.greedy > 0 {
        measures.push(Measure::Greedy(o.greedy));
    }
    let names = runner.arms.each_ref().map(|a| a.name.as_str());
    let mut results = Vec::new();
    let mut pass = true;
    for &measure in &measures {
        for (round, devices) in [&o.one, &o.two].into_iter().enumerate() {
            // A B for one device, B A for two: neither arm always runs first.
            let order = if round == 0 { [0, 1] } else { [1, 0] };
            for k in order {
                results.push(runner.run(k, devices, measure, "")?);
            }
        }
        pass &= judge(&results, measure, names, &o.one, &o.two, !o.no_pipeline);
    }
    if o.self_test {
        pass &= self_test(&runner, o, &measures, &results)?;
    }
    say(if pass {
        "pipeline: PASS"
    } else {
        "pipeline: FAIL"
    });
    Ok(u8::from(!pass))
}

/// The check's own test: ours on the two devices with the `wrong-pipeline-copy` fault
/// planted, once per measure, must part from its one-device run (a perplexity outside the
/// tolerance, a different text).
fn self_test(
    runner: &Runner,
    o: &PipelineOptions,
    measures: &[Measure],
    results: &[RunResult],
) -> Result<bool> {
    let mut pass = true;
    for &measure in measures {
        let reference = results
            .iter()
            .find(|r| r.arm == 1 && r.devices == o.one && r.measure == measure && r.ok);
        let Some(reference) = reference else {
            say("pipeline: self-test: no one-device run of ours to compare with");
            pass = false;
            continue;
        };
        // Inherited by the one run below only (the variable is removed after it).
        std::env::set_var("GGML_SCHED_TEST_FAULT", "wrong-pipeline-copy");
        let faulty = runner.run(1, &o.two, measure, "-fault");
        std::env::remove_var("GGML_SCHED_TEST_FAULT");
        let faulty = faulty?;
        let (same, how) = compare(&faulty, reference);
        // A run that fails outright, its copies in place, is caught too, if less informatively.
        let caught = !same;
        // A run that never reached its pipeline copies (one that could not start, say) tests
        // nothing, whatever its value: it is judged on that alone.
        let verdict = if !faulty.pipeline {
            "the run had no pipeline copies, so the fault could not act: not a test (FAIL)"
        } else if caught {
            "caught (PASS)"
        } else {
            "NOT caught (FAIL)"
        };
        say(&format!(
            "pipeline: self-test: ours on {} with split inputs sent to the wrong pipeline copy: \
             {how}: {verdict}",
            o.two
        ));
        pass &= caught && faulty.pipeline;
    }
    Ok(pass)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configurations_must_be_one_device_against_a_split() {
        assert!(check_devices("HRX0", "HRX0,HRX1").is_ok());
        assert!(check_devices("CUDA0", "CUDA0,CUDA1").is_ok());
        let e = check_devices("HRX0,HRX1", "HRX0,HRX1").unwrap_err();
        assert!(e.to_string().contains("--one"), "{e}");
        let e = check_devices("HRX0", "HRX0").unwrap_err();
        assert!(e.to_string().contains("--two"), "{e}");
        assert!(check_devices("HRX0", "HRX1,HRX1").is_err());
        assert!(check_devices("CUDA0", "RPC0,CUDA0").is_ok());
        let e = check_devices("CUDA0", "RPC0,RPC1").unwrap_err();
        assert!(e.to_string().contains("RPC1"), "{e}");
    }

    #[test]
    fn hrx_count_is_one_more_than_the_highest_named() {
        assert_eq!(hrx_devices_needed("HRX0,HRX1"), Some(2));
        assert_eq!(hrx_devices_needed("HRX0,HRX2"), Some(3));
        assert_eq!(hrx_devices_needed("CUDA0,CUDA1"), None);
    }
}
