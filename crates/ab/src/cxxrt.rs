//! The C++ runtime a build's libggml-base carries: some toolchains link the C++ runtime
//! (`libsupc++`, and parts of `libstdc++`) into every shared library they make, so the stock
//! libggml-base then exports `__cxa_throw`, `__cxxabiv1::__terminate`, `std::string` members
//! and the like, and programs of that build take some of them from it (measured on the lent
//! H200, a CUDA build made by `/opt/gcc/bin/g++`: 14 symbols in `llama-simple`, and test
//! programs such as `test-unicode` also take `std::string` members the system's
//! `libstdc++.so.6` does not export). An arm's library built elsewhere does not define them,
//! and those programs stop at load time with a symbol lookup error.
//!
//! The harness then builds, with the machine's C++ compiler, one small library
//! (`cxxrt/libab-cxxrt.so`) that defines exactly the missing symbols, taken from the
//! toolchain's static `libsupc++.a` and `libstdc++.a` (only the archive members that define
//! them, and what those need, hidden), and preloads it in every arm, stock included, so that
//! both arms run the same programs with the same runtime. It does so only when the archives
//! define every missing symbol; otherwise the programs are named as before and left to fail
//! in that arm.

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

/// The compiler's static `name` (`libsupc++.a`, `libstdc++.a`), if it has one.
fn archive(cxx: &str, name: &str) -> Option<PathBuf> {
    let out = Command::new(cxx)
        .arg(format!("-print-file-name={name}"))
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

/// Builds `dir/libab-cxxrt.so`, exporting exactly the symbols of `missing`, from the C++
/// compiler's `libsupc++.a` and `libstdc++.a` when those define every one of them; returns
/// its path, or why not (an archive missing, a symbol no archive defines, a failed link, a
/// symbol the library does not export after all).
pub fn shim(dir: &Path, missing: &BTreeSet<String>) -> Result<PathBuf, String> {
    let cxx = compiler();
    let archives: Vec<PathBuf> = ["libsupc++.a", "libstdc++.a"]
        .iter()
        .filter_map(|n| archive(&cxx, n))
        .collect();
    if archives.is_empty() {
        return Err(format!(
            "{cxx} has neither libsupc++.a nor libstdc++.a (-print-file-name)"
        ));
    }
    let offered: BTreeSet<String> = archives.iter().flat_map(|a| defined(a, false)).collect();
    let uncovered: Vec<&String> = missing.iter().filter(|s| !offered.contains(*s)).collect();
    if !uncovered.is_empty() {
        let names: Vec<String> = archives.iter().map(|a| a.display().to_string()).collect();
        return Err(format!(
            "{} do not define {} of the missing symbols, e.g. {}",
            names.join(" and "),
            uncovered.len(),
            uncovered[0]
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Exactly the missing symbols are global; whatever else the members pulled in for them
    // bring stays local, so the library overrides nothing else of the process's runtime.
    let script = dir.join("libab-cxxrt.map");
    let mut text = String::from("{\n  global:\n");
    for s in missing {
        text.push_str(&format!("    {s};\n"));
    }
    text.push_str("  local: *;\n};\n");
    std::fs::write(&script, text).map_err(|e| format!("{}: {e}", script.display()))?;
    let lib = dir.join("libab-cxxrt.so");
    let mut cmd = Command::new(&cxx);
    cmd.args(["-shared", "-o"]).arg(&lib);
    // `-u` makes the linker take from the archives the members that define each symbol
    // (a shared library is otherwise built from nothing of them).
    for s in missing {
        cmd.arg(format!("-Wl,-u,{s}"));
    }
    cmd.arg(format!("-Wl,--version-script={}", script.display()))
        .arg("-Wl,--start-group")
        .args(&archives)
        .arg("-Wl,--end-group");
    let out = cmd.output().map_err(|e| format!("running {cxx}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cxx} -shared ... {}: {}",
            archives[0].display(),
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

    /// On this machine's toolchain: the library exports exactly what was asked, from
    /// libsupc++ (`__cxa_throw`) and from libstdc++ (a `std::string` member), and nothing
    /// else of the runtime; a name neither archive defines is refused by name.
    #[test]
    fn builds_a_runtime_library_of_exactly_the_missing_symbols_and_refuses_others() {
        // The workspace builds C++ (the upstream sources), so its compiler is here.
        let cxx = compiler();
        assert!(
            archive(&cxx, "libsupc++.a").is_some(),
            "{cxx} has no libsupc++.a"
        );
        assert!(
            archive(&cxx, "libstdc++.a").is_some(),
            "{cxx} has no libstdc++.a"
        );
        let dir = std::env::temp_dir().join(format!("ab-cxxrt-test-{}", std::process::id()));
        let string_copy = "_ZNKSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE4copyEPcmm";
        let want: BTreeSet<String> = ["__cxa_throw", "__gxx_personality_v0", string_copy]
            .map(String::from)
            .into();
        let lib = shim(&dir, &want).unwrap();
        assert_eq!(
            defined(&lib, true),
            want,
            "exported: exactly the missing symbols"
        );
        let mut other = want.clone();
        other.insert("ggml_init".into());
        let e = shim(&dir, &other).unwrap_err();
        assert!(
            e.contains("do not define 1") && e.contains("ggml_init"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
