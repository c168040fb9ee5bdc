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
    // The default folder is the harness's own: replaced whatever it holds (a bundle whose
    // writing stopped half way has no manifest yet).
    let out = match out {
        Some(o) => writable_out(o)?,
        None => paths.target.join("ab-bundle"),
    };
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
    let (parent, name) = (
        out.parent().context("the bundle folder has no parent")?,
        out.file_name().context("the bundle folder has no name")?,
    );
    let tar = archive_path(&out).context("the bundle folder has no name")?;
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

/// The archive written beside the bundle folder `out`: its whole name and `.tar.gz` (not
/// `with_extension`, which would turn `ab-0.25` into `ab-0.tar.gz`, the archive of `ab-0.26`
/// too). None when `out` has no name (`/`, or ending in `..`).
fn archive_path(out: &Path) -> Option<PathBuf> {
    let mut name = out.file_name()?.to_os_string();
    name.push(".tar.gz");
    Some(out.with_file_name(name))
}

/// The folder `ab bundle --out` names, checked before anything is built: it is removed whole
/// first, so it must not exist yet, be an empty folder, or hold a bundle (its manifest,
/// [`bundle::MARKER`]), which is replaced. Anything else is refused: with `--out` taken from
/// the caller's folder, `--out .` or `--out ~` would otherwise delete the user's own files.
/// An existing folder is returned as the system resolves it (`.` and `..` too), so that the
/// folder removed, the one written and the archive's name beside it are the same.
fn writable_out(out: PathBuf) -> Result<PathBuf> {
    let meta = match std::fs::symlink_metadata(&out) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).with_context(|| format!("reading {}", out.display())),
        Ok(m) => m,
    };
    if !meta.is_dir() {
        bail!(
            "the bundle folder {} exists and is not a folder (a file or a link): it would be \
             replaced; name a new folder with --out",
            out.display()
        );
    }
    let empty = std::fs::read_dir(&out)
        .with_context(|| format!("reading {}", out.display()))?
        .next()
        .is_none();
    if !empty && !out.join(bundle::MARKER).is_file() {
        bail!(
            "the bundle folder {} exists and holds no bundle (no {}): it would be removed \
             whole; name a new or empty folder with --out, or remove it yourself",
            out.display(),
            bundle::MARKER
        );
    }
    out.canonicalize()
        .with_context(|| format!("resolving {}", out.display()))
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

#[cfg(test)]
mod tests {
    use super::{archive_path, writable_out};
    use std::path::Path;

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../target/tmp/pack-out")
            .join(name);
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d.canonicalize().unwrap()
    }

    /// A folder of the user's own files is never removed: `--out .` from their folder, or any
    /// folder that is not a bundle, is refused and left as it was.
    #[test]
    fn a_folder_that_holds_no_bundle_is_refused() {
        let d = scratch("theirs");
        std::fs::write(d.join("notes.txt"), b"precious").unwrap();
        for out in [d.clone(), d.join("."), d.join("sub/..")] {
            std::fs::create_dir_all(d.join("sub")).unwrap();
            let e = writable_out(out.clone()).unwrap_err().to_string();
            assert!(e.contains("holds no bundle"), "{}: {e}", out.display());
        }
        let file = d.join("notes.txt");
        let e = writable_out(file.clone()).unwrap_err().to_string();
        assert!(e.contains("is not a folder"), "{e}");
        assert_eq!(std::fs::read(&file).unwrap(), b"precious");
    }

    /// A new folder, an empty one and an earlier bundle may be written; `.` and `..` are
    /// resolved, so the folder written is the one removed.
    #[test]
    fn a_new_or_empty_folder_or_a_bundle_is_written() {
        let d = scratch("ok");
        let new = d.join("new");
        assert_eq!(writable_out(new.clone()).unwrap(), new);
        std::fs::create_dir(d.join("empty")).unwrap();
        assert_eq!(writable_out(d.join("empty")).unwrap(), d.join("empty"));
        let old = d.join("old");
        std::fs::create_dir_all(old.join("lib")).unwrap();
        std::fs::write(old.join(bundle::MARKER), b"{}").unwrap();
        assert_eq!(writable_out(old.join(".")).unwrap(), old);
        assert_eq!(writable_out(old.join("lib/..")).unwrap(), old);
    }

    /// The archive is the folder's whole name and `.tar.gz`: a name with a dot keeps it, so
    /// `ab-0.25` and `ab-0.26` get archives of their own.
    #[test]
    fn the_archive_is_the_folder_name_and_tar_gz() {
        for (out, tar) in [
            ("x/ab-0.25", "x/ab-0.25.tar.gz"),
            ("x/ab-0.26", "x/ab-0.26.tar.gz"),
            ("x/plain", "x/plain.tar.gz"),
            ("/t/ab-bundle", "/t/ab-bundle.tar.gz"),
            ("x/b.tar", "x/b.tar.tar.gz"),
            ("x/ab-0.25/", "x/ab-0.25.tar.gz"),
            ("ab-0.25", "ab-0.25.tar.gz"),
        ] {
            assert_eq!(
                archive_path(Path::new(out)).as_deref(),
                Some(Path::new(tar)),
                "{out}"
            );
        }
        assert_eq!(archive_path(Path::new("/")), None);
        assert_eq!(archive_path(Path::new("x/..")), None);
    }
}
