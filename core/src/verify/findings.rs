//! Findings: each problem the simulation sees, with a message that speaks to the user, before
//! findings from several ranks are merged into diagnostics.

use super::diag::{Code, SiteRef, Verdict, describe_ranks};
use super::program::{Item, Program, VOp};
use super::sim::OpRef;
use crate::model::{OpKind, RanksFmt, ShapeFmt};
use crate::rules::{self, Violation};

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
    let violation = match rules::group(given, p.world) {
        Ok(sorted) => return Some(sorted),
        Err(v) => v,
    };
    // Point at the first call that uses the group, if any does.
    let user = p
        .ranks
        .iter()
        .flatten()
        .flat_map(Item::ops)
        .find(|o| o.desc.group.0 as usize == i && !o.desc.kind.is_p2p());
    if let Some(op) = user {
        let mut f = violation_finding(&violation, 0, op);
        f.ranks.clear();
        f.render = Render::Exact;
        findings.push(f);
    }
    None
}

/// A rule broken by one call, as a finding (the violation's text does not depend on the rank,
/// so the same mistake on many ranks merges into one diagnostic).
pub(super) fn violation_finding(v: &Violation, r: usize, op: &VOp) -> Finding {
    Finding::at(v.code(), Verdict::Misuse, r, op, v.to_string(), v.help())
}

/// `free`: an element type is left to the builder (then only the counts are compared).
pub(super) fn p2p_mismatch(s: OpRef, send: &VOp, d: OpRef, recv: &VOp, free: bool) -> Finding {
    let dtype_differs = !free && send.desc.dtype != recv.desc.dtype;
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
