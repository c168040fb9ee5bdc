//! The third arm: the pinned `ggml/` tree with `patches/*.patch` applied, configured standalone
//! with CMake + Ninja and built down to the `ggml-base` target only.

use anyhow::{bail, Context, Result};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A built patched arm.
#[derive(Debug, Clone)]
pub struct PatchedArm {
    /// Directory holding `libggml-base.so.0` (and nothing else of ggml's), to go first on
    /// `LD_LIBRARY_PATH`.
    pub lib_dir: PathBuf,
    /// Hex sha256 over the patch set (names and bytes, sorted by name): the cache key.
    pub patch_sha256: String,
    /// The patch files applied, sorted by name.
    pub patches: Vec<PathBuf>,
    /// True when this call reused a build made earlier for the same patch set.
    pub cached: bool,
    /// `-D` defines of `ggml-backend.cpp` in the stock build that the patched build lacks,
    /// and those the patched build has that the stock one lacks (empty, empty: same defines).
    pub define_diff: (Vec<String>, Vec<String>),
}

/// The sorted patch files under `patches_dir` and their combined sha256.
pub fn patch_set(patches_dir: &Path) -> Result<(Vec<PathBuf>, String)> {
    let mut patches: Vec<PathBuf> = fs::read_dir(patches_dir)
        .with_context(|| format!("reading {}", patches_dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "patch"))
        .collect();
    patches.sort();
    if patches.is_empty() {
        bail!("no *.patch files in {}", patches_dir.display());
    }
    let mut all = Vec::new();
    for p in &patches {
        all.extend_from_slice(p.file_name().unwrap_or_default().as_encoded_bytes());
        all.push(0);
        all.extend(fs::read(p).with_context(|| format!("reading {}", p.display()))?);
        all.push(0);
    }
    Ok((patches, filehash::sha256_hex(&all)))
}

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    eprintln!("[repro] {what}: {cmd:?}");
    let st = cmd
        .status()
        .with_context(|| format!("starting {what} ({cmd:?})"))?;
    if !st.success() {
        bail!("{what} failed ({st}): {cmd:?}");
    }
    Ok(())
}

/// The `-D` flags used to compile `ggml-backend.cpp` according to a `compile_commands.json`.
fn backend_defines(compile_commands: &Path) -> Result<BTreeSet<String>> {
    let text = fs::read_to_string(compile_commands)
        .with_context(|| format!("reading {}", compile_commands.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("parsing {}", compile_commands.display()))?;
    let entry = v
        .as_array()
        .and_then(|a| {
            a.iter().find(|e| {
                e["file"]
                    .as_str()
                    .is_some_and(|f| f.ends_with("ggml/src/ggml-backend.cpp"))
            })
        })
        .with_context(|| format!("no ggml-backend.cpp in {}", compile_commands.display()))?;
    let cmd = entry["command"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| {
            entry["arguments"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default()
        });
    Ok(cmd
        .split_whitespace()
        .filter(|t| t.starts_with("-D") || *t == "-fopenmp")
        .map(str::to_owned)
        .collect())
}

/// Builds (or reuses) the patched `libggml-base.so.0` under `<target>/patched/<sha16>/`.
///
/// `upstream` is the pinned llama.cpp tree; `stock_build` the stock CMake build directory
/// whose `compile_commands.json` gives the defines to match. Errors: a patch that does not
/// apply, a failing configure or build, or a missing output library.
pub fn ensure_patched(
    target: &Path,
    patches_dir: &Path,
    upstream: &Path,
    stock_build: &Path,
) -> Result<PatchedArm> {
    let (patches, sha) = patch_set(patches_dir)?;
    let dir = target.join("patched").join(&sha[..16]);
    let build = dir.join("build");
    let lib_dir = build.join("lib");
    let lib = lib_dir.join("libggml-base.so.0");
    let stamp = dir.join("patch-set.sha256");
    let cached = lib.exists() && fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == sha);
    if !cached {
        if dir.exists() {
            fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        fs::create_dir_all(&dir)?;
        run(
            Command::new("cp")
                .arg("-a")
                .arg(upstream.join("ggml"))
                .arg(dir.join("ggml")),
            "copy the pinned ggml tree",
        )?;
        // The sdist leaves out ggml.pc.in, which a standalone configure reads (only for the
        // pkg-config file it installs; nothing here installs). A minimal template stands in.
        let pc_in = dir.join("ggml/ggml.pc.in");
        if !pc_in.exists() {
            fs::write(
                &pc_in,
                "prefix=@CMAKE_INSTALL_PREFIX@\nName: ggml\nDescription: ggml (patched arm)\n\
                 Version: @GGML_VERSION@\nLibs: -L${prefix}/lib -lggml -lggml-base\n",
            )?;
        }
        for p in &patches {
            run(
                Command::new("patch")
                    .args(["-p1", "--forward", "--batch", "-i"])
                    .arg(p)
                    .current_dir(&dir),
                "apply patch",
            )?;
        }
        run(
            Command::new("cmake")
                .arg("-S")
                .arg(dir.join("ggml"))
                .arg("-B")
                .arg(&build)
                .args([
                    "-G",
                    "Ninja",
                    "-DCMAKE_BUILD_TYPE=Release",
                    "-DBUILD_SHARED_LIBS=ON",
                    "-DGGML_NATIVE=ON",
                    "-DGGML_SCHED_MAX_COPIES=4",
                    "-DGGML_OPENMP=ON",
                    "-DGGML_BUILD_TESTS=OFF",
                    "-DGGML_BUILD_EXAMPLES=OFF",
                    "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
                ])
                .arg(format!(
                    "-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={}",
                    lib_dir.display()
                )),
            "configure patched ggml",
        )?;
        run(
            Command::new("cmake")
                .arg("--build")
                .arg(&build)
                .args(["--target", "ggml-base"]),
            "build patched ggml-base",
        )?;
        if !lib.exists() {
            bail!("the patched build made no {}", lib.display());
        }
        fs::write(&stamp, &sha)?;
    }
    let stock = backend_defines(&stock_build.join("compile_commands.json"))?;
    let ours = backend_defines(&build.join("compile_commands.json"))?;
    let define_diff = (
        stock.difference(&ours).cloned().collect(),
        ours.difference(&stock).cloned().collect(),
    );
    Ok(PatchedArm {
        lib_dir,
        patch_sha256: sha,
        patches,
        cached,
        define_diff,
    })
}
