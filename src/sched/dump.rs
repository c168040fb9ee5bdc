//! The schedule dump (`GGML_SCHED_DEBUG`): at 1, each split with its backend and inputs, in
//! stock's format; at 2, also every non-view node with its backend and the cause of its
//! placement, and each source likewise. Through ggml's logger at debug level, one call per
//! line. Matches stock's `ggml_backend_sched_print_assignments`, with causes filled in.

use ggml_sys::{ggml_cgraph, ggml_tensor};

use super::caps::{self, cstr};
use super::Sched;
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
    let used = |i: usize| (*hs.used.add(i >> 5) >> (i & 31)) & 1 == 1;
    let h = (t as usize >> 4) % hs.size;
    let mut i = h;
    while used(i) && !std::ptr::eq(*hs.keys.add(i), t) {
        i = (i + 1) % hs.size;
        if i == h {
            return 0;
        }
    }
    *g.use_counts.add(i)
}

impl Sched {
    fn backend_label(&self, t: *const ggml_tensor) -> (String, &'static str) {
        match self.table.get(t) {
            // SAFETY: our backends are live.
            Some(p) => (
                unsafe { cstr(crate::backend::name(self.backend(p.backend))) },
                p.cause.label(),
            ),
            None => ("NULL".to_string(), ""),
        }
    }

    /// Logs the splits (and at debug level 2 the nodes) of `graph`.
    ///
    /// # Safety
    /// `graph` must be the live graph just split.
    pub(crate) unsafe fn print_assignments(&self, graph: &ggml_cgraph) {
        let mut cur = 0usize;
        for (i, &n) in caps::nodes(graph).iter().enumerate() {
            if let Some(s) = self.splits.get(cur).filter(|s| s.i_start == i) {
                let mut line = format!(
                    "\n## SPLIT #{}: {} # {} inputs",
                    cur,
                    cstr(crate::backend::name(self.backend(s.backend))),
                    s.inputs.len()
                );
                for (j, &inp) in s.inputs.iter().enumerate() {
                    if j == 0 {
                        line.push_str(": ");
                    }
                    line.push_str(&format!(
                        "[{} ({:>5.5})] ",
                        caps::name(&*inp),
                        fmt_size(meta::nbytes(&*inp))
                    ));
                }
                line.push('\n');
                crate::ffi::log::debug(&line);
                cur += 1;
            }
            let node = &*n;
            if meta::is_view_op(node.op) || self.debug < 2 {
                continue;
            }
            let (bname, cause) = self.backend_label(n);
            let mut line = format!(
                "node #{:>3} ({:>10.10}): {:>20.20} ({:>5.5}) [{:>5.5} {:>8.8}] use={},c={}:",
                i,
                cstr(ggml_sys::ggml_op_desc(n)),
                caps::name(node),
                fmt_size(meta::nbytes(&*n)),
                bname,
                cause,
                use_count(graph, n),
                (node.flags & ggml_sys::GGML_TENSOR_FLAG_COMPUTE as i32 != 0) as i32
            );
            for (_, s) in caps::sources(node) {
                let (sname, scause) = self.backend_label(s);
                line.push_str(&format!(
                    " {:>20.20} ({:>5.5}) [{:>5.5} {:>8.8}]",
                    caps::name(&*s),
                    fmt_size(meta::nbytes(&*s)),
                    sname,
                    scause
                ));
            }
            line.push('\n');
            crate::ffi::log::debug(&line);
        }
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
