//! The rules one call must satisfy on its own: ranks in range, membership, reduce op against
//! dtype, dims and divisibility, and the shapes of outputs; and the rules of declaring groups.
//!
//! They need only the call's description, the world size and the group's members, so the
//! runtime applies them before every call, and the verifier (at compile time in the macro, at
//! launch in `spawn`) applies the same functions to whole programs. A broken rule is a
//! [`Violation`]: it carries its diagnostic [`Code`], its message and its help, so a run-time
//! error and a compile-time diagnostic say the same thing in the same words.

use std::fmt;

use crate::code::Code;
use crate::model::{OpDesc, OpKind, RanksFmt, Shape, ShapeFmt};
use crate::ops::Spelling;
use crate::{DType, ReduceOp};

/// Shapes a call passes besides `desc.shape` (see [`OpDesc`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Aux<'a> {
    /// The output buffer's shape, for calls with a separate output (`None`: no output given).
    pub output: Option<&'a [usize]>,
    /// The root's input to `scatter` (`None` on other ranks).
    pub root_input: Option<&'a [usize]>,
}

/// A rule broken by one call or one group declaration. Its text does not depend on which rank
/// broke it, so the same mistake on many ranks reads (and merges) as one.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Violation {
    /// A peer or root is not a rank of the world.
    RankOutOfRange {
        /// The call.
        kind: OpKind,
        /// `"peer"` or `"root"`.
        role: &'static str,
        /// The offending value.
        value: usize,
        /// World size.
        world: usize,
    },
    /// A collective called on a group by a rank that is not one of its members.
    NotAMember {
        /// The collective.
        kind: OpKind,
        /// The group's members.
        members: Vec<usize>,
    },
    /// The root of a rooted collective is not a member of the group.
    RootNotInGroup {
        /// The collective.
        kind: OpKind,
        /// The root given.
        root: usize,
        /// The group's members.
        members: Vec<usize>,
    },
    /// A group declared with no, duplicate or out-of-range members.
    InvalidGroup {
        /// The members as given.
        members: Vec<usize>,
        /// What is wrong with them.
        problem: String,
    },
    /// A split whose parts overlap or leave a rank out.
    InvalidSplit {
        /// What is wrong with the parts.
        problem: String,
    },
    /// A blocking send or recv to the calling rank itself.
    SelfP2p {
        /// Send or recv.
        kind: OpKind,
    },
    /// A reduce op not defined for the element type.
    OpNotSupported {
        /// The op.
        op: ReduceOp,
        /// The element type.
        dtype: DType,
    },
    /// A split or concatenation dimension the tensor does not have.
    DimOutOfRange {
        /// The collective.
        kind: OpKind,
        /// The dim given.
        dim: usize,
        /// The tensor's shape.
        shape: Vec<usize>,
    },
    /// A split dimension not divisible by the number of members.
    NotDivisible {
        /// The collective.
        kind: OpKind,
        /// The split dimension.
        dim: usize,
        /// Its extent.
        size: usize,
        /// Number of members.
        parts: usize,
    },
    /// A buffer whose shape does not fit the call.
    BadShape {
        /// The call.
        kind: OpKind,
        /// Expected and actual shapes, in words.
        detail: String,
    },
    /// A list form's list with the wrong number of tensors, or one of the wrong shape.
    BadList {
        /// The method (`all_gather_list`, …).
        call: &'static str,
        /// The list's parameter name, and what is wrong with it.
        detail: String,
    },
    /// A hand-built call description (`verify::Program`) lacks a field its kind needs, or has
    /// one it must not have. `Ctx` never makes one.
    MalformedCall {
        /// What is wrong.
        detail: String,
    },
}

impl Violation {
    /// The diagnostic code of this rule.
    pub fn code(&self) -> Code {
        match self {
            Violation::RankOutOfRange { .. } => Code::RW009,
            Violation::NotAMember { .. }
            | Violation::RootNotInGroup { .. }
            | Violation::InvalidGroup { .. }
            | Violation::InvalidSplit { .. } => Code::RW011,
            Violation::SelfP2p { .. } => Code::RW010,
            Violation::OpNotSupported { .. } => Code::RW013,
            Violation::DimOutOfRange { .. } => Code::RW014,
            Violation::NotDivisible { .. } => Code::RW007,
            Violation::BadShape { .. } | Violation::BadList { .. } => Code::RW006,
            Violation::MalformedCall { .. } => Code::RW012,
        }
    }

    /// What to change, in one sentence.
    pub fn help(&self) -> String {
        match self {
            Violation::RankOutOfRange { world, .. } => {
                format!("use a rank below {world}, e.g. `(ctx.rank() + 1) % ctx.world()`")
            }
            Violation::NotAMember { .. } => "only members may call collectives on a group: \
                 guard the call with `if group.contains(ctx.rank())`"
                .into(),
            Violation::RootNotInGroup { .. } => {
                "pick a root among the group's members (roots are global ranks)".into()
            }
            Violation::InvalidGroup { .. } => {
                "list each member once, every one below the world size".into()
            }
            Violation::InvalidSplit { .. } => {
                "list every rank of the world in exactly one part".into()
            }
            Violation::SelfP2p { .. } => {
                "post the send and the matching recv together in one `ctx.batch()`".into()
            }
            Violation::OpNotSupported { .. } => "bitwise ops need an integer dtype; floats \
                 support Sum, Prod, Min, Max, Avg and PreMulSum"
                .into(),
            Violation::DimOutOfRange { shape, .. } => {
                format!("use a dim below {}", shape.len())
            }
            Violation::NotDivisible { dim, parts, .. } => {
                format!("make dim {dim} a multiple of the group size {parts}")
            }
            Violation::BadShape { .. } => {
                "allocate the tensor with the shape the call needs".into()
            }
            Violation::BadList { .. } => "give the list one tensor per member of the group, \
                 each of the shape of the call's single tensor (torch's `[torch.zeros_like(t) \
                 for _ in range(world)]`)"
                .into(),
            Violation::MalformedCall { .. } => {
                "describe calls with `Program::rank`'s builder, which fills in every field".into()
            }
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::RankOutOfRange {
                kind,
                role,
                value,
                world,
            } => write!(
                f,
                "{kind} names {role} {value}, but the world has {} (0..={})",
                ranks(*world),
                world.saturating_sub(1)
            ),
            Violation::NotAMember { kind, members } => write!(
                f,
                "{kind} on group [{}] is called by a non-member",
                RanksFmt(members)
            ),
            Violation::RootNotInGroup {
                kind,
                root,
                members,
            } => write!(
                f,
                "{kind} has root {root}, which is not a member of group [{}]",
                RanksFmt(members)
            ),
            Violation::InvalidGroup { members, problem } => {
                write!(f, "group {members:?} is invalid: {problem}")
            }
            Violation::InvalidSplit { problem } => write!(f, "invalid split: {problem}"),
            Violation::SelfP2p { kind } => write!(
                f,
                "{kind} with itself as the peer outside a batch waits for itself forever"
            ),
            Violation::OpNotSupported { op, dtype } => {
                write!(f, "reduce op {op} is not defined for {dtype}")
            }
            Violation::DimOutOfRange { kind, dim, shape } => write!(
                f,
                "{kind} along dim {dim}, but the tensor {} has {} dimension(s)",
                ShapeFmt(shape),
                shape.len()
            ),
            Violation::NotDivisible {
                kind,
                dim,
                size,
                parts,
            } => write!(
                f,
                "{kind} splits dim {dim} (size {size}) into {parts} equal parts, but {size} is \
                 not divisible by {parts}"
            ),
            Violation::BadShape { kind, detail } => write!(f, "{kind}: {detail}"),
            Violation::BadList { call, detail } => write!(f, "{call}: {detail}"),
            Violation::MalformedCall { detail } => {
                write!(f, "malformed description of a call: {detail}")
            }
        }
    }
}

/// "1 rank", "4 ranks".
fn ranks(n: usize) -> String {
    if n == 1 {
        "1 rank".into()
    } else {
        format!("{n} ranks")
    }
}

/// The rule of one list argument of a list form (see [`Spelling`]): one tensor per member of
/// the group (`parts`), each of shape `element`. `param` is the argument's name.
pub fn list(
    spelling: &Spelling,
    param: &str,
    shapes: &[&[usize]],
    element: &[usize],
    parts: usize,
) -> Result<(), Violation> {
    let call = spelling.name;
    if shapes.len() != parts {
        return Err(Violation::BadList {
            call,
            detail: format!(
                "`{param}` holds {} tensor(s), but it needs one per member of the group ({parts})",
                shapes.len()
            ),
        });
    }
    if let Some((i, s)) = shapes.iter().enumerate().find(|(_, s)| **s != element) {
        return Err(Violation::BadList {
            call,
            detail: format!(
                "`{param}[{i}]` has shape {}, but every tensor of the list must have shape {}",
                ShapeFmt(s),
                ShapeFmt(element)
            ),
        });
    }
    Ok(())
}

/// Validates a group declaration in a world of `world` ranks: its members sorted, or why they
/// cannot form a group (none, one listed twice, one outside the world).
pub fn group(members: &[usize], world: usize) -> Result<Vec<usize>, Violation> {
    let mut sorted = members.to_vec();
    sorted.sort_unstable();
    let problem = if sorted.is_empty() {
        Some("a group needs at least one member".to_string())
    } else if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        Some(format!("rank {} is listed twice", w[0]))
    } else {
        sorted
            .iter()
            .find(|&&r| r >= world)
            .map(|r| format!("rank {r} is outside a world of {}", ranks(world)))
    };
    match problem {
        None => Ok(sorted),
        Some(problem) => Err(Violation::InvalidGroup {
            members: members.to_vec(),
            problem,
        }),
    }
}

/// Validates a split of a world of `world` ranks into `parts` (as `MPI_Comm_split` with static
/// colours): every part a valid group, no rank in two parts, every rank in one.
pub fn split<P: AsRef<[usize]>>(parts: &[P], world: usize) -> Result<(), Violation> {
    let mut seen = vec![false; world];
    for part in parts {
        group(part.as_ref(), world)?;
        for &r in part.as_ref() {
            // In range: `group` checked it.
            if std::mem::replace(&mut seen[r], true) {
                return Err(Violation::InvalidSplit {
                    problem: format!("rank {r} appears in more than one part"),
                });
            }
        }
    }
    match seen.iter().position(|s| !s) {
        Some(missing) => Err(Violation::InvalidSplit {
            problem: format!("rank {missing} is in no part; a split must cover every rank"),
        }),
        None => Ok(()),
    }
}

/// Checks one call made by `rank` in a world of `world` ranks on a group with `members`.
/// `batched` says whether the call is part of a batch (self send/recv is legal only there).
pub fn validate(
    desc: &OpDesc,
    rank: usize,
    world: usize,
    members: &[usize],
    batched: bool,
    aux: Aux<'_>,
) -> Result<(), Violation> {
    let kind = desc.kind;
    // Descriptions made by `Ctx` always have these; hand-built ones (`verify::Program`) might not.
    let needs_peer = kind.is_p2p() || kind.is_rooted();
    if needs_peer != desc.peer.is_some() || kind.is_reducing() != desc.op.is_some() {
        return Err(Violation::MalformedCall {
            detail: format!(
                "a {kind} {} a {} and {} a reduce op",
                if needs_peer { "needs" } else { "has no" },
                if kind.is_p2p() { "peer" } else { "root" },
                if kind.is_reducing() {
                    "needs"
                } else {
                    "has no"
                },
            ),
        });
    }
    if let Some(peer) = desc.peer {
        if peer >= world {
            let role = if kind.is_p2p() { "peer" } else { "root" };
            return Err(Violation::RankOutOfRange {
                kind,
                role,
                value: peer,
                world,
            });
        }
        if kind.is_p2p() && peer == rank && !batched {
            return Err(Violation::SelfP2p { kind });
        }
    }
    if !kind.is_p2p() {
        if members.binary_search(&rank).is_err() {
            return Err(Violation::NotAMember {
                kind,
                members: members.to_vec(),
            });
        }
        if let Some(root) = desc.peer
            && members.binary_search(&root).is_err()
        {
            return Err(Violation::RootNotInGroup {
                kind,
                root,
                members: members.to_vec(),
            });
        }
    }
    if let Some(op) = desc.op
        && !op.supports(desc.dtype)
    {
        return Err(Violation::OpNotSupported {
            op,
            dtype: desc.dtype,
        });
    }
    if kind.has_dim() && desc.dim >= desc.shape.len() {
        return Err(Violation::DimOutOfRange {
            kind,
            dim: desc.dim,
            shape: desc.shape.to_vec(),
        });
    }
    let n = members.len();
    let is_root = desc.peer == Some(rank);
    let bad = |detail: String| Err(Violation::BadShape { kind, detail });
    let es = desc.dtype.size();
    if !fits(&desc.shape, es) {
        return bad(format!(
            "shape {} is larger than any tensor can be",
            ShapeFmt(&desc.shape)
        ));
    }
    // The shapes derived below multiply `dim` by the group size; they must exist too (a
    // wrapped product would make a too-small output look right).
    let concatenates = match kind {
        OpKind::AllGather | OpKind::Gather => true,
        OpKind::Scatter => is_root,
        _ => false,
    };
    let dim_overflows = || {
        desc.shape
            .get(desc.dim)
            .is_some_and(|d| d.checked_mul(n).is_none())
    };
    if concatenates && (dim_overflows() || !fits_dims(with_dim(desc, n, Scale::Times), es)) {
        return bad(format!(
            "{kind} of {} over {n} members along dim {} would need a tensor larger than any \
             can be",
            ShapeFmt(&desc.shape),
            desc.dim
        ));
    }
    if matches!(kind, OpKind::ReduceScatter | OpKind::AllToAll)
        && !desc.shape[desc.dim].is_multiple_of(n)
    {
        return Err(Violation::NotDivisible {
            kind,
            dim: desc.dim,
            size: desc.shape[desc.dim],
            parts: n,
        });
    }
    match kind {
        OpKind::Gather => match (is_root, aux.output) {
            (true, None) => {
                return bad("the root must pass an output tensor (Some(&mut out))".into());
            }
            (false, Some(_)) => {
                return bad(format!(
                    "only the root (rank {}) receives the gathered tensor; pass None on \
                     other ranks",
                    desc.peer.unwrap_or_default()
                ));
            }
            _ => {}
        },
        OpKind::Scatter => match (is_root, aux.root_input) {
            (true, None) => {
                return bad("the root must pass the tensor to scatter (Some(&x))".into());
            }
            (false, Some(_)) => {
                return bad(format!(
                    "only the root (rank {}) provides the tensor to scatter; pass None on \
                     other ranks",
                    desc.peer.unwrap_or_default()
                ));
            }
            (true, Some(input)) if !input.iter().copied().eq(with_dim(desc, n, Scale::Times)) => {
                let want = concatenated(desc, n);
                return bad(format!(
                    "the root's input has shape {}, but scattering {} parts of {} along dim {} \
                     needs {}",
                    ShapeFmt(input),
                    n,
                    ShapeFmt(&desc.shape),
                    desc.dim,
                    ShapeFmt(&want)
                ));
            }
            _ => {}
        },
        _ => {}
    }
    // Compared dimension by dimension, without building the expected shape: a small call's
    // whole validation costs about what building it did.
    if let Some(got) = aux.output
        && let Some(scale) = Scale::of_output(kind)
        && !got.iter().copied().eq(with_dim(desc, n, scale))
    {
        let want = expected_output(desc, n).unwrap_or_default();
        return bad(format!(
            "the output has shape {}, but {} of {} over {} members along dim {} gives {}",
            ShapeFmt(got),
            kind,
            ShapeFmt(&desc.shape),
            n,
            desc.dim,
            ShapeFmt(&want)
        ));
    }
    Ok(())
}

/// Whether a tensor of `shape` with `elem_size`-byte elements can exist (its byte size fits
/// an allocation, `isize::MAX`).
pub fn fits(shape: &[usize], elem_size: usize) -> bool {
    fits_dims(shape.iter().copied(), elem_size)
}

/// [`fits`] for a shape given dimension by dimension.
fn fits_dims(dims: impl Iterator<Item = usize> + Clone, elem_size: usize) -> bool {
    dims.clone()
        .try_fold(elem_size, |acc, d| acc.checked_mul(d))
        .is_some_and(|bytes| bytes <= isize::MAX as usize)
        || dims.into_iter().any(|d| d == 0)
}

/// What a call over `n` members does to dimension `dim` of its shape.
#[derive(Clone, Copy)]
enum Scale {
    /// Concatenates: `n` times as long (saturating, as [`concatenated`]).
    Times,
    /// Splits: an `n`th.
    Part,
    /// Keeps it.
    Same,
}

impl Scale {
    /// How the separate output of `kind` relates to its shape (as [`expected_output`]).
    fn of_output(kind: OpKind) -> Option<Scale> {
        match kind {
            OpKind::Gather | OpKind::AllGather => Some(Scale::Times),
            OpKind::ReduceScatter => Some(Scale::Part),
            OpKind::AllToAll => Some(Scale::Same),
            _ => None,
        }
    }
}

/// `desc.shape` with dimension `dim` scaled for `n` members, dimension by dimension.
fn with_dim(desc: &OpDesc, n: usize, scale: Scale) -> impl Iterator<Item = usize> + Clone + '_ {
    desc.shape.iter().enumerate().map(move |(i, &d)| {
        if i != desc.dim {
            return d;
        }
        match scale {
            Scale::Times => d.saturating_mul(n),
            Scale::Part => d / n.max(1),
            Scale::Same => d,
        }
    })
}

/// `desc.shape` with dimension `dim` multiplied by `n` (saturating: [`validate`] refuses a call
/// whose concatenation overflows, see [`fits`]).
pub fn concatenated(desc: &OpDesc, n: usize) -> Shape {
    with_dim(desc, n, Scale::Times).collect()
}

/// The shape of the separate output of a call over `n` members, for calls that have one.
pub fn expected_output(desc: &OpDesc, n: usize) -> Option<Shape> {
    Scale::of_output(desc.kind).map(|scale| with_dim(desc, n, scale).collect())
}

/// Row-major geometry of a split or concatenation along `dim` of `shape`: `outer` rows of
/// `row` elements each (everything from `dim` inward).
pub fn rows(shape: &[usize], dim: usize) -> (usize, usize) {
    // Validated shapes fit in memory, so these products cannot overflow.
    let outer = shape[..dim.min(shape.len())].iter().product();
    let row = shape[dim.min(shape.len())..].iter().product();
    (outer, row)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CallSite, GroupId};
    use crate::{DType, ReduceOp};
    use proptest::prelude::*;

    proptest! {
        /// The shapes `validate` compares outputs with (and names in its errors), against a
        /// reference written out per kind: the dimension `dim` concatenated (saturating), split
        /// or kept, the others as they are — overflowing dimensions and `dim` past the shape
        /// included; and whether the concatenated shape's bytes fit.
        #[test]
        fn output_shapes_match_a_reference(
            shape in prop::collection::vec(prop_oneof![0usize..7, Just(usize::MAX / 3)], 0..4),
            dim in 0usize..5,
            n in 0usize..9,
        ) {
            use OpKind::{AllGather, AllToAll, Gather, ReduceScatter};
            let scaled = |f: &dyn Fn(usize) -> usize| -> Vec<usize> {
                let mut s = shape.clone();
                if let Some(d) = s.get_mut(dim) {
                    *d = f(*d);
                }
                s
            };
            let times = scaled(&|d| d.saturating_mul(n));
            for kind in [Gather, AllGather, ReduceScatter, AllToAll] {
                let desc = OpDesc {
                    kind,
                    group: GroupId::WORLD,
                    peer: None,
                    op: Some(ReduceOp::Sum),
                    dtype: DType::F32,
                    shape: Shape::from_slice(&shape),
                    dim,
                    site: CallSite::caller(),
                };
                let want = match kind {
                    Gather | AllGather => times.clone(),
                    ReduceScatter => scaled(&|d| d / n.max(1)),
                    _ => shape.clone(),
                };
                let got = expected_output(&desc, n).map(|s| s.to_vec());
                prop_assert_eq!(got, Some(want));
                prop_assert_eq!(concatenated(&desc, n).to_vec(), times.clone());
            }
            // Whether the bytes fit, in wide arithmetic.
            let bytes = times.iter().try_fold(4u128, |b, &d| b.checked_mul(d as u128));
            let fit = bytes.is_some_and(|b| b <= isize::MAX as u128) || times.contains(&0);
            prop_assert_eq!(fits_dims(times.iter().copied(), 4), fit);
        }
    }

    #[test]
    fn a_wrong_output_shape_names_the_expected_one() {
        let desc = OpDesc {
            kind: OpKind::AllGather,
            group: GroupId::WORLD,
            peer: None,
            op: None,
            dtype: DType::F32,
            shape: Shape::from_slice(&[2, 3]),
            dim: 1,
            site: CallSite::caller(),
        };
        let aux = |output| Aux {
            output,
            root_input: None,
        };
        let members = [0, 1, 2];
        assert!(validate(&desc, 0, 3, &members, false, aux(Some(&[2, 9]))).is_ok());
        let err = validate(&desc, 0, 3, &members, false, aux(Some(&[6, 3])))
            .expect_err("[6, 3] is not [2, 9]");
        assert!(err.to_string().contains("[2, 9]"), "{err}");
    }
}
