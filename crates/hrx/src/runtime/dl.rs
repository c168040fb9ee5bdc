//! Run-time symbol lookup in the process's global scope (`dlsym(RTLD_DEFAULT, ...)`), so
//! the cdylib has no link-time dependency on the ggml libraries it calls: whichever
//! libggml-base and libggml-cpu the process mapped are the ones used. Both layers use it
//! (the ggml-facing layer for libggml-base, the simulator for libggml-cpu).

use std::ffi::{c_void, CStr};

/// The address of the C function `name` as a function pointer of type `F`, or `None` when
/// no loaded library exports it.
///
/// # Safety
/// `F` is a function-pointer type matching the C signature of `name`.
pub unsafe fn symbol<F: Copy>(name: &CStr) -> Option<F> {
    // a function pointer is pointer-sized on every target ggml supports; refuse anything
    // else rather than reinterpret the wrong number of bytes
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name has no other precondition.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` is the non-NULL address of `name`, and the caller guarantees `F` is that
    // function's pointer type; sizes were checked above.
    Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}
