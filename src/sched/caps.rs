//! What the placement passes ask of the backends, behind one trait so that the passes are
//! plain functions over a [`Table`](super::table::Table) and unit tests can run them against
//! a mock without any device. [`Live`] answers through the ggml backend layer.

use ggml_sys::{ggml_backend_buffer_t, ggml_backend_buffer_type_t, ggml_backend_t, ggml_tensor};

use super::inspect::cstr;
use crate::backend;
use crate::buffer::{self, buffer_ref};
use crate::buffer_type::{self, buft_ref};
use crate::ffi::c_name;

/// The questions the scheduler's passes ask. Backend indices are priorities: 0 is the
/// highest, the last one is the CPU.
pub trait Caps {
    /// Number of backends (at least 1).
    fn n_backends(&self) -> usize;
    /// The buffer type the scheduler allocates compute tensors of backend `b` in.
    fn buft(&self, b: usize) -> ggml_backend_buffer_type_t;
    /// `ggml_backend_supports_op(backends[b], op)`.
    ///
    /// # Safety
    /// The pointer argument must be live for the call.
    unsafe fn supports_op(&self, b: usize, op: *const ggml_tensor) -> bool;
    /// `ggml_backend_supports_buft(backends[b], buft)`.
    ///
    /// # Safety
    /// The pointer argument must be live for the call.
    unsafe fn supports_buft(&self, b: usize, buft: ggml_backend_buffer_type_t) -> bool;
    /// `ggml_backend_offload_op(backends[b], op)`.
    ///
    /// # Safety
    /// The pointer argument must be live for the call.
    unsafe fn offload_op(&self, b: usize, op: *const ggml_tensor) -> bool;
    /// `ggml_backend_buffer_is_host(buf)`.
    ///
    /// # Safety
    /// The pointer argument must be live for the call.
    unsafe fn buffer_is_host(&self, buf: ggml_backend_buffer_t) -> bool;
    /// `ggml_backend_buft_is_host(buft)`.
    ///
    /// # Safety
    /// The pointer argument must be live for the call.
    unsafe fn buft_is_host(&self, buft: ggml_backend_buffer_type_t) -> bool;
    /// A name for backend `b`, for messages.
    fn backend_name(&self, b: usize) -> String;
    /// A name for a buffer type, for messages.
    ///
    /// # Safety
    /// The pointer argument must be live for the call.
    unsafe fn buft_name(&self, buft: ggml_backend_buffer_type_t) -> String;

    /// Whether ggml-alloc may give a node of `op` the memory of one of its sources
    /// (`ggml_op_can_inplace`).
    fn op_can_inplace(&self, op: ggml_sys::ggml_op) -> bool {
        // SAFETY: a pure function of the op code.
        unsafe { ggml_sys::ggml_op_can_inplace(op) }
    }

    /// The last backend, assumed to be the CPU (stock asserts it at creation).
    fn cpu(&self) -> usize {
        self.n_backends() - 1
    }
}

/// [`Caps`] over real backends, through the layer's internal functions (not through its
/// exported entry points).
pub struct Live<'a> {
    /// The scheduler's backends, by priority.
    pub backends: &'a [ggml_backend_t],
    /// The scheduler's buffer type per backend.
    pub bufts: &'a [ggml_backend_buffer_type_t],
}

impl<'a> Live<'a> {
    /// Answers for `backends`, each allocating compute tensors in the matching `bufts` entry.
    ///
    /// # Safety
    /// Every backend must be non-NULL and live while the result is: a scheduler's own list
    /// (`ggml_backend_sched_new` checks each).
    pub unsafe fn new(
        backends: &'a [ggml_backend_t],
        bufts: &'a [ggml_backend_buffer_type_t],
    ) -> Self {
        Live { backends, bufts }
    }
}

impl Live<'_> {
    /// Backend `b`, borrowed.
    fn backend(&self, b: usize) -> &ggml_sys::ggml_backend {
        // SAFETY: non-NULL and live by the contract of `Live::new`.
        unsafe { &*self.backends[b] }
    }
}

// The layer's internal functions, not its exported entry points: each pass asks these
// questions per node and backend, and every entry point would repeat the NULL checks of the
// handles the scheduler already holds.
impl Caps for Live<'_> {
    fn n_backends(&self) -> usize {
        self.backends.len()
    }
    fn buft(&self, b: usize) -> ggml_backend_buffer_type_t {
        self.bufts[b]
    }
    unsafe fn supports_op(&self, b: usize, op: *const ggml_tensor) -> bool {
        // SAFETY: op is a live graph tensor (the trait's contract).
        unsafe { backend::supports_op(self.backend(b), op) }
    }
    unsafe fn supports_buft(&self, b: usize, buft: ggml_backend_buffer_type_t) -> bool {
        // SAFETY: buft is live (the trait's contract): a tensor's or the scheduler's own.
        unsafe { backend::supports_buft(self.backend(b), buft) }
    }
    unsafe fn offload_op(&self, b: usize, op: *const ggml_tensor) -> bool {
        // SAFETY: op is a live graph tensor (the trait's contract).
        unsafe { backend::offload_op(self.backend(b), op) }
    }
    unsafe fn buffer_is_host(&self, buf: ggml_backend_buffer_t) -> bool {
        // SAFETY: buf is NULL (abort) or a live buffer (the trait's contract).
        buffer::is_host(unsafe { buffer_ref(buf, c_name!(buffer::ggml_backend_buffer_is_host)) })
    }
    unsafe fn buft_is_host(&self, buft: ggml_backend_buffer_type_t) -> bool {
        // SAFETY: buft is NULL (abort) or a live buffer type (the trait's contract).
        buffer_type::is_host(unsafe {
            buft_ref(buft, c_name!(buffer_type::ggml_backend_buft_is_host))
        })
    }
    fn backend_name(&self, b: usize) -> String {
        // SAFETY: a backend's name lives as long as the backend.
        unsafe { cstr(backend::name(self.backend(b))) }
    }
    unsafe fn buft_name(&self, buft: ggml_backend_buffer_type_t) -> String {
        // SAFETY: buft is NULL (abort) or a live buffer type whose name lives as long.
        unsafe {
            cstr(buffer_type::name(buft_ref(
                buft,
                c_name!(buffer_type::ggml_backend_buft_name),
            )))
        }
    }
}
