//! What the placement passes ask of the backends, behind one trait so that the passes are
//! plain functions over a [`Table`](super::table::Table) and unit tests can run them against
//! a mock without any device. [`Live`] answers through the ggml backend layer.

use ggml_sys::{ggml_backend_buffer_t, ggml_backend_buffer_type_t, ggml_backend_t, ggml_tensor};

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

/// A C string as an owned Rust string ("" for NULL).
///
/// # Safety
/// `p` must be NULL or a NUL-terminated string live for the call.
pub unsafe fn cstr(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
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

/// Read-only access to a tensor behind a raw graph pointer.
///
/// # Safety
/// `t` must be NULL or point to a live tensor for `'a`.
pub unsafe fn tensor<'a>(t: *const ggml_tensor) -> Option<&'a ggml_tensor> {
    t.as_ref()
}

/// The non-NULL sources of `t`, in slot order, with their slot index.
pub fn sources(t: &ggml_tensor) -> impl Iterator<Item = (usize, *mut ggml_tensor)> + '_ {
    t.src
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, s)| !s.is_null())
}

/// The nodes of a graph as a slice (empty for an empty graph).
///
/// # Safety
/// `g` must be a live graph whose `nodes` holds `n_nodes` pointers, not resized for `'a`.
pub unsafe fn nodes<'a>(g: &ggml_sys::ggml_cgraph) -> &'a [*mut ggml_tensor] {
    if g.nodes.is_null() || g.n_nodes <= 0 {
        &[]
    } else {
        std::slice::from_raw_parts(g.nodes, g.n_nodes as usize)
    }
}

/// The leafs of a graph as a slice (empty for an empty graph).
///
/// # Safety
/// As [`nodes`], for `leafs` and `n_leafs`.
pub unsafe fn leafs<'a>(g: &ggml_sys::ggml_cgraph) -> &'a [*mut ggml_tensor] {
    if g.leafs.is_null() || g.n_leafs <= 0 {
        &[]
    } else {
        std::slice::from_raw_parts(g.leafs, g.n_leafs as usize)
    }
}

/// A tensor's name (lossy UTF-8).
pub fn name(t: &ggml_tensor) -> String {
    // SAFETY: ggml keeps `name` NUL-terminated (its setters truncate to 63 bytes).
    unsafe { cstr(t.name.as_ptr()) }
}

#[cfg(test)]
pub(crate) mod mock {
    //! A pure-Rust stand-in for backends, buffers and tensors, for the passes' unit tests.

    use super::*;
    use ggml_sys::{ggml_backend_buffer, ggml_op};
    use std::collections::HashSet;

    /// One mock backend: which ops it runs, which buffer types it can use, which ops it
    /// asks to offload.
    #[derive(Default)]
    pub struct MockBackend {
        /// Name for messages.
        pub name: String,
        /// Ops it supports (GGML_OP_NONE is added always).
        pub ops: HashSet<ggml_op>,
        /// Tensors it refuses although the op is in `ops`.
        pub refuse: HashSet<usize>,
        /// Buffer types (by fake address) it can use.
        pub bufts: HashSet<usize>,
        /// Ops it wants to offload.
        pub offload: HashSet<ggml_op>,
    }

    /// Backends by priority; buffer type of backend `b` is the fake address `0x100 * (b + 1)`
    /// unless `own_buft` says otherwise.
    #[derive(Default)]
    pub struct Mock {
        /// The backends.
        pub backends: Vec<MockBackend>,
        /// Per backend, the buffer type it allocates in.
        pub own_buft: Vec<usize>,
        /// Buffer types that are host-addressable.
        pub host_bufts: HashSet<usize>,
    }

    impl Mock {
        /// `n` backends, each with its own buffer type `0x100*(b+1)`, the last (CPU) one
        /// host-addressable; each supports every op in `ops[b]`.
        pub fn new(ops: &[&[ggml_op]]) -> Mock {
            let mut m = Mock::default();
            for (b, o) in ops.iter().enumerate() {
                let buft = 0x100 * (b + 1);
                m.backends.push(MockBackend {
                    name: format!("B{b}"),
                    ops: o.iter().copied().chain([ggml_sys::GGML_OP_NONE]).collect(),
                    bufts: [buft].into_iter().collect(),
                    ..Default::default()
                });
                m.own_buft.push(buft);
            }
            let cpu = m.own_buft[ops.len() - 1];
            m.host_bufts.insert(cpu);
            // every backend can read host memory in this mock unless a test removes it
            for b in &mut m.backends {
                b.bufts.insert(cpu);
            }
            m
        }
    }

    impl Caps for Mock {
        fn n_backends(&self) -> usize {
            self.backends.len()
        }
        fn buft(&self, b: usize) -> ggml_backend_buffer_type_t {
            self.own_buft[b] as ggml_backend_buffer_type_t
        }
        unsafe fn supports_op(&self, b: usize, op: *const ggml_tensor) -> bool {
            // SAFETY: tests pass live boxed tensors.
            let t = unsafe { &*op };
            self.backends[b].ops.contains(&t.op)
                && !self.backends[b].refuse.contains(&(op as usize))
        }
        unsafe fn supports_buft(&self, b: usize, buft: ggml_backend_buffer_type_t) -> bool {
            self.backends[b].bufts.contains(&(buft as usize))
        }
        unsafe fn offload_op(&self, b: usize, op: *const ggml_tensor) -> bool {
            // SAFETY: as above.
            self.backends[b].offload.contains(&unsafe { &*op }.op)
        }
        unsafe fn buffer_is_host(&self, buf: ggml_backend_buffer_t) -> bool {
            // SAFETY: tests pass live boxed buffers.
            self.host_bufts.contains(&(unsafe { &*buf }.buft as usize))
        }
        unsafe fn buft_is_host(&self, buft: ggml_backend_buffer_type_t) -> bool {
            self.host_bufts.contains(&(buft as usize))
        }
        fn backend_name(&self, b: usize) -> String {
            self.backends[b].name.clone()
        }
        unsafe fn buft_name(&self, buft: ggml_backend_buffer_type_t) -> String {
            format!("buft{:#x}", buft as usize)
        }
    }

    /// Owns fake tensors and buffers; pointers stay valid while it lives.
    // Boxes keep every tensor's address stable while the vectors grow.
    #[allow(clippy::vec_box)]
    #[derive(Default)]
    pub struct Arena {
        tensors: Vec<Box<ggml_tensor>>,
        buffers: Vec<Box<ggml_backend_buffer>>,
    }

    impl Arena {
        /// A buffer of buffer type `buft` (fake address) with `usage`.
        pub fn buffer(
            &mut self,
            buft: usize,
            usage: ggml_sys::ggml_backend_buffer_usage,
        ) -> *mut ggml_backend_buffer {
            let mut b: Box<ggml_backend_buffer> = Box::default();
            b.buft = buft as ggml_backend_buffer_type_t;
            b.usage = usage;
            let p: *mut ggml_backend_buffer = &mut *b;
            self.buffers.push(b);
            p
        }

        /// A tensor with `op` and `srcs`.
        pub fn tensor(
            &mut self,
            name: &str,
            op: ggml_op,
            srcs: &[*mut ggml_tensor],
        ) -> *mut ggml_tensor {
            let mut t: Box<ggml_tensor> = Box::default();
            t.op = op;
            t.type_ = ggml_sys::GGML_TYPE_F32;
            t.ne = [4, 1, 1, 1];
            t.nb = [4, 16, 16, 16];
            for (i, s) in srcs.iter().enumerate() {
                t.src[i] = *s;
            }
            for (i, c) in name.bytes().take(63).enumerate() {
                t.name[i] = c as std::os::raw::c_char;
            }
            let p: *mut ggml_tensor = &mut *t;
            self.tensors.push(t);
            p
        }

        /// A leaf (op NONE) in `buffer` (may be NULL).
        pub fn leaf(&mut self, name: &str, buffer: *mut ggml_backend_buffer) -> *mut ggml_tensor {
            let t = self.tensor(name, ggml_sys::GGML_OP_NONE, &[]);
            // SAFETY: t was just created and is owned by the arena.
            unsafe { (*t).buffer = buffer };
            t
        }

        /// A graph input leaf (flag INPUT, no storage).
        pub fn input(&mut self, name: &str) -> *mut ggml_tensor {
            let t = self.leaf(name, std::ptr::null_mut());
            // SAFETY: as above.
            unsafe { (*t).flags |= ggml_sys::GGML_TENSOR_FLAG_INPUT as i32 };
            t
        }

        /// A node whose result is a view of `of` (in-place when `op` is not a view op).
        /// `of` must be a tensor of this arena.
        pub fn view_node(
            &mut self,
            name: &str,
            op: ggml_op,
            of: *mut ggml_tensor,
            srcs: &[*mut ggml_tensor],
        ) -> *mut ggml_tensor {
            let t = self.tensor(name, op, srcs);
            // SAFETY: t and of are owned by the arena. Like ggml's views, the new tensor has no
            // buffer of its own until an allocator initialises it.
            unsafe {
                let root = if (*of).view_src.is_null() {
                    of
                } else {
                    (*of).view_src
                };
                (*t).view_src = root;
            }
            t
        }
    }

    /// A graph over `nodes` and `leafs` (the vectors must outlive it).
    pub fn graph(
        nodes: &mut [*mut ggml_tensor],
        leafs: &mut [*mut ggml_tensor],
    ) -> ggml_sys::ggml_cgraph {
        ggml_sys::ggml_cgraph {
            size: nodes.len().max(leafs.len()) as i32,
            n_nodes: nodes.len() as i32,
            n_leafs: leafs.len() as i32,
            nodes: nodes.as_mut_ptr(),
            leafs: leafs.as_mut_ptr(),
            ..Default::default()
        }
    }
}
