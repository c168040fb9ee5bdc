//! Building the C driver and running it against one library (an "arm"), with crash
//! isolation: a process that dies inside a seed is recorded for that seed and a new
//! process resumes at the next seed.

use crate::outcome::{parse_blocks, Crash, SeedRun};
use anyhow::{bail, Context, Result};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use wait_timeout::ChildExt;

/// The file name the dynamic loader looks for (the DT_NEEDED entry of the driver).
pub const SONAME: &str = "libggml-base.so.0";

/// The compiled C driver.
pub struct Program {
    /// Path of the executable (`target/sched-diff/sched_diff`).
    pub exe: PathBuf,
}

/// One side of the comparison: a library file and the directory that presents it to the
/// loader under [`SONAME`].
#[derive(Debug, Clone)]
pub struct Arm {
    /// `A`, `B`, or `B (rule off)` ([`Arm::with_rule_off`]).
    pub label: &'static str,
    /// The library file as given on the command line, canonicalized.
    pub lib: PathBuf,
    /// A directory holding only a symlink `libggml-base.so.0` -> `lib`; it becomes the
    /// process's whole `LD_LIBRARY_PATH`.
    pub dir: PathBuf,
    /// Extra environment for this arm's processes (the self-test's perturbation).
    pub env: Vec<(String, String)>,
}

impl Arm {
    /// Prepares `<work>/arm-<label>/libggml-base.so.0` -> `lib` (`work` is private to this
    /// process). Errors when `lib` does not exist or is not an ELF shared library exporting
    /// [`SCHED_SYMBOL`] ([`check_library`]).
    pub fn new(label: &'static str, lib: &Path, work: &Path) -> Result<Arm> {
        let given = lib;
        let lib = lib
            .canonicalize()
            .with_context(|| format!("library for arm {label}: {}", lib.display()))?;
        let bytes = std::fs::read(&lib)
            .with_context(|| format!("library for arm {label}: {}", given.display()))?;
        check_library(label, given, &bytes)?;
        let dir = work.join(format!("arm-{}", label.to_ascii_lowercase()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let link = dir.join(SONAME);
        if link.symlink_metadata().is_ok() {
            std::fs::remove_file(&link).with_context(|| format!("removing {}", link.display()))?;
        }
        std::os::unix::fs::symlink(&lib, &link)
            .with_context(|| format!("linking {} -> {}", link.display(), lib.display()))?;
        Ok(Arm {
            label,
            lib,
            dir,
            env: Vec::new(),
        })
    }

    /// The same library and environment with our in-place storage rule turned off
    /// (`GGML_SCHED_INPLACE_RULE=0`): the parity mode, in which our scheduler must decide
    /// exactly as stock. A stock library ignores the variable.
    pub fn with_rule_off(&self) -> Arm {
        let mut arm = self.clone();
        arm.label = "B (rule off)";
        arm.env.retain(|(k, _)| k != "GGML_SCHED_INPLACE_RULE");
        arm.env.push(("GGML_SCHED_INPLACE_RULE".into(), "0".into()));
        arm
    }

    /// The same library and environment without the self-test's perturbation and crash
    /// (`SCHED_DIFF_PERTURB`, `SCHED_DIFF_CRASH_SEED`): what B prints when nothing is
    /// planted, against which the self-test tells which perturbations changed B.
    pub fn without_self_test(&self) -> Arm {
        let mut arm = self.clone();
        arm.label = "B (unperturbed)";
        arm.env
            .retain(|(k, _)| k != "SCHED_DIFF_PERTURB" && k != "SCHED_DIFF_CRASH_SEED");
        arm
    }

    fn command(&self, exe: &Path) -> Command {
        let mut cmd = Command::new(exe);
        // LD_PRELOAD would put another file's functions before the arm's library: not passed
        // on (the runner says so once, `preload_note`)
        cmd.env("LD_LIBRARY_PATH", &self.dir)
            .env_remove("LD_PRELOAD")
            .env("GGML_NO_BACKTRACE", "1")
            .env_remove("SCHED_DIFF_PERTURB")
            .env_remove("SCHED_DIFF_CRASH_SEED")
            .env_remove("GGML_SCHED_DEBUG");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }
}

/// The function every arm's library must export: the scheduler's constructor.
pub const SCHED_SYMBOL: &str = "ggml_backend_sched_new";

/// Checks, before anything is compiled or run, that `bytes` (the contents of `path`, arm
/// `label`'s library) is an ELF shared object whose dynamic symbol table defines
/// [`SCHED_SYMBOL`]. The error is one line naming the arm, the file and what it is not.
pub fn check_library(label: &str, path: &Path, bytes: &[u8]) -> Result<()> {
    let what = |why: &str| anyhow::anyhow!("arm {label}: {} {why}", path.display());
    if bytes.len() < 52 || &bytes[..4] != b"\x7fELF" {
        return Err(what(
            "is not an ELF file (a shared library libggml-base.so.0 is expected)",
        ));
    }
    use object::read::elf::{ElfFile, FileHeader};
    use object::{elf, Endianness, FileKind, Object, ObjectSymbol, ObjectSymbolTable};
    /// The ELF type and whether the dynamic symbol table defines [`SCHED_SYMBOL`] (`None`:
    /// no readable table), by the `object` crate's reader.
    fn facts<H: FileHeader<Endian = Endianness>>(bytes: &[u8]) -> Option<(u16, Option<bool>)> {
        let file = ElfFile::<H>::parse(bytes).ok()?;
        let e_type = file.elf_header().e_type(file.endian());
        let exports = file.dynamic_symbol_table().map(|t| {
            t.symbols()
                .any(|s| !s.is_undefined() && s.name() == Ok(SCHED_SYMBOL))
        });
        Some((e_type, exports))
    }
    let read = match FileKind::parse(bytes) {
        Ok(FileKind::Elf32) => facts::<elf::FileHeader32<Endianness>>(bytes),
        Ok(FileKind::Elf64) => facts::<elf::FileHeader64<Endianness>>(bytes),
        _ => return Err(what("is an ELF file of an unknown class")),
    };
    let (e_type, exports) = read.unwrap_or((elf::ET_DYN, None));
    if e_type != elf::ET_DYN {
        let kind = match e_type {
            elf::ET_REL => "a relocatable object (.o)",
            elf::ET_EXEC => "an executable",
            elf::ET_CORE => "a core dump",
            _ => "not a shared object",
        };
        return Err(what(&format!(
            "is {kind}, not a shared library (ELF type {e_type})"
        )));
    }
    match exports {
        Some(true) => Ok(()),
        Some(false) => Err(what(&format!(
            "is an ELF shared object that does not export {SCHED_SYMBOL} (not a libggml-base)"
        ))),
        None => Err(what(&format!(
            "is an ELF shared object without a readable dynamic symbol table (cannot tell whether it exports {SCHED_SYMBOL})"
        ))),
    }
}

/// Compiles `src` with the flags the brief fixes (C11, `-Wall -Wextra -Wpedantic -Werror`)
/// against the pinned headers, together with the shared fake backend
/// (`cabi-tests/common/fake_backend.c`, found beside `src`'s directory), linked against
/// `link_dir/libggml-base.so.0`, into `work/sched_diff`. The compiler is `$CC` or `cc`.
pub fn compile(src: &Path, ggml_dir: &Path, link_dir: &Path, work: &Path) -> Result<Program> {
    let common = src
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."))
        .join("common");
    std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    let exe = work.join("sched_diff");
    let tmp = work.join(format!("sched_diff.tmp{}", std::process::id()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let out = Command::new(&cc)
        .args([
            "-std=c11",
            "-O1",
            "-g",
            "-Wall",
            "-Wextra",
            "-Wpedantic",
            "-Werror",
        ])
        .arg(format!("-I{}", ggml_dir.join("include").display()))
        .arg(format!("-I{}", ggml_dir.join("src").display()))
        .arg(format!("-I{}", common.display()))
        .arg(src)
        .arg(common.join("fake_backend.c"))
        .arg("-o")
        .arg(&tmp)
        .arg(format!("-L{}", link_dir.display()))
        .arg(format!("-l:{SONAME}"))
        .output()
        .with_context(|| format!("running {cc}"))?;
    if !out.status.success() {
        bail!(
            "compiling {} failed:\n{}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::rename(&tmp, &exe).with_context(|| format!("renaming to {}", exe.display()))?;
    Ok(Program { exe })
}

/// What the driver's process loaded, as it reports with `SCHED_DIFF_MAPS=1` (no seeds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The mapped files named `*ggml*` (`MAPPED` records, from `/proc/self/maps`).
    pub mapped: Vec<PathBuf>,
    /// For each scheduler and allocator function the run calls, the file the loader
    /// resolves it to (`SYMBOL <name> <path>` records; `?` when unresolved).
    pub symbols: Vec<(String, String)>,
}

/// Reads the `MAPPED` and `SYMBOL` records of a probe's output.
pub fn parse_probe(stdout: &str) -> Probe {
    let mut probe = Probe {
        mapped: Vec::new(),
        symbols: Vec::new(),
    };
    for l in stdout.lines() {
        if let Some(path) = l.strip_prefix("MAPPED ") {
            probe.mapped.push(PathBuf::from(path));
        } else if let Some((name, path)) = l.strip_prefix("SYMBOL ").and_then(|r| r.split_once(' '))
        {
            probe.symbols.push((name.to_string(), path.to_string()));
        }
    }
    probe
}

/// Checks that every probed function comes from `lib` (compared after resolving
/// symlinks): a function another file provides (an `LD_PRELOAD`, `/etc/ld.so.preload`)
/// would mean the arm does not run the library it names. Errors name the first such
/// function and its file; a probe without `SYMBOL` records is an error too.
pub fn check_symbols(probe: &Probe, label: &str, lib: &Path) -> Result<()> {
    if probe.symbols.is_empty() {
        bail!("arm {label}: the driver reported no SYMBOL records (an old driver?)");
    }
    for (name, path) in &probe.symbols {
        let real = Path::new(path).canonicalize().ok();
        if real.as_deref() != Some(lib) {
            bail!(
                "arm {label}: {name} comes from {path}, not from the arm's library {} (LD_PRELOAD or /etc/ld.so.preload?)",
                lib.display()
            );
        }
    }
    Ok(())
}

/// Asks the driver (`SCHED_DIFF_MAPS=1`, no seeds) which ggml library files its process
/// mapped, as read from its own `/proc/self/maps`, and which file provides each scheduler
/// function it calls.
pub fn probe(prog: &Program, arm: &Arm) -> Result<Probe> {
    let out = arm
        .command(&prog.exe)
        .args(["0", "0"])
        .env("SCHED_DIFF_MAPS", "1")
        .output()
        .context("running the driver for its maps")?;
    if !out.status.success() {
        bail!(
            "driver failed under arm {}: {}",
            arm.label,
            failure_text(out.status, &out.stderr)
        );
    }
    Ok(parse_probe(&String::from_utf8_lossy(&out.stdout)))
}

struct ProcessResult {
    stdout: String,
    stderr: String,
    /// `None` when the process exited with status 0.
    failure: Option<String>,
}

fn describe_signal(sig: i32) -> String {
    let name = match sig {
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        _ => "",
    };
    if name.is_empty() {
        format!("signal {sig}")
    } else {
        format!("signal {sig} ({name})")
    }
}

fn run_once(prog: &Program, arm: &Arm, seeds: &[u64], timeout: Duration) -> Result<ProcessResult> {
    let (first, last) = match (seeds.first(), seeds.last()) {
        (Some(&f), Some(&l)) => (f, l),
        _ => bail!("no seeds to run"),
    };
    let mut cmd = arm.command(&prog.exe);
    cmd.arg(first.to_string())
        .arg((last - first + 1).to_string())
        .env_remove("SCHED_DIFF_ONLY");
    if last - first + 1 != seeds.len() as u64 {
        let list: Vec<String> = seeds.iter().map(u64::to_string).collect();
        cmd.env("SCHED_DIFF_ONLY", list.join(","));
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", prog.exe.display()))?;
    let mut so = child.stdout.take().context("no stdout pipe")?;
    let mut se = child.stderr.take().context("no stderr pipe")?;
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = so.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = se.read_to_end(&mut v);
        v
    });
    let failure = match child
        .wait_timeout(timeout)
        .context("waiting for the driver")?
    {
        Some(status) => {
            use std::os::unix::process::ExitStatusExt;
            if status.success() {
                None
            } else if let Some(sig) = status.signal() {
                Some(describe_signal(sig))
            } else {
                Some(format!("exit code {}", status.code().unwrap_or(-1)))
            }
        }
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Some(format!("timeout after {} s", timeout.as_secs()))
        }
    };
    let stdout = String::from_utf8_lossy(&out_reader.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&err_reader.join().unwrap_or_default()).into_owned();
    Ok(ProcessResult {
        stdout,
        stderr,
        failure,
    })
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Runs seeds `start .. start+count` under `arm` and returns one [`SeedRun`] per seed, in
/// order. A process that dies inside a seed marks that seed crashed; the next process
/// starts at the following seed. `timeout` bounds each process.
pub fn run_range(
    prog: &Program,
    arm: &Arm,
    start: u64,
    count: u64,
    timeout: Duration,
) -> Result<Vec<SeedRun>> {
    let seeds: Vec<u64> = (start..start + count).collect();
    run_seeds(prog, arm, &seeds, timeout)
}

/// Runs the given seeds (ascending, without repeats) under `arm`, as [`run_range`] does a
/// range: one process from the first to the last, told by `SCHED_DIFF_ONLY` which seeds to
/// run when they are not contiguous; after a crash, a new process for the seeds left.
pub fn run_seeds(
    prog: &Program,
    arm: &Arm,
    seeds: &[u64],
    timeout: Duration,
) -> Result<Vec<SeedRun>> {
    let mut next = 0;
    let mut runs = Vec::with_capacity(seeds.len());
    while next < seeds.len() {
        let res = run_once(prog, arm, &seeds[next..], timeout)?;
        let blocks = parse_blocks(&res.stdout)
            .with_context(|| format!("arm {}: output of seeds from {}", arm.label, seeds[next]))?;
        let mut crashed_in_block = false;
        for b in blocks {
            if next >= seeds.len() || b.seed != seeds[next] {
                bail!(
                    "arm {}: expected seed {}, the driver printed seed {}",
                    arm.label,
                    seeds.get(next).map_or("none".to_string(), u64::to_string),
                    b.seed
                );
            }
            let crash = if b.complete {
                None
            } else {
                crashed_in_block = true;
                Some(Crash {
                    how: res
                        .failure
                        .clone()
                        .unwrap_or_else(|| "stopped without END".to_string()),
                    abort: b.abort,
                    stderr_tail: tail(&res.stderr, 8),
                })
            };
            runs.push(SeedRun {
                seed: b.seed,
                lines: b.lines,
                crash,
            });
            next += 1;
        }
        if next < seeds.len() && !crashed_in_block {
            // died (or stopped) between seeds: charge the next seed so the loop advances
            runs.push(SeedRun {
                seed: seeds[next],
                lines: Vec::new(),
                crash: Some(Crash {
                    how: res
                        .failure
                        .clone()
                        .unwrap_or_else(|| "exited before the seed began".to_string()),
                    abort: None,
                    stderr_tail: tail(&res.stderr, 8),
                }),
            });
            next += 1;
        }
    }
    Ok(runs)
}

/// How a driver process failed: its exit status or signal (a library the loader maps but
/// cannot run, a truncated file say, dies by a signal and prints nothing), then what it
/// printed on stderr, if anything.
fn failure_text(status: std::process::ExitStatus, stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    if text.is_empty() {
        format!("{status}, nothing on stderr")
    } else {
        format!("{status}: {text}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver killed by a signal before it printed anything is not reported as an empty
    /// reason ("driver failed under arm B: ").
    #[test]
    fn a_silent_failure_names_its_status() {
        let out = Command::new("sh")
            .args(["-c", "kill -BUS $$"])
            .output()
            .unwrap();
        let t = failure_text(out.status, &out.stderr);
        assert!(t.contains("SIGBUS"), "{t}");
        assert!(t.ends_with("nothing on stderr"), "{t}");
        let out = Command::new("sh")
            .args(["-c", "echo 'file too short' >&2; exit 127"])
            .output()
            .unwrap();
        assert_eq!(
            failure_text(out.status, &out.stderr),
            "exit status: 127: file too short"
        );
    }

    /// A stand-in driver (sh) with the real one's contract: seeds START..START+COUNT, only
    /// those in SCHED_DIFF_ONLY when set, a SIGSEGV inside SCHED_DIFF_CRASH_SEED.
    fn fake_driver(dir: &Path) -> Program {
        let exe = dir.join("fake_driver.sh");
        bundle::write_script(
            &exe,
            "#!/bin/sh\n\
             s=$1; end=$(($1 + $2))\n\
             while [ $s -lt $end ]; do\n\
               case \",$SCHED_DIFF_ONLY,\" in\n\
                 ,,|*,$s,*) echo \"SEED $s BEGIN\"; echo \"RAN $s\"\n\
                   [ \"$s\" = \"$SCHED_DIFF_CRASH_SEED\" ] && kill -SEGV $$\n\
                   echo \"SEED $s END\";;\n\
               esac\n\
               s=$((s + 1))\n\
             done\n",
        )
        .unwrap();
        Program { exe }
    }

    /// The rule-off rerun runs only the seeds it is given, in one process, and resumes after
    /// a crash with the listed seeds left (not the range's next seed).
    #[test]
    fn runs_only_the_listed_seeds_and_resumes_after_a_crash() {
        let dir = std::env::temp_dir().join(format!("sched-diff-seeds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let prog = fake_driver(&dir);
        let mut arm = Arm {
            label: "B",
            lib: dir.join("none"),
            dir: dir.clone(),
            env: vec![("SCHED_DIFF_CRASH_SEED".into(), "17".into())],
        };
        let t = Duration::from_secs(20);
        let runs = run_seeds(&prog, &arm, &[3, 17, 40, 41], t).unwrap();
        let seeds: Vec<u64> = runs.iter().map(|r| r.seed).collect();
        assert_eq!(seeds, vec![3, 17, 40, 41]);
        assert_eq!(runs[0].lines, vec!["RAN 3".to_string()]);
        assert!(runs[0].crash.is_none());
        assert_eq!(runs[1].lines, vec!["RAN 17".to_string()]);
        assert_eq!(runs[1].crash.as_ref().unwrap().how, "signal 11 (SIGSEGV)");
        assert_eq!(runs[2].lines, vec!["RAN 40".to_string()]);
        assert!(runs[3].crash.is_none());
        // a contiguous range needs no list
        arm.env.clear();
        let runs = run_range(&prog, &arm, 5, 3, t).unwrap();
        let seeds: Vec<u64> = runs.iter().map(|r| r.seed).collect();
        assert_eq!(seeds, vec![5, 6, 7]);
        // with the rule off, B's environment says so, its other variables kept
        arm.env.push(("GGML_ALLOC_LAYOUT".into(), "stock".into()));
        arm.env.push(("GGML_SCHED_INPLACE_RULE".into(), "1".into()));
        let off = arm.with_rule_off();
        assert_eq!(
            off.env,
            vec![
                ("GGML_ALLOC_LAYOUT".to_string(), "stock".to_string()),
                ("GGML_SCHED_INPLACE_RULE".to_string(), "0".to_string())
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A scheduler function that another file provides (an LD_PRELOAD'ed copy of stock under
    /// another name, say) fails the arm's check, naming the function and the file.
    #[test]
    fn a_function_from_another_file_fails_the_arm() {
        let dir = std::env::temp_dir().join(format!("sched-diff-sym-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lib = dir.join("libggml-base.so.0.1");
        std::fs::write(&lib, b"x").unwrap();
        let link = dir.join("libggml-base.so.0");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&lib, &link).unwrap();
        let lib = lib.canonicalize().unwrap();
        let text = format!(
            "MAPPED {0}\nSYMBOL ggml_backend_sched_new {1}\nSYMBOL ggml_gallocr_new {1}\n",
            lib.display(),
            link.display()
        );
        let probe = parse_probe(&text);
        assert_eq!(probe.mapped, vec![lib.clone()]);
        assert_eq!(probe.symbols.len(), 2);
        assert_eq!(probe.symbols[0].0, "ggml_backend_sched_new");
        // through the arm's symlink: the arm's file
        check_symbols(&probe, "B", &lib).unwrap();
        // one function from a preloaded file
        let text = format!(
            "SYMBOL ggml_backend_sched_new /tmp/stock-copy.so\nSYMBOL ggml_gallocr_new {}\n",
            link.display()
        );
        let e = check_symbols(&parse_probe(&text), "B", &lib)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("arm B: ggml_backend_sched_new comes from /tmp/stock-copy.so, not from"),
            "{e}"
        );
        // unresolved, or no records at all
        assert!(check_symbols(&parse_probe("SYMBOL ggml_gallocr_new ?\n"), "A", &lib).is_err());
        assert!(check_symbols(&parse_probe("MAPPED /x\n"), "A", &lib).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The arms run without the caller's LD_PRELOAD.
    #[test]
    fn the_arms_run_without_ld_preload() {
        let arm = Arm {
            label: "A",
            lib: PathBuf::from("/x"),
            dir: PathBuf::from("/d"),
            env: Vec::new(),
        };
        let cmd = arm.command(Path::new("/bin/true"));
        let envs: Vec<_> = cmd.get_envs().collect();
        assert!(envs.contains(&(std::ffi::OsStr::new("LD_PRELOAD"), None)));
        assert!(envs.contains(&(
            std::ffi::OsStr::new("LD_LIBRARY_PATH"),
            Some(std::ffi::OsStr::new("/d"))
        )));
    }

    /// A file that is not a libggml-base is refused up front, in one line that says what it
    /// is (was: a page of linker errors from compiling the driver against it).
    #[test]
    fn a_library_that_is_not_a_libggml_base_is_named_in_one_line() {
        let p = Path::new("/x/lib.so");
        let e = check_library(
            "A",
            p,
            b"not a library at all, a text file\n".repeat(4).as_slice(),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "arm A: /x/lib.so is not an ELF file (a shared library libggml-base.so.0 is expected)"
        );
        assert!(check_library("A", p, b"\x7fELF").is_err());
        // this test's own executable: an ELF file that exports no scheduler
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let e = check_library("B", p, &me).unwrap_err().to_string();
        assert!(
            e == "arm B: /x/lib.so is an ELF shared object that does not export ggml_backend_sched_new (not a libggml-base)"
                || e == "arm B: /x/lib.so is an executable, not a shared library (ELF type 2)",
            "{e}"
        );
        // the same bytes marked as an executable, and as an object file
        let mut exec = me.clone();
        exec[16] = 2;
        exec[17] = 0;
        assert_eq!(
            check_library("B", p, &exec).unwrap_err().to_string(),
            "arm B: /x/lib.so is an executable, not a shared library (ELF type 2)"
        );
        exec[16] = 1;
        assert!(check_library("B", p, &exec)
            .unwrap_err()
            .to_string()
            .contains("is a relocatable object (.o), not a shared library"));
        // a real libggml-base, where one is built
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for lib in [
            "target/llama-stock/bin/libggml-base.so.0",
            "target/ours/lib/libggml-base.so.0",
        ] {
            match std::fs::read(root.join(lib)) {
                Ok(bytes) => check_library("A", &root.join(lib), &bytes).unwrap(),
                Err(_) => eprintln!("skipped: {lib} is not built"),
            }
        }
    }
}
