//! Replaying unchanged work as CUDA graphs: which launch lists to capture and which captured
//! graph a job may replay. Host logic only (the CUDA calls are in `gpu.rs`), so that the
//! policy is unit-tested without a GPU.
//!
//! A decode step issues the same few hundred small kernels for every token, with the same
//! arguments (llama.cpp reuses its graph, and the inputs change through the bytes of input
//! tensors, not through pointers). Issued one by one, each costs the host a launch call and
//! the device a gap between kernels; captured once into a CUDA graph, the whole list goes in
//! one `cuGraphLaunch` and runs back to back.
//!
//! Replay is exact: a job replays a graph only when its launch list equals, launch for
//! launch (kernel, grid, block, shared memory, every argument byte: device pointers, shapes,
//! strides, scalars), the list the graph was captured from. Replaying is then the same as
//! issuing that list, whatever memory was freed or reallocated in between. A list is
//! captured on its second sighting, so work seen once (a graph that changes every call,
//! `test-backend-ops`' cases) costs no capture.

use super::dispatch::Launch;

/// Launch lists remembered at most (a token's splits and a few shapes of each); the least
/// recently used goes first.
pub(crate) const ENTRIES: usize = 8;

/// Sightings of a launch list at which it is captured.
pub(crate) const CAPTURE_AT: u32 = 2;

/// What to do with a job's launch list.
#[derive(Debug, PartialEq)]
pub(crate) enum Plan<E> {
    /// Issue the launches one by one.
    Issue,
    /// Issue them under stream capture, then report the graph with [`GraphCache::captured`]
    /// (entry index given).
    Capture(usize),
    /// Launch this captured graph instead.
    Replay(E),
}

struct Entry<E> {
    launches: Vec<Launch>,
    seen: u32,
    /// The captured graph; `None` before capture, or after a capture failed (`failed`).
    exec: Option<E>,
    failed: bool,
    last_use: u64,
}

/// The remembered launch lists and their graphs. `E` is the executable graph handle
/// (`CUgraphExec` on a GPU); the cache never calls CUDA itself: handles it drops are
/// returned to the caller, which destroys them.
pub(crate) struct GraphCache<E> {
    entries: Vec<Entry<E>>,
    clock: u64,
}

impl<E: Copy> Default for GraphCache<E> {
    fn default() -> Self {
        GraphCache {
            entries: Vec::new(),
            clock: 0,
        }
    }
}

impl<E: Copy> GraphCache<E> {
    /// The plan for `launches`; graphs evicted to make room are pushed to `evicted`.
    pub fn plan(&mut self, launches: &[Launch], evicted: &mut Vec<E>) -> Plan<E> {
        self.clock += 1;
        let found = self
            .entries
            .iter()
            .position(|e| e.launches.len() == launches.len() && e.launches == launches);
        let Some(i) = found else {
            if self.entries.len() == ENTRIES {
                let lru = (0..self.entries.len())
                    .min_by_key(|&i| self.entries[i].last_use)
                    .expect("entries is full");
                evicted.extend(self.entries.swap_remove(lru).exec);
            }
            self.entries.push(Entry {
                launches: launches.to_vec(),
                seen: 1,
                exec: None,
                failed: false,
                last_use: self.clock,
            });
            return if CAPTURE_AT <= 1 {
                Plan::Capture(self.entries.len() - 1)
            } else {
                Plan::Issue
            };
        };
        let e = &mut self.entries[i];
        e.last_use = self.clock;
        e.seen = e.seen.saturating_add(1);
        match e.exec {
            Some(x) => Plan::Replay(x),
            None if e.failed || e.seen < CAPTURE_AT => Plan::Issue,
            None => Plan::Capture(i),
        }
    }

    /// Records the outcome of [`Plan::Capture`] for entry `i`: the graph, or `None` when the
    /// capture failed (the list is then always issued, never captured again).
    pub fn captured(&mut self, i: usize, exec: Option<E>) {
        if let Some(e) = self.entries.get_mut(i) {
            e.failed = exec.is_none();
            e.exec = exec;
        }
    }

    /// Forgets every list; returns the graphs to destroy.
    pub fn clear(&mut self) -> Vec<E> {
        self.entries.drain(..).filter_map(|e| e.exec).collect()
    }

    /// Captured graphs held now.
    pub fn graphs(&self) -> usize {
        self.entries.iter().filter(|e| e.exec.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::super::dispatch::Arg;
    use super::*;

    fn list(ptr: u64, n: usize) -> Vec<Launch> {
        (0..n)
            .map(|i| Launch {
                kernel: if i % 2 == 0 { "hrx_binary" } else { "hrx_norm" },
                grid: [8, 1, 1],
                block: [256, 1, 1],
                shared: 0,
                args: vec![Arg::Ptr(ptr + i as u64 * 256), Arg::I64(i as i64)],
            })
            .collect()
    }

    #[test]
    fn a_list_is_issued_captured_on_its_second_sighting_then_replayed() {
        let mut c: GraphCache<u32> = GraphCache::default();
        let mut ev = Vec::new();
        let a = list(0x1000, 300);
        assert_eq!(c.plan(&a, &mut ev), Plan::Issue);
        assert_eq!(c.plan(&a, &mut ev), Plan::Capture(0));
        c.captured(0, Some(7));
        assert_eq!(c.plan(&a, &mut ev), Plan::Replay(7));
        assert_eq!(c.plan(&a, &mut ev), Plan::Replay(7));
        assert_eq!(c.graphs(), 1);
        assert!(ev.is_empty());
    }

    #[test]
    fn any_difference_in_any_launch_is_a_different_list() {
        let mut c: GraphCache<u32> = GraphCache::default();
        let mut ev = Vec::new();
        let a = list(0x1000, 50);
        c.plan(&a, &mut ev);
        c.plan(&a, &mut ev);
        c.captured(0, Some(1));
        // one scalar argument of one launch
        let mut b = a.clone();
        b[37].args[1] = Arg::I64(1000);
        assert_eq!(c.plan(&b, &mut ev), Plan::Issue);
        // a pointer
        let mut b = a.clone();
        b[3].args[0] = Arg::Ptr(0x9000);
        assert_eq!(c.plan(&b, &mut ev), Plan::Issue);
        // the grid, the shared memory, the kernel, one launch fewer
        let mut b = a.clone();
        b[0].grid[0] = 9;
        assert_eq!(c.plan(&b, &mut ev), Plan::Issue);
        let mut b = a.clone();
        b[49].shared = 4;
        assert_eq!(c.plan(&b, &mut ev), Plan::Issue);
        let mut b = a.clone();
        b[10].kernel = "hrx_rope";
        assert_eq!(c.plan(&b, &mut ev), Plan::Issue);
        assert_eq!(c.plan(&a[..49], &mut ev), Plan::Issue);
        // floats compare bit for bit: -0.0 is not 0.0, and a NaN is itself
        let mut z = a.clone();
        z[5].args[1] = Arg::F32(0.0);
        let mut nz = a.clone();
        nz[5].args[1] = Arg::F32(-0.0);
        assert_ne!(z, nz);
        let mut nan = a.clone();
        nan[5].args[1] = Arg::F32(f32::NAN);
        assert_eq!(nan, nan.clone());
        // and the original still replays
        assert_eq!(c.plan(&a, &mut ev), Plan::Replay(1));
    }

    #[test]
    fn a_failed_capture_is_not_retried() {
        let mut c: GraphCache<u32> = GraphCache::default();
        let mut ev = Vec::new();
        let a = list(0x1000, 4);
        c.plan(&a, &mut ev);
        assert_eq!(c.plan(&a, &mut ev), Plan::Capture(0));
        c.captured(0, None);
        for _ in 0..5 {
            assert_eq!(c.plan(&a, &mut ev), Plan::Issue);
        }
        assert_eq!(c.graphs(), 0);
    }

    #[test]
    fn the_least_recently_used_graph_is_evicted_and_handed_back() {
        let mut c: GraphCache<u32> = GraphCache::default();
        let mut ev = Vec::new();
        let lists: Vec<Vec<Launch>> = (0..=ENTRIES as u64)
            .map(|i| list(0x1000 * (i + 1), 3))
            .collect();
        for (i, l) in lists[..ENTRIES].iter().enumerate() {
            c.plan(l, &mut ev);
            if let Plan::Capture(k) = c.plan(l, &mut ev) {
                c.captured(k, Some(i as u32));
            } else {
                panic!("list {i} not captured");
            }
        }
        // list 0 used again: list 1 is now the least recently used
        assert_eq!(c.plan(&lists[0], &mut ev), Plan::Replay(0));
        assert_eq!(c.plan(&lists[ENTRIES], &mut ev), Plan::Issue);
        assert_eq!(ev, vec![1]);
        assert_eq!(c.plan(&lists[0], &mut ev), Plan::Replay(0));
        assert_eq!(c.plan(&lists[1], &mut ev), Plan::Issue);
        let mut rest = c.clear();
        rest.sort();
        assert_eq!(rest.len(), ENTRIES - 2);
        assert_eq!(c.graphs(), 0);
    }
}
