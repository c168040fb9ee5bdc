//! The schedule dump (`GGML_SCHED_DEBUG`): at 1, each split with its backend and inputs, in
//! stock's format; at 2, also every non-view node with its backend and the cause of its
//! placement, and each source likewise. Through ggml's logger at debug level, one call per
//! line. Matches stock's `ggml_backend_sched_print_assignments`, with causes filled in.

use ggml_sys::{ggml_cgraph, ggml_tensor};

use super::caps::Caps;
use super::inspect::{self, cstr};
use super::split::Split;
use super::table::Table;
use crate::tensor::meta;

/// Stock's compact size: whole MiB as "NM" from 1 MiB up, else whole KiB as "NK".
pub fn fmt_size(bytes: usize) -> String {
    if bytes >= 1024 * 1024 {
        format!("{}M", bytes / 1024 / 1024)
    } else {
        format!("{}K", bytes / 1024)
    }
}

/// The use count the graph recorded for `t` (0 when the graph keeps none), found the way
/// ggml's visited hash set places keys: `(address >> 4) % size`, then linear probing.
///
/// # Safety
/// `g` must be a live graph.
unsafe fn use_count(g: &ggml_cgraph, t: *const ggml_tensor) -> i32 {
    let hs = &g.visited_hash_set;
    if g.use_counts.is_null() || hs.size == 0 || hs.keys.is_null() || hs.used.is_null() {
        return 0;
    }
    // SAFETY: ggml allocates a graph's hash set as `size` keys, a bitset of one bit per
    // key in 32-bit words, and (for graphs that keep use counts) `size` use counts, all
    // live as long as the graph; the pointers are non-NULL (checked above), and the graph
    // is live by this function's contract. Nothing writes them during the dump.
    let (keys, used, counts) = unsafe {
        (
            std::slice::from_raw_parts(hs.keys, hs.size),
            std::slice::from_raw_parts(hs.used, hs.size.div_ceil(32)),
            std::slice::from_raw_parts(g.use_counts, hs.size),
        )
    };
    let used = |i: usize| (used[i >> 5] >> (i & 31)) & 1 == 1;
    let h = (t as usize >> 4) % hs.size;
    let mut i = h;
    while used(i) && !std::ptr::eq(keys[i], t) {
        i = (i + 1) % hs.size;
        if i == h {
            return 0;
        }
    }
    counts[i]
}

/// The backend name and cause label of `t`'s placement ("NULL" and "" when unplaced).
fn backend_label(caps: &dyn Caps, table: &Table, t: *const ggml_tensor) -> (String, &'static str) {
    match table.get(t) {
        Some(p) => (caps.backend_name(p.backend), p.cause.label()),
        None => ("NULL".to_string(), ""),
    }
}

/// Logs the splits of `graph` (and at debug level 2 its nodes) as placed in `table`.
///
/// # Safety
/// `graph` must be the live graph just split into `splits`.
pub(crate) unsafe fn print_assignments(
    caps: &dyn Caps,
    table: &Table,
    splits: &[Split],
    debug: i32,
    graph: &ggml_cgraph,
) {
    let mut cur = 0usize;
    // SAFETY: `graph` is live and not resized during the dump (this function's caller
    // guarantees it).
    let nodes = unsafe { inspect::nodes(graph) };
    for (i, &n) in nodes.iter().enumerate() {
        if let Some(s) = splits.get(cur).filter(|s| s.i_start == i) {
            let mut line = format!(
                "\n## SPLIT #{}: {} # {} inputs",
                cur,
                caps.backend_name(s.backend),
                s.inputs.len()
            );
            for (j, &inp) in s.inputs.iter().enumerate() {
                if j == 0 {
                    line.push_str(": ");
                }
                // SAFETY: a split input is a non-NULL source of a node of `graph`, which the
                // split pass just recorded, so a live tensor (this function's contract: the
                // splits are those of the live graph).
                let inp = unsafe { &*inp };
                line.push_str(&format!(
                    "[{} ({:>5.5})] ",
                    inspect::name(inp),
                    fmt_size(meta::nbytes(inp))
                ));
            }
            line.push('\n');
            crate::ffi::log::debug(&line);
            cur += 1;
        }
        // SAFETY: a node of the live graph, non-NULL (`GraphIds::rebuild` stopped on NULL
        // nodes before the passes ran), so a live tensor.
        let node = unsafe { &*n };
        if meta::is_view_op(node.op) || debug < 2 {
            continue;
        }
        let (bname, cause) = backend_label(caps, table, n);
        // SAFETY: `n` is a live tensor (above); `ggml_op_desc` returns a static
        // NUL-terminated name.
        let op = unsafe { cstr(ggml_sys::ggml_op_desc(n)) };
        // SAFETY: `graph` is live (this function's contract).
        let uses = unsafe { use_count(graph, n) };
        let mut line = format!(
            "node #{:>3} ({:>10.10}): {:>20.20} ({:>5.5}) [{:>5.5} {:>8.8}] use={},c={}:",
            i,
            op,
            inspect::name(node),
            fmt_size(meta::nbytes(node)),
            bname,
            cause,
            uses,
            (node.flags & ggml_sys::GGML_TENSOR_FLAG_COMPUTE as i32 != 0) as i32
        );
        for (_, s) in inspect::sources(node) {
            let (sname, scause) = backend_label(caps, table, s);
            // SAFETY: `inspect::sources` yields only non-NULL sources, and a source of a live
            // node is a live tensor.
            let src = unsafe { &*s };
            line.push_str(&format!(
                " {:>20.20} ({:>5.5}) [{:>5.5} {:>8.8}]",
                inspect::name(src),
                fmt_size(meta::nbytes(src)),
                sname,
                scause
            ));
        }
        line.push('\n');
        crate::ffi::log::debug(&line);
    }
}

#[cfg(test)]
mod tests {
    use super::fmt_size;

    #[test]
    fn sizes_like_stock() {
        assert_eq!(fmt_size(0), "0K");
        assert_eq!(fmt_size(1023), "0K");
        assert_eq!(fmt_size(4096), "4K");
        assert_eq!(fmt_size(1024 * 1024 - 1), "1023K");
        assert_eq!(fmt_size(3 * 1024 * 1024 + 5), "3M");
    }
}
