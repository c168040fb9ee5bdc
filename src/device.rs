//! Devices (`ggml_backend_dev_*`) and backend registrations (`ggml_backend_reg_*`): dispatch
//! over the `ggml_backend_device_i` and `ggml_backend_reg_i` tables that backends fill in.
//! Devices and registrations are owned by their backend library and live for the whole
//! process; nothing here frees one. A NULL device or registration aborts, as stock's
//! `GGML_ASSERT` does.

use std::os::raw::{c_char, c_void};

use ggml_sys::{
    ggml_backend_buffer_t, ggml_backend_buffer_type_t, ggml_backend_dev_props, ggml_backend_dev_t,
    ggml_backend_dev_type as DevType, ggml_backend_device, ggml_backend_reg, ggml_backend_reg_t,
    ggml_backend_t, ggml_tensor,
};

use crate::ffi::{c_name, export, handle, non_null};
use crate::iface::required;

/// Borrows the device behind `device`, aborting naming `func` when it is NULL.
///
/// # Safety
/// `device` must be NULL or point to a live device.
pub(crate) unsafe fn dev_ref<'a>(
    device: ggml_backend_dev_t,
    func: &str,
) -> &'a ggml_backend_device {
    // SAFETY: forwards the contract of `dev_ref`: `device` is NULL or a live device.
    unsafe { non_null(device, func, "device") }
}

/// Borrows the registration behind `reg`, aborting naming `func` when it is NULL.
///
/// # Safety
/// `reg` must be NULL or point to a live registration.
unsafe fn reg_ref<'a>(reg: ggml_backend_reg_t, func: &str) -> &'a ggml_backend_reg {
    // SAFETY: forwards the contract of `reg_ref`: `reg` is NULL or a live registration.
    unsafe { non_null(reg, func, "reg") }
}

export! {
    /// The device's short name, e.g. "CPU" (stock `ggml_backend_dev_name`).
    ///
    /// # Safety
    /// `device` must be NULL or point to a live device.
    pub unsafe fn ggml_backend_dev_name(device: ggml_backend_dev_t) -> *const c_char {
        // SAFETY: `device` is NULL or live (the `# Safety` contract; `dev_ref` aborts on NULL), and
        // its `get_name` is called with the device itself, as the interface expects.
        unsafe { required(dev_ref(device, F).iface.get_name, F, "get_name")(device) }
    }
}

export! {
    /// The device's description (stock `ggml_backend_dev_description`).
    ///
    /// # Safety
    /// `device` must be NULL or point to a live device.
    pub unsafe fn ggml_backend_dev_description(device: ggml_backend_dev_t) -> *const c_char {
        // SAFETY: `device` is NULL or live (the `# Safety` contract; `dev_ref` aborts on NULL), and
        // its `get_description` is called with the device itself, as the interface expects.
        unsafe {
            required(
                dev_ref(device, F).iface.get_description,
                F,
                "get_description",
            )(device)
        }
    }
}

export! {
    /// Writes the device's free and total memory in bytes to `free` and `total` (stock
    /// `ggml_backend_dev_memory`).
    ///
    /// # Safety
    /// `device` NULL or live; `free` and `total` writable.
    pub unsafe fn ggml_backend_dev_memory(
        device: ggml_backend_dev_t,
        free: *mut usize,
        total: *mut usize,
    ) {
        // The device's callback writes both out-parameters (stock: SIGSEGV on NULL).
        crate::ffi::require_non_null(free, F, "free");
        crate::ffi::require_non_null(total, F, "total");
        // SAFETY: `device` is NULL or live (`dev_ref` aborts on NULL) and `free`, `total` writable
        // (the `# Safety` contract); the device's `get_memory` is called with the device itself and
        // those two out-parameters.
        unsafe {
            required(dev_ref(device, F).iface.get_memory, F, "get_memory")(device, free, total)
        }
    }
}

export! {
    /// The device's type: CPU, GPU, integrated GPU, accelerator (stock `ggml_backend_dev_type`).
    ///
    /// # Safety
    /// `device` must be NULL or point to a live device.
    pub unsafe fn ggml_backend_dev_type(device: ggml_backend_dev_t) -> DevType {
        // SAFETY: forwards the contract of `ggml_backend_dev_type`: `device` is NULL or live
        // (`dev_ref` aborts on NULL).
        dev_type(unsafe { dev_ref(device, F) })
    }
}

/// The body of [`ggml_backend_dev_type`], for the library's own callers.
pub(crate) fn dev_type(device: &ggml_backend_device) -> DevType {
    const F: &str = c_name!(ggml_backend_dev_type);
    let f = required(device.iface.get_type, F, "get_type");
    // SAFETY: the device's own callback with itself, live while borrowed.
    unsafe { f(handle(device)) }
}

export! {
    /// Zeroes `*props`, then lets the device fill it in (stock `ggml_backend_dev_get_props`).
    /// Aborts when `device` or `props` is NULL.
    ///
    /// # Safety
    /// `device` NULL or live; `props` NULL or writable.
    pub unsafe fn ggml_backend_dev_get_props(
        device: ggml_backend_dev_t,
        props: *mut ggml_backend_dev_props,
    ) {
        // SAFETY: forwards the contract of `ggml_backend_dev_get_props`: `device` is NULL or live
        // (`dev_ref` aborts on NULL).
        let d = unsafe { dev_ref(device, F) };
        // SAFETY: `props` is NULL or writable (the `# Safety` contract) and `non_null_mut` aborts
        // on NULL, so the write goes to a writable `ggml_backend_dev_props`.
        unsafe { *crate::ffi::non_null_mut(props, F, "props") = ggml_backend_dev_props::default() };
        // SAFETY: the device's callback with itself.
        unsafe { required(d.iface.get_props, F, "get_props")(device, props) }
    }
}

export! {
    /// The registration the device belongs to (stock `ggml_backend_dev_backend_reg`).
    ///
    /// # Safety
    /// `device` must be NULL or point to a live device.
    pub unsafe fn ggml_backend_dev_backend_reg(device: ggml_backend_dev_t) -> ggml_backend_reg_t {
        // SAFETY: forwards the contract of `ggml_backend_dev_backend_reg`: `device` is NULL or live
        // (`dev_ref` aborts on NULL).
        unsafe { dev_ref(device, F) }.reg
    }
}

export! {
    /// Starts a backend on the device with the optional `params` string (stock
    /// `ggml_backend_dev_init`); NULL when the device fails. The caller owns the backend.
    ///
    /// # Safety
    /// `device` NULL or live; `params` NULL or a C string.
    pub unsafe fn ggml_backend_dev_init(
        device: ggml_backend_dev_t,
        params: *const c_char,
    ) -> ggml_backend_t {
        // SAFETY: `device` is NULL or live (`dev_ref` aborts on NULL) and `params` NULL or a C
        // string (the `# Safety` contract), as the device's `init_backend` takes them.
        unsafe {
            required(dev_ref(device, F).iface.init_backend, F, "init_backend")(device, params)
        }
    }
}

export! {
    /// The device's default (device-local) buffer type (stock `ggml_backend_dev_buffer_type`).
    ///
    /// # Safety
    /// `device` must be NULL or point to a live device.
    pub unsafe fn ggml_backend_dev_buffer_type(
        device: ggml_backend_dev_t,
    ) -> ggml_backend_buffer_type_t {
        // SAFETY: forwards the contract of `ggml_backend_dev_buffer_type`: `device` is NULL or live
        // (`dev_ref` aborts on NULL).
        buffer_type(unsafe { dev_ref(device, F) })
    }
}

/// The body of [`ggml_backend_dev_buffer_type`], for the library's own callers.
pub(crate) fn buffer_type(device: &ggml_backend_device) -> ggml_backend_buffer_type_t {
    const F: &str = c_name!(ggml_backend_dev_buffer_type);
    let f = required(device.iface.get_buffer_type, F, "get_buffer_type");
    // SAFETY: the device's own callback with the device it belongs to, live while borrowed.
    unsafe { f(handle(device)) }
}

export! {
    /// The device's pinned host buffer type, NULL when it has none (stock
    /// `ggml_backend_dev_host_buffer_type`).
    ///
    /// # Safety
    /// `device` must be NULL or point to a live device.
    pub unsafe fn ggml_backend_dev_host_buffer_type(
        device: ggml_backend_dev_t,
    ) -> ggml_backend_buffer_type_t {
        // SAFETY: forwards the contract of `ggml_backend_dev_host_buffer_type`: `device` is NULL or
        // live (`dev_ref` aborts on NULL).
        match unsafe { dev_ref(device, F) }.iface.get_host_buffer_type {
            // SAFETY: the device's callback with itself.
            Some(f) => unsafe { f(device) },
            None => std::ptr::null_mut(),
        }
    }
}

export! {
    /// Wraps `size` bytes of host memory at `ptr` in a buffer of the device (stock
    /// `ggml_backend_dev_buffer_from_host_ptr`); the memory stays the caller's. Aborts when the
    /// device cannot (no `buffer_from_host_ptr`; check the device's caps first).
    ///
    /// # Safety
    /// `device` NULL or live; `ptr` valid for `size` bytes while the buffer lives.
    pub unsafe fn ggml_backend_dev_buffer_from_host_ptr(
        device: ggml_backend_dev_t,
        ptr: *mut c_void,
        size: usize,
        max_tensor_size: usize,
    ) -> ggml_backend_buffer_t {
        // SAFETY: forwards the contract of `ggml_backend_dev_buffer_from_host_ptr`: `device` is
        // NULL or live (`dev_ref` aborts on NULL).
        let d = unsafe { dev_ref(device, F) };
        let f = required(d.iface.buffer_from_host_ptr, F, "buffer_from_host_ptr");
        // SAFETY: the device's callback with itself.
        unsafe { f(device, ptr, size, max_tensor_size) }
    }
}

export! {
    /// Whether the device can compute `op` (stock `ggml_backend_dev_supports_op`).
    ///
    /// # Safety
    /// `device` NULL or live; `op` a live tensor.
    pub unsafe fn ggml_backend_dev_supports_op(
        device: ggml_backend_dev_t,
        op: *const ggml_tensor,
    ) -> bool {
        crate::ffi::require_non_null(op, F, "op");
        // SAFETY: the device is NULL (abort) or live and `op` a live tensor (`# Safety`).
        unsafe { supports_op(dev_ref(device, F), op) }
    }
}

/// The body of [`ggml_backend_dev_supports_op`], for the library's own callers.
///
/// # Safety
/// `op` must point to a live tensor (it goes to the backend as is).
pub(crate) unsafe fn supports_op(device: &ggml_backend_device, op: *const ggml_tensor) -> bool {
    const F: &str = c_name!(ggml_backend_dev_supports_op);
    let f = required(device.iface.supports_op, F, "supports_op");
    // SAFETY: the device's own callback with the device it belongs to; `op` is live.
    unsafe { f(handle(device), op) }
}

export! {
    /// Whether the device can use buffers of `buft` (stock `ggml_backend_dev_supports_buft`).
    ///
    /// # Safety
    /// `device` NULL or live; `buft` a live buffer type.
    pub unsafe fn ggml_backend_dev_supports_buft(
        device: ggml_backend_dev_t,
        buft: ggml_backend_buffer_type_t,
    ) -> bool {
        // SAFETY: the device is NULL (abort) or live and `buft` a live buffer type (`# Safety`).
        unsafe { supports_buft(dev_ref(device, F), buft) }
    }
}

/// The body of [`ggml_backend_dev_supports_buft`], for the library's own callers.
///
/// # Safety
/// `buft` must point to a live buffer type (it goes to the backend as is).
pub(crate) unsafe fn supports_buft(
    device: &ggml_backend_device,
    buft: ggml_backend_buffer_type_t,
) -> bool {
    const F: &str = c_name!(ggml_backend_dev_supports_buft);
    let f = required(device.iface.supports_buft, F, "supports_buft");
    // SAFETY: the device's own callback with the device it belongs to; `buft` is live.
    unsafe { f(handle(device), buft) }
}

export! {
    /// Whether the device wants `op` although its weights are in host memory (stock
    /// `ggml_backend_dev_offload_op`); false when the device does not say.
    ///
    /// # Safety
    /// `device` NULL or live; `op` a live tensor.
    pub unsafe fn ggml_backend_dev_offload_op(
        device: ggml_backend_dev_t,
        op: *const ggml_tensor,
    ) -> bool {
        // SAFETY: the device is NULL (abort) or live and `op` a live tensor (`# Safety`).
        unsafe { offload_op(dev_ref(device, F), op) }
    }
}

/// The body of [`ggml_backend_dev_offload_op`], for the library's own callers.
///
/// # Safety
/// `op` must point to a live tensor (it goes to the backend as is).
pub(crate) unsafe fn offload_op(device: &ggml_backend_device, op: *const ggml_tensor) -> bool {
    match device.iface.offload_op {
        // SAFETY: the device's own callback with the device it belongs to; `op` is live.
        Some(f) => unsafe { f(handle(device), op) },
        None => false,
    }
}

export! {
    /// The registration's name, e.g. "CPU" (stock `ggml_backend_reg_name`).
    ///
    /// # Safety
    /// `reg` must be NULL or point to a live registration.
    pub unsafe fn ggml_backend_reg_name(reg: ggml_backend_reg_t) -> *const c_char {
        // SAFETY: `reg` is NULL or live (the `# Safety` contract; `reg_ref` aborts on NULL), and
        // its `get_name` is called with the registration itself, as the interface expects.
        unsafe { required(reg_ref(reg, F).iface.get_name, F, "get_name")(reg) }
    }
}

export! {
    /// How many devices the registration has (stock `ggml_backend_reg_dev_count`).
    ///
    /// # Safety
    /// `reg` must be NULL or point to a live registration.
    pub unsafe fn ggml_backend_reg_dev_count(reg: ggml_backend_reg_t) -> usize {
        // SAFETY: `reg` is NULL or live (the `# Safety` contract; `reg_ref` aborts on NULL), and
        // its `get_device_count` is called with the registration itself, as the interface expects.
        unsafe {
            required(
                reg_ref(reg, F).iface.get_device_count,
                F,
                "get_device_count",
            )(reg)
        }
    }
}

export! {
    /// The registration's device number `index` (stock `ggml_backend_reg_dev_get`); what an index
    /// out of range gives is the backend's choice.
    ///
    /// # Safety
    /// `reg` must be NULL or point to a live registration.
    pub unsafe fn ggml_backend_reg_dev_get(
        reg: ggml_backend_reg_t,
        index: usize,
    ) -> ggml_backend_dev_t {
        // SAFETY: `reg` is NULL or live (the `# Safety` contract; `reg_ref` aborts on NULL), and
        // its `get_device` is called with the registration itself; what an index out of range gives
        // is the backend's choice, documented as such.
        unsafe { required(reg_ref(reg, F).iface.get_device, F, "get_device")(reg, index) }
    }
}

export! {
    /// An extension function of the registration by name, NULL when unknown or when the
    /// registration has no lookup (stock `ggml_backend_reg_get_proc_address`).
    ///
    /// # Safety
    /// `reg` NULL or live; `name` a C string.
    pub unsafe fn ggml_backend_reg_get_proc_address(
        reg: ggml_backend_reg_t,
        name: *const c_char,
    ) -> *mut c_void {
        // SAFETY: forwards the contract of `ggml_backend_reg_get_proc_address`: `reg` is NULL or
        // live (`reg_ref` aborts on NULL).
        match unsafe { reg_ref(reg, F) }.iface.get_proc_address {
            Some(f) => {
                // Registrations compare the name with strcmp (stock: SIGSEGV on NULL). Without
                // a lookup the name is never read, and NULL is the answer, as in stock.
                crate::ffi::require_non_null(name, F, "name");
                // SAFETY: the registration's callback with itself and a non-NULL name.
                unsafe { f(reg, name) }
            }
            None => std::ptr::null_mut(),
        }
    }
}
