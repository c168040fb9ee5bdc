//! Laying a plan out: where each block the walk handed out goes in its chunk.
//!
//! The walk ([`super::walk`]) is stock's greedy allocator, tensor by tensor, and its offsets
//! are the `stock` layout. Knowing the whole graph, the `packed` layout (the default) places
//! the same blocks again, largest first, each at the lowest offset where it overlaps no block
//! alive at the same time (an interval packing: "greedy by size"). Per chunk, the packing is
//! tried only when it may save at least 1/256 of the greedy extent, and kept only when it
//! needs fewer bytes than the greedy offsets, so a compute buffer is never larger than
//! stock's. Lifetimes, and the blocks that in-place ops share, are the walk's:
//! two tensors alive at the same step never overlap in either layout, in a graph that lists
//! each tensor once, sources first (a plan that placed a tensor twice is not packed:
//! [`Planner::placed_twice`]).
//!
//! `GGML_ALLOC_LAYOUT=stock` selects stock's offsets byte for byte (for the differential
//! test); any other value but `packed` is named in a warning and reads `packed`.
//!
//! The packing hands a block's bytes to another block only some nodes after the block's last
//! use (`GGML_ALLOC_REUSE_DELAY`, [`reuse_delay_from_env`]; default 4). A backend that fuses a
//! run of nodes into one kernel reads the run's inputs while it writes the run's output, and
//! ggml-cuda refuses a fusion whose output overlaps an input from outside the run: memory
//! freed at one node and reused at the next is sound node by node, but costs that fusion.
//! Chunks the packing does not shrink keep the greedy offsets, and with them stock's reuse.

use super::walk::{Planner, Slot};

/// Nodes after a block's last use before the packed layout lets another block take its
/// bytes, unless `GGML_ALLOC_REUSE_DELAY` names another count (0 to 1024).
pub const DEFAULT_REUSE_DELAY: u32 = 4;

/// The most nodes [`lay_out`] delays reuse by: a larger delay is this one.
pub const MAX_REUSE_DELAY: u32 = 1024;

/// The reuse delay in nodes that `GGML_ALLOC_REUSE_DELAY` names (default
/// [`DEFAULT_REUSE_DELAY`], 0 to [`MAX_REUSE_DELAY`]), read when an allocator is made, as
/// `GGML_ALLOC_LAYOUT` is: a value not understood is named in a warning and the default kept.
pub fn reuse_delay_from_env() -> u32 {
    crate::env::read(
        "GGML_ALLOC_REUSE_DELAY",
        DEFAULT_REUSE_DELAY,
        &DEFAULT_REUSE_DELAY.to_string(),
        |t| envvar::count(t, 0..=MAX_REUSE_DELAY as usize).map(|n| n as u32),
    )
}

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

/// Working memory of [`lay_out`] and [`pack`], kept by the graph allocator from plan to plan
/// (a reserve otherwise allocated a dozen lists afresh each time, and on a first plan the page
/// faults of fresh memory cost more than the packing itself), and the last packings
/// [`lay_out`] made, which it gives again to a chunk of the same blocks.
#[derive(Default)]
pub struct Scratch {
    /// Per slot: whether its block moved.
    moved: Vec<bool>,
    /// The slot ids of one chunk, and their slots.
    ids: Vec<usize>,
    slots: Vec<Slot>,
    /// [`live_peak`]'s difference array.
    delta: Vec<isize>,
    /// [`pack`]'s sort keys: (size descending, start, slot index).
    order: Vec<(std::cmp::Reverse<usize>, u32, u32)>,
    /// [`pack`]'s time index: slot indexes per bucket of [`BUCKET`] steps.
    buckets: Vec<Vec<u32>>,
    /// [`pack`]'s result: an offset per slot.
    offsets: Vec<usize>,
    seen: Vec<u32>,
    busy: Vec<(usize, usize)>,
    long: Vec<(usize, usize, u32, u32)>,
    /// The last few packings, kept because llama.cpp reserves the same graphs more than once
    /// (the prompt graph, the token graph, then the prompt graph again, for every context):
    /// a chunk whose blocks equal a memo's in size and lifetime takes its offsets.
    memo: Memo,
}

/// [`pack_with`]'s results for the last [`MEMO_ENTRIES`] chunks it packed, keyed by what it
/// reads of each slot: its size, start and end (delayed), in walk order. The packing is a
/// function of these alone, so an equal key gives the same offsets, which the tests check.
#[derive(Default)]
struct Memo {
    entries: Vec<MemoEntry>,
    /// The entry the next new packing replaces.
    next: usize,
    /// Packings taken from an entry (read by the tests).
    hits: u64,
}

/// One packing: its key, offsets (one per slot) and extent in bytes.
#[derive(Default)]
struct MemoEntry {
    key: Vec<(usize, u32, u32)>,
    offsets: Vec<usize>,
    extent: usize,
}

/// Packings a [`Scratch`] remembers. A context reserves two or three distinct graphs, each
/// with a chunk or two per buffer type that the packing runs on.
const MEMO_ENTRIES: usize = 4;

impl Memo {
    /// The remembered packing of `slots`: copies its offsets into `offsets` and returns its
    /// extent, or `None` if no entry has this key.
    fn find(&self, slots: &[Slot], offsets: &mut Vec<usize>) -> Option<usize> {
        let e = self.entries.iter().find(|e| {
            e.key.len() == slots.len()
                && e.key
                    .iter()
                    .zip(slots)
                    .all(|(&k, s)| k == (s.size, s.start, s.end))
        })?;
        offsets.clear();
        offsets.extend_from_slice(&e.offsets);
        Some(e.extent)
    }

    /// Remembers the packing of `slots`, replacing the entry remembered first when full (a
    /// hit does not make an entry newer).
    fn keep(&mut self, slots: &[Slot], offsets: &[usize], extent: usize) {
        // `next` counts up from 0 while the list fills, so it is the list's length until full.
        if self.next == self.entries.len() {
            self.entries.push(MemoEntry::default());
        }
        let e = &mut self.entries[self.next];
        e.key.clear();
        e.key.extend(slots.iter().map(|s| (s.size, s.start, s.end)));
        e.offsets.clear();
        e.offsets.extend_from_slice(offsets);
        e.extent = extent;
        self.next = (self.next + 1) % MEMO_ENTRIES;
    }
}

/// Applies `layout` to the planner's last walk: moves the blocks (and the tensors in them)
/// and sets each chunk's size to what the layout needs.
/// A freed block's bytes go to another block only `delay` nodes (at most
/// [`MAX_REUSE_DELAY`]) after its last use, where the packing is kept; a chunk left with the
/// greedy offsets keeps stock's reuse.
pub fn lay_out(p: &mut Planner, layout: Layout, delay: u32, scratch: &mut Scratch) {
    if layout == Layout::Stock || p.slots.is_empty() || p.placed_twice {
        return;
    }
    let delay = delay.min(MAX_REUSE_DELAY);
    scratch.moved.clear();
    scratch.moved.resize(p.slots.len(), false);
    let mut any = false;
    for (a, blocks) in p.blocks.iter_mut().enumerate() {
        for c in 0..blocks.n_chunks() {
            // The slots of this allocator's chunk `c`, in walk order.
            scratch.ids.clear();
            scratch.slots.clear();
            for (i, s) in p.slots.iter().enumerate() {
                if s.talloc as usize == a && s.addr.chunk as usize == c {
                    scratch.ids.push(i);
                    scratch.slots.push(delayed(*s, delay));
                }
            }
            // No layout needs fewer bytes than are alive at once, so packing saves at most
            // the greedy extent minus that peak. When that is under 1/256 of the extent, the
            // greedy offsets are kept: the packing (a sort of every block a long-lived block
            // meets) would cost more than the whole rest of the plan for a saving that small
            // (SmolLM2's prompt graph on the CPU: 2 KiB of 98 MiB, while the packing was a
            // quarter of the reserve).
            let greedy = blocks.max_size(c);
            let peak = live_peak_with(&scratch.slots, &mut scratch.delta);
            if peak >= greedy || greedy - peak < greedy / MIN_GAIN {
                continue;
            }
            let slots = std::mem::take(&mut scratch.slots);
            let extent = pack_remembered(&slots, scratch);
            scratch.slots = slots;
            if extent >= blocks.max_size(c) {
                continue;
            }
            blocks.set_max_size(c, extent);
            for (&i, &off) in scratch.ids.iter().zip(&scratch.offsets) {
                scratch.moved[i] = true;
                p.slots[i].addr.offset = off;
            }
            any = true;
        }
    }
    if !any {
        return;
    }
    for n in p.nodes.iter_mut() {
        if let Some(s) = (n.slot as usize).checked_sub(1) {
            if scratch.moved[s] {
                n.addr.offset = p.slots[s].addr.offset;
            }
        }
    }
}

/// `s` as the packing sees it: busy `delay` nodes (two walk steps each) past its last use.
/// A block never freed stays so.
fn delayed(mut s: Slot, delay: u32) -> Slot {
    if s.end != u32::MAX {
        s.end = s
            .end
            .saturating_add(delay.saturating_mul(2))
            .min(u32::MAX - 1);
    }
    s
}

/// The most bytes of `slots` alive at one step: a lower bound on any layout's extent.
pub fn live_peak(slots: &[Slot]) -> usize {
    live_peak_with(slots, &mut Vec::new())
}

/// [`live_peak`] with its working memory given.
fn live_peak_with(slots: &[Slot], delta: &mut Vec<isize>) -> usize {
    // Steps are small (two per node): a difference array over them, no sort. A block freed
    // at step t and one handed out at step t never overlap ([start, end) lifetimes), which
    // adding before taking the running maximum at each step respects.
    let horizon = slots
        .iter()
        .map(|s| if s.end == u32::MAX { s.start } else { s.end })
        .max()
        .map_or(0, |m| m as usize + 1);
    delta.clear();
    delta.resize(horizon + 1, 0);
    for s in slots {
        delta[s.start as usize] += s.size as isize;
        if s.end != u32::MAX {
            delta[s.end as usize] -= s.size as isize;
        }
    }
    let (mut live, mut peak) = (0isize, 0isize);
    for &d in delta.iter() {
        live += d;
        peak = peak.max(live);
    }
    peak as usize
}

/// A chunk is packed only when the packing may save at least 1/`MIN_GAIN` of its greedy
/// extent (see [`lay_out`]).
const MIN_GAIN: usize = 256;

/// Steps per bucket of the time index in [`pack`].
const BUCKET: u32 = 16;

/// Buckets a block must span to be kept in [`pack`]'s list of long-lived blocks.
const LONG: usize = 4;

/// Offsets for `slots` (sizes already aligned) such that two slots alive at the same step
/// never overlap, and the bytes they span: largest first (then earliest), each at the lowest
/// offset that fits between the slots placed so far that it meets in time.
///
/// The slots placed so far are indexed by time in buckets of [`BUCKET`] steps, so a slot is
/// compared only with those alive near its own lifetime: graphs keep few tensors alive at once,
/// and this stays close to linear where comparing every pair cost several times stock's whole
/// reserve on a 6,000-node graph.
pub fn pack(slots: &[Slot]) -> (Vec<usize>, usize) {
    let mut scratch = Scratch::default();
    let extent = pack_with(slots, &mut scratch);
    (scratch.offsets, extent)
}

/// [`pack_with`], or the offsets and extent a memo of `scratch` has for slots of the same
/// sizes and lifetimes; the offsets are left in `scratch.offsets`.
fn pack_remembered(slots: &[Slot], scratch: &mut Scratch) -> usize {
    if let Some(extent) = scratch.memo.find(slots, &mut scratch.offsets) {
        scratch.memo.hits += 1;
        return extent;
    }
    let extent = pack_with(slots, scratch);
    scratch.memo.keep(slots, &scratch.offsets, extent);
    extent
}

/// [`pack`] with its working memory given; the offsets are left in `scratch.offsets`.
fn pack_with(slots: &[Slot], scratch: &mut Scratch) -> usize {
    let Scratch {
        order,
        buckets,
        offsets,
        seen,
        busy,
        long,
        ..
    } = scratch;
    // Largest first, then earliest, then in walk order (the key makes the order total). The
    // keys are sorted themselves, not indexes into `slots`: no indirection per comparison.
    order.clear();
    order.extend(
        slots
            .iter()
            .enumerate()
            .map(|(i, s)| (std::cmp::Reverse(s.size), s.start, i as u32)),
    );
    order.sort_unstable();
    // Steps are bounded by the finite ends and starts; a block never freed lives to the last.
    let horizon = slots
        .iter()
        .map(|s| if s.end == u32::MAX { s.start } else { s.end })
        .max()
        .unwrap_or(0)
        + 1;
    let bucket_of = |step: u32| (step.min(horizon) / BUCKET) as usize;
    let n_buckets = bucket_of(horizon) + 1;
    for b in buckets.iter_mut().take(n_buckets) {
        b.clear();
    }
    if buckets.len() < n_buckets {
        buckets.resize_with(n_buckets, Vec::new);
    }
    offsets.clear();
    offsets.resize(slots.len(), 0);
    seen.clear();
    seen.resize(slots.len(), u32::MAX);
    // Blocks alive longer than `LONG` buckets (graph inputs, outputs, long-lived results) are
    // kept apart, sorted by offset, instead of in every bucket they span: every block meets
    // them, and sorting them again for each one was most of the packing's cost.
    long.clear();
    let mut extent = 0usize;
    for (rank, &(_, _, i)) in order.iter().enumerate() {
        let i = i as usize;
        let s = slots[i];
        let (b0, b1) = (bucket_of(s.start), bucket_of(s.end.saturating_sub(1)));
        busy.clear();
        for bucket in &buckets[b0..=b1] {
            for &j in bucket {
                let j = j as usize;
                if seen[j] == rank as u32 {
                    continue;
                }
                seen[j] = rank as u32;
                let o = &slots[j];
                if o.start < s.end && s.start < o.end && o.size > 0 {
                    busy.push((offsets[j], offsets[j] + o.size));
                }
            }
        }
        busy.sort_unstable_by_key(|b| b.0);
        // The lowest offset past every block it meets that leaves room: walk the short
        // blocks (sorted above) and the long ones (sorted by offset) together, by offset.
        let mut long_met = long
            .iter()
            .filter(|&&(_, _, start, end)| start < s.end && s.start < end)
            .map(|&(lo, hi, _, _)| (lo, hi))
            .peekable();
        let mut short_met = busy.iter().copied().peekable();
        let mut at = 0usize;
        loop {
            let next = match (short_met.peek(), long_met.peek()) {
                (Some(&a), Some(&b)) if a.0 <= b.0 => short_met.next(),
                (Some(_), Some(_)) => long_met.next(),
                (Some(_), None) => short_met.next(),
                (None, Some(_)) => long_met.next(),
                (None, None) => None,
            };
            let Some((lo, hi)) = next else { break };
            if lo >= at + s.size {
                break;
            }
            at = at.max(hi);
        }
        offsets[i] = at;
        extent = extent.max(at + s.size);
        if b1 - b0 >= LONG && s.size > 0 {
            let k = long.partition_point(|&(lo, _, _, _)| lo <= at);
            long.insert(k, (at, at + s.size, s.start, s.end));
        } else {
            for bucket in &mut buckets[b0..=b1] {
                bucket.push(i as u32);
            }
        }
    }
    extent
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::blocks::Addr;
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
        let slots = [
            slot(100, 0, 10),
            slot(100, 0, 2),
            slot(100, 0, 10),
            slot(50, 5, 10),
        ];
        let (off, extent) = pack(&slots);
        assert_eq!(off[3], 100, "the 50 bytes go where the early block was");
        assert_eq!(extent, 300);
    }

    #[test]
    fn freed_memory_waits_the_reuse_delay_before_another_block_takes_it() {
        // A is last used at node 1 (freed at step 4); B is made at node 3 (step 7).
        let (a, b) = (slot(64, 1, 4), slot(64, 7, 10));
        assert_eq!(
            pack(&[a, b]),
            (vec![0, 0], 64),
            "no delay: B reuses A's bytes"
        );
        // Two nodes of delay keep A busy to step 8: B goes beside it.
        let (off, extent) = pack(&[delayed(a, 2), delayed(b, 2)]);
        assert_eq!((off, extent), (vec![0, 64], 128));
        // One node is not enough to reach B's node.
        assert_eq!(pack(&[delayed(a, 1), delayed(b, 1)]).1, 64);
        // A block never freed stays never freed.
        assert_eq!(delayed(slot(8, 0, u32::MAX), 8).end, u32::MAX);
    }

    #[test]
    fn the_live_peak_counts_blocks_alive_at_the_same_step() {
        // [0,4) and [4,8) never meet; [2,6) meets both.
        let slots = [slot(64, 0, 4), slot(64, 4, 8), slot(32, 2, 6)];
        assert_eq!(live_peak(&slots), 96);
        assert_eq!(live_peak(&[slot(10, 0, u32::MAX), slot(5, 3, 4)]), 15);
    }

    #[test]
    fn a_chunk_packed_before_takes_the_remembered_offsets() {
        let prompt = [slot(64, 0, 4), slot(64, 4, 8), slot(32, 2, 6)];
        let token = [slot(16, 0, 2), slot(16, 2, 4)];
        let mut scratch = Scratch::default();
        // The order a context reserves in: prompt, token, prompt again.
        assert_eq!(pack_remembered(&prompt, &mut scratch), 96);
        assert_eq!(pack_remembered(&token, &mut scratch), 16);
        assert_eq!(scratch.memo.hits, 0);
        assert_eq!(pack_remembered(&prompt, &mut scratch), 96);
        assert_eq!(scratch.offsets, vec![0, 0, 64]);
        assert_eq!(scratch.memo.hits, 1);
        // One lifetime longer is another chunk: packed afresh, and apart.
        let longer = [slot(64, 0, 5), slot(64, 4, 8), slot(32, 2, 6)];
        assert_eq!(pack_remembered(&longer, &mut scratch), 160);
        assert_eq!(scratch.memo.hits, 1);
        // Only the last MEMO_ENTRIES packings are kept: after four more, `prompt` is gone.
        for n in 1..=MEMO_ENTRIES as u32 {
            pack_remembered(&[slot(8, 0, n)], &mut scratch);
        }
        pack_remembered(&prompt, &mut scratch);
        assert_eq!(scratch.memo.hits, 1);
        assert_eq!(scratch.memo.entries.len(), MEMO_ENTRIES);
    }

    proptest! {
        /// Packing through the memo gives what a fresh packing gives, for every chunk of a
        /// sequence that repeats some of them (as a context's reserves do).
        #[test]
        fn remembered_packings_equal_fresh_ones(
            chunks in proptest::collection::vec(
                proptest::collection::vec((1usize..40, 0u32..100, 1u32..80), 1..40), 1..6),
            picks in proptest::collection::vec(0usize..6, 1..20),
        ) {
            let chunks: Vec<Vec<Slot>> = chunks.iter().map(|raw| {
                raw.iter().map(|&(sz, st, len)| slot(sz * 16, st, st + len)).collect()
            }).collect();
            let mut scratch = Scratch::default();
            for &p in &picks {
                let slots = &chunks[p % chunks.len()];
                let extent = pack_remembered(slots, &mut scratch);
                prop_assert_eq!((scratch.offsets.clone(), extent), pack(slots));
            }
        }

        /// With a reuse delay of `d` nodes, no block is placed over one freed fewer than `d`
        /// nodes before it is made (nor, as ever, over one alive with it): what a backend
        /// fusing up to `d + 1` nodes needs.
        #[test]
        fn no_block_reuses_bytes_freed_within_the_delay(
            raw in proptest::collection::vec((1usize..40, 0u32..200, 1u32..150), 1..60),
            d in 0u32..6,
        ) {
            let slots: Vec<Slot> = raw.iter().map(|&(sz, st, len)| slot(sz * 16, st, st + len)).collect();
            let seen: Vec<Slot> = slots.iter().map(|&s| delayed(s, d)).collect();
            let (off, _) = pack(&seen);
            for i in 0..slots.len() {
                for j in 0..i {
                    let (a, b) = (&slots[i], &slots[j]);
                    let near = a.start < b.end + 2 * d && b.start < a.end + 2 * d;
                    let apart = off[i] + a.size <= off[j] || off[j] + b.size <= off[i];
                    prop_assert!(!near || apart, "slots {} and {} share bytes within {} nodes", i, j, d);
                }
            }
        }

        /// No two slots alive at the same step overlap, the extent covers every slot, and
        /// no layout is below the live peak.
        #[test]
        fn packing_never_overlaps_live_blocks(
            raw in proptest::collection::vec((1usize..40, 0u32..200, 1u32..150), 1..80)
        ) {
            let slots: Vec<Slot> = raw.iter().map(|&(sz, st, len)| slot(sz * 16, st, st + len)).collect();
            let (off, extent) = pack(&slots);
            prop_assert!(extent >= live_peak(&slots));
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
