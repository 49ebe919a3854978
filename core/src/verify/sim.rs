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

use super::diag::{Code, SiteRef, Verdict};
use super::findings::{
    Finding, Render, check_group, never_matched, p2p_mismatch, site, subject, verb,
    violation_finding,
};
use super::graph::cycles;
use super::program::{Item, Program, VOp};
use super::schedule::{Match, Schedule};
use crate::model::{GroupId, OpKind, RanksFmt};
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
    /// Unmatched ops of the current item (at the end: unmatched posts being drained).
    pending: usize,
    state: RankState,
    /// Item indices of this rank's posts (`isend`/`irecv`) that are matched.
    matched_posts: Vec<usize>,
    /// The post the current `wait` blocks on.
    waiting_on: Option<usize>,
}

#[derive(Default)]
struct PairQueues {
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

pub(super) struct Sim<'p> {
    p: &'p Program,
    ranks: Vec<RankSim>,
    chans: Vec<PairQueues>,
    chan_index: FxHashMap<(u32, u32), u32>,
    groups: Vec<GroupSim>,
    work: Vec<usize>,
    pub findings: Vec<Finding>,
    pub schedule: Schedule,
}

impl<'p> Sim<'p> {
    pub(super) fn new(p: &'p Program) -> Self {
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
                    matched_posts: Vec::new(),
                    waiting_on: None,
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

    /// The sorted members of a group (empty if it was invalid).
    fn members(&self, g: GroupId) -> &[usize] {
        self.groups
            .get(g.0 as usize)
            .and_then(|g| g.members.as_deref())
            .unwrap_or(&[])
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
            self.chans.push(PairQueues::default());
        }
        idx as usize
    }

    /// Runs the simulation to quiescence, then explains every rank that did not finish.
    pub(super) fn run(&mut self) {
        for r in 0..self.p.world {
            self.post(r);
        }
        while let Some(r) = self.work.pop() {
            self.ranks[r].pc += 1;
            self.post(r);
        }
        self.explain_blocked();
        self.schedule.dtype_links.sort_unstable();
        self.schedule.dtype_links.dedup();
    }

    /// This rank's posts that are not matched yet, by item index.
    fn unmatched_posts(&self, r: usize) -> Vec<usize> {
        let items = &self.p.ranks[r];
        (0..items.len())
            .filter(|&i| matches!(items[i], Item::Post(_)))
            .filter(|i| !self.ranks[r].matched_posts.contains(i))
            .collect()
    }

    /// Posts rank `r`'s current item (finishing the rank if it has none left).
    fn post(&mut self, r: usize) {
        let items = &self.p.ranks[r];
        let pc = self.ranks[r].pc;
        let Some(item) = items.get(pc) else {
            // A rank that returns with requests still posted waits for them first (the runtime
            // drains them), so an unmatched one blocks it like a wait would.
            if pc == items.len() {
                let open = self.unmatched_posts(r).len();
                if open > 0 {
                    self.ranks[r].pending = open;
                    return;
                }
            }
            self.ranks[r].state = RankState::Finished;
            return;
        };
        if let Item::Wait { post, .. } = *item {
            // A wait on anything but an earlier post returns at once (as at run time, where
            // only a posted request can be waited for).
            let posted = post < pc && matches!(items.get(post), Some(Item::Post(_)));
            if posted && !self.ranks[r].matched_posts.contains(&post) {
                self.ranks[r].waiting_on = Some(post);
            } else {
                self.work.push(r);
            }
            return;
        }
        let ops = item.ops();
        // Posts may send to or receive from the rank itself, as batched calls may: the rank
        // goes on, so a matching call can follow.
        let unblocking = item.is_batch() || matches!(item, Item::Post(_));
        // Check every op of the item before posting any: a rank whose call is invalid returns
        // an error at that call and never posts it.
        for op in ops {
            if let Some(f) = self.misuse(r, op, unblocking) {
                self.findings.push(f);
                self.ranks[r].state = RankState::Stopped;
                return;
            }
        }
        let is_post = matches!(item, Item::Post(_));
        self.ranks[r].pending = if is_post { 0 } else { ops.len() };
        if ops.is_empty() || is_post {
            self.work.push(r);
        }
        if ops.is_empty() {
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
        Some(violation_finding(&err, r, op))
    }

    fn undeclared(&self, r: usize, op: &VOp, what: &str) -> Finding {
        Finding::at(
            Code::RW011,
            Verdict::Misuse,
            r,
            op,
            format!("{} uses {what} (id {})", op.desc.kind, op.desc.group.0),
            "create the group with `ctx.new_group(members)` on every member first".into(),
        )
    }

    fn complete(&mut self, r: OpRef) {
        let rank = r.rank as usize;
        let item = r.item as usize;
        let is_post = matches!(self.p.ranks[rank][item], Item::Post(_));
        let rs = &mut self.ranks[rank];
        if is_post {
            rs.matched_posts.push(item);
            if rs.waiting_on == Some(item) {
                rs.waiting_on = None;
                self.work.push(rank);
                return;
            }
            // Draining at the end: the rank finishes once its last post is matched.
            if rs.pc < self.p.ranks[rank].len() || rs.pending == 0 {
                return;
            }
        }
        rs.pending -= 1;
        if rs.pending == 0 {
            self.work.push(rank);
        }
    }

    fn match_p2p(&mut self, c: usize) {
        while let (Some(&s), Some(&d)) = (self.chans[c].sends.front(), self.chans[c].recvs.front())
        {
            self.chans[c].sends.pop_front();
            self.chans[c].recvs.pop_front();
            let (send, recv) = (self.op(s), self.op(d));
            let free = self.link_dtypes(&[send, recv]);
            if (!free && send.desc.dtype != recv.desc.dtype)
                || send.desc.numel() != recv.desc.numel()
            {
                self.findings.push(p2p_mismatch(s, send, d, recv, free));
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
            if !g.poisoned
                && let Some(f) = self.collective_mismatch(gid, step, &refs)
            {
                self.groups[gid.0 as usize].poisoned = true;
                self.findings.push(f);
            }
            for &r in &refs {
                self.schedule.set(r, Match::Collective { group: gid, step });
                self.complete(r);
            }
        }
    }

    /// Whether the members' ops for one step agree; if not, a finding naming both sides, and
    /// recognising the classic cause — a member skipping a collective behind a condition.
    fn collective_mismatch(&mut self, gid: GroupId, step: u64, refs: &[OpRef]) -> Option<Finding> {
        let ops: Vec<&VOp> = refs.iter().map(|&r| self.op(r)).collect();
        let free = self.link_dtypes(&ops);
        let agree = |a: &VOp, b: &VOp| {
            if free {
                // Element types are rustc's to compare: everything else must agree.
                let mut b = b.desc.clone();
                b.dtype = a.desc.dtype;
                a.desc.agrees_with(&b)
            } else {
                a.desc.agrees_with(&b.desc)
            }
        };
        if ops.iter().all(|o| agree(o, ops[0])) {
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
        // Both sides call the other's collective next: the same calls in another order (not a
        // skip, which would leave one side without the call).
        if next_agrees(major, a) && next_agrees(minor, b) {
            return Some(Finding {
                code: Code::RW004,
                verdict: Verdict::Mismatch,
                ranks: all,
                message: format!(
                    "members of {group} make the same collective calls in different orders: {} \
                     {} first, then {}, but {} {} first, then {} (collective step {step})",
                    subject(&ra, world, "call"),
                    a.desc.summary(),
                    b.desc.summary(),
                    subject(&rb, world, "call"),
                    b.desc.summary(),
                    a.desc.summary(),
                ),
                render: Render::Exact,
                primary: site(a),
                secondary: vec![(
                    site(b),
                    format!("{} this first", subject(&rb, world, "call")),
                )],
                help: "every member must make its collective calls on a group in the same order: \
                       swap the two calls on one side"
                    .into(),
            });
        }
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

    /// For ops that meet: if any has a free element type, records that each must have the
    /// first one's (for the builder to check) and says so.
    fn link_dtypes(&mut self, ops: &[&VOp]) -> bool {
        if !ops.iter().any(|o| self.p.dtype_is_free(o)) {
            return false;
        }
        for o in &ops[1..] {
            let (a, b) = (ops[0].id.min(o.id), ops[0].id.max(o.id));
            if a != b {
                self.schedule.dtype_links.push((a, b));
            }
        }
        true
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
            for at in self.blocked_in(r) {
                let op = self.op(at);
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
                    self.findings.push(never_matched(
                        world,
                        r,
                        op,
                        &finished,
                        self.members(op.desc.group),
                    ));
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

    /// The ops an active rank is blocked in: its current item's, the post its `wait` waits
    /// for, or (at its end) every post not matched yet.
    fn blocked_in(&self, r: usize) -> Vec<OpRef> {
        let pc = self.ranks[r].pc;
        let post = |item: usize| OpRef {
            rank: r as u32,
            item: item as u32,
            op: 0,
        };
        match self.p.ranks[r].get(pc) {
            None => self.unmatched_posts(r).into_iter().map(post).collect(),
            Some(Item::Wait { .. }) => self.ranks[r].waiting_on.into_iter().map(post).collect(),
            Some(item) => (0..item.ops().len())
                .map(|i| OpRef {
                    rank: r as u32,
                    item: pc as u32,
                    op: i as u32,
                })
                .collect(),
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

    /// Where a blocked rank of a cycle waits: its `wait`, or else the call it is blocked in.
    fn blocked_site(&self, (r, at): (usize, OpRef)) -> SiteRef {
        match self.p.ranks[r].get(self.ranks[r].pc) {
            Some(&Item::Wait { site, id, .. }) => SiteRef { id, site },
            _ => site(self.op(at)),
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
            // A posted op is waited for elsewhere: at a `wait`, or when the rank returns.
            let how = match self.p.ranks[r].get(self.ranks[r].pc) {
                _ if !matches!(self.p.ranks[r][at.item as usize], Item::Post(_)) => "in",
                Some(Item::Wait { site, .. }) => &format!("at {site} for the"),
                _ => "on return for the",
            };
            let posted = if how == "in" { "" } else { " posted" };
            parts.push(format!(
                "{lead} {how} {}{posted} at {} for rank {next}",
                op.desc.summary(),
                op.desc.site
            ));
        }
        let mut message = format!("deadlock: {}", parts.join(", "));
        if cycle.len() > SHOWN {
            message.push_str(&format!(", … ({} ranks in the cycle)", cycle.len()));
        }
        let primary = self.blocked_site(cycle[0]);
        let mut secondary: Vec<(SiteRef, Vec<usize>)> = Vec::new();
        for &(r, at) in &cycle[1..] {
            let s = self.blocked_site((r, at));
            if s.id == primary.id {
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
        let waits = cycle.iter().any(|&(_, at)| {
            matches!(
                self.p.ranks[at.rank as usize][at.item as usize],
                Item::Post(_)
            )
        });
        // Sends posted in batches are not blocked by ordering: their peers post no matching
        // receive at all, so "post both in one batch" would be no help.
        let batched = cycle.iter().all(|&(_, at)| {
            matches!(
                self.p.ranks[at.rank as usize][at.item as usize],
                crate::verify::Item::Batch(_)
            )
        });
        Finding {
            code: Code::RW001,
            verdict: Verdict::Hang,
            ranks,
            message,
            render: Render::Exact,
            primary,
            secondary,
            help: if waits {
                "a wait blocks until its message is matched, and a rank's return waits for every \
                 request still posted: wait only after the calls the peer needs from this rank \
                 first"
                    .into()
            } else if p2p_only && batched {
                "every call here is already in a batch, so no order of posting helps: each send \
                 needs a receive from its sender on the peer (and each receive a send to it); \
                 check the peers the batches send to and receive from"
                    .into()
            } else if p2p_only {
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
