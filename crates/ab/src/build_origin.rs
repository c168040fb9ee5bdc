//! Whether a llama.cpp build runs from where it is: a build folder copied or moved after it
//! was built still names the old folder in its programs' `DT_RUNPATH` (CMake writes the build
//! tree's absolute `bin/`) and in ctest's test list. Its programs then load `libggml`,
//! `libggml-cpu` and `libllama` from the old folder, and ctest runs the old folder's programs,
//! which write there. Only `libggml-base` is swapped per arm, so the job still compares the
//! two arms, but of another folder's build, and the proof (which names `libggml-base`'s file)
//! does not show it. The job says so before anything runs.

use std::path::{Path, PathBuf};

/// The folder a CMake build was configured in (`CMAKE_CACHEFILE_DIR` of its
/// `CMakeCache.txt`), when it has one.
fn configured_in(build: &Path) -> Option<PathBuf> {
    let cache = std::fs::read_to_string(build.join("CMakeCache.txt")).ok()?;
    cache
        .lines()
        .find_map(|l| l.strip_prefix("CMAKE_CACHEFILE_DIR:INTERNAL="))
        .map(|d| PathBuf::from(d.trim()))
}

/// The `DT_RUNPATH` (or `DT_RPATH`) folders of `program` as `readelf -d` prints them,
/// `$ORIGIN` replaced by the program's folder; empty when there are none or readelf fails.
fn search_folders(program: &Path) -> Vec<PathBuf> {
    let Ok(out) = std::process::Command::new("readelf")
        .arg("-d")
        .arg(program)
        .output()
    else {
        return Vec::new();
    };
    let origin = program.parent().unwrap_or(Path::new("."));
    parse_search_folders(&String::from_utf8_lossy(&out.stdout), origin)
}

/// [`search_folders`] from `readelf -d`'s text: the bracketed lists of its `(RUNPATH)` and
/// `(RPATH)` lines, split at `:`, empty entries dropped.
fn parse_search_folders(readelf: &str, origin: &Path) -> Vec<PathBuf> {
    let origin = origin.display().to_string();
    readelf
        .lines()
        .filter(|l| l.contains("(RUNPATH)") || l.contains("(RPATH)"))
        .filter_map(|l| {
            let open = l.find('[')?;
            let close = l.rfind(']')?;
            (open < close).then(|| l[open + 1..close].to_string())
        })
        .flat_map(|list| {
            list.split(':')
                .filter(|e| !e.is_empty())
                .map(|e| PathBuf::from(e.replace("${ORIGIN}", &origin).replace("$ORIGIN", &origin)))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Whether `dir` holds a library of ggml or llama (`libggml*` or `libllama*`).
fn has_ggml_libraries(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with("libggml") || n.starts_with("libllama")
        })
    })
}

/// What runs from outside `build` (canonical): one line per finding, empty when the build
/// runs from where it is. Looks at the folder CMake configured it in and at the search
/// folders of `programs` (the job's programs in the build) that hold ggml or llama libraries.
pub fn outside(build: &Path, programs: &[&Path]) -> Vec<String> {
    let mut found = Vec::new();
    let same = |d: &Path| d.canonicalize().is_ok_and(|c| c.starts_with(build));
    if let Some(dir) = configured_in(build) {
        if dir.is_dir() && !same(&dir) {
            found.push(format!(
                "it was configured in {} (CMakeCache.txt), where ctest's test list points",
                dir.display()
            ));
        }
    }
    let mut seen: Vec<PathBuf> = Vec::new();
    for p in programs {
        // The loader takes each library from the first folder that has it: only the first
        // folder with ggml or llama libraries counts (a later one, a conda env's say, is
        // never reached for them).
        let Some(dir) = search_folders(p)
            .into_iter()
            .find(|d| d.is_dir() && has_ggml_libraries(d))
        else {
            continue;
        };
        if seen.contains(&dir) || same(&dir) {
            continue;
        }
        found.push(format!(
            "{} loads libggml and libllama from {} (its RUNPATH)",
            p.file_name().unwrap_or_default().to_string_lossy(),
            dir.display()
        ));
        seen.push(dir);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_folders_are_read_from_runpath_and_rpath_lines() {
        let text = " 0x000000000000001d (RUNPATH)            Library runpath: [/b/llama/bin:$ORIGIN/../lib:]\n \
                    0x000000000000000f (RPATH)              Library rpath: [${ORIGIN}]\n \
                    0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]\n";
        assert_eq!(
            parse_search_folders(text, Path::new("/x/bin")),
            [
                PathBuf::from("/b/llama/bin"),
                PathBuf::from("/x/bin/../lib"),
                PathBuf::from("/x/bin"),
            ]
        );
        assert!(parse_search_folders("", Path::new("/x")).is_empty());
    }

    /// A build folder copied elsewhere is found by both marks: its CMake cache names the
    /// original folder, and its program's RUNPATH points at the original's libraries. The
    /// original itself is clean.
    #[test]
    fn a_copied_build_is_found_and_the_original_is_not() {
        let root = std::env::temp_dir().join(format!("ab-build-origin-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let (orig, copy) = (root.join("orig"), root.join("copy"));
        for d in [&orig, &copy] {
            std::fs::create_dir_all(d.join("bin")).unwrap();
            std::fs::write(d.join("bin/libggml-cpu.so"), b"").unwrap();
            std::fs::write(
                d.join("CMakeCache.txt"),
                format!(
                    "X:STRING=1\nCMAKE_CACHEFILE_DIR:INTERNAL={}\n",
                    orig.display()
                ),
            )
            .unwrap();
        }
        let orig = orig.canonicalize().unwrap();
        let copy = copy.canonicalize().unwrap();
        assert!(outside(&orig, &[]).is_empty());
        let found = outside(&copy, &[]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains(&orig.display().to_string()), "{found:?}");
        // A program whose RUNPATH names the original's bin/ (readelf reads a real ELF file:
        // the test links one with that RUNPATH; cc is one of the harness's requirements).
        let src = root.join("p.c");
        std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
        let prog = copy.join("bin/llama-simple");
        let linked = std::process::Command::new("cc")
            .arg(&src)
            .arg("-o")
            .arg(&prog)
            .arg(format!(
                "-Wl,-rpath,{}/bin,--enable-new-dtags",
                orig.display()
            ))
            .status()
            .is_ok_and(|s| s.success());
        assert!(linked, "cc could not link the test program");
        let found = outside(&copy, &[prog.as_path()]);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[1].starts_with("llama-simple loads libggml and libllama from"));
        // A RUNPATH that names the build's own bin/ first is searched there first.
        let own_first = copy.join("bin/llama-own-first");
        assert!(std::process::Command::new("cc")
            .arg(&src)
            .arg("-o")
            .arg(&own_first)
            .arg(format!(
                "-Wl,-rpath,{}/bin:{}/bin,--enable-new-dtags",
                copy.display(),
                orig.display()
            ))
            .status()
            .is_ok_and(|s| s.success()));
        assert_eq!(outside(&copy, &[own_first.as_path()]).len(), 1);
        // The same program in the original folder finds its own libraries there.
        std::fs::copy(&prog, orig.join("bin/llama-simple")).unwrap();
        assert!(outside(&orig, &[orig.join("bin/llama-simple").as_path()]).is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
