//! `ab runpath-trap`: shows that the classic way an A/B comparison lies is caught.
//!
//! `cabi-tests/runpath-trap/main.c` is built twice against a copy of the stock
//! `libggml-base` in a folder A: once with `DT_RPATH` = A (`--disable-new-dtags`, which the
//! loader searches *before* `LD_LIBRARY_PATH`) and once with `DT_RUNPATH` = A (searched after).
//! Both are run through the swap naming another file B (the stock library with one byte
//! appended, so its sha256 differs). Expected:
//! - the `DT_RPATH` program runs fine on A (the silent trap), and the harness reports the run
//!   as FAILED, naming A's path and hash and B's;
//! - the `DT_RUNPATH` program maps B, and the proof holds (the control).

use crate::paths::{self, Paths};
use crate::proc;
use crate::say;
use crate::swap::{self, Arm, Job};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn compile(
    paths: &Paths,
    include: &Path,
    lib_dir: &Path,
    out: &Path,
    new_dtags: bool,
) -> Result<()> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let src = paths.root.join("cabi-tests/runpath-trap/main.c");
    let mut cmd = Command::new(&cc);
    cmd.args([
        "-std=c11",
        "-O1",
        "-Wall",
        "-Wextra",
        "-Wpedantic",
        "-Werror",
    ])
    .arg("-I")
    .arg(include)
    .arg(&src)
    .arg("-o")
    .arg(out)
    .arg(format!("-L{}", lib_dir.display()))
    .arg("-lggml-base")
    .arg(format!(
        "-Wl,{},-rpath,{}",
        if new_dtags {
            "--enable-new-dtags"
        } else {
            "--disable-new-dtags"
        },
        lib_dir.display()
    ));
    let o = cmd.output().with_context(|| format!("running {cc}"))?;
    if !o.status.success() {
        bail!(
            "compiling {} failed:\n{}",
            src.display(),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    Ok(())
}

/// The `(RPATH)` or `(RUNPATH)` entry of a binary's dynamic section, via `readelf -d`.
fn dynamic_path_tag(bin: &Path) -> Result<String> {
    let o = Command::new("readelf")
        .arg("-d")
        .arg(bin)
        .output()
        .context("running readelf (package binutils)")?;
    let text = String::from_utf8_lossy(&o.stdout);
    Ok(text
        .lines()
        .find(|l| l.contains("(RPATH)") || l.contains("(RUNPATH)"))
        .map(|l| l.trim().to_string())
        .unwrap_or_default())
}

struct Checks {
    passed: u32,
    failed: u32,
}

impl Checks {
    fn check(&mut self, ok: bool, what: &str) {
        if ok {
            self.passed += 1;
            say(&format!("  PASS  {what}"));
        } else {
            self.failed += 1;
            say(&format!("  FAIL  {what}"));
        }
    }
}

/// Runs the trap test; returns 0 when every check holds, else 1.
pub fn run(paths: &Paths, llama_build: Option<PathBuf>) -> Result<u8> {
    let build = crate::default_build(paths, llama_build)?;
    let probe = crate::ensure_probe(paths)?;
    let stock_lib = paths::bin_dir(&build)
        .join("libggml-base.so.0")
        .canonicalize()
        .context("the llama build has no libggml-base.so.0")?;
    let pins = pins::Pins::load(&paths.root)?;
    let include = pins.upstream_dir(&paths.target).join("ggml/include");
    if !include.join("ggml.h").is_file() {
        bail!(
            "{} has no ggml.h; run `./ab fetch` first",
            include.display()
        );
    }
    let dir = paths.ab_dir().join("trap");
    let dir_a = dir.join("rpath-dir");
    let other_dir = dir.join("other");
    for d in [&dir_a, &other_dir] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    // Folder A: the stock bytes, under the SONAME and the link-time name.
    let lib_a = dir_a.join("libggml-base.so.0");
    std::fs::copy(&stock_lib, &lib_a).with_context(|| format!("copying to {}", lib_a.display()))?;
    let link = dir_a.join("libggml-base.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink("libggml-base.so.0", &link)?;
    // File B: the stock bytes plus one, so its sha256 differs but it still loads.
    let other = other_dir.join("libggml-base.so.0");
    let mut bytes = std::fs::read(&stock_lib)?;
    bytes.push(0);
    std::fs::write(&other, &bytes)?;

    let rpath_bin = dir.join("trap-rpath");
    let runpath_bin = dir.join("trap-runpath");
    compile(paths, &include, &dir_a, &rpath_bin, false)?;
    compile(paths, &include, &dir_a, &runpath_bin, true)?;
    let tag_rpath = dynamic_path_tag(&rpath_bin)?;
    let tag_runpath = dynamic_path_tag(&runpath_bin)?;

    let arm = Arm::prepare(&paths.ab_dir(), "trap", &other, None)?;
    let sha_a = pins::sha256_file(&lib_a)?;
    say(&format!(
        "runpath-trap: folder A {} (sha256 {}); intended file {} (sha256 {})",
        lib_a.display(),
        sha_a,
        arm.resolved.display(),
        arm.sha256
    ));
    let mut c = Checks {
        passed: 0,
        failed: 0,
    };
    c.check(
        tag_rpath.contains("(RPATH)") && tag_rpath.contains(&*dir_a.to_string_lossy()),
        &format!("trap-rpath carries DT_RPATH to folder A: {tag_rpath}"),
    );
    c.check(
        tag_runpath.contains("(RUNPATH)"),
        &format!("trap-runpath carries DT_RUNPATH to folder A: {tag_runpath}"),
    );
    c.check(sha_a != arm.sha256, "the two files differ in sha256");

    let job = |name: &'static str, bin: &Path| Job {
        name,
        program: bin.to_path_buf(),
        args: Vec::new(),
        timeout: Duration::from_secs(120),
        echo: false,
        expect_base: true,
        dir: None,
    };
    let trapped = swap::run(
        &paths.ab_dir(),
        &probe,
        &arm,
        &job("trap-rpath", &rpath_bin),
        &mut proc::Quiet,
    )?;
    say(&format!(
        "trap-rpath: {}; stdout {:?}",
        trapped.finished.ended(),
        String::from_utf8_lossy(&trapped.finished.stdout).trim()
    ));
    say(&format!(
        "trap-rpath: {}",
        crate::proof::summary(&trapped.proof)
    ));
    c.check(
        trapped.finished.success(),
        "trap-rpath itself runs fine (the trap is silent without the proof)",
    );
    c.check(
        !trapped.proof.ok,
        "the harness reports the trap-rpath run as FAILED",
    );
    let msg = trapped.proof.errors.join("\n");
    let a_path = lib_a.display().to_string();
    let b_path = arm.lib_copy.display().to_string();
    c.check(
        msg.contains(&a_path) && msg.contains(&sha_a),
        "the failure names the path and sha256 really mapped (folder A)",
    );
    c.check(
        msg.contains(&b_path) && msg.contains(&arm.sha256),
        "the failure names the intended path and sha256",
    );

    let control = swap::run(
        &paths.ab_dir(),
        &probe,
        &arm,
        &job("trap-runpath", &runpath_bin),
        &mut proc::Quiet,
    )?;
    say(&format!(
        "trap-runpath: {}; {}",
        control.finished.ended(),
        crate::proof::summary(&control.proof)
    ));
    c.check(
        control.finished.success() && control.proof.ok,
        "control: with DT_RUNPATH the swap wins and the proof holds",
    );
    let mapped_b = control
        .proof
        .libraries
        .iter()
        .any(|l| l.name == "libggml-base" && l.sha256.as_deref() == Some(arm.sha256.as_str()));
    c.check(
        mapped_b,
        "control: the mapped libggml-base hashes like the intended file",
    );
    say(&format!(
        "runpath-trap: {} checks passed, {} failed",
        c.passed, c.failed
    ));
    Ok(if c.failed == 0 { 0 } else { 1 })
}
