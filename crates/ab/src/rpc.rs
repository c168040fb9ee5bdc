//! `ab rpc`: ggml-rpc across arms. A `ggml-rpc-server` runs in one arm on a loopback port,
//! `llama-completion` in an arm splits a model between the server's device (`RPC0`) and its
//! own (`-ngl` layers on RPC0 and the rest on the CPU of a CPU build; `-ngl 99 -ts 1,1`
//! between RPC0 and the first device of a GPU build), greedy. The pairs: stock server and
//! stock client (the reference text), ours and ours, stock server and our client. Each text
//! must equal the reference, and every process, the server's included, is proven to have
//! mapped its arm's libggml-base.

use crate::paths::{self, Paths};
use crate::proc::{Stream, Watcher};
use crate::proof;
use crate::swap::{self, Arm, Job};
use crate::{fmt_secs, say};
use anyhow::{bail, Context, Result};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// What `ab rpc` is given.
pub struct RpcOptions {
    pub llama_build: Option<PathBuf>,
    pub model: Option<PathBuf>,
    /// Layers on RPC0 in a CPU build (default 8).
    pub ngl: u32,
    /// The loopback port of the server (default 50752).
    pub port: u16,
}

/// One server/client pairing and what it gave.
struct Pairing {
    server: usize,
    client: usize,
    text: String,
    ok: bool,
}

/// A watcher that shows nothing.
struct Quiet;
impl Watcher for Quiet {
    fn line(&mut self, _s: Stream, _l: &str) {}
}

/// Runs the three pairings; 0 when every text equals the reference and every proof holds.
pub fn run(paths: &Paths, o: &RpcOptions) -> Result<u8> {
    let build = crate::default_build(paths, o.llama_build.clone())?;
    let probe = crate::ensure_probe(paths)?;
    let model = crate::default_model(paths, o.model.as_deref())?;
    let ab_dir = paths.ab_dir().join("rpc");
    let stock = paths::bin_dir(&build).join("libggml-base.so.0");
    let ours = crate::ours::build(paths)?.base;
    let mut arms = [
        Arm::prepare(&ab_dir, "stock", &stock, None)?,
        Arm::prepare(&ab_dir, "ours", &ours, None)?,
    ];
    crate::abi::check_arms(&build, &mut arms)?;
    let devices = crate::job::devices(&build, None)?;
    let split: Vec<String> = match devices.iter().find(|d| *d != "CPU") {
        Some(dev) => ["-ngl", "99", "-dev", &format!("RPC0,{dev}"), "-ts", "1,1"]
            .map(String::from)
            .to_vec(),
        None => vec!["-ngl".into(), o.ngl.to_string()],
    };
    say(&format!(
        "rpc: model {}, split {}",
        model.display(),
        split.join(" ")
    ));
    let mut results = Vec::new();
    for (server, client) in [(0, 0), (1, 1), (0, 1)] {
        let started = Instant::now();
        let (text, ok) = pairing(
            &ab_dir, &probe, &build, &arms, server, client, &model, &split, o.port,
        )?;
        say(&format!(
            "rpc: server {} + client {}: {} bytes, {} ({})",
            arms[server].name,
            arms[client].name,
            text.len(),
            if ok { "proofs OK" } else { "FAILED" },
            fmt_secs(started.elapsed().as_secs_f64())
        ));
        results.push(Pairing {
            server,
            client,
            text,
            ok,
        });
    }
    let reference = results[0].text.clone();
    let mut fail = reference.is_empty();
    if fail {
        say("rpc: FAIL: the reference pairing (stock server, stock client) generated nothing");
    }
    for r in &results {
        let same = r.text == reference;
        say(&format!(
            "rpc: {:<5} server, {:<5} client  {}  {}",
            arms[r.server].name,
            arms[r.client].name,
            if r.ok {
                "proofs OK"
            } else {
                "proof or run FAILED"
            },
            if same {
                "text equal to stock+stock"
            } else {
                "text DIFFERS"
            }
        ));
        fail |= !r.ok || !same;
    }
    say(&format!("rpc: text {:?}", reference));
    say(if fail { "rpc: FAIL" } else { "rpc: PASS" });
    Ok(u8::from(fail))
}

/// One pairing: starts the server in `arms[server]`, runs the client in `arms[client]`, stops
/// the server. Returns the generated text and whether both ran and both proofs hold.
#[allow(clippy::too_many_arguments)]
fn pairing(
    ab_dir: &Path,
    probe: &Path,
    build: &Path,
    arms: &[Arm; 2],
    server: usize,
    client: usize,
    model: &Path,
    split: &[String],
    port: u16,
) -> Result<(String, bool)> {
    let tag = format!("{}-server-{}-client", arms[server].name, arms[client].name);
    let runs = ab_dir.join("runs");
    std::fs::create_dir_all(&runs)?;
    let server_probe = runs.join(format!("{tag}.server.probe.jsonl"));
    let server_log = runs.join(format!("{tag}.server.log"));
    let _ = std::fs::remove_file(&server_probe);
    let mut cmd = swap::command(
        &arms[server],
        probe,
        &paths::program(build, "ggml-rpc-server")?,
        &server_probe,
    );
    let log = std::fs::File::create(&server_log)?;
    cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(log.try_clone()?)
        .stderr(log)
        .stdin(Stdio::null());
    let mut child = cmd.spawn().context("starting ggml-rpc-server")?;
    let served = wait_listening(&mut child, port);
    let client_run = match served {
        Ok(()) => {
            let job = Job {
                name: &format!("{tag}.client"),
                program: paths::program(build, "llama-completion")?,
                args: [
                    "-m",
                    &model.display().to_string(),
                    "--rpc",
                    &format!("127.0.0.1:{port}"),
                    "-n",
                    "32",
                    "-p",
                    crate::job::PROMPT,
                    "--temp",
                    "0",
                    "-no-cnv",
                ]
                .iter()
                .map(Into::into)
                .chain(split.iter().map(Into::into))
                .collect(),
                timeout: Duration::from_secs(900),
                echo: false,
                expect_base: true,
            };
            Some(swap::run(ab_dir, probe, &arms[client], &job, &mut Quiet))
        }
        Err(e) => {
            say(&format!("rpc: {tag}: {e:#}"));
            None
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let server_proof = proof::check(&proof::read_records(&server_probe)?, &arms[server], true);
    if !server_proof.ok {
        say(&format!(
            "rpc: {tag}: server proof FAILED: {}",
            server_proof.errors.join("; ")
        ));
    }
    // One connection is `wait_listening`'s own; the client's come after it.
    let served_client = std::fs::read_to_string(&server_log)
        .map(|l| l.matches("Accepted client connection").count() >= 2)
        .unwrap_or(false);
    if !served_client {
        say(&format!(
            "rpc: {tag}: the server never accepted a client (log {})",
            server_log.display()
        ));
    }
    let Some(outcome) = client_run.transpose()? else {
        return Ok((String::new(), false));
    };
    if !outcome.proof.ok {
        say(&format!(
            "rpc: {tag}: client proof FAILED: {}",
            outcome.proof.errors.join("; ")
        ));
    }
    let ok = outcome.finished.success() && outcome.proof.ok && server_proof.ok && served_client;
    if !outcome.finished.success() {
        say(&format!(
            "rpc: {tag}: llama-completion {} (log {})",
            outcome.finished.ended(),
            outcome.log.display()
        ));
    }
    Ok((
        String::from_utf8_lossy(&outcome.finished.stdout).into_owned(),
        ok,
    ))
}

/// Waits until the server accepts connections on `port` (30 s at most), or fails when it
/// exits first. A probe connection is made and closed at once (the server logs it).
fn wait_listening(child: &mut Child, port: u16) -> Result<()> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(st) = child.try_wait()? {
            bail!("ggml-rpc-server exited before it listened ({st})");
        }
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        if Instant::now() > until {
            bail!("ggml-rpc-server did not listen on 127.0.0.1:{port} within 30 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
