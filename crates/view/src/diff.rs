//! A/B: pairing the records of two dumps of the same work, and the nodes (and leafs) each
//! pair places differently.

use serde::Serialize;
use std::collections::HashMap;

use crate::model::{Record, Tensor};

/// One tensor placed differently by side A and side B.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Differs {
    /// `node` or `leaf`.
    pub kind: &'static str,
    /// Position in A's list.
    pub a_index: usize,
    /// Position in B's list.
    pub b_index: usize,
    pub name: String,
    pub op: String,
    pub a_backend: String,
    pub a_cause: String,
    pub b_backend: String,
    pub b_cause: String,
    /// B's in-place move, as `FROM → TO (call)`, when it made one.
    pub b_move: Option<String>,
    /// Whether A's node is an in-place writer apart from its storage (the defect).
    pub a_apart: bool,
}

/// Two records of the same graph.
#[derive(Serialize, Debug, Clone)]
pub struct Pair {
    /// Index into the page's A records.
    pub a: usize,
    /// Index into the page's B records.
    pub b: usize,
    /// Whether the two node lists have the same names and ops in the same order (same
    /// structure hash); otherwise tensors are matched by name.
    pub same_structure: bool,
    /// How many of A's nodes and leafs have a counterpart in B (all of them with the same
    /// structure; otherwise those matched by name: the k-th of a name in A with the k-th of
    /// that name in B).
    pub matched: usize,
    /// A's nodes and leafs in all.
    pub a_tensors: usize,
    pub differs: Vec<Differs>,
}

fn describe_move(rec: &Record, t: &Tensor) -> Option<String> {
    t.moved.as_ref().map(|m| {
        format!(
            "{} → {} ({})",
            rec.backend_name(m.from),
            rec.backend_name(Some(m.to)),
            m.call
        )
    })
}

fn list_diff(
    kind: &'static str,
    a: &Record,
    b: &Record,
    at: &[Tensor],
    bt: &[Tensor],
    same: bool,
    out: &mut Vec<Differs>,
) -> usize {
    let mut matched = 0;
    // Names repeat within a graph (llama.cpp's `Kcur-0` three times, `norm-0`): by name, the
    // k-th tensor of a name in A is matched with the k-th of that name in B, in list order,
    // so that each of B's tensors is compared once; A's tensors of a name beyond B's count of
    // it have no counterpart and are not counted as matched.
    let mut by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    if !same {
        for (i, t) in bt.iter().enumerate() {
            by_name.entry(t.name.as_str()).or_default().push(i);
        }
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for ta in at {
        let tb = if same {
            bt.get(ta.index)
        } else {
            let k = seen.entry(ta.name.as_str()).or_default();
            *k += 1;
            by_name
                .get(ta.name.as_str())
                .and_then(|v| v.get(*k - 1))
                .and_then(|&i| bt.get(i))
        };
        let Some(tb) = tb else { continue };
        matched += 1;
        let (na, nb) = (a.backend_name(ta.backend), b.backend_name(tb.backend));
        if na == nb {
            continue;
        }
        out.push(Differs {
            kind,
            a_index: ta.index,
            b_index: tb.index,
            name: ta.name.clone(),
            op: ta.op.clone(),
            a_backend: na.to_string(),
            a_cause: ta.cause.clone().unwrap_or_default(),
            b_backend: nb.to_string(),
            b_cause: tb.cause.clone().unwrap_or_default(),
            b_move: describe_move(b, tb),
            a_apart: ta.inplace.as_ref().is_some_and(|i| i.apart()),
        });
    }
    matched
}

/// The tensors `a` and `b` place on differently named backends: nodes, then leafs; with
/// whether the two have the same structure and how many of A's tensors have a counterpart.
pub fn differs(a: &Record, b: &Record) -> (bool, usize, Vec<Differs>) {
    let same = a.graph.structure_hash == b.graph.structure_hash
        && a.nodes.len() == b.nodes.len()
        && a.leafs.len() == b.leafs.len();
    let mut out = Vec::new();
    let matched = list_diff("node", a, b, &a.nodes, &b.nodes, same, &mut out)
        + list_diff("leaf", a, b, &a.leafs, &b.leafs, same, &mut out);
    (same, matched, out)
}

/// Pairs every record of `a` with the first unpaired record of `b` of the same structure
/// hash (the same graph, placed however); with one record on each side, those two are
/// paired whatever their hashes.
pub fn pair(a: &[Record], b: &[Record]) -> Vec<Pair> {
    let mut used = vec![false; b.len()];
    let mut pairs = Vec::new();
    for (i, ra) in a.iter().enumerate() {
        let j = if a.len() == 1 && b.len() == 1 {
            Some(0)
        } else {
            (0..b.len()).find(|&j| !used[j] && b[j].graph.structure_hash == ra.graph.structure_hash)
        };
        if let Some(j) = j {
            used[j] = true;
            let (same_structure, matched, differs) = differs(ra, &b[j]);
            pairs.push(Pair {
                a: i,
                b: j,
                same_structure,
                matched,
                a_tensors: ra.nodes.len() + ra.leafs.len(),
                differs,
            });
        }
    }
    pairs
}

/// The records of each side that no pair holds (indexes into `a` and into `b`): graphs the
/// other side has no record of the same structure for, which an A/B page does not show.
pub fn unpaired(a: &[Record], b: &[Record], pairs: &[Pair]) -> (Vec<usize>, Vec<usize>) {
    let left = |n: usize, used: &dyn Fn(&Pair) -> usize| -> Vec<usize> {
        (0..n)
            .filter(|&i| !pairs.iter().any(|p| used(p) == i))
            .collect()
    };
    (left(a.len(), &|p| p.a), left(b.len(), &|p| p.b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn fixture() -> Record {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/repro-rule1.json");
        Record::read(&p).unwrap()
    }

    /// Names repeat in a graph (llama.cpp's `Kcur-0` three times): matched by name, the k-th
    /// of a name in A is compared with the k-th in B, so a third `Kcur-0` placed differently
    /// is listed (it was compared with B's first `Kcur-0` and so never found), and A's
    /// tensors of a name B has fewer of are not counted as matched.
    #[test]
    fn repeated_names_are_matched_in_order() {
        let mut a = fixture();
        for n in &mut a.nodes[..3] {
            n.name = "Kcur-0".into();
        }
        let mut b = a.clone();
        b.graph.structure_hash = "0123456789abcdef".into();
        // Every Kcur-0 of A is on the CPU (backend 1); B has its third one on HRX0.
        assert!(a.nodes[..3].iter().all(|n| n.backend == Some(1)));
        b.nodes[2].backend = Some(0);
        let (same, matched, d) = differs(&a, &b);
        assert!(!same);
        assert_eq!(matched, 7);
        let got: Vec<_> = d
            .iter()
            .map(|x| {
                (
                    x.kind,
                    x.a_index,
                    x.b_index,
                    x.name.as_str(),
                    x.a_backend.as_str(),
                    x.b_backend.as_str(),
                )
            })
            .collect();
        assert_eq!(got, [("node", 2, 2, "Kcur-0", "CPU", "HRX0")]);

        // B with two Kcur-0 only (its third renamed): A's third has no counterpart.
        b.nodes[2].name = "Qcur-0".into();
        let (_, matched, d) = differs(&a, &b);
        assert_eq!(matched, 6);
        assert!(d.is_empty(), "{d:?}");
        let p = pair(std::slice::from_ref(&a), std::slice::from_ref(&b));
        assert_eq!((p[0].matched, p[0].a_tensors), (6, 7));
    }
}
