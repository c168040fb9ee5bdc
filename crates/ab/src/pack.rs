//! `ab bundle`: one folder (and a `.tar.gz` of it) with everything the harness needs on a
//! machine without cargo: the `ab`, `bench` and `view` binaries, our libraries and the probe, the C
//! sources the tools compile at run time, and `pins.toml`. Run from there, `ab` finds its
//! files through the marker (see the `bundle` crate) and builds nothing; the llama.cpp build
//! and the model are named on the command line (`--llama-build`, `--model`).

use crate::paths::Paths;
use crate::say;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One file of the bundle, as its manifest lists it.
#[derive(Serialize)]
struct Entry {
    /// Path inside the bundle.
    path: String,
    /// Size, bytes.
    bytes: u64,
    sha256: String,
}

/// The manifest, `ab-bundle.json`: also the marker that makes the folder a bundle.
#[derive(Serialize)]
struct Manifest {
    /// `git describe --always --dirty` of the workspace it was made from.
    commit: String,
    /// UTC, `YYYY-MM-DDTHH:MM:SSZ`.
    created: String,
    files: Vec<Entry>,
}

/// Builds what the bundle holds and writes it to `out` (default `target/ab-bundle`), then
/// `<out>.tar.gz`. Returns the folder.
pub fn make(paths: &Paths, out: Option<PathBuf>) -> Result<PathBuf> {
    if paths.bundle.is_some() {
        bail!("ab bundle runs in a workspace (it builds with cargo), not from a bundle");
    }
    let out = out.unwrap_or_else(|| paths.target.join("ab-bundle"));
    say("bundle: cargo build --release -p ab -p bench -p view -p ab-probe");
    let st = Command::new("cargo")
        .args([
            "build",
            "--release",
            "-q",
            "-p",
            "ab",
            "-p",
            "bench",
            "-p",
            "view",
            "-p",
            "ab-probe",
        ])
        .current_dir(&paths.root)
        .status()
        .context("running cargo")?;
    if !st.success() {
        bail!("cargo build of the harness failed");
    }
    let ours = crate::ours::build(paths)?;
    let release = paths.target.join("release");

    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("removing {}", out.display()))?;
    }
    let lib = bundle::lib_dir(&out);
    std::fs::create_dir_all(&lib).with_context(|| format!("creating {}", lib.display()))?;
    // The binaries lose their debug sections (about 4x smaller); the libraries are copied as
    // built, so an arm keeps the sha256 it has in the workspace.
    strip(&release.join("ab"), &out.join("ab"))?;
    strip(&release.join("bench"), &out.join("bench"))?;
    strip(&release.join("view"), &out.join("view"))?;
    strip(&release.join("libab_probe.so"), &lib.join("libab_probe.so"))?;
    copy(&ours.base, &lib.join("libggml-base.so.0"))?;
    let hrx = paths.ours_lib().join("libggml-hrx.so");
    if hrx.is_file() {
        copy(&hrx, &lib.join("libggml-hrx.so"))?;
    }
    copy(&paths.root.join("pins.toml"), &out.join("pins.toml"))?;
    copy_tree(&paths.root.join("cabi-tests"), &out.join("cabi-tests"))?;

    let mut files = Vec::new();
    list(&out, &out, &mut files)?;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let manifest = Manifest {
        commit: git_describe(&paths.root),
        created: utc_now(),
        files,
    };
    let total: u64 = manifest.files.iter().map(|f| f.bytes).sum();
    std::fs::write(
        out.join(bundle::MARKER),
        serde_json::to_string_pretty(&manifest)? + "\n",
    )?;
    let tar = out.with_extension("tar.gz");
    let (parent, name) = (
        out.parent().context("the bundle folder has no parent")?,
        out.file_name().context("the bundle folder has no name")?,
    );
    let st = Command::new("tar")
        .arg("-czf")
        .arg(&tar)
        .arg("-C")
        .arg(parent)
        .arg(name)
        .status()
        .context("running tar")?;
    if !st.success() {
        bail!("tar failed writing {}", tar.display());
    }
    say(&format!(
        "bundle: {} ({} files, {:.1} MiB; commit {}) and {} ({:.1} MiB)",
        out.display(),
        manifest.files.len() + 1,
        total as f64 / (1 << 20) as f64,
        manifest.commit,
        tar.display(),
        std::fs::metadata(&tar)?.len() as f64 / (1 << 20) as f64
    ));
    say(&format!(
        "bundle: on the other machine: tar xzf {} && {}/ab ab --llama-build DIR --model FILE.gguf",
        tar.file_name().unwrap_or_default().to_string_lossy(),
        name.to_string_lossy()
    ));
    Ok(out)
}

fn strip(src: &Path, dst: &Path) -> Result<()> {
    let st = Command::new("strip")
        .arg("--strip-debug")
        .arg("-o")
        .arg(dst)
        .arg(src)
        .status()
        .context("running strip")?;
    if !st.success() {
        bail!("strip {} failed", src.display());
    }
    Ok(())
}

fn copy(src: &Path, dst: &Path) -> Result<()> {
    std::fs::copy(src, dst)
        .with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
    Ok(())
}

fn copy_tree(src: &Path, dst: &Path) -> Result<()> {
    std::fs::create_dir_all(dst)?;
    for e in std::fs::read_dir(src).with_context(|| format!("reading {}", src.display()))? {
        let e = e?;
        let to = dst.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_tree(&e.path(), &to)?;
        } else {
            copy(&e.path(), &to)?;
        }
    }
    Ok(())
}

fn list(root: &Path, dir: &Path, out: &mut Vec<Entry>) -> Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let p = e.path();
        if e.file_type()?.is_dir() {
            list(root, &p, out)?;
        } else {
            out.push(Entry {
                path: p.strip_prefix(root)?.display().to_string(),
                bytes: e.metadata()?.len(),
                sha256: pins::sha256_file(&p)?,
            });
        }
    }
    Ok(())
}

fn git_describe(root: &Path) -> String {
    Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .current_dir(root)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

fn utc_now() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}
