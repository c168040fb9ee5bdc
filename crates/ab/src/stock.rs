//! `ab build-stock`: the stock llama.cpp build ("the existing build") in `target/llama-stock`,
//! configured with CMake + Ninja from the pinned source, unchanged. Built once per pin and
//! flag set: a stamp file records both after a successful build; an existing build whose
//! `CMakeCache.txt` holds the same flags is reused (and completed by ninja); nothing is wiped
//! without `--force`.

use crate::paths::Paths;
use crate::proc::{self, RunOpts, Stream, Watcher};
use crate::{fmt_secs, say};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The CMake cache entries of the stock build, exactly as passed to `cmake -D`.
pub const FLAGS: &[(&str, &str)] = &[
    ("CMAKE_BUILD_TYPE", "Release"),
    ("BUILD_SHARED_LIBS", "ON"),
    ("LLAMA_BUILD_TESTS", "ON"),
    ("LLAMA_BUILD_EXAMPLES", "ON"),
    ("LLAMA_BUILD_TOOLS", "ON"),
    ("LLAMA_BUILD_SERVER", "ON"),
    ("LLAMA_USE_PREBUILT_UI", "OFF"),
    ("LLAMA_OPENSSL", "OFF"),
    ("GGML_RPC", "ON"),
    ("CMAKE_EXPORT_COMPILE_COMMANDS", "ON"),
];

/// What `ab build-stock` builds by default, with every program ctest's tests run
/// ([`ctest_programs`]): the ninja targets of everything the harness, its scripts and tools
/// run, or link against. The rest of a full build (llama-server, the CLI, most examples and
/// tools: 11 % of the compile on the pin) is left to `--all`.
///
/// `tests/all` is every program of the tests folder; ctest also runs programs defined
/// elsewhere (`test-rpc-multi-server` of tools/rpc, `llama-eval-callback`), which
/// [`ctest_programs`] finds. The configured flags do not change, so `--all` later only
/// compiles what is missing.
pub const HARNESS_TARGETS: &[&str] = &[
    // The libraries: the arms swap libggml-base, the C tests link the rest.
    "ggml",
    "ggml-base",
    "ggml-cpu",
    "ggml-rpc",
    "llama",
    "llama-common",
    "mtmd",
    // ctest's programs (and [`ctest_programs`]).
    "tests/all",
    // The programs the harness runs (the main job, `ab rpc`, `ab pipeline`, `ab bench`,
    // the HRX checks, the documented commands).
    "llama-simple",
    "llama-completion",
    "llama-bench",
    "llama-batched-bench",
    "llama-perplexity",
    "llama-parallel",
    "llama-quantize",
    "ggml-rpc-server",
];

/// Name of the stamp file inside the build folder.
pub const STAMP: &str = ".ab-stamp.json";

/// What a finished stock build was made from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Stamp {
    /// sha256 of the upstream sdist.
    pub upstream_sha256: String,
    /// The `-D` flags, `NAME=VALUE`, in [`FLAGS`] order.
    pub flags: Vec<String>,
    /// The configured source folder.
    pub source: String,
}

fn wanted_stamp(upstream_sha256: &str, source: &Path) -> Stamp {
    Stamp {
        upstream_sha256: upstream_sha256.to_string(),
        flags: FLAGS.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        source: source.display().to_string(),
    }
}

/// CMake's truth values, so `ON`, `TRUE` and `1` compare equal.
fn normalize(v: &str) -> String {
    match v.to_ascii_uppercase().as_str() {
        "ON" | "TRUE" | "YES" | "Y" | "1" => "ON".into(),
        "OFF" | "FALSE" | "NO" | "N" | "0" | "" => "OFF".into(),
        other => other.to_string(),
    }
}

/// Compares a `CMakeCache.txt` with [`FLAGS`], the Ninja generator and the source folder.
/// Returns the differences, one `NAME: have X, want Y` line each (empty: it matches).
pub fn cache_differences(cache_text: &str, source: &Path) -> Vec<String> {
    let mut have = std::collections::HashMap::new();
    for line in cache_text.lines() {
        if line.starts_with('#') || line.starts_with("//") {
            continue;
        }
        if let Some((key_type, value)) = line.split_once('=') {
            let key = key_type.split(':').next().unwrap_or(key_type);
            have.insert(key.to_string(), value.to_string());
        }
    }
    let mut diffs = Vec::new();
    let mut want = |key: &str, value: &str, is_bool: bool| {
        let got = have.get(key).map(String::as_str);
        let same = match got {
            Some(g) if is_bool => normalize(g) == normalize(value),
            Some(g) => g == value,
            None => false,
        };
        if !same {
            diffs.push(format!(
                "{key}: have {}, want {value}",
                got.unwrap_or("(unset)")
            ));
        }
    };
    for (k, v) in FLAGS {
        want(k, v, *k != "CMAKE_BUILD_TYPE");
    }
    want("CMAKE_GENERATOR", "Ninja", false);
    want("CMAKE_HOME_DIRECTORY", &source.display().to_string(), false);
    diffs
}

/// Counts ninja's `[n/N]` lines and remembers the last one.
#[derive(Default)]
struct NinjaWatch {
    done: u64,
    total: u64,
    last: String,
    tail: std::collections::VecDeque<String>,
}

/// Parses ninja's `[n/N] what` progress prefix.
pub fn ninja_progress(line: &str) -> Option<(u64, u64)> {
    let rest = line.strip_prefix('[')?;
    let (nums, _) = rest.split_once(']')?;
    let (n, total) = nums.split_once('/')?;
    Some((n.trim().parse().ok()?, total.trim().parse().ok()?))
}

impl Watcher for NinjaWatch {
    fn line(&mut self, _s: Stream, line: &str) {
        if let Some((n, t)) = ninja_progress(line) {
            self.done = n;
            self.total = t;
            self.last = line.split_once("] ").map(|x| x.1).unwrap_or("").to_string();
        }
        self.tail.push_back(line.to_string());
        if self.tail.len() > 60 {
            self.tail.pop_front();
        }
    }
    fn status(&self) -> Option<String> {
        if self.total == 0 {
            return Some("starting".into());
        }
        let short: String = self.last.chars().take(90).collect();
        Some(format!(
            "[{}/{}] {:.0}% {}",
            self.done,
            self.total,
            100.0 * self.done as f64 / self.total as f64,
            short
        ))
    }
}

/// Pids of other `ninja` processes working on `dir` (their cwd or `-C` argument is it).
fn other_ninjas(dir: &Path) -> Vec<u32> {
    let me = std::process::id();
    let dir_s = dir.display().to_string();
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in entries.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let is_ninja = args
            .first()
            .map(|a| a.rsplit('/').next() == Some("ninja"))
            .unwrap_or(false);
        if !is_ninja {
            continue;
        }
        let cwd = std::fs::read_link(e.path().join("cwd")).unwrap_or_default();
        let mut targets = vec![cwd.clone()];
        if let Some(i) = args.iter().position(|a| a == "-C") {
            if let Some(d) = args.get(i + 1) {
                targets.push(cwd.join(d));
            }
        }
        if targets.iter().any(|t| {
            t.canonicalize()
                .map(|c| c.display().to_string() == dir_s)
                .unwrap_or(false)
        }) {
            found.push(pid);
        }
    }
    found
}

/// Waits (with progress lines) while another ninja builds `dir`: two ninjas on one tree
/// would corrupt each other's state.
fn wait_for_other_ninja(dir: &Path) {
    let started = Instant::now();
    let mut last = Instant::now() - Duration::from_secs(60);
    loop {
        let pids = other_ninjas(dir);
        if pids.is_empty() {
            return;
        }
        if last.elapsed() >= Duration::from_secs(30) {
            last = Instant::now();
            say(&format!(
                "build-stock: another ninja (pid {:?}) is building {}; waiting ({})",
                pids,
                dir.display(),
                fmt_secs(started.elapsed().as_secs_f64())
            ));
        }
        std::thread::sleep(Duration::from_secs(5));
    }
}

/// The programs of the build's `bin/` that its ctest tests run, as file names, sorted and
/// without repeats: every quoted argument of an `add_test(...)` line
/// of a `CTestTestfile.cmake` under `build_dir` that names a file directly in
/// `build_dir/bin/`, whether the test's command or an argument (a script given the programs
/// it starts).
///
/// Errors: the build folder cannot be walked or a `CTestTestfile.cmake` read.
pub fn ctest_programs(build_dir: &Path) -> Result<Vec<String>> {
    let bin = format!("{}/bin/", build_dir.display());
    let mut found = std::collections::BTreeSet::new();
    let mut pending = vec![build_dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries =
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?;
        for e in entries {
            let e = e.with_context(|| format!("reading {}", dir.display()))?;
            let path = e.path();
            if e.file_type()?.is_dir() {
                // ninja's and CMake's own folders hold no tests.
                if e.file_name() != "CMakeFiles" && e.file_name() != "bin" {
                    pending.push(path);
                }
            } else if e.file_name() == "CTestTestfile.cmake" {
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                found.extend(programs_of_ctest_file(&text, &bin));
            }
        }
    }
    Ok(found.into_iter().collect())
}

/// The file names under `bin` (a folder path ending in `/`) that the `add_test` lines of a
/// `CTestTestfile.cmake` quote.
fn programs_of_ctest_file(text: &str, bin: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| l.trim_start().starts_with("add_test("))
    {
        for (i, quoted) in line.split('"').enumerate() {
            if i % 2 == 1 {
                if let Some(name) = quoted.strip_prefix(bin) {
                    if !name.is_empty() && !name.contains('/') {
                        out.push(name.to_string());
                    }
                }
            }
        }
    }
    out
}

/// Which targets [`ensure`] has ninja build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Targets {
    /// [`HARNESS_TARGETS`]: what the harness uses.
    Harness,
    /// Every target of the configured build (`ninja` without a target).
    All,
}

/// Ensures the stock build exists and its `targets` are built; returns the build folder.
pub fn ensure(paths: &Paths, force: bool, targets: Targets) -> Result<std::path::PathBuf> {
    let pins = pins::Pins::load(&paths.root)?;
    let source = pins.ensure_upstream(&paths.target)?;
    let dir = paths.stock_build();
    let want = wanted_stamp(&pins.upstream.sha256, &source);
    let stamp_path = dir.join(STAMP);
    let cache_path = dir.join("CMakeCache.txt");
    wait_for_other_ninja(&dir);

    let stamp: Option<Stamp> = std::fs::read_to_string(&stamp_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let mut configure = true;
    if force {
        if dir.exists() {
            say(&format!("build-stock: --force: removing {}", dir.display()));
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
    } else if let Some(s) = &stamp {
        if *s != want {
            bail!(
                "{} was built from another pin or flag set (stamp {}: {:?}; wanted {:?}); run `./ab build-stock --force` to rebuild it",
                dir.display(),
                stamp_path.display(),
                s,
                want
            );
        }
        configure = false;
    } else if cache_path.is_file() {
        let text = std::fs::read_to_string(&cache_path)
            .with_context(|| format!("reading {}", cache_path.display()))?;
        let diffs = cache_differences(&text, &source);
        if !diffs.is_empty() {
            bail!(
                "{} holds a build configured differently:\n  {}\nrun `./ab build-stock --force` to wipe and rebuild it",
                dir.display(),
                diffs.join("\n  ")
            );
        }
        say("build-stock: reusing the existing build (its CMakeCache.txt matches the flags)");
        configure = false;
    }

    let started = Instant::now();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    if configure {
        say(&format!(
            "build-stock: step 1/2 configure (cmake -G Ninja) in {}",
            dir.display()
        ));
        let mut cmd = Command::new("cmake");
        cmd.arg("-S")
            .arg(&source)
            .arg("-B")
            .arg(&dir)
            .args(["-G", "Ninja"]);
        for (k, v) in FLAGS {
            cmd.arg(format!("-D{k}={v}"));
        }
        let f = proc::run(
            &mut cmd,
            &RunOpts {
                label: "build-stock configure",
                timeout: Duration::from_secs(1800),
                echo: false,
                progress_every: 15,
            },
            &mut proc::Quiet,
        )?;
        std::fs::write(
            paths.ab_dir().join("build-stock-configure.log"),
            [&f.stdout[..], &f.stderr[..]].concat(),
        )
        .ok();
        if !f.success() {
            bail!(
                "cmake configure failed ({}):\n{}",
                f.ended(),
                tail(&f.stderr, 40)
            );
        }
        say(&format!(
            "build-stock: configured in {}",
            fmt_secs(f.seconds)
        ));
    }
    let mut watch = NinjaWatch::default();
    let mut cmd = Command::new("ninja");
    cmd.arg("-C").arg(&dir);
    match targets {
        Targets::Harness => {
            let from_ctest = ctest_programs(&dir)?;
            say(&format!(
                "build-stock: step 2/2 build (ninja) of the {} targets the harness uses and \
                 the {} programs ctest runs (`./ab build-stock --all` for every target); \
                 progress every 15 s",
                HARNESS_TARGETS.len(),
                from_ctest.len()
            ));
            // As the files ninja makes (`bin/NAME`): a target's name may differ from its file's.
            cmd.args(HARNESS_TARGETS)
                .args(from_ctest.iter().map(|p| format!("bin/{p}")));
        }
        Targets::All => {
            say("build-stock: step 2/2 build (ninja) of every target; progress every 15 s")
        }
    }
    let f = proc::run(
        &mut cmd,
        &RunOpts {
            label: "build-stock ninja",
            timeout: Duration::from_secs(4 * 3600),
            echo: false,
            progress_every: 15,
        },
        &mut watch,
    )?;
    std::fs::write(
        paths.ab_dir().join("build-stock-ninja.log"),
        [&f.stdout[..], &f.stderr[..]].concat(),
    )
    .ok();
    if !f.success() {
        bail!(
            "ninja failed ({}) after {}; last lines:\n{}",
            f.ended(),
            fmt_secs(f.seconds),
            watch.tail.iter().cloned().collect::<Vec<_>>().join("\n")
        );
    }
    let stamp_text = serde_json::to_string_pretty(&want)?;
    std::fs::write(&stamp_path, stamp_text)
        .with_context(|| format!("writing {}", stamp_path.display()))?;
    say(&format!(
        "build-stock: done in {} ({} ninja steps run); stamp {}",
        fmt_secs(started.elapsed().as_secs_f64()),
        watch.done,
        stamp_path.display()
    ));
    Ok(dir)
}

/// The last `n` lines of a byte buffer, as text.
pub fn tail(bytes: &[u8], n: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `llama-*`/`ggml-*` program the repository's Rust code names in a string literal,
    /// or its shell scripts run from a build folder (`$stock/NAME`), is one of
    /// [`HARNESS_TARGETS`], so the default build has it. (`test-*` programs come with
    /// `tests/all`.) A name that is not a program goes in `NOT_PROGRAMS`.
    #[test]
    fn harness_targets_cover_the_programs_the_repository_runs() {
        const NOT_PROGRAMS: &[&str] = &["ggml-sched-dump", "llama-cpp-python", "llama-stock"];
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let files = Command::new("git")
            .arg("-C")
            .arg(&root)
            .args(["ls-files", "*.rs", "*.sh"])
            .output()
            .expect("git ls-files");
        let listing = String::from_utf8(files.stdout).unwrap();
        let mut named = std::collections::BTreeSet::new();
        for file in listing.lines() {
            // The GPU scripts build their own targets (GPU_TARGETS); this file lists them.
            if file.starts_with("gpu/") || file == "crates/ab/src/stock.rs" {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(root.join(file)) else {
                continue;
            };
            let is_shell = file.ends_with(".sh");
            for (i, _) in text.match_indices(['"', '/']) {
                let rest = &text[i + 1..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
                    .collect();
                if !(name.starts_with("llama-") || name.starts_with("ggml-")) || name.ends_with('-')
                {
                    continue;
                }
                let after = rest[name.len()..].chars().next();
                let before = &text[..i];
                let program = if is_shell {
                    // `$stock/NAME`, `${bin}/NAME`, `$S/NAME`; not `$logs/NAME.log`.
                    text[i..].starts_with('/')
                        && before.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '}')
                        && !before.ends_with("logs")
                        && !before.ends_with("out")
                        && after != Some('.')
                } else {
                    text[i..].starts_with('"') && after == Some('"')
                };
                if program {
                    named.insert(name);
                }
            }
        }
        assert!(
            named.contains("llama-simple") && named.contains("llama-bench"),
            "the scan found none of the programs it must find: {named:?}"
        );
        let missing: Vec<&String> = named
            .iter()
            .filter(|n| {
                !HARNESS_TARGETS.contains(&n.as_str()) && !NOT_PROGRAMS.contains(&n.as_str())
            })
            .collect();
        assert!(
            missing.is_empty(),
            "named by the repository but not built by `ab build-stock`: {missing:?} \
             (add them to HARNESS_TARGETS, or to NOT_PROGRAMS when they are not programs)"
        );
    }

    #[test]
    fn ctest_programs_are_the_build_files_its_tests_name() {
        let bin = "/b/bin/";
        let text = concat!(
            "# CMake generated Testfile\n",
            "add_test([=[test-sampling]=] \"/b/bin/test-sampling\")\n",
            "set_tests_properties([=[test-sampling]=] PROPERTIES LABEL \"main\" WORKING_DIRECTORY \"/b/bin/\")\n",
            "add_test([=[test-rpc-multi-server]=] \"bash\" \"/src/tests/t.sh\" \"/b/bin/ggml-rpc-server\" \"/b/bin/test-rpc-multi-server\")\n",
            "add_test([=[dl]=] \"/usr/bin/cmake\" \"-DDEST=/b/tinyllamas/m.gguf\" \"-P\" \"/src/cmake/d.cmake\")\n",
            "add_test([=[nested]=] \"/b/bin/sub/x\")\n",
        );
        assert_eq!(
            programs_of_ctest_file(text, bin),
            vec!["test-sampling", "ggml-rpc-server", "test-rpc-multi-server"]
        );
    }

    #[test]
    fn cache_matching() {
        let src = Path::new("/src/llama.cpp");
        let mut text = String::from("# comment\n//doc\nCMAKE_GENERATOR:INTERNAL=Ninja\nCMAKE_HOME_DIRECTORY:INTERNAL=/src/llama.cpp\n");
        for (k, v) in FLAGS {
            let v = if *v == "ON" { "TRUE" } else { v };
            text.push_str(&format!("{k}:BOOL={v}\n"));
        }
        assert_eq!(cache_differences(&text, src), Vec::<String>::new());
        let text2 = text.replace("GGML_RPC:BOOL=TRUE", "GGML_RPC:BOOL=OFF");
        let d = cache_differences(&text2, src);
        assert_eq!(d, vec!["GGML_RPC: have OFF, want ON".to_string()]);
        assert_eq!(cache_differences(&text, Path::new("/elsewhere")).len(), 1);
    }

    #[test]
    fn ninja_lines() {
        assert_eq!(
            ninja_progress("[12/345] Building CXX object x.o"),
            Some((12, 345))
        );
        assert_eq!(ninja_progress("ninja: no work to do."), None);
    }
}
