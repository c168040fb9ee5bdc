//! The placement pipeline in one place: the passes of stock's
//! `ggml_backend_sched_split_graph`, in order, over the placement table. Each pass is a
//! function of its own module; this one only decides their order and what each is given.

use ggml_sys::ggml_cgraph;

use super::caps::Live;
use super::split::{self, SplitCtx};
use super::{assign, dump, expand, fill, inplace, record, upgrade, Sched};

impl Sched {
    /// Places every node and leaf of `g`, cuts it into splits with their input copies, and
    /// gives graph inputs their pipeline copies; with `GGML_SCHED_DEBUG`, logs the splits.
    ///
    /// # Safety
    /// `g` must be a live graph of live tensors.
    pub(crate) unsafe fn place(&mut self, g: &ggml_cgraph) {
        // SAFETY: the scheduler's own lists (see `Sched::backend`).
        let live = unsafe { Live::new(&self.backends, &self.bufts, &mut self.caps_devs) };
        let caps = &live;
        let t = &mut self.table;
        let mut ids = std::mem::take(&mut self.graph_ids);
        let rule = self.inplace_rule;
        let mut reuse =
            inplace::Reuse::recycled(g, self.n_copies > 1, std::mem::take(&mut self.reuse_memory));
        // `GGML_SCHED_DUMP`: one cached load per split; the rule's moves are noted only when set.
        let dump_dir = record::dir();
        let mut moves = dump_dir.map(|_| record::Moves::default());
        let mut sc = SplitCtx {
            caps,
            pool: &mut self.pool,
            n_copies: self.n_copies,
            cur_copy: self.cur_copy,
            rewrites: &mut self.replay.rewrites,
            originals: &mut self.originals,
            view_roots: rule,
        };
        sc.rewrites.clear();
        sc.originals.clear();

        // The dense ids of the graph's nodes, leafs and sources (reused where unchanged).
        // SAFETY: `g` is a live graph of live tensors (this function's contract).
        unsafe { ids.rebuild(t, g) };
        let ix = &ids;
        // 1: allocated storage, graph inputs and weights decide (user assignments kept).
        // SAFETY: `g` is live; `ix` was taken from `g` by the rebuild above.
        unsafe { assign::assign_current(caps, t, g, ix, self.op_offload, rule) };
        // 2: placed backends spread to unplaced neighbours, four sweeps.
        // SAFETY: `g` is live; `ix` was taken from `g` by the rebuild above.
        unsafe { expand::expand(caps, t, g, ix) };
        // 3: placed nodes move up to an equivalent backend; unplaced ones to best inputs.
        // SAFETY: `g` is live; `ix` was taken from `g` by the rebuild above.
        unsafe { upgrade::upgrade(caps, t, g, ix) };
        // 3b: in-place writers join the storage they write (not in stock; can be off).
        if rule {
            let before = moves.as_ref().map(|_| record::moves::snapshot(t, ix));
            // SAFETY: `g` is live; `ix` was taken from `g` by the rebuild above.
            unsafe { inplace::colocate(caps, t, g, false, &mut reuse) };
            if let (Some(m), Some(b)) = (moves.as_mut(), before) {
                m.note(&b, t, ix, 0);
            }
        }
        // 4: views follow their source, sources their reader, the rest a first supporter.
        // SAFETY: `g` is live; `ix` was taken from `g` by the rebuild above.
        unsafe { fill::fill(caps, t, g, ix) };
        // 3b again: groups whose view root only got its place in pass 4.
        if rule {
            let before = moves.as_ref().map(|_| record::moves::snapshot(t, ix));
            // SAFETY: `g` is live; `ix` was taken from `g` by the rebuild above.
            unsafe { inplace::colocate(caps, t, g, true, &mut reuse) };
            if let (Some(m), Some(b)) = (moves.as_mut(), before) {
                m.note(&b, t, ix, 1);
            }
        }
        self.reuse_memory = reuse.recycle();
        // 5: splits at backend changes, with a copy of each source a split cannot use.
        let (first, splits) = (self.first_split_backend, &mut self.splits);
        // SAFETY: `g` is live; `ix` was taken from `g` by the rebuild; pass 4 placed every node or stopped the process.
        unsafe { split::split_graph(&mut sc, t, g, ix, first, splits, &mut self.spare_splits) };
        // The debug dump shows the splits just made (before pass 6, as stock prints it).
        if self.debug > 0 {
            // SAFETY: `g` is live and was just split into `self.splits`.
            unsafe { dump::print_assignments(caps, t, &self.splits, self.debug, g) };
        }
        // 6: with pipeline copies, one tensor per copy for every graph input.
        // SAFETY: `g` is live; pass 1 placed every input leaf (CPU or its storage's backend).
        self.graph_inputs = unsafe { split::graph_inputs(&mut sc, t, g) };
        if let (Some(moves), Some(dir)) = (moves, dump_dir) {
            let inp = record::build::Input {
                caps,
                table: t,
                graph: g,
                splits: &self.splits,
                graph_inputs: &self.graph_inputs,
                moves: &moves,
                settings: record::Settings {
                    inplace_rule: rule,
                    n_copies: self.n_copies,
                    cur_copy: self.cur_copy,
                    op_offload: self.op_offload,
                },
            };
            // SAFETY: `g` is live and was just split into `self.splits`; the split inputs,
            // their copies and the graph inputs are live tensors of this split.
            unsafe { record::write(dir, &inp) };
        }

        self.first_split_backend = self.splits[0].backend;
        self.graph_ids = ids;
    }
}
