//! One CUDA device as the runtime drives it: its primary context, one stream, the kernel
//! module (compiled on first use), a cuBLAS handle and the per-node scratch memory. Every
//! method runs with the context bound to the calling thread ([`Gpu::bind`]).

use std::collections::HashMap;
use std::ffi::{c_void, CString};

use cudarc::cublas::sys as blas;
use cudarc::driver::{result as cu, sys};

use super::dispatch::{Arg, Gemm, Launch, Target};
use super::graphs::{GraphCache, Plan};
use super::kargs::Ten;
use super::profile::Profile;
use crate::runtime::WeightUploads;

/// Every kernel of `kernels.cu`, looked up once when the module loads.
pub(crate) const KERNELS: &[&str] = &[
    "hrx_unary",
    "hrx_fill",
    "hrx_binary",
    "hrx_glu",
    "hrx_cpy",
    "hrx_cpy_q",
    "hrx_set_rows",
    "hrx_set_rows_q",
    "hrx_get_rows",
    "hrx_to_f32",
    "hrx_norm",
    "hrx_add_norm",
    "hrx_soft_max",
    "hrx_flash_attn",
    "hrx_rope",
    "hrx_mul_mat_vec",
    "hrx_mul_mat_vec_q",
    "hrx_mul_mat_vec_q_glu",
];

/// Bytes of the first scratch chunk; later chunks double.
const SCRATCH_MIN: usize = 64 << 20;
/// Pinned staging for host-to-device copies, bytes.
const PINNED_BYTES: usize = 64 << 20;
/// Copies up to this size go through pinned staging; larger ones (weights at load time)
/// are issued from the caller's memory directly.
pub(crate) const PINNED_MAX_COPY: usize = 16 << 20;

/// Bytes of each chunk of input slots.
const INPUT_CHUNK: usize = 64 << 20;
/// Host tensors up to this size go to input slots in recorded jobs; a job that reads a
/// larger one is issued launch by launch.
pub(crate) const INPUT_SLOT_MAX: usize = 8 << 20;

/// Device copies of the host tensors recorded jobs read, one slot per (host address,
/// bytes), kept from job to job so that the kernels' arguments stay the same (see
/// `graphs`). A slot is refilled once per job that reads it. When a chunk is full, it is
/// retired (freed once the stream is idle) and every slot is forgotten.
#[derive(Default)]
struct Inputs {
    chunk: Option<(sys::CUdeviceptr, usize)>,
    off: usize,
    /// (host address, bytes) -> (device address, the job that last filled it)
    slots: HashMap<(usize, usize), (u64, u64)>,
    retired: Vec<sys::CUdeviceptr>,
    /// The current job's number; 0 when the current job is not recorded.
    job: u64,
    jobs: u64,
}

/// Pinned host memory that small host-to-device copies go through: the caller's bytes are
/// copied in at once and the DMA from here is truly asynchronous (from pageable memory the
/// driver may wait for the stream first, which would serialize host and device on every
/// staged tensor). A bump allocator, reset when the stream is idle.
struct Pinned {
    ptr: *mut u8,
    off: usize,
}

pub fn err(what: &str, e: cu::DriverError) -> String {
    format!("{what}: {e:?}")
}

/// Device memory for a node's temporaries: a bump allocator over one chunk, reset when a
/// node starts (work on the stream is ordered, so the next node's writes come after the
/// last node's reads). A chunk that is outgrown is retired, not freed: work queued
/// before may still use it; retired chunks are freed after the stream is synchronized.
#[derive(Default)]
struct Scratch {
    chunk: Option<(sys::CUdeviceptr, usize)>,
    off: usize,
    retired: Vec<sys::CUdeviceptr>,
}

pub struct Gpu {
    pub ctx: sys::CUcontext,
    pub dev: sys::CUdevice,
    pub stream: sys::CUstream,
    pub cc: (i32, i32),
    /// The kernels, or why they could not be built (kept: not retried on every job).
    module: Option<Result<HashMap<&'static str, sys::CUfunction>, String>>,
    blas: Option<blas::cublasHandle_t>,
    /// Why the cuBLAS handle could not be made (kept: not retried per GEMM).
    blas_error: Option<String>,
    scratch: Scratch,
    pinned: Option<Pinned>,
    /// A device-to-host copy was queued since the stream was last idle: into pinned memory
    /// it lands later, so host bytes are read (staged, uploaded) only after the stream
    /// catches up.
    d2h_pending: bool,
    /// Host buffers of large uploads, kept until the stream is idle.
    keep: Vec<Vec<u8>>,
    /// The kernels' `bad` flag: one `int` of pinned host memory, which the device writes
    /// directly (unified addressing) and the host reads once the stream is idle.
    bad: Option<*mut i32>,
    /// `GGML_HRX_PROFILE=1`: per-kernel device time and host time.
    pub profile: Option<Profile>,
    inputs: Inputs,
    /// Launches are being captured into a graph (not timed one by one, not run).
    capturing: bool,
    /// Captured launch lists (`GGML_HRX_CUDA_GRAPHS`); `None` when off.
    pub graphs: Option<GraphCache<sys::CUgraphExec>>,
    /// Blocks per column of the matrix-vector kernels at most ([`Options::mmv_max_blocks`],
    /// [`dispatch::MMV_MAX_BLOCKS`] unless set).
    ///
    /// [`Options::mmv_max_blocks`]: super::Options::mmv_max_blocks
    pub mmv_max_blocks: u64,
    /// Jobs replayed as graphs, and graphs captured, since the device opened.
    pub graph_counts: (u64, u64),
    /// Receives notes on graph capture (the layer logs them at info level; the runtime
    /// knows nothing of its logger).
    note: fn(&str),
    /// The side stream host weights are uploaded on (the prefetch), made on first use.
    side: Option<Side>,
    /// Weight uploads on the side stream the main stream has not waited for yet: device
    /// pointer, bytes, the event recorded after the copy.
    pending: Vec<(sys::CUdeviceptr, usize, sys::CUevent)>,
    /// What went over the side stream.
    pub weight_uploads: WeightUploads,
}

/// Why a stream-ordered allocation failed.
#[derive(Debug)]
pub enum OrderedError {
    /// The pool could not grow, even after a trim.
    OutOfMemory,
    /// Anything else (no memory pools on this device, a failed stream), with its message.
    Other(String),
}

/// The prefetch's side stream, its memory pool, and an event marking the end of the last
/// job issued on the main stream.
pub struct Side {
    stream: sys::CUstream,
    pool: sys::CUmemoryPool,
    job_end: sys::CUevent,
}

impl Side {
    fn open(dev: sys::CUdevice, keep: usize) -> Result<Side, String> {
        // SAFETY: reading an attribute of a valid device.
        let pools = unsafe {
            cu::device::get_attribute(
                dev,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
            )
        }
        .map_err(|e| err("cuDeviceGetAttribute", e))?;
        if pools == 0 {
            return Err("this device has no stream-ordered memory pools".into());
        }
        // SAFETY: plain data; zero is valid for every field, the ones that matter are set.
        let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
        props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = dev;
        // SAFETY: `props` is a valid description of device memory.
        let pool =
            unsafe { cu::mem_pool::create(&props) }.map_err(|e| err("cuMemPoolCreate", e))?;
        let mut keep = keep as u64;
        // SAFETY: a live pool; the attribute takes a u64. A pool that gives memory back is
        // slower, not wrong: a failure is ignored.
        let _ = unsafe {
            cu::mem_pool::set_attribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut keep as *mut u64).cast(),
            )
        };
        let stream = cu::stream::create(cu::stream::StreamKind::NonBlocking)
            .map_err(|e| err("cuStreamCreate (side)", e))?;
        let job_end = cu::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map_err(|e| err("cuEventCreate", e))?;
        Ok(Side {
            stream,
            pool,
            job_end,
        })
    }
}

// SAFETY: the handles are plain CUDA handles; every use goes through the runtime's mutex
// and binds the context to the calling thread first.
unsafe impl Send for Gpu {}

impl Gpu {
    /// Opens device `ordinal`: retains its primary context and creates a non-blocking stream.
    /// `profile`: the label under which to profile it (`GGML_HRX_PROFILE`), or `None`.
    /// `graphs`: replay unchanged launch lists ([`super::graphs`]); `note` receives what is
    /// worth logging about them.
    pub fn open(
        ordinal: usize,
        profile: Option<&str>,
        graphs: bool,
        note: fn(&str),
    ) -> Result<Gpu, String> {
        cu::init().map_err(|e| err("cuInit", e))?;
        let dev = cu::device::get(ordinal as i32).map_err(|e| err("cuDeviceGet", e))?;
        // SAFETY: `dev` is a valid device handle.
        let ctx = unsafe { cu::primary_ctx::retain(dev) }
            .map_err(|e| err("cuDevicePrimaryCtxRetain", e))?;
        // SAFETY: `ctx` was just retained.
        unsafe { cu::ctx::set_current(ctx) }.map_err(|e| err("cuCtxSetCurrent", e))?;
        let attr = |a| {
            // SAFETY: `dev` is valid; reading an attribute.
            unsafe { cu::device::get_attribute(dev, a) }.map_err(|e| err("cuDeviceGetAttribute", e))
        };
        let cc = (
            attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        let stream = cu::stream::create(cu::stream::StreamKind::NonBlocking)
            .map_err(|e| err("cuStreamCreate", e))?;
        Ok(Gpu {
            ctx,
            dev,
            stream,
            cc,
            module: None,
            blas: None,
            blas_error: None,
            scratch: Scratch::default(),
            pinned: None,
            d2h_pending: false,
            keep: Vec::new(),
            bad: None,
            profile: profile.map(Profile::new),
            capturing: false,
            graphs: graphs.then(GraphCache::default),
            mmv_max_blocks: super::dispatch::MMV_MAX_BLOCKS,
            graph_counts: (0, 0),
            note,
            inputs: Inputs::default(),
            side: None,
            pending: Vec::new(),
            weight_uploads: WeightUploads::default(),
        })
    }

    /// Binds the context to the calling thread (cheap when it already is).
    pub fn bind(&self) -> Result<(), String> {
        // SAFETY: the context is retained for the life of `self`.
        unsafe { cu::ctx::set_current(self.ctx) }.map_err(|e| err("cuCtxSetCurrent", e))
    }

    /// Waits for everything queued on the stream.
    fn wait_stream(&mut self) -> Result<(), String> {
        // SAFETY: the stream is live.
        unsafe { cu::stream::synchronize(self.stream) }
            .map_err(|e| err("cuStreamSynchronize", e))?;
        self.d2h_pending = false;
        Ok(())
    }

    /// Between jobs: waits for the stream, then recycles pinned staging and frees retired
    /// scratch and kept host buffers. Never called while a node is being issued (its
    /// scratch may live in a retired chunk).
    pub fn sync(&mut self) -> Result<(), String> {
        // the side stream's copies are complete once the main stream is
        self.flush_weight_waits()?;
        self.wait_stream()?;
        if let Some(p) = self.pinned.as_mut() {
            p.off = 0;
        }
        self.keep.clear();
        for p in self
            .scratch
            .retired
            .drain(..)
            .chain(self.inputs.retired.drain(..))
        {
            // SAFETY: retired chunks are no longer used by queued work (the stream is idle).
            let _ = unsafe { cu::free_sync(p) };
        }
        Ok(())
    }

    /// Whether the stream has failed (a fault in a kernel or a copy): then the work queued
    /// on it, host functions included, never runs.
    pub fn stream_error(&self) -> Option<String> {
        // SAFETY: the stream is live.
        let r = unsafe { sys::cuStreamQuery(self.stream) };
        match r {
            sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_NOT_READY => None,
            e => Some(format!("{e:?}")),
        }
    }

    /// Whether `p` is page-locked host memory (ours or another library's, such as a
    /// ggml-cuda host buffer): copies into it complete asynchronously.
    fn is_pinned(p: *const u8) -> bool {
        let mut ty: u32 = 0;
        // SAFETY: a query into a local; unregistered pageable memory makes it fail.
        let r = unsafe {
            sys::cuPointerGetAttribute(
                (&mut ty as *mut u32).cast(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                p as sys::CUdeviceptr,
            )
        };
        r == sys::CUresult::CUDA_SUCCESS && ty == sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32
    }

    /// Queues a device-to-host copy of `src` into `dst`. Into pageable memory the copy is
    /// complete when this returns; into pinned memory it lands later, which `d2h_pending`
    /// records. Returns whether it is still in flight.
    pub fn dtoh(&mut self, dst: &mut [u8], src: sys::CUdeviceptr) -> Result<bool, String> {
        if dst.is_empty() {
            return Ok(false);
        }
        let late = Self::is_pinned(dst.as_ptr());
        self.d2h_pending |= late;
        // SAFETY: `dst` is writable host memory the caller keeps alive until the stream is
        // idle; `src` spans dst.len() device bytes.
        unsafe { cu::memcpy_dtoh_async(dst, src, self.stream) }
            .map_err(|e| err("cuMemcpyDtoHAsync", e))?;
        Ok(late)
    }

    /// Waits for the stream when a device-to-host copy into pinned memory is in flight.
    pub fn land_downloads(&mut self) -> Result<(), String> {
        if self.d2h_pending {
            self.wait_stream()?;
        }
        Ok(())
    }

    /// Bytes held by [`Gpu::keep`].
    pub fn kept_bytes(&self) -> usize {
        self.keep.iter().map(Vec::len).sum()
    }

    /// After a wait for the stream: the `bad` flag's value, cleared (0: nothing to report).
    pub fn take_bad_flag(&mut self) -> i32 {
        match self.bad {
            // SAFETY: the flag is our live pinned int; the stream is idle, so no kernel
            // writes it now.
            Some(p) => unsafe {
                let v = std::ptr::read_volatile(p);
                std::ptr::write_volatile(p, 0);
                v
            },
            None => 0,
        }
    }

    /// Keeps `v` alive until the stream is idle (a large upload's source).
    pub fn keep(&mut self, v: Vec<u8>) {
        self.keep.push(v);
    }

    /// Compiles and loads the kernels if not done yet.
    pub fn load_kernels(&mut self, src: &str) -> Result<(), String> {
        if self.module.is_none() {
            let built = self.build_kernels(src);
            self.module = Some(built);
        }
        match &self.module {
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(e.clone()),
            None => unreachable!("set above"),
        }
    }

    fn build_kernels(
        &mut self,
        src: &str,
    ) -> Result<HashMap<&'static str, sys::CUfunction>, String> {
        let ptx = super::nvrtc::compile(src, self.cc.0, self.cc.1)?;
        // SAFETY: `ptx` is a NUL-terminated PTX image; the context is bound.
        let module = unsafe { cu::module::load_data(ptx.as_ptr() as *const c_void) }
            .map_err(|e| err("cuModuleLoadData", e))?;
        let mut table = HashMap::new();
        for &k in KERNELS {
            let name = CString::new(k).unwrap();
            // SAFETY: `module` is live (never unloaded: kernels live as long as the device).
            let f = unsafe { cu::module::get_function(module, name) }
                .map_err(|e| err(&format!("cuModuleGetFunction({k})"), e))?;
            table.insert(k, f);
        }
        Ok(table)
    }

    fn blas(&mut self) -> Result<blas::cublasHandle_t, String> {
        if let Some(h) = self.blas {
            return Ok(h);
        }
        if let Some(e) = &self.blas_error {
            return Err(e.clone());
        }
        let made = self.make_blas();
        if let Err(e) = &made {
            self.blas_error = Some(e.clone());
        }
        made
    }

    fn make_blas(&mut self) -> Result<blas::cublasHandle_t, String> {
        // cuBLAS's presence was checked before any device was made (`loader::toolkit_present`)
        let mut h: blas::cublasHandle_t = std::ptr::null_mut();
        // SAFETY: creating a handle into `h`; the context is bound.
        let st = unsafe { blas::cublasCreate_v2(&mut h) };
        if st != blas::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(format!("cublasCreate: {st:?}"));
        }
        // SAFETY: `h` is live; our stream outlives it.
        let st = unsafe { blas::cublasSetStream_v2(h, self.stream as blas::cudaStream_t) };
        if st != blas::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(format!("cublasSetStream: {st:?}"));
        }
        self.blas = Some(h);
        Ok(h)
    }

    /// Queues a copy of host bytes `src` to device address `dst`; `src` may be reused as soon
    /// as this returns (see [`Pinned`]).
    pub fn htod(&mut self, dst: sys::CUdeviceptr, src: &[u8]) -> Result<(), String> {
        if src.is_empty() {
            return Ok(());
        }
        if self.d2h_pending {
            // `src` may be the destination of a queued download into pinned memory
            self.wait_stream()?;
        }
        if src.len() <= PINNED_MAX_COPY && self.pinned.is_none() {
            // SAFETY: plain pinned allocation with the context bound; kept for the device's life.
            if let Ok(p) = unsafe { cu::malloc_host(PINNED_BYTES, 0) } {
                self.pinned = Some(Pinned {
                    ptr: p as *mut u8,
                    off: 0,
                });
            }
        }
        let need = src.len().div_ceil(256) * 256;
        if src.len() <= PINNED_MAX_COPY
            && self
                .pinned
                .as_ref()
                .is_some_and(|p| p.off + need > PINNED_BYTES)
        {
            // every staged copy queued so far must land before the pinned block is reused;
            // only the stream is waited for (scratch this node uses may be retired)
            self.wait_stream()?;
            if let Some(p) = self.pinned.as_mut() {
                p.off = 0;
            }
        }
        let Some(p) = self
            .pinned
            .as_mut()
            .filter(|_| src.len() <= PINNED_MAX_COPY)
        else {
            // SAFETY: `dst` spans src.len() device bytes; from pageable memory the driver
            // copies out of `src` before returning (callers also keep large sources alive
            // until the stream is idle, see `keep`).
            return unsafe { cu::memcpy_htod_async(dst, src, self.stream) }
                .map_err(|e| err("cuMemcpyHtoDAsync", e));
        };
        // SAFETY: [off, off + len) lies inside the pinned allocation and no queued copy reads
        // it (the offset only moves forward between waits for the stream).
        let slot = unsafe {
            let at = p.ptr.add(p.off);
            std::ptr::copy_nonoverlapping(src.as_ptr(), at, src.len());
            std::slice::from_raw_parts(at as *const u8, src.len())
        };
        p.off += need;
        // SAFETY: `dst` spans the bytes; `slot` stays untouched until the stream is waited for.
        unsafe { cu::memcpy_htod_async(dst, slot, self.stream) }
            .map_err(|e| err("cuMemcpyHtoDAsync (pinned)", e))
    }

    /// The side stream and its pool, made on first use: a private stream-ordered memory pool
    /// on this device that keeps up to `keep` freed bytes for reuse (the arena's budget)
    /// rather than giving them back at every synchronize. Fails on a device without memory
    /// pools.
    fn side(&mut self, keep: usize) -> Result<&Side, String> {
        if self.side.is_none() {
            self.side = Some(Side::open(self.dev, keep)?);
        }
        Ok(self.side.as_ref().unwrap())
    }

    /// Allocates `bytes` in stream order on the side stream from the side pool: usable by
    /// work ordered after this point of the side stream (the upload that follows, then the
    /// main stream once it waits for that upload). When the pool cannot grow, everything
    /// queued is waited for, the pool trimmed and the allocation tried once more.
    pub fn malloc_ordered(
        &mut self,
        bytes: usize,
        keep: usize,
    ) -> Result<sys::CUdeviceptr, OrderedError> {
        let (stream, pool) = {
            let s = self.side(keep).map_err(OrderedError::Other)?;
            (s.stream, s.pool)
        };
        let alloc = || {
            let mut p: sys::CUdeviceptr = 0;
            // SAFETY: a live pool and stream; the memory is only used after the upload that
            // follows on the same stream.
            let r = unsafe { sys::cuMemAllocFromPoolAsync(&mut p, bytes, pool, stream) };
            (r, p)
        };
        let (mut r, mut p) = alloc();
        if r == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            self.flush_weight_waits().map_err(OrderedError::Other)?;
            self.wait_stream().map_err(OrderedError::Other)?;
            // SAFETY: a live pool; only memory no queued work uses is released.
            let _ = unsafe { cu::mem_pool::trim_to(pool, 0) };
            (r, p) = alloc();
        }
        match r {
            sys::CUresult::CUDA_SUCCESS => Ok(p),
            sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => Err(OrderedError::OutOfMemory),
            e => Err(OrderedError::Other(format!(
                "cuMemAllocFromPoolAsync: {e:?}"
            ))),
        }
    }

    /// Frees stream-ordered memory after everything queued on the main stream so far,
    /// without waiting for it. An upload into `p` the main stream has not waited for yet is
    /// waited for first.
    pub fn free_ordered(&mut self, p: sys::CUdeviceptr, len: usize) -> Result<(), String> {
        self.wait_weights_for(&[(p, len)])?;
        // SAFETY: `p` came from `malloc_ordered`; its last reader is queued on the main
        // stream before this point, and so is the wait for its upload.
        unsafe { cu::free_async(p, self.stream) }.map_err(|e| err("cuMemFreeAsync", e))
    }

    /// Uploads host weight bytes into `dst` (fresh memory from `malloc_ordered`) on the side
    /// stream, so the copy runs beside the kernels already queued on the main stream. The
    /// main stream waits for it only before the first job that reads it
    /// ([`Gpu::wait_weights_for`]), or before a free or a synchronize. From pageable memory
    /// the driver copies `src` into its staging before returning; `src` must stay unchanged
    /// anyway (weights).
    pub fn htod_beside(&mut self, dst: sys::CUdeviceptr, src: &[u8]) -> Result<(), String> {
        let Some(side) = self.side.as_ref() else {
            return Err("an upload beside the queue before any ordered allocation".into());
        };
        let (stream, job_end) = (side.stream, side.job_end);
        // the overlap: the last job queued on the main stream is still running
        // SAFETY: a live event (a query of one never recorded reports it complete).
        let busy = unsafe { sys::cuEventQuery(job_end) } == sys::CUresult::CUDA_ERROR_NOT_READY;
        let queued = (|| {
            if !src.is_empty() {
                // SAFETY: `dst` spans src.len() bytes of memory allocated on the side stream
                // before this copy; `src` is readable host memory kept unchanged by the caller.
                unsafe { cu::memcpy_htod_async(dst, src, stream) }
                    .map_err(|e| err("cuMemcpyHtoDAsync (side)", e))?;
            }
            // recorded even for an empty weight: the main stream must still be ordered after
            // the allocation before it frees the memory
            let ev = cu::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
                .map_err(|e| err("cuEventCreate", e))?;
            // SAFETY: live event and stream.
            if let Err(e) = unsafe { cu::event::record(ev, stream) } {
                // SAFETY: our event, never waited for.
                let _ = unsafe { cu::event::destroy(ev) };
                return Err(err("cuEventRecord (side)", e));
            }
            Ok(ev)
        })();
        match queued {
            Ok(ev) => {
                self.pending.push((dst, src.len().max(1), ev));
                let u = &mut self.weight_uploads;
                u.uploads += 1;
                u.bytes += src.len() as u64;
                if busy {
                    u.behind_work += 1;
                    u.behind_work_bytes += src.len() as u64;
                }
                Ok(())
            }
            Err(e) => {
                // nothing orders the main stream after what was queued: finish it here, so
                // the memory is not freed under a copy still writing it
                // SAFETY: a live stream.
                let _ = unsafe { cu::stream::synchronize(stream) };
                Err(e)
            }
        }
    }

    /// Makes the main stream wait for the pending weight uploads into any of `ranges`
    /// (device pointer, bytes): called before a job that reads them is issued.
    pub fn wait_weights_for(&mut self, ranges: &[(sys::CUdeviceptr, usize)]) -> Result<(), String> {
        let hit = |&(d, n, _): &(sys::CUdeviceptr, usize, sys::CUevent)| {
            ranges
                .iter()
                .any(|&(p, len)| p < d + n as u64 && d < p + len.max(1) as u64)
        };
        let (now, later): (Vec<_>, Vec<_>) = self.pending.drain(..).partition(hit);
        self.pending = later;
        self.wait_events(now)
    }

    /// Whether a side-stream weight upload still has no wait on the main stream.
    pub fn has_pending_weights(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Makes the main stream wait for every pending weight upload.
    pub fn flush_weight_waits(&mut self) -> Result<(), String> {
        let all = std::mem::take(&mut self.pending);
        self.wait_events(all)
    }

    fn wait_events(
        &mut self,
        evs: Vec<(sys::CUdeviceptr, usize, sys::CUevent)>,
    ) -> Result<(), String> {
        let mut first_err = None;
        for (_, _, ev) in evs {
            // SAFETY: live event and stream; destroying an event whose wait is queued is
            // allowed (its resources go once it completes).
            unsafe {
                if let Err(e) = cu::stream::wait_event(
                    self.stream,
                    ev,
                    sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                ) {
                    // the main stream cannot be ordered after the copy: wait for it here
                    let _ = sys::cuEventSynchronize(ev);
                    first_err.get_or_insert(err("cuStreamWaitEvent (side)", e));
                }
                let _ = cu::event::destroy(ev);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Marks the end of the job just issued on the main stream, for the overlap count.
    pub fn mark_job_end(&mut self) {
        if let Some(s) = &self.side {
            // SAFETY: live event and stream; a failure only leaves the count less exact.
            let _ = unsafe { cu::event::record(s.job_end, self.stream) };
        }
    }

    /// Starts a node: its temporaries reuse scratch from the start.
    pub fn begin_node(&mut self) {
        self.scratch.off = 0;
    }
}

impl Gpu {
    /// Starts (`recorded`) or ends a job whose host inputs go to input slots.
    pub fn begin_job(&mut self, recorded: bool) {
        let i = &mut self.inputs;
        if recorded {
            i.jobs += 1;
            i.job = i.jobs;
        } else {
            i.job = 0;
        }
    }

    /// Whether the current job stages its host inputs into input slots.
    pub fn recording_inputs(&self) -> bool {
        self.inputs.job != 0
    }

    /// The device address of `src`'s input slot, filled from `src` unless this job filled
    /// it already (see [`Inputs`]).
    pub fn stage_input(&mut self, src: &[u8]) -> Result<u64, String> {
        let key = (src.as_ptr() as usize, src.len());
        let job = self.inputs.job;
        if let Some(&(d, filled)) = self.inputs.slots.get(&key) {
            if filled != job {
                self.htod(d, src)?;
                self.inputs.slots.insert(key, (d, job));
            }
            return Ok(d);
        }
        let need = src.len().max(1).div_ceil(256) * 256;
        let i = &mut self.inputs;
        if i.chunk.is_none_or(|(_, size)| i.off + need > size) {
            let size = INPUT_CHUNK.max(need);
            // SAFETY: plain allocation; the context is bound.
            let p = unsafe { cu::malloc_sync(size) }
                .map_err(|e| err(&format!("cuMemAlloc of {} MiB input slots", size >> 20), e))?;
            if let Some((old, _)) = i.chunk.replace((p, size)) {
                // queued work may still read the old slots: freed when the stream is idle
                i.retired.push(old);
            }
            i.off = 0;
            i.slots.clear();
        }
        let d = i.chunk.expect("chunk set above").0 + i.off as u64;
        i.off += need;
        i.slots.insert(key, (d, job));
        self.htod(d, src)?;
        Ok(d)
    }

    /// Issues a job's recorded launches (none of which has been issued yet): one by one, or
    /// as a replay of the graph captured from an equal list, or captured now (see
    /// [`super::graphs`]). A capture that fails is undone and the launches issued one by one.
    pub fn submit(&mut self, launches: Vec<Launch>) -> Result<(), String> {
        let Some(cache) = self.graphs.as_mut() else {
            return launches.iter().try_for_each(|l| self.launch_ref(l));
        };
        let mut evicted = Vec::new();
        let plan = cache.plan(&launches, &mut evicted);
        for x in evicted {
            // SAFETY: a graph this cache instantiated; one still running is freed when done.
            unsafe { sys::cuGraphExecDestroy(x) };
        }
        match plan {
            Plan::Issue => launches.iter().try_for_each(|l| self.launch_ref(l)),
            Plan::Replay(x) => {
                self.graph_counts.0 += 1;
                self.launch_graph(x, "graph replay")
            }
            Plan::Capture(i) => {
                let exec = self.capture(&launches);
                if let Some(c) = self.graphs.as_mut() {
                    c.captured(i, exec.as_ref().ok().copied());
                }
                match exec {
                    Ok(x) => {
                        self.graph_counts.1 += 1;
                        let held = self.graphs.as_ref().map_or(0, GraphCache::graphs);
                        (self.note)(&format!(
                            "HRX: captured a CUDA graph of {} launches ({} captured, {} held, {} replays so far)\n",
                            launches.len(),
                            self.graph_counts.1,
                            held,
                            self.graph_counts.0
                        ));
                        self.launch_graph(x, "graph, first launch")
                    }
                    Err(why) => {
                        (self.note)(&format!(
                            "HRX: a CUDA graph capture failed ({why}); issuing that work launch by launch\n"
                        ));
                        launches.iter().try_for_each(|l| self.launch_ref(l))
                    }
                }
            }
        }
    }

    /// Launches graph `x` on the stream, timed as `name` when profiling.
    fn launch_graph(&mut self, x: sys::CUgraphExec, name: &'static str) -> Result<(), String> {
        let t0 = self.profile.as_mut().and_then(|p| p.start(self.stream));
        // SAFETY: a live graph this cache instantiated from launches equal to this job's,
        // argument for argument.
        unsafe { sys::cuGraphLaunch(x, self.stream) }
            .result()
            .map_err(|e| err("cuGraphLaunch", e))?;
        if let Some(p) = self.profile.as_mut() {
            p.finish(name, t0, self.stream);
        }
        Ok(())
    }

    /// Captures `launches` on the stream into an executable graph (nothing runs).
    fn capture(&mut self, launches: &[Launch]) -> Result<sys::CUgraphExec, String> {
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        // SAFETY: the stream is ours and not capturing; the context is bound.
        unsafe { sys::cuStreamBeginCapture_v2(self.stream, mode) }
            .result()
            .map_err(|e| err("cuStreamBeginCapture", e))?;
        self.capturing = true;
        let issued = launches.iter().try_for_each(|l| self.launch_ref(l));
        self.capturing = false;
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above (also after a failed launch, so the stream
        // leaves capture mode either way).
        let ended = unsafe { sys::cuStreamEndCapture(self.stream, &mut graph) }.result();
        let made = issued.and_then(|()| ended.map_err(|e| err("cuStreamEndCapture", e)));
        let result = made.and_then(|()| {
            let mut exec: sys::CUgraphExec = std::ptr::null_mut();
            // SAFETY: `graph` is the graph the capture produced.
            unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) }
                .result()
                .map(|()| exec)
                .map_err(|e| err("cuGraphInstantiate", e))
        });
        if !graph.is_null() {
            // SAFETY: the executable graph does not need its source graph.
            unsafe { sys::cuGraphDestroy(graph) };
        }
        result
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        let _ = self.bind();
        let _ = self.sync();
        for x in self
            .graphs
            .as_mut()
            .map(GraphCache::clear)
            .unwrap_or_default()
        {
            // SAFETY: the stream is idle; the graph is ours.
            unsafe { sys::cuGraphExecDestroy(x) };
        }
        if let Some(h) = self.blas.take() {
            // SAFETY: destroying the handle created in `blas`.
            unsafe { blas::cublasDestroy_v2(h) };
        }
        if let Some((p, _)) = self.inputs.chunk.take() {
            // SAFETY: the stream is idle; the chunk is ours.
            let _ = unsafe { cu::free_sync(p) };
        }
        if let Some((p, _)) = self.scratch.chunk.take() {
            // SAFETY: the stream is idle; the chunk is ours.
            let _ = unsafe { cu::free_sync(p) };
        }
        if let Some(p) = self.pinned.take() {
            // SAFETY: the stream is idle; the pinned block is ours.
            let _ = unsafe { cu::free_host(p.ptr as *mut c_void) };
        }
        if let Some(p) = self.bad.take() {
            // SAFETY: as above.
            let _ = unsafe { cu::free_host(p as *mut c_void) };
        }
        if let Some(side) = self.side.take() {
            // SAFETY: `sync` above waited for every side copy (through the main stream); the
            // handles are ours and destroyed once. A pool with memory still allocated from it
            // goes when that memory is freed.
            unsafe {
                let _ = cu::event::destroy(side.job_end);
                let _ = cu::stream::destroy(side.stream);
                let _ = cu::mem_pool::destroy(side.pool);
            }
        }
        // SAFETY: the stream is idle and destroyed once.
        let _ = unsafe { cu::stream::destroy(self.stream) };
    }
}

/// Packs one argument into 8-aligned storage of the size the kernel reads.
fn arg_bytes(a: &Arg) -> [u64; 10] {
    let mut s = [0u64; 10];
    let p = s.as_mut_ptr();
    // SAFETY: `s` is 80 bytes, 8-aligned: room for every variant, Ten (80 bytes) included.
    unsafe {
        match *a {
            Arg::Ten(t) => std::ptr::write(p as *mut Ten, t),
            Arg::I32(v) => std::ptr::write(p as *mut i32, v),
            Arg::I64(v) => std::ptr::write(p as *mut i64, v),
            Arg::U32(v) => std::ptr::write(p as *mut u32, v),
            Arg::F32(v) => std::ptr::write(p as *mut f32, v),
            Arg::Ptr(v) => std::ptr::write(p, v),
        }
    }
    s
}

impl Target for Gpu {
    fn mmv_max_blocks(&self) -> u64 {
        self.mmv_max_blocks
    }
    fn bad_flag(&mut self) -> Result<u64, String> {
        if self.bad.is_none() {
            // SAFETY: a 4-byte pinned allocation with the context bound, kept for the
            // device's life; with unified addressing its host address is its device address.
            let p = unsafe { cu::malloc_host(4, 0) }.map_err(|e| err("cuMemHostAlloc", e))?;
            // SAFETY: the fresh allocation holds one int.
            unsafe { std::ptr::write_volatile(p as *mut i32, 0) };
            self.bad = Some(p as *mut i32);
        }
        Ok(self.bad.expect("set above") as u64)
    }

    fn scratch(&mut self, bytes: usize) -> Result<u64, String> {
        let need = bytes.max(1).div_ceil(256) * 256;
        let s = &mut self.scratch;
        let fits = s.chunk.is_some_and(|(_, size)| s.off + need <= size);
        if !fits {
            let size = s.chunk.map_or(SCRATCH_MIN, |(_, size)| size * 2).max(need);
            // SAFETY: plain allocation; the context is bound.
            let p = unsafe { cu::malloc_sync(size) }
                .map_err(|e| err(&format!("cuMemAlloc of {} MiB scratch", size >> 20), e))?;
            if let Some((old, _)) = s.chunk.replace((p, size)) {
                s.retired.push(old);
            }
            s.off = 0;
        }
        let (base, _) = s.chunk.expect("chunk set above");
        let at = base + s.off as u64;
        s.off += need;
        Ok(at)
    }

    fn launch(&mut self, l: Launch) -> Result<(), String> {
        self.launch_ref(&l)
    }

    fn gemm(&mut self, g: Gemm) -> Result<(), String> {
        self.gemm_now(g)
    }
}

impl Gpu {
    /// Queues kernel launch `l` on the stream.
    pub fn launch_ref(&mut self, l: &Launch) -> Result<(), String> {
        let f = *self
            .module
            .as_ref()
            .and_then(|m| m.as_ref().ok())
            .and_then(|m| m.get(l.kernel))
            .ok_or_else(|| format!("kernel {} is not loaded", l.kernel))?;
        let mut store: Vec<[u64; 10]> = l.args.iter().map(arg_bytes).collect();
        let mut ptrs: Vec<*mut c_void> = store
            .iter_mut()
            .map(|s| s.as_mut_ptr() as *mut c_void)
            .collect();
        let g = (l.grid[0], l.grid[1], l.grid[2]);
        let b = (l.block[0], l.block[1], l.block[2]);
        let t0 = match self.profile.as_mut() {
            Some(p) if !self.capturing => p.start(self.stream),
            _ => None,
        };
        // SAFETY: `f` is a kernel of our loaded module whose parameters are exactly `args` in
        // order (`dispatch` builds them from the kernel's signature); the values are copied
        // by the launch; every pointer inside a Ten is a live device address.
        unsafe { cu::launch_kernel(f, g, b, l.shared, self.stream, &mut ptrs) }
            .map_err(|e| err(&format!("launch {}", l.kernel), e))?;
        if let Some(p) = self.profile.as_mut() {
            p.finish(l.kernel, t0, self.stream);
        }
        Ok(())
    }

    /// Queues GEMM `g` on the stream (cuBLAS).
    pub fn gemm_now(&mut self, g: Gemm) -> Result<(), String> {
        let h = self.blas()?;
        let (one, zero) = (1.0f32, 0.0f32);
        let t0 = self.profile.as_mut().and_then(|p| p.start(self.stream));
        // SAFETY: the matrices are live device memory of the sizes `dispatch::mul_mat`
        // derived from the tensors; the handle is bound to our stream.
        let st = unsafe {
            blas::cublasSgemmStridedBatched(
                h,
                blas::cublasOperation_t::CUBLAS_OP_T,
                blas::cublasOperation_t::CUBLAS_OP_N,
                g.m,
                g.n,
                g.k,
                &one,
                g.a.0 as *const f32,
                g.a.1,
                g.a.2,
                g.b.0 as *const f32,
                g.b.1,
                g.b.2,
                &zero,
                g.c.0 as *mut f32,
                g.c.1,
                g.c.2,
                g.batch,
            )
        };
        if st != blas::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(format!("cublasSgemmStridedBatched({g:?}): {st:?}"));
        }
        if let Some(p) = self.profile.as_mut() {
            p.finish("cublasSgemmStridedBatched", t0, self.stream);
        }
        Ok(())
    }
}
