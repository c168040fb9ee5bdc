//! The host buffer types that live in the base library: "CPU" (`ggml_backend_cpu_buffer_type`,
//! memory from `ggml_aligned_malloc`) and "CPU_Mapped" (`ggml_backend_cpu_buffer_from_ptr`,
//! memory the caller owns, e.g. a mapped model file). Both are host memory: tensor data is
//! read and written through `tensor->data` directly.
//!
//! Alignment, as stock: tensor addresses are aligned to [`TENSOR_ALIGNMENT`] (32 bytes, what
//! `get_alignment` reports); the allocation itself comes from `ggml_aligned_malloc`, which
//! aligns to 64 bytes, and the base is rounded up to 32 bytes should it not be. Neither type has
//! a device (NULL), as stock.

use std::cell::UnsafeCell;
use std::os::raw::{c_char, c_void};

use ggml_sys::{
    ggml_backend_buffer_i, ggml_backend_buffer_t, ggml_backend_buffer_type,
    ggml_backend_buffer_type_i, ggml_backend_buffer_type_t, ggml_tensor,
};

use crate::buffer::{self, buffer_ref};
use crate::ffi::{self, boundary, export, non_null};

/// Alignment in bytes of tensor addresses in the CPU buffer types (stock `TENSOR_ALIGNMENT`).
pub const TENSOR_ALIGNMENT: usize = 32;

/// Rounds `addr` up to a multiple of `align` (a power of two).
pub fn align_up(addr: usize, align: usize) -> usize {
    debug_assert!(align.is_power_of_two());
    (addr + align - 1) & !(align - 1)
}

unsafe extern "C" fn cpu_buffer_get_base(buffer: ggml_backend_buffer_t) -> *mut c_void {
    boundary("ggml_backend_cpu_buffer_get_base", || {
        // SAFETY: called through the interface of a live CPU buffer.
        let b = unsafe { buffer_ref(buffer, "ggml_backend_cpu_buffer_get_base") };
        align_up(b.context as usize, TENSOR_ALIGNMENT) as *mut c_void
    })
}

unsafe extern "C" fn cpu_buffer_free_buffer(buffer: ggml_backend_buffer_t) {
    boundary("ggml_backend_cpu_buffer_free_buffer", || {
        // SAFETY: called once by ggml_backend_buffer_free on a live CPU buffer.
        let b = unsafe { buffer_ref(buffer, "ggml_backend_cpu_buffer_free_buffer") };
        // SAFETY: `context` came from ggml_aligned_malloc(size).
        unsafe { ggml_sys::ggml_aligned_free(b.context, b.size) }
    })
}

unsafe extern "C" fn cpu_buffer_memset_tensor(
    _buffer: ggml_backend_buffer_t,
    tensor: *mut ggml_tensor,
    value: u8,
    offset: usize,
    size: usize,
) {
    const F: &str = "ggml_backend_cpu_buffer_memset_tensor";
    boundary(F, || {
        // SAFETY: the layer checked the range; the tensor's data is host memory.
        let t = unsafe { non_null(tensor, F, "tensor") };
        // SAFETY: as above.
        unsafe { std::ptr::write_bytes(t.data.cast::<u8>().add(offset), value, size) }
    })
}

unsafe extern "C" fn cpu_buffer_set_tensor(
    _buffer: ggml_backend_buffer_t,
    tensor: *mut ggml_tensor,
    data: *const c_void,
    offset: usize,
    size: usize,
) {
    const F: &str = "ggml_backend_cpu_buffer_set_tensor";
    boundary(F, || {
        // SAFETY: the layer checked the range; the tensor's data is host memory.
        let t = unsafe { non_null(tensor, F, "tensor") };
        // SAFETY: as above; `data` is readable for `size` bytes by the caller's contract and
        // may alias the tensor (memmove semantics are a superset of memcpy's).
        unsafe { std::ptr::copy(data.cast::<u8>(), t.data.cast::<u8>().add(offset), size) }
    })
}

unsafe extern "C" fn cpu_buffer_get_tensor(
    _buffer: ggml_backend_buffer_t,
    tensor: *const ggml_tensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    const F: &str = "ggml_backend_cpu_buffer_get_tensor";
    boundary(F, || {
        // SAFETY: the layer checked the range; the tensor's data is host memory.
        let t = unsafe { non_null(tensor, F, "tensor") };
        // SAFETY: as above; `data` is writable for `size` bytes by the caller's contract.
        unsafe { std::ptr::copy(t.data.cast::<u8>().add(offset), data.cast::<u8>(), size) }
    })
}

unsafe extern "C" fn cpu_buffer_cpy_tensor(
    _buffer: ggml_backend_buffer_t,
    src: *const ggml_tensor,
    dst: *mut ggml_tensor,
) -> bool {
    const F: &str = "ggml_backend_cpu_buffer_cpy_tensor";
    boundary(F, || {
        // SAFETY: live tensors by the caller's contract.
        let (s, d) = unsafe { (non_null(src, F, "src"), non_null(dst, F, "dst")) };
        // SAFETY: a live tensor's buffer is NULL (abort) or live.
        if !buffer::is_host(unsafe { buffer_ref(s.buffer, F) }) {
            return false;
        }
        let n = crate::tensor::meta::nbytes(s);
        // SAFETY: both tensors are in host memory, `dst` has `src`'s layout (checked by the
        // caller), so `ggml_nbytes(src)` bytes are valid at both addresses.
        unsafe { std::ptr::copy(s.data.cast::<u8>(), d.data.cast::<u8>(), n) }
        true
    })
}

unsafe extern "C" fn cpu_buffer_clear(buffer: ggml_backend_buffer_t, value: u8) {
    const F: &str = "ggml_backend_cpu_buffer_clear";
    boundary(F, || {
        // SAFETY: called through the interface of a live CPU buffer.
        let b = unsafe { buffer_ref(buffer, F) };
        // SAFETY: `context` points to `size` bytes of host memory.
        unsafe { std::ptr::write_bytes(b.context.cast::<u8>(), value, b.size) }
    })
}

/// The interface of buffers of the "CPU" type; `free_buffer` releases the aligned allocation.
const CPU_BUFFER_I: ggml_backend_buffer_i = ggml_backend_buffer_i {
    free_buffer: Some(cpu_buffer_free_buffer),
    get_base: Some(cpu_buffer_get_base),
    init_tensor: None,
    memset_tensor: Some(cpu_buffer_memset_tensor),
    set_tensor: Some(cpu_buffer_set_tensor),
    get_tensor: Some(cpu_buffer_get_tensor),
    set_tensor_2d: None,
    get_tensor_2d: None,
    cpy_tensor: Some(cpu_buffer_cpy_tensor),
    clear: Some(cpu_buffer_clear),
    reset: None,
};

/// The interface of "CPU_Mapped" buffers: as [`CPU_BUFFER_I`] but the memory is not ours to
/// free.
const CPU_BUFFER_FROM_PTR_I: ggml_backend_buffer_i = ggml_backend_buffer_i {
    free_buffer: None,
    ..CPU_BUFFER_I
};

unsafe extern "C" fn cpu_buft_get_name(_buft: ggml_backend_buffer_type_t) -> *const c_char {
    c"CPU".as_ptr()
}

unsafe extern "C" fn cpu_mapped_buft_get_name(_buft: ggml_backend_buffer_type_t) -> *const c_char {
    c"CPU_Mapped".as_ptr()
}

unsafe extern "C" fn cpu_buft_alloc_buffer(
    buft: ggml_backend_buffer_type_t,
    size: usize,
) -> ggml_backend_buffer_t {
    const F: &str = "ggml_backend_cpu_buffer_type_alloc_buffer";
    boundary(F, || {
        // SAFETY: plain allocation; NULL on failure.
        let data = unsafe { ggml_sys::ggml_aligned_malloc(size) };
        if data.is_null() {
            crate::ffi::log::error(&format!("{F}: failed to allocate buffer of size {size}\n"));
            return std::ptr::null_mut();
        }
        // CPU_BUFFER_I accepts an aligned allocation of `size` bytes as context.
        crate::buffer_type::new_buffer(buft, CPU_BUFFER_I, data, size)
    })
}

unsafe extern "C" fn cpu_buft_get_alignment(_buft: ggml_backend_buffer_type_t) -> usize {
    TENSOR_ALIGNMENT
}

unsafe extern "C" fn cpu_buft_is_host(_buft: ggml_backend_buffer_type_t) -> bool {
    true
}

/// A buffer type with a fixed address that C code may read and, by the C API's `_t` type,
/// write: the `UnsafeCell` makes handing out `*mut` sound.
struct StaticBuft(UnsafeCell<ggml_backend_buffer_type>);

// SAFETY: the buffer type is immutable after construction as far as this library is concerned;
// its pointers (device, context) are NULL and its callbacks are plain functions.
unsafe impl Sync for StaticBuft {}

impl StaticBuft {
    const fn new(
        get_name: unsafe extern "C" fn(ggml_backend_buffer_type_t) -> *const c_char,
    ) -> Self {
        StaticBuft(UnsafeCell::new(ggml_backend_buffer_type {
            iface: ggml_backend_buffer_type_i {
                get_name: Some(get_name),
                alloc_buffer: Some(cpu_buft_alloc_buffer),
                get_alignment: Some(cpu_buft_get_alignment),
                get_max_size: None,
                get_alloc_size: None,
                is_host: Some(cpu_buft_is_host),
            },
            device: std::ptr::null_mut(),
            context: std::ptr::null_mut(),
        }))
    }

    fn get(&'static self) -> ggml_backend_buffer_type_t {
        self.0.get()
    }
}

static CPU_BUFT: StaticBuft = StaticBuft::new(cpu_buft_get_name);
static CPU_MAPPED_BUFT: StaticBuft = StaticBuft::new(cpu_mapped_buft_get_name);

export! {
    /// The "CPU" buffer type: host memory from `ggml_aligned_malloc`, alignment 32, no max size,
    /// no device (stock `ggml_backend_cpu_buffer_type`). A static object; never freed.
    ///
    /// # Safety
    /// None beyond the C ABI.
    pub unsafe fn ggml_backend_cpu_buffer_type() -> ggml_backend_buffer_type_t {
        CPU_BUFT.get()
    }
}

export! {
    /// Wraps `size` bytes of caller-owned host memory at `ptr` in a buffer of type "CPU_Mapped"
    /// (stock `ggml_backend_cpu_buffer_from_ptr`). Freeing the buffer leaves the memory alone.
    /// Aborts unless `ptr` is aligned to 32 bytes.
    ///
    /// # Safety
    /// `ptr` must be valid for `size` bytes while the buffer lives.
    pub unsafe fn ggml_backend_cpu_buffer_from_ptr(
        ptr: *mut c_void,
        size: usize,
    ) -> ggml_backend_buffer_t {
        if (ptr as usize) & (TENSOR_ALIGNMENT - 1) != 0 {
            ffi::fatal(
                F,
                &format!("buffer pointer must be aligned to {TENSOR_ALIGNMENT} bytes: {ptr:p}"),
            );
        }
        // CPU_BUFFER_FROM_PTR_I accepts any host pointer valid for `size` bytes.
        crate::buffer_type::new_buffer(CPU_MAPPED_BUFT.get(), CPU_BUFFER_FROM_PTR_I, ptr, size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn align() {
        assert_eq!(align_up(0, 32), 0);
        assert_eq!(align_up(1, 32), 32);
        assert_eq!(align_up(32, 32), 32);
        assert_eq!(align_up(33, 32), 64);
        assert_eq!(align_up(0x1000_0010, 32), 0x1000_0020);
    }
}
