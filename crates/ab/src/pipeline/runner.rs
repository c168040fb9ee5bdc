//! One run of `ab pipeline`: a program of the build in one arm on one device configuration
//! (with a same-arm `ggml-rpc-server` when the configuration names RPC0), and what its log
//! says: the estimate or the text, whether pipeline parallelism was on, the scheduler copies.

use crate::paths;
use crate::proc::{Stream, Watcher};
use crate::rpc;
use crate::swap::{self, Arm, Job};
use crate::{fmt_secs, say};
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What a run measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// `llama-perplexity` over the text, `-c 2048 -b 2048 -ub 512`: its final estimate.
    Perplexity,
    /// `llama-completion`, greedy (`--temp 0`), this many tokens after the suite's prompt:
    /// the text it prints.
    Greedy(u32),
}

/// What one run gave.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// llama-perplexity's final estimate.
    Ppl(f64),
    /// What llama-completion printed on stdout: the prompt and its continuation.
    Text(String),
}

/// One run: an arm, a device configuration, and what it gave.
#[derive(Debug)]
pub struct RunResult {
    pub arm: usize,
    pub devices: String,
    pub measure: Measure,
    /// What the run gave, of its measure's kind; `None` when it gave nothing readable.
    pub value: Option<Value>,
    /// The log said "pipeline parallelism enabled" and its last reserve had more than one
    /// scheduler copy.
    pub pipeline: bool,
    /// The scheduler copies of the last reserve, as llama.cpp logged them.
    pub copies: Option<u32>,
    /// The program exited 0, every process (the server's too) is proven, and it gave its
    /// value.
    pub ok: bool,
}

/// A watcher that shows nothing.
struct Quiet;
impl Watcher for Quiet {
    fn line(&mut self, _s: Stream, _l: &str) {}
}

/// How much of the text a perplexity run evaluates, in what batches, and how many layers it
/// offloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Chunks of `ctx` tokens (`--chunks`).
    pub chunks: u32,
    /// The context, in tokens (`-c`, and `-b`: one logical batch a chunk).
    pub ctx: u32,
    /// Tokens of a micro-batch (`-ub`): with pipeline parallelism, the batches in flight.
    pub ubatch: u32,
    /// Layers offloaded to the devices (`-ngl`, perplexity and greedy runs alike); the rest
    /// run on the CPU.
    pub ngl: u32,
}

impl Shape {
    /// The shape the check had before it took one: `-c 2048 -b 2048 -ub 512 -ngl 99`.
    pub fn is_default(&self) -> bool {
        (self.ctx, self.ubatch, self.ngl) == (2048, 512, 99)
    }
}

/// What every run shares: the build, the arms, the model, the text and the shape.
pub struct Runner {
    pub ab_dir: PathBuf,
    pub build: PathBuf,
    pub probe: PathBuf,
    pub arms: [Arm; 2],
    pub model: PathBuf,
    pub text: PathBuf,
    pub shape: Shape,
    /// The port of the server a configuration naming RPC0 starts.
    pub rpc_port: u16,
}

/// The estimate llama-perplexity prints last: `Final estimate: PPL = 9.0672 +/- 0.32978`.
pub fn final_estimate(log: &str) -> Option<f64> {
    log.lines()
        .rev()
        .find_map(|l| l.split("Final estimate: PPL = ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite())
}

/// The scheduler copies llama.cpp reports last (`sched_reserve: ... sched copies = 4`): after
/// a fallback without pipeline parallelism it reserves again and says 1.
pub fn sched_copies(log: &str) -> Option<u32> {
    log.lines()
        .rev()
        .find_map(|l| l.split("sched copies = ").nth(1))
        .and_then(|rest| rest.trim().parse().ok())
}

/// The first line of a failed run's log that says why (an error, an invalid argument, or
/// llama-perplexity's "you need at least N tokens", after which it exits 0 with no estimate).
fn why_failed(log: &str) -> Option<&str> {
    log.lines().map(str::trim).find(|l| {
        let l = l.to_ascii_lowercase();
        l.contains("error")
            || l.contains("invalid")
            || l.contains("failed")
            || l.contains("you need")
    })
}

/// Whether a device list names the RPC server's device.
pub fn names_rpc(devices: &str) -> bool {
    devices.split(',').any(|d| d.trim() == "RPC0")
}

/// The arguments of one run: `shape.ngl` layers offloaded (`-ngl`) to `devices` (`-dev`,
/// comma-separated), log level 4 (the level at which llama_context logs "pipeline parallelism
/// enabled"), and the measure's own: for perplexity `-f TEXT -c CTX -b CTX -ub UBATCH
/// --chunks N`, for greedy text `-p PROMPT -n N --temp 0 -no-cnv`. With `rpc_port` (a configuration
/// naming RPC0) also `--rpc 127.0.0.1:PORT`, and before `-dev`: llama.cpp's argument parser
/// looks each `-dev` name up as it reads it, and RPC0 exists only once `--rpc` has registered
/// it ("invalid device: RPC0" otherwise).
pub fn run_args(
    measure: Measure,
    model: &Path,
    text: &Path,
    shape: Shape,
    devices: &str,
    rpc_port: Option<u16>,
) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(port) = rpc_port {
        args.extend(["--rpc".into(), format!("127.0.0.1:{port}")]);
    }
    args.extend(["-m".into(), model.display().to_string()]);
    match measure {
        Measure::Perplexity => {
            let chunks = shape.chunks.to_string();
            let (ctx, ubatch) = (shape.ctx.to_string(), shape.ubatch.to_string());
            let text = text.display().to_string();
            args.extend(
                [
                    "-f", &text, "-c", &ctx, "-b", &ctx, "-ub", &ubatch, "--chunks", &chunks,
                ]
                .map(String::from),
            );
        }
        Measure::Greedy(n) => {
            let n = n.to_string();
            args.extend(
                ["-p", crate::job::PROMPT, "-n", &n, "--temp", "0", "-no-cnv"].map(String::from),
            );
        }
    }
    let ngl = shape.ngl.to_string();
    args.extend(["-ngl", &ngl, "-dev", devices, "-lv", "4"].map(String::from));
    args
}

impl Runner {
    /// One run of `measure` in `arms[k]` on `devices`; `tag` ends the run's file names.
    /// Errors: the program is missing from the build, or the run or its server could not be
    /// started; a run that fails once started is a result with `ok` false.
    pub fn run(&self, k: usize, devices: &str, measure: Measure, tag: &str) -> Result<RunResult> {
        let arm = &self.arms[k];
        let started = Instant::now();
        let (program, what) = match measure {
            Measure::Perplexity => ("llama-perplexity", "perplexity"),
            Measure::Greedy(_) => ("llama-completion", "greedy"),
        };
        let name = format!("{what}-{}{tag}", devices.replace(',', "-"));
        // A configuration with RPC0 gets a server of the same arm for this run alone.
        let rpc_port = names_rpc(devices).then_some(self.rpc_port);
        let args = run_args(
            measure,
            &self.model,
            &self.text,
            self.shape,
            devices,
            rpc_port,
        );
        let server = match rpc_port {
            Some(port) => Some(rpc::Server::start(
                &self.ab_dir,
                &self.probe,
                &self.build,
                arm,
                port,
                &format!("{}-{name}", arm.name),
            )?),
            None => None,
        };
        let job = Job {
            name: &name,
            program: paths::program(&self.build, program)?,
            args: args.iter().map(Into::into).collect(),
            timeout: Duration::from_secs(1800),
            echo: false,
            expect_base: true,
            dir: None,
        };
        let outcome = swap::run(&self.ab_dir, &self.probe, arm, &job, &mut Quiet);
        // The server is stopped (and checked) whatever the client did.
        let server_ok = match server {
            Some(srv) => srv.stop(arm)?.ok(),
            None => true,
        };
        let outcome = outcome?;
        let log = std::fs::read_to_string(&outcome.log).unwrap_or_default();
        let value = match measure {
            Measure::Perplexity => final_estimate(&log).map(Value::Ppl),
            Measure::Greedy(_) => {
                let out = String::from_utf8_lossy(&outcome.finished.stdout).into_owned();
                Some(out).filter(|t| !t.trim().is_empty()).map(Value::Text)
            }
        };
        let copies = sched_copies(&log);
        let pipeline =
            log.contains("pipeline parallelism enabled") && copies.is_some_and(|c| c > 1);
        let ok = outcome.finished.success() && outcome.proof.ok && value.is_some() && server_ok;
        say(&format!(
            "pipeline: {} on {devices}: {}{}, {} ({}; log {})",
            arm.name,
            match &value {
                Some(Value::Ppl(p)) => format!("PPL {p:.4}"),
                Some(Value::Text(t)) => format!("{} bytes of text", t.len()),
                None if measure == Measure::Perplexity => "PPL none".into(),
                None => "no text".into(),
            },
            if pipeline {
                ", pipeline parallelism enabled"
            } else {
                ""
            },
            if !outcome.proof.ok {
                format!("proof FAILED: {}", outcome.proof.errors.join("; "))
            } else if !outcome.finished.success() || value.is_none() {
                format!(
                    "{program} {}{}",
                    outcome.finished.ended(),
                    why_failed(&log).map_or(String::new(), |w| format!(": {w}"))
                )
            } else if !server_ok {
                "the RPC server's proof or connection FAILED".to_string()
            } else {
                format!(
                    "proof OK, sched copies {}",
                    copies.map_or("?".into(), |c| c.to_string())
                )
            },
            fmt_secs(started.elapsed().as_secs_f64()),
            outcome.log.display()
        ));
        Ok(RunResult {
            arm: k,
            devices: devices.to_string(),
            measure,
            value,
            pipeline,
            copies,
            ok,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_too_short_is_named_as_the_reason() {
        let log = "I perplexity: tokenizing the input ..\n\
                   E perplexity: you need at least 4096 tokens to evaluate perplexity with a context of 2048\n\
                   E perplexity: the data file you provided tokenizes to only 812 tokens\n";
        assert_eq!(
            why_failed(log),
            Some("E perplexity: you need at least 4096 tokens to evaluate perplexity with a context of 2048")
        );
    }

    #[test]
    fn reads_the_final_estimate() {
        let log = "0.00.490.497 I perplexity: calculating perplexity over 6 chunks\n\
                   [1]14.4050,[2]9.6531,[3]9.6080,\n\
                   0.44.726.174 I Final estimate: PPL = 9.0672 +/- 0.32978\n";
        assert_eq!(final_estimate(log), Some(9.0672));
        assert_eq!(final_estimate("no estimate here"), None);
        assert_eq!(final_estimate("Final estimate: PPL = nan +/- nan"), None);
    }

    fn shape(chunks: u32) -> Shape {
        Shape {
            chunks,
            ctx: 2048,
            ubatch: 512,
            ngl: 99,
        }
    }

    #[test]
    fn a_shape_sets_context_batches_and_offload() {
        let (m, t) = (Path::new("m.gguf"), Path::new("t.txt"));
        let small = Shape {
            chunks: 2,
            ctx: 192,
            ubatch: 48,
            ngl: 15,
        };
        assert!(!small.is_default() && shape(1).is_default());
        let a = run_args(Measure::Perplexity, m, t, small, "HRX0,HRX1", None);
        let at = |s: &str| a[a.iter().position(|x| x == s).unwrap() + 1].as_str();
        assert_eq!(
            [at("-c"), at("-b"), at("-ub"), at("--chunks"), at("-ngl")],
            ["192", "192", "48", "2", "15"]
        );
        let g = run_args(Measure::Greedy(8), m, t, small, "HRX0,HRX1", None);
        assert_eq!(g[g.iter().position(|x| x == "-ngl").unwrap() + 1], "15");
        assert!(!g.iter().any(|x| x == "-ub"), "{g:?}");
    }

    #[test]
    fn rpc_is_registered_before_the_devices_are_named() {
        let (m, t) = (Path::new("m.gguf"), Path::new("t.txt"));
        let a = run_args(
            Measure::Perplexity,
            m,
            t,
            shape(3),
            "RPC0,CUDA0",
            Some(50999),
        );
        let at = |s: &str| a.iter().position(|x| x == s).unwrap();
        assert_eq!(a[at("--rpc") + 1], "127.0.0.1:50999");
        assert_eq!(a[at("-dev") + 1], "RPC0,CUDA0");
        assert!(at("--rpc") < at("-dev"), "{a:?}");
        assert_eq!(a[at("--chunks") + 1], "3");
        assert_eq!(a[at("-ub") + 1], "512");
        let b = run_args(Measure::Perplexity, m, t, shape(1), "CUDA0", None);
        assert!(!b.iter().any(|x| x == "--rpc"), "{b:?}");
        assert_eq!(b.len(), a.len() - 2);
        assert!(names_rpc("RPC0, CUDA0") && !names_rpc("CUDA0,HRX0"));
    }

    #[test]
    fn greedy_runs_take_the_prompt_not_the_text() {
        let (m, t) = (Path::new("m.gguf"), Path::new("t.txt"));
        let a = run_args(
            Measure::Greedy(24),
            m,
            t,
            shape(3),
            "RPC0,HRX0",
            Some(50999),
        );
        let at = |s: &str| a.iter().position(|x| x == s);
        assert_eq!(a[at("-n").unwrap() + 1], "24");
        assert_eq!(a[at("--temp").unwrap() + 1], "0");
        assert_eq!(a[at("-p").unwrap() + 1], crate::job::PROMPT);
        assert!(at("-f").is_none() && at("--chunks").is_none(), "{a:?}");
        assert!(at("--rpc").unwrap() < at("-dev").unwrap(), "{a:?}");
        assert_eq!(a[at("-ngl").unwrap() + 1], "99");
    }

    #[test]
    fn the_last_reserve_gives_the_copies() {
        let log = "I sched_reserve: reserve took 6.83 ms, sched copies = 4\n\
                   W llama_context: compute buffer allocation failed, retrying without pipeline parallelism\n\
                   I sched_reserve: reserve took 5.10 ms, sched copies = 1\n";
        assert_eq!(sched_copies(log), Some(1), "the last reserve counts");
        assert_eq!(sched_copies("nothing"), None);
    }
}
