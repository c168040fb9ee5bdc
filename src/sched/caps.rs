//! What the placement passes ask of the backends, behind one trait so that the passes are
//! plain functions over a [`Table`](super::table::Table) and unit tests can run them against
//! a mock without any device. [`Live`] answers through the ggml backend layer.

use std::cell::Cell;

use ggml_sys::{
    ggml_backend_buffer_t, ggml_backend_buffer_type_t, ggml_backend_dev_t, ggml_backend_t,
    ggml_tensor,
};

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

/// A device's `supports_op` callback.
type SupportsOp = unsafe extern "C" fn(ggml_backend_dev_t, *const ggml_tensor) -> bool;
/// A device's `supports_buft` callback.
type SupportsBuft = unsafe extern "C" fn(ggml_backend_dev_t, ggml_backend_buffer_type_t) -> bool;

/// What [`Live`] asks of one backend's device, read when the `Live` is made. The passes ask
/// about two thousand questions of a 900-node graph, and each went from the backend to its
/// device to the device's interface with a check at every step, three times the
/// instructions of stock's path.
pub struct Dev {
    /// The backend's device, with its two callbacks; `None` when the device or a callback
    /// is NULL, and then every such question takes the checked path, which aborts naming
    /// what is missing as it always did.
    fns: Option<(ggml_backend_dev_t, SupportsOp, SupportsBuft)>,
    /// The last two buffer types asked of this device, newest first, with the answers (NULL:
    /// none yet). `supports_buft` reads the device and the buffer type only, and pass 1 asks
    /// it for every weight and its reader: about 1,060 questions of a SmolLM2 graph, of 3
    /// distinct pairs. Kept for one `Live`, so one placement.
    bufts: [Cell<(ggml_backend_buffer_type_t, bool)>; 2],
}

/// [`Caps`] over real backends, through the layer's internal functions (not through its
/// exported entry points).
pub struct Live<'a> {
    /// The scheduler's backends, by priority.
    pub backends: &'a [ggml_backend_t],
    /// The scheduler's buffer type per backend.
    pub bufts: &'a [ggml_backend_buffer_type_t],
    /// Per backend, its device's callbacks and the buffer types asked.
    devs: &'a [Dev],
}

impl<'a> Live<'a> {
    /// Answers for `backends`, each allocating compute tensors in the matching `bufts` entry;
    /// `devs` is the scheduler's scratch list, refilled here (its memory kept from call to
    /// call).
    ///
    /// # Safety
    /// Every backend must be non-NULL and live while the result is: a scheduler's own list
    /// (`ggml_backend_sched_new` checks each).
    pub unsafe fn new(
        backends: &'a [ggml_backend_t],
        bufts: &'a [ggml_backend_buffer_type_t],
        devs: &'a mut Vec<Dev>,
    ) -> Self {
        devs.clear();
        devs.extend(backends.iter().map(|&b| {
            // SAFETY: non-NULL and live (this function's contract); a live backend's device
            // is NULL or live for the process.
            let dev = unsafe { (*b).device };
            // SAFETY: as above; `as_ref` handles NULL.
            let fns = unsafe { dev.as_ref() }
                .and_then(|d| Some((dev, d.iface.supports_op?, d.iface.supports_buft?)));
            Dev {
                fns,
                bufts: [const { Cell::new((std::ptr::null_mut(), false)) }; 2],
            }
        }));
        Live {
            backends,
            bufts,
            devs,
        }
    }
}

impl Live<'_> {
    /// [`Caps::supports_buft`] when the buffer type is not among the last two asked of
    /// backend `b`: asks the device and remembers the answer. Out of line, so that the
    /// remembered answers (nearly every question) take a few instructions.
    ///
    /// # Safety
    /// `buft` must be live for the call.
    #[inline(never)]
    unsafe fn ask_buft(&self, b: usize, buft: ggml_backend_buffer_type_t) -> bool {
        let d = &self.devs[b];
        let answer = match d.fns {
            // SAFETY: the device's own callback with the device it belongs to, read from the
            // live device in `Live::new`; buft is live (this function's contract): a
            // tensor's or the scheduler's own.
            Some((dev, _, f)) => unsafe { f(dev, buft) },
            // SAFETY: as above.
            None => unsafe { backend::supports_buft(self.backend(b), buft) },
        };
        if !buft.is_null() {
            let [newest, older] = &d.bufts;
            older.set(newest.get());
            newest.set((buft, answer));
        }
        answer
    }

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
    #[inline]
    unsafe fn supports_op(&self, b: usize, op: *const ggml_tensor) -> bool {
        match self.devs[b].fns {
            // SAFETY: the device's own callback with the device it belongs to, read from the
            // live device in `Live::new`; op is a live graph tensor (the trait's contract).
            Some((dev, f, _)) => unsafe { f(dev, op) },
            // SAFETY: as above.
            None => unsafe { backend::supports_op(self.backend(b), op) },
        }
    }
    #[inline]
    unsafe fn supports_buft(&self, b: usize, buft: ggml_backend_buffer_type_t) -> bool {
        let [newest, older] = &self.devs[b].bufts;
        if !buft.is_null() {
            for m in [newest, older] {
                let (asked, answer) = m.get();
                if asked == buft {
                    return answer;
                }
            }
        }
        // SAFETY: forwards this function's contract.
        unsafe { self.ask_buft(b, buft) }
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
