//! Planning a batch: which ops go where, in which order.
//!
//! Every op of a batch has a *target* — a communicator (collectives), or the ordered channel to
//! one peer (sends, receives). Ops on one target must run in the user's order (NCCL and MPI match
//! collectives per communicator and messages per peer in order); ops on different targets are
//! independent. The plan sorts a batch by target, stably, and cuts it into runs, one per target:
//! a backend posts each run as a unit (the local backend publishes it with one atomic store;
//! NCCL will issue it inside one `ncclGroupStart/End`; MPI will pack same-kind collectives).

use std::ops::Range;

use smallvec::SmallVec;

use crate::exec::Op;
use crate::model::{GroupId, OpKind};

/// Where an op goes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub(crate) enum Target {
    /// The collectives of one communicator.
    Coll(GroupId),
    /// Messages to one peer.
    Send(usize),
    /// Messages from one peer.
    Recv(usize),
}

impl Target {
    /// The target as one word, in the same order as the targets themselves: for keeping the
    /// last one where a comparison per call must not load a freshly stored enum (a load of a
    /// value just written field by field stalls).
    pub(crate) fn order_key(self) -> u64 {
        // Communicator ids are u32; peers are ranks, below 2^62 in any world.
        let (variant, value) = match self {
            Target::Coll(g) => (0u64, u64::from(g.0)),
            Target::Send(p) => (1, p as u64),
            Target::Recv(p) => (2, p as u64),
        };
        variant << 62 | (value & ((1 << 62) - 1))
    }
}

/// The target of `op`.
pub(crate) fn target(op: &Op) -> Target {
    match op.desc.kind {
        OpKind::Send => Target::Send(op.desc.peer.unwrap_or(0)),
        OpKind::Recv => Target::Recv(op.desc.peer.unwrap_or(0)),
        _ => Target::Coll(op.desc.group),
    }
}

/// Sorts `ops` by target, keeping the user's order within each target, and returns the runs.
pub(crate) fn plan(ops: &mut [Op]) -> Runs {
    // Most batches are already in target order (one communicator, or one peer): cut them in
    // one pass, computing each op's target once. Sorting would still move every op. The order
    // of runs matters, not only their grouping: ranks that batch collectives on several
    // communicators in different orders must still post them in one order.
    let mut runs = Runs::new();
    if !cut(ops, &mut runs) {
        ops.sort_by_key(target); // stable
        runs.clear();
        cut(ops, &mut runs);
    }
    runs
}

/// A batch's runs: each target once, with the range of the batch it covers, in target order.
pub(crate) type Runs = SmallVec<[(Target, Range<usize>); 4]>;

/// Appends the runs of `ops` to `runs` while they are sorted by target; whether all were.
/// (Filling the caller's list rather than returning one: the list is large enough that moving
/// it costs more than cutting a one-op batch.)
fn cut(ops: &[Op], runs: &mut Runs) -> bool {
    for (i, op) in ops.iter().enumerate() {
        let t = target(op);
        match runs.last_mut() {
            Some((last, range)) if *last == t => range.end = i + 1,
            Some((last, _)) if *last > t => return false,
            _ => runs.push((t, i..i + 1)),
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Buf;
    use crate::model::{CallSite, OpDesc, Shape};
    use crate::{DType, ReduceOp};
    use proptest::prelude::*;

    fn op(kind: OpKind, peer: usize, group: u32, tag: usize) -> Op {
        let desc = OpDesc {
            kind,
            group: GroupId(group),
            peer: Some(peer),
            op: Some(ReduceOp::Sum),
            dtype: DType::U8,
            // The tag records the op's position in the user's order.
            shape: Shape::from_slice(&[tag]),
            dim: 0,
            site: CallSite::caller(),
        };
        Op {
            desc,
            input: Buf::NONE,
            output: Buf::NONE,
        }
    }

    #[test]
    fn order_keys_keep_the_order_of_targets() {
        let targets = [
            Target::Coll(GroupId(0)),
            Target::Coll(GroupId(7)),
            Target::Coll(GroupId(u32::MAX)),
            Target::Send(0),
            Target::Send(3),
            Target::Send(1 << 40),
            Target::Recv(0),
            Target::Recv(2),
        ];
        for a in targets {
            for b in targets {
                assert_eq!(a.order_key().cmp(&b.order_key()), a.cmp(&b), "{a:?} {b:?}");
            }
        }
    }

    proptest! {
        /// Runs partition the batch, each run has one target, targets appear once, and within
        /// a target the user's order is kept. (Safe code only: not worth Miri's time, and
        /// proptest's failure files need the file system Miri isolates.)
        #[test]
        #[cfg_attr(miri, ignore)]
        fn runs_partition_by_target_in_user_order(spec in prop::collection::vec((0u8..3, 0usize..3, 0u32..3), 0..40)) {
            let mut ops: Vec<Op> = spec.iter().enumerate().map(|(tag, &(k, peer, g))| {
                let kind = [OpKind::Send, OpKind::Recv, OpKind::AllReduce][k as usize];
                op(kind, peer, g, tag)
            }).collect();
            let before: Vec<(Target, usize)> = ops.iter().map(|o| (target(o), o.desc.shape[0])).collect();
            let runs = plan(&mut ops);
            let mut covered = 0;
            let mut seen = Vec::new();
            for (t, r) in &runs {
                prop_assert_eq!(r.start, covered);
                covered = r.end;
                prop_assert!(!seen.contains(t));
                seen.push(*t);
                let tags: Vec<usize> = ops[r.clone()].iter().map(|o| { assert_eq!(target(o), *t); o.desc.shape[0] }).collect();
                let want: Vec<usize> = before.iter().filter(|(bt, _)| bt == t).map(|&(_, tag)| tag).collect();
                prop_assert_eq!(tags, want);
            }
            prop_assert_eq!(covered, ops.len());
            // Runs come in target order, whatever order the user recorded them in.
            prop_assert!(runs.windows(2).all(|w| w[0].0 < w[1].0));
        }
    }
}
