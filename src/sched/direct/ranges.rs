//! A set of byte ranges of host-visible memory: the bytes a backend's queued work writes.

/// The most ranges the set keeps apart; past it, the set becomes its hull (one range
/// covering all), which can only add waits, never lose one.
const MAX_RANGES: usize = 1024;

/// Sorted, disjoint, non-empty half-open ranges `[start, end)` of addresses; touching ranges
/// are merged.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Ranges(Vec<(usize, usize)>);

impl Ranges {
    /// Whether no byte is in the set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Empties the set (keeps its memory).
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// Adds `[start, end)`; an empty range adds nothing.
    pub fn insert(&mut self, start: usize, end: usize) {
        if start >= end {
            return;
        }
        // The first range that ends at or after `start` may merge with the new one, and so
        // may every later range that starts at or before `end`.
        let first = self.0.partition_point(|&(_, e)| e < start);
        let mut last = first;
        let (mut s, mut e) = (start, end);
        while last < self.0.len() && self.0[last].0 <= end {
            s = s.min(self.0[last].0);
            e = e.max(self.0[last].1);
            last += 1;
        }
        self.0.splice(first..last, [(s, e)]);
        if self.0.len() > MAX_RANGES {
            let hull = (self.0[0].0, self.0[self.0.len() - 1].1);
            self.0.clear();
            self.0.push(hull);
        }
    }

    /// Whether any byte of `[start, end)` is in the set.
    pub fn overlaps(&self, start: usize, end: usize) -> bool {
        if start >= end {
            return false;
        }
        let i = self.0.partition_point(|&(_, e)| e <= start);
        self.0.get(i).is_some_and(|&(s, _)| s < end)
    }

    /// The ranges, in order (for tests).
    #[cfg(test)]
    pub fn as_slice(&self) -> &[(usize, usize)] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn inserts_merge_touching_and_overlapping_ranges() {
        let mut r = Ranges::default();
        r.insert(10, 20);
        r.insert(30, 40);
        r.insert(5, 5);
        assert_eq!(r.as_slice(), &[(10, 20), (30, 40)]);
        r.insert(20, 30);
        assert_eq!(r.as_slice(), &[(10, 40)]);
        r.insert(0, 2);
        r.insert(1, 12);
        assert_eq!(r.as_slice(), &[(0, 40)]);
        assert!(r.overlaps(39, 100));
        assert!(!r.overlaps(40, 100));
        assert!(!r.overlaps(7, 7));
        r.clear();
        assert!(r.is_empty() && !r.overlaps(0, usize::MAX));
    }

    #[test]
    fn past_the_limit_the_set_is_its_hull() {
        let mut r = Ranges::default();
        for i in 0..=MAX_RANGES {
            r.insert(10 * i + 100, 10 * i + 101);
        }
        assert_eq!(r.as_slice(), &[(100, 10 * MAX_RANGES + 101)]);
        assert!(
            r.overlaps(105, 106),
            "the hull covers the gaps: more waits, none lost"
        );
    }

    proptest! {
        /// The set answers as the plain list of everything inserted, and stays sorted and
        /// disjoint.
        #[test]
        fn answers_as_the_list_of_inserted_ranges(
            ins in prop::collection::vec((0usize..200, 0usize..30), 0..40),
            q in prop::collection::vec((0usize..230, 0usize..30), 1..20),
        ) {
            let mut r = Ranges::default();
            for &(s, n) in &ins {
                r.insert(s, s + n);
            }
            for w in r.as_slice().windows(2) {
                prop_assert!(w[0].1 < w[1].0);
            }
            for &(s, n) in &q {
                let want = ins.iter().any(|&(a, m)| m > 0 && n > 0 && a < s + n && s < a + m);
                prop_assert_eq!(r.overlaps(s, s + n), want, "query [{}, {})", s, s + n);
            }
        }
    }
}
