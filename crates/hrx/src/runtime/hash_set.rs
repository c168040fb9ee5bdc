//! ggml's graph hash sets, read and built here in one place: the rule is shared by a runtime
//! that runs ggml kernels (the simulator builds the set of its small graphs) and the layer
//! above (it reads the scheduler's sets).
//!
//! Reading and building `ggml_cgraph` hash sets (`visited_hash_set` + `use_counts`), with
//! ggml's hashing rule (`pointer >> 4`, linear probing, a `u32` bitset of used slots).
//! Split graphs handed to a backend by the scheduler are views of the user's graph and
//! carry its hash set: that is how HRX learns a node's use count (for fusion) and the
//! whole graph's node list (for the report).

use ggml_sys::{ggml_cgraph, ggml_hash_set, ggml_tensor};

fn slot_used(used: *const u32, i: usize) -> bool {
    // SAFETY: callers pass a bitset of at least `size` bits and `i < size`.
    unsafe { (*used.add(i >> 5) >> (i & 31)) & 1 == 1 }
}

/// Slot of `key` in `set`, if present.
///
/// # Safety
/// `set` is a valid ggml hash set (or has size 0 / NULL arrays).
pub unsafe fn hash_find(set: &ggml_hash_set, key: *const ggml_tensor) -> Option<usize> {
    if set.size == 0 || set.used.is_null() || set.keys.is_null() {
        return None;
    }
    let h = (key as usize >> 4) % set.size;
    let mut i = h;
    loop {
        if !slot_used(set.used, i) {
            return None;
        }
        // SAFETY: i < size, keys has size entries.
        if std::ptr::eq(unsafe { *set.keys.add(i) }, key) {
            return Some(i);
        }
        i = (i + 1) % set.size;
        if i == h {
            return None;
        }
    }
}

/// The number of graph nodes using `node` as a source, as the graph recorded it; `None`
/// when the graph carries no use counts or does not know the node.
///
/// # Safety
/// `g` is a valid graph (view).
pub unsafe fn use_count(g: &ggml_cgraph, node: *const ggml_tensor) -> Option<i32> {
    if g.use_counts.is_null() {
        return None;
    }
    // SAFETY: `g` is a valid graph (the contract of `use_count`), so its hash set is sound to
    // search and `use_counts`, checked non-NULL, has one entry per slot of it.
    unsafe { hash_find(&g.visited_hash_set, node).map(|i| *g.use_counts.add(i)) }
}

/// Every tensor the graph's hash set holds (nodes and leafs of the whole user graph).
///
/// # Safety
/// `set` is a valid ggml hash set (or empty).
pub unsafe fn all_tensors(set: &ggml_hash_set) -> Vec<*mut ggml_tensor> {
    let mut v = Vec::new();
    if set.size == 0 || set.used.is_null() || set.keys.is_null() {
        return v;
    }
    for i in 0..set.size {
        if slot_used(set.used, i) {
            // SAFETY: i < size.
            v.push(unsafe { *set.keys.add(i) });
        }
    }
    v
}

/// An owned hash set with use counts for a small graph built by the simulator.
pub struct OwnedHashSet {
    used: Vec<u32>,
    keys: Vec<*mut ggml_tensor>,
    counts: Vec<i32>,
}

impl OwnedHashSet {
    /// A set holding `entries` (tensor, use count).
    pub fn new(entries: &[(*mut ggml_tensor, i32)]) -> OwnedHashSet {
        let size = (entries.len() * 2 + 1).max(3);
        let mut s = OwnedHashSet {
            used: vec![0; size.div_ceil(32)],
            keys: vec![std::ptr::null_mut(); size],
            counts: vec![0; size],
        };
        for &(t, c) in entries {
            let mut i = (t as usize >> 4) % size;
            while slot_used(s.used.as_ptr(), i) && s.keys[i] != t {
                i = (i + 1) % size;
            }
            s.used[i >> 5] |= 1 << (i & 31);
            s.keys[i] = t;
            s.counts[i] = c;
        }
        s
    }

    /// The raw set; valid while `self` lives and is not moved... the vectors' heap storage
    /// does not move with `self`, so the pointers stay valid until `self` is dropped.
    pub fn raw(&mut self) -> (ggml_hash_set, *mut i32) {
        (
            ggml_hash_set {
                size: self.keys.len(),
                used: self.used.as_mut_ptr(),
                keys: self.keys.as_mut_ptr(),
            },
            self.counts.as_mut_ptr(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_set_is_readable_by_the_ggml_rule() {
        let mut ts: Vec<ggml_tensor> = (0..5).map(|_| ggml_tensor::default()).collect();
        let ptrs: Vec<*mut ggml_tensor> = ts.iter_mut().map(|t| t as *mut _).collect();
        let mut s = OwnedHashSet::new(&[(ptrs[0], 1), (ptrs[1], 0), (ptrs[3], 4)]);
        let (set, counts) = s.raw();
        let g = ggml_cgraph {
            use_counts: counts,
            visited_hash_set: set,
            ..Default::default()
        };
        // SAFETY: the set and counts live in `s`.
        unsafe {
            assert_eq!(use_count(&g, ptrs[0]), Some(1));
            assert_eq!(use_count(&g, ptrs[3]), Some(4));
            assert_eq!(use_count(&g, ptrs[2]), None);
            assert_eq!(all_tensors(&set).len(), 3);
        }
    }
}
