//! The host-weight arena: device-local copies of weights that live in host memory
//! (buffers with usage `GGML_BACKEND_BUFFER_USAGE_WEIGHTS` of a host buffer type) and are
//! read by device ops.
//!
//! Copies are cached by identity (host address and size) and generation (bumped when HRX
//! sees the host bytes change: writes to an `HRX0_HOST` buffer; weights in foreign host
//! buffers are taken as immutable once loaded, as ggml treats weights). HRX is not told when
//! a foreign buffer is freed, so a new weight can later sit at the same address with the
//! same size (a model freed and another loaded, `mmap` handing out the same range): each use
//! also compares a fingerprint of the host bytes (a hash of [`SAMPLES`] words spread over the
//! weight) with the copy's, and uploads again when they differ. A safety net, not a proof:
//! a change that misses every sampled word goes unseen. The arena holds at
//! most `limit` bytes (`GGML_HRX_HOST_WEIGHT_LIMIT_MB`); to make room it evicts the least
//! recently used copies not needed by the node being prepared, and a weight evicted earlier
//! is uploaded again (refilled) on its next use. A weight larger than the whole budget, or
//! a node whose weights together exceed it, is refused: the caller reports it by name and
//! fails the compute; nothing already resident is touched.

use std::collections::{HashMap, HashSet};

use crate::runtime::{DevAddr, HostSrc, Runtime, SendPtr};

/// Arena statistics, as returned by `ggml_backend_hrx_arena_stats_get`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ggml_hrx_arena_stats {
    /// Uses served by a resident, current copy.
    pub hits: u64,
    /// Uses that needed an upload (first use, refill or stale copy).
    pub misses: u64,
    /// Misses of weights that had been evicted before.
    pub refills: u64,
    /// Copies evicted to make room.
    pub evictions: u64,
    /// Weights refused (larger than the budget, or no room even after eviction).
    pub refusals: u64,
    /// Bytes of device memory the copies occupy now.
    pub resident_bytes: u64,
    /// The budget in bytes.
    pub limit_bytes: u64,
}

/// Identity of a host weight: its host address and size in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WeightKey {
    /// Host address of the weight's first byte.
    pub ptr: usize,
    /// Size in bytes (`ggml_nbytes`).
    pub size: usize,
}

#[derive(Debug)]
struct Entry {
    addr: DevAddr,
    generation: u64,
    fingerprint: u64,
    last_use: u64,
}

/// The generation of a copy whose host bytes the device writes ([`Arena::mark_written`]):
/// no buffer's generation (those count up from 0 or 1), so the next use uploads again.
const STALE: u64 = u64::MAX;

/// Words of a weight's host bytes its fingerprint reads.
pub(crate) const SAMPLES: usize = 16;

/// A hash of the size and [`SAMPLES`] 8-byte words spread evenly over `[ptr, ptr + size)`
/// (every byte when the weight is shorter than a word): cheap enough for every use, and
/// different for another weight at the same address with near certainty.
///
/// # Safety
/// `[ptr, ptr + size)` is readable host memory.
unsafe fn fingerprint(ptr: usize, size: usize) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ size as u64;
    let mut mix = |v: u64| {
        h ^= v;
        h = h.wrapping_mul(PRIME);
    };
    if size < 8 {
        for i in 0..size {
            // SAFETY: i < size, inside the readable range.
            mix(unsafe { *((ptr + i) as *const u8) } as u64);
        }
        return h;
    }
    let last = size - 8;
    for k in 0..SAMPLES {
        let off = last / (SAMPLES - 1) * k;
        let off = if k == SAMPLES - 1 { last } else { off };
        // SAFETY: off + 8 <= size, inside the readable range; unaligned reads are allowed.
        mix(unsafe { std::ptr::read_unaligned((ptr + off) as *const u64) });
    }
    h
}

/// Why a weight could not be made resident.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArenaError {
    /// The weight alone exceeds the budget.
    TooLarge {
        /// weight size in bytes
        size: usize,
        /// budget in bytes
        limit: usize,
    },
    /// The weights one node needs together exceed the budget.
    NoRoom {
        /// weight size in bytes
        size: usize,
        /// budget in bytes
        limit: usize,
        /// bytes pinned by the same node
        pinned: usize,
    },
    /// Device memory is exhausted.
    DeviceFull {
        /// weight size in bytes
        size: usize,
    },
}

impl std::fmt::Display for ArenaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ArenaError::TooLarge { size, limit } => write!(
                f,
                "needs {size} bytes ({:.2} MiB), more than the host-weight budget of {limit} bytes ({:.2} MiB, GGML_HRX_HOST_WEIGHT_LIMIT_MB)",
                *size as f64 / 1048576.0,
                *limit as f64 / 1048576.0
            ),
            ArenaError::NoRoom { size, limit, pinned } => write!(
                f,
                "needs {size} bytes while {pinned} bytes of the same node are resident; the host-weight budget is {limit} bytes (GGML_HRX_HOST_WEIGHT_LIMIT_MB)"
            ),
            ArenaError::DeviceFull { size } => write!(f, "needs {size} bytes and device memory is full"),
        }
    }
}

/// The arena of one device.
#[derive(Debug)]
pub struct Arena {
    limit: usize,
    entries: HashMap<WeightKey, Entry>,
    evicted: HashSet<WeightKey>,
    tick: u64,
    stats: ggml_hrx_arena_stats,
}

impl Arena {
    /// An empty arena with a budget of `limit` bytes.
    pub fn new(limit: usize) -> Arena {
        Arena {
            limit,
            entries: HashMap::new(),
            evicted: HashSet::new(),
            tick: 0,
            stats: ggml_hrx_arena_stats {
                limit_bytes: limit as u64,
                ..Default::default()
            },
        }
    }

    /// Current statistics.
    pub fn stats(&self) -> ggml_hrx_arena_stats {
        self.stats
    }

    /// Returns the device address of a current copy of the weight `key`, uploading it
    /// (queued on `rt`) when needed: first use, a new `generation`, or host bytes whose
    /// fingerprint differs from the copy's. `pinned` are the weights the same node already
    /// holds: they are never evicted for this one. `key` must name readable host memory (a
    /// live weight), whose bytes stay unchanged until the queued upload has run (weights do).
    pub fn acquire(
        &mut self,
        rt: &dyn Runtime,
        key: WeightKey,
        generation: u64,
        pinned: &[WeightKey],
    ) -> Result<DevAddr, ArenaError> {
        self.tick += 1;
        let tick = self.tick;
        // SAFETY: the caller's contract: `key` is a live weight's host bytes.
        let fp = unsafe { fingerprint(key.ptr, key.size) };
        if let Some(e) = self.entries.get_mut(&key) {
            e.last_use = tick;
            if e.generation == generation && e.fingerprint == fp {
                self.stats.hits += 1;
            } else {
                self.stats.misses += 1;
                e.generation = generation;
                e.fingerprint = fp;
                rt.upload(
                    e.addr,
                    HostSrc::Borrowed(SendPtr(key.ptr as *mut _), key.size),
                );
            }
            return Ok(e.addr);
        }
        self.stats.misses += 1;
        if key.size > self.limit {
            self.stats.refusals += 1;
            return Err(ArenaError::TooLarge {
                size: key.size,
                limit: self.limit,
            });
        }
        let resident = |a: &Arena| a.stats.resident_bytes as usize;
        while resident(self) + key.size > self.limit {
            if !self.evict_one(rt, pinned) {
                let pinned_bytes = pinned
                    .iter()
                    .filter(|k| self.entries.contains_key(k))
                    .map(|k| k.size)
                    .sum();
                return Err(ArenaError::NoRoom {
                    size: key.size,
                    limit: self.limit,
                    pinned: pinned_bytes,
                });
            }
        }
        let addr = loop {
            if let Some(a) = rt.alloc_weight(key.size) {
                break a;
            }
            if !self.evict_one(rt, pinned) {
                self.stats.refusals += 1;
                return Err(ArenaError::DeviceFull { size: key.size });
            }
        };
        // a fresh copy nothing queued has touched: the runtime may upload it beside its
        // queue, while the work already queued runs (a stale copy above is overwritten in
        // queue order instead: queued kernels may still read it)
        rt.upload_weight(addr, SendPtr(key.ptr as *mut _), key.size);
        if self.evicted.remove(&key) {
            self.stats.refills += 1;
        }
        self.entries.insert(
            key,
            Entry {
                addr,
                generation,
                fingerprint: fp,
                last_use: tick,
            },
        );
        self.stats.resident_bytes += key.size as u64;
        Ok(addr)
    }

    fn evict_one(&mut self, rt: &dyn Runtime, pinned: &[WeightKey]) -> bool {
        let victim = self
            .entries
            .iter()
            .filter(|(k, _)| !pinned.contains(k))
            .min_by_key(|(_, e)| e.last_use)
            .map(|(k, _)| *k);
        match victim {
            Some(k) => {
                self.remove(rt, k);
                self.evicted.insert(k);
                self.stats.evictions += 1;
                true
            }
            None => false,
        }
    }

    fn remove(&mut self, rt: &dyn Runtime, k: WeightKey) {
        if let Some(e) = self.entries.remove(&k) {
            rt.free_weight(e.addr);
            self.stats.resident_bytes -= k.size as u64;
        }
    }

    /// Counts a refusal the caller could not resolve (a [`ArenaError::NoRoom`] is not
    /// counted by [`Arena::acquire`], since the caller may make room and retry).
    pub fn note_refusal(&mut self) {
        self.stats.refusals += 1;
    }

    /// Drops every copy of a weight inside host range `[base, base + len)` (its buffer is
    /// being freed).
    pub fn forget_range(&mut self, rt: &dyn Runtime, base: usize, len: usize) {
        let keys: Vec<WeightKey> = self
            .entries
            .keys()
            .filter(|k| k.ptr >= base && k.ptr < base + len)
            .copied()
            .collect();
        for k in keys {
            self.remove(rt, k);
            self.evicted.remove(&k);
        }
    }

    /// Marks every copy of a weight overlapping host range `[base, base + len)` stale: the
    /// device writes those bytes (a node of HRX's own graph whose output, or a source its op
    /// updates, lies in a host weight), and the bytes it writes need not touch the sampled
    /// words of the fingerprint. The next use uploads the weight again, in queue order, so
    /// after the job that writes it; the copy stays allocated for the work queued before.
    pub fn mark_written(&mut self, base: usize, len: usize) {
        for (k, e) in self.entries.iter_mut() {
            if k.ptr < base.saturating_add(len) && base < k.ptr.saturating_add(k.size) {
                e.generation = STALE;
            }
        }
    }

    /// Drops every copy (device teardown).
    pub fn clear(&mut self, rt: &dyn Runtime) {
        let keys: Vec<WeightKey> = self.entries.keys().copied().collect();
        for k in keys {
            self.remove(rt, k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::sim::SimDevice;

    fn key(v: &[u8]) -> WeightKey {
        WeightKey {
            ptr: v.as_ptr() as usize,
            size: v.len(),
        }
    }

    fn read(rt: &SimDevice, addr: DevAddr, n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n];
        rt.download(addr, SendPtr(out.as_mut_ptr().cast()), n);
        rt.synchronize().unwrap();
        out
    }

    #[test]
    fn lru_eviction_and_refill_keep_contents() {
        let rt = SimDevice::new(0, 1 << 20, None, |_| {}).unwrap();
        let w: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i + 1; 1000]).collect();
        let mut a = Arena::new(2048);
        let a0 = a.acquire(&rt, key(&w[0]), 0, &[]).unwrap();
        let _a1 = a.acquire(&rt, key(&w[1]), 0, &[]).unwrap();
        assert_eq!(read(&rt, a0, 1000), w[0]);
        // a hit refreshes w0, so w1 is the least recently used
        assert_eq!(a.acquire(&rt, key(&w[0]), 0, &[]).unwrap(), a0);
        let a2 = a.acquire(&rt, key(&w[2]), 0, &[]).unwrap();
        assert_eq!(read(&rt, a2, 1000), w[2]);
        let s = a.stats();
        assert_eq!((s.hits, s.misses, s.evictions, s.refills), (1, 3, 1, 0));
        assert_eq!(s.resident_bytes, 2000);
        // w1 comes back: w0 is now the oldest and goes
        let a1 = a.acquire(&rt, key(&w[1]), 0, &[]).unwrap();
        assert_eq!(read(&rt, a1, 1000), w[1]);
        assert_eq!(
            read(&rt, a2, 1000),
            w[2],
            "the other resident copy is intact"
        );
        let s = a.stats();
        assert_eq!((s.misses, s.evictions, s.refills), (4, 2, 1));
    }

    #[test]
    fn a_copy_whose_host_bytes_the_device_writes_is_uploaded_again() {
        let rt = SimDevice::new(0, 1 << 20, None, |_| {}).unwrap();
        // one buffer, two weights side by side; the write below touches only bytes 600..610
        // of the second, none of the words the fingerprint samples
        let mut host = vec![5u8; 2048];
        let (k0, k1) = (
            WeightKey {
                ptr: host.as_ptr() as usize,
                size: 512,
            },
            WeightKey {
                ptr: host.as_ptr() as usize + 512,
                size: 1536,
            },
        );
        let mut a = Arena::new(4096);
        let x0 = a.acquire(&rt, k0, 0, &[]).unwrap();
        let x1 = a.acquire(&rt, k1, 0, &[]).unwrap();
        rt.synchronize().unwrap();
        host[600..610].fill(9);
        // unmarked, the same generation and fingerprint: served stale
        assert_eq!(a.acquire(&rt, k1, 0, &[]).unwrap(), x1);
        assert_eq!(read(&rt, x1 + 88, 10), vec![5u8; 10]);
        a.mark_written(k0.ptr + 600, 10);
        // the same generation is no longer enough: uploaded again, in place; the weight
        // beside the written range stays a hit
        assert_eq!(a.acquire(&rt, k1, 0, &[]).unwrap(), x1);
        assert_eq!(read(&rt, x1 + 88, 10), vec![9u8; 10]);
        assert_eq!(a.acquire(&rt, k0, 0, &[]).unwrap(), x0);
        let s = a.stats();
        assert_eq!((s.hits, s.misses), (2, 3));
    }

    #[test]
    fn a_new_generation_is_uploaded_again() {
        let rt = SimDevice::new(0, 1 << 20, None, |_| {}).unwrap();
        let mut w = vec![5u8; 512];
        let mut a = Arena::new(4096);
        let k = key(&w);
        let x = a.acquire(&rt, k, 0, &[]).unwrap();
        rt.synchronize().unwrap();
        w.fill(9);
        assert_eq!(a.acquire(&rt, k, 1, &[]).unwrap(), x);
        assert_eq!(read(&rt, x, 512), vec![9u8; 512]);
        assert_eq!(a.stats().misses, 2);
    }

    #[test]
    fn another_weight_at_the_same_address_is_uploaded_again() {
        // a model freed and another loaded at the same host address, same size: HRX is not
        // told (foreign buffers keep generation 0); the fingerprint sees the new bytes
        let rt = SimDevice::new(0, 1 << 20, None, |_| {}).unwrap();
        let mut w: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let mut a = Arena::new(1 << 16);
        let k = key(&w);
        let x = a.acquire(&rt, k, 0, &[]).unwrap();
        assert_eq!(a.acquire(&rt, k, 0, &[]).unwrap(), x);
        assert_eq!((a.stats().hits, a.stats().misses), (1, 1));
        rt.synchronize().unwrap();
        w.iter_mut().for_each(|b| *b = b.wrapping_add(1));
        assert_eq!(a.acquire(&rt, k, 0, &[]).unwrap(), x);
        assert_eq!(
            (a.stats().hits, a.stats().misses),
            (1, 2),
            "new bytes: a miss"
        );
        assert_eq!(read(&rt, x, 4096), w, "the copy holds the new bytes");
        // one sampled word changed is enough; the last word is always sampled
        rt.synchronize().unwrap();
        w[4095] ^= 0xff;
        a.acquire(&rt, k, 0, &[]).unwrap();
        assert_eq!(a.stats().misses, 3);
        assert_eq!(read(&rt, x, 4096), w);
        // short weights are read whole
        let mut t = vec![1u8, 2, 3];
        let y = a.acquire(&rt, key(&t), 0, &[]).unwrap();
        rt.synchronize().unwrap();
        t[1] = 9;
        a.acquire(&rt, key(&t), 0, &[]).unwrap();
        assert_eq!(read(&rt, y, 3), t);
        assert_eq!(a.stats().misses, 5);
    }

    #[test]
    fn fingerprints_see_size_and_sampled_words() {
        let v: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let p = v.as_ptr() as usize;
        // SAFETY: every range below lies inside `v`.
        unsafe {
            assert_eq!(fingerprint(p, 1000), fingerprint(p, 1000));
            assert_ne!(fingerprint(p, 1000), fingerprint(p, 999));
            assert_ne!(fingerprint(p, 8), fingerprint(p + 1, 8));
            assert_ne!(fingerprint(p, 3), fingerprint(p, 2));
            assert_eq!(fingerprint(p, 0), fingerprint(p + 5, 0));
        }
    }

    #[test]
    fn fresh_copies_go_beside_the_queue_and_stale_ones_in_order() {
        use crate::runtime::mock::{Call, MockRuntime};
        let rt = MockRuntime::new(1 << 20);
        let w1 = vec![1u8; 300];
        let w2 = vec![2u8; 300];
        let mut a = Arena::new(512);
        let x = a.acquire(&rt, key(&w1), 0, &[]).unwrap();
        // a new generation overwrites a copy that queued kernels may still read: it must
        // stay in queue order, a plain upload
        a.acquire(&rt, key(&w1), 1, &[]).unwrap();
        // no room for two: w1 goes, freed as a weight (after the queued work, no wait)
        let y = a.acquire(&rt, key(&w2), 0, &[]).unwrap();
        assert_eq!(
            rt.take_calls(),
            vec![
                Call::AllocWeight {
                    size: 300,
                    addr: Some(x)
                },
                Call::UploadWeight {
                    dst: x,
                    bytes: w1.clone()
                },
                Call::Upload {
                    dst: x,
                    bytes: w1.clone(),
                    owned: false
                },
                Call::FreeWeight(x),
                Call::AllocWeight {
                    size: 300,
                    addr: Some(y)
                },
                Call::UploadWeight {
                    dst: y,
                    bytes: w2.clone()
                },
            ]
        );
    }

    #[test]
    fn too_large_and_no_room_are_refused_without_damage() {
        let rt = SimDevice::new(0, 1 << 20, None, |_| {}).unwrap();
        let small = vec![3u8; 600];
        let other = vec![4u8; 600];
        let big = vec![7u8; 5000];
        let mut a = Arena::new(1024);
        let s_addr = a.acquire(&rt, key(&small), 0, &[]).unwrap();
        let e = a.acquire(&rt, key(&big), 0, &[]).unwrap_err();
        assert_eq!(
            e,
            ArenaError::TooLarge {
                size: 5000,
                limit: 1024
            }
        );
        assert!(e.to_string().contains("GGML_HRX_HOST_WEIGHT_LIMIT_MB"));
        // `small` is pinned by the same node: no room for `other`
        let e = a.acquire(&rt, key(&other), 0, &[key(&small)]).unwrap_err();
        assert!(matches!(e, ArenaError::NoRoom { .. }), "{e:?}");
        a.note_refusal();
        assert_eq!(read(&rt, s_addr, 600), small);
        let s = a.stats();
        assert_eq!((s.refusals, s.resident_bytes, s.evictions), (2, 600, 0));
        // device memory is returned when the buffer goes
        a.forget_range(&rt, small.as_ptr() as usize, small.len());
        rt.synchronize().unwrap();
        assert_eq!(rt.used(), 0);
        assert_eq!(a.stats().resident_bytes, 0);
    }
}
