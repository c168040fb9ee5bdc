//! The graph allocator and the context allocators of `ggml-alloc.h`, in Rust (upstream's
//! `ggml-alloc.c` is not compiled): [`walk`] plans a graph as stock's greedy allocator does,
//! [`pack`] lays the plan out (stock's offsets, or an interval packing that is never larger),
//! [`gallocr`] owns the compute buffers and places tensors, [`blocks`] is the free-block
//! allocator of one buffer type, [`ctx`] allocates whole contexts, and [`exports`] are the C
//! functions.

pub mod blocks;
pub mod ctx;
pub mod exports;
pub mod gallocr;
pub mod pack;
pub mod walk;
