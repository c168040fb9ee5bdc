//! The moves the in-place rule made in one split, for the record: the rule's passes only
//! leave their final placement (cause `InPlaceColocation`) in the table, so, only while
//! records are written, the placements of the graph's nodes are taken before and after each
//! of the rule's two calls and compared.

use crate::sched::table::{GraphIds, Placement, Table};

/// One move of a node by the in-place rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    /// The backend before the rule's first move of this node (`None`: it had none yet).
    pub from: Option<usize>,
    /// The backend after the rule's last move.
    pub to: usize,
    /// Which call moved it last: 0 before the fill pass, 1 after it.
    pub call: u8,
}

/// Per node of the graph (by position), the rule's move, if any.
#[derive(Default, Debug)]
pub struct Moves {
    /// `moves[i]`: the move of `graph.nodes[i]`.
    pub moves: Vec<Option<Move>>,
}

/// The placements of the graph's nodes, by position.
pub fn snapshot(table: &Table, ix: &GraphIds) -> Vec<Option<Placement>> {
    ix.nodes.iter().map(|&id| table.at(id)).collect()
}

impl Moves {
    /// Notes every node whose backend differs from `before` (taken by [`snapshot`] before
    /// call `call` of the rule) now that the call is done.
    pub fn note(&mut self, before: &[Option<Placement>], table: &Table, ix: &GraphIds, call: u8) {
        self.moves.resize(ix.nodes.len(), None);
        for (i, (&id, b)) in ix.nodes.iter().zip(before).enumerate() {
            let Some(now) = table.at(id) else { continue };
            let was = b.map(|p| p.backend);
            if was == Some(now.backend) {
                continue;
            }
            let from = self.moves[i].map_or(was, |m| m.from);
            // Moved back where it was before the rule: no move.
            self.moves[i] = (from != Some(now.backend)).then_some(Move {
                from,
                to: now.backend,
                call,
            });
        }
    }
}
