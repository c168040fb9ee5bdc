//! The devices a run splits the model over (`--devices`), and the `ggml-rpc-server` an arm
//! starts when they name `RPC0`: one GPU paired with itself over loopback, so that llama.cpp
//! turns pipeline parallelism on (several scheduler copies, events between the devices) on a
//! machine with a single card.

use super::run::{prove, Ctx};
use crate::arms::Arm;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The device list of `--devices` (`CUDA0,CUDA1`, `RPC0,CUDA0`): at least two distinct
/// names, none empty, `RPC0` the only RPC device (one server per arm). Errors name what is
/// wrong.
pub fn parse_devices(list: &str) -> Result<Vec<String>> {
    rpc_loopback::parse_devices(list, 2).map_err(|e| anyhow::anyhow!("--devices {e}"))
}

/// The arguments that split a tool's model over `devices`, every layer offloaded as the tool
/// is told elsewhere: `--rpc 127.0.0.1:PORT` first when `RPC0` is among them (llama.cpp
/// resolves each `-dev` name as it reads it, and RPC0 exists once `--rpc` registered it), then
/// `-dev` and an equal tensor split `-ts 1,1,...`. `sep` joins the devices and the split:
/// `/` for llama-bench (whose `,` separates test configurations), `,` for the others.
pub fn split_args(devices: &[String], rpc_port: u16, sep: &str) -> Vec<String> {
    let mut args = Vec::new();
    if devices.iter().any(|d| d == "RPC0") {
        args.extend(["--rpc".into(), format!("127.0.0.1:{rpc_port}")]);
    }
    args.extend([
        "-dev".into(),
        devices.join(sep),
        "-ts".into(),
        vec!["1"; devices.len()].join(sep),
    ]);
    args
}

/// A `ggml-rpc-server` of the build, run in one arm on 127.0.0.1, with the loader's log and
/// `libab_probe.so`'s record kept for its proof. Dropping it without [`Server::stop`] kills
/// it.
pub struct Server {
    child: Child,
    log: PathBuf,
    ab_out: PathBuf,
}

impl Server {
    /// Starts the server in `arm` on `ctx.rpc_port` and returns once it accepts connections
    /// (30 s at most). Errors: the program is missing, it exits first, or it never listens.
    pub fn start(ctx: &Ctx, arm: &Arm) -> Result<Server> {
        let exe = ctx.bin.join("ggml-rpc-server");
        if !exe.is_file() {
            bail!(
                "{} is missing: build the ggml-rpc-server target to split over RPC0",
                exe.display()
            );
        }
        let log = ctx.out.join("rpc-server.log");
        let ab_out = ctx.out.join("rpc-server-ab-probe.jsonl");
        let _ = std::fs::remove_file(&ab_out);
        // Both streams into the log: the loader's lines come on stderr, the server's
        // accepted connections (rpc_loopback::ACCEPTED_LINE) on stdout.
        rpc_loopback::port_free(ctx.rpc_port).map_err(anyhow::Error::msg)?;
        let file = std::fs::File::create(&log).with_context(|| log.display().to_string())?;
        let mut cmd = Command::new(&exe);
        cmd.args(["-H", "127.0.0.1", "-p", &ctx.rpc_port.to_string()])
            .env("LD_LIBRARY_PATH", arm.ld_library_path(&ctx.bin))
            .env("LD_DEBUG", "libs")
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file);
        // Only the probe is preloaded, whatever the caller's environment holds.
        match &ctx.ab_probe {
            Some(p) => cmd.env("LD_PRELOAD", p).env("GGML_AB_PROBE_OUT", &ab_out),
            None => cmd.env_remove("LD_PRELOAD"),
        };
        bundle::die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        let mut server = Server { child, log, ab_out };
        if let Err(e) =
            rpc_loopback::wait_listening(&mut server.child, ctx.rpc_port, Duration::from_secs(30))
        {
            bail!("arm {}: {e}; log {}", arm.key, server.log.display());
        }
        Ok(server)
    }

    /// Stops the server and proves it mapped `arm`'s library (as every tool process is
    /// proven), and that it served a client besides the start's own connection. Errors: the
    /// proof failed (the run's figures would then come from another library), or no client
    /// came.
    pub fn stop(mut self, ctx: &Ctx, arm: &Arm) -> Result<()> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        prove(ctx, arm, "ggml-rpc-server", &log, &self.ab_out)?;
        if rpc_loopback::clients_served(&log) == 0 {
            bail!(
                "ggml-rpc-server (arm {}): no tool connected besides the start's own check; log {}",
                arm.key,
                self.log.display()
            );
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_list_is_two_or_more_distinct_names() {
        assert_eq!(parse_devices("CUDA0, CUDA1").unwrap(), ["CUDA0", "CUDA1"]);
        assert_eq!(parse_devices("RPC0,CUDA0").unwrap(), ["RPC0", "CUDA0"]);
        for bad in ["CUDA0", "CUDA0,CUDA0", "CUDA0,,CUDA1", "RPC1,CUDA0"] {
            let e = parse_devices(bad).unwrap_err().to_string();
            assert!(e.contains("--devices"), "{bad}: {e}");
        }
    }

    #[test]
    fn rpc_comes_first_and_llama_bench_takes_slashes() {
        let d = parse_devices("RPC0,CUDA0").unwrap();
        assert_eq!(
            split_args(&d, 50754, "/"),
            [
                "--rpc",
                "127.0.0.1:50754",
                "-dev",
                "RPC0/CUDA0",
                "-ts",
                "1/1"
            ]
        );
        let d = parse_devices("CUDA0,CUDA1,CUDA2").unwrap();
        assert_eq!(
            split_args(&d, 1, ","),
            ["-dev", "CUDA0,CUDA1,CUDA2", "-ts", "1,1,1"]
        );
    }
}
