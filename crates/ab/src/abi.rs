//! Which ggml a `libggml-base` file belongs to, and the refusal to swap it into a build of
//! another: a library whose structs differ from the ones the build's programs were compiled
//! against would run, and corrupt memory, instead of failing.
//!
//! The identity is what the library says of itself: `ggml_version()`, `ggml_commit()`, and
//! the sizes the programs bake in, `ggml_tensor_overhead()` (`sizeof(struct ggml_object) +
//! sizeof(struct ggml_tensor)`) and `ggml_graph_overhead()`. Each file is opened in a child
//! process (`ab abi-of FILE`), so a library that crashes when loaded, or one of another
//! version whose constructors fight the harness's own mappings, cannot take the harness down.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::ffi::{c_char, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The ABI identity of one `libggml-base` file, as its own functions report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibAbi {
    /// `ggml_version()`, e.g. `0.25.3`.
    pub version: String,
    /// `ggml_commit()`: the build commit baked in, `unknown` when the build had none.
    pub commit: String,
    /// `ggml_tensor_overhead()`, bytes.
    pub tensor_overhead: usize,
    /// `ggml_graph_overhead()`, bytes.
    pub graph_overhead: usize,
}

impl std::fmt::Display for LibAbi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ggml {} (commit {}, tensor overhead {} B, graph overhead {} B)",
            self.version, self.commit, self.tensor_overhead, self.graph_overhead
        )
    }
}

/// Opens `file` in this process and reads its identity: what `ab abi-of` runs in the child.
/// Fails naming the file and the loader's message, or the missing function.
pub fn read_in_process(file: &Path) -> Result<LibAbi> {
    let path = CString::new(file.as_os_str().as_encoded_bytes())
        .with_context(|| format!("{}: a path with a NUL byte", file.display()))?;
    // SAFETY: `path` is a NUL-terminated string that outlives the call. RTLD_LOCAL keeps the
    // library's symbols out of this process's global scope.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        bail!("cannot load {}: {}", file.display(), dl_error());
    }
    let sym = |name: &str| -> Result<*mut libc::c_void> {
        let c = CString::new(name).expect("a symbol name without NUL");
        // SAFETY: `handle` is the live handle just opened; `c` is NUL-terminated.
        let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
        if p.is_null() {
            bail!("{} has no {name}: not a libggml-base", file.display());
        }
        // dlsym searches the library's dependencies too: another ggml library (libggml-cpu)
        // finds these symbols in the libggml-base it links to. The symbol must be the file's own.
        // SAFETY: Dl_info is plain data (pointers and integers); all zeroes is a valid value.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: `p` is an address dlsym returned; `info` is a writable Dl_info.
        let found = unsafe { libc::dladdr(p, &mut info) } != 0 && !info.dli_fname.is_null();
        let from = found.then(|| {
            // SAFETY: dladdr set `dli_fname` to a NUL-terminated path of a loaded object.
            PathBuf::from(std::ffi::OsStr::from_bytes(
                unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes(),
            ))
        });
        let same = |a: &Path| {
            a.canonicalize().ok().is_some() && a.canonicalize().ok() == file.canonicalize().ok()
        };
        match from {
            Some(f) if same(&f) => Ok(p),
            Some(f) => bail!(
                "{} is not a libggml-base: {name} comes from {}, a library it links to",
                file.display(),
                f.display()
            ),
            None => bail!("{}: cannot tell which file defines {name}", file.display()),
        }
    };
    let text = |name: &str| -> Result<String> {
        // SAFETY: ggml's `const char * ggml_version(void)` and `ggml_commit(void)` take no
        // arguments and return a static NUL-terminated string (or NULL, checked below).
        let f: extern "C" fn() -> *const c_char = unsafe { std::mem::transmute(sym(name)?) };
        let p = f();
        if p.is_null() {
            return Ok(String::new());
        }
        // SAFETY: non-NULL, static and NUL-terminated (see above).
        Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    let size = |name: &str| -> Result<usize> {
        // SAFETY: `size_t ggml_tensor_overhead(void)` and `ggml_graph_overhead(void)` take no
        // arguments and only compute sizes.
        let f: extern "C" fn() -> usize = unsafe { std::mem::transmute(sym(name)?) };
        Ok(f())
    };
    Ok(LibAbi {
        version: text("ggml_version")?,
        commit: text("ggml_commit")?,
        tensor_overhead: size("ggml_tensor_overhead")?,
        graph_overhead: size("ggml_graph_overhead")?,
    })
    // The handle stays open: this runs in a child that exits right after.
}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown loader error".into()
    } else {
        // SAFETY: as above.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// How long reading a library's identity may take: 60 s, or `AB_TIMEOUT_S` (the limit of a
/// run) when that is shorter. Milliseconds for a library that loads; a constructor that never
/// returns must not hang the harness before its first run.
fn read_timeout() -> std::time::Duration {
    let most = std::time::Duration::from_secs(60);
    crate::job::catalogue::timeout_override().map_or(most, |limit| limit.min(most))
}

/// Reads `file`'s identity in a child process (`ab abi-of FILE`), with `lib_dir` (the folder
/// of the build's other ggml libraries) first on `LD_LIBRARY_PATH` for its dependencies, then
/// the user's own entries (a library built by another toolchain may need its runtime from
/// there, as the runs themselves find it: [`crate::swap::library_path_before_users`]). Fails
/// naming the file: it cannot be loaded, is not a libggml-base, or took longer than
/// [`read_timeout`] (a constructor that never returns).
pub fn read(file: &Path, lib_dir: &Path) -> Result<LibAbi> {
    let exe = std::env::current_exe().context("finding the harness's own binary")?;
    let mut cmd = Command::new(exe);
    cmd.arg("abi-of")
        .arg(file)
        .env(
            "LD_LIBRARY_PATH",
            crate::swap::library_path_before_users(lib_dir),
        )
        .env_remove("LD_PRELOAD");
    let timeout = read_timeout();
    let out = crate::proc::run(
        &mut cmd,
        &crate::proc::RunOpts {
            label: "abi-of",
            timeout,
            echo: false,
            progress_every: 0,
        },
        &mut crate::proc::Quiet,
    )
    .with_context(|| format!("running `ab abi-of {}`", file.display()))?;
    if out.timed_out {
        bail!(
            "reading the ggml version of {}: loading it took over {} s (a library whose \
             constructor never returns?); stopped",
            file.display(),
            timeout.as_secs()
        );
    }
    if !out.success() {
        bail!(
            "reading the ggml version of {}: {}{}",
            file.display(),
            String::from_utf8_lossy(&out.stderr).trim(),
            match &out.signal {
                Some(sig) => format!(" (killed by {sig})"),
                None => String::new(),
            }
        );
    }
    serde_json::from_slice(&out.stdout)
        .with_context(|| format!("parsing `ab abi-of {}`", file.display()))
}

/// Checks that `arm` (named `arm_name`) belongs to the ggml of the build's own library
/// `build_lib`: the same version and struct sizes, and the same commit unless one of the
/// two has none (`unknown`: built from a tree without git history). Fails naming both identities,
/// before anything runs. Two arms that both match a build of another ggml (a fork) pass: the
/// comparison is with the build, not with our pinned version.
pub fn check_arm(arm_name: &str, arm: &LibAbi, build_lib: &Path, build: &LibAbi) -> Result<()> {
    // A build from a source tree without git history (a release tarball, a copy) has no
    // commit baked in: then the version and the struct sizes decide alone.
    let unknown = |c: &str| c.is_empty() || c == "unknown";
    let commits_agree =
        arm.commit == build.commit || unknown(&arm.commit) || unknown(&build.commit);
    if arm.version == build.version
        && arm.tensor_overhead == build.tensor_overhead
        && arm.graph_overhead == build.graph_overhead
        && commits_agree
    {
        return Ok(());
    }
    bail!(
        "arm {arm_name} is {arm}, but the llama.cpp build's own {} is {build}: its programs \
         were compiled against that ggml's structs, so swapping this library in would run \
         with mismatched structs; refusing. Build llama.cpp from the same ggml as the arm \
         (the pinned one for ours: ./ab build-stock), or name an arm of the build's version.",
        build_lib.display()
    )
}

/// Checks every arm against the build's own `libggml-base.so.0` (in `bin_dir(build)`), each
/// read in a child; prints each identity. Fails at the first arm of another ggml, or when the
/// build has no library of its own to compare with.
pub fn check_arms(build: &Path, arms: &mut [crate::swap::Arm]) -> Result<()> {
    let lib_dir = crate::paths::bin_dir(build);
    let build_lib = lib_dir.join("libggml-base.so.0");
    if !build_lib.exists() {
        bail!(
            "{} not found: without the build's own libggml-base the harness cannot tell which \
             ggml its programs were compiled against",
            build_lib.display()
        );
    }
    let own = read(&build_lib, &lib_dir)?;
    crate::say(&format!("build's ggml: {own}"));
    for arm in arms.iter() {
        let a = read(&arm.lib_copy, &lib_dir).with_context(|| {
            format!(
                "arm {}: reading the ggml version of {}",
                arm.name,
                arm.source.display()
            )
        })?;
        check_arm(&arm.name, &a, &build_lib, &own)?;
        crate::say(&format!("arm {}: {a}, matches the build", arm.name));
    }
    let missing: std::collections::BTreeSet<String> = check_imports(build, arms)
        .into_iter()
        .flat_map(|(_, symbols)| symbols)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    // The build's libggml-base carries C++ runtime symbols: give every arm the same runtime.
    let dir = arms[0]
        .lib_dir
        .parent()
        .and_then(Path::parent)
        .unwrap_or(&arms[0].lib_dir)
        .join("cxxrt");
    match crate::cxxrt::shim(&dir, &missing) {
        Ok(lib) => {
            crate::say(&format!(
                "the build's programs take {} C++ runtime symbols from its own libggml-base \
                 (its toolchain linked its C++ runtime into it): every arm preloads {}, which \
                 defines exactly those, taken from this machine's libsupc++.a and libstdc++.a, \
                 so those programs run in every arm",
                missing.len(),
                lib.display()
            ));
            for arm in arms.iter_mut() {
                arm.preload = Some(lib.clone());
            }
        }
        Err(why) => crate::say(&format!(
            "warning: no C++ runtime library for the missing symbols ({why}); the programs \
             named above stop at load time in those arms"
        )),
    }
    Ok(())
}

/// The dynamic symbols of an ELF file, by `nm -D -P` (defined or undefined ones), names
/// without their version suffix. Empty for a file nm cannot read (not ELF).
fn dyn_symbols(file: &Path, defined: bool) -> BTreeSet<String> {
    nm_symbols(file, true, defined)
}

/// The symbols `nm -P` lists for `file`: of its dynamic table (`dynamic`, `-D`) or its symbol
/// table (an archive's, say), defined ones or undefined ones; names without their version
/// suffix. Empty for a file nm cannot read.
pub fn nm_symbols(file: &Path, dynamic: bool, defined: bool) -> BTreeSet<String> {
    let which = if defined {
        "--defined-only"
    } else {
        "--undefined-only"
    };
    let mut cmd = Command::new("nm");
    if dynamic {
        cmd.arg("-D");
    }
    let Ok(o) = cmd.args(["-g", "-P", which]).arg(file).output() else {
        return BTreeSet::new();
    };
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .collect()
}

/// Of `wanted` (symbols a program takes from the build's libggml-base that the arm lacks),
/// those no other library the program loads (`ldd`) defines either: what would fail at load
/// time with a "symbol lookup error" once the arm is swapped in.
fn unprovided(program: &Path, mut wanted: Vec<String>) -> Vec<String> {
    let libs = Command::new("ldd").arg(program).output().map(|o| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.split("=> ").nth(1))
            .filter_map(|r| r.split(" (").next())
            .filter(|p| !p.contains("libggml-base"))
            .map(std::path::PathBuf::from)
            .collect::<Vec<_>>()
    });
    for lib in libs.unwrap_or_default() {
        let defs = dyn_symbols(&lib, true);
        wanted.retain(|s| !defs.contains(s));
    }
    wanted
}

/// Warns, before anything runs, about every program of the build that imports from the
/// build's own libggml-base a symbol the arm's file lacks and nothing else provides (seen
/// on a CUDA build whose toolchain put C++ runtime symbols into libggml-base): those programs
/// will stop at load time in that arm, which the table then shows; the others run. Returns
/// each `arm: program` with the symbols it would miss.
pub fn check_imports(build: &Path, arms: &[crate::swap::Arm]) -> Vec<(String, Vec<String>)> {
    let lib_dir = crate::paths::bin_dir(build);
    let build_exports = dyn_symbols(&lib_dir.join("libggml-base.so.0"), true);
    let mut programs: Vec<std::path::PathBuf> = std::fs::read_dir(&lib_dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
                    p.is_file() && !name.is_some_and(|n| n.contains(".so"))
                })
                .collect()
        })
        .unwrap_or_default();
    programs.sort();
    // What each program takes from the build's libggml-base: read once for every arm.
    let imports: Vec<(std::path::PathBuf, Vec<String>)> = programs
        .into_iter()
        .map(|p| {
            let from_base: Vec<String> = dyn_symbols(&p, false)
                .into_iter()
                .filter(|s| build_exports.contains(s))
                .collect();
            (p, from_base)
        })
        .filter(|(_, v)| !v.is_empty())
        .collect();
    let mut out = Vec::new();
    for arm in arms {
        let arm_exports = dyn_symbols(&arm.lib_copy, true);
        for (p, from_base) in &imports {
            let lacking: Vec<String> = from_base
                .iter()
                .filter(|s| !arm_exports.contains(*s))
                .cloned()
                .collect();
            if lacking.is_empty() {
                continue;
            }
            let missing = unprovided(p, lacking);
            if missing.is_empty() {
                continue;
            }
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            let more = if missing.len() > 3 {
                format!(" and {} more", missing.len() - 3)
            } else {
                String::new()
            };
            let line = format!(
                "{name}: {}{more}",
                missing[..missing.len().min(3)].join(", ")
            );
            crate::say(&format!(
                "warning: arm {}: {line}: the build's programs take these from its own \
                 libggml-base, which the arm's file does not define, and no other library of \
                 theirs does; {name} would stop at load time (symbol lookup error) in this arm",
                arm.name
            ));
            out.push((format!("{}: {name}", arm.name), missing));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn abi(version: &str, tensor_overhead: usize) -> LibAbi {
        LibAbi {
            version: version.into(),
            commit: "abc".into(),
            tensor_overhead,
            graph_overhead: 80,
        }
    }

    #[test]
    fn same_identity_passes_and_any_difference_is_refused_naming_both() {
        let build = abi("0.25.3", 368);
        let lib = Path::new("/b/libggml-base.so.0");
        check_arm("ours", &abi("0.25.3", 368), lib, &build).unwrap();
        let e = check_arm("ours", &abi("0.26.0", 368), lib, &build)
            .unwrap_err()
            .to_string();
        assert!(e.contains("arm ours is ggml 0.26.0"), "{e}");
        assert!(e.contains("/b/libggml-base.so.0 is ggml 0.25.3"), "{e}");
        let e = check_arm("b", &abi("0.25.3", 376), lib, &build)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("tensor overhead 376 B") && e.contains("tensor overhead 368 B"),
            "{e}"
        );
    }
}
