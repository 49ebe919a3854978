//! Findings: each problem the simulation sees, with a message that speaks to the user, before
//! findings from several ranks are merged into diagnostics.

use super::diag::{Code, SiteRef, Verdict, describe_ranks};
use super::program::{Item, Program, VOp};
use super::sim::OpRef;
use crate::error::Error;
use crate::model::{OpKind, RanksFmt, ShapeFmt};

/// How a finding's message is rendered once findings from several ranks are merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Render {
    /// `"{ranks}: {message}"`.
    Prefixed,
    /// The message already names its ranks.
    Exact,
}

/// One problem seen from one or more ranks, before merging.
#[derive(Clone, Debug)]
pub(super) struct Finding {
    pub code: Code,
    pub verdict: Verdict,
    pub ranks: Vec<usize>,
    pub message: String,
    pub render: Render,
    pub primary: SiteRef,
    pub secondary: Vec<(SiteRef, String)>,
    pub help: String,
}

impl Finding {
    /// A problem of rank `r` at the call `op` alone, named with the ranks it merges with.
    pub(super) fn at(
        code: Code,
        verdict: Verdict,
        r: usize,
        op: &VOp,
        message: String,
        help: String,
    ) -> Self {
        Finding {
            code,
            verdict,
            ranks: vec![r],
            message,
            render: Render::Prefixed,
            primary: site(op),
            secondary: Vec::new(),
            help,
        }
    }
}

pub(super) fn site(op: &VOp) -> SiteRef {
    SiteRef {
        id: op.id,
        site: op.desc.site,
    }
}

/// "rank 2 calls", "ranks 0, 1 call": ranks as a person would name them, with the verb agreeing.
pub(super) fn subject(ranks: &[usize], world: usize, base: &str) -> String {
    format!("{} {}", describe_ranks(ranks, world), verb(ranks, base))
}

/// A verb agreeing with the number of ranks it is said of: `call` → "calls" for one rank.
pub(super) fn verb(ranks: &[usize], base: &str) -> String {
    match (ranks.len(), base) {
        (1, b) if b.ends_with('h') => format!("{b}es"),
        (1, b) => format!("{b}s"),
        (_, b) => b.to_string(),
    }
}

/// Validates a declared group: sorted members, or `None` with a finding.
pub(super) fn check_group(
    p: &Program,
    i: usize,
    given: &[usize],
    findings: &mut Vec<Finding>,
) -> Option<Vec<usize>> {
    let mut m = given.to_vec();
    m.sort_unstable();
    let problem = if m.is_empty() {
        Some("it has no members".to_string())
    } else if let Some(w) = m.windows(2).find(|w| w[0] == w[1]) {
        Some(format!("rank {} is listed twice", w[0]))
    } else {
        m.iter()
            .find(|&&r| r >= p.world)
            .map(|r| format!("rank {r} is outside a world of {}", p.world))
    };
    let Some(problem) = problem else {
        return Some(m);
    };
    // Point at the first call that uses the group, if any does.
    let user = p
        .ranks
        .iter()
        .flatten()
        .flat_map(Item::ops)
        .find(|o| o.desc.group.0 as usize == i && !o.desc.kind.is_p2p());
    if let Some(op) = user {
        findings.push(Finding {
            code: Code::RW011,
            verdict: Verdict::Misuse,
            ranks: Vec::new(),
            message: format!("group {given:?} is invalid: {problem}"),
            render: Render::Exact,
            primary: site(op),
            secondary: Vec::new(),
            help: "list each member once, every one below the world size".into(),
        });
    }
    None
}

/// A rule broken by one call, as a finding whose message does not depend on the rank (so the
/// same mistake on many ranks merges into one diagnostic).
pub(super) fn misuse_finding(err: &Error, r: usize, op: &VOp) -> Finding {
    let kind = op.desc.kind;
    let (code, message, help) = match err {
        Error::RankOutOfRange { role, value, world, .. } => (
            Code::RW009,
            format!("{kind} names {role} {value}, but the world has {world} ranks (0..={})", world.saturating_sub(1)),
            format!("use a rank below {world}, e.g. `(ctx.rank() + 1) % ctx.world()`"),
        ),
        Error::NotAMember { members, .. } => (
            Code::RW011,
            format!("{kind} on group [{}] is called by a non-member", RanksFmt(members)),
            "only members may call collectives on a group: guard the call with `if group.contains(ctx.rank())`".into(),
        ),
        Error::RootNotInGroup { root, members, .. } => (
            Code::RW011,
            format!("{kind} has root {root}, which is not a member of group [{}]", RanksFmt(members)),
            "pick a root among the group's members (roots are global ranks)".into(),
        ),
        Error::SelfP2p { .. } => (
            Code::RW010,
            format!("{kind} with itself as the peer outside a batch waits for itself forever"),
            "post the send and the matching recv together in one `ctx.batch()`".into(),
        ),
        Error::OpNotSupported { op: rop, dtype, .. } => (
            Code::RW013,
            format!("reduce op {rop} is not defined for {dtype}"),
            "bitwise ops need an integer dtype; floats support Sum, Prod, Min, Max, Avg and PreMulSum".into(),
        ),
        Error::DimOutOfRange { dim, shape, .. } => (
            Code::RW014,
            format!("{kind} along dim {dim}, but the tensor {} has {} dimension(s)", ShapeFmt(shape), shape.len()),
            format!("use a dim below {}", shape.len()),
        ),
        Error::NotDivisible { dim, size, parts, .. } => (
            Code::RW007,
            format!("{kind} splits dim {dim} (size {size}) into {parts} equal parts, but {size} is not divisible by {parts}"),
            format!("make dim {dim} a multiple of the group size {parts}"),
        ),
        Error::BadShape { detail, .. } => (
            Code::RW006,
            format!("{kind}: {detail}"),
            "allocate the tensor with the shape the call needs".into(),
        ),
        Error::MalformedCall { detail, .. } => (
            Code::RW012,
            format!("malformed description of a call: {detail}"),
            "describe calls with `Program::rank`'s builder, which fills in every field".into(),
        ),
        other => (Code::RW006, other.to_string(), String::new()),
    };
    Finding::at(code, Verdict::Misuse, r, op, message, help)
}

pub(super) fn p2p_mismatch(s: OpRef, send: &VOp, d: OpRef, recv: &VOp) -> Finding {
    let dtype_differs = send.desc.dtype != recv.desc.dtype;
    let what = |o: &VOp| format!("{}{}", o.desc.dtype, ShapeFmt(&o.desc.shape));
    Finding {
        code: if dtype_differs {
            Code::RW008
        } else {
            Code::RW006
        },
        verdict: Verdict::Mismatch,
        ranks: vec![s.rank as usize, d.rank as usize],
        message: format!(
            "a recv of {} here meets a send of {} ({} differ)",
            what(recv),
            what(send),
            if dtype_differs {
                "dtypes"
            } else {
                "element counts"
            }
        ),
        render: Render::Prefixed,
        primary: site(recv),
        secondary: vec![(site(send), "the matching send".into())],
        help:
            "the k-th send from one rank to another meets the k-th recv there; give both the same \
               dtype and element count"
                .into(),
    }
}

/// An op whose counterpart can never come: the awaited ranks finished without it.
pub(super) fn never_matched(
    world: usize,
    r: usize,
    op: &VOp,
    finished: &[usize],
    members: &[usize],
) -> Finding {
    let who = describe_ranks(finished, world);
    let (code, message, help) = match op.desc.kind {
        OpKind::Send => (
            Code::RW002,
            format!(
                "{} is never received: {who} {} without a matching recv",
                op.desc.summary(),
                verb(finished, "finish")
            ),
            "add the matching `recv` on the peer, or remove this send".to_string(),
        ),
        OpKind::Recv => (
            Code::RW003,
            format!(
                "{} is never sent: {who} {} without a matching send",
                op.desc.summary(),
                verb(finished, "finish")
            ),
            "add the matching `send` on the peer, or remove this recv".to_string(),
        ),
        _ => (
            Code::RW005,
            format!(
                "{} on group [{}] waits forever: {who} {} without calling it",
                op.desc.summary(),
                RanksFmt(members),
                verb(finished, "finish"),
            ),
            "every member must make the same collective calls: call it on every member of \
                 the group (a collective behind `if rank == …` is the usual cause)"
                .to_string(),
        ),
    };
    Finding::at(code, Verdict::Hang, r, op, message, help)
}
