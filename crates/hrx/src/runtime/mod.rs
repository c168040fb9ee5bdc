//! The device runtime: what the ggml-facing layer asks of a device. The layer above does
//! all validation and bookkeeping (which buffer a tensor lives in, claims, the arena); a
//! runtime only does what it is told, in order, on its own queue.
//!
//! Every operation is queued and runs in submission order on the device's queue; the call
//! returns at once. [`Runtime::synchronize`] waits until everything queued before it has
//! finished. Host memory named in a queued operation must stay valid until then (ggml's
//! contract for async transfers).
//!
//! Runtimes: [`sim`] (always built, the default) simulates a device on the host.

pub mod sim;

use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::ffi::SendPtr;

/// A device address: a fake address inside the device's reserved range (see
/// [`crate::address`]).
pub type DevAddr = usize;

/// Where a tensor's bytes are for a queued node.
#[derive(Clone, Copy, Debug)]
pub enum Loc {
    /// Device-local memory at this device address.
    Device(DevAddr),
    /// Host-visible memory the device reads and writes directly (a host buffer).
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
pub struct ExecJob {
    /// The nodes, in graph order.
    pub nodes: Vec<NodeJob>,
    /// Text naming the job for error messages.
    pub label: String,
}

/// A device event, as ggml's `ggml_backend_event`: recorded on a queue, waited on by the
/// host or by another queue.
#[derive(Default)]
pub struct Event {
    state: Mutex<(u64, u64)>,
    cv: Condvar,
}

impl Event {
    /// A new event that counts as already completed.
    pub fn new() -> Arc<Event> {
        Arc::new(Event::default())
    }

    /// Marks a new recording; returns its sequence number (to queue a signal for).
    pub fn begin_record(&self) -> u64 {
        let mut s = self.state.lock();
        s.0 += 1;
        s.0
    }

    /// The latest recording's sequence number.
    pub fn recorded(&self) -> u64 {
        self.state.lock().0
    }

    /// Marks recording `seq` complete.
    pub fn signal(&self, seq: u64) {
        let mut s = self.state.lock();
        if seq > s.1 {
            s.1 = seq;
        }
        self.cv.notify_all();
    }

    /// Blocks until recording `seq` is complete.
    pub fn wait_for(&self, seq: u64) {
        let mut s = self.state.lock();
        while s.1 < seq {
            self.cv.wait(&mut s);
        }
    }

    /// Whether recording `seq` is complete.
    pub fn is_done(&self, seq: u64) -> bool {
        self.state.lock().1 >= seq
    }
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
}

// SAFETY: a job holds plain copies of tensor structs; the runtime overwrites every pointer
// field in them before use, and the host memory named by `Loc::Host` is kept alive by the
// submitter until the job completes (ggml's async contract).
unsafe impl Send for ExecJob {}
