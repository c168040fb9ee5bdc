//! Where things live: the workspace root and the fixed folders under `target/`.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// The harness's fixed locations, all absolute.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The workspace root (holds `pins.toml`).
    pub root: PathBuf,
    /// `<root>/target`: cache of pins, the stock build, our build, the harness's output.
    pub target: PathBuf,
    /// Set when the harness runs from a bundle (`ab bundle`): then `root` is the bundle's
    /// folder, our libraries and the probe come from its `lib/`, and nothing is built.
    pub bundle: Option<PathBuf>,
}

impl Paths {
    /// Finds the harness's files: the bundle this binary runs from (see the `bundle` crate),
    /// else the workspace root, the nearest folder above the current directory holding both
    /// `pins.toml` and `Cargo.toml`, else the folder this binary was compiled from.
    pub fn discover() -> Result<Paths> {
        if let Some(root) = bundle::root().map_err(anyhow::Error::msg)? {
            bundle::verify(&root).map_err(anyhow::Error::msg)?;
            return Ok(Paths {
                target: root.join("target"),
                bundle: Some(root.clone()),
                root,
            });
        }
        let cwd = std::env::current_dir().context("reading the current directory")?;
        let compiled = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let root = cwd
            .ancestors()
            .find(|d| d.join("pins.toml").is_file() && d.join("Cargo.toml").is_file())
            .map(Path::to_path_buf)
            .or_else(|| compiled.join("pins.toml").is_file().then_some(compiled));
        let Some(root) = root else {
            bail!(
                "cannot find the workspace (a folder with pins.toml) above {}",
                cwd.display()
            );
        };
        let root = root
            .canonicalize()
            .context("resolving the workspace root")?;
        Ok(Paths {
            target: root.join("target"),
            root,
            bundle: None,
        })
    }

    /// The pinned stock llama.cpp build folder, `target/llama-stock`.
    pub fn stock_build(&self) -> PathBuf {
        self.target.join("llama-stock")
    }

    /// Where `build-ours` installs our libraries, `target/ours/lib` (a bundle's `lib/`).
    pub fn ours_lib(&self) -> PathBuf {
        match &self.bundle {
            Some(b) => bundle::lib_dir(b),
            None => self.target.join("ours").join("lib"),
        }
    }

    /// The harness's own output folder, `target/ab`.
    pub fn ab_dir(&self) -> PathBuf {
        self.target.join("ab")
    }

    /// The probe library built by `cargo build --release -p ab-probe` (a bundle's
    /// `lib/libab_probe.so`).
    pub fn probe(&self) -> PathBuf {
        match &self.bundle {
            Some(b) => bundle::lib_dir(b).join("libab_probe.so"),
            None => self.target.join("release").join("libab_probe.so"),
        }
    }
}

/// The folder holding a llama.cpp build's programs: `DIR/bin` when it exists, else `DIR`.
pub fn bin_dir(llama_build: &Path) -> PathBuf {
    let bin = llama_build.join("bin");
    if bin.is_dir() {
        bin
    } else {
        llama_build.to_path_buf()
    }
}

/// Resolves a program name: a path (contains `/`) is the user's, a relative one taken from
/// the folder they called the harness from ([`bundle::caller_path`]); a bare name is looked up
/// in the build's `bin/`. Fails naming the place looked at.
pub fn program(llama_build: &Path, name: &str) -> Result<PathBuf> {
    let p = if name.contains('/') {
        bundle::caller_path(Path::new(name))
    } else {
        bin_dir(llama_build).join(name)
    };
    if !p.is_file() {
        bail!(
            "program {} not found (looked at {}); is the llama.cpp build complete? (`./ab \
             build-stock` makes only what the harness uses; `./ab build-stock --all` makes \
             every program)",
            name,
            p.display()
        );
    }
    Ok(p.canonicalize().unwrap_or(p))
}
