//! Fake device addresses, shared by every runtime (the simulator and CUDA).
//!
//! Each HRX device reserves one range of the process's address space as large as its
//! memory, with `mmap(PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)`: no access
//! rights and no backing, so any host load or store anywhere in it faults (SIGSEGV) every
//! time. Device allocations are ranges inside it; a tensor in a device-local buffer has
//! `data = buffer base + offset`, a fake address whose offset from the range start is its
//! offset in device memory. The runtime translates a fake address back (for a view: the
//! view's own address, which ggml computes as root address + view offset, lies inside its
//! root's allocation).
//!
//! The original HRX backend used the constant `GGML_HRX_FAKE_PTR_BASE` = 0x1000 as every
//! buffer's base. Here the base is where the reservation landed: by default wherever the
//! kernel placed it; `GGML_HRX_FAKE_PTR_BASE=0x...` asks for that address (device N at
//! base + N x capacity, rounded up to 64 KiB), taken only if free (`MAP_FIXED_NOREPLACE`),
//! else the kernel's choice (the registry warns; it compares [`Reservation::base`] with
//! the address it asked for). Whether a low address such as 0x1000 is taken is the kernel's
//! decision: it refuses a base below `vm.mmap_min_addr` (65536 on many systems, 4096 on
//! others) or a range overlapping a mapping; once reserved, every offset faults.

use std::collections::BTreeMap;

use crate::runtime::ALIGNMENT;

/// A reserved, inaccessible range of addresses.
#[derive(Debug)]
pub struct Reservation {
    base: usize,
    len: usize,
}

impl Reservation {
    /// Reserves `len` bytes of address space with no access rights. `hint` asks for a fixed
    /// start (not replacing any mapping); when the kernel refuses it the reservation lands
    /// where the kernel chooses (the caller tells by comparing [`Reservation::base`] with
    /// the hint). Returns `None` when no range of that size is available.
    pub fn new(len: usize, hint: Option<usize>) -> Option<Reservation> {
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        if let Some(h) = hint {
            // SAFETY: a fresh PROT_NONE anonymous mapping; MAP_FIXED_NOREPLACE never
            // replaces an existing mapping.
            let p = unsafe {
                libc::mmap(
                    h as *mut _,
                    len,
                    libc::PROT_NONE,
                    flags | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED && p as usize == h {
                return Some(Reservation { base: h, len });
            }
            if p != libc::MAP_FAILED {
                // SAFETY: unmapping the mapping just created.
                unsafe { libc::munmap(p, len) };
            }
        }
        // SAFETY: a fresh PROT_NONE anonymous mapping at a kernel-chosen address.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_NONE, flags, -1, 0) };
        if p == libc::MAP_FAILED {
            return None;
        }
        Some(Reservation {
            base: p as usize,
            len,
        })
    }

    /// First address of the range.
    pub fn base(&self) -> usize {
        self.base
    }

    /// Length of the range in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `[addr, addr + len)` lies inside the range.
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        addr >= self.base
            && addr
                .checked_add(len)
                .is_some_and(|e| e <= self.base + self.len)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the range this value mapped.
        unsafe { libc::munmap(self.base as *mut _, self.len) };
    }
}

/// First-fit allocator of aligned ranges in `[0, capacity)` (offsets, not addresses).
#[derive(Debug)]
pub struct RangeAllocator {
    capacity: usize,
    /// free ranges: start -> length, coalesced
    free: BTreeMap<usize, usize>,
    /// live allocations: start -> length
    live: BTreeMap<usize, usize>,
    used: usize,
}

impl RangeAllocator {
    /// An allocator over `capacity` bytes, all free.
    pub fn new(capacity: usize) -> Self {
        let mut free = BTreeMap::new();
        if capacity > 0 {
            free.insert(0, capacity);
        }
        RangeAllocator {
            capacity,
            free,
            live: BTreeMap::new(),
            used: 0,
        }
    }

    /// Allocates `size` bytes (rounded up to [`ALIGNMENT`], at least one unit) and returns
    /// the offset, or `None` when no free range is large enough.
    pub fn alloc(&mut self, size: usize) -> Option<usize> {
        let size = size.max(1).checked_add(ALIGNMENT - 1)? / ALIGNMENT * ALIGNMENT;
        let (&start, &len) = self.free.iter().find(|(_, &len)| len >= size)?;
        self.free.remove(&start);
        if len > size {
            self.free.insert(start + size, len - size);
        }
        self.live.insert(start, size);
        self.used += size;
        Some(start)
    }

    /// Frees the allocation starting at `offset`; returns its size, or `None` when no
    /// allocation starts there.
    pub fn free(&mut self, offset: usize) -> Option<usize> {
        let size = self.live.remove(&offset)?;
        self.used -= size;
        let mut start = offset;
        let mut len = size;
        if let Some((&ps, &pl)) = self.free.range(..offset).next_back() {
            if ps + pl == offset {
                self.free.remove(&ps);
                start = ps;
                len += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(offset + size)) {
            self.free.remove(&(offset + size));
            len += nl;
        }
        self.free.insert(start, len);
        Some(size)
    }

    /// Bytes in live allocations.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Total bytes managed.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The live allocation containing `[offset, offset + len)`, as (start, size).
    pub fn find(&self, offset: usize, len: usize) -> Option<(usize, usize)> {
        let (&s, &l) = self.live.range(..=offset).next_back()?;
        (offset + len <= s + l).then_some((s, l))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocator_aligns_reuses_and_coalesces() {
        let mut a = RangeAllocator::new(4096);
        let x = a.alloc(1).unwrap();
        let y = a.alloc(300).unwrap();
        assert_eq!(x, 0);
        assert_eq!(y, 256);
        assert_eq!(a.used(), 256 + 512);
        assert_eq!(a.find(256 + 100, 50), Some((256, 512)));
        assert_eq!(a.find(256 + 500, 50), None);
        assert_eq!(a.free(x), Some(256));
        assert_eq!(a.free(x), None);
        // the first hole is reused for a small allocation
        assert_eq!(a.alloc(200), Some(0));
        a.free(0).unwrap();
        a.free(256).unwrap();
        assert_eq!(a.used(), 0);
        // after coalescing the whole capacity is one range again
        assert_eq!(a.alloc(4096), Some(0));
        assert_eq!(a.alloc(1), None);
    }

    #[test]
    fn reservation_translates_within_bounds() {
        let r = Reservation::new(1 << 20, None).unwrap();
        assert!(r.contains(r.base(), 1 << 20));
        assert!(r.contains(r.base() + 4096, 16));
        assert!(!r.contains(r.base() + (1 << 20) - 8, 16));
        assert!(!r.contains(r.base() - 1, 1));
    }

    #[test]
    fn fixed_hint_is_honoured_when_free() {
        // find a free spot first, release it, then ask for it explicitly
        let probe = Reservation::new(1 << 16, None).unwrap();
        let want = probe.base();
        drop(probe);
        let r = Reservation::new(1 << 16, Some(want)).unwrap();
        assert_eq!(r.base(), want);
    }
}
