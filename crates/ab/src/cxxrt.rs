//! The C++ runtime a build's libggml-base carries: some toolchains link the C++ ABI support
//! library (`libsupc++`) into every shared library they make, so the stock libggml-base then
//! exports `__cxa_throw`, `__cxxabiv1::__terminate` and the like, and programs of that build
//! take some of them from it (measured on the lent H200: 14 symbols in `llama-simple`, from
//! a CUDA build made by `/opt/gcc/bin/g++`). An arm's library built elsewhere does not define
//! them, and those programs stop at load time with a symbol lookup error.
//!
//! The harness then builds, with the machine's C++ compiler, one small library of the
//! toolchain's `libsupc++.a` (`cxxrt/libab-cxxrt.so`) and preloads it in every arm, stock
//! included, so that both arms run the same programs with the same runtime. It does so only
//! when every missing symbol is one that library defines; otherwise the programs are named
//! as before and left to fail in that arm.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The C++ compiler to ask: `$CXX`, else `c++`.
fn compiler() -> String {
    std::env::var("CXX")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "c++".into())
}

/// The compiler's `libsupc++.a`, if it has one.
fn supcxx_archive(cxx: &str) -> Option<PathBuf> {
    let out = Command::new(cxx)
        .arg("-print-file-name=libsupc++.a")
        .output()
        .ok()?;
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    // Without the file the compiler prints the bare name back.
    p.is_absolute().then_some(p).filter(|p| p.is_file())
}

/// The global symbols `nm` lists as defined in `file` (`-D` for a shared library).
fn defined(file: &Path, dynamic: bool) -> BTreeSet<String> {
    crate::abi::nm_symbols(file, dynamic, true)
}

/// Builds `dir/libab-cxxrt.so` from the C++ compiler's `libsupc++.a` when that archive
/// defines every symbol of `missing`, and the library then exports them all; returns its
/// path, or why not.
pub fn shim(dir: &Path, missing: &BTreeSet<String>) -> Result<PathBuf, String> {
    let cxx = compiler();
    let archive = supcxx_archive(&cxx)
        .ok_or_else(|| format!("{cxx} has no libsupc++.a (-print-file-name)"))?;
    let offered = defined(&archive, false);
    let uncovered: Vec<&String> = missing.iter().filter(|s| !offered.contains(*s)).collect();
    if !uncovered.is_empty() {
        return Err(format!(
            "{} does not define {} of the missing symbols, e.g. {}",
            archive.display(),
            uncovered.len(),
            uncovered[0]
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let lib = dir.join("libab-cxxrt.so");
    let out = Command::new(&cxx)
        .args(["-shared", "-o"])
        .arg(&lib)
        .arg("-Wl,--whole-archive")
        .arg(&archive)
        .arg("-Wl,--no-whole-archive")
        .output()
        .map_err(|e| format!("running {cxx}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cxx} -shared ... {}: {}",
            archive.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let exported = defined(&lib, true);
    match missing.iter().find(|s| !exported.contains(*s)) {
        Some(s) => Err(format!("{} does not export {s}", lib.display())),
        None => Ok(lib),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On this machine's toolchain: the library exports what libsupc++ defines (a symbol
    /// every libsupc++ has), and a name it does not define is refused by name.
    #[test]
    fn builds_a_runtime_library_for_libsupcxx_symbols_and_refuses_others() {
        // The workspace builds C++ (the upstream sources), so its compiler is here.
        assert!(
            supcxx_archive(&compiler()).is_some(),
            "{} has no libsupc++.a",
            compiler()
        );
        let dir = std::env::temp_dir().join(format!("ab-cxxrt-test-{}", std::process::id()));
        let want: BTreeSet<String> = ["__cxa_throw", "__gxx_personality_v0"]
            .map(String::from)
            .into();
        let lib = shim(&dir, &want).unwrap();
        let exported = defined(&lib, true);
        assert!(exported.contains("__cxa_throw") && exported.contains("__gxx_personality_v0"));
        let mut other = want.clone();
        other.insert("ggml_init".into());
        let e = shim(&dir, &other).unwrap_err();
        assert!(
            e.contains("does not define 1") && e.contains("ggml_init"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
