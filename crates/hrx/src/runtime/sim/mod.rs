//! The simulated device: private device memory on the host, fake addresses the host cannot
//! touch, one worker thread as the device queue, and ggml's own CPU kernels as the "device
//! kernels".
//!
//! Memory: an anonymous read-write mapping (`MAP_NORESERVE`, so only touched pages cost
//! anything) that nothing outside this module knows the address of. Addresses: a
//! [`Reservation`] of the same size with no access rights. Device address `a` is private
//! byte `a - reservation.base()`.
//!
//! Execution: the worker builds shadow tensors whose `data` points into private memory (or
//! at host-visible memory) and runs them as a small graph on a CPU backend created with
//! `ggml_backend_cpu_init` (resolved at run time, see [`cpu`]).
//!
//! Like every runtime it knows nothing of the ggml-facing layer: messages for the user go
//! through the `on_error` function its creator passes in.

pub mod cpu;
mod exec;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::runtime::address::{RangeAllocator, Reservation};

use super::{DevAddr, Event, ExecJob, HostSrc, Runtime, SendPtr};

enum Job {
    Upload(DevAddr, HostSrc),
    Download(DevAddr, SendPtr, usize),
    Fill(DevAddr, u8, usize),
    Copy(DevAddr, DevAddr, usize),
    HostCopy(SendPtr, SendPtr, usize),
    Exec(ExecJob),
    Free(DevAddr),
    Signal(Arc<Event>, u64),
    Wait(Arc<Event>, u64),
    Quit,
}

/// Private device memory: a read-write anonymous mapping owned by the simulator.
struct Private {
    ptr: usize,
    len: usize,
}

impl Drop for Private {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping created in `SimDevice::new`.
        unsafe { libc::munmap(self.ptr as *mut _, self.len) };
    }
}

struct Shared {
    reservation: Reservation,
    private: Private,
    alloc: Mutex<RangeAllocator>,
    /// (submitted, completed) job counts
    progress: Mutex<(u64, u64)>,
    done: Condvar,
    errors: Mutex<Vec<String>>,
    threads: AtomicUsize,
    /// Frees submitted and not yet run: `alloc` waits for them before it gives up.
    frees_queued: AtomicUsize,
}

impl Shared {
    /// Private pointer for `[addr, addr + len)`; panics (caught by the worker) outside the
    /// device range.
    fn translate(&self, addr: DevAddr, len: usize) -> *mut u8 {
        assert!(
            self.reservation.contains(addr, len),
            "device address {addr:#x}+{len} is outside the device range"
        );
        (self.private.ptr + (addr - self.reservation.base())) as *mut u8
    }
}

/// The simulated HRX device.
pub struct SimDevice {
    shared: Arc<Shared>,
    tx: Mutex<Sender<Job>>,
    worker: Mutex<Option<JoinHandle<()>>>,
    index: usize,
}

impl SimDevice {
    /// Creates device `index` with `capacity` bytes of memory; `base_hint` asks for the
    /// start of its address range (see [`address`]; [`Runtime::address_base`] tells where it
    /// landed). `on_error` is called on the queue's thread with each error as it happens
    /// (the same errors [`Runtime::synchronize`] returns later). `None` when the host cannot
    /// reserve the ranges.
    pub fn new(
        index: usize,
        capacity: usize,
        base_hint: Option<usize>,
        on_error: fn(&str),
    ) -> Option<SimDevice> {
        let reservation = Reservation::new(capacity, base_hint)?;
        // SAFETY: a fresh private anonymous read-write mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                capacity,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let shared = Arc::new(Shared {
            reservation,
            private: Private {
                ptr: p as usize,
                len: capacity,
            },
            alloc: Mutex::new(RangeAllocator::new(capacity)),
            progress: Mutex::new((0, 0)),
            done: Condvar::new(),
            errors: Mutex::new(Vec::new()),
            frees_queued: AtomicUsize::new(0),
            threads: AtomicUsize::new(
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(1),
            ),
        });
        let (tx, rx) = channel::<Job>();
        let s = shared.clone();
        let worker = std::thread::Builder::new()
            .name(format!("hrx{index}-queue"))
            .spawn(move || {
                let mut exec = exec::Executor::default();
                while let Ok(job) = rx.recv() {
                    let quit = matches!(job, Job::Quit);
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        run_job(&s, &mut exec, job)
                    }));
                    let err = match r {
                        Ok(Ok(())) => None,
                        Ok(Err(e)) => Some(e),
                        Err(p) => Some(
                            p.downcast_ref::<String>()
                                .cloned()
                                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_else(|| "panic".into()),
                        ),
                    };
                    if let Some(e) = err {
                        on_error(&format!("HRX{index}: device queue: {e}\n"));
                        s.errors.lock().push(e);
                    }
                    let mut pr = s.progress.lock();
                    pr.1 += 1;
                    s.done.notify_all();
                    drop(pr);
                    if quit {
                        break;
                    }
                }
            })
            .ok()?;
        Some(SimDevice {
            shared,
            tx: Mutex::new(tx),
            worker: Mutex::new(Some(worker)),
            index,
        })
    }

    fn submit(&self, job: Job) {
        self.shared.progress.lock().0 += 1;
        if self.tx.lock().send(job).is_err() {
            // the worker is gone (only after Drop started); count the job as done
            let mut pr = self.shared.progress.lock();
            pr.1 += 1;
            self.shared.done.notify_all();
        }
    }
}

impl SimDevice {
    /// Waits until every job submitted so far has run; errors stay for `synchronize` to
    /// report.
    fn wait_queue(&self) {
        let mut pr = self.shared.progress.lock();
        let target = pr.0;
        while pr.1 < target {
            self.shared.done.wait(&mut pr);
        }
    }
}

impl Drop for SimDevice {
    fn drop(&mut self) {
        self.submit(Job::Quit);
        if let Some(h) = self.worker.lock().take() {
            let _ = h.join();
        }
    }
}

fn run_job(s: &Shared, exec: &mut exec::Executor, job: Job) -> Result<(), String> {
    match job {
        Job::Upload(dst, src) => {
            let (p, n) = match &src {
                HostSrc::Owned(v) => (v.as_ptr(), v.len()),
                HostSrc::Borrowed(p, n) => (p.0 as *const u8, *n),
            };
            let d = s.translate(dst, n);
            // SAFETY: `d` spans n private bytes (translate checked the range); `p` is n
            // readable host bytes kept alive by the submitter; the regions are disjoint.
            unsafe { std::ptr::copy_nonoverlapping(p, d, n) };
        }
        Job::Download(src, dst, n) => {
            let sp = s.translate(src, n);
            // SAFETY: as for Upload, in the other direction.
            unsafe { std::ptr::copy_nonoverlapping(sp, dst.0 as *mut u8, n) };
        }
        Job::Fill(dst, v, n) => {
            let d = s.translate(dst, n);
            // SAFETY: `d` spans n private bytes.
            unsafe { std::ptr::write_bytes(d, v, n) };
        }
        Job::Copy(dst, src, n) => {
            let d = s.translate(dst, n);
            let sp = s.translate(src, n);
            // SAFETY: both span n private bytes; `copy` tolerates overlap.
            unsafe { std::ptr::copy(sp, d, n) };
        }
        Job::HostCopy(dst, src, n) => {
            // SAFETY: both are n valid host bytes per the submitter's contract.
            unsafe { std::ptr::copy(src.0 as *const u8, dst.0 as *mut u8, n) };
        }
        Job::Exec(job) => {
            let threads = s.threads.load(Ordering::Relaxed);
            exec.run(job, threads, &|a, n| s.translate(a, n))?;
        }
        Job::Free(addr) => {
            let off = addr - s.reservation.base();
            let freed = s.alloc.lock().free(off);
            s.frees_queued.fetch_sub(1, Ordering::Relaxed);
            freed.ok_or_else(|| format!("free of unknown device address {addr:#x}"))?;
        }
        Job::Signal(ev, seq) => ev.signal(seq),
        Job::Wait(ev, seq) => ev.wait_for(seq),
        Job::Quit => {}
    }
    Ok(())
}

impl Runtime for SimDevice {
    fn describe(&self) -> String {
        format!(
            "HRX simulated device {} ({} MiB private memory, CPU kernels)",
            self.index,
            self.capacity() >> 20
        )
    }

    fn capacity(&self) -> usize {
        self.shared.reservation.len()
    }

    fn used(&self) -> usize {
        self.shared.alloc.lock().used()
    }

    fn address_base(&self) -> usize {
        self.shared.reservation.base()
    }

    fn alloc(&self, size: usize) -> Option<DevAddr> {
        // Bound first, so that the allocator's lock is not held while waiting below.
        let now = self.shared.alloc.lock().alloc(size);
        let off = match now {
            Some(off) => off,
            // A free runs in queue order, after the work that may still use the memory, so
            // one submitted before this call may not have run yet: wait for the queue to
            // reach it rather than fail (the arena frees a weight and allocates at once;
            // ggml-alloc frees a compute buffer and allocates a larger one). A device that is
            // full with no free pending fails at once, as before.
            None if self.shared.frees_queued.load(Ordering::Relaxed) > 0 => {
                self.wait_queue();
                self.shared.alloc.lock().alloc(size)?
            }
            None => return None,
        };
        Some(self.shared.reservation.base() + off)
    }

    fn free(&self, addr: DevAddr) {
        self.shared.frees_queued.fetch_add(1, Ordering::Relaxed);
        self.submit(Job::Free(addr));
    }

    fn contains(&self, addr: DevAddr, len: usize) -> bool {
        let base = self.shared.reservation.base();
        addr >= base && self.shared.alloc.lock().find(addr - base, len).is_some()
    }

    fn upload(&self, dst: DevAddr, src: HostSrc) {
        self.submit(Job::Upload(dst, src));
    }

    fn download(&self, src: DevAddr, dst: SendPtr, len: usize) {
        self.submit(Job::Download(src, dst, len));
    }

    fn fill(&self, dst: DevAddr, value: u8, len: usize) {
        self.submit(Job::Fill(dst, value, len));
    }

    fn copy(&self, dst: DevAddr, src: DevAddr, len: usize) {
        self.submit(Job::Copy(dst, src, len));
    }

    fn host_copy(&self, dst: SendPtr, src: SendPtr, len: usize) {
        self.submit(Job::HostCopy(dst, src, len));
    }

    fn execute(&self, job: ExecJob) {
        self.submit(Job::Exec(job));
    }

    fn signal(&self, event: Arc<Event>, seq: u64) {
        self.submit(Job::Signal(event, seq));
    }

    fn wait(&self, event: Arc<Event>, seq: u64) {
        self.submit(Job::Wait(event, seq));
    }

    fn synchronize(&self) -> Result<(), String> {
        self.wait_queue();
        let errs = std::mem::take(&mut *self.shared.errors.lock());
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs.join("; "))
        }
    }

    fn set_threads(&self, n: usize) {
        self.shared.threads.store(n.max(1), Ordering::Relaxed);
    }

    fn supports(&self, node: &ggml_sys::ggml_tensor) -> bool {
        cpu::supports(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Errors are asserted through `synchronize`; nothing to print.
    pub(crate) fn quiet(_: &str) {}

    #[test]
    fn transfers_round_trip_through_private_memory() {
        let d = SimDevice::new(0, 1 << 20, None, quiet).unwrap();
        let a = d.alloc(1000).unwrap();
        let b = d.alloc(1000).unwrap();
        assert_eq!(a, d.address_base());
        assert_eq!(b, a + 1024);
        assert!(d.contains(a + 10, 100));
        assert!(!d.contains(a + 1000, 100));
        d.upload(a, HostSrc::Owned((0..100u8).collect()));
        d.fill(a + 50, 7, 10);
        d.copy(b, a, 100);
        let mut out = vec![0u8; 100];
        d.download(b, SendPtr(out.as_mut_ptr().cast()), 100);
        d.synchronize().unwrap();
        let mut want: Vec<u8> = (0..100u8).collect();
        want[50..60].fill(7);
        assert_eq!(out, want);
        assert_eq!(d.used(), 2048);
        d.free(a);
        d.synchronize().unwrap();
        assert_eq!(d.used(), 1024);
    }

    /// An allocation right after a free that the queue has not reached yet (the worker is
    /// held by an event wait) gets the freed memory once the queue gets there, instead of
    /// failing; with no free pending, a full device fails at once.
    #[test]
    fn alloc_waits_for_a_queued_free() {
        let d = SimDevice::new(0, 1 << 16, None, quiet).unwrap();
        let a = d.alloc(1 << 16).unwrap();
        assert_eq!(d.alloc(16), None, "full, nothing freed");
        let ev = Event::new();
        let seq = ev.begin_record();
        d.wait(ev.clone(), seq);
        d.free(a);
        let signaller = {
            let ev = ev.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(50));
                ev.signal(seq);
            })
        };
        assert_eq!(d.alloc(1 << 16), Some(a), "the queued free made room");
        signaller.join().unwrap();
        d.synchronize().unwrap();
        assert_eq!(d.used(), 1 << 16);
    }

    #[test]
    fn events_order_work() {
        let d = SimDevice::new(0, 1 << 16, None, quiet).unwrap();
        let ev = Event::new();
        let seq = ev.begin_record();
        d.signal(ev.clone(), seq);
        ev.wait_for(seq);
        assert!(ev.is_done(seq));
        d.synchronize().unwrap();
    }

    #[test]
    fn bad_addresses_are_reported_not_crashing() {
        let d = SimDevice::new(0, 1 << 16, None, quiet).unwrap();
        d.fill(d.address_base() + (1 << 16), 0, 16);
        let e = d.synchronize().unwrap_err();
        assert!(e.contains("outside the device range"), "{e}");
        d.synchronize().unwrap();
    }
}
