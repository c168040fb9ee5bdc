//! Compiling the C programs of `cabi-tests/sched-bench` against the pinned headers.

use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Compiles `src` into `out` with `$CC` (default `cc`): `-O2 -g -std=c11 -Wall -Wextra
/// -Wpedantic -Werror`, each of `includes` as `-I`, then `args` (output-type flags such as
/// `-shared`, before the source) and `libs` (after it: `-L`/`-l` flags). Always compiles:
/// each program takes under a second, and a check by the source's time would miss the headers
/// it includes. Errors name the source when it is missing or the compiler fails.
pub fn compile(
    src: &Path,
    out: &Path,
    includes: &[PathBuf],
    args: &[&str],
    libs: &[&std::ffi::OsStr],
) -> Result<PathBuf> {
    compile_sources(&[src], out, includes, args, libs)
}

/// [`compile`] for a program of several C files (`srcs[0]` is the one errors name).
pub fn compile_sources(
    srcs: &[&Path],
    out: &Path,
    includes: &[PathBuf],
    args: &[&str],
    libs: &[&std::ffi::OsStr],
) -> Result<PathBuf> {
    let Some(src) = srcs.first() else {
        bail!("no C source to compile into {}", out.display());
    };
    for s in srcs {
        if let Err(e) = fs::metadata(s) {
            bail!("{}: {e}", s.display());
        }
    }
    if let Some(dir) = out.parent() {
        fs::create_dir_all(dir)?;
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut cmd = Command::new(&cc);
    cmd.args([
        "-O2",
        "-g",
        "-std=c11",
        "-Wall",
        "-Wextra",
        "-Wpedantic",
        "-Werror",
    ]);
    cmd.args(args);
    for dir in includes {
        cmd.arg("-I").arg(dir);
    }
    cmd.args(srcs).arg("-o").arg(out).args(libs);
    let status = cmd.status().with_context(|| format!("running {cc}"))?;
    if !status.success() {
        bail!("compiling {} failed ({status})", src.display());
    }
    Ok(out.to_path_buf())
}
