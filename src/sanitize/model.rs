//! The happens-before model of the sanitizer, free of ggml: actors with vector clocks, events
//! as clock snapshots, and per-buffer shadow memory as byte intervals that remember their last
//! writer and the readers since. [`Model::access`] checks one access against the shadow and
//! returns the conflicts (each earlier access the current one is not ordered after); the
//! caller (`hooks`) turns them into reports.
//!
//! Clock rules (FastTrack's epochs, with the host as a queue's only submitter):
//! - an actor's accesses carry its own clock component ("epoch") at the time of the access;
//! - queueing anything on backend `b` (compute, copy, async data, event record/wait) is a
//!   release by the host: `b` joins the host's clock, and the host's epoch advances;
//! - `synchronize(b)` joins `b`'s clock into the host's, and `b`'s epoch advances;
//! - `event_record(e, b)` snapshots `b`'s clock, and `b`'s epoch advances; `event_wait(b, e)`
//!   joins the snapshot into `b`; `event_synchronize(e)` joins it into the host;
//! - an access A by actor `p` at epoch `t` happens before the actor `a` now iff `p == a` or
//!   `clock[a][p] >= t`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// An actor: 0 is the host, every backend another.
pub type Actor = usize;

/// The host's actor.
pub const HOST: Actor = 0;

/// A vector clock: one counter per actor (missing entries are 0).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Clock(Vec<u32>);

impl Clock {
    /// The component of actor `a`.
    pub fn get(&self, a: Actor) -> u32 {
        self.0.get(a).copied().unwrap_or(0)
    }

    fn set(&mut self, a: Actor, v: u32) {
        if self.0.len() <= a {
            self.0.resize(a + 1, 0);
        }
        self.0[a] = v;
    }

    fn tick(&mut self, a: Actor) {
        let v = self.get(a) + 1;
        self.set(a, v);
    }

    fn join(&mut self, other: &Clock) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (x, &y) in self.0.iter_mut().zip(&other.0) {
            *x = (*x).max(y);
        }
    }
}

/// Read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
}

/// One recorded access: who, when, which bytes of its buffer, what it was (a sentence for the
/// report), and the storage root of the tensor it went through (for the stale-copy check).
#[derive(Clone, Debug)]
pub struct Acc {
    pub actor: Actor,
    pub epoch: u32,
    /// Global order of accesses (1, 2, ...), for "written since" questions.
    pub seq: u64,
    pub lo: usize,
    pub hi: usize,
    pub what: Arc<str>,
    pub root: usize,
}

/// Which pair of accesses conflicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hazard {
    /// A read of bytes whose last write is not ordered before it.
    ReadAfterWrite,
    /// A write to bytes read since their last write by an access not ordered before it.
    WriteAfterRead,
    /// A write to bytes whose last write is not ordered before it.
    WriteAfterWrite,
}

impl Hazard {
    /// The words of the report.
    pub fn words(self) -> &'static str {
        match self {
            Hazard::ReadAfterWrite => "read after unordered write",
            Hazard::WriteAfterRead => "write after unordered read",
            Hazard::WriteAfterWrite => "write after unordered write",
        }
    }
}

/// An access the current one is not ordered after, and the bytes both touch.
#[derive(Clone, Debug)]
pub struct Conflict {
    pub hazard: Hazard,
    pub earlier: Acc,
    pub lo: usize,
    pub hi: usize,
}

/// One interval of a buffer's shadow: `[start, end)` (start is the map key).
#[derive(Clone, Debug, Default)]
struct Seg {
    end: usize,
    writer: Option<Acc>,
    /// At most one per actor: its latest read since the last write.
    readers: Vec<Acc>,
}

/// The shadow of one buffer: disjoint intervals keyed by their first byte.
#[derive(Default, Debug)]
pub struct Shadow {
    segs: BTreeMap<usize, Seg>,
}

impl Shadow {
    /// Cuts the interval that contains `at` (if any starts before it) in two at `at`.
    fn cut(&mut self, at: usize) {
        let Some((&start, seg)) = self.segs.range(..at).next_back() else {
            return;
        };
        if seg.end <= at {
            return;
        }
        let mut right = seg.clone();
        let end = seg.end;
        self.segs.get_mut(&start).expect("just found").end = at;
        right.end = end;
        self.segs.insert(at, right);
    }

    /// Makes `[lo, hi)` a run of whole intervals (empty ones fill the gaps) and returns their
    /// starts in order.
    fn cover(&mut self, lo: usize, hi: usize) -> Vec<usize> {
        self.cut(lo);
        self.cut(hi);
        let mut starts = Vec::new();
        let mut at = lo;
        let existing: Vec<(usize, usize)> =
            self.segs.range(lo..hi).map(|(&s, g)| (s, g.end)).collect();
        for (s, e) in existing {
            if s > at {
                self.segs.insert(
                    at,
                    Seg {
                        end: s,
                        ..Seg::default()
                    },
                );
                starts.push(at);
            }
            starts.push(s);
            at = e;
        }
        if at < hi {
            self.segs.insert(
                at,
                Seg {
                    end: hi,
                    ..Seg::default()
                },
            );
            starts.push(at);
        }
        starts
    }

    /// The latest write in `[lo, hi)` through a tensor of storage root `root`, if any.
    pub fn last_write_of_root(&self, lo: usize, hi: usize, root: usize) -> Option<&Acc> {
        let first = self
            .segs
            .range(..=lo)
            .next_back()
            .filter(|(_, g)| g.end > lo)
            .map_or(lo, |(&s, _)| s);
        self.segs
            .range(first..hi)
            .filter_map(|(_, g)| g.writer.as_ref())
            .filter(|w| w.root == root)
            .max_by_key(|w| w.seq)
    }

    /// Number of intervals (for tests).
    pub fn len(&self) -> usize {
        self.segs.len()
    }

    /// Whether the shadow holds no interval.
    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }
}

/// The whole model: clocks per actor, event snapshots, shadows per buffer.
#[derive(Default)]
pub struct Model {
    clocks: Vec<Clock>,
    events: HashMap<usize, Clock>,
    buffers: HashMap<usize, Shadow>,
    seq: u64,
    /// Accesses checked so far.
    pub checked: u64,
}

impl Model {
    /// Makes sure actor `a` has a clock (its own component starts at 1, so that nothing is
    /// ordered before its first access by a clock of zeros).
    fn ensure(&mut self, a: Actor) {
        while self.clocks.len() <= a {
            let n = self.clocks.len();
            let mut c = Clock::default();
            c.set(n, 1);
            self.clocks.push(c);
        }
    }

    /// The clock of actor `a`.
    pub fn clock(&mut self, a: Actor) -> &Clock {
        self.ensure(a);
        &self.clocks[a]
    }

    /// The host queues work on backend `b`: everything the host did so far happens before it.
    pub fn submit(&mut self, b: Actor) {
        if b == HOST {
            return;
        }
        self.ensure(b);
        let host = self.clocks[HOST].clone();
        self.clocks[b].join(&host);
        self.clocks[HOST].tick(HOST);
    }

    /// The host waited for everything queued on `b` (`ggml_backend_synchronize`).
    pub fn synchronize(&mut self, b: Actor) {
        self.ensure(b);
        let c = self.clocks[b].clone();
        self.clocks[HOST].join(&c);
        self.clocks[b].tick(b);
    }

    /// `b`'s queue waits for `src`'s queued work so far (a copy whose contract orders it after
    /// the source backend, `cpy_tensor_async`).
    pub fn queue_after(&mut self, b: Actor, src: Actor) {
        if b == src {
            return;
        }
        self.ensure(b.max(src));
        let c = self.clocks[src].clone();
        self.clocks[b].join(&c);
        self.clocks[src].tick(src);
    }

    /// Event `e` recorded on `b`'s queue.
    pub fn record(&mut self, e: usize, b: Actor) {
        self.submit(b);
        self.ensure(b);
        self.events.insert(e, self.clocks[b].clone());
        self.clocks[b].tick(b);
    }

    /// `b`'s queue waits for event `e` (a never-recorded event orders nothing).
    pub fn wait(&mut self, b: Actor, e: usize) {
        self.submit(b);
        self.ensure(b);
        if let Some(c) = self.events.get(&e) {
            self.clocks[b].join(c);
        }
    }

    /// The host waits for event `e`.
    pub fn event_synchronize(&mut self, e: usize) {
        self.ensure(HOST);
        if let Some(c) = self.events.get(&e) {
            self.clocks[HOST].join(c);
        }
    }

    /// Forgets buffer `buf` (freed: its address may come back as another buffer).
    pub fn forget_buffer(&mut self, buf: usize) {
        self.buffers.remove(&buf);
    }

    /// The shadow of buffer `buf`, if it has one.
    pub fn shadow(&self, buf: usize) -> Option<&Shadow> {
        self.buffers.get(&buf)
    }

    /// The sequence number the next access gets.
    pub fn next_seq(&self) -> u64 {
        self.seq + 1
    }

    /// Checks and records an access by `a` (already submitted, for a backend) to bytes
    /// `[lo, hi)` of buffer `buf`. Returns the conflicts, one per earlier access (its bytes
    /// merged), first the write ones.
    #[allow(clippy::too_many_arguments)]
    pub fn access(
        &mut self,
        a: Actor,
        kind: Kind,
        buf: usize,
        lo: usize,
        hi: usize,
        what: Arc<str>,
        root: usize,
    ) -> Vec<Conflict> {
        self.access_runs(a, kind, buf, &[(lo, hi)], what, root)
    }

    /// [`Model::access`] of the bytes of several runs `[lo, hi)` of one buffer, as one access
    /// (a strided view's rows, say: the bytes between them are not touched). The access's
    /// own bytes, as later reports name them, are from the first run's start to the last
    /// run's end. Runs that are empty are skipped; they may overlap.
    #[allow(clippy::too_many_arguments)]
    pub fn access_runs(
        &mut self,
        a: Actor,
        kind: Kind,
        buf: usize,
        runs: &[(usize, usize)],
        what: Arc<str>,
        root: usize,
    ) -> Vec<Conflict> {
        self.checked += 1;
        self.seq += 1;
        let runs = runs.iter().filter(|(lo, hi)| hi > lo);
        let (Some(lo), Some(hi)) = (
            runs.clone().map(|r| r.0).min(),
            runs.clone().map(|r| r.1).max(),
        ) else {
            return Vec::new();
        };
        self.ensure(a);
        let clock = &self.clocks[a];
        let me = Acc {
            actor: a,
            epoch: clock.get(a),
            seq: self.seq,
            lo,
            hi,
            what,
            root,
        };
        let ordered = |x: &Acc| x.actor == a || clock.get(x.actor) >= x.epoch;
        let shadow = self.buffers.entry(buf).or_default();
        let mut out: Vec<Conflict> = Vec::new();
        let mut add = |hazard: Hazard, x: &Acc, s: usize, e: usize| match out
            .iter_mut()
            .find(|c| c.earlier.seq == x.seq && c.hazard == hazard)
        {
            Some(c) => {
                c.lo = c.lo.min(s);
                c.hi = c.hi.max(e);
            }
            None => out.push(Conflict {
                hazard,
                earlier: x.clone(),
                lo: s,
                hi: e,
            }),
        };
        let mut starts = Vec::new();
        for &(lo, hi) in runs {
            starts.extend(shadow.cover(lo, hi));
        }
        for s in starts {
            let seg = shadow.segs.get_mut(&s).expect("covered");
            let e = seg.end;
            if let Some(w) = seg.writer.as_ref().filter(|w| !ordered(w)) {
                let h = match kind {
                    Kind::Read => Hazard::ReadAfterWrite,
                    Kind::Write => Hazard::WriteAfterWrite,
                };
                add(h, w, s, e);
            }
            match kind {
                Kind::Write => {
                    for r in seg.readers.iter().filter(|r| !ordered(r)) {
                        add(Hazard::WriteAfterRead, r, s, e);
                    }
                    seg.writer = Some(me.clone());
                    seg.readers.clear();
                }
                Kind::Read => match seg.readers.iter_mut().find(|r| r.actor == a) {
                    Some(r) => *r = me.clone(),
                    None => seg.readers.push(me.clone()),
                },
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUF: usize = 0x1000;

    fn acc(m: &mut Model, a: Actor, k: Kind, lo: usize, hi: usize, what: &str) -> Vec<Conflict> {
        m.access(a, k, BUF, lo, hi, what.into(), 7)
    }

    fn hazards(c: &[Conflict]) -> Vec<(Hazard, String, usize, usize)> {
        c.iter()
            .map(|c| (c.hazard, c.earlier.what.to_string(), c.lo, c.hi))
            .collect()
    }

    #[test]
    fn an_access_in_runs_touches_only_its_runs_and_is_one_access() {
        let mut m = Model::default();
        m.submit(1);
        let rows = [(0, 16), (32, 48), (64, 80)];
        assert!(m
            .access_runs(1, Kind::Write, BUF, &rows, "even rows".into(), 0)
            .is_empty());
        // Between the runs: not touched, no conflict.
        assert!(acc(&mut m, HOST, Kind::Write, 16, 32, "odd row").is_empty());
        // Over two runs and the gap: one conflict with the runs' access, its bytes merged.
        let c = acc(&mut m, HOST, Kind::Write, 40, 70, "across");
        assert_eq!(
            hazards(&c),
            vec![(Hazard::WriteAfterWrite, "even rows".to_string(), 40, 70)]
        );
        // Empty runs alone: nothing to check.
        assert!(m
            .access_runs(1, Kind::Write, BUF, &[(8, 8)], "empty".into(), 0)
            .is_empty());
    }

    #[test]
    fn a_queue_read_of_host_written_bytes_is_ordered_by_submission() {
        let mut m = Model::default();
        assert!(acc(&mut m, HOST, Kind::Write, 0, 64, "set").is_empty());
        m.submit(1);
        assert!(acc(&mut m, 1, Kind::Read, 0, 64, "compute").is_empty());
    }

    #[test]
    fn a_host_read_of_queue_written_bytes_needs_a_synchronize() {
        let mut m = Model::default();
        m.submit(1);
        assert!(acc(&mut m, 1, Kind::Write, 16, 48, "node").is_empty());
        let c = acc(&mut m, HOST, Kind::Read, 0, 64, "get");
        assert_eq!(
            hazards(&c),
            vec![(Hazard::ReadAfterWrite, "node".to_string(), 16, 48)]
        );
        m.synchronize(1);
        assert!(acc(&mut m, HOST, Kind::Read, 0, 64, "get").is_empty());
        // The queue's later work is not covered by that synchronize.
        m.submit(1);
        assert!(acc(&mut m, 1, Kind::Write, 0, 8, "node2").is_empty());
        assert_eq!(acc(&mut m, HOST, Kind::Write, 0, 4, "set").len(), 1);
    }

    #[test]
    fn an_event_orders_only_the_work_before_its_record() {
        let mut m = Model::default();
        // Recorded before the write it should cover: the wait orders nothing.
        m.record(0xe, 1);
        m.submit(1);
        acc(&mut m, 1, Kind::Write, 0, 32, "producer");
        m.wait(2, 0xe);
        let c = acc(&mut m, 2, Kind::Read, 0, 32, "consumer");
        assert_eq!(
            hazards(&c),
            vec![(Hazard::ReadAfterWrite, "producer".to_string(), 0, 32)]
        );
        // Recorded after it: ordered.
        m.record(0xe, 1);
        m.wait(2, 0xe);
        assert!(acc(&mut m, 2, Kind::Read, 0, 32, "consumer").is_empty());
        // And the host through event_synchronize.
        assert_eq!(acc(&mut m, HOST, Kind::Write, 0, 32, "set").len(), 2);
        m.event_synchronize(0xe);
        m.synchronize(2);
        assert!(acc(&mut m, HOST, Kind::Write, 0, 32, "set").is_empty());
    }

    #[test]
    fn a_write_after_another_queue_read_is_reported_once_with_merged_bytes() {
        let mut m = Model::default();
        acc(&mut m, HOST, Kind::Write, 0, 100, "a");
        acc(&mut m, HOST, Kind::Write, 40, 60, "b"); // three intervals now
        m.submit(1);
        acc(&mut m, 1, Kind::Read, 0, 100, "reader");
        m.submit(2);
        let c = acc(&mut m, 2, Kind::Write, 10, 90, "writer");
        assert_eq!(
            hazards(&c),
            vec![(Hazard::WriteAfterRead, "reader".to_string(), 10, 90)]
        );
        // A second write by the same actor conflicts with nothing: it now owns the bytes.
        assert!(acc(&mut m, 2, Kind::Write, 10, 90, "writer").is_empty());
        // A copy queued on 2 after 1's work (cpy_tensor_async) orders 1's reads.
        m.queue_after(3, 2);
        assert!(acc(&mut m, 3, Kind::Write, 10, 90, "w3").is_empty());
    }

    #[test]
    fn disjoint_bytes_never_conflict_and_intervals_split_and_fill() {
        let mut m = Model::default();
        m.submit(1);
        acc(&mut m, 1, Kind::Write, 0, 10, "x");
        assert!(acc(&mut m, HOST, Kind::Write, 10, 20, "y").is_empty());
        assert!(acc(&mut m, HOST, Kind::Read, 30, 40, "z").is_empty());
        // [0,10) [10,20) [30,40): a gap stays a gap until an access covers it
        assert_eq!(m.shadow(BUF).unwrap().len(), 3);
        let c = acc(&mut m, HOST, Kind::Read, 5, 35, "r");
        assert_eq!(
            hazards(&c),
            vec![(Hazard::ReadAfterWrite, "x".to_string(), 5, 10)]
        );
        // cut at 5 and 35, the gap [20,30) filled: [0,5) [5,10) [10,20) [20,30) [30,35) [35,40)
        assert_eq!(m.shadow(BUF).unwrap().len(), 6);
        m.forget_buffer(BUF);
        assert!(m.shadow(BUF).is_none());
        assert_eq!(m.checked, 4);
    }

    #[test]
    fn the_last_write_of_a_root_is_found_and_other_roots_ignored() {
        let mut m = Model::default();
        m.access(HOST, Kind::Write, BUF, 0, 64, "x".into(), 1);
        let s1 = m.next_seq();
        m.access(HOST, Kind::Write, BUF, 0, 32, "reuse".into(), 2);
        let sh = m.shadow(BUF).unwrap();
        assert_eq!(sh.last_write_of_root(0, 64, 1).unwrap().seq, s1 - 1);
        assert_eq!(sh.last_write_of_root(8, 16, 2).unwrap().seq, s1);
        assert!(sh.last_write_of_root(40, 64, 2).is_none());
    }
}
