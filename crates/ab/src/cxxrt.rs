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
//! them, and what those need, hidden; when one of them belongs to the exception runtime, all
//! of that runtime, so that exceptions are counted in one place), and preloads it in every arm, stock included, so that
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
    let exported_set = with_exception_runtime(missing, &offered);
    let missing = &exported_set;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Exactly these symbols are global; whatever else the members pulled in for them
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
        let names: Vec<String> = archives.iter().map(|a| a.display().to_string()).collect();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let hint = if stderr.contains("recompile with -fPIC") {
            " (an archive is not position-independent code, so no shared library can take \
             its members)"
        } else {
            ""
        };
        return Err(format!(
            "{cxx} -shared ... {}: {}{hint}",
            names.join(" "),
            stderr.trim()
        ));
    }
    let exported = defined(&lib, true);
    match missing.iter().find(|s| !exported.contains(*s)) {
        Some(s) => Err(format!("{} does not export {s}", lib.display())),
        None => Ok(lib),
    }
}

/// Whether `name` belongs to the exception runtime, whose functions share per-thread state
/// (the caught and uncaught exceptions): they must all come from one copy of the runtime.
fn is_exception_runtime(name: &str) -> bool {
    name.starts_with("__cxa_")
        || name.starts_with("__gxx_personality")
        || name.contains("exception_ptr")
        || name.contains("uncaught_exception")
        || name.contains("current_exception")
}

/// `missing`, and when it holds any symbol of the exception runtime, every such symbol
/// `offered` defines: a library exporting `__cxa_throw` but leaving `__cxa_get_globals` to
/// the system's runtime would count exceptions in two places (a caught exception would not
/// be seen as caught). Exported together, the process uses the library's copy for all of them.
fn with_exception_runtime(
    missing: &BTreeSet<String>,
    offered: &BTreeSet<String>,
) -> BTreeSet<String> {
    let mut out = missing.clone();
    if missing.iter().any(|s| is_exception_runtime(s)) {
        out.extend(offered.iter().filter(|s| is_exception_runtime(s)).cloned());
    }
    out
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
        let exported = defined(&lib, true);
        assert!(
            exported.is_superset(&want),
            "exported: every missing symbol"
        );
        // `__cxa_throw` brings the rest of the exception runtime, and nothing else comes.
        assert!(exported.contains("__cxa_get_globals") && exported.contains("__cxa_begin_catch"));
        assert!(exported
            .iter()
            .all(|s| want.contains(s) || is_exception_runtime(s)));
        // Without an exception-runtime symbol: exactly the missing one.
        let plain: BTreeSet<String> = [string_copy].map(String::from).into();
        let lib = shim(&dir.join("plain"), &plain).unwrap();
        assert_eq!(
            defined(&lib, true),
            plain,
            "exported: exactly the missing symbol"
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
