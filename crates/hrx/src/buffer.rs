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
    guard("buft_get_max_size", || {
        // SAFETY: ggml passes one of our buffer types.
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
        let failed = || {
            crate::log::error(&format!(
                "HRX: {}: cannot allocate {size} bytes ({:.2} MiB) of host memory\n",
                dev.host_buft_name.to_string_lossy(),
                size as f64 / 1048576.0
            ));
            std::ptr::null_mut()
        };
        // a size no allocation can have (over isize::MAX once aligned) fails as an
        // allocation that found no memory does: logged, NULL
        let Ok(layout) = Layout::from_size_align(size.max(1), ALIGNMENT) else {
            return failed();
        };
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            return failed();
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
    // SAFETY: `b` is not NULL (checked first), so live by the contract of
    // `is_device_buffer_of`.
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

/// Checks that `[t.data + offset, t.data + offset + size)` lies inside `[base, base + len)`
/// and returns its start; panics (caught by the entry point's guard) when it does not. The
/// sums are checked: an offset near `SIZE_MAX` (stock libggml-base passes it on unchecked,
/// and `offset + size` wraps past its own `<= nbytes` test) would otherwise wrap to an
/// address inside the buffer, before the tensor, and write over its neighbour.
fn checked_range(base: usize, len: usize, t: &ggml_tensor, offset: usize, size: usize) -> usize {
    let start = (t.data as usize).checked_add(offset);
    let end = start.and_then(|a| a.checked_add(size));
    match (start, end) {
        (Some(a), Some(e)) if a >= base && e <= base.saturating_add(len) => a,
        _ => panic!(
            "tensor {} range {:#x}+{offset:#x}+{size} is outside its HRX buffer",
            crate::ggml::tensor_name(t),
            t.data as usize
        ),
    }
}

/// Checks that the tensor's `[offset, offset + size)` is inside `buf` and returns its
/// device address.
fn dev_range(buf: &DevBuffer, t: &ggml_tensor, offset: usize, size: usize) -> DevAddr {
    checked_range(buf.addr, buf.size, t, offset, size)
}

/// [`dev_range`] for a device-local buffer of ours by handle: the async transfers of the
/// backend check their ranges as the buffer's synchronous ones do.
///
/// # Safety
/// `b` is one of our live device-local buffers.
pub unsafe fn device_range(
    b: ggml_backend_buffer_t,
    t: &ggml_tensor,
    offset: usize,
    size: usize,
) -> DevAddr {
    // SAFETY: forwarded contract: one of our device buffers.
    dev_range(unsafe { dev_ctx(b) }, t, offset, size)
}

/// Checks that the tensor's `[offset, offset + size)` is inside host buffer `buf` and
/// returns its first byte.
fn host_range(buf: &HostBuffer, t: &ggml_tensor, offset: usize, size: usize) -> *mut u8 {
    checked_range(buf.ptr as usize, buf.layout.size(), t, offset, size) as *mut u8
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
    guard("ggml_backend_hrx_buffer_get_base", || {
        // SAFETY: ggml passes one of our device buffers.
        unsafe { dev_ctx(b) }.addr as *mut c_void
    })
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
/// bytes are then copied at once so the caller may reuse them, and a host source is declined
/// (false) while a job that writes host memory is queued on the device.
///
/// # Safety
/// Both tensors are live and allocated.
pub unsafe fn copy_into_device(
    dev: &Device,
    src: &ggml_tensor,
    dst: &ggml_tensor,
    queue_only: bool,
) -> bool {
    // SAFETY: forwards the contract of `copy_into_device`: `src` is live.
    let n = unsafe { crate::ggml::nbytes(src) };
    // SAFETY: forwards the contract of `copy_into_device`: `dst` is live.
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
        // A queued copy snapshots the host bytes now, but a job queued earlier may still
        // write them (a node whose output is in a host buffer): decline, and the caller's
        // fallback (synchronize, then a blocking copy) orders the two.
        if queue_only
            && dev
                .host_writes_queued
                .load(std::sync::atomic::Ordering::Relaxed)
        {
            return false;
        }
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
    guard("ggml_backend_hrx_host_buffer_get_base", || {
        // SAFETY: ggml passes one of our host buffers.
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
        // SAFETY: ggml passes our host buffer and a live tensor in it.
        let (ctx, t) = unsafe { (host_ctx(b), non_null(t, "tensor")) };
        let p = host_range(ctx, t, offset, size);
        host_write(b);
        // SAFETY: [p, p + size) is inside the buffer (checked above).
        unsafe { std::ptr::write_bytes(p, value, size) };
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
        // SAFETY: ggml passes our host buffer and a live tensor in it.
        let (ctx, t) = unsafe { (host_ctx(b), non_null(t, "tensor")) };
        let p = host_range(ctx, t, offset, size);
        host_write(b);
        // SAFETY: as above, plus `size` readable bytes at `data`.
        unsafe { std::ptr::copy_nonoverlapping(data as *const u8, p, size) };
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
        // SAFETY: ggml passes our host buffer and a live tensor in it.
        let (ctx, t) = unsafe { (host_ctx(b), non_null(t, "tensor")) };
        let p = host_range(ctx, t, offset, size);
        sync(ctx.dev);
        // SAFETY: [p, p + size) is inside the buffer (checked above); `size` writable bytes
        // at `data`.
        unsafe { std::ptr::copy_nonoverlapping(p, data as *mut u8, size) };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::WeightKey;
    use crate::runtime::mock::{Call, MockRuntime, MOCK_BASE};
    use crate::runtime::Runtime;
    use crate::testing::{alloc_buffer, base, device, f32_tensor, foreign_buffer, free_buffer};

    /// The buffer's own interface, as ggml calls it.
    fn iface(b: ggml_backend_buffer_t) -> ggml_backend_buffer_i {
        // SAFETY: a live buffer.
        unsafe { (*b).iface }
    }

    fn buft_iface(t: ggml_backend_buffer_type_t) -> ggml_backend_buffer_type_i {
        // SAFETY: a live buffer type.
        unsafe { (*t).iface }
    }

    fn name(t: ggml_backend_buffer_type_t) -> String {
        // SAFETY: get_name returns the device's NUL-terminated name.
        unsafe { std::ffi::CStr::from_ptr(buft_iface(t).get_name.unwrap()(t)) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn device_buffer_type_allocates_through_the_runtime() {
        let m = MockRuntime::new(1 << 20);
        let d = device(&m, 1 << 20);
        let bt = d.buft();
        let i = buft_iface(bt);
        // SAFETY: our buffer type's callbacks.
        unsafe {
            assert_eq!(i.get_alignment.unwrap()(bt), 256);
            assert_eq!(i.get_max_size.unwrap()(bt), 1 << 20);
            assert!(!i.is_host.unwrap()(bt));
        }
        assert_eq!(name(bt), "HRX0");
        let b = alloc_buffer(bt, 1000);
        assert!(!b.is_null());
        assert_eq!(base(b), MOCK_BASE);
        // SAFETY: a live buffer.
        assert_eq!(unsafe { (*b).size }, 1000);
        assert_eq!(m.used(), 1024);
        // SAFETY: `b` is live and NULL is allowed.
        let (mine, null) = unsafe {
            (
                is_device_buffer_of(b, d),
                is_device_buffer_of(std::ptr::null_mut(), d),
            )
        };
        assert!(mine && !null);
        free_buffer(b);
        assert_eq!(
            m.take_calls(),
            vec![
                Call::Alloc {
                    size: 1000,
                    addr: Some(MOCK_BASE)
                },
                Call::Free(MOCK_BASE)
            ]
        );
        assert_eq!(m.used(), 0);
    }

    #[test]
    fn device_buffer_allocation_failure_returns_null() {
        let m = MockRuntime::new(1 << 16);
        let d = device(&m, 1 << 16);
        assert!(alloc_buffer(d.buft(), (1 << 16) + 1).is_null());
        assert_eq!(
            m.take_calls(),
            vec![Call::Alloc {
                size: (1 << 16) + 1,
                addr: None
            }]
        );
    }

    #[test]
    fn device_transfers_are_queued_then_waited_for() {
        let m = MockRuntime::new(1 << 20);
        let d = device(&m, 1 << 20);
        let b = alloc_buffer(d.buft(), 1024);
        let a = base(b);
        m.take_calls();
        // a 64-float tensor at offset 256 of the buffer
        let mut t = f32_tensor(GGML_OP_NONE, 64, b, a + 256);
        let tp: *mut ggml_tensor = &mut t;
        let data: Vec<u8> = (1..=16).collect();
        let mut out = vec![0u8; 32];
        let i = iface(b);
        // SAFETY: our buffer's callbacks with a tensor inside it and live host memory.
        unsafe {
            i.set_tensor.unwrap()(b, tp, data.as_ptr().cast(), 8, 16);
            i.get_tensor.unwrap()(b, tp, out.as_mut_ptr().cast(), 0, 32);
            i.memset_tensor.unwrap()(b, tp, 0xab, 4, 4);
            i.clear.unwrap()(b, 7);
        }
        assert_eq!(
            m.take_calls(),
            vec![
                Call::Upload {
                    dst: a + 256 + 8,
                    bytes: data.clone(),
                    owned: false
                },
                Call::Synchronize,
                Call::Download {
                    src: a + 256,
                    dst: out.as_ptr() as usize,
                    len: 32
                },
                Call::Synchronize,
                Call::Fill {
                    dst: a + 256 + 4,
                    value: 0xab,
                    len: 4
                },
                Call::Synchronize,
                Call::Fill {
                    dst: a,
                    value: 7,
                    len: 1024
                },
                Call::Synchronize,
            ]
        );
        assert_eq!(&out[8..24], &data[..]);
        assert_eq!(&out[..8], &[0; 8]);
        assert_eq!(m.peek(a, 1024), vec![7; 1024]);
        // a range past the buffer's end is refused before anything is queued
        // SAFETY: a live buffer of ours.
        let ctx = unsafe { dev_ctx(b) };
        let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            dev_range(ctx, &t, 1024 - 256, 1)
        }))
        .unwrap_err();
        let msg = e.downcast_ref::<String>().unwrap();
        assert!(msg.contains("is outside its HRX buffer"), "{msg}");
        assert_eq!(dev_range(ctx, &t, 1024 - 256 - 4, 4), a + 1020);
        assert!(m.take_calls().is_empty());
    }

    #[test]
    fn a_host_allocation_that_fails_is_logged_with_its_size() {
        let m = MockRuntime::new(1 << 20);
        let d = device(&m, 1 << 20);
        // more than any allocation may be (isize::MAX): refused by its layout
        let size = usize::MAX - 4096;
        let (b, log) = crate::testing::capture_log(|| alloc_buffer(d.host_buft(), size));
        assert!(b.is_null());
        assert_eq!(
            log,
            [format!(
                "HRX: HRX0_HOST: cannot allocate {size} bytes ({:.2} MiB) of host memory\n",
                size as f64 / 1048576.0
            )]
        );
    }

    #[test]
    fn ranges_whose_sums_wrap_are_refused() {
        let m = MockRuntime::new(1 << 20);
        let d = device(&m, 1 << 20);
        let b = alloc_buffer(d.buft(), 1024);
        let a = base(b);
        let h = alloc_buffer(d.host_buft(), 1024);
        let hp = base(h);
        m.take_calls();
        // the second of two tensors: an offset of SIZE_MAX - 3 wraps `data + offset` to 4
        // bytes before it, inside the buffer (over the first tensor), and the end to 4 after
        let t = f32_tensor(GGML_OP_NONE, 64, b, a + 256);
        let ht = f32_tensor(GGML_OP_NONE, 64, h, hp + 256);
        let refused = |f: &dyn Fn() -> usize| {
            let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_err();
            let msg = e.downcast_ref::<String>().unwrap().clone();
            assert!(msg.contains("is outside its HRX buffer"), "{msg}");
        };
        let wrap = usize::MAX - 3;
        // SAFETY: live buffers of ours.
        let (ctx, hctx) = unsafe { (dev_ctx(b), host_ctx(h)) };
        refused(&|| dev_range(ctx, &t, wrap, 8));
        refused(&|| dev_range(ctx, &t, 8, usize::MAX));
        // the path the backend's set/get_tensor_async take
        // SAFETY: a live device buffer of ours.
        refused(&|| unsafe { device_range(b, &t, wrap, 8) });
        refused(&|| host_range(hctx, &ht, wrap, 8) as usize);
        refused(&|| host_range(hctx, &ht, 1024 - 256, 1) as usize);
        // in range: the addresses
        // SAFETY: as above.
        assert_eq!(unsafe { device_range(b, &t, 768 - 4, 4) }, a + 1020);
        assert_eq!(host_range(hctx, &ht, 4, 8) as usize, hp + 260);
        assert!(
            m.take_calls().is_empty(),
            "nothing queued for a refused range"
        );
        free_buffer(h);
        free_buffer(b);
    }

    #[test]
    fn cpy_tensor_into_device_from_device_or_host_only() {
        let m = MockRuntime::new(1 << 20);
        let d = device(&m, 1 << 20);
        let b = alloc_buffer(d.buft(), 1024);
        let a = base(b);
        let src = f32_tensor(GGML_OP_NONE, 64, b, a);
        let mut dst = f32_tensor(GGML_OP_NONE, 64, b, a + 512);
        let cpy = iface(b).cpy_tensor.unwrap();
        m.take_calls();
        // device to device
        // SAFETY: live tensors; dst is in our buffer.
        assert!(unsafe { cpy(b, &src, &mut dst) });
        assert_eq!(
            m.take_calls(),
            vec![
                Call::Copy {
                    dst: a + 512,
                    src: a,
                    len: 256
                },
                Call::Synchronize
            ]
        );
        // from a foreign host buffer: a borrowed upload, waited for
        let host_bytes: Vec<u8> = (0..=255).collect();
        let hb = foreign_buffer(true, GGML_BACKEND_BUFFER_USAGE_ANY);
        let hsrc = f32_tensor(GGML_OP_NONE, 64, hb, host_bytes.as_ptr() as usize);
        // SAFETY: as above; hsrc's data is 256 readable bytes.
        assert!(unsafe { cpy(b, &hsrc, &mut dst) });
        assert_eq!(
            m.take_calls(),
            vec![
                Call::Upload {
                    dst: a + 512,
                    bytes: host_bytes.clone(),
                    owned: false
                },
                Call::Synchronize
            ]
        );
        // the async form copies the host bytes now and does not wait
        // SAFETY: as above.
        assert!(unsafe { copy_into_device(d, &hsrc, &dst, true) });
        assert_eq!(
            m.take_calls(),
            vec![Call::Upload {
                dst: a + 512,
                bytes: host_bytes.clone(),
                owned: true
            }]
        );
        // ... but not while a queued job may still write host memory: declined, nothing
        // queued, and the flag kept for the caller's synchronize
        d.host_writes_queued
            .store(true, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: as above.
        assert!(!unsafe { copy_into_device(d, &hsrc, &dst, true) });
        assert!(m.take_calls().is_empty());
        assert!(d
            .host_writes_queued
            .load(std::sync::atomic::Ordering::Relaxed));
        // the blocking form orders itself (it waits for the queue after its upload)
        // SAFETY: as above.
        assert!(unsafe { copy_into_device(d, &hsrc, &dst, false) });
        d.host_writes_queued
            .store(false, std::sync::atomic::Ordering::Relaxed);
        m.take_calls();
        // refused, with nothing queued: a source the device cannot read, a size mismatch,
        // a destination outside the device's allocations
        let fb = foreign_buffer(false, GGML_BACKEND_BUFFER_USAGE_ANY);
        let foreign = f32_tensor(GGML_OP_NONE, 64, fb, 0x1000);
        let short = f32_tensor(GGML_OP_NONE, 63, b, a);
        let mut stray = f32_tensor(GGML_OP_NONE, 64, b, a + 4096);
        // SAFETY: as above (the refused tensors are never dereferenced).
        unsafe {
            assert!(!cpy(b, &foreign, &mut dst));
            assert!(!cpy(b, &short, &mut dst));
            assert!(!cpy(b, &src, &mut stray));
        }
        assert!(m.take_calls().is_empty());
    }

    #[test]
    fn host_buffer_writes_wait_for_the_queue_and_bump_the_generation() {
        let m = MockRuntime::new(1 << 20);
        let d = device(&m, 1 << 20);
        let h = alloc_buffer(d.host_buft(), 100);
        let hp = base(h);
        assert_eq!(hp % ALIGNMENT, 0);
        assert_eq!(name(d.host_buft()), "HRX0_HOST");
        // SAFETY: our buffer type's callback.
        assert!(unsafe { buft_iface(d.host_buft()).is_host.unwrap()(d.host_buft()) });
        assert!(m.calls().is_empty(), "host buffers take no device memory");
        // SAFETY: `h` is a live host buffer of `d`.
        let gen = || unsafe { host_generation(h, d) };
        assert_eq!(gen(), 1);
        let mut t = f32_tensor(GGML_OP_NONE, 16, h, hp);
        let tp: *mut ggml_tensor = &mut t;
        let i = iface(h);
        let data = [9u8; 8];
        let mut out = [0u8; 16];
        // SAFETY: our host buffer's callbacks with a tensor inside it.
        unsafe {
            // host memory starts uninitialized, as ggml's CPU buffers do
            i.clear.unwrap()(h, 1);
            assert_eq!(gen(), 2);
            i.set_tensor.unwrap()(h, tp, data.as_ptr().cast(), 4, 8);
            assert_eq!(gen(), 3);
            i.memset_tensor.unwrap()(h, tp, 5, 0, 2);
            assert_eq!(gen(), 4);
            i.get_tensor.unwrap()(h, tp, out.as_mut_ptr().cast(), 0, 16);
            assert_eq!(gen(), 4, "reads leave the generation");
        }
        assert_eq!(out, [5, 5, 1, 1, 9, 9, 9, 9, 9, 9, 9, 9, 1, 1, 1, 1]);
        // every access waits for the queue first (the device may be using the memory)
        assert_eq!(m.take_calls(), vec![Call::Synchronize; 4]);
        // a foreign host buffer's weights are taken as immutable
        let fb = foreign_buffer(true, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        // SAFETY: a live buffer.
        assert_eq!(unsafe { host_generation(fb, d) }, 0);
        free_buffer(h);
    }

    #[test]
    fn host_cpy_tensor_downloads_from_the_device_and_copies_host_bytes() {
        let m = MockRuntime::new(1 << 20);
        let d = device(&m, 1 << 20);
        let b = alloc_buffer(d.buft(), 256);
        let a = base(b);
        let h = alloc_buffer(d.host_buft(), 256);
        let hp = base(h);
        let payload: Vec<u8> = (0..64).map(|x| x * 3).collect();
        m.upload(a, HostSrc::Owned(payload.clone()));
        m.take_calls();
        let src = f32_tensor(GGML_OP_NONE, 16, b, a);
        let mut dst = f32_tensor(GGML_OP_NONE, 16, h, hp);
        let cpy = iface(h).cpy_tensor.unwrap();
        // SAFETY: live tensors; dst is in our host buffer.
        assert!(unsafe { cpy(h, &src, &mut dst) });
        assert_eq!(
            m.take_calls(),
            vec![
                Call::Synchronize,
                Call::Download {
                    src: a,
                    dst: hp,
                    len: 64
                },
                Call::Synchronize
            ]
        );
        // SAFETY: the first 64 bytes of our live host buffer; no copy is running.
        let landed = unsafe { std::slice::from_raw_parts(hp as *const u8, 64) };
        assert_eq!(landed, &payload[..]);
        // host to host is a plain copy after waiting for the queue
        let other = [0x5au8; 64];
        let fb = foreign_buffer(true, GGML_BACKEND_BUFFER_USAGE_ANY);
        let hsrc = f32_tensor(GGML_OP_NONE, 16, fb, other.as_ptr() as usize);
        // SAFETY: as above.
        assert!(unsafe { cpy(h, &hsrc, &mut dst) });
        assert_eq!(m.take_calls(), vec![Call::Synchronize]);
        // SAFETY: as above.
        let landed = unsafe { std::slice::from_raw_parts(hp as *const u8, 64) };
        assert_eq!(landed, &other[..]);
        // a source the device cannot read: false
        let nb = foreign_buffer(false, GGML_BACKEND_BUFFER_USAGE_ANY);
        let nsrc = f32_tensor(GGML_OP_NONE, 16, nb, 0x1000);
        // SAFETY: as above (nsrc's data is never read).
        assert!(!unsafe { cpy(h, &nsrc, &mut dst) });
        free_buffer(h);
        free_buffer(b);
    }

    #[test]
    fn freeing_a_host_buffer_drops_its_arena_copies_then_waits() {
        let m = MockRuntime::new(1 << 20);
        let d = device(&m, 1 << 20);
        let h = alloc_buffer(d.host_buft(), 512);
        let hp = base(h);
        let key = WeightKey {
            ptr: hp + 256,
            size: 128,
        };
        let addr = d.arena.lock().acquire(&*d.rt, key, 1, &[]).unwrap();
        assert_eq!(d.arena.lock().stats().resident_bytes, 128);
        m.take_calls();
        free_buffer(h);
        assert_eq!(
            m.take_calls(),
            vec![Call::FreeWeight(addr), Call::Synchronize]
        );
        assert_eq!(d.arena.lock().stats().resident_bytes, 0);
    }
}
