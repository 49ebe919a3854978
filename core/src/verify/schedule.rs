//! The verifier's output for a correct program: what each rank does, step by step, and which
//! ops meet which.

use super::program::Program;
use super::sim::OpRef;
use crate::model::GroupId;

/// What an op was matched with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Match {
    /// A send or recv, matched with op `op` of item `item` on rank `peer`.
    P2p {
        /// The other rank.
        peer: u32,
        /// Its item index.
        item: u32,
        /// The op's index within that item.
        op: u32,
    },
    /// A collective: the `step`-th collective on communicator `group`.
    Collective {
        /// The communicator.
        group: GroupId,
        /// 0-based step on it.
        step: u64,
    },
}

/// Every op's match, rank by rank, item by item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// World size.
    pub world: usize,
    /// Per rank: the index of each item's first op in `matches`, plus a final end index.
    starts: Vec<Vec<u32>>,
    /// Per rank: each op's match (`None` while unmatched; a verified schedule has none).
    matches: Vec<Vec<Option<Match>>>,
    /// Pairs of call sites that met (a send and its receive, two members at one collective
    /// step) where at least one has a free element type (see `Program::free_dtypes`): their
    /// element types must be equal, which the verifier could not check. Sorted, no duplicates.
    pub dtype_links: Vec<(super::SiteId, super::SiteId)>,
}

impl Schedule {
    pub(super) fn new(p: &Program) -> Self {
        let mut starts = Vec::with_capacity(p.world);
        let mut matches = Vec::with_capacity(p.world);
        for items in &p.ranks {
            let mut s = Vec::with_capacity(items.len() + 1);
            let mut at = 0u32;
            for item in items {
                s.push(at);
                at += item.ops().len() as u32;
            }
            s.push(at);
            matches.push(vec![None; at as usize]);
            starts.push(s);
        }
        Schedule {
            world: p.world,
            starts,
            matches,
            dtype_links: Vec::new(),
        }
    }

    fn index(&self, r: OpRef) -> usize {
        (self.starts[r.rank as usize][r.item as usize] + r.op) as usize
    }

    pub(super) fn set(&mut self, r: OpRef, m: Match) {
        let i = self.index(r);
        self.matches[r.rank as usize][i] = Some(m);
    }

    pub(super) fn get(&self, r: OpRef) -> Option<Match> {
        self.matches[r.rank as usize][self.index(r)]
    }

    /// Number of items rank `rank` runs.
    pub fn items(&self, rank: usize) -> usize {
        self.starts[rank].len() - 1
    }

    /// The matches of item `item` of rank `rank`, one per op in program order.
    pub fn matches(&self, rank: usize, item: usize) -> impl Iterator<Item = Match> + '_ {
        let (a, b) = (
            self.starts[rank][item] as usize,
            self.starts[rank][item + 1] as usize,
        );
        self.matches[rank][a..b]
            .iter()
            .map(|m| m.expect("a verified schedule matches every op"))
    }
}
