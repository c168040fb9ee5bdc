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
use anyhow::{Context, Result};
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
    let served = Server::start(ab_dir, probe, build, &arms[server], port, &tag);
    let srv = match served {
        Ok(srv) => srv,
        Err(e) => {
            say(&format!("rpc: {tag}: {e:#}"));
            return Ok((String::new(), false));
        }
    };
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
        dir: None,
    };
    // The server is stopped (and checked) whatever the client did.
    let outcome = swap::run(ab_dir, probe, &arms[client], &job, &mut Quiet);
    let server_end = srv.stop(&arms[server])?;
    let outcome = outcome?;
    if !outcome.proof.ok {
        say(&format!(
            "rpc: {tag}: client proof FAILED: {}",
            outcome.proof.errors.join("; ")
        ));
    }
    let ok = outcome.finished.success() && outcome.proof.ok && server_end.ok();
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

/// A `ggml-rpc-server` started in one arm on a loopback port, with its probe record and log
/// under `<ab_dir>/runs/<tag>.server.*`. Dropping it without [`Server::stop`] kills it too.
pub struct Server {
    child: Child,
    tag: String,
    probe_record: PathBuf,
    log: PathBuf,
}

/// What a stopped server left: whether its process mapped the arm's library (the probe's
/// record) and whether it accepted a client besides [`Server::start`]'s own probe connection.
#[derive(Debug)]
pub struct ServerEnd {
    /// The probe's record names the arm's libggml-base (path and sha256).
    pub proof_ok: bool,
    /// The log shows a client accepted besides the start's own check
    /// ([`rpc_loopback::clients_served`]).
    pub served_client: bool,
}

impl ServerEnd {
    /// Both hold: the server was the arm's and a client used it.
    pub fn ok(&self) -> bool {
        self.proof_ok && self.served_client
    }
}

impl Server {
    /// Starts `ggml-rpc-server -H 127.0.0.1 -p PORT` of `build` in `arm`, and returns once it
    /// accepts connections (30 s at most). Errors: the program is missing, it exits first, or
    /// it does not listen in time (it is killed then).
    pub fn start(
        ab_dir: &Path,
        probe: &Path,
        build: &Path,
        arm: &Arm,
        port: u16,
        tag: &str,
    ) -> Result<Server> {
        let runs = ab_dir.join("runs");
        std::fs::create_dir_all(&runs)?;
        let probe_record = runs.join(format!("{tag}.server.probe.jsonl"));
        let log = runs.join(format!("{tag}.server.log"));
        let _ = std::fs::remove_file(&probe_record);
        let mut cmd = swap::command(
            arm,
            probe,
            &paths::program(build, "ggml-rpc-server")?,
            &probe_record,
        );
        rpc_loopback::port_free(port)
            .map_err(|e| anyhow::anyhow!("{e} (`--port`, or `--rpc-port` for `ab pipeline`)"))?;
        let file = std::fs::File::create(&log)?;
        cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(file.try_clone()?)
            .stderr(file)
            .stdin(Stdio::null());
        // A server left listening after the harness died would answer the next run's
        // clients on that port.
        bundle::die_with_parent(&mut cmd);
        let child = cmd.spawn().context("starting ggml-rpc-server")?;
        let mut server = Server {
            child,
            tag: tag.to_string(),
            probe_record,
            log,
        };
        rpc_loopback::wait_listening(&mut server.child, port, Duration::from_secs(30))
            .map_err(anyhow::Error::msg)?;
        Ok(server)
    }

    /// Stops the server and checks what it left (each failure is said, with the log's path).
    pub fn stop(mut self, arm: &Arm) -> Result<ServerEnd> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let tag = &self.tag;
        let proof = proof::check(&proof::read_records(&self.probe_record)?, arm, true);
        if !proof.ok {
            say(&format!(
                "rpc: {tag}: server proof FAILED: {}",
                proof.errors.join("; ")
            ));
        }
        // One connection is the start's own check; the client's come after it.
        let served_client = std::fs::read_to_string(&self.log)
            .map(|l| rpc_loopback::clients_served(&l) > 0)
            .unwrap_or(false);
        if !served_client {
            say(&format!(
                "rpc: {tag}: the server never accepted a client (log {})",
                self.log.display()
            ));
        }
        Ok(ServerEnd {
            proof_ok: proof.ok,
            served_client,
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Stopped already when `stop` ran; otherwise (an error on the way) not left behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
