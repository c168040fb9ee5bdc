//! The device runtime: what the ggml-facing layer asks of a device. The layer above does
//! all validation and bookkeeping (which buffer a tensor lives in, claims, the arena); a
//! runtime only does what it is told, in order, on its own queue.
//!
//! Every operation is queued and runs in submission order on the device's queue; the call
//! returns at once. [`Runtime::synchronize`] waits until everything queued before it has
//! finished. Host memory named in a queued operation must stay valid until then (ggml's
//! contract for async transfers).
//!
//! Runtimes: [`sim`] (always built, the default) simulates a device on the host; `mock`
//! (test builds only) records every call for the layer's unit tests.
//!
//! Nothing under `runtime/` imports the ggml-facing layer (as wgpu-hal's `Api` knows
//! nothing of wgpu-core): what a runtime needs lives here ([`SendPtr`], [`DevAddr`],
//! [`ALIGNMENT`], [`event`], [`hash_set`], [`dl`]), and a runtime's messages go through a
//! function its creator passes. `tests/layering.rs` checks this from the source.

pub mod address;
pub mod cuda;
pub mod dl;
pub mod event;
pub mod hash_set;
#[cfg(test)]
pub mod mock;
pub mod sim;

use std::ffi::c_void;
use std::sync::Arc;

pub use event::Event;

/// A device address. For the simulator: a fake address inside the device's reserved range
/// (see [`address`]). Every runtime, the CUDA one included, hands ggml such fake addresses,
/// so a host access to device memory faults; the CUDA runtime maps them to its device pointers.
pub type DevAddr = usize;

// Every runtime aligns its allocations to this; the layer above reports it as the buffer
// types' alignment (exported in the C header as `GGML_HRX_ALIGNMENT`).
/// Alignment of every device allocation and of tensors in HRX buffers, in bytes.
pub const ALIGNMENT: usize = 256;

/// A raw pointer that may travel to the device worker thread. Whoever builds one promises
/// the memory stays valid (and unaliased for writes) until the queued work completes, which
/// is what ggml promises for async transfers until `synchronize`.
#[derive(Clone, Copy, Debug)]
pub struct SendPtr(pub *mut c_void);
// SAFETY: see the type's contract; the pointer is only dereferenced by the worker while the
// caller keeps the memory alive.
unsafe impl Send for SendPtr {}
// SAFETY: as above; the pointer value itself is plain data.
unsafe impl Sync for SendPtr {}

/// Where a tensor's bytes are for a queued node.
#[derive(Clone, Copy, Debug)]
pub enum Loc {
    /// Device-local memory at this device address.
    Device(DevAddr),
    /// Host-visible memory the device reads and writes directly: a host buffer, or for a
    /// source, the job's copy of one ([`ExecJob::host_copies`]).
    Host(SendPtr),
}

/// Host bytes to upload.
pub enum HostSrc {
    /// A copy taken when the upload was queued.
    Owned(Vec<u8>),
    /// Borrowed host memory, valid until the upload completes (the caller synchronizes).
    Borrowed(SendPtr, usize),
}

/// One node to run: shadow copies of the node (index 0) and of its sources, plus where each
/// one's bytes are. The runtime points the shadows at its own memory and runs the node;
/// the original tensors are never touched.
pub struct NodeJob {
    /// Shadow tensors; `tensors[0]` is the node. Their `src`, `data`, `buffer`, `view_src`
    /// and `extra` fields are rewritten by the runtime.
    pub tensors: Vec<ggml_sys::ggml_tensor>,
    /// Bytes location of each shadow tensor (same indices as `tensors`).
    pub locs: Vec<Loc>,
    /// Bytes each shadow tensor spans (`ggml_nbytes`), for bounds checks.
    pub sizes: Vec<usize>,
    /// `(i, k)`: source slot `i` of the node is `tensors[k]`.
    pub srcs: Vec<(usize, usize)>,
    /// `(i, j)`: source slot `i` of the node is the node of `ExecJob::nodes[j]` (an earlier
    /// node of the same job), so a fused unit sees its producer as the very same tensor.
    pub node_srcs: Vec<(usize, usize)>,
    /// How many nodes of the original graph use this node (`None`: unknown). A runtime may
    /// fuse a node into its consumer only when this is 1.
    pub use_count: Option<i32>,
}

/// A unit of execution: one node, or several run as one fused unit.
#[derive(Default)]
pub struct ExecJob {
    /// The nodes, in graph order.
    pub nodes: Vec<NodeJob>,
    /// Text naming the job for error messages.
    pub label: String,
    /// Copies of the host memory the nodes read (`(original address, bytes, copy)`; the
    /// nodes' [`Loc::Host`] sources point at the copy), taken as the job was built, for a
    /// runtime that reads its sources after `execute` returns (the simulator's worker thread;
    /// see [`Runtime::reads_host_sources_on_execute`]). The host may write that memory again
    /// as soon as `graph_compute` returns: llama.cpp sets the next micro-batch's graph inputs,
    /// and with pipeline copies the CPU computes the next micro-batch into its compute buffer
    /// while a later device still runs this one; the scheduler copies neither for a device
    /// that reads host memory where it is.
    pub host_copies: Vec<(usize, usize, Box<[Chunk]>)>,
}

/// 64 bytes aligned to 64: the unit of [`ExecJob::host_copies`], so that a copy is aligned
/// as ggml aligns tensors in host buffers.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub struct Chunk(pub [u8; 64]);

impl ExecJob {
    /// Where the job's copy of the `len` host bytes at `addr` is, copying them now unless a
    /// node of the job already read the same bytes.
    ///
    /// # Safety
    /// `addr` spans `len` readable bytes.
    pub unsafe fn copy_host(&mut self, addr: *const c_void, len: usize) -> *mut c_void {
        let key = addr as usize;
        if let Some((_, _, c)) = self
            .host_copies
            .iter_mut()
            .find(|(a, n, _)| *a == key && *n == len)
        {
            return c.as_mut_ptr().cast();
        }
        let mut copy = vec![Chunk([0; 64]); len.div_ceil(64)].into_boxed_slice();
        // SAFETY: `addr` spans `len` readable bytes (the caller's contract); the copy spans at
        // least `len` fresh bytes, so the two do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(addr.cast::<u8>(), copy.as_mut_ptr().cast(), len) };
        let p = copy.as_mut_ptr().cast();
        self.host_copies.push((key, len, copy));
        p
    }
}

/// Weight uploads a runtime issued beside its queue ([`Runtime::upload_weight`]): counts and
/// bytes since the device opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WeightUploads {
    /// Uploads issued on the side (copy) queue.
    pub uploads: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Uploads that started while kernels queued before them were still running: the
    /// overlap the side queue bought (in queue order these would have waited).
    pub behind_work: u64,
    /// Their bytes.
    pub behind_work_bytes: u64,
}

/// What the ggml-facing layer needs from a device. All data operations are queued (see the
/// module documentation).
pub trait Runtime: Send + Sync {
    /// A short description of the device.
    fn describe(&self) -> String;
    /// Device memory in bytes.
    fn capacity(&self) -> usize;
    /// Bytes allocated now.
    fn used(&self) -> usize;
    /// First address of the device's address range.
    fn address_base(&self) -> usize;
    /// Allocates `size` bytes; `None` when the device is out of memory.
    fn alloc(&self, size: usize) -> Option<DevAddr>;
    /// Frees an allocation once all work queued before this call has finished.
    fn free(&self, addr: DevAddr);
    /// Whether `[addr, addr + len)` lies inside one live allocation.
    fn contains(&self, addr: DevAddr, len: usize) -> bool;
    /// Queues a host-to-device copy of `src` to `dst`.
    fn upload(&self, dst: DevAddr, src: HostSrc);
    /// Queues a device-to-host copy of `len` bytes from `src` into `dst`.
    fn download(&self, src: DevAddr, dst: SendPtr, len: usize);
    /// Queues setting `len` bytes at `dst` to `value`.
    fn fill(&self, dst: DevAddr, value: u8, len: usize);
    /// Queues a device-to-device copy (ranges may not overlap).
    fn copy(&self, dst: DevAddr, src: DevAddr, len: usize);
    /// Queues a host-memory copy performed in queue order (for host-visible buffers).
    fn host_copy(&self, dst: SendPtr, src: SendPtr, len: usize);
    /// Queues the execution of claimed nodes.
    fn execute(&self, job: ExecJob);
    /// Queues the completion of recording `seq` of `event`.
    fn signal(&self, event: Arc<Event>, seq: u64);
    /// Queues a wait: later work starts after recording `seq` of `event` completes.
    fn wait(&self, event: Arc<Event>, seq: u64);
    /// Waits for all queued work. Returns the errors met since the last call (each was
    /// already logged when it happened).
    fn synchronize(&self) -> Result<(), String>;
    /// Sets the number of host threads the runtime may use to execute nodes.
    fn set_threads(&self, n: usize);
    /// Whether the runtime's kernels can run `node` (the last question a claim asks: which
    /// ops the device claims depends on what the chosen runtime can run). Not queued.
    fn supports(&self, node: &ggml_sys::ggml_tensor) -> bool;
    /// Whether [`Runtime::execute`] has read the bytes of every host source of the job
    /// ([`Loc::Host`]) by the time it returns (a runtime that copies them into its own
    /// staging as it issues the job). When it has not, the layer hands it copies
    /// ([`ExecJob::host_copies`]): the host may overwrite the originals sooner.
    fn reads_host_sources_on_execute(&self) -> bool {
        false
    }
    /// Allocates `size` bytes for the device copy of a host weight (the host-weight arena's),
    /// `None` when the device is out of memory. A runtime that uploads weights beside its
    /// queue ([`Runtime::upload_weight`]) allocates them in queue order; the default is
    /// [`Runtime::alloc`].
    fn alloc_weight(&self, size: usize) -> Option<DevAddr> {
        self.alloc(size)
    }
    /// Frees a weight copy made by [`Runtime::alloc_weight`] once the work queued before this
    /// call has finished. Unlike [`Runtime::free`] it need not wait for that work: the
    /// memory is reused only after it (the default is [`Runtime::free`]).
    fn free_weight(&self, addr: DevAddr) {
        self.free(addr)
    }
    /// Queues the upload of `len` bytes of a host weight at `src` into `dst`, a fresh copy
    /// from [`Runtime::alloc_weight`] that no queued work has touched. The host bytes stay
    /// valid and unchanged for the life of the weight (ggml's weights are). Work queued after
    /// this call sees the bytes; a runtime may start the copy at once, beside the work
    /// already queued (the prefetch: the next job's weights travel while the current job
    /// computes). The default queues a plain [`Runtime::upload`].
    fn upload_weight(&self, dst: DevAddr, src: SendPtr, len: usize) {
        self.upload(dst, HostSrc::Borrowed(src, len))
    }
    /// What [`Runtime::upload_weight`] did beside the queue so far, for the report; `None`
    /// when this runtime uploads weights in queue order.
    fn weight_uploads(&self) -> Option<WeightUploads> {
        None
    }
    /// Blocks the calling thread until recording `seq` of `event`, which was recorded on
    /// this device, is complete (ggml's `event_synchronize`). A runtime whose queue can
    /// fail in a way that never completes the recording returns early instead of hanging,
    /// with the failure among the errors of the next [`Runtime::synchronize`].
    fn wait_host(&self, event: &Event, seq: u64) {
        event.wait_for(seq);
    }
}

// SAFETY: a job holds plain copies of tensor structs; the runtime overwrites every pointer
// field in them before use, and the host memory named by `Loc::Host` is kept alive by the
// submitter until the job completes (ggml's async contract).
unsafe impl Send for ExecJob {}
