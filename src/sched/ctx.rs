//! Tensor headers the scheduler creates per split (input copies, dependency views) live in
//! ggml contexts without data (`no_alloc`). Stock sizes one context for a fixed worst case;
//! this pool adds contexts as needed, so the number of split inputs has no ceiling. The
//! memory of each context is kept across splits; only the contexts are re-initialised.

use std::mem::MaybeUninit;
use std::ptr;

use crate::ffi::c_name;
use ggml_sys::{ggml_context, ggml_init_params};

/// 64-byte aligned memory unit (ggml needs at least `GGML_MEM_ALIGN`, 16, for a context).
#[repr(C, align(64))]
struct Block([u8; 64]);

struct Chunk {
    /// Left uninitialised: ggml_init writes what it uses (the context's object list and each
    /// header as it is made), and zeroing megabytes at a scheduler's first split cost more
    /// than the split itself.
    mem: Box<[MaybeUninit<Block>]>,
    ctx: *mut ggml_context,
}

/// A growing set of `no_alloc` ggml contexts.
pub struct CtxPool {
    chunks: Vec<Chunk>,
    cur: usize,
    /// Tensor headers per new chunk (at least).
    chunk_tensors: usize,
}

impl CtxPool {
    /// A pool whose first chunk holds `chunk_tensors` tensor headers (more chunks follow on
    /// demand). Allocates nothing yet.
    pub fn new(chunk_tensors: usize) -> CtxPool {
        CtxPool {
            chunks: Vec::new(),
            cur: 0,
            chunk_tensors: chunk_tensors.max(64),
        }
    }

    /// Frees every context (and so every tensor header made from the pool); keeps memory.
    pub fn reset(&mut self) {
        for c in &mut self.chunks {
            if !c.ctx.is_null() {
                // SAFETY: ctx was made by ggml_init over c.mem and is freed once.
                unsafe { ggml_sys::ggml_free(c.ctx) };
                c.ctx = ptr::null_mut();
            }
        }
        self.cur = 0;
    }

    /// Gives every tensor header made from the pool back its unallocated state (no data, no
    /// buffer, no backend extra), as a new header would be: for a replayed split, whose copies
    /// get their memory from the allocator again.
    pub fn forget_storage(&mut self) {
        for c in &self.chunks {
            if c.ctx.is_null() {
                continue;
            }
            // SAFETY: a live context of the pool.
            let mut t = unsafe { ggml_sys::ggml_get_first_tensor(c.ctx) };
            while !t.is_null() {
                // SAFETY: a tensor header of that context, owned by the pool; the scheduler
                // holds no reference into it while this runs (`&mut self`).
                unsafe {
                    (*t).data = ptr::null_mut();
                    (*t).buffer = ptr::null_mut();
                    (*t).extra = ptr::null_mut();
                    t = ggml_sys::ggml_get_next_tensor(c.ctx, t);
                }
            }
        }
    }

    /// A context with room for `n` more tensor headers. Aborts if ggml cannot make one.
    pub fn ctx(&mut self, n: usize) -> *mut ggml_context {
        // SAFETY: pure size query.
        let need = n * unsafe { ggml_sys::ggml_tensor_overhead() };
        loop {
            if self.cur == self.chunks.len() {
                let tensors = self.chunk_tensors.max(n);
                // SAFETY: pure size query.
                let bytes = tensors * unsafe { ggml_sys::ggml_tensor_overhead() };
                let blocks = bytes.div_ceil(64);
                self.chunks.push(Chunk {
                    mem: Box::new_uninit_slice(blocks),
                    ctx: ptr::null_mut(),
                });
                self.chunk_tensors = self.chunk_tensors.saturating_mul(2);
            }
            let c = &mut self.chunks[self.cur];
            if c.ctx.is_null() {
                let params = ggml_init_params {
                    mem_size: c.mem.len() * 64,
                    mem_buffer: c.mem.as_mut_ptr().cast(),
                    no_alloc: true,
                };
                // SAFETY: the memory outlives the context (both are owned by the chunk, and the
                // context is freed before the memory in reset/drop).
                c.ctx = unsafe { ggml_sys::ggml_init(params) };
                if c.ctx.is_null() {
                    crate::ffi::fatal(
                        c_name!(sched::ggml_backend_sched_split_graph),
                        "failed to initialize context",
                    );
                }
            }
            // SAFETY: c.ctx is a live context.
            let (used, size) = unsafe {
                (
                    ggml_sys::ggml_used_mem(c.ctx),
                    ggml_sys::ggml_get_mem_size(c.ctx),
                )
            };
            if used + need <= size {
                return c.ctx;
            }
            self.cur += 1;
        }
    }
}

impl Drop for CtxPool {
    fn drop(&mut self) {
        self.reset();
    }
}
