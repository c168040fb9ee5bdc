//! The main job's placement pages (issue 17, point 4): each generation run of the job runs
//! with `GGML_SCHED_DUMP` set to a folder of its own (our scheduler writes its placement
//! records there; stock ignores the variable), arm B's generation works run once more with
//! `GGML_SCHED_INPLACE_RULE=0` (stock's placement through our scheduler, since stock writes
//! no record), and `./ab view` renders a page of arm B's records and an A/B page of rule off
//! against rule on. The pages are listed in `report.json` under `pages` and printed after
//! the table. `--no-view` skips all of it. A page that cannot be made (no Graphviz, say) is
//! reported with its error; it never fails the job.

use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::paths::Paths;

/// The variable our scheduler writes its records under.
pub const VAR: &str = "GGML_SCHED_DUMP";

/// One page the job wrote, or tried to.
#[derive(Debug, Clone, Serialize)]
pub struct Page {
    /// The work whose runs it shows.
    pub work: String,
    /// `placement` (one arm's records) or `ab` (rule off, as stock, against arm B).
    pub kind: &'static str,
    /// The HTML file (written when `error` is null).
    pub page: String,
    /// The dump folders it was made from.
    pub dumps: Vec<String>,
    /// Why it was not written; null when it was.
    pub error: Option<String>,
}

/// A name as a file-name part: letters, digits, `-` and `.` kept, the rest `_`.
fn slug(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The dump folder of `arm`'s run of `work` (`target/ab/dumps/ARM-WORK`).
pub fn dump_dir(paths: &Paths, arm: &str, work: &str) -> PathBuf {
    paths
        .ab_dir()
        .join("dumps")
        .join(format!("{}-{}", slug(arm), slug(work)))
}

/// Sets `GGML_SCHED_DUMP` (to a fresh, empty folder) and optionally
/// `GGML_SCHED_INPLACE_RULE` for the processes started while it lives; both are removed
/// when it is dropped. The harness runs one work at a time, so the variables are its own.
pub struct Env {
    rule: bool,
}

impl Env {
    /// Empties `dir` and points the variable at it; `rule_off` also sets
    /// `GGML_SCHED_INPLACE_RULE=0`.
    pub fn set(dir: &Path, rule_off: bool) -> Result<Env> {
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("emptying {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::env::set_var(VAR, dir);
        if rule_off {
            std::env::set_var("GGML_SCHED_INPLACE_RULE", "0");
        }
        Ok(Env { rule: rule_off })
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        std::env::remove_var(VAR);
        if self.rule {
            std::env::remove_var("GGML_SCHED_INPLACE_RULE");
        }
    }
}

/// The number of records in `dir`.
fn records(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("sched-"))
                .count()
        })
        .unwrap_or(0)
}

/// Builds the `view` tool (`cargo build --release -p view`) and returns its path; in a bundle,
/// the bundle's `view` binary as it is.
fn tool(paths: &Paths) -> Result<PathBuf> {
    if let Some(b) = &paths.bundle {
        let exe = b.join("view");
        if !exe.is_file() {
            bail!("the bundle {} has no view binary", b.display());
        }
        return Ok(exe);
    }
    let st = Command::new("cargo")
        .args(["build", "--release", "-q", "-p", "view", "--bin", "view"])
        .current_dir(&paths.root)
        .status()
        .context("running cargo")?;
    if !st.success() {
        bail!("`cargo build --release -p view` failed");
    }
    Ok(paths.target.join("release").join("view"))
}

/// What renders the pages: the view tool (built in a workspace, the bundle's own in a bundle),
/// once Graphviz's `dot` is found on `PATH`. Errors: `dot` does not run (then no page can be
/// made, and the job says so once), or the tool cannot be built or is missing.
pub fn renderer(paths: &Paths) -> Result<PathBuf> {
    check_dot("dot")?;
    tool(paths)
}

/// Whether the Graphviz program `dot` (the command name, looked up on `PATH`) runs: `dot -V`
/// must end with status 0 within [`DOT_WAIT`] (a hung one is killed). Its output is not read,
/// so a child it leaves behind holding a pipe cannot hang the job.
fn check_dot(dot: &str) -> Result<()> {
    let mut child = match Command::new(dot)
        .arg("-V")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("Graphviz `{dot}` is not on PATH; the Debian package graphviz has it")
        }
        Err(e) => bail!("Graphviz `{dot}` could not be started ({e})"),
    };
    let t0 = std::time::Instant::now();
    loop {
        if let Some(st) = child.try_wait().context("waiting for dot -V")? {
            if st.success() {
                return Ok(());
            }
            bail!("Graphviz `{dot} -V` failed ({st})");
        }
        if t0.elapsed() > DOT_WAIT {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "Graphviz `{dot} -V` did not end within {} s (killed)",
                DOT_WAIT.as_secs()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// How long `dot -V` may take.
const DOT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs the view tool with `args`; its error output when it fails.
fn render(exe: &Path, root: &Path, args: &[String]) -> Option<String> {
    match Command::new(exe).args(args).current_dir(root).output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(String::from_utf8_lossy(&o.stderr).trim().to_string()),
        Err(e) => Some(format!("running {}: {e}", exe.display())),
    }
}

/// The pages of the generation works `works`: arm `b`'s records (`placement`) and, where the
/// rule-off run wrote records too, rule off against arm `b` (`ab`), rendered by `exe` (from
/// [`renderer`]; when that is an error, every page carries it).
pub fn write_pages(paths: &Paths, exe: &Result<PathBuf>, b: &str, works: &[String]) -> Vec<Page> {
    let out = paths.ab_dir().join("view");
    let mut pages = Vec::new();
    for w in works {
        let on = dump_dir(paths, b, w);
        let off = dump_dir(paths, &format!("{b}-rule0"), w);
        let mut one = |kind: &'static str, page: PathBuf, dumps: Vec<&Path>, args: Vec<String>| {
            if exe.is_err() {
                // No page of this job: the last job's page and records at these paths would
                // pass for this job's.
                let _ = std::fs::remove_file(&page);
                for d in &dumps {
                    let _ = std::fs::remove_dir_all(d);
                }
            }
            let error = match (exe, dumps.iter().find(|d| records(d) == 0)) {
                (Err(e), _) => Some(format!("{e:#}")),
                (_, Some(d)) => Some(format!(
                    "no records in {} (arm {b} wrote none)",
                    d.display()
                )),
                (Ok(exe), None) => render(exe, &paths.root, &args),
            };
            if error.is_some() {
                // Not made by this job: an earlier job's page at this path would pass for it.
                let _ = std::fs::remove_file(&page);
            }
            pages.push(Page {
                work: w.clone(),
                kind,
                page: page.display().to_string(),
                dumps: dumps.iter().map(|d| d.display().to_string()).collect(),
                error,
            });
        };
        let page = out.join(format!("{}-{}.html", slug(b), slug(w)));
        let args = vec![
            on.display().to_string(),
            "--out".into(),
            page.display().to_string(),
            "--title".into(),
            format!("{w}, arm {b}: placement"),
            "--command".into(),
            format!(
                "./ab ab (work {w}, arm {b}, GGML_SCHED_DUMP={})",
                on.display()
            ),
        ];
        one("placement", page, vec![&on], args);
        let page = out.join(format!("{}-rule0-vs-{}.html", slug(w), slug(b)));
        let args = vec![
            "--a".into(),
            off.display().to_string(),
            "--b".into(),
            on.display().to_string(),
            "--out".into(),
            page.display().to_string(),
            "--title".into(),
            format!("{w}: stock's placement (rule off) against arm {b}"),
            "--command".into(),
            format!("./ab ab (work {w}, arm {b}; side A run again with GGML_SCHED_INPLACE_RULE=0)"),
        ];
        one("ab", page, vec![&off, &on], args);
    }
    pages
}

/// Adds `pages` to the report file at `path` (a JSON object).
pub fn merge(path: &Path, pages: &[Page]) -> Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    if let Some(o) = v.as_object_mut() {
        o.insert("pages".into(), serde_json::to_value(pages)?);
    }
    std::fs::write(path, serde_json::to_string_pretty(&v)?)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names() {
        assert_eq!(slug("backend-ops SET_ROWS"), "backend-ops_SET_ROWS");
        assert_eq!(slug("llama-simple"), "llama-simple");
        assert_eq!(slug("a/b"), "a_b");
    }

    #[test]
    fn a_missing_dot_is_named() {
        let e = format!("{:#}", check_dot("ab-test-no-such-dot").unwrap_err());
        assert!(
            e.starts_with("Graphviz `ab-test-no-such-dot` is not on PATH"),
            "{e}"
        );
        assert!(e.contains("graphviz"), "{e}");
        // `false` runs and fails: a `dot` that is there but broken is told apart.
        let e = format!("{:#}", check_dot("false").unwrap_err());
        assert!(e.starts_with("Graphviz `false -V` failed"), "{e}");
        // a file that is there but cannot be run is not called missing
        let e = format!("{:#}", check_dot("/etc/hostname").unwrap_err());
        assert!(e.contains("could not be started"), "{e}");
    }

    /// A page this job could not make (the tool failed, or a side wrote no records) leaves no
    /// earlier job's page at its path, and says why.
    #[test]
    fn a_page_not_made_leaves_no_older_page() {
        let d = std::env::temp_dir().join(format!("ab-views-stale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let paths = Paths {
            root: d.clone(),
            target: d.join("target"),
            bundle: None,
        };
        let w = "llama-simple".to_string();
        // arm ours wrote a record; its rule-off run wrote none
        let on = dump_dir(&paths, "ours", &w);
        std::fs::create_dir_all(&on).unwrap();
        std::fs::write(on.join("sched-1-000.json"), "{}").unwrap();
        let view = paths.ab_dir().join("view");
        std::fs::create_dir_all(&view).unwrap();
        let placement = view.join("ours-llama-simple.html");
        let ab = view.join("llama-simple-rule0-vs-ours.html");
        for p in [&placement, &ab] {
            std::fs::write(p, "an earlier job's page").unwrap();
        }
        // `false` stands for a view tool that fails
        let pages = write_pages(&paths, &Ok(PathBuf::from("false")), "ours", &[w]);
        assert_eq!(pages.len(), 2);
        assert!(pages.iter().all(|p| p.error.is_some()), "{pages:?}");
        assert!(pages[1]
            .error
            .as_deref()
            .unwrap()
            .starts_with("no records in "));
        assert!(!placement.exists() && !ab.exists());
        // this job's records stay
        assert!(on.join("sched-1-000.json").is_file());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn pages_are_merged_into_the_report() {
        let d = std::env::temp_dir().join(format!("ab-views-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("report.json");
        std::fs::write(&f, r#"{"version": 1, "complete": true}"#).unwrap();
        let p = Page {
            work: "llama-simple".into(),
            kind: "ab",
            page: "target/ab/view/x.html".into(),
            dumps: vec!["a".into(), "b".into()],
            error: Some("no records in a".into()),
        };
        merge(&f, &[p]).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        assert_eq!(v["version"], 1);
        assert_eq!(v["pages"][0]["kind"], "ab");
        assert_eq!(v["pages"][0]["dumps"][1], "b");
        assert_eq!(v["pages"][0]["error"], "no records in a");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
