//! The folder the user called the harness from, against which every relative path they give
//! (an argument such as `--model m.gguf`, a dump folder) is taken, as any command-line tool
//! takes it.
//!
//! The harness does not always run there: the `./ab` script changes into the workspace root
//! before it starts the harness, and the harness starts its tools (`ab bench`, `ab view`)
//! from the root or the bundle's folder. So the folder travels in [`CALLER_DIR_VAR`]: the
//! script sets it to the folder it was called in, the harness to its own caller's folder for
//! each tool it starts. A binary started without it (a bundle's `ab`, `target/release/view`)
//! was called where it runs, so its current directory at start is the caller's.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The environment variable that carries the caller's folder (an absolute path) from the
/// `./ab` script to the harness and from the harness to the tools it starts.
pub const CALLER_DIR_VAR: &str = "AB_CALLER_DIR";

/// Read once: [`CALLER_DIR_VAR`] when it holds an absolute path, else the current directory
/// (None when even that cannot be read, a folder removed under the process).
static CALLER_DIR: OnceLock<Option<PathBuf>> = OnceLock::new();

fn read_caller_dir() -> Option<PathBuf> {
    std::env::var_os(CALLER_DIR_VAR)
        .map(PathBuf::from)
        .filter(|d| d.is_absolute())
        .or_else(|| std::env::current_dir().ok())
}

/// Reads the caller's folder (see [`caller_dir`]) and removes [`CALLER_DIR_VAR`] from this
/// process's environment. Call it first thing in `main`, before any thread starts (removing
/// a variable is not safe while another thread may read the environment) and before the
/// arguments are parsed.
///
/// Removed because the variable speaks to the one process it was given to: a process this
/// one starts in turn (a test binary running `ab` from the root with paths relative to the
/// root, the view tool given the harness's own paths) was called from where this process
/// starts it, not from the user's folder. A tool that should take paths from the user's
/// folder gets the variable again explicitly ([`caller_env`]).
pub fn take_caller_dir() -> Option<&'static Path> {
    let dir = caller_dir();
    if std::env::var_os(CALLER_DIR_VAR).is_some() {
        std::env::remove_var(CALLER_DIR_VAR);
    }
    dir
}

/// The folder the user called this process from: [`CALLER_DIR_VAR`] when it holds an
/// absolute path (a relative or empty value is ignored), else the current directory when it
/// was first asked for (nothing in the harness changes directory). None only when neither
/// can be read.
pub fn caller_dir() -> Option<&'static Path> {
    CALLER_DIR.get_or_init(read_caller_dir).as_deref()
}

/// The `(name, value)` to set in the environment of a tool started for the user with their
/// arguments, so that it takes their relative paths from their folder too; None when the
/// folder is not known.
pub fn caller_env() -> Option<(&'static str, OsString)> {
    caller_dir().map(|d| (CALLER_DIR_VAR, d.as_os_str().to_owned()))
}

/// A path the user gave, as they meant it: a relative path is taken from the folder they
/// called the harness from ([`caller_dir`]); an absolute or empty path is returned as it is
/// (an empty one stays empty, for the error that names it). Use it wherever a path from the
/// command line or from a user's environment variable enters; the paths the harness makes
/// itself are absolute already.
pub fn caller_path(path: &Path) -> PathBuf {
    resolve_from(caller_dir(), path)
}

/// [`caller_path`] against a given folder: `path` joined to `dir` when it is relative and not
/// empty and `dir` is known, else `path` unchanged. Nothing is read from the disk: the path
/// need not exist, and `..` and links are left to the system, which resolves them as it
/// would for a program started in `dir`.
fn resolve_from(dir: Option<&Path>, path: &Path) -> PathBuf {
    match dir {
        Some(d) if path.is_relative() && !path.as_os_str().is_empty() => d.join(path),
        _ => path.to_path_buf(),
    }
}

/// A loader search list of the user's environment (`LD_LIBRARY_PATH`, `LD_PRELOAD`) with its
/// relative entries taken from the caller's folder, as [`caller_path`] takes a path, so that a
/// program the harness starts in another folder (the workspace root) loads what the user
/// meant. Matches how glibc's loader reads each variable:
///
/// - `LD_LIBRARY_PATH` (any other `var` too): entries split at `:` and `;`; an empty entry
///   means the current directory, so it becomes the caller's folder; an entry starting with
///   `$` (`$ORIGIN`, `$LIB`, `$PLATFORM`) is the loader's to expand and stays.
/// - `LD_PRELOAD`: entries split at `:` and spaces; only an entry holding a `/` is a path (a
///   bare name is looked up in the library path) and is resolved; empty entries are skipped
///   by the loader and dropped.
///
/// Returns the list joined with `:`, or the value unchanged (with the reason, for a warning)
/// when it is not UTF-8 or a resolved entry would hold one of the list's separators, which
/// would split it into other entries.
pub fn caller_search_list(var: &str, value: &std::ffi::OsStr) -> Result<OsString, String> {
    resolve_search_list(caller_dir(), var, value)
}

fn resolve_search_list(
    dir: Option<&Path>,
    var: &str,
    value: &std::ffi::OsStr,
) -> Result<OsString, String> {
    let Some(text) = value.to_str() else {
        return Err(format!(
            "{var} is not UTF-8; its relative entries are left to the program's folder"
        ));
    };
    let preload = var == "LD_PRELOAD";
    let separators: &[char] = if preload { &[':', ' '] } else { &[':', ';'] };
    let mut out = Vec::new();
    for entry in text.split(separators) {
        if preload && entry.is_empty() {
            continue;
        }
        let resolved = if entry.starts_with('$') || (preload && !entry.contains('/')) {
            entry.to_string()
        } else if entry.is_empty() {
            match dir {
                Some(d) => d.display().to_string(),
                None => String::new(),
            }
        } else {
            resolve_from(dir, Path::new(entry)).display().to_string()
        };
        if resolved.contains(separators) && resolved != entry {
            return Err(format!(
                "{var}: the entry {entry:?} taken from the caller's folder would be {resolved:?}, \
                 which holds a separator of the list; its relative entries are left to the \
                 program's folder"
            ));
        }
        out.push(resolved);
    }
    Ok(OsString::from(out.join(":")))
}

/// The clap value parser of a path argument: the path as [`caller_path`] resolves it. Its
/// errors are those of clap's own `PathBuf` parser (an empty value is refused).
///
/// ```text
/// #[arg(long, value_name = "FILE", value_parser = bundle::caller_path_parser())]
/// model: Option<PathBuf>,
/// ```
pub fn caller_path_parser() -> impl clap::builder::TypedValueParser<Value = PathBuf> {
    use clap::builder::TypedValueParser;
    clap::builder::PathBufValueParser::new().map(|p| caller_path(&p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relative_path_is_taken_from_the_callers_folder() {
        let dir = Some(Path::new("/home/u/work"));
        assert_eq!(
            resolve_from(dir, Path::new("m.gguf")),
            Path::new("/home/u/work/m.gguf")
        );
        assert_eq!(
            resolve_from(dir, Path::new("./dumps/a")),
            Path::new("/home/u/work/./dumps/a")
        );
        // `..` is kept for the system: through a link it need not be the textual parent.
        assert_eq!(
            resolve_from(dir, Path::new("../b/lib.so")),
            Path::new("/home/u/work/../b/lib.so")
        );
    }

    #[test]
    fn absolute_and_empty_paths_stay_as_given() {
        let dir = Some(Path::new("/home/u/work"));
        assert_eq!(
            resolve_from(dir, Path::new("/opt/m.gguf")),
            Path::new("/opt/m.gguf")
        );
        assert_eq!(resolve_from(dir, Path::new("")), Path::new(""));
        // No folder known: nothing to join to.
        assert_eq!(resolve_from(None, Path::new("m.gguf")), Path::new("m.gguf"));
    }

    #[test]
    fn library_path_entries_are_taken_from_the_callers_folder() {
        let dir = Some(Path::new("/home/u/work"));
        let got = resolve_search_list(
            dir,
            "LD_LIBRARY_PATH",
            std::ffi::OsStr::new("lib:/opt/l;../x::$ORIGIN/y"),
        )
        .unwrap();
        assert_eq!(
            got,
            "/home/u/work/lib:/opt/l:/home/u/work/../x:/home/u/work:$ORIGIN/y"
        );
        // No folder known: relative entries stay relative.
        assert_eq!(
            resolve_search_list(None, "LD_LIBRARY_PATH", std::ffi::OsStr::new("lib:/opt")).unwrap(),
            "lib:/opt"
        );
    }

    #[test]
    fn preload_paths_are_resolved_and_bare_names_kept() {
        let dir = Some(Path::new("/home/u/work"));
        let got = resolve_search_list(
            dir,
            "LD_PRELOAD",
            std::ffi::OsStr::new("libfoo.so ./wrap.so:/abs/p.so  sub/q.so"),
        )
        .unwrap();
        assert_eq!(
            got,
            "libfoo.so:/home/u/work/./wrap.so:/abs/p.so:/home/u/work/sub/q.so"
        );
    }

    #[test]
    fn a_caller_folder_holding_a_separator_leaves_the_list_as_given() {
        let err = resolve_search_list(
            Some(Path::new("/tmp/a:b")),
            "LD_LIBRARY_PATH",
            std::ffi::OsStr::new("lib:/opt"),
        )
        .unwrap_err();
        assert!(
            err.contains("LD_LIBRARY_PATH") && err.contains("/tmp/a:b/lib"),
            "{err}"
        );
        let err = resolve_search_list(
            Some(Path::new("/tmp/w s")),
            "LD_PRELOAD",
            std::ffi::OsStr::new("./p.so"),
        )
        .unwrap_err();
        assert!(err.contains("/tmp/w s/./p.so"), "{err}");
        // Absolute entries alone need no folder, whatever it holds.
        assert_eq!(
            resolve_search_list(
                Some(Path::new("/tmp/a:b")),
                "LD_LIBRARY_PATH",
                std::ffi::OsStr::new("/opt/l")
            )
            .unwrap(),
            "/opt/l"
        );
    }

    #[test]
    fn the_parser_resolves_what_it_parses() {
        use clap::builder::TypedValueParser;
        let cmd = clap::Command::new("t");
        let parser = caller_path_parser();
        let p = parser
            .parse_ref(&cmd, None, std::ffi::OsStr::new("sub/m.gguf"))
            .unwrap();
        assert!(p.is_absolute(), "{}", p.display());
        assert_eq!(p, caller_dir().unwrap().join("sub/m.gguf"));
        let p = parser
            .parse_ref(&cmd, None, std::ffi::OsStr::new("/abs/m.gguf"))
            .unwrap();
        assert_eq!(p, Path::new("/abs/m.gguf"));
        assert!(parser
            .parse_ref(&cmd, None, std::ffi::OsStr::new(""))
            .is_err());
    }
}
