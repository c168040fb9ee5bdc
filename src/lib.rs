//! A drop-in `libggml-base.so.0`: the ggml backend layer and scheduler in Rust.
//!
//! Every function that stock llama.cpp defines in `ggml/src/ggml-backend.cpp` and
//! `ggml/src/ggml-alloc.c` is exported from here with the same C signature and the same
//! observable behaviour (the list is `src/exports.txt`); the rest of the library is the pinned
//! upstream C compiled by `build.rs`. The C structs that cross the ABI are the `bindgen` types of `ggml-sys`.
//!
//! Modules are named after what they implement: [`buffer_type`] (`ggml_backend_buft_*`),
//! [`buffer`] (`ggml_backend_buffer_*`), [`multi_buffer`], [`tensor`] (reads, writes and
//! copies of tensor data, tensor allocation), [`backend`] (`ggml_backend_*` on a backend
//! instance), [`event`], [`device`] (`ggml_backend_dev_*`, `ggml_backend_reg_*`),
//! [`cpu_buffer`] (the host buffer types "CPU" and "CPU_Mapped"), [`graph_copy`] (graph copy
//! and the backend comparison that `test-backend-ops` runs on), [`alloc`] (the graph allocator
//! and `ggml_backend_alloc_ctx_tensors*`) and [`sched`] (the scheduler).
//! [`ffi`] is the C boundary every exported function goes through.

pub mod alloc;
pub mod backend;
pub mod buffer;
pub mod buffer_type;
pub mod cpu_buffer;
pub mod device;
pub mod env;
pub mod event;
pub mod ffi;
pub mod graph_copy;
pub mod iface;
pub mod multi_buffer;
pub mod sanitize;
pub mod sched;
pub mod tensor;
