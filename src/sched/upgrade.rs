//! Pass 3, in node order: a placed node moves to a higher-priority backend that has the same
//! buffer type, supports the op and can use every source's storage ([`Cause::Upgrade`]); an
//! unplaced node goes to the supporting backend that can use the most placed sources, the
//! highest priority on a tie ([`Cause::BestInputs`]). Matches the third pass of stock's
//! `ggml_backend_sched_split_graph` and its helper `ggml_backend_sched_buffer_supported`.

use ggml_sys::{ggml_cgraph, ggml_tensor};

use super::caps::{self, Caps};
use super::table::{Cause, GraphIds, Table};
use crate::tensor::meta;

/// Whether backend `b` can use the storage of `t`: the buffer type of its allocated storage,
/// or else the buffer type of the backend it (or its view source) is placed on. False when
/// neither is known.
///
/// # Safety
/// `t` and its view source must be live tensors.
pub unsafe fn buffer_supported(
    caps: &dyn Caps,
    table: &Table,
    t: *const ggml_tensor,
    b: usize,
) -> bool {
    supported_given(caps, table, &*t, || table.backend(t), b)
}

/// [`buffer_supported`] for a source whose id is known (skips the pointer lookup: this runs
/// per source per backend in the upgrade pass).
///
/// # Safety
/// As [`buffer_supported`].
#[inline]
pub unsafe fn buffer_supported_at(
    caps: &dyn Caps,
    table: &Table,
    t: *const ggml_tensor,
    id: usize,
    b: usize,
) -> bool {
    supported_given(caps, table, &*t, || table.backend_at(id), b)
}

/// The shared rule: the buffer type of `t`'s storage when it is allocated, else that of the
/// backend `t` (or, unplaced, its view source) is placed on, must be usable by backend `b`.
/// `own` looks up `t`'s own placement; it runs only when the storage is not allocated.
///
/// # Safety
/// `t`'s view source, when set, must be a live tensor.
#[inline]
unsafe fn supported_given(
    caps: &dyn Caps,
    table: &Table,
    tr: &ggml_tensor,
    own: impl FnOnce() -> Option<usize>,
    b: usize,
) -> bool {
    let buf = meta::storage_buffer(tr);
    let buft = if !buf.is_null() {
        (*buf).buft
    } else {
        let placed = own().or_else(|| {
            if tr.view_src.is_null() {
                None
            } else {
                table.backend(tr.view_src)
            }
        });
        match placed {
            Some(p) => caps.buft(p),
            None => return false,
        }
    };
    !buft.is_null() && caps.supports_buft(b, buft)
}

/// The non-NULL sources of node `i` with their ids.
pub fn sources_at<'a>(
    node: &'a ggml_tensor,
    ix: &'a GraphIds,
    i: usize,
) -> impl Iterator<Item = (*mut ggml_tensor, usize)> + 'a {
    let n = ix.n_srcs[i] as usize;
    node.src[..n]
        .iter()
        .zip(ix.srcs[i][..n].iter())
        .filter(|(s, _)| !s.is_null())
        .map(|(&s, &id)| (s, id as usize))
}

/// Runs pass 3 over `graph`'s nodes (view ops skipped; `ix`: the graph's ids).
///
/// # Safety
/// `graph` must be a live graph of live tensors.
pub unsafe fn upgrade(caps: &dyn Caps, table: &mut Table, graph: &ggml_cgraph, ix: &GraphIds) {
    let nodes = caps::nodes(graph);
    for &i in &ix.compute {
        let i = i as usize;
        let n = nodes[i];
        let node = &*n;
        let nid = ix.nodes[i];
        match table.backend_at(nid) {
            None => {
                let mut best: Option<(usize, usize)> = None; // (count, backend)
                for b in 0..caps.n_backends() {
                    if !caps.supports_op(b, n) {
                        continue;
                    }
                    let count = sources_at(node, ix, i)
                        .filter(|&(s, sid)| {
                            (table.backend_at(sid).is_some()
                                || table.backend((*s).view_src).is_some())
                                && buffer_supported_at(caps, table, s, sid, b)
                        })
                        .count();
                    if best.is_none_or(|(c, _)| count > c) {
                        best = Some((count, b));
                    }
                }
                if let Some((_, b)) = best {
                    table.set_at(nid, b, Cause::BestInputs);
                }
            }
            Some(cur) => {
                let target = (0..cur).find(|&b| {
                    caps.buft(b) == caps.buft(cur)
                        && caps.supports_op(b, n)
                        && sources_at(node, ix, i)
                            .all(|(s, sid)| buffer_supported_at(caps, table, s, sid, b))
                });
                if let Some(b) = target {
                    table.set_at(nid, b, Cause::Upgrade);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::caps::mock::{graph, Arena, Mock};
    use ggml_sys::*;

    #[test]
    fn upgrade_and_best_inputs() {
        // 0: a device; 1: a host accelerator sharing the CPU's buffer type; 2: the CPU.
        let mut caps = Mock::new(&[
            &[GGML_OP_ADD],
            &[GGML_OP_MUL],
            &[GGML_OP_ADD, GGML_OP_MUL, GGML_OP_SCALE],
        ]);
        caps.own_buft[1] = caps.own_buft[2];
        caps.backends[1].bufts.insert(0x300);
        let mut a = Arena::default();
        let x = a.input("x");
        let m = a.tensor("m", GGML_OP_MUL, &[x, x]);
        let s = a.tensor("s", GGML_OP_SCALE, &[m]);
        let d = a.tensor("d", GGML_OP_ADD, &[m, m]);
        let u = a.tensor("u", GGML_OP_ADD, &[d, s]);
        let mut nodes = vec![m, s, d, u];
        let mut leafs = vec![x];
        let g = graph(&mut nodes, &mut leafs);
        let mut t = Table::default();
        t.set(x, 2, Cause::Input);
        t.set(m, 2, Cause::UserAssigned);
        t.set(d, 0, Cause::UserAssigned);
        // SAFETY: tensors live in the arena.
        unsafe {
            let ix = GraphIds::new(&mut t, &g);
            upgrade(&caps, &mut t, &g, &ix)
        };
        let got = |n| t.get(n).map(|p| (p.backend, p.cause));
        // m: same buffer type as backend 1, which runs MUL and can read the CPU input.
        assert_eq!(got(m), Some((1, Cause::Upgrade)));
        // s: only the CPU runs SCALE.
        assert_eq!(got(s), Some((2, Cause::BestInputs)));
        // u: device 0 can use d (its own buffer) and s (host): 2 inputs; CPU only s: 1.
        assert_eq!(got(u), Some((0, Cause::BestInputs)));
        // buffer_supported: unknown placement and no storage -> false.
        let lone = a.tensor("lone", GGML_OP_ADD, &[]);
        // SAFETY: as above.
        assert!(!unsafe { buffer_supported(&caps, &t, lone, 0) });
    }
}
