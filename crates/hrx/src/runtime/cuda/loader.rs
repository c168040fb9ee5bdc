//! Finding the CUDA libraries at run time. `cudarc` opens them by name (`libcuda.so.1`,
//! `libnvrtc.so.13`, `libcublas.so.13`, ...), which works when they are on the loader's path.
//! A toolkit installed under `CUDA_HOME` (or `/usr/local/cuda`) often is not: its NVRTC and
//! cuBLAS are opened here by full path first, which makes the later open by name find them
//! (the loader matches an already-loaded library by its soname).

use std::ffi::CString;
use std::path::PathBuf;

/// Library sonames cudarc asks for, newest first.
const TOOLKIT_LIBS: &[&str] = &[
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libcublasLt.so.13",
    "libcublas.so.13",
    "libcublasLt.so.12",
    "libcublas.so.12",
];

/// Folders that may hold the toolkit's libraries, in the order they are tried.
pub fn toolkit_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            let root = PathBuf::from(v);
            dirs.push(root.join("lib64"));
            dirs.push(root.join("lib"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    dirs.push(PathBuf::from("/usr/local/cuda/targets/x86_64-linux/lib"));
    dirs
}

fn dlopen(path: &str, flags: i32) -> bool {
    let Ok(c) = CString::new(path) else {
        return false;
    };
    // SAFETY: dlopen of a NUL-terminated path; the handle is kept (never closed) so the
    // library stays loaded for cudarc.
    !unsafe { libc::dlopen(c.as_ptr(), flags) }.is_null()
}

/// Opens the toolkit libraries the loader cannot find by name from [`toolkit_dirs`].
/// Returns the paths it opened.
pub fn preload_toolkit() -> Vec<String> {
    let mut opened = Vec::new();
    for lib in TOOLKIT_LIBS {
        if dlopen(lib, libc::RTLD_NOW | libc::RTLD_NOLOAD) || dlopen(lib, libc::RTLD_NOW) {
            continue;
        }
        for dir in toolkit_dirs() {
            let p = dir.join(lib);
            if p.is_file() && dlopen(&p.to_string_lossy(), libc::RTLD_NOW | libc::RTLD_GLOBAL) {
                opened.push(p.to_string_lossy().into_owned());
                break;
            }
        }
    }
    opened
}

/// Whether the driver library (`libcuda.so.1`) can be opened.
pub fn driver_present() -> bool {
    // SAFETY: a dlopen probe; cudarc's check opens and closes a handle.
    std::panic::catch_unwind(|| unsafe { cudarc::driver::sys::is_culib_present() }).unwrap_or(false)
}

/// Whether NVRTC and cuBLAS can be opened: without them no kernel runs, so a CUDA device
/// is not usable (`auto` then takes the simulator).
pub fn toolkit_present() -> Result<(), String> {
    // SAFETY: dlopen probes.
    let nvrtc = std::panic::catch_unwind(|| unsafe { cudarc::nvrtc::sys::is_culib_present() });
    if !nvrtc.unwrap_or(false) {
        return Err(
            "NVRTC (libnvrtc.so.13 or .12) not found; set CUDA_HOME or LD_LIBRARY_PATH".into(),
        );
    }
    // SAFETY: as above.
    let blas = std::panic::catch_unwind(|| unsafe { cudarc::cublas::sys::is_culib_present() });
    if !blas.unwrap_or(false) {
        return Err(
            "cuBLAS (libcublas.so.13 or .12) not found; set CUDA_HOME or LD_LIBRARY_PATH".into(),
        );
    }
    Ok(())
}

/// Number of CUDA devices, or why there are none usable.
pub fn device_count() -> Result<usize, String> {
    if !driver_present() {
        return Err("no CUDA driver (libcuda.so.1 not found)".into());
    }
    let r = std::panic::catch_unwind(|| {
        cudarc::driver::result::init().map_err(|e| format!("cuInit: {e:?}"))?;
        cudarc::driver::result::device::get_count().map_err(|e| format!("cuDeviceGetCount: {e:?}"))
    })
    .map_err(|_| "the CUDA driver library lacks a function it needs".to_string())??;
    Ok(r.max(0) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_home_comes_first() {
        // read only: the variable is not set by the tests, so the defaults are last
        let d = toolkit_dirs();
        assert_eq!(
            d.last().unwrap(),
            &PathBuf::from("/usr/local/cuda/targets/x86_64-linux/lib")
        );
        assert!(d.contains(&PathBuf::from("/usr/local/cuda/lib64")));
    }

    #[test]
    fn a_machine_without_a_driver_reports_no_device_instead_of_failing() {
        if driver_present() {
            return; // this host has a GPU driver: the question does not arise
        }
        let e = device_count().unwrap_err();
        assert!(e.contains("libcuda.so.1"), "{e}");
    }
}
