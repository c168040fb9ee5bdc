//! Which backends can use which compute buffer types, as the graph allocator's access masks:
//! the input of the in-place rule's allocator guard
//! ([`crate::alloc::walk::Planner::set_access`]). Stock has no counterpart: its allocator
//! lets a node take over any parent's memory, wherever the readers of that memory run.

use ggml_sys::{ggml_backend_buffer_type_t, ggml_backend_t};

/// The most backends the masks describe: one bit each in a `u64`. A scheduler with more runs
/// without the guard, reusing memory as stock does.
pub const MAX_GUARDED_BACKENDS: usize = 64;

/// Which buffer types each backend can use, as the graph allocator's access masks (bit `x`
/// of entry `b`: backend `b` can use backend `x`'s buffer type), when in-place reuse could
/// move memory to where some backend that uses it cannot reach it: a backend `x` that can
/// use another backend `y`'s buffer type (so a node on `x` reads `y`'s tensors directly and
/// may take over their memory), and a third that cannot use `y`'s. `None` where no such
/// three exist (ggml-cuda's devices and the CPU, HRX0 beside the CPU, RPC0 beside CUDA0):
/// the allocator then reuses as stock does, at no cost. Asks each backend's device
/// (`ggml_backend_supports_buft`) about each scheduler buffer type; the decision is
/// [`access_masks`].
///
/// # Safety
/// `backends` must hold live backends and `bufts` their buffer types, one each.
pub unsafe fn reuse_access(
    backends: &[ggml_backend_t],
    bufts: &[ggml_backend_buffer_type_t],
) -> Option<Vec<u64>> {
    access_masks(bufts, |b, buft| {
        // SAFETY: a live backend and a live buffer type (this function's contract).
        unsafe { crate::backend::supports_buft(&*backends[b], buft) }
    })
}

/// The decision of [`reuse_access`] over plain values: `bufts[b]` is backend `b`'s compute
/// buffer type (compared by equality only), `supports(b, buft)` whether backend `b` can use
/// `buft` (asked only where `buft` is not `b`'s own). `None` past [`MAX_GUARDED_BACKENDS`]
/// backends, or where no backend can use the memory of another whose memory some third one
/// cannot use.
pub fn access_masks<T: PartialEq + Copy>(
    bufts: &[T],
    supports: impl Fn(usize, T) -> bool,
) -> Option<Vec<u64>> {
    let n = bufts.len();
    if n > MAX_GUARDED_BACKENDS {
        return None;
    }
    let mut access = vec![0u64; n];
    for (b, row) in access.iter_mut().enumerate() {
        for x in 0..n {
            if bufts[x] == bufts[b] || supports(b, bufts[x]) {
                *row |= 1 << x;
            }
        }
    }
    let uses = |b: usize, x: usize| access[b] & (1 << x) != 0;
    // Memory of backend y is at risk when some backend x with other memory reads it directly
    // (and so may take it over for a node of its own) while some backend cannot use it.
    let harm = (0..n)
        .any(|y| (0..n).any(|x| bufts[x] != bufts[y] && uses(x, y)) && (0..n).any(|b| !uses(b, y)));
    harm.then_some(access)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The masks for backends named by their buffer types, each able to use its own and the
    /// ones listed for it (as the devices answer: ggml-cuda and ggml-rpc only their own,
    /// HRX0 its own and any host buffer type, the CPU host ones).
    fn masks(bufts: &[&'static str], extra: &[(&str, &[&str])]) -> Option<Vec<u64>> {
        access_masks(bufts, |b, buft| {
            extra
                .iter()
                .any(|(who, can)| *who == bufts[b] && can.contains(&buft))
        })
    }

    #[test]
    fn the_guard_is_on_only_where_one_backend_reads_memory_another_cannot_use() {
        let hrx_reads_host: (&str, &[&str]) = ("HRX0", &["CPU"]);
        // ggml-cuda's devices and the CPU: each uses only its own memory.
        assert_eq!(masks(&["CUDA0", "CPU"], &[]), None);
        assert_eq!(masks(&["CUDA0", "CUDA1", "CPU"], &[]), None);
        // RPC0 beside CUDA0: the same.
        assert_eq!(masks(&["RPC0", "CUDA0", "CPU"], &[]), None);
        // HRX0 reads the CPU's memory, and every backend can use the CPU's: nothing at risk.
        assert_eq!(masks(&["HRX0", "CPU"], &[hrx_reads_host]), None);
        // RPC0 cannot use the CPU's memory that HRX0 reads and may take over: on, with
        // each backend's row (bit x: can use backend x's buffer type).
        assert_eq!(
            masks(&["RPC0", "HRX0", "CPU"], &[hrx_reads_host]),
            Some(vec![0b001, 0b110, 0b100])
        );
        // The order of the backends moves the bits, not the decision.
        assert_eq!(
            masks(&["HRX0", "RPC0", "CPU"], &[hrx_reads_host]),
            Some(vec![0b101, 0b010, 0b100])
        );
    }

    #[test]
    fn backends_sharing_a_buffer_type_use_each_others_memory_without_being_asked() {
        // Two backends on one buffer type (a scheduler given the same buft twice): each uses
        // the other's without a question, so neither is a reader of foreign memory.
        let asked = std::cell::Cell::new(0);
        let m = access_masks(&["A", "A", "CPU"], |_, _| {
            asked.set(asked.get() + 1);
            false
        });
        assert_eq!(m, None);
        // Only about other buffer types: each A row about the CPU's, the CPU's row about
        // each A's.
        assert_eq!(asked.get(), 4);
    }

    #[test]
    fn past_the_mask_width_the_guard_is_off() {
        // 64 backends, the first of which reads the last one's memory that the second
        // cannot use: guarded. 65: off, as documented (reuse as stock's).
        let supports = |b: usize, buft: usize| b == 0 && buft == 1000;
        let bufts64: Vec<usize> = (0..63).chain([1000]).collect();
        let m = access_masks(&bufts64, supports).expect("64 backends are guarded");
        assert_eq!(m[0], 1 | 1 << 63);
        assert_eq!(m[1], 1 << 1);
        let bufts65: Vec<usize> = (0..64).chain([1000]).collect();
        assert_eq!(access_masks(&bufts65, supports), None);
    }
}
