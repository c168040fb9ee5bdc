//! The CUDA runtime: an HRX device backed by an NVIDIA GPU, through the driver API, cuBLAS
//! and NVRTC (all opened at run time by `cudarc`, so building needs no toolkit and a
//! machine without one still loads the library; [`loader`] finds them).
//!
//! Memory: device-local allocations are real device memory (`cuMemAlloc`), but ggml sees
//! fake addresses from a reserved no-access range ([`crate::runtime::address`]), as with the
//! simulator, so a host access to a device tensor faults the same way. The runtime maps a
//! fake address to its device pointer (allocation start + offset). Host-visible tensors
//! (`Loc::Host`) are staged: copied into scratch before the node and, for the node itself,
//! back after it; in a job recorded for graph replay (below) they are only read, and go to
//! input slots that keep their device address from job to job (`Gpu::stage_input`).
//!
//! Execution: one non-blocking stream per device; every queued operation is issued on it at
//! once and runs in order, except the launches of a job whose results all live in device
//! memory, which are recorded and issued at the job's end: replayed as a CUDA graph when
//! the list equals one captured before (`graphs`). Claimed nodes run as our own kernels (`kernels.cu`, compiled by
//! NVRTC for the device on first use) and cuBLAS GEMMs ([`dispatch`] decides which).
//! Events: a recording is a host function queued on the stream that marks the HRX event
//! complete; a wait blocks the caller until the recording completes.
//!
//! Like every runtime it knows nothing of the ggml-facing layer.

pub mod dispatch;
mod gpu;
mod graphs;
pub mod kargs;
pub mod loader;
mod nvrtc;
mod profile;
pub mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use cudarc::driver::{result as cu, sys};
use parking_lot::Mutex;

use crate::runtime::address::{RangeAllocator, Reservation};

use super::{DevAddr, Event, ExecJob, HostSrc, Loc, NodeJob, Runtime, SendPtr, WeightUploads};
use dispatch::{Gemm, Launch};
use gpu::{err, Gpu};
use kargs::Ten;

/// The kernel source, compiled at run time.
pub const KERNEL_SOURCE: &str = include_str!("kernels.cu");

/// Host bytes of large uploads kept alive before the stream is waited for.
const KEEP_LIMIT: usize = 256 << 20;

/// How long a wait for an event sleeps before it checks whether the stream has failed.
const WAIT_CHECK: std::time::Duration = std::time::Duration::from_millis(50);

/// Fake-address bookkeeping: offsets in the reserved range, and the device pointer of each
/// live allocation (by start offset).
struct Mem {
    ranges: RangeAllocator,
    dptr: BTreeMap<usize, sys::CUdeviceptr>,
    /// Start offsets of the allocations made stream-ordered ([`Runtime::alloc_weight`] with
    /// the prefetch on): freed stream-ordered too.
    ordered: BTreeSet<usize>,
}

/// How a CUDA device runs (the layer reads them from `GGML_HRX_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Time every launch and print a summary at exit (`GGML_HRX_PROFILE`).
    pub profile: bool,
    /// Replay unchanged launch lists as CUDA graphs (`GGML_HRX_CUDA_GRAPHS`).
    pub graphs: bool,
    /// Upload host weights on a side stream, beside the kernels already queued, into
    /// stream-ordered memory, and free evicted copies without waiting
    /// (`GGML_HRX_PREFETCH`; see [`Runtime::upload_weight`]).
    pub prefetch: bool,
    /// Bytes of freed weight copies the prefetch's pool keeps for reuse (the host-weight
    /// arena's budget, `GGML_HRX_HOST_WEIGHT_LIMIT_MB`).
    pub weight_keep: usize,
    /// Blocks per column of the matrix-vector kernels at most (`GGML_HRX_MMV_BLOCKS`); 0:
    /// [`dispatch::MMV_MAX_BLOCKS`].
    pub mmv_max_blocks: u64,
    /// Also fuse a one-token feed-forward's two products with their GLU, and a residual ADD
    /// with the RMS_NORM (and MUL) after it (`GGML_HRX_CUDA_FUSE`, on by default).
    pub fuse: bool,
}

/// An HRX device on a CUDA GPU.
pub struct CudaDevice {
    index: usize,
    ordinal: usize,
    card: String,
    reservation: Reservation,
    mem: Mutex<Mem>,
    gpu: Mutex<Gpu>,
    errors: Mutex<Vec<String>>,
    on_error: fn(&str),
    /// Whether the kernels are built: 0 not tried, 1 built, 2 failed (then nothing is
    /// claimed, and the graph runs elsewhere).
    kernels: AtomicU8,
    /// [`Options::prefetch`]; turned off for good when the side stream fails in a way other
    /// than running out of memory (then weights go the plain way, and the failure is
    /// reported once).
    prefetch: std::sync::atomic::AtomicBool,
    /// [`Options::fuse`].
    fuse: bool,
    /// [`Options::weight_keep`].
    weight_keep: usize,
}

impl CudaDevice {
    /// HRX device `index` on CUDA device `ordinal`, with the card's memory. `base_hint` asks
    /// for the start of its fake address range (see [`crate::runtime::address`]). `on_error`
    /// receives each error as it happens (the same errors [`Runtime::synchronize`] returns).
    /// `opts`: profile, graphs, prefetch ([`Options`]). `on_note` receives notes worth an info-level log (a graph captured, a capture that
    /// failed and fell back to issuing launch by launch).
    pub fn new(
        index: usize,
        ordinal: usize,
        base_hint: Option<usize>,
        opts: Options,
        on_error: fn(&str),
        on_note: fn(&str),
    ) -> Result<CudaDevice, String> {
        let label = format!("HRX{index}");
        let gpu = std::panic::catch_unwind(|| {
            Gpu::open(
                ordinal,
                opts.profile.then_some(label.as_str()),
                opts.graphs,
                on_note,
            )
        })
        .map_err(|_| "the CUDA driver library lacks a function it needs".to_string())??;
        let mut gpu = gpu;
        if opts.mmv_max_blocks > 0 {
            gpu.mmv_max_blocks = opts.mmv_max_blocks;
        }
        // SAFETY: `gpu.dev` is a valid device.
        let total =
            unsafe { cu::device::total_mem(gpu.dev) }.map_err(|e| err("cuDeviceTotalMem", e))?;
        let card = cu::device::get_name(gpu.dev).unwrap_or_else(|_| "CUDA device".into());
        let capacity = total.div_ceil(65536) * 65536;
        let reservation = Reservation::new(capacity, base_hint)
            .ok_or_else(|| format!("cannot reserve {} MiB of addresses", capacity >> 20))?;
        Ok(CudaDevice {
            index,
            ordinal,
            card,
            reservation,
            mem: Mutex::new(Mem {
                ranges: RangeAllocator::new(capacity),
                dptr: BTreeMap::new(),
                ordered: BTreeSet::new(),
            }),
            gpu: Mutex::new(gpu),
            errors: Mutex::new(Vec::new()),
            on_error,
            kernels: AtomicU8::new(0),
            prefetch: std::sync::atomic::AtomicBool::new(opts.prefetch),
            fuse: opts.fuse,
            weight_keep: opts.weight_keep,
        })
    }

    fn fail(&self, e: String) {
        (self.on_error)(&format!("HRX{} (CUDA {}): {e}\n", self.index, self.ordinal));
        self.errors.lock().push(e);
    }

    /// The device pointer of `[addr, addr + len)`, which must lie in one live allocation.
    fn translate(&self, addr: DevAddr, len: usize) -> Result<sys::CUdeviceptr, String> {
        let base = self.reservation.base();
        let m = self.mem.lock();
        let off = addr
            .checked_sub(base)
            .filter(|_| self.reservation.contains(addr, len));
        let (start, _) = off
            .and_then(|o| m.ranges.find(o, len))
            .ok_or_else(|| format!("device address {addr:#x}+{len} is in no allocation"))?;
        Ok(m.dptr[&start] + (off.unwrap() - start) as u64)
    }

    /// Runs `f` with the GPU bound to this thread; errors are recorded.
    fn with_gpu(&self, f: impl FnOnce(&mut Gpu) -> Result<(), String>) {
        let mut g = self.gpu.lock();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            g.bind().and_then(|()| f(&mut g))
        }));
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => self.fail(e),
            Err(_) => self.fail("panic in the CUDA runtime".into()),
        }
    }

    /// Builds the kernels on the first question (NVRTC, about a second), so that a device
    /// whose NVRTC cannot build them claims nothing (its graphs run on other devices) instead
    /// of failing every job. The failure is logged once (and reported by the next
    /// synchronize, as every error is).
    fn kernels_built(&self) -> bool {
        match self.kernels.load(Ordering::Acquire) {
            1 => return true,
            2 => return false,
            _ => {}
        }
        let mut built = false;
        self.with_gpu(|g| {
            g.load_kernels(KERNEL_SOURCE)?;
            built = true;
            Ok(())
        });
        self.kernels
            .store(if built { 1 } else { 2 }, Ordering::Release);
        built
    }

    /// Blocks until recording `seq` of `event` completes, or gives up with an error when
    /// this device's stream has failed (a fault in a kernel or a copy): a failed stream
    /// never runs its queued host functions, so the recording would never complete.
    fn wait_checked(&self, event: &Event, seq: u64) {
        while !event.wait_timeout(seq, WAIT_CHECK) {
            let failed = {
                let g = self.gpu.lock();
                g.bind().err().or_else(|| g.stream_error())
            };
            if let Some(e) = failed {
                self.fail(format!(
                    "an event recording on a failed stream never completes ({e}); not waiting"
                ));
                return;
            }
        }
    }

    /// Where the kernels find tensor `k` of `nj`: its device pointer, staging host bytes
    /// into scratch (and noting them for the copy back when `k` is the node).
    fn resolve(&self, g: &mut Gpu, loc: Loc, size: usize) -> Result<u64, String> {
        match loc {
            Loc::Device(a) => self.translate(a, size),
            Loc::Host(p) if g.recording_inputs() => {
                // a recorded job: its host tensors are only read, so each is staged once
                // per job, at an address that stays the same from job to job
                // SAFETY: `p` spans `size` readable host bytes until the job completes
                // (ggml's async contract).
                let src = unsafe { std::slice::from_raw_parts(p.0 as *const u8, size) };
                g.stage_input(src)
            }
            Loc::Host(p) => {
                if let Some(pr) = g.profile.as_mut() {
                    let mut t = pr.totals.lock();
                    t.staged += 1;
                    t.staged_bytes += size as u64;
                }
                let s = dispatch::Target::scratch(g, size)?;
                if size > 0 {
                    // SAFETY: `p` spans `size` readable host bytes until the job completes
                    // (ggml's async contract); `s` is fresh scratch of that size.
                    let src = unsafe { std::slice::from_raw_parts(p.0 as *const u8, size) };
                    g.htod(s, src)?;
                }
                Ok(s)
            }
        }
    }

    /// The kernel views of node `i`'s sources, by slot (staging host ones).
    fn sources(&self, g: &mut Gpu, job: &ExecJob, i: usize) -> Result<Vec<Option<Ten>>, String> {
        let nj: &NodeJob = &job.nodes[i];
        let mut srcs: Vec<Option<Ten>> = vec![None; ggml_sys::GGML_MAX_SRC as usize];
        let bad = || "a source of a type the kernels cannot read".to_string();
        for &(slot, k) in &nj.srcs {
            let p = self.resolve(g, nj.locs[k], nj.sizes[k])?;
            srcs[slot] = Some(Ten::of(&nj.tensors[k], p).ok_or_else(bad)?);
        }
        for &(slot, j) in &nj.node_srcs {
            let prod = &job.nodes[j];
            let p = self.resolve(g, prod.locs[0], prod.sizes[0])?;
            srcs[slot] = Some(Ten::of(&prod.tensors[0], p).ok_or_else(bad)?);
        }
        Ok(srcs)
    }

    /// Runs node `i` of `job`, or nodes `i` and `i + 1` fused (RMS_NORM+MUL), or with
    /// [`Options::fuse`] `i` to `i + 2` (two matrix-vector products and their GLU,
    /// [`dispatch::mmv_glu_triple`]; ADD, RMS_NORM and MUL, [`dispatch::add_norm_pair`]) or `i`
    /// and `i + 1` (ADD and RMS_NORM); returns how many ran. With
    /// `rec`, its kernel launches are recorded there instead of issued (see [`Recording`]).
    fn run_node(
        &self,
        g: &mut Gpu,
        rec: &mut Option<Recording>,
        job: &ExecJob,
        i: usize,
    ) -> Result<usize, String> {
        g.begin_node();
        let nj: &NodeJob = &job.nodes[i];
        let node = &nj.tensors[0];
        let srcs = self.sources(g, job, i)?;
        if self.fuse && dispatch::mmv_glu_triple(job, i) {
            let s1 = self.sources(g, job, i + 1)?;
            let glu = &job.nodes[i + 2];
            // the product the GLU reads as source 0 first
            let (p0, p1) = if glu.node_srcs.contains(&(0, i)) {
                (&srcs, &s1)
            } else {
                (&s1, &srcs)
            };
            // a result in device memory (resolving it then has no side effect, so the
            // separate kernels can still run when it overlaps the column)
            let on_device = matches!(glu.locs[0], Loc::Device(_));
            if let (Some(w0), Some(c0), Some(w1), Some(c1)) = (p0[0], p0[1], p1[0], p1[1]) {
                if on_device && dispatch::fuses_mmv_glu(&glu.tensors[0], &w0, &w1, &c0, &c1) {
                    let dp = self.resolve(g, glu.locs[0], glu.sizes[0])?;
                    let d = Ten::of(&glu.tensors[0], dp)
                        .ok_or("a GLU of a type the kernels cannot write")?;
                    if !dispatch::overlaps(&d, &c0) {
                        to_target(g, rec, |t| {
                            dispatch::mmv_glu(&glu.tensors[0], d, w0, w1, c0, t)
                        })?;
                        self.copy_back(g, glu, dp)?;
                        return Ok(3);
                    }
                }
            }
        }
        if self.fuse && dispatch::add_norm_pair(job, i) {
            if let (Some(x), Some(y)) = (srcs[0], srcs[1]) {
                let norm = &job.nodes[i + 1];
                if dispatch::fuses_add_norm(node, &norm.tensors[0], &x, &y) {
                    if let Some(n) = self.run_add_norm(g, rec, job, i, x, y)? {
                        return Ok(n);
                    }
                }
            }
        }
        let next = dispatch::norm_mul_pair(job, i).then(|| &job.nodes[i + 1]);
        if let Some(mul) = next {
            let msrcs = self.sources(g, job, i + 1)?;
            if let Some(m) = msrcs[1].filter(|m| dispatch::fuses_norm_mul(node, &mul.tensors[0], m))
            {
                let a = srcs[0].ok_or("RMS_NORM without a source")?;
                // A product in device memory is placed by the allocator, which may give it
                // bytes of the norm's input or the multiplier that other rows still read:
                // then the two kernels run apart. (Resolving a device address has no side
                // effect; a host product is staged into fresh scratch, apart from both.)
                let on_device = matches!(mul.locs[0], Loc::Device(_));
                let dp = self.resolve(g, mul.locs[0], mul.sizes[0])?;
                let d = Ten::of(&mul.tensors[0], dp)
                    .ok_or("a MUL of a type the kernels cannot write")?;
                if !on_device || (dispatch::apart_or_same(&d, &a) && !dispatch::overlaps(&d, &m)) {
                    to_target(g, rec, |t| dispatch::norm_mul(node, d, a, m, t))?;
                    self.copy_back(g, mul, dp)?;
                    return Ok(2);
                }
            }
        }
        let dp = self.resolve(g, nj.locs[0], nj.sizes[0])?;
        let d = Ten::of(node, dp).ok_or("a node of a type the kernels cannot write")?;
        to_target(g, rec, |t| dispatch::node(node, d, &srcs, t))?;
        self.copy_back(g, nj, dp)?;
        Ok(1)
    }

    /// Runs the ADD at node `i` (of `x` and `y`) and the RMS_NORM after it as one kernel, with
    /// the MUL after that when it fuses into the norm; returns how many nodes ran (2 or 3), or
    /// `None` (nothing queued) when the results are not both in device memory, or their bytes
    /// meet the inputs' other than as the very same tensor ([`dispatch::apart_or_same`]).
    fn run_add_norm(
        &self,
        g: &mut Gpu,
        rec: &mut Option<Recording>,
        job: &ExecJob,
        i: usize,
        x: Ten,
        y: Ten,
    ) -> Result<Option<usize>, String> {
        let (add, norm) = (&job.nodes[i], &job.nodes[i + 1]);
        let mut last = (norm, None);
        if dispatch::norm_mul_pair(job, i + 1) {
            let mul = &job.nodes[i + 2];
            let msrcs = self.sources(g, job, i + 2)?;
            // the multiplier read as packed F32 (or one value), the product written packed
            let packed = |m: &Ten| m.nb[0] == 4 || m.ne[0] == 1;
            if let Some(m) = msrcs[1].filter(|m| {
                dispatch::fuses_norm_mul(&norm.tensors[0], &mul.tensors[0], m)
                    && packed(m)
                    && mul.tensors[0].nb[0] == 4
            }) {
                last = (mul, Some(m));
            }
        }
        if !matches!(
            (add.locs[0], last.0.locs[0]),
            (Loc::Device(_), Loc::Device(_))
        ) {
            return Ok(None);
        }
        let sp = self.resolve(g, add.locs[0], add.sizes[0])?;
        let s = Ten::of(&add.tensors[0], sp).ok_or("an ADD of a type the kernels cannot write")?;
        let dp = self.resolve(g, last.0.locs[0], last.0.sizes[0])?;
        let d =
            Ten::of(&last.0.tensors[0], dp).ok_or("a node of a type the kernels cannot write")?;
        // the sum may be written in place of x or y; the norm's result over neither the sum
        // nor, but in place, the inputs; the multiplier (read before the sum is written)
        // apart from both results
        let apart = dispatch::apart_or_same(&s, &x)
            && dispatch::apart_or_same(&s, &y)
            && !dispatch::overlaps(&d, &s)
            && dispatch::apart_or_same(&d, &x)
            && dispatch::apart_or_same(&d, &y)
            && last
                .1
                .is_none_or(|m| !dispatch::overlaps(&m, &s) && !dispatch::overlaps(&m, &d));
        if !apart {
            return Ok(None);
        }
        to_target(g, rec, |t| {
            dispatch::add_norm(&norm.tensors[0], s, x, y, d, last.1, t)
        })?;
        self.copy_back(g, add, sp)?;
        self.copy_back(g, last.0, dp)?;
        Ok(Some(if last.1.is_some() { 3 } else { 2 }))
    }

    /// Takes a fake range of `size` bytes and backs it with the device memory `get` returns
    /// for the range's rounded size (the same size the range took, so the bounds `translate`
    /// checks are the allocation's own); the range is given back when `get` fails.
    /// `Err(None)`: the context could not be bound, or no fake range was free.
    fn map_range<E>(
        &self,
        size: usize,
        get: impl FnOnce(&mut Gpu, usize) -> Result<sys::CUdeviceptr, E>,
    ) -> Result<DevAddr, Option<E>> {
        let mut g = self.gpu.lock();
        g.bind().map_err(|_| None)?;
        let mut m = self.mem.lock();
        let off = m.ranges.alloc(size).ok_or(None)?;
        let rounded = size.max(1).div_ceil(crate::runtime::ALIGNMENT) * crate::runtime::ALIGNMENT;
        match get(&mut g, rounded) {
            Ok(p) => {
                m.dptr.insert(off, p);
                Ok(self.reservation.base() + off)
            }
            Err(e) => {
                m.ranges.free(off);
                Err(Some(e))
            }
        }
    }

    /// Orders the main stream after the pending side-stream uploads of the weights `job`
    /// reads (the prefetch), before any of its kernels is issued; uploads for later jobs go
    /// on beside it.
    fn wait_for_weights(&self, g: &mut Gpu, job: &ExecJob) -> Result<(), String> {
        if !g.has_pending_weights() {
            return Ok(());
        }
        let mut ranges = Vec::new();
        for nj in &job.nodes {
            for (loc, &n) in nj.locs.iter().zip(&nj.sizes) {
                if let Loc::Device(a) = *loc {
                    ranges.push((self.translate(a, n)?, n));
                }
            }
        }
        g.wait_weights_for(&ranges)
    }

    /// A node whose result lives in host memory: its staged bytes go back.
    fn copy_back(&self, g: &mut Gpu, nj: &NodeJob, dp: u64) -> Result<(), String> {
        if let Loc::Host(p) = nj.locs[0] {
            if nj.sizes[0] > 0 {
                // SAFETY: `p` spans the node's bytes, writable host memory kept alive by the
                // submitter until the job completes. (A later staging of these bytes waits
                // for the copy to land: `Gpu::htod`.) The whole span goes back, as it was
                // staged, so bytes between a view's elements keep what they held.
                let dst = unsafe { std::slice::from_raw_parts_mut(p.0 as *mut u8, nj.sizes[0]) };
                if g.dtoh(dst, dp)? {
                    // pinned host memory: the result lands later, and the layer may read
                    // these bytes on the host before the next synchronize (a copy out of a
                    // host buffer, say): wait for it now
                    g.land_downloads()?;
                }
            }
        }
        Ok(())
    }
}

/// Whether a job's launches may be recorded ([`Recording`]): every node's result lives in
/// device memory (a result in host memory is copied back between kernels, which a recording
/// would reorder), and every host tensor it reads fits an input slot
/// ([`gpu::INPUT_SLOT_MAX`]).
fn recordable(nj: &NodeJob) -> bool {
    matches!(nj.locs[0], Loc::Device(_))
        && nj
            .locs
            .iter()
            .zip(&nj.sizes)
            .all(|(l, &n)| matches!(l, Loc::Device(_)) || n <= gpu::INPUT_SLOT_MAX)
}

/// A job's kernel launches, recorded rather than issued, so that the whole list can be
/// replayed as a CUDA graph when it equals an earlier one ([`graphs`]). Host tensors the job
/// reads (graph inputs: positions, masks, row indices) are copied into input slots as the
/// nodes are resolved, once per job and at the same device address every time
/// ([`Gpu::stage_input`]), so the copies precede the launches on the stream and the launch
/// list stays equal from token to token. A GEMM (cuBLAS) ends the recording: what was
/// recorded is issued, and the rest of the job goes straight to the stream.
#[derive(Default)]
struct Recording {
    launches: Vec<Launch>,
    direct: bool,
}

/// The [`dispatch::Target`] of a recorded job: scratch and the bad flag from the GPU,
/// launches into the recording.
struct Recorder<'a> {
    g: &'a mut Gpu,
    rec: &'a mut Recording,
}

impl dispatch::Target for Recorder<'_> {
    fn scratch(&mut self, bytes: usize) -> Result<u64, String> {
        self.g.scratch(bytes)
    }
    fn launch(&mut self, l: Launch) -> Result<(), String> {
        if self.rec.direct {
            return self.g.launch_ref(&l);
        }
        self.rec.launches.push(l);
        Ok(())
    }
    fn gemm(&mut self, gm: Gemm) -> Result<(), String> {
        if !self.rec.direct {
            self.rec.direct = true;
            for l in std::mem::take(&mut self.rec.launches) {
                self.g.launch_ref(&l)?;
            }
        }
        self.g.gemm_now(gm)
    }
    fn bad_flag(&mut self) -> Result<u64, String> {
        self.g.bad_flag()
    }
    fn mmv_max_blocks(&self) -> u64 {
        self.g.mmv_max_blocks
    }
}

/// Runs `f` on the GPU itself, or on the recorder when the job is recorded.
fn to_target(
    g: &mut Gpu,
    rec: &mut Option<Recording>,
    f: impl FnOnce(&mut dyn dispatch::Target) -> Result<(), String>,
) -> Result<(), String> {
    match rec {
        Some(rec) => f(&mut Recorder { g, rec }),
        None => f(g),
    }
}

/// Marks an event recording complete; queued on the stream by [`Runtime::signal`].
unsafe extern "C" fn signal_event(p: *mut c_void) {
    // SAFETY: `p` is the Box leaked by `signal`, consumed exactly once here.
    let b = unsafe { Box::from_raw(p as *mut (Arc<Event>, u64)) };
    b.0.signal(b.1);
}

impl Runtime for CudaDevice {
    fn describe(&self) -> String {
        let g = self.gpu.lock();
        format!(
            "HRX on CUDA device {} ({}, {} MiB, sm_{}{})",
            self.ordinal,
            self.card,
            self.reservation.len() >> 20,
            g.cc.0,
            g.cc.1
        )
    }

    fn capacity(&self) -> usize {
        self.reservation.len()
    }

    fn used(&self) -> usize {
        let g = self.gpu.lock();
        if g.bind().is_err() {
            return self.mem.lock().ranges.used();
        }
        match cu::mem_get_info() {
            Ok((free, total)) => total.saturating_sub(free),
            Err(_) => self.mem.lock().ranges.used(),
        }
    }

    fn address_base(&self) -> usize {
        self.reservation.base()
    }

    fn alloc(&self, size: usize) -> Option<DevAddr> {
        // SAFETY: plain allocation with the context bound.
        self.map_range(size, |_, n| unsafe { cu::malloc_sync(n) }.map_err(|_| ()))
            .ok()
    }

    fn free(&self, addr: DevAddr) {
        self.with_gpu(|g| {
            g.sync()?;
            let mut m = self.mem.lock();
            let off = addr.wrapping_sub(self.reservation.base());
            let p = m
                .dptr
                .remove(&off)
                .ok_or_else(|| format!("free of unknown device address {addr:#x}"))?;
            m.ranges.free(off);
            // SAFETY: the stream is idle, so no queued work uses the allocation.
            unsafe { cu::free_sync(p) }.map_err(|e| err("cuMemFree", e))
        });
    }

    fn alloc_weight(&self, size: usize) -> Option<DevAddr> {
        if !self.prefetch.load(Ordering::Relaxed) {
            return self.alloc(size);
        }
        match self.map_range(size, |g, n| g.malloc_ordered(n, self.weight_keep)) {
            Ok(addr) => {
                let off = addr - self.reservation.base();
                self.mem.lock().ordered.insert(off);
                Some(addr)
            }
            // no fake range, or the arena evicts and retries, as with plain allocations
            Err(None) | Err(Some(gpu::OrderedError::OutOfMemory)) => None,
            Err(Some(gpu::OrderedError::Other(e))) => {
                self.prefetch.store(false, Ordering::Relaxed);
                self.fail(format!(
                    "the prefetch is off from now on (GGML_HRX_PREFETCH): {e}"
                ));
                self.alloc(size)
            }
        }
    }

    fn free_weight(&self, addr: DevAddr) {
        let off = addr.wrapping_sub(self.reservation.base());
        if !self.mem.lock().ordered.contains(&off) {
            return self.free(addr);
        }
        self.with_gpu(|g| {
            let mut m = self.mem.lock();
            m.ordered.remove(&off);
            let p = m
                .dptr
                .remove(&off)
                .ok_or_else(|| format!("free of unknown device address {addr:#x}"))?;
            // the fake range may be handed out again at once: a new allocation gets other
            // device memory (this one returns to the pool only after the queued readers),
            // and work already issued holds device pointers, not fake addresses
            let len = m.ranges.free(off).unwrap_or(0);
            drop(m);
            g.free_ordered(p, len)
        });
    }

    fn upload_weight(&self, dst: DevAddr, src: SendPtr, len: usize) {
        let off = dst.wrapping_sub(self.reservation.base());
        if !self.mem.lock().ordered.contains(&off) {
            return self.upload(dst, HostSrc::Borrowed(src, len));
        }
        self.with_gpu(|g| {
            let d = self.translate(dst, len)?;
            // SAFETY: the caller's contract: `len` readable host bytes, unchanged for the
            // weight's life.
            let bytes = unsafe { std::slice::from_raw_parts(src.0 as *const u8, len) };
            g.htod_beside(d, bytes)
        });
    }

    fn weight_uploads(&self) -> Option<WeightUploads> {
        let g = self.gpu.lock();
        (g.weight_uploads.uploads > 0 || self.prefetch.load(Ordering::Relaxed))
            .then_some(g.weight_uploads)
    }

    fn contains(&self, addr: DevAddr, len: usize) -> bool {
        let base = self.reservation.base();
        addr >= base && self.mem.lock().ranges.find(addr - base, len).is_some()
    }

    fn upload(&self, dst: DevAddr, src: HostSrc) {
        self.with_gpu(|g| {
            let bytes: &[u8] = match &src {
                HostSrc::Owned(v) => v,
                // SAFETY: borrowed host memory valid until the upload completes (the
                // submitter synchronizes before releasing it).
                HostSrc::Borrowed(p, n) => unsafe {
                    std::slice::from_raw_parts(p.0 as *const u8, *n)
                },
            };
            let d = self.translate(dst, bytes.len())?;
            g.htod(d, bytes)?;
            // a small copy went through pinned staging; a large one is issued from the
            // Vec itself, which then lives until the stream is idle
            if let HostSrc::Owned(v) = src {
                if v.len() > gpu::PINNED_MAX_COPY {
                    g.keep(v);
                    if g.kept_bytes() > KEEP_LIMIT {
                        g.sync()?; // not inside a node: uploads are queued between jobs
                    }
                }
            }
            Ok(())
        });
    }

    fn download(&self, src: DevAddr, dst: SendPtr, len: usize) {
        self.with_gpu(|g| {
            let s = self.translate(src, len)?;
            // SAFETY: `dst` spans len writable host bytes kept alive until synchronize.
            let out = unsafe { std::slice::from_raw_parts_mut(dst.0 as *mut u8, len) };
            g.dtoh(out, s).map(|_| ())
        });
    }

    fn fill(&self, dst: DevAddr, value: u8, len: usize) {
        self.with_gpu(|g| {
            let d = self.translate(dst, len)?;
            // SAFETY: `d` spans len device bytes.
            unsafe { cu::memset_d8_async(d, value, len, g.stream) }
                .map_err(|e| err("cuMemsetD8Async", e))
        });
    }

    fn copy(&self, dst: DevAddr, src: DevAddr, len: usize) {
        self.with_gpu(|g| {
            let d = self.translate(dst, len)?;
            let s = self.translate(src, len)?;
            // SAFETY: both span len device bytes.
            unsafe { cu::memcpy_dtod_async(d, s, len, g.stream) }
                .map_err(|e| err("cuMemcpyDtoDAsync", e))
        });
    }

    fn host_copy(&self, dst: SendPtr, src: SendPtr, len: usize) {
        self.with_gpu(|g| {
            g.sync()?;
            // SAFETY: both are len valid host bytes per the submitter's contract; the
            // stream is idle, so the copy happens in queue order.
            unsafe { std::ptr::copy(src.0 as *const u8, dst.0 as *mut u8, len) };
            Ok(())
        });
    }

    fn execute(&self, job: ExecJob) {
        self.with_gpu(|g| {
            g.load_kernels(KERNEL_SOURCE)?;
            let t0 = std::time::Instant::now();
            let mut rec =
                (g.graphs.is_some() && job.nodes.iter().all(recordable)).then(Recording::default);
            g.begin_job(rec.is_some());
            self.wait_for_weights(g, &job)?;
            let mut i = 0;
            let mut failed = None;
            while i < job.nodes.len() {
                match self.run_node(g, &mut rec, &job, i) {
                    Ok(n) => i += n,
                    Err(e) => {
                        failed = Some(format!("{} node {i}: {e}", job.label));
                        break;
                    }
                }
            }
            g.begin_job(false);
            let t_submit = std::time::Instant::now();
            if let Some(r) = rec.filter(|r| !r.direct && !r.launches.is_empty()) {
                if failed.is_some() {
                    // the nodes before the failing one run, as they would unrecorded
                    r.launches.iter().try_for_each(|l| g.launch_ref(l))?;
                } else {
                    g.submit(r.launches)
                        .map_err(|e| format!("{}: {e}", job.label))?;
                }
            }
            g.mark_job_end();
            if let Some(e) = failed {
                return Err(e);
            }
            if let Some(p) = g.profile.as_mut() {
                let mut t = p.totals.lock();
                t.issue += t0.elapsed();
                t.submit += t_submit.elapsed();
                t.nodes += job.nodes.len() as u64;
            }
            Ok(())
        });
    }

    fn signal(&self, event: Arc<Event>, seq: u64) {
        let mut queued = false;
        let ev = event.clone();
        self.with_gpu(|g| {
            let p = Box::into_raw(Box::new((ev, seq))) as *mut c_void;
            // SAFETY: `signal_event` consumes `p` once when the stream reaches it.
            let r = unsafe { cu::stream::launch_host_function(g.stream, signal_event, p) };
            if let Err(e) = r {
                // SAFETY: not queued: reclaim and signal now (nothing else will).
                unsafe { signal_event(p) };
                return Err(err("cuLaunchHostFunc", e));
            }
            queued = true;
            Ok(())
        });
        if !queued {
            // the GPU could not be reached: nothing will ever complete this recording, and a
            // waiter must not hang (the error is reported at synchronize)
            event.signal(seq);
        }
    }

    fn wait(&self, event: Arc<Event>, seq: u64) {
        // later work is issued only after the recording completes. The recording may be
        // another HRX device's; with one GPU every HRX device shares its context, so a fault
        // there shows on our stream too. (With several GPUs a fault on another card is not
        // seen here: the wait goes on until that card's device is synchronized.)
        self.wait_checked(&event, seq);
    }

    fn wait_host(&self, event: &Event, seq: u64) {
        self.wait_checked(event, seq);
    }

    fn synchronize(&self) -> Result<(), String> {
        self.with_gpu(|g| {
            let t0 = std::time::Instant::now();
            g.sync()?;
            let bad = g.take_bad_flag();
            if bad != 0 {
                return Err(kargs::bad_flag_text(bad));
            }
            if let Some(p) = g.profile.as_mut() {
                p.settle(t0.elapsed());
            }
            Ok(())
        });
        let errs = std::mem::take(&mut *self.errors.lock());
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs.join("; "))
        }
    }

    fn set_threads(&self, _n: usize) {}

    /// Every host source is staged as the job is issued (`Gpu::htod` copies it into pinned
    /// staging, or the driver stages pageable memory before the call returns), and input
    /// slots are keyed by the host address, which a per-job copy would change every job.
    fn reads_host_sources_on_execute(&self) -> bool {
        true
    }

    fn supports(&self, node: &ggml_sys::ggml_tensor) -> bool {
        support::supports(node) && self.kernels_built()
    }
}

// SAFETY: all state is behind mutexes; CUDA handles are used only with the context bound.
unsafe impl Sync for CudaDevice {}
// SAFETY: as above.
unsafe impl Send for CudaDevice {}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(locs: Vec<Loc>, sizes: Vec<usize>) -> NodeJob {
        // SAFETY: plain data, zero is valid.
        let t: ggml_sys::ggml_tensor = unsafe { std::mem::zeroed() };
        NodeJob {
            tensors: vec![t; locs.len()],
            srcs: (1..locs.len()).map(|k| (k - 1, k)).collect(),
            locs,
            sizes,
            node_srcs: Vec::new(),
            use_count: Some(1),
        }
    }

    fn host(p: usize) -> Loc {
        Loc::Host(SendPtr(p as *mut c_void))
    }

    #[test]
    fn jobs_that_only_read_small_host_tensors_are_recorded() {
        // a rope reading positions from a host buffer: recorded (the positions go to a slot)
        assert!(recordable(&node(
            vec![Loc::Device(0x1000), Loc::Device(0x2000), host(0x7000)],
            vec![4096, 4096, 4],
        )));
        // every tensor on the device
        assert!(recordable(&node(vec![Loc::Device(0x1000)], vec![64])));
        // a result in host memory is copied back between kernels: issued as it comes
        assert!(!recordable(&node(
            vec![host(0x7000), Loc::Device(0x2000)],
            vec![4096, 4096],
        )));
        // a host source larger than a slot
        assert!(!recordable(&node(
            vec![Loc::Device(0x1000), host(0x7000)],
            vec![64, gpu::INPUT_SLOT_MAX + 1],
        )));
        assert!(recordable(&node(
            vec![Loc::Device(0x1000), host(0x7000)],
            vec![64, gpu::INPUT_SLOT_MAX],
        )));
    }
}
