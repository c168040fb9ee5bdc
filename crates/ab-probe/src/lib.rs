//! `libab_probe.so`: the in-process proof of which ggml and llama library files a process
//! really mapped.
//!
//! The harness loads this library into every process of a run with `LD_PRELOAD` and names an
//! output file in `GGML_AB_PROBE_OUT`. Then:
//!
//! - at startup (an `.init_array` constructor, which runs after every `DT_NEEDED` library is
//!   mapped), the probe reads `/proc/self/maps`, and for each mapped file whose name starts with
//!   `libggml` or `libllama` appends one JSON line to the output file:
//!   `{"pid":..,"event":"startup","name":"libggml-base","path":"/real/path","sha256":"..","exe":".."}`;
//! - every successful `dlopen` (interposed here, forwarded to the real one found with
//!   `dlsym(RTLD_NEXT, "dlopen")`) triggers a re-scan, so backends loaded later (for example
//!   through `GGML_BACKEND_PATH`) are recorded with `"event":"dlopen"`.
//!
//! Each library is recorded once per process (per pid: a forked child records again). Hashes
//! are cached per path. Lines are written whole, with one `write(2)` on a file opened with
//! `O_APPEND`, so the many processes of a test suite can share one output file.
//!
//! The probe never disturbs its host: without `GGML_AB_PROBE_OUT` it does nothing, every
//! panic is caught, I/O errors are ignored, and `errno` is preserved across the interposed
//! `dlopen`. Known limit: because the real `dlopen` is called from this library, a `dlopen`
//! of a bare file name no longer searches the *calling* library's `DT_RUNPATH` (glibc uses
//! the caller's one); ggml loads its backends by full path, so ggml is not affected.

use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

/// Environment variable naming the JSON-lines file the probe appends to.
pub const OUT_ENV: &str = "GGML_AB_PROBE_OUT";

/// One mapped library file, as found in `/proc/self/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapped {
    /// The path as the kernel reports it, without a ` (deleted)` suffix.
    pub path: String,
    /// True when the kernel says the file was deleted after it was mapped.
    pub deleted: bool,
}

/// The library name of a mapped file: its base name up to the first `.so`
/// (`/x/libggml-base.so.0.25.3` gives `libggml-base`).
pub fn library_name(path: &str) -> &str {
    let base = path.rsplit('/').next().unwrap_or(path);
    match base.find(".so") {
        Some(i) => &base[..i],
        None => base,
    }
}

/// True for the files the probe records: base name starting with `libggml` or `libllama`.
pub fn is_recorded(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    base.starts_with("libggml") || base.starts_with("libllama")
}

/// Parses the text of `/proc/<pid>/maps` and returns, in first-seen order and without
/// duplicates, the recorded library files (see [`is_recorded`]).
pub fn parse_maps(text: &str) -> Vec<Mapped> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for line in text.lines() {
        // address perms offset dev inode pathname; the pathname may contain spaces.
        let mut rest = line;
        for _ in 0..5 {
            rest = rest.trim_start();
            match rest.find(' ') {
                Some(i) => rest = &rest[i..],
                None => {
                    rest = "";
                    break;
                }
            }
        }
        let name = rest.trim();
        if !name.starts_with('/') {
            continue;
        }
        let (path, deleted) = match name.strip_suffix(" (deleted)") {
            Some(p) => (p, true),
            None => (name, false),
        };
        if is_recorded(path) && seen.insert(path.to_string()) {
            out.push(Mapped {
                path: path.to_string(),
                deleted,
            });
        }
    }
    out
}

/// Hex sha256 of a file, or `None` when it cannot be read.
pub fn sha256_file(path: &str) -> Option<String> {
    filehash::sha256_file(std::path::Path::new(path)).ok()
}

/// Builds one output line (with its trailing newline) for a mapped file.
pub fn record_line(
    pid: u32,
    event: &str,
    mapped: &Mapped,
    sha256: Option<&str>,
    exe: &str,
) -> String {
    let mut v = serde_json::json!({
        "pid": pid,
        "event": event,
        "name": library_name(&mapped.path),
        "path": mapped.path,
        "sha256": sha256,
        "exe": exe,
    });
    if mapped.deleted {
        v["deleted"] = serde_json::Value::Bool(true);
    }
    let mut s = v.to_string();
    s.push('\n');
    s
}

struct State {
    /// The pid the `emitted` set belongs to (a forked child starts over).
    pid: u32,
    emitted: HashSet<String>,
    hashes: HashMap<String, Option<String>>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Scans this process's maps and appends a line for every recorded library not yet written
/// by this process. Does nothing without `GGML_AB_PROBE_OUT`.
fn scan(event: &str) {
    let Some(out) = std::env::var_os(OUT_ENV) else {
        return;
    };
    if out.is_empty() {
        return;
    }
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    let mapped = parse_maps(&maps);
    let pid = std::process::id();
    let mut guard = match STATE.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    };
    let state = guard.get_or_insert_with(|| State {
        pid,
        emitted: HashSet::new(),
        hashes: HashMap::new(),
    });
    if state.pid != pid {
        state.pid = pid;
        state.emitted.clear();
    }
    let exe = std::fs::read_link("/proc/self/exe")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut text = String::new();
    for m in mapped {
        if state.emitted.contains(&m.path) {
            continue;
        }
        let sha = state
            .hashes
            .entry(m.path.clone())
            .or_insert_with(|| sha256_file(&m.path))
            .clone();
        text.push_str(&record_line(pid, event, &m, sha.as_deref(), &exe));
        state.emitted.insert(m.path);
    }
    drop(guard);
    if !text.is_empty() {
        append(&out, text.as_bytes());
    }
}

/// Appends `bytes` to `path` with one `write(2)` on an `O_APPEND` descriptor.
fn append(path: &std::ffi::OsStr, bytes: &[u8]) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(cpath) = std::ffi::CString::new(path.as_bytes()) else {
        return;
    };
    // SAFETY: `cpath` is a valid NUL-terminated string; the flags and mode are plain ints.
    let fd = unsafe {
        libc::open(
            cpath.as_ptr(),
            libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC,
            0o644 as libc::c_uint,
        )
    };
    if fd < 0 {
        return;
    }
    // SAFETY: `bytes` is a live slice for the duration of the call; `fd` is ours.
    unsafe {
        libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        libc::close(fd);
    }
}

/// Runs `f` with every panic caught and `errno` preserved.
fn guarded(f: impl FnOnce()) {
    // SAFETY: `__errno_location` returns this thread's errno slot, always valid.
    let saved = unsafe { *libc::__errno_location() };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved };
}

extern "C" fn on_load(_argc: c_int, _argv: *const *const c_char, _envp: *const *const c_char) {
    guarded(|| scan("startup"));
}

/// The constructor: glibc calls `.init_array` entries with (argc, argv, envp).
#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn(c_int, *const *const c_char, *const *const c_char) = on_load;

type DlopenFn = unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void;

static REAL_DLOPEN: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

fn real_dlopen() -> Option<DlopenFn> {
    let mut p = REAL_DLOPEN.load(Ordering::Acquire);
    if p.is_null() {
        let name: &CStr = c"dlopen";
        // SAFETY: RTLD_NEXT with a valid symbol name is a plain lookup.
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        if p.is_null() {
            return None;
        }
        REAL_DLOPEN.store(p, Ordering::Release);
    }
    // SAFETY: the symbol `dlopen` found after this object has the C signature of dlopen.
    Some(unsafe { std::mem::transmute::<*mut c_void, DlopenFn>(p) })
}

/// Interposed `dlopen(3)`: forwards to the real one, then records newly mapped libraries.
///
/// # Safety
/// Same contract as `dlopen(3)`: `filename` is NULL or a valid C string.
#[no_mangle]
pub unsafe extern "C" fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void {
    let Some(real) = real_dlopen() else {
        return std::ptr::null_mut();
    };
    // SAFETY: forwarded unchanged; the caller upholds dlopen's contract.
    let handle = unsafe { real(filename, flags) };
    if !handle.is_null() {
        guarded(|| scan("dlopen"));
    }
    handle
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0a0000000-55d0a0001000 r--p 00000000 fd:01 123 /usr/bin/prog
7f0000000000-7f0000010000 r--p 00000000 fd:01 456 /opt/a b/libggml-base.so.0
7f0000010000-7f0000020000 r-xp 00010000 fd:01 456 /opt/a b/libggml-base.so.0
7f0000020000-7f0000030000 r--p 00000000 fd:01 457 /opt/bin/libllama.so.0.5.0
7f0000030000-7f0000040000 r--p 00000000 fd:01 458 /tmp/libggml-hrx.so (deleted)
7f0000040000-7f0000050000 rw-p 00000000 00:00 0 [heap]
7f0000050000-7f0000060000 r--p 00000000 fd:01 459 /lib/x86_64-linux-gnu/libc.so.6
7f0000060000-7f0000070000 rw-p 00000000 00:00 0
";

    #[test]
    fn maps_are_filtered_and_deduplicated() {
        let got = parse_maps(MAPS);
        let paths: Vec<_> = got.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                "/opt/a b/libggml-base.so.0",
                "/opt/bin/libllama.so.0.5.0",
                "/tmp/libggml-hrx.so"
            ]
        );
        assert!(!got[0].deleted);
        assert!(got[2].deleted);
    }

    #[test]
    fn names_strip_the_version() {
        assert_eq!(library_name("/x/libggml-base.so.0.25.3"), "libggml-base");
        assert_eq!(library_name("libllama.so"), "libllama");
        assert_eq!(library_name("/x/libggml-hrx.so"), "libggml-hrx");
    }

    #[test]
    fn record_is_one_json_line() {
        let m = Mapped {
            path: "/p/\"q\"/libggml.so.0".into(),
            deleted: false,
        };
        let line = record_line(7, "startup", &m, Some("ab"), "/bin/x");
        assert!(line.ends_with('\n'));
        assert_eq!(line.matches('\n').count(), 1);
        let v: serde_json::Value = serde_json::from_str(line.trim_end()).unwrap();
        assert_eq!(v["pid"], 7);
        assert_eq!(v["name"], "libggml");
        assert_eq!(v["path"], "/p/\"q\"/libggml.so.0");
        assert_eq!(v["sha256"], "ab");
        assert_eq!(v["event"], "startup");
    }

    #[test]
    fn hashes_a_file() {
        let p = std::env::temp_dir().join(format!("ab-probe-{}", std::process::id()));
        std::fs::write(&p, b"abc").unwrap();
        assert_eq!(
            sha256_file(p.to_str().unwrap()).as_deref(),
            Some("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        );
        std::fs::remove_file(&p).unwrap();
        assert_eq!(sha256_file("/nonexistent/libggml.so"), None);
    }
}
