//! Compiling `kernels.cu` with NVRTC for one device's architecture.

use std::ffi::{CStr, CString};

use cudarc::nvrtc::result;

/// PTX for `src`, compiled for `compute_{major}{minor}`, or the compiler's log.
pub fn compile(src: &str, major: i32, minor: i32) -> Result<CString, String> {
    // NVRTC's presence was checked before any device was made (`loader::toolkit_present`)
    let csrc = CString::new(src).map_err(|_| "kernel source has a NUL byte".to_string())?;
    let name = CString::new("hrx_kernels.cu").unwrap();
    let prog = result::create_program(&csrc, Some(&name))
        .map_err(|e| format!("nvrtcCreateProgram: {e:?}"))?;
    let opts = [
        format!("--gpu-architecture=compute_{major}{minor}"),
        "--std=c++17".to_string(),
        "-default-device".to_string(),
    ];
    // SAFETY: `prog` is a live program; the options outlive the call.
    let compiled = unsafe { result::compile_program(prog, &opts) };
    // SAFETY: as above.
    let log = unsafe { result::get_program_log(prog) }
        .map(|v| {
            // SAFETY: NVRTC returns a NUL-terminated log.
            unsafe { CStr::from_ptr(v.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        })
        .unwrap_or_default();
    let out = match compiled {
        Ok(()) => {
            // SAFETY: a successfully compiled program has PTX.
            unsafe { result::get_ptx(prog) }
                .map(|v| {
                    // SAFETY: the PTX buffer is NUL-terminated.
                    unsafe { CStr::from_ptr(v.as_ptr()) }.to_owned()
                })
                .map_err(|e| format!("nvrtcGetPTX: {e:?}"))
        }
        Err(e) => Err(format!("NVRTC failed ({e:?}): {log}")),
    };
    // SAFETY: the program is destroyed once.
    let _ = unsafe { result::destroy_program(prog) };
    out
}
