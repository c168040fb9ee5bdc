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
//!   through `GGML_BACKEND_PATH`) are recorded with `"event":"dlopen"`;
//! - at the same two moments the probe asks which file provides each of [`BOUND_SYMBOLS`]
//!   (symbols only `libggml-base` defines) to the process: `dlsym(RTLD_DEFAULT, ..)`, then
//!   `dladdr` on the address, the file name canonicalized with `realpath`. Once the symbol
//!   resolves it appends
//!   `{"pid":..,"event":"binding","symbol":"ggml_init","path":"/real/path","sha256":"..","exe":".."}`.
//!   This catches a preloaded library of another file name (a renamed copy of some
//!   `libggml-base`) that takes over ggml's symbols while the intended file is still mapped.
//!   Binding lines have no `"name"`, so readers that look for `"name":"libggml-base"` skip
//!   them. A process where the symbols are not in the global scope (no `libggml-base` loaded,
//!   or only with `RTLD_LOCAL`) writes no binding line.
//!
//! Each library, and each symbol's binding, is recorded once per process (per pid: a forked
//! child records again). Hashes are cached per path. Lines are written whole, with one `write(2)` on a file opened with
//! `O_APPEND`, so the many processes of a test suite can share one output file.
//!
//! The probe never disturbs its host: without `GGML_AB_PROBE_OUT` it does nothing, every
//! panic is caught, I/O errors are ignored, `errno` is preserved across the interposed
//! `dlopen`, and a failed lookup of its own is cleared from `dlerror`. Known limit: because the real `dlopen` is called from this library, a `dlopen`
//! of a bare file name no longer searches the *calling* library's `DT_RUNPATH` (glibc uses
//! the caller's one); ggml loads its backends by full path, so ggml is not affected.

use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

/// Environment variable naming the JSON-lines file the probe appends to.
pub const OUT_ENV: &str = "GGML_AB_PROBE_OUT";

/// The symbols whose providing file is recorded (`"event":"binding"`). Each is defined by
/// `libggml-base` alone: not by `libggml-cpu` or the backends, and not by the harness's own
/// preloaded timing shims (`cabi-tests/sched-bench/sched_probe.c` and `backend_trace.c` define
/// `ggml_backend_sched_new`, `_alloc_graph`, `_reserve`, `_reset`, `_graph_compute_async`,
/// `_synchronize`, `ggml_backend_graph_compute` and `ggml_backend_dev_init`, so those are not
/// used here).
pub const BOUND_SYMBOLS: [&CStr; 2] = [c"ggml_init", c"ggml_backend_sched_graph_compute"];

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

/// Builds one output line (with its trailing newline) for the file that provides `symbol`.
/// It has no `"name"` field on purpose (see the module docs).
pub fn binding_line(pid: u32, symbol: &str, path: &str, sha256: Option<&str>, exe: &str) -> String {
    let v = serde_json::json!({
        "pid": pid,
        "event": "binding",
        "symbol": symbol,
        "path": path,
        "sha256": sha256,
        "exe": exe,
    });
    let mut s = v.to_string();
    s.push('\n');
    s
}

/// The canonical path of the file that provides `symbol` to this process's global scope
/// (what `dlsym(RTLD_DEFAULT, ..)` finds), or `None` when the symbol is not there. When the
/// file name cannot be canonicalized the name `dladdr` gave is returned as it is; an empty one
/// (the main program, on some glibc versions) is read from `/proc/self/exe`.
pub fn provider_of(symbol: &CStr) -> Option<String> {
    // SAFETY: RTLD_DEFAULT with a valid NUL-terminated symbol name is a plain lookup.
    let addr = unsafe { libc::dlsym(libc::RTLD_DEFAULT, symbol.as_ptr()) };
    if addr.is_null() {
        // SAFETY: plain call; clears the "undefined symbol" message our lookup left, so the
        // host's next `dlerror` does not see it.
        unsafe { libc::dlerror() };
        return None;
    }
    // SAFETY: an all-zero `Dl_info` (null pointers) is a valid value to be overwritten.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `addr` came from dlsym and `info` is a live, writable `Dl_info`.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr succeeded, so `dli_fname` points to the loader's NUL-terminated name of
    // the loaded object; it is copied at once, before anything here could unload it.
    let name = unsafe { CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .into_owned();
    if name.is_empty() {
        return std::fs::read_link("/proc/self/exe")
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
    }
    Some(match std::fs::canonicalize(&name) {
        Ok(p) => p.to_string_lossy().into_owned(),
        Err(_) => name,
    })
}

struct State {
    /// The pid the `emitted` and `bound` sets belong to (a forked child starts over).
    pid: u32,
    emitted: HashSet<String>,
    /// The symbols of [`BOUND_SYMBOLS`] whose binding this pid has written.
    bound: HashSet<&'static str>,
    hashes: HashMap<String, Option<String>>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Scans this process's maps and appends a line for every recorded library not yet written
/// by this process, then one for every symbol of [`BOUND_SYMBOLS`] that now resolves and
/// whose binding is not yet written. Does nothing without `GGML_AB_PROBE_OUT`.
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
        bound: HashSet::new(),
        hashes: HashMap::new(),
    });
    if state.pid != pid {
        state.pid = pid;
        state.emitted.clear();
        state.bound.clear();
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
    for sym in BOUND_SYMBOLS {
        let Ok(name) = sym.to_str() else { continue };
        if state.bound.contains(name) {
            continue;
        }
        let Some(path) = provider_of(sym) else {
            continue;
        };
        let sha = state
            .hashes
            .entry(path.clone())
            .or_insert_with(|| sha256_file(&path))
            .clone();
        text.push_str(&binding_line(pid, name, &path, sha.as_deref(), &exe));
        state.bound.insert(name);
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
    fn binding_is_one_json_line_without_a_name() {
        let line = binding_line(9, "ggml_init", "/s/libtrace.so", Some("cd"), "/bin/y");
        assert!(line.ends_with('\n'));
        assert_eq!(line.matches('\n').count(), 1);
        let v: serde_json::Value = serde_json::from_str(line.trim_end()).unwrap();
        assert_eq!(v["pid"], 9);
        assert_eq!(v["event"], "binding");
        assert_eq!(v["symbol"], "ggml_init");
        assert_eq!(v["path"], "/s/libtrace.so");
        assert_eq!(v["sha256"], "cd");
        assert_eq!(v["exe"], "/bin/y");
        // Readers that pick `"name":"libggml-base"` lines must not take it for a mapping.
        assert!(v.get("name").is_none());
    }

    #[test]
    fn provider_is_the_canonical_file() {
        // `malloc` comes from libc here (the test binary preloads nothing).
        let p = provider_of(c"malloc").expect("malloc resolves");
        assert!(p.starts_with('/'), "{p}");
        assert!(
            library_name(&p).starts_with("libc"),
            "malloc provided by {p}"
        );
        assert_eq!(
            std::fs::canonicalize(&p).unwrap().to_string_lossy(),
            p.as_str()
        );
    }

    #[test]
    fn a_missing_symbol_has_no_provider_and_leaves_no_dlerror() {
        assert_eq!(provider_of(c"ab_probe_no_such_symbol_3f9"), None);
        // SAFETY: plain call.
        assert!(unsafe { libc::dlerror() }.is_null());
    }

    #[test]
    fn bound_symbols_are_not_the_timing_shims_ones() {
        let shims = [
            "ggml_backend_sched_new",
            "ggml_backend_sched_alloc_graph",
            "ggml_backend_sched_reserve",
            "ggml_backend_sched_reset",
            "ggml_backend_sched_graph_compute_async",
            "ggml_backend_sched_synchronize",
            "ggml_backend_graph_compute",
            "ggml_backend_dev_init",
        ];
        for s in BOUND_SYMBOLS {
            assert!(!shims.contains(&s.to_str().unwrap()), "{s:?}");
        }
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
