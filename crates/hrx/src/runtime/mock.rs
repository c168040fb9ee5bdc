//! A recording [`Runtime`] for unit tests of the layer above (test builds only).
//!
//! Every call is appended to a log ([`Call`]) in call order, with the values it was given,
//! so a test asserts the exact sequence of device operations a ggml entry point produced.
//! The queue completes at once: uploads, fills and copies land in a byte vector that plays
//! device memory (so downloads return what was written), signals complete their event, and
//! executed jobs are kept (as [`ExecSummary`]) for inspection. `alloc` is a first-fit
//! allocator over [`ALIGNMENT`]-rounded sizes from [`MOCK_BASE`], like the simulator's, so
//! addresses are predictable.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{DevAddr, Event, ExecJob, HostSrc, Loc, Runtime, SendPtr, ALIGNMENT};

/// First device address the mock hands out (arbitrary, far from host memory in tests; the
/// mock never dereferences it).
pub const MOCK_BASE: DevAddr = 0x7000_0000_0000;

/// One recorded runtime call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// `alloc(size)` and what it returned.
    Alloc {
        /// requested bytes
        size: usize,
        /// the address returned, `None` when out of memory
        addr: Option<DevAddr>,
    },
    /// `free(addr)`.
    Free(DevAddr),
    /// `alloc_weight(size)` and what it returned.
    AllocWeight {
        /// requested bytes
        size: usize,
        /// the address returned, `None` when out of memory
        addr: Option<DevAddr>,
    },
    /// `free_weight(addr)`.
    FreeWeight(DevAddr),
    /// `upload_weight(dst, src, len)`: the bytes.
    UploadWeight {
        /// device address
        dst: DevAddr,
        /// the bytes uploaded
        bytes: Vec<u8>,
    },
    /// `upload(dst, src)`: the bytes and whether the source was an owned copy.
    Upload {
        /// device address
        dst: DevAddr,
        /// the bytes uploaded
        bytes: Vec<u8>,
        /// `HostSrc::Owned` (true) or `HostSrc::Borrowed` (false)
        owned: bool,
    },
    /// `download(src, dst, len)`; `dst` is the host address as a number.
    Download {
        /// device address
        src: DevAddr,
        /// host address
        dst: usize,
        /// bytes
        len: usize,
    },
    /// `fill(dst, value, len)`.
    Fill {
        /// device address
        dst: DevAddr,
        /// byte value
        value: u8,
        /// bytes
        len: usize,
    },
    /// `copy(dst, src, len)`.
    Copy {
        /// device address written
        dst: DevAddr,
        /// device address read
        src: DevAddr,
        /// bytes
        len: usize,
    },
    /// `host_copy(dst, src, len)`, host addresses as numbers.
    HostCopy {
        /// host address written
        dst: usize,
        /// host address read
        src: usize,
        /// bytes
        len: usize,
    },
    /// `execute(job)`: index into [`MockRuntime::jobs`].
    Exec(usize),
    /// `signal(event, seq)`; the event as its address.
    Signal(usize, u64),
    /// `wait(event, seq)`; the event as its address.
    Wait(usize, u64),
    /// `synchronize()`.
    Synchronize,
    /// `set_threads(n)`.
    SetThreads(usize),
}

/// What a test needs of an executed job: per node, its op, each tensor's location and
/// size, and the source wiring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecSummary {
    /// The job's label.
    pub label: String,
    /// The nodes, in order.
    pub nodes: Vec<NodeSummary>,
}

/// One node of an [`ExecSummary`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSummary {
    /// The node's op.
    pub op: ggml_sys::ggml_op,
    /// Locations of the node (index 0) and of its copied sources.
    pub locs: Vec<MockLoc>,
    /// Bytes of each of them.
    pub sizes: Vec<usize>,
    /// `(slot, tensor index)` of copied sources.
    pub srcs: Vec<(usize, usize)>,
    /// `(slot, node index)` of sources produced by earlier nodes of the job.
    pub node_srcs: Vec<(usize, usize)>,
    /// The use count carried.
    pub use_count: Option<i32>,
}

/// [`Loc`] with the host pointer as a number (comparable).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MockLoc {
    /// Device memory.
    Device(DevAddr),
    /// Host-visible memory.
    Host(usize),
}

/// A test's stand-in for the device kernels ([`MockRuntime::set_kernel`]): called for each
/// node of an executed job with its op, the node's bytes and each source slot's bytes
/// (NULL where the slot is empty), in device memory (the mock's vector) or host memory as
/// the job locates them.
pub type Kernel = Arc<dyn Fn(ggml_sys::ggml_op, *mut u8, &[*mut u8]) + Send + Sync>;

#[derive(Default)]
struct State {
    /// runs the nodes of executed jobs, when a test sets one
    kernel: Option<Kernel>,
    calls: Vec<Call>,
    jobs: Vec<ExecSummary>,
    /// live allocations: start -> rounded size
    live: BTreeMap<DevAddr, usize>,
    /// device memory, indexed by `addr - MOCK_BASE`
    memory: Vec<u8>,
    /// what the next `synchronize` returns (then `Ok` again)
    next_sync: Option<String>,
    supports: bool,
    used: usize,
    /// per executed job, the bytes of every host location its nodes' sources name, read when
    /// the job ran: `(address, bytes)`
    host_reads: Vec<Vec<(usize, Vec<u8>)>>,
}

/// The recording runtime; clones share one log (the device owns one, the test keeps one).
#[derive(Clone)]
pub struct MockRuntime {
    capacity: usize,
    state: Arc<Mutex<State>>,
}

impl MockRuntime {
    /// A mock device of `capacity` bytes whose kernels support every node.
    pub fn new(capacity: usize) -> MockRuntime {
        MockRuntime {
            capacity,
            state: Arc::new(Mutex::new(State {
                memory: vec![0; capacity],
                supports: true,
                ..State::default()
            })),
        }
    }

    /// The calls recorded so far.
    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().calls.clone()
    }

    /// Returns the calls recorded so far and starts a new log.
    pub fn take_calls(&self) -> Vec<Call> {
        std::mem::take(&mut self.state.lock().calls)
    }

    /// The executed jobs, in order ([`Call::Exec`] holds indices into this).
    pub fn jobs(&self) -> Vec<ExecSummary> {
        self.state.lock().jobs.clone()
    }

    /// Per executed job, the host bytes its nodes' sources were read from when it ran,
    /// `(address, bytes)` in node and source order.
    pub fn host_reads(&self) -> Vec<Vec<(usize, Vec<u8>)>> {
        self.state.lock().host_reads.clone()
    }

    /// Runs `k` for every node of the jobs executed from now on (see [`Kernel`]).
    pub fn set_kernel(&self, k: Kernel) {
        self.state.lock().kernel = Some(k);
    }

    /// Makes the next `synchronize` fail with `msg`.
    pub fn fail_next_sync(&self, msg: &str) {
        self.state.lock().next_sync = Some(msg.to_string());
    }

    /// Sets what [`Runtime::supports`] answers.
    pub fn set_supports(&self, yes: bool) {
        self.state.lock().supports = yes;
    }

    /// `len` bytes of device memory at `addr` (test inspection, not a recorded call).
    pub fn peek(&self, addr: DevAddr, len: usize) -> Vec<u8> {
        let s = self.state.lock();
        let off = addr - MOCK_BASE;
        s.memory[off..off + len].to_vec()
    }

    fn record(&self, c: Call) {
        self.state.lock().calls.push(c);
    }
}

fn range(addr: DevAddr, len: usize) -> std::ops::Range<usize> {
    let off = addr - MOCK_BASE;
    off..off + len
}

fn summarize(job: &ExecJob) -> ExecSummary {
    ExecSummary {
        label: job.label.clone(),
        nodes: job
            .nodes
            .iter()
            .map(|n| NodeSummary {
                op: n.tensors[0].op,
                locs: n
                    .locs
                    .iter()
                    .map(|l| match *l {
                        Loc::Device(a) => MockLoc::Device(a),
                        Loc::Host(p) => MockLoc::Host(p.0 as usize),
                    })
                    .collect(),
                sizes: n.sizes.clone(),
                srcs: n.srcs.clone(),
                node_srcs: n.node_srcs.clone(),
                use_count: n.use_count,
            })
            .collect(),
    }
}

impl Runtime for MockRuntime {
    fn describe(&self) -> String {
        format!("mock runtime ({} bytes)", self.capacity)
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn used(&self) -> usize {
        self.state.lock().used
    }

    fn address_base(&self) -> usize {
        MOCK_BASE
    }

    fn alloc(&self, size: usize) -> Option<DevAddr> {
        let rounded = size.max(1).div_ceil(ALIGNMENT) * ALIGNMENT;
        let mut s = self.state.lock();
        // first fit between live allocations
        let mut at = MOCK_BASE;
        for (&a, &n) in &s.live {
            if a - at >= rounded {
                break;
            }
            at = a + n;
        }
        let addr = (at + rounded <= MOCK_BASE + self.capacity).then_some(at);
        if let Some(a) = addr {
            s.live.insert(a, rounded);
            s.used += rounded;
        }
        s.calls.push(Call::Alloc { size, addr });
        addr
    }

    fn free(&self, addr: DevAddr) {
        let mut s = self.state.lock();
        if let Some(n) = s.live.remove(&addr) {
            s.used -= n;
        }
        s.calls.push(Call::Free(addr));
    }

    fn alloc_weight(&self, size: usize) -> Option<DevAddr> {
        let addr = self.alloc(size);
        let mut s = self.state.lock();
        // recorded as what the layer asked for
        s.calls.pop();
        s.calls.push(Call::AllocWeight { size, addr });
        addr
    }

    fn free_weight(&self, addr: DevAddr) {
        self.free(addr);
        let mut s = self.state.lock();
        s.calls.pop();
        s.calls.push(Call::FreeWeight(addr));
    }

    fn upload_weight(&self, dst: DevAddr, src: SendPtr, len: usize) {
        self.upload(dst, HostSrc::Borrowed(src, len));
        let mut s = self.state.lock();
        if let Some(Call::Upload { dst, bytes, .. }) = s.calls.pop() {
            s.calls.push(Call::UploadWeight { dst, bytes });
        }
    }

    fn contains(&self, addr: DevAddr, len: usize) -> bool {
        let s = self.state.lock();
        s.live
            .range(..=addr)
            .next_back()
            .is_some_and(|(&a, &n)| addr + len <= a + n)
    }

    fn upload(&self, dst: DevAddr, src: HostSrc) {
        let (bytes, owned) = match src {
            HostSrc::Owned(v) => (v, true),
            HostSrc::Borrowed(p, n) => (
                // SAFETY: the caller's contract for `Borrowed`: `n` readable bytes until the
                // upload completes, which is now.
                unsafe { std::slice::from_raw_parts(p.0 as *const u8, n) }.to_vec(),
                false,
            ),
        };
        let mut s = self.state.lock();
        s.memory[range(dst, bytes.len())].copy_from_slice(&bytes);
        s.calls.push(Call::Upload { dst, bytes, owned });
    }

    fn download(&self, src: DevAddr, dst: SendPtr, len: usize) {
        let mut s = self.state.lock();
        let r = range(src, len);
        // SAFETY: the caller's contract: `len` writable host bytes at `dst` until the
        // download completes (now); device memory is the mock's own vector.
        unsafe { std::ptr::copy_nonoverlapping(s.memory[r].as_ptr(), dst.0 as *mut u8, len) };
        s.calls.push(Call::Download {
            src,
            dst: dst.0 as usize,
            len,
        });
    }

    fn fill(&self, dst: DevAddr, value: u8, len: usize) {
        let mut s = self.state.lock();
        s.memory[range(dst, len)].fill(value);
        s.calls.push(Call::Fill { dst, value, len });
    }

    fn copy(&self, dst: DevAddr, src: DevAddr, len: usize) {
        let mut s = self.state.lock();
        let from = range(src, len);
        s.memory.copy_within(from, dst - MOCK_BASE);
        s.calls.push(Call::Copy { dst, src, len });
    }

    fn host_copy(&self, dst: SendPtr, src: SendPtr, len: usize) {
        // SAFETY: the caller's contract: both are `len` valid host bytes until completion.
        unsafe { std::ptr::copy(src.0 as *const u8, dst.0 as *mut u8, len) };
        self.record(Call::HostCopy {
            dst: dst.0 as usize,
            src: src.0 as usize,
            len,
        });
    }

    fn execute(&self, job: ExecJob) {
        let mut s = self.state.lock();
        let i = s.jobs.len();
        s.jobs.push(summarize(&job));
        let mut reads = Vec::new();
        for n in &job.nodes {
            for &(_, k) in &n.srcs {
                if let Loc::Host(p) = n.locs[k] {
                    // SAFETY: a queued job's host locations span their sizes until it
                    // completes (the submitter's promise, `SendPtr`); this is its run.
                    let b = unsafe { std::slice::from_raw_parts(p.0 as *const u8, n.sizes[k]) };
                    reads.push((p.0 as usize, b.to_vec()));
                }
            }
        }
        s.host_reads.push(reads);
        if let Some(k) = s.kernel.clone() {
            let mem = s.memory.as_mut_ptr();
            let at = |l: Loc| match l {
                // SAFETY: a device location of a queued job is inside the mock's memory (the
                // layer checked it against a live allocation).
                Loc::Device(a) => unsafe { mem.add(a - MOCK_BASE) },
                Loc::Host(p) => p.0.cast(),
            };
            for n in &job.nodes {
                let mut srcs = [std::ptr::null_mut(); ggml_sys::GGML_MAX_SRC as usize];
                for &(slot, t) in &n.srcs {
                    srcs[slot] = at(n.locs[t]);
                }
                for &(slot, j) in &n.node_srcs {
                    srcs[slot] = at(job.nodes[j].locs[0]);
                }
                k(n.tensors[0].op, at(n.locs[0]), &srcs);
            }
        }
        s.calls.push(Call::Exec(i));
    }

    fn signal(&self, event: Arc<Event>, seq: u64) {
        self.record(Call::Signal(Arc::as_ptr(&event) as usize, seq));
        // the mock's queue is always drained: the recording completes now
        event.signal(seq);
    }

    fn wait(&self, event: Arc<Event>, seq: u64) {
        self.record(Call::Wait(Arc::as_ptr(&event) as usize, seq));
    }

    fn synchronize(&self) -> Result<(), String> {
        let mut s = self.state.lock();
        s.calls.push(Call::Synchronize);
        match s.next_sync.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn set_threads(&self, n: usize) {
        self.record(Call::SetThreads(n));
    }

    fn supports(&self, _node: &ggml_sys::ggml_tensor) -> bool {
        self.state.lock().supports
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mock_records_calls_and_keeps_bytes() {
        let m = MockRuntime::new(4096);
        let a = m.alloc(10).unwrap();
        let b = m.alloc(300).unwrap();
        assert_eq!((a, b), (MOCK_BASE, MOCK_BASE + 256));
        assert_eq!(m.used(), 256 + 512);
        assert!(m.contains(b + 500, 12) && !m.contains(b + 500, 13));
        m.upload(a, HostSrc::Owned(vec![1, 2, 3, 4]));
        m.fill(a + 1, 9, 2);
        m.copy(b, a, 4);
        let mut out = [0u8; 4];
        m.download(b, SendPtr(out.as_mut_ptr().cast()), 4);
        assert_eq!(out, [1, 9, 9, 4]);
        m.free(a);
        assert_eq!(m.alloc(4096 - 512), None);
        assert_eq!(m.alloc(200), Some(MOCK_BASE), "the freed hole is reused");
        assert_eq!(
            m.take_calls(),
            vec![
                Call::Alloc {
                    size: 10,
                    addr: Some(a)
                },
                Call::Alloc {
                    size: 300,
                    addr: Some(b)
                },
                Call::Upload {
                    dst: a,
                    bytes: vec![1, 2, 3, 4],
                    owned: true
                },
                Call::Fill {
                    dst: a + 1,
                    value: 9,
                    len: 2
                },
                Call::Copy {
                    dst: b,
                    src: a,
                    len: 4
                },
                Call::Download {
                    src: b,
                    dst: out.as_ptr() as usize,
                    len: 4
                },
                Call::Free(a),
                Call::Alloc {
                    size: 4096 - 512,
                    addr: None
                },
                Call::Alloc {
                    size: 200,
                    addr: Some(MOCK_BASE)
                },
            ]
        );
        m.fail_next_sync("boom");
        assert_eq!(m.synchronize(), Err("boom".to_string()));
        assert_eq!(m.synchronize(), Ok(()));
    }
}
