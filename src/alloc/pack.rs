//! Laying a plan out: where each block the walk handed out goes in its chunk.
//!
//! The walk ([`super::walk`]) is stock's greedy allocator, tensor by tensor, and its offsets
//! are the `stock` layout. Knowing the whole graph, the `packed` layout (the default) places
//! the same blocks again, largest first, each at the lowest offset where it overlaps no block
//! alive at the same time (an interval packing: "greedy by size"). Per chunk, the packing is
//! kept only when it needs fewer bytes than the greedy offsets, so a compute buffer is never
//! larger than stock's. Lifetimes, and the blocks that in-place ops share, are the walk's:
//! two tensors alive at the same step never overlap in either layout.
//!
//! `GGML_ALLOC_LAYOUT=stock` selects stock's offsets byte for byte (for the differential
//! test); any other value but `packed` is named in a warning and reads `packed`.

use super::blocks::Addr;
use super::walk::{Planner, Slot};

/// How a plan is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Stock's greedy offsets, byte for byte.
    Stock,
    /// The interval packing, where it is smaller than stock's (per chunk).
    Packed,
}

impl Layout {
    /// The layout `GGML_ALLOC_LAYOUT` names (default [`Layout::Packed`]).
    pub fn from_env() -> Self {
        crate::env::read("GGML_ALLOC_LAYOUT", Layout::Packed, "packed", |t| {
            match t.trim() {
                "stock" => Ok(Layout::Stock),
                "packed" => Ok(Layout::Packed),
                _ => Err("is not stock or packed".into()),
            }
        })
    }
}

/// Applies `layout` to the planner's last walk: moves the blocks (and the tensors in them)
/// and sets each chunk's size to what the layout needs.
pub fn lay_out(p: &mut Planner, layout: Layout) {
    if layout == Layout::Stock || p.slots.is_empty() {
        return;
    }
    let mut moved: Vec<Option<usize>> = vec![None; p.slots.len()];
    let mut any = false;
    for (a, blocks) in p.blocks.iter_mut().enumerate() {
        for c in 0..blocks.n_chunks() {
            let ids: Vec<usize> = (0..p.slots.len())
                .filter(|&i| p.slots[i].talloc as usize == a && p.slots[i].addr.chunk as usize == c)
                .collect();
            let slots: Vec<Slot> = ids.iter().map(|&i| p.slots[i]).collect();
            let (offsets, extent) = pack(&slots);
            if extent >= blocks.max_size(c) {
                continue;
            }
            blocks.set_max_size(c, extent);
            for (&i, off) in ids.iter().zip(offsets) {
                moved[i] = Some(off);
                p.slots[i].addr.offset = off;
            }
            any = true;
        }
    }
    if !any {
        return;
    }
    for n in p.hash.values_mut() {
        if let Some(Some(off)) = (n.slot as usize).checked_sub(1).map(|s| moved[s]) {
            n.addr = Addr {
                chunk: n.addr.chunk,
                offset: off,
            };
        }
    }
}

/// Offsets for `slots` (sizes already aligned) such that two slots alive at the same step
/// never overlap, and the bytes they span: largest first (then earliest), each at the lowest
/// offset that fits between the slots placed so far that it meets in time.
pub fn pack(slots: &[Slot]) -> (Vec<usize>, usize) {
    let mut order: Vec<usize> = (0..slots.len()).collect();
    order.sort_by(|&a, &b| {
        slots[b]
            .size
            .cmp(&slots[a].size)
            .then(slots[a].start.cmp(&slots[b].start))
    });
    let mut offsets = vec![0usize; slots.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(slots.len());
    let mut busy: Vec<(usize, usize)> = Vec::new();
    let mut extent = 0usize;
    for &i in &order {
        let s = slots[i];
        busy.clear();
        busy.extend(
            placed
                .iter()
                .map(|&j| &slots[j])
                .zip(placed.iter().map(|&j| offsets[j]))
                .filter(|(o, _)| o.start < s.end && s.start < o.end && o.size > 0)
                .map(|(o, off)| (off, off + o.size)),
        );
        busy.sort_unstable();
        let mut at = 0usize;
        for &(lo, hi) in &busy {
            if lo >= at + s.size {
                break;
            }
            at = at.max(hi);
        }
        offsets[i] = at;
        extent = extent.max(at + s.size);
        placed.push(i);
    }
    (offsets, extent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn slot(size: usize, start: u32, end: u32) -> Slot {
        Slot {
            talloc: 0,
            size,
            start,
            end,
            addr: Addr::default(),
        }
    }

    #[test]
    fn blocks_alive_apart_share_memory_and_blocks_alive_together_do_not() {
        let slots = [slot(64, 0, 4), slot(64, 4, 8), slot(32, 2, 6)];
        let (off, extent) = pack(&slots);
        assert_eq!(off, vec![0, 0, 64]);
        assert_eq!(extent, 96);
    }

    #[test]
    fn a_small_block_fills_a_gap_between_two_larger_ones() {
        // Two 100-byte blocks alive throughout, one freed early in the middle.
        let slots = [slot(100, 0, 10), slot(100, 0, 2), slot(100, 0, 10), slot(50, 5, 10)];
        let (off, extent) = pack(&slots);
        assert_eq!(off[3], 100, "the 50 bytes go where the early block was");
        assert_eq!(extent, 300);
    }

    proptest! {
        /// No two slots alive at the same step overlap, and the extent covers every slot.
        #[test]
        fn packing_never_overlaps_live_blocks(
            raw in proptest::collection::vec((1usize..40, 0u32..30, 1u32..12), 1..60)
        ) {
            let slots: Vec<Slot> = raw.iter().map(|&(sz, st, len)| slot(sz * 16, st, st + len)).collect();
            let (off, extent) = pack(&slots);
            for i in 0..slots.len() {
                prop_assert!(off[i] + slots[i].size <= extent);
                prop_assert_eq!(off[i] % 16, 0);
                for j in 0..i {
                    let (a, b) = (&slots[i], &slots[j]);
                    let live = a.start < b.end && b.start < a.end;
                    let apart = off[i] + a.size <= off[j] || off[j] + b.size <= off[i];
                    prop_assert!(!live || apart, "slots {} and {} overlap", i, j);
                }
            }
        }
    }
}
