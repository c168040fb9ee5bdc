//! `ab build-ours`: builds the project's libraries with cargo and installs them where the
//! default `ours` arm looks:
//! - `target/ours/lib/libggml-base.so.0` (copy of `target/release/libggml_base.so`), with the
//!   links `libggml-base.so` and `libggml-base.so.0.25.3`;
//! - `target/ours/lib/libggml-hrx.so` when the workspace has the crate `hrx`.

use crate::paths::Paths;
use crate::proc::{self, RunOpts, Stream, Watcher};
use crate::{fmt_secs, say};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The version suffix of the stock library file name (`libggml-base.so.0.25.3`).
pub const GGML_VERSION: &str = "0.25.3";

/// What `build-ours` installed.
pub struct Installed {
    /// `target/ours/lib/libggml-base.so.0`.
    pub base: PathBuf,
}

/// The workspace's package names, from `cargo metadata --no-deps`.
fn workspace_packages(paths: &Paths) -> Result<Vec<String>> {
    Ok(metadata(paths)?.into_iter().map(|(name, _)| name).collect())
}

/// The workspace's binaries as (package, binary name), from `cargo metadata --no-deps`.
pub fn workspace_binaries(paths: &Paths) -> Result<Vec<(String, String)>> {
    Ok(metadata(paths)?
        .into_iter()
        .flat_map(|(p, bins)| bins.into_iter().map(move |b| (p.clone(), b)))
        .collect())
}

/// (package name, its binary target names) for each workspace member.
fn metadata(paths: &Paths) -> Result<Vec<(String, Vec<String>)>> {
    let out = Command::new("cargo")
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(&paths.root)
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let mut res = Vec::new();
    for p in v["packages"].as_array().into_iter().flatten() {
        let Some(name) = p["name"].as_str() else {
            continue;
        };
        let bins = p["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| {
                t["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|x| x == "bin"))
            })
            .filter_map(|t| t["name"].as_str().map(String::from))
            .collect();
        res.push((name.to_string(), bins));
    }
    Ok(res)
}

/// Progress of a cargo build: how many crates compiled, which one last.
#[derive(Default)]
struct CargoWatch {
    compiled: u32,
    last: String,
}

impl Watcher for CargoWatch {
    fn line(&mut self, _s: Stream, line: &str) {
        if let Some(rest) = line.trim_start().strip_prefix("Compiling ") {
            self.compiled += 1;
            self.last = rest.split(' ').next().unwrap_or(rest).to_string();
        }
    }
    fn status(&self) -> Option<String> {
        Some(if self.compiled == 0 {
            "cargo is starting".into()
        } else {
            format!("{} crates compiled, now {}", self.compiled, self.last)
        })
    }
}

/// Builds and installs our libraries. Fails with the compiler's last lines when the build
/// fails (the root crate may be work in progress: then name files with `--a`/`--b`).
pub fn build(paths: &Paths) -> Result<Installed> {
    if let Some(b) = &paths.bundle {
        // A bundle carries our libraries as they were built; there is no cargo to build with.
        let base = paths.ours_lib().join("libggml-base.so.0");
        if !base.is_file() {
            bail!("the bundle {} has no {}", b.display(), base.display());
        }
        return Ok(Installed { base });
    }
    let packages = workspace_packages(paths)?;
    let has_hrx = packages.iter().any(|p| p == "hrx");
    let mut cmd = Command::new("cargo");
    cmd.args(["build", "--release", "-p", "ggml-base"])
        .current_dir(&paths.root);
    if has_hrx {
        cmd.args(["-p", "hrx"]);
    }
    say(&format!(
        "build-ours: cargo build --release -p ggml-base{}",
        if has_hrx {
            " -p hrx"
        } else {
            " (no crate hrx yet)"
        }
    ));
    let f = proc::run(
        &mut cmd,
        &RunOpts {
            label: "build-ours cargo",
            timeout: Duration::from_secs(3600),
            echo: false,
            progress_every: 20,
        },
        &mut CargoWatch::default(),
    )?;
    if !f.success() {
        bail!(
            "our libggml-base does not build yet ({}); cargo said:\n{}\n\
             name the files to compare instead: ./ab ab --a FILE --b FILE",
            f.ended(),
            crate::stock::tail(&f.stderr, 30)
        );
    }
    let release = paths.target.join("release");
    let lib = paths.ours_lib();
    std::fs::create_dir_all(&lib).with_context(|| format!("creating {}", lib.display()))?;
    let base_src = release.join("libggml_base.so");
    if !base_src.is_file() {
        bail!("cargo succeeded but {} is missing", base_src.display());
    }
    let base = lib.join("libggml-base.so.0");
    install(&base_src, &base)?;
    for link in [
        "libggml-base.so".to_string(),
        format!("libggml-base.so.{GGML_VERSION}"),
    ] {
        link_atomically("libggml-base.so.0", &lib.join(link))?;
    }
    check_soname(&base);
    // Every build is kept by content, so an arm can still be named by its sha256 later.
    lib_store::keep(&paths.ab_dir(), &base, &pins::sha256_file(&base)?)?;
    let hrx = if has_hrx {
        let src = release.join("libggml_hrx.so");
        if !src.is_file() {
            bail!("cargo built hrx but {} is missing", src.display());
        }
        let dst = lib.join("libggml-hrx.so");
        install(&src, &dst)?;
        Some(dst)
    } else {
        None
    };
    say(&format!(
        "build-ours: installed {} (sha256 {}){} in {}",
        base.display(),
        pins::sha256_file(&base)?,
        hrx.as_ref()
            .map(|h| format!(" and {}", h.display()))
            .unwrap_or_default(),
        fmt_secs(f.seconds)
    ));
    Ok(Installed { base })
}

/// A name beside `dst` that no other process installing at the same time uses: two
/// `build-ours` in one tree (a test's bundle build beside `gpu/pack.sh`, say) each copy to
/// their own file and rename it over `dst`, so either finishes with a whole file in place
/// (the same bytes: both copy the one cargo output). A shared name let one rename the
/// other's half-written copy, or find it gone ("installing ...: No such file or directory").
fn private_tmp(dst: &Path) -> std::path::PathBuf {
    // The process id tells processes apart, the counter threads of one process.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut name = dst.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".part.{}.{n}", std::process::id()));
    dst.with_file_name(name)
}

/// Copies `src` to `dst` through a private temporary file and a rename, so that a reader
/// (or a second install) never sees a partial file.
fn install(src: &Path, dst: &Path) -> Result<()> {
    let tmp = private_tmp(dst);
    // The name is this call's alone, so nothing later would clear a partial copy left by a
    // failure (a full disk): it is removed on every error.
    let copied = std::fs::copy(src, &tmp)
        .with_context(|| format!("copying {}", src.display()))
        .and_then(|_| {
            std::fs::rename(&tmp, dst).with_context(|| format!("installing {}", dst.display()))
        });
    if copied.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    copied
}

/// Makes `link` a symlink to `target`, replacing what is there by a rename, so that a
/// concurrent install never finds the name missing or fails on one that already exists.
fn link_atomically(target: &str, link: &Path) -> Result<()> {
    let tmp = private_tmp(link);
    let _ = std::fs::remove_file(&tmp);
    let linked = std::os::unix::fs::symlink(target, &tmp)
        .and_then(|()| std::fs::rename(&tmp, link))
        .with_context(|| format!("linking {}", link.display()));
    if linked.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    linked
}

/// Warns when the library's SONAME is not `libggml-base.so.0` (stock programs would still
/// load it through the arm's file name, but a mismatch usually means a build mistake).
fn check_soname(lib: &Path) {
    let Ok(out) = Command::new("readelf").arg("-d").arg(lib).output() else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    if !text.contains("[libggml-base.so.0]") {
        say(&format!(
            "build-ours: warning: {} has no SONAME libggml-base.so.0",
            lib.display()
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An install that fails after its copy (here the rename: the destination is a folder)
    /// returns the error and leaves no temporary file: its name is private, so nothing
    /// would ever clear it.
    #[test]
    fn a_failed_install_leaves_no_temporary_file() {
        let dir = std::env::temp_dir().join(format!("ab-install-fail-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("libggml-base.so.0/inside")).unwrap();
        let src = dir.join("built.so");
        std::fs::write(&src, b"bytes").unwrap();
        let e = install(&src, &dir.join("libggml-base.so.0")).unwrap_err();
        assert!(format!("{e:#}").contains("installing"), "{e:#}");
        let left = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".part."))
            .count();
        assert_eq!(left, 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Installs of one file by many threads at once (as two `build-ours` in one tree race)
    /// each succeed, and what is left is the whole file and a working link, with no
    /// temporary file beside them. With one shared temporary name this failed with
    /// "installing ...: No such file or directory" or left a truncated copy.
    #[test]
    fn concurrent_installs_each_succeed_and_leave_the_whole_file() {
        let dir = std::env::temp_dir().join(format!("ab-install-race-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("built.so");
        let bytes: Vec<u8> = (0..4 << 20)
            .map(|i: u32| (i * 7 + i / 4096) as u8)
            .collect();
        std::fs::write(&src, &bytes).unwrap();
        let dst = dir.join("libggml-base.so.0");
        let link = dir.join("libggml-base.so");
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..10 {
                        install(&src, &dst).unwrap();
                        link_atomically("libggml-base.so.0", &link).unwrap();
                    }
                });
            }
        });
        assert_eq!(std::fs::read(&dst).unwrap(), bytes);
        assert_eq!(std::fs::read(&link).unwrap(), bytes);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["built.so", "libggml-base.so", "libggml-base.so.0"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
