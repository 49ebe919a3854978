//! The program model: every communication call described as plain data.
//!
//! The runtime builds an [`OpDesc`] for each call before it moves any data; the verifier (and
//! the `#[rankwise::program]` macro through it) reasons about the same descriptions. Nothing here
//! depends on a backend.

use std::fmt;
use std::panic::Location;

use smallvec::SmallVec;

use crate::DType;
use crate::ReduceOp;

/// A tensor shape: the extent of each dimension, outermost first.
pub type Shape = SmallVec<[usize; 4]>;

/// Where in the user's source a communication call was made.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallSite {
    /// Source file, as `file!()` spells it.
    pub file: &'static str,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

impl CallSite {
    /// The location of the (`#[track_caller]`) caller.
    #[track_caller]
    pub fn caller() -> Self {
        Location::caller().into()
    }
}

impl From<&'static Location<'static>> for CallSite {
    fn from(l: &'static Location<'static>) -> Self {
        CallSite {
            file: l.file(),
            line: l.line(),
            column: l.column(),
        }
    }
}

impl fmt::Display for CallSite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

impl fmt::Debug for CallSite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Identifies a communicator: `0` is the world, others come from `new_group` / `split`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId(pub u32);

impl GroupId {
    /// The group of all ranks.
    pub const WORLD: GroupId = GroupId(0);
}

/// The kind of a communication call (names follow `torch.distributed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// Point-to-point send to `peer`.
    Send,
    /// Point-to-point receive from `peer`.
    Recv,
    /// Copy the root's buffer to every member.
    Broadcast,
    /// Reduce every member's buffer into the root's.
    Reduce,
    /// Reduce every member's buffer into every member's.
    AllReduce,
    /// Concatenate every member's input at the root, along `dim`.
    Gather,
    /// Concatenate every member's input at every member, along `dim`.
    AllGather,
    /// Split the root's input along `dim`, one part per member.
    Scatter,
    /// Reduce, then split along `dim`, one part per member.
    ReduceScatter,
    /// Split every input along `dim`; part `j` goes to member `j`.
    AllToAll,
    /// Wait until every member arrives.
    Barrier,
}

impl OpKind {
    /// Every kind, in declaration order.
    pub const ALL: [OpKind; 11] = [
        OpKind::Send,
        OpKind::Recv,
        OpKind::Broadcast,
        OpKind::Reduce,
        OpKind::AllReduce,
        OpKind::Gather,
        OpKind::AllGather,
        OpKind::Scatter,
        OpKind::ReduceScatter,
        OpKind::AllToAll,
        OpKind::Barrier,
    ];
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One communication call, as data.
///
/// `shape` is the shape that must agree across the participants: the buffer of `send`, `recv`,
/// `broadcast`, `reduce` and `all_reduce`; the input of `gather`, `all_gather`,
/// `reduce_scatter` and `all_to_all`; the output of `scatter`; empty for `barrier`.
#[derive(Debug, PartialEq)]
pub struct OpDesc {
    /// What the call does.
    pub kind: OpKind,
    /// The communicator it runs on (for p2p: the world).
    pub group: GroupId,
    /// Destination of `send`, source of `recv`, root of rooted collectives (global ranks).
    pub peer: Option<usize>,
    /// The reduction, for reducing collectives.
    pub op: Option<ReduceOp>,
    /// Element type.
    pub dtype: DType,
    /// The shape that must agree across participants (see the type's docs).
    pub shape: Shape,
    /// Split/concatenation dimension (0 where not applicable).
    pub dim: usize,
    /// The user's call site.
    pub site: CallSite,
}

impl Clone for OpDesc {
    fn clone(&self) -> Self {
        OpDesc {
            shape: self.shape.clone(),
            ..*self
        }
    }

    /// In place: the shape is copied into the one already held rather than built anew. (The MPI
    /// backend refills a thousand descriptions per batch of a bucket, and a shape built anew
    /// was read back while its stores were still in flight: 4 % of a bucket, in perf.)
    fn clone_from(&mut self, source: &Self) {
        let OpDesc {
            kind,
            group,
            peer,
            op,
            dtype,
            shape: _,
            dim,
            site,
        } = *source;
        (self.kind, self.group, self.peer, self.op, self.dtype) = (kind, group, peer, op, dtype);
        (self.dim, self.site) = (dim, site);
        self.shape.clone_from(&source.shape);
    }
}

impl OpDesc {
    /// Number of elements described by `shape`.
    ///
    /// Saturates at `usize::MAX` for shapes too large to exist (only a hand-built description
    /// can have one; [`rules::validate`](crate::rules::validate) refuses it).
    pub fn numel(&self) -> usize {
        self.shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .unwrap_or(usize::MAX)
    }

    /// Whether two members' descriptions of one collective step agree: same kind, group, root
    /// and op, and — where the kind has them — the same dtype, shape and dim. The call site is
    /// not compared, nor fields a kind does not use (a barrier moves no data; only split and
    /// concatenating collectives have a dim).
    pub fn agrees_with(&self, other: &OpDesc) -> bool {
        self.kind == other.kind
            && self.group == other.group
            && self.peer == other.peer
            && self.op == other.op
            && (self.kind == OpKind::Barrier
                || (self.dtype == other.dtype && self.shape == other.shape))
            && (!self.kind.has_dim() || self.dim == other.dim)
    }

    /// A short human description: `all_reduce(Sum, f32[2, 5])`, `send(to 1, f32[4])`.
    pub fn summary(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        match self.kind {
            OpKind::Send => parts.extend(self.peer.map(|p| format!("to {p}"))),
            OpKind::Recv => parts.extend(self.peer.map(|p| format!("from {p}"))),
            _ => parts.extend(self.peer.map(|p| format!("root {p}"))),
        }
        if let Some(op) = self.op {
            parts.push(op.to_string());
        }
        if self.kind != OpKind::Barrier {
            parts.push(format!("{}{}", self.dtype, ShapeFmt(&self.shape)));
        }
        if self.kind.has_dim() {
            parts.push(format!("dim {}", self.dim));
        }
        format!("{}({})", self.kind, parts.join(", "))
    }
}

/// Formats a shape as `[2, 5]`.
pub struct ShapeFmt<'a>(pub &'a [usize]);

impl fmt::Display for ShapeFmt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{d}")?;
        }
        write!(f, "]")
    }
}

/// Formats a set of ranks compactly: `0–3`, `1, 4, 6`.
pub struct RanksFmt<'a>(pub &'a [usize]);

impl fmt::Display for RanksFmt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sorted = self.0.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let mut first = true;
        let mut i = 0;
        while i < sorted.len() {
            let mut j = i;
            while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
                j += 1;
            }
            if !first {
                write!(f, ", ")?;
            }
            first = false;
            match j - i {
                0 => write!(f, "{}", sorted[i])?,
                1 => write!(f, "{}, {}", sorted[i], sorted[j])?,
                _ => write!(f, "{}–{}", sorted[i], sorted[j])?,
            }
            i = j + 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_compress_runs() {
        assert_eq!(RanksFmt(&[3, 0, 1, 2]).to_string(), "0–3");
        assert_eq!(RanksFmt(&[0, 1, 5]).to_string(), "0, 1, 5");
        assert_eq!(RanksFmt(&[7, 2, 4, 5, 6]).to_string(), "2, 4–7");
        assert_eq!(RanksFmt(&[]).to_string(), "");
    }

    #[test]
    fn summary_reads_like_the_call() {
        let d = OpDesc {
            kind: OpKind::ReduceScatter,
            group: GroupId::WORLD,
            peer: None,
            op: Some(ReduceOp::Sum),
            dtype: DType::F32,
            shape: Shape::from_slice(&[4, 5]),
            dim: 1,
            site: CallSite::caller(),
        };
        assert_eq!(d.summary(), "reduce_scatter(Sum, f32[4, 5], dim 1)");
    }

    /// `OpKind::ALL` lists every kind once, in order: the match fails to compile when a kind is
    /// added, and the assertion when `ALL` is not updated with it.
    #[test]
    fn all_lists_every_kind() {
        let index = |k: OpKind| match k {
            OpKind::Send => 0,
            OpKind::Recv => 1,
            OpKind::Broadcast => 2,
            OpKind::Reduce => 3,
            OpKind::AllReduce => 4,
            OpKind::Gather => 5,
            OpKind::AllGather => 6,
            OpKind::Scatter => 7,
            OpKind::ReduceScatter => 8,
            OpKind::AllToAll => 9,
            OpKind::Barrier => 10,
        };
        for (i, k) in OpKind::ALL.into_iter().enumerate() {
            assert_eq!(index(k), i, "{k}");
        }
    }
}
