//! The rules one call must satisfy on its own: ranks in range, membership, reduce op against
//! dtype, dims and divisibility, and the shapes of outputs.
//!
//! They need only the call's description, the world size and the group's members, so the
//! runtime applies them before every call and the verifier applies the same functions to whole
//! programs.

use crate::error::{Error, Result};
use crate::model::{OpDesc, OpKind, Shape, ShapeFmt};

/// Shapes a call passes besides `desc.shape` (see [`OpDesc`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Aux<'a> {
    /// The output buffer's shape, for calls with a separate output (`None`: no output given).
    pub output: Option<&'a [usize]>,
    /// The root's input to `scatter` (`None` on other ranks).
    pub root_input: Option<&'a [usize]>,
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
) -> Result<()> {
    let site = desc.site;
    let kind = desc.kind;
    // Descriptions made by `Ctx` always have these; hand-built ones (`verify::Program`) might not.
    let needs_peer = kind.is_p2p() || kind.is_rooted();
    if needs_peer != desc.peer.is_some() || kind.is_reducing() != desc.op.is_some() {
        return Err(Error::MalformedCall {
            site,
            rank,
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
            return Err(Error::RankOutOfRange {
                site,
                rank,
                role,
                value: peer,
                world,
            });
        }
        if kind.is_p2p() && peer == rank && !batched {
            return Err(Error::SelfP2p { site, rank, kind });
        }
    }
    if !kind.is_p2p() {
        if members.binary_search(&rank).is_err() {
            return Err(Error::NotAMember {
                site,
                rank,
                kind,
                members: members.to_vec(),
            });
        }
        if let Some(root) = desc.peer
            && members.binary_search(&root).is_err()
        {
            return Err(Error::RootNotInGroup {
                site,
                rank,
                kind,
                root,
                members: members.to_vec(),
            });
        }
    }
    if let Some(op) = desc.op
        && !op.supports(desc.dtype)
    {
        return Err(Error::OpNotSupported {
            site,
            rank,
            op,
            dtype: desc.dtype,
        });
    }
    if kind.has_dim() && desc.dim >= desc.shape.len() {
        return Err(Error::DimOutOfRange {
            site,
            rank,
            kind,
            dim: desc.dim,
            shape: desc.shape.to_vec(),
        });
    }
    let n = members.len();
    let is_root = desc.peer == Some(rank);
    let bad = |detail: String| {
        Err(Error::BadShape {
            site,
            rank,
            kind,
            detail,
        })
    };
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
    let dim_overflows = desc
        .shape
        .get(desc.dim)
        .is_some_and(|d| d.checked_mul(n).is_none());
    if concatenates && (dim_overflows || !fits(&concatenated(desc, n), es)) {
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
        return Err(Error::NotDivisible {
            site,
            rank,
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
            (true, Some(input)) => {
                let want = concatenated(desc, n);
                if input != want.as_slice() {
                    return bad(format!(
                        "the root's input has shape {}, but scattering {} parts of {} along dim \
                         {} needs {}",
                        ShapeFmt(input),
                        n,
                        ShapeFmt(&desc.shape),
                        desc.dim,
                        ShapeFmt(&want)
                    ));
                }
            }
            _ => {}
        },
        _ => {}
    }
    if let (Some(want), Some(got)) = (expected_output(desc, n), aux.output)
        && got != want.as_slice()
    {
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
    shape
        .iter()
        .try_fold(elem_size, |acc, &d| acc.checked_mul(d))
        .is_some_and(|bytes| bytes <= isize::MAX as usize)
        || shape.contains(&0)
}

/// `desc.shape` with dimension `dim` multiplied by `n` (saturating: [`validate`] refuses a call
/// whose concatenation overflows, see [`fits`]).
pub fn concatenated(desc: &OpDesc, n: usize) -> Shape {
    let mut s = desc.shape.clone();
    if let Some(d) = s.get_mut(desc.dim) {
        *d = d.saturating_mul(n);
    }
    s
}

/// The shape of the separate output of a call over `n` members, for calls that have one.
pub fn expected_output(desc: &OpDesc, n: usize) -> Option<Shape> {
    match desc.kind {
        OpKind::Gather | OpKind::AllGather => Some(concatenated(desc, n)),
        OpKind::ReduceScatter => {
            let mut s = desc.shape.clone();
            if let Some(d) = s.get_mut(desc.dim) {
                *d /= n.max(1);
            }
            Some(s)
        }
        OpKind::AllToAll => Some(desc.shape.clone()),
        _ => None,
    }
}

/// Row-major geometry of a split or concatenation along `dim` of `shape`: `outer` rows of
/// `row` elements each (everything from `dim` inward).
pub(crate) fn rows(shape: &[usize], dim: usize) -> (usize, usize) {
    // Validated shapes fit in memory, so these products cannot overflow.
    let outer = shape[..dim.min(shape.len())].iter().product();
    let row = shape[dim.min(shape.len())..].iter().product();
    (outer, row)
}
