//! Buffer types `HRXn` (device-local: fake addresses, bytes in device memory, `is_host`
//! false) and `HRXn_HOST` (host memory both sides read, `is_host` true). Alignment 256; the
//! maximum size and memory are what the device reports.
//!
//! Transfers on a device-local buffer go through the runtime (upload, download, fill,
//! device copy) and wait for completion, as ggml's synchronous buffer API requires. A copy
//! into a device buffer from a buffer the device cannot read returns false so ggml falls
//! back to a staged copy.

use std::alloc::Layout;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

use ggml_sys::*;

use crate::context::Device;
use crate::ffi::{guard, non_null};
use crate::ggml::buft_is_host;
use crate::runtime::{DevAddr, HostSrc, SendPtr, ALIGNMENT};

/// Context of a device-local buffer.
pub struct DevBuffer {
    dev: &'static Device,
    addr: DevAddr,
    size: usize,
}

/// Context of an `HRXn_HOST` buffer.
pub struct HostBuffer {
    dev: &'static Device,
    ptr: *mut u8,
    layout: Layout,
    /// Bumped on every write through the buffer API; the arena's generation.
    pub generation: AtomicU64,
}

/// The device-local buffer type's interface.
pub fn device_buft_iface() -> ggml_backend_buffer_type_i {
    ggml_backend_buffer_type_i {
        get_name: Some(buft_get_name),
        alloc_buffer: Some(dev_buft_alloc),
        get_alignment: Some(buft_get_alignment),
        get_max_size: Some(buft_get_max_size),
        get_alloc_size: None,
        is_host: Some(dev_buft_is_host),
    }
}

/// The host buffer type's interface.
pub fn host_buft_iface() -> ggml_backend_buffer_type_i {
    ggml_backend_buffer_type_i {
        get_name: Some(buft_get_name),
        alloc_buffer: Some(host_buft_alloc),
        get_alignment: Some(buft_get_alignment),
        get_max_size: Some(buft_get_max_size),
        get_alloc_size: None,
        is_host: Some(host_buft_is_host),
    }
}

/// The device a buffer type of ours belongs to.
///
/// # Safety
/// `buft` is one of this library's buffer types.
unsafe fn buft_device(buft: ggml_backend_buffer_type_t) -> &'static Device {
    // SAFETY: our buffer types' context is the leaked `Device`.
    unsafe { &*((*buft).context as *const Device) }
}

unsafe extern "C" fn buft_get_name(
    buft: ggml_backend_buffer_type_t,
) -> *const std::os::raw::c_char {
    guard("buft_get_name", || {
        // SAFETY: ggml passes one of our buffer types.
        let dev = unsafe { buft_device(buft) };
        if buft == dev.host_buft() {
            dev.host_buft_name.as_ptr()
        } else {
            dev.name.as_ptr()
        }
    })
}

unsafe extern "C" fn buft_get_alignment(_buft: ggml_backend_buffer_type_t) -> usize {
    ALIGNMENT
}

unsafe extern "C" fn buft_get_max_size(buft: ggml_backend_buffer_type_t) -> usize {
    // SAFETY: ggml passes one of our buffer types.
    guard("buft_get_max_size", || {
        unsafe { buft_device(buft) }.rt.capacity()
    })
}

unsafe extern "C" fn dev_buft_is_host(_buft: ggml_backend_buffer_type_t) -> bool {
    false
}

unsafe extern "C" fn host_buft_is_host(_buft: ggml_backend_buffer_type_t) -> bool {
    true
}

unsafe extern "C" fn dev_buft_alloc(
    buft: ggml_backend_buffer_type_t,
    size: usize,
) -> ggml_backend_buffer_t {
    guard("ggml_backend_hrx_buffer_type_alloc_buffer", || {
        // SAFETY: ggml passes one of our buffer types.
        let dev = unsafe { buft_device(buft) };
        let Some(addr) = dev.rt.alloc(size) else {
            crate::log::error(&format!(
                "HRX: {}: cannot allocate {:.2} MiB: {:.2} MiB of {:.2} MiB in use\n",
                dev.name.to_string_lossy(),
                size as f64 / 1048576.0,
                dev.rt.used() as f64 / 1048576.0,
                dev.rt.capacity() as f64 / 1048576.0
            ));
            return std::ptr::null_mut();
        };
        let ctx = Box::into_raw(Box::new(DevBuffer { dev, addr, size }));
        // SAFETY: buffer_init copies the interface and keeps the context pointer; the
        // context is freed by free_buffer.
        let b = unsafe {
            (crate::ggml::need_base().buffer_init)(buft, dev_buffer_iface(), ctx.cast(), size)
        };
        if b.is_null() {
            // SAFETY: ctx came from Box::into_raw above and was not handed out.
            drop(unsafe { Box::from_raw(ctx) });
            dev.rt.free(addr);
        }
        b
    })
}

unsafe extern "C" fn host_buft_alloc(
    buft: ggml_backend_buffer_type_t,
    size: usize,
) -> ggml_backend_buffer_t {
    guard("ggml_backend_hrx_host_buffer_type_alloc_buffer", || {
        // SAFETY: ggml passes one of our buffer types.
        let dev = unsafe { buft_device(buft) };
        let Ok(layout) = Layout::from_size_align(size.max(1), ALIGNMENT) else {
            return std::ptr::null_mut();
        };
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            crate::log::error(&format!(
                "HRX: cannot allocate {size} bytes of host memory\n"
            ));
            return std::ptr::null_mut();
        }
        let ctx = Box::into_raw(Box::new(HostBuffer {
            dev,
            ptr,
            layout,
            generation: AtomicU64::new(1),
        }));
        // SAFETY: as for the device buffer.
        let b = unsafe {
            (crate::ggml::need_base().buffer_init)(buft, host_buffer_iface(), ctx.cast(), size)
        };
        if b.is_null() {
            // SAFETY: ctx and ptr were created above and not handed out.
            unsafe {
                drop(Box::from_raw(ctx));
                std::alloc::dealloc(ptr, layout);
            }
        }
        b
    })
}

fn dev_buffer_iface() -> ggml_backend_buffer_i {
    ggml_backend_buffer_i {
        free_buffer: Some(dev_free_buffer),
        get_base: Some(dev_get_base),
        init_tensor: None,
        memset_tensor: Some(dev_memset_tensor),
        set_tensor: Some(dev_set_tensor),
        get_tensor: Some(dev_get_tensor),
        set_tensor_2d: None,
        get_tensor_2d: None,
        cpy_tensor: Some(dev_cpy_tensor),
        clear: Some(dev_clear),
        reset: None,
    }
}

fn host_buffer_iface() -> ggml_backend_buffer_i {
    ggml_backend_buffer_i {
        free_buffer: Some(host_free_buffer),
        get_base: Some(host_get_base),
        init_tensor: None,
        memset_tensor: Some(host_memset_tensor),
        set_tensor: Some(host_set_tensor),
        get_tensor: Some(host_get_tensor),
        set_tensor_2d: None,
        get_tensor_2d: None,
        cpy_tensor: Some(host_cpy_tensor),
        clear: Some(host_clear),
        reset: None,
    }
}

/// # Safety
/// `b` is one of our device-local buffers.
unsafe fn dev_ctx<'a>(b: ggml_backend_buffer_t) -> &'a DevBuffer {
    // SAFETY: our device buffers' context is a `DevBuffer`.
    unsafe { &*((*b).context as *const DevBuffer) }
}

/// # Safety
/// `b` is one of our host buffers.
unsafe fn host_ctx<'a>(b: ggml_backend_buffer_t) -> &'a HostBuffer {
    // SAFETY: our host buffers' context is a `HostBuffer`.
    unsafe { &*((*b).context as *const HostBuffer) }
}

/// Whether `b` is a device-local buffer of `dev`.
///
/// # Safety
/// `b` is NULL or a live buffer.
pub unsafe fn is_device_buffer_of(b: ggml_backend_buffer_t, dev: &Device) -> bool {
    // SAFETY: forwarded.
    !b.is_null() && unsafe { (*b).buft } == dev.buft()
}

/// The arena generation of host buffer `b`: its write counter when it is an `HRXn_HOST`
/// buffer of `dev`, else 0 (foreign host weights are taken as immutable).
///
/// # Safety
/// `b` is a live buffer.
pub unsafe fn host_generation(b: ggml_backend_buffer_t, dev: &Device) -> u64 {
    // SAFETY: forwarded; our host buffers carry a HostBuffer context.
    unsafe {
        if (*b).buft == dev.host_buft() {
            host_ctx(b).generation.load(Ordering::Relaxed)
        } else {
            0
        }
    }
}

/// Checks that `[addr, addr + size)` is inside `buf` and returns `addr`.
fn dev_range(buf: &DevBuffer, t: &ggml_tensor, offset: usize, size: usize) -> DevAddr {
    let addr = t.data as usize + offset;
    assert!(
        addr >= buf.addr && addr + size <= buf.addr + buf.size,
        "tensor {} range {addr:#x}+{size} is outside its HRX buffer",
        crate::ggml::tensor_name(t)
    );
    addr
}

fn sync(dev: &Device) {
    if let Err(e) = dev.rt.synchronize() {
        panic!("device error: {e}");
    }
}

unsafe extern "C" fn dev_free_buffer(b: ggml_backend_buffer_t) {
    guard("ggml_backend_hrx_buffer_free_buffer", || {
        // SAFETY: ggml frees each of our buffers once; the context came from Box::into_raw.
        let ctx = unsafe { Box::from_raw((*b).context as *mut DevBuffer) };
        ctx.dev.rt.free(ctx.addr);
    })
}

unsafe extern "C" fn dev_get_base(b: ggml_backend_buffer_t) -> *mut c_void {
    // SAFETY: ggml passes one of our device buffers.
    guard(
        "ggml_backend_hrx_buffer_get_base",
        || unsafe { dev_ctx(b) }.addr as *mut c_void,
    )
}

unsafe extern "C" fn dev_memset_tensor(
    b: ggml_backend_buffer_t,
    t: *mut ggml_tensor,
    value: u8,
    offset: usize,
    size: usize,
) {
    guard("ggml_backend_hrx_buffer_memset_tensor", || {
        // SAFETY: ggml passes our buffer and a live tensor in it.
        let (ctx, t) = unsafe { (dev_ctx(b), non_null(t, "tensor")) };
        let a = dev_range(ctx, t, offset, size);
        ctx.dev.rt.fill(a, value, size);
        sync(ctx.dev);
    })
}

unsafe extern "C" fn dev_set_tensor(
    b: ggml_backend_buffer_t,
    t: *mut ggml_tensor,
    data: *const c_void,
    offset: usize,
    size: usize,
) {
    guard("ggml_backend_hrx_buffer_set_tensor", || {
        // SAFETY: ggml passes our buffer, a live tensor in it and `size` readable bytes.
        let (ctx, t) = unsafe { (dev_ctx(b), non_null(t, "tensor")) };
        let a = dev_range(ctx, t, offset, size);
        ctx.dev
            .rt
            .upload(a, HostSrc::Borrowed(SendPtr(data as *mut _), size));
        sync(ctx.dev);
    })
}

unsafe extern "C" fn dev_get_tensor(
    b: ggml_backend_buffer_t,
    t: *const ggml_tensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    guard("ggml_backend_hrx_buffer_get_tensor", || {
        // SAFETY: ggml passes our buffer, a live tensor in it and `size` writable bytes.
        let (ctx, t) = unsafe { (dev_ctx(b), non_null(t, "tensor")) };
        let a = dev_range(ctx, t, offset, size);
        ctx.dev.rt.download(a, SendPtr(data), size);
        sync(ctx.dev);
    })
}

/// Copies `src` into `dst` (in a device buffer of `dev`) when the device can read `src`:
/// same device, or host memory. `queue_only` leaves the copy queued (async form); host
/// bytes are then copied at once so the caller may reuse them.
///
/// # Safety
/// Both tensors are live and allocated.
pub unsafe fn copy_into_device(
    dev: &Device,
    src: &ggml_tensor,
    dst: &ggml_tensor,
    queue_only: bool,
) -> bool {
    // SAFETY: forwarded.
    let n = unsafe { crate::ggml::nbytes(src) };
    // SAFETY: forwarded.
    if n != unsafe { crate::ggml::nbytes(dst) } {
        return false;
    }
    let sb = if src.view_src.is_null() {
        src.buffer
    } else {
        // SAFETY: view_src of a live tensor is live.
        unsafe { (*src.view_src).buffer }
    };
    if sb.is_null() || !dev.rt.contains(dst.data as usize, n) {
        return false;
    }
    // SAFETY: sb is a live buffer.
    if unsafe { is_device_buffer_of(sb, dev) } {
        dev.rt.copy(dst.data as usize, src.data as usize, n);
    // SAFETY: sb is a live buffer with a live type.
    } else if unsafe { buft_is_host((*sb).buft) } {
        let hs = if queue_only {
            // SAFETY: src is n readable host bytes.
            HostSrc::Owned(unsafe { std::slice::from_raw_parts(src.data as *const u8, n) }.to_vec())
        } else {
            HostSrc::Borrowed(SendPtr(src.data), n)
        };
        dev.rt.upload(dst.data as usize, hs);
    } else {
        return false;
    }
    if !queue_only {
        sync(dev);
    }
    true
}

unsafe extern "C" fn dev_cpy_tensor(
    b: ggml_backend_buffer_t,
    src: *const ggml_tensor,
    dst: *mut ggml_tensor,
) -> bool {
    guard("ggml_backend_hrx_buffer_cpy_tensor", || {
        // SAFETY: ggml passes our buffer and two live tensors, dst in our buffer.
        unsafe {
            copy_into_device(
                dev_ctx(b).dev,
                non_null(src, "src"),
                non_null(dst, "dst"),
                false,
            )
        }
    })
}

unsafe extern "C" fn dev_clear(b: ggml_backend_buffer_t, value: u8) {
    guard("ggml_backend_hrx_buffer_clear", || {
        // SAFETY: ggml passes one of our device buffers.
        let ctx = unsafe { dev_ctx(b) };
        ctx.dev.rt.fill(ctx.addr, value, ctx.size);
        sync(ctx.dev);
    })
}

unsafe extern "C" fn host_free_buffer(b: ggml_backend_buffer_t) {
    guard("ggml_backend_hrx_host_buffer_free_buffer", || {
        // SAFETY: ggml frees each of our buffers once; the context came from Box::into_raw.
        let ctx = unsafe { Box::from_raw((*b).context as *mut HostBuffer) };
        ctx.dev
            .arena
            .lock()
            .forget_range(&*ctx.dev.rt, ctx.ptr as usize, ctx.layout.size());
        // queued work may still read or write this memory
        sync(ctx.dev);
        // SAFETY: ptr/layout are the allocation made in host_buft_alloc.
        unsafe { std::alloc::dealloc(ctx.ptr, ctx.layout) };
    })
}

unsafe extern "C" fn host_get_base(b: ggml_backend_buffer_t) -> *mut c_void {
    // SAFETY: ggml passes one of our host buffers.
    guard("ggml_backend_hrx_host_buffer_get_base", || {
        unsafe { host_ctx(b) }.ptr.cast()
    })
}

fn host_write(b: ggml_backend_buffer_t) -> &'static HostBuffer {
    // SAFETY: callers pass one of our host buffers; the context lives until free_buffer.
    let ctx: &'static HostBuffer = unsafe { &*((*b).context as *const HostBuffer) };
    // the device may be reading or writing the memory
    sync(ctx.dev);
    ctx.generation.fetch_add(1, Ordering::Relaxed);
    ctx
}

unsafe extern "C" fn host_memset_tensor(
    b: ggml_backend_buffer_t,
    t: *mut ggml_tensor,
    value: u8,
    offset: usize,
    size: usize,
) {
    guard("ggml_backend_hrx_host_buffer_memset_tensor", || {
        host_write(b);
        // SAFETY: ggml passes a live tensor whose [offset, offset+size) is in the buffer.
        unsafe { std::ptr::write_bytes(((*t).data as *mut u8).add(offset), value, size) };
    })
}

unsafe extern "C" fn host_set_tensor(
    b: ggml_backend_buffer_t,
    t: *mut ggml_tensor,
    data: *const c_void,
    offset: usize,
    size: usize,
) {
    guard("ggml_backend_hrx_host_buffer_set_tensor", || {
        host_write(b);
        // SAFETY: as above, plus `size` readable bytes at `data`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data as *const u8,
                ((*t).data as *mut u8).add(offset),
                size,
            )
        };
    })
}

unsafe extern "C" fn host_get_tensor(
    b: ggml_backend_buffer_t,
    t: *const ggml_tensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    guard("ggml_backend_hrx_host_buffer_get_tensor", || {
        // SAFETY: ggml passes one of our host buffers.
        sync(unsafe { host_ctx(b) }.dev);
        // SAFETY: as above, plus `size` writable bytes at `data`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                ((*t).data as *const u8).add(offset),
                data as *mut u8,
                size,
            )
        };
    })
}

unsafe extern "C" fn host_cpy_tensor(
    b: ggml_backend_buffer_t,
    src: *const ggml_tensor,
    dst: *mut ggml_tensor,
) -> bool {
    guard("ggml_backend_hrx_host_buffer_cpy_tensor", || {
        // SAFETY: ggml passes live tensors; dst is in our host buffer.
        let (src, dst) = unsafe { (non_null(src, "src"), non_null(dst, "dst")) };
        let ctx = host_write(b);
        // SAFETY: live tensors.
        let n = unsafe { crate::ggml::nbytes(src) };
        let sb = if src.view_src.is_null() {
            src.buffer
        } else {
            // SAFETY: view_src of a live tensor is live.
            unsafe { (*src.view_src).buffer }
        };
        if sb.is_null() {
            return false;
        }
        // SAFETY: live buffer.
        if unsafe { is_device_buffer_of(sb, ctx.dev) } {
            ctx.dev.rt.download(src.data as usize, SendPtr(dst.data), n);
            sync(ctx.dev);
            true
        // SAFETY: live buffer type.
        } else if unsafe { buft_is_host((*sb).buft) } {
            // SAFETY: both are n host bytes.
            unsafe { std::ptr::copy(src.data as *const u8, dst.data as *mut u8, n) };
            true
        } else {
            false
        }
    })
}

unsafe extern "C" fn host_clear(b: ggml_backend_buffer_t, value: u8) {
    guard("ggml_backend_hrx_host_buffer_clear", || {
        let ctx = host_write(b);
        // SAFETY: the whole allocation.
        unsafe { std::ptr::write_bytes(ctx.ptr, value, ctx.layout.size()) };
    })
}
