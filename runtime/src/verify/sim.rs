//! The checker: simulate every rank under rendezvous semantics, match ops, and explain every
//! rank that cannot finish.
//!
//! Each rank posts its current item (an op, or a batch posted whole) and advances when every op
//! of it is matched. Sends and receives match in order per (sender, receiver) pair; collectives
//! match in order per communicator once every member has posted its next one. The simulation is
//! a worklist over ranks, so each op is posted and matched once: linear in the program size.
//!
//! Problems are recorded as *findings* and never stop the simulation: a mismatched step still
//! counts as matched (so later, independent problems are found), a rank whose call breaks a
//! rule stops there (as it would at run time, with an error), and anything that only happens
//! *because* of an earlier problem — waiting on a stopped rank, or on a communicator whose
//! collectives already disagreed — is not reported again.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use super::diag::{Code, SiteRef, Verdict, describe_ranks};
use super::program::{Item, Program, VOp};
use super::schedule::{Match, Schedule};
use crate::error::Error;
use crate::model::{GroupId, OpKind, RanksFmt, ShapeFmt};
use crate::rules::{self, Aux};

/// A reference to one op: rank, item index, op index within the item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct OpRef {
    pub rank: u32,
    pub item: u32,
    pub op: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RankState {
    Active,
    Finished,
    /// Stopped at a call that breaks a rule (it would return `Err` there).
    Stopped,
}

struct RankSim {
    pc: usize,
    /// Unmatched ops of the current item.
    pending: usize,
    state: RankState,
}

#[derive(Default)]
struct Chan {
    sends: VecDeque<OpRef>,
    recvs: VecDeque<OpRef>,
}

struct GroupSim {
    /// Sorted members, or `None` if the group is invalid (reported once, up front).
    members: Option<Vec<usize>>,
    queues: Vec<VecDeque<OpRef>>,
    nonempty: usize,
    step: u64,
    /// Members already disagreed on a step: later steps are matched unchecked, and waits on
    /// this group are consequences, not new problems.
    poisoned: bool,
}

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

pub(super) struct Sim<'p> {
    p: &'p Program,
    ranks: Vec<RankSim>,
    chans: Vec<Chan>,
    chan_index: FxHashMap<(u32, u32), u32>,
    groups: Vec<GroupSim>,
    work: Vec<usize>,
    pub findings: Vec<Finding>,
    pub schedule: Schedule,
}

fn site(op: &VOp) -> SiteRef {
    SiteRef {
        id: op.id,
        site: op.desc.site,
    }
}

impl<'p> Sim<'p> {
    pub fn new(p: &'p Program) -> Self {
        let mut findings = Vec::new();
        let groups = p
            .groups
            .iter()
            .enumerate()
            .map(|(i, given)| {
                let members = check_group(p, i, given, &mut findings);
                let n = members.as_ref().map_or(0, Vec::len);
                GroupSim {
                    members,
                    queues: (0..n).map(|_| VecDeque::new()).collect(),
                    nonempty: 0,
                    step: 0,
                    poisoned: false,
                }
            })
            .collect();
        Sim {
            p,
            ranks: (0..p.world)
                .map(|_| RankSim {
                    pc: 0,
                    pending: 0,
                    state: RankState::Active,
                })
                .collect(),
            chans: Vec::new(),
            chan_index: FxHashMap::default(),
            groups,
            work: Vec::new(),
            findings,
            schedule: Schedule::new(p),
        }
    }

    fn op(&self, r: OpRef) -> &'p VOp {
        &self.p.ranks[r.rank as usize][r.item as usize].ops()[r.op as usize]
    }

    fn chan(&mut self, src: usize, dst: usize) -> usize {
        let next = self.chans.len() as u32;
        let idx = *self
            .chan_index
            .entry((src as u32, dst as u32))
            .or_insert(next);
        if idx == next {
            self.chans.push(Chan::default());
        }
        idx as usize
    }

    /// Runs the simulation to quiescence, then explains every rank that did not finish.
    pub fn run(&mut self) {
        for r in 0..self.p.world {
            self.post(r);
        }
        while let Some(r) = self.work.pop() {
            self.ranks[r].pc += 1;
            self.post(r);
        }
        self.explain_blocked();
    }

    /// Posts rank `r`'s current item (finishing the rank if it has none left).
    fn post(&mut self, r: usize) {
        let items = &self.p.ranks[r];
        let pc = self.ranks[r].pc;
        let Some(item) = items.get(pc) else {
            self.ranks[r].state = RankState::Finished;
            return;
        };
        let ops = item.ops();
        // Check every op of the item before posting any: a rank whose call is invalid returns
        // an error at that call and never posts it.
        for op in ops {
            if let Some(f) = self.misuse(r, op, item.is_batch()) {
                self.findings.push(f);
                self.ranks[r].state = RankState::Stopped;
                return;
            }
        }
        self.ranks[r].pending = ops.len();
        if ops.is_empty() {
            self.work.push(r);
            return;
        }
        for (i, op) in ops.iter().enumerate() {
            let at = OpRef {
                rank: r as u32,
                item: pc as u32,
                op: i as u32,
            };
            match op.desc.kind {
                OpKind::Send => {
                    let c = self.chan(r, op.desc.peer.unwrap_or(0));
                    self.chans[c].sends.push_back(at);
                    self.match_p2p(c);
                }
                OpKind::Recv => {
                    let c = self.chan(op.desc.peer.unwrap_or(0), r);
                    self.chans[c].recvs.push_back(at);
                    self.match_p2p(c);
                }
                _ => {
                    let g = &mut self.groups[op.desc.group.0 as usize];
                    let me = g
                        .members
                        .as_ref()
                        .and_then(|m| m.binary_search(&r).ok())
                        .unwrap_or(0);
                    g.queues[me].push_back(at);
                    if g.queues[me].len() == 1 {
                        g.nonempty += 1;
                    }
                    if g.nonempty == g.queues.len() {
                        self.match_collective(op.desc.group);
                    }
                }
            }
        }
    }

    /// The rule `op` breaks on its own, as a finding (`None` if it breaks none).
    fn misuse(&self, r: usize, op: &VOp, batched: bool) -> Option<Finding> {
        let members: &[usize] = if op.desc.kind.is_p2p() {
            &[]
        } else {
            match self
                .groups
                .get(op.desc.group.0 as usize)
                .map(|g| &g.members)
            {
                Some(Some(m)) => m,
                // An invalid group was reported when it was declared; using it stops the rank.
                Some(None) => return Some(self.undeclared(r, op, "an invalid group")),
                None => return Some(self.undeclared(r, op, "a group that was never declared")),
            }
        };
        let aux = Aux {
            output: op.output.as_deref(),
            root_input: op.root_input.as_deref(),
        };
        let err = rules::validate(&op.desc, r, self.p.world, members, batched, aux).err()?;
        Some(misuse_finding(&err, r, op))
    }

    fn undeclared(&self, r: usize, op: &VOp, what: &str) -> Finding {
        Finding {
            code: Code::RW011,
            verdict: Verdict::Misuse,
            ranks: vec![r],
            message: format!("{} uses {what} (id {})", op.desc.kind, op.desc.group.0),
            render: Render::Prefixed,
            primary: site(op),
            secondary: Vec::new(),
            help: "create the group with `ctx.new_group(members)` on every member first".into(),
        }
    }

    fn complete(&mut self, r: OpRef) {
        let rs = &mut self.ranks[r.rank as usize];
        rs.pending -= 1;
        if rs.pending == 0 {
            self.work.push(r.rank as usize);
        }
    }

    fn match_p2p(&mut self, c: usize) {
        while let (Some(&s), Some(&d)) = (self.chans[c].sends.front(), self.chans[c].recvs.front())
        {
            self.chans[c].sends.pop_front();
            self.chans[c].recvs.pop_front();
            let (send, recv) = (self.op(s), self.op(d));
            if send.desc.dtype != recv.desc.dtype || send.desc.numel() != recv.desc.numel() {
                self.findings.push(p2p_mismatch(s, send, d, recv));
            }
            self.schedule.set(
                s,
                Match::P2p {
                    peer: d.rank,
                    item: d.item,
                    op: d.op,
                },
            );
            self.schedule.set(
                d,
                Match::P2p {
                    peer: s.rank,
                    item: s.item,
                    op: s.op,
                },
            );
            self.complete(s);
            self.complete(d);
        }
    }

    fn match_collective(&mut self, gid: GroupId) {
        loop {
            let g = &mut self.groups[gid.0 as usize];
            if g.nonempty < g.queues.len() || g.queues.is_empty() {
                return;
            }
            let step = g.step;
            g.step += 1;
            let mut refs = Vec::with_capacity(g.queues.len());
            for q in g.queues.iter_mut() {
                refs.extend(q.pop_front());
                if q.is_empty() {
                    g.nonempty -= 1;
                }
            }
            if !g.poisoned {
                if let Some(f) = self.collective_mismatch(gid, step, &refs) {
                    self.groups[gid.0 as usize].poisoned = true;
                    self.findings.push(f);
                }
            }
            for &r in &refs {
                self.schedule.set(r, Match::Collective { group: gid, step });
                self.complete(r);
            }
        }
    }

    /// Whether the members' ops for one step agree; if not, a finding naming both sides, and
    /// recognising the classic cause — a member skipping a collective behind a condition.
    fn collective_mismatch(&self, gid: GroupId, step: u64, refs: &[OpRef]) -> Option<Finding> {
        let ops: Vec<&VOp> = refs.iter().map(|&r| self.op(r)).collect();
        if ops.iter().all(|o| o.desc.agrees_with(&ops[0].desc)) {
            return None;
        }
        // Split members into classes of agreeing calls; the largest is "the others".
        let mut classes: Vec<Vec<usize>> = Vec::new();
        for (i, o) in ops.iter().enumerate() {
            match classes
                .iter_mut()
                .find(|c| ops[c[0]].desc.agrees_with(&o.desc))
            {
                Some(c) => c.push(i),
                None => classes.push(vec![i]),
            }
        }
        let major = (0..classes.len())
            .max_by_key(|&c| (classes[c].len(), std::cmp::Reverse(classes[c][0])))?;
        let minor = (0..classes.len()).find(|&c| c != major)?;
        let rank_of = |i: usize| refs[i].rank as usize;
        let ranks_in = |c: usize| classes[c].iter().map(|&i| rank_of(i)).collect::<Vec<_>>();
        let (a, b) = (&ops[classes[minor][0]], &ops[classes[major][0]]);
        let (ra, rb) = (ranks_in(minor), ranks_in(major));
        let world = self.p.world;
        let members = self.groups[gid.0 as usize]
            .members
            .clone()
            .unwrap_or_default();
        let mut all: Vec<usize> = refs.iter().map(|r| r.rank as usize).collect();
        all.sort_unstable();
        let group = format!("group [{}]", RanksFmt(&members));
        let next_agrees = |class: usize, other: &VOp| {
            classes[class].iter().all(|&i| {
                self.next_collective(refs[i], gid)
                    .is_some_and(|n| n.desc.agrees_with(&other.desc))
            })
        };
        // A member that skipped a collective reaches its *next* one while the others are still at
        // this one: the others' next call then matches what the skipping member does now.
        // As (callers of the skipped op, members that skip it):
        let skip = if next_agrees(major, a) {
            Some((major, minor)) // the others call `a` next: the minority skipped `b`
        } else if next_agrees(minor, b) {
            Some((minor, major)) // the minority calls `b` next: the others skipped `a`
        } else {
            None
        };
        if let Some((callers, skippers)) = skip {
            let (called, by) = (&ops[classes[callers][0]], ranks_in(callers));
            let skipped_by = ranks_in(skippers);
            let instead = &ops[classes[skippers][0]];
            return Some(Finding {
                code: Code::RW005,
                verdict: Verdict::Mismatch,
                ranks: all,
                message: format!(
                    "{} {} here on {group} (collective step {step}), but {} it and {} {} \
                     instead, so every later collective on the group pairs up wrongly",
                    subject(&by, world, "call"),
                    called.desc.summary(),
                    subject(&skipped_by, world, "skip"),
                    verb(&skipped_by, "reach"),
                    instead.desc.summary(),
                ),
                render: Render::Exact,
                primary: site(called),
                secondary: vec![(
                    site(instead),
                    format!("{} this instead", subject(&skipped_by, world, "reach")),
                )],
                help: "every member must make the same collective calls in the same order: call \
                       it on every member of the group, or on none (a collective behind \
                       `if rank == …` is the usual cause)"
                    .into(),
            });
        }
        let (code, what) =
            if a.desc.kind != b.desc.kind || a.desc.peer != b.desc.peer || a.desc.op != b.desc.op {
                (Code::RW004, "calls")
            } else if a.desc.dtype != b.desc.dtype {
                (Code::RW008, "dtypes")
            } else {
                (Code::RW006, "shapes")
            };
        Some(Finding {
            code,
            verdict: Verdict::Mismatch,
            ranks: all,
            message: format!(
                "members of {group} disagree at collective step {step} ({what} differ): {} {} \
                 here, but {} {}",
                subject(&ra, world, "call"),
                a.desc.summary(),
                subject(&rb, world, "call"),
                b.desc.summary(),
            ),
            render: Render::Exact,
            primary: site(a),
            secondary: vec![(site(b), format!("{} this", subject(&rb, world, "call")))],
            help: match code {
                Code::RW004 => {
                    "every member must reach the same collective, with the same root and \
                                reduce op, in the same order"
                        .into()
                }
                Code::RW008 => "use the same dtype on every member".into(),
                _ => "every member must pass a tensor of the same shape (and the same dim)".into(),
            },
        })
    }

    /// The collective on `gid` that rank `at.rank` makes after the op `at`, in program order.
    fn next_collective(&self, at: OpRef, gid: GroupId) -> Option<&'p VOp> {
        let items = &self.p.ranks[at.rank as usize];
        let first = &items[at.item as usize].ops()[at.op as usize + 1..];
        first
            .iter()
            .chain(items[at.item as usize + 1..].iter().flat_map(Item::ops))
            .find(|o| !o.desc.kind.is_p2p() && o.desc.group == gid)
    }

    /// After quiescence: every active rank that did not finish is blocked. Report root causes —
    /// waits on finished ranks (RW002, RW003, RW005) and cycles of waits (RW001) — and nothing
    /// that only follows from another problem.
    fn explain_blocked(&mut self) {
        let world = self.p.world;
        // Per blocked rank: the ops it waits in, and for whom.
        let mut edges: Vec<Vec<(usize, OpRef)>> = vec![Vec::new(); world];
        for (r, out) in edges.iter_mut().enumerate() {
            if self.ranks[r].state != RankState::Active {
                continue;
            }
            let pc = self.ranks[r].pc;
            for (i, op) in self.p.ranks[r][pc].ops().iter().enumerate() {
                let at = OpRef {
                    rank: r as u32,
                    item: pc as u32,
                    op: i as u32,
                };
                if self.schedule.get(at).is_some() {
                    continue;
                }
                let Some(awaited) = self.awaited(op) else {
                    continue;
                }; // a consequence
                // A rank that finished without the matching call is a problem of its own, even if
                // another awaited rank stopped on an error (at run time either may be seen first).
                let finished: Vec<usize> = awaited
                    .iter()
                    .copied()
                    .filter(|&w| self.ranks[w].state == RankState::Finished)
                    .collect();
                if !finished.is_empty() {
                    self.findings
                        .push(never_matched(world, r, op, &finished, &self.groups));
                    continue;
                }
                if awaited
                    .iter()
                    .any(|&w| self.ranks[w].state == RankState::Stopped)
                {
                    continue; // that rank's own error explains this wait
                }
                out.extend(awaited.into_iter().map(|w| (w, at)));
            }
        }
        for cycle in cycles(&edges) {
            let f = self.deadlock(&cycle);
            self.findings.push(f);
        }
    }

    /// The ranks an unmatched op waits for, or `None` if the wait is a consequence of an
    /// earlier, reported problem (a communicator whose members already disagreed).
    fn awaited(&self, op: &VOp) -> Option<Vec<usize>> {
        match op.desc.kind {
            OpKind::Send | OpKind::Recv => Some(vec![op.desc.peer.unwrap_or(0)]),
            _ => {
                let g = &self.groups[op.desc.group.0 as usize];
                if g.poisoned {
                    return None;
                }
                let members = g.members.as_ref()?;
                Some(
                    members
                        .iter()
                        .zip(&g.queues)
                        .filter(|(_, q)| q.is_empty())
                        .map(|(&m, _)| m)
                        .collect(),
                )
            }
        }
    }

    fn deadlock(&self, cycle: &[(usize, OpRef)]) -> Finding {
        let mut parts = Vec::new();
        const SHOWN: usize = 6;
        for (k, &(r, at)) in cycle.iter().enumerate().take(SHOWN) {
            let op = self.op(at);
            let next = cycle[(k + 1) % cycle.len()].0;
            let lead = if k == 0 {
                format!("rank {r} waits")
            } else {
                "which waits".to_string()
            };
            parts.push(format!(
                "{lead} in {} at {} for rank {next}",
                op.desc.summary(),
                op.desc.site
            ));
        }
        let mut message = format!("deadlock: {}", parts.join(", "));
        if cycle.len() > SHOWN {
            message.push_str(&format!(", … ({} ranks in the cycle)", cycle.len()));
        }
        let first = self.op(cycle[0].1);
        let mut secondary: Vec<(SiteRef, Vec<usize>)> = Vec::new();
        for &(r, at) in &cycle[1..] {
            let s = site(self.op(at));
            if s.id == site(first).id {
                continue; // the primary span already points here
            }
            match secondary.iter_mut().find(|(x, _)| x.id == s.id) {
                Some((_, ranks)) => ranks.push(r),
                None => secondary.push((s, vec![r])),
            }
        }
        let secondary: Vec<(SiteRef, String)> = secondary
            .into_iter()
            .map(|(s, rs)| {
                let who = if rs.len() == 1 {
                    format!("rank {} waits", rs[0])
                } else {
                    format!("ranks {} wait", RanksFmt(&rs))
                };
                (s, format!("{who} here"))
            })
            .collect();
        let mut ranks: Vec<usize> = cycle.iter().map(|c| c.0).collect();
        ranks.sort_unstable();
        let p2p_only = cycle.iter().all(|&(_, at)| self.op(at).desc.kind.is_p2p());
        Finding {
            code: Code::RW001,
            verdict: Verdict::Hang,
            ranks,
            message,
            render: Render::Exact,
            primary: site(first),
            secondary,
            help: if p2p_only {
                "a blocking send waits until the peer receives: let one side receive first (e.g. \
                 even ranks send first, odd ranks receive first), or post both in one `ctx.batch()`"
                    .into()
            } else {
                "every rank waits for another: reorder the calls so that each pair meets, or post \
                 them together in one `ctx.batch()`"
                    .into()
            },
        }
    }
}

/// "rank 2 calls", "ranks 0, 1 call": ranks as a person would name them, with the verb agreeing.
fn subject(ranks: &[usize], world: usize, base: &str) -> String {
    format!("{} {}", describe_ranks(ranks, world), verb(ranks, base))
}

/// A verb agreeing with the number of ranks it is said of: `call` → "calls" for one rank.
fn verb(ranks: &[usize], base: &str) -> String {
    match (ranks.len(), base) {
        (1, b) if b.ends_with('h') => format!("{b}es"),
        (1, b) => format!("{b}s"),
        (_, b) => b.to_string(),
    }
}

/// Validates a declared group: sorted members, or `None` with a finding.
fn check_group(
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
fn misuse_finding(err: &Error, r: usize, op: &VOp) -> Finding {
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
        other => (Code::RW006, other.to_string(), String::new()),
    };
    Finding {
        code,
        verdict: Verdict::Misuse,
        ranks: vec![r],
        message,
        render: Render::Prefixed,
        primary: site(op),
        secondary: Vec::new(),
        help,
    }
}

fn p2p_mismatch(s: OpRef, send: &VOp, d: OpRef, recv: &VOp) -> Finding {
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
fn never_matched(
    world: usize,
    r: usize,
    op: &VOp,
    finished: &[usize],
    groups: &[GroupSim],
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
        _ => {
            let members = groups[op.desc.group.0 as usize]
                .members
                .clone()
                .unwrap_or_default();
            (
                Code::RW005,
                format!(
                    "{} on group [{}] waits forever: {who} {} without calling it",
                    op.desc.summary(),
                    RanksFmt(&members),
                    verb(finished, "finish"),
                ),
                "every member must make the same collective calls: call it on every member of \
                 the group (a collective behind `if rank == …` is the usual cause)"
                    .to_string(),
            )
        }
    };
    Finding {
        code,
        verdict: Verdict::Hang,
        ranks: vec![r],
        message,
        render: Render::Prefixed,
        primary: site(op),
        secondary: Vec::new(),
        help,
    }
}

/// One representative cycle per strongly connected component of the wait-for graph (`edges[r]`
/// lists whom rank r waits for, and in which op), each starting at its smallest rank.
fn cycles(edges: &[Vec<(usize, OpRef)>]) -> Vec<Vec<(usize, OpRef)>> {
    let n = edges.len();
    let comp = scc(n, |v| edges[v].iter().map(|e| e.0));
    let mut out = Vec::new();
    let mut seen = vec![false; n];
    for start in 0..n {
        let c = comp[start];
        if seen[start] || edges[start].is_empty() {
            continue;
        }
        let size = comp.iter().filter(|&&x| x == c).count();
        let self_loop = edges[start].iter().any(|e| e.0 == start);
        if size < 2 && !self_loop {
            continue;
        }
        // Walk inside the component, always to the smallest next rank, until a rank repeats.
        let mut path: Vec<(usize, OpRef)> = Vec::new();
        let mut pos = vec![usize::MAX; n];
        let mut v = start;
        loop {
            if pos[v] != usize::MAX {
                path.drain(..pos[v]);
                break;
            }
            let Some(&(w, at)) = edges[v]
                .iter()
                .filter(|e| comp[e.0] == c)
                .min_by_key(|e| e.0)
            else {
                break;
            };
            pos[v] = path.len();
            path.push((v, at));
            v = w;
        }
        for (r, x) in comp.iter().enumerate() {
            if *x == c {
                seen[r] = true;
            }
        }
        if !path.is_empty() {
            out.push(path);
        }
    }
    out
}

/// Strongly connected components (iterative Tarjan): a component id per vertex.
fn scc<I: Iterator<Item = usize>>(n: usize, succ: impl Fn(usize) -> I) -> Vec<usize> {
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut comp = vec![usize::MAX; n];
    let mut next_index = 0;
    let mut next_comp = 0;
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut call: Vec<(usize, Vec<usize>, usize)> = vec![(root, succ(root).collect(), 0)];
        index[root] = next_index;
        low[root] = next_index;
        next_index += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some((v, ws, i)) = call.last_mut() {
            let v = *v;
            if *i < ws.len() {
                let w = ws[*i];
                *i += 1;
                if index[w] == usize::MAX {
                    index[w] = next_index;
                    low[w] = next_index;
                    next_index += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    call.push((w, succ(w).collect(), 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                call.pop();
                if let Some((u, _, _)) = call.last() {
                    low[*u] = low[*u].min(low[v]);
                }
                if low[v] == index[v] {
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        comp[w] = next_comp;
                        if w == v {
                            break;
                        }
                    }
                    next_comp += 1;
                }
            }
        }
    }
    comp
}
