//! The safety net across processes: a monitor thread per process that finds deadlocks,
//! skipped collectives and mismatched collectives of programs nobody checked, names every
//! rank's blocked call, and ends the job — within a fraction of a second, not after a timeout.
//!
//! The rank publishes what it is blocked in on a [`Board`]: each op it waits for (kind, peer or
//! group, its sequence number there, a fingerprint and the call site) and how many sends,
//! receives and collective steps it has completed. Every [`PERIOD`] the monitors of all ranks
//! exchange their boards on a communicator of their own (`MPI_Iallgatherv`, polled so the
//! monitor never spins) and each judges the same global picture the same way: if no board
//! changed for a whole period, every unfinished rank is blocked, and no op it waits for has its
//! counterpart posted or done somewhere, nothing can ever move — a deadlock, reported as the
//! threads backend reports it (or as a peer that returned without the call, or as two members
//! at one collective step with different calls). Rank 0's monitor prints it and aborts.
//!
//! Ops whose counterpart is posted are in flight: a large transfer taking seconds is never
//! mistaken for a hang.

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use mpi::topology::{Communicator, SimpleCommunicator};

use super::raw;
use crate::error::{CollectiveMismatch, DeadlockReport, Error, PeerFailure, RankWait, Result};
use crate::model::{OpDesc, OpKind};

/// How often the monitors compare notes.
pub(super) const PERIOD: Duration = Duration::from_millis(100);

/// A communicator as every rank names it: its sorted members and creation ordinal (the world
/// has ordinal `u32::MAX`, so that a group of every rank is told apart from it).
pub(super) type GroupKey = (Vec<usize>, u32);

/// Where a rank is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(super) enum Phase {
    /// Computing (or between calls): it may still do anything.
    #[default]
    Running,
    /// Inside a call, waiting for the ops listed.
    Blocked,
    /// Its function returned.
    Finished,
}

/// One op a blocked rank waits for.
#[derive(Clone, Debug)]
pub(super) struct Waiting {
    pub(super) kind: OpKind,
    /// Peer of a send or receive (world rank).
    pub(super) peer: Option<usize>,
    /// Communicator of a collective.
    pub(super) group: Option<Arc<GroupKey>>,
    /// Its index among this rank's sends to `peer`, receives from `peer`, or collectives on
    /// `group`.
    pub(super) seq: u64,
    /// The call: this rank's own description (formatted only when the monitor reports), or a
    /// peer's, as text.
    pub(super) call: Call,
}

/// A waited-for call, as far as the monitor needs it.
#[derive(Clone, Debug)]
pub(super) enum Call {
    /// This rank's call.
    Local(OpDesc),
    /// A peer's call: what it is (which members of a collective must agree on) and where.
    Remote { what: String, site: String },
}

impl Waiting {
    /// What members of a collective must agree on.
    pub(super) fn what(&self) -> String {
        match &self.call {
            Call::Local(d) => d.summary(),
            Call::Remote { what, .. } => what.clone(),
        }
    }

    /// The call site, as text.
    pub(super) fn site(&self) -> String {
        match &self.call {
            Call::Local(d) => d.site.to_string(),
            Call::Remote { site, .. } => site.clone(),
        }
    }

    /// Whether `self` and `other` are the same wait (the same sequence number of one target).
    pub(super) fn same(&self, other: &Waiting) -> bool {
        self.kind == other.kind
            && self.peer == other.peer
            && self.seq == other.seq
            && self.group.as_deref() == other.group.as_deref()
    }
}

impl PartialEq for Waiting {
    fn eq(&self, other: &Self) -> bool {
        self.same(other) && self.what() == other.what() && self.site() == other.site()
    }
}

/// What one rank publishes.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Snapshot {
    pub(super) phase: Phase,
    /// Bumped on every change, so that "nothing moved" can be seen.
    pub(super) version: u64,
    /// Shared with the backend that published it (no copy per call).
    pub(super) waiting: Arc<[Waiting]>,
    /// This rank's own board only: which of `waiting` have completed (set by index, so a batch
    /// of thousands of calls completes in linear time); completed ones are not sent.
    pub(super) done: Vec<bool>,
    /// Completed sends per destination, receives per source, steps per communicator.
    pub(super) sent: HashMap<usize, u64>,
    pub(super) received: HashMap<usize, u64>,
    pub(super) steps: HashMap<GroupKey, u64>,
    /// This rank's own board only: steps per communicator by the backend's group index (a
    /// counter bumped per collective without hashing the key; sent as `steps`).
    pub(super) group_steps: Vec<(Arc<GroupKey>, u64)>,
}

/// The rank's side: where it publishes its state.
#[derive(Default)]
pub(super) struct Board(Mutex<Snapshot>);

impl Board {
    /// Changes the snapshot (and its version).
    pub(super) fn update(&self, f: impl FnOnce(&mut Snapshot)) {
        let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut s);
        s.version += 1;
    }

    fn snapshot(&self) -> Snapshot {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

// The wire format: one record per line, fields separated by tabs (no field contains either).
// Without `calls`, the ops the rank waits for are left out (see `watch`).
fn encode(s: &Snapshot, calls: bool) -> Vec<u8> {
    let key = |k: &GroupKey| {
        let m: Vec<String> = k.0.iter().map(usize::to_string).collect();
        format!("{}/{}", m.join(","), k.1)
    };
    let mut out = format!("S\t{:?}\t{}\n", s.phase, s.version);
    for (p, n) in &s.sent {
        out += &format!("s\t{p}\t{n}\n");
    }
    for (p, n) in &s.received {
        out += &format!("r\t{p}\t{n}\n");
    }
    for (g, n) in &s.steps {
        out += &format!("g\t{}\t{n}\n", key(g));
    }
    for (g, n) in s.group_steps.iter().filter(|(_, n)| *n > 0) {
        out += &format!("g\t{}\t{n}\n", key(g));
    }
    for (_, w) in s
        .waiting
        .iter()
        .enumerate()
        .filter(|(i, _)| calls && s.done.get(*i) != Some(&true))
    {
        out += &format!(
            "w\t{}\t{}\t{}\t{}\t{}\t{}\n",
            w.kind.name(),
            w.peer.map_or("-".into(), |p| p.to_string()),
            w.group.as_deref().map_or("-".into(), key),
            w.seq,
            w.what().replace(['\t', '\n'], " "),
            w.site().replace(['\t', '\n'], " "),
        );
    }
    out.into_bytes()
}

fn decode(bytes: &[u8]) -> Option<Snapshot> {
    let text = std::str::from_utf8(bytes).ok()?;
    let key = |t: &str| -> Option<GroupKey> {
        let (m, o) = t.split_once('/')?;
        let members = if m.is_empty() {
            Vec::new()
        } else {
            m.split(',')
                .map(|x| x.parse().ok())
                .collect::<Option<_>>()?
        };
        Some((members, o.parse().ok()?))
    };
    let mut s = Snapshot::default();
    let mut waiting = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        match f.as_slice() {
            ["S", phase, version] => {
                s.phase = match *phase {
                    "Blocked" => Phase::Blocked,
                    "Finished" => Phase::Finished,
                    _ => Phase::Running,
                };
                s.version = version.parse().ok()?;
            }
            ["s", p, n] => {
                s.sent.insert(p.parse().ok()?, n.parse().ok()?);
            }
            ["r", p, n] => {
                s.received.insert(p.parse().ok()?, n.parse().ok()?);
            }
            ["g", g, n] => {
                s.steps.insert(key(g)?, n.parse().ok()?);
            }
            ["w", kind, peer, group, seq, what, site] => waiting.push(Waiting {
                kind: OpKind::from_name(kind)?,
                peer: peer.parse().ok(),
                group: key(group).map(Arc::new),
                seq: seq.parse().ok()?,
                call: Call::Remote {
                    what: what.to_string(),
                    site: site.to_string(),
                },
            }),
            _ => return None,
        }
    }
    s.waiting = waiting.into();
    Some(s)
}

/// Whether `op` of rank `r` has its counterpart posted or done.
fn matched(all: &[Snapshot], r: usize, op: &Waiting) -> bool {
    let has = |m: usize, f: &dyn Fn(&Waiting) -> bool| all[m].waiting.iter().any(f);
    match (op.kind, op.peer, &op.group) {
        (OpKind::Send, Some(p), _) if p < all.len() => {
            all[p].received.get(&r).copied().unwrap_or(0) > op.seq
                || has(p, &|w| {
                    w.kind == OpKind::Recv && w.peer == Some(r) && w.seq == op.seq
                })
        }
        (OpKind::Recv, Some(p), _) if p < all.len() => {
            all[p].sent.get(&r).copied().unwrap_or(0) > op.seq
                || has(p, &|w| {
                    w.kind == OpKind::Send && w.peer == Some(r) && w.seq == op.seq
                })
        }
        (_, _, Some(g)) => g.0.iter().all(|&m| {
            m < all.len()
                && (all[m].steps.get(&**g).copied().unwrap_or(0) > op.seq
                    || has(m, &|w| w.group.as_deref() == Some(&**g) && w.seq == op.seq))
        }),
        _ => false,
    }
}

/// The ranks `op` of rank `r` waits for (those that have not posted or done its counterpart).
fn waited_for(all: &[Snapshot], r: usize, op: &Waiting) -> Vec<usize> {
    match (&op.group, op.peer) {
        (Some(g), _) => {
            g.0.iter()
                .copied()
                .filter(|&m| {
                    m != r
                        && m < all.len()
                        && all[m].steps.get(&**g).copied().unwrap_or(0) <= op.seq
                        && !all[m]
                            .waiting
                            .iter()
                            .any(|w| w.group.as_deref() == Some(&**g) && w.seq == op.seq)
                })
                .collect()
        }
        (None, Some(p)) => vec![p],
        _ => Vec::new(),
    }
}

/// The verdict on a picture in which nothing moved for a period: `None` while anything can
/// still happen.
pub(super) fn judge(all: &[Snapshot]) -> Option<Error> {
    // Two members at the same step of a communicator with different calls: a mismatch, found
    // as soon as both are there.
    for (a, sa) in all.iter().enumerate() {
        for wa in sa.waiting.iter().filter(|w| w.group.is_some()) {
            for (b, sb) in all.iter().enumerate().skip(a + 1) {
                if let Some(wb) = sb.waiting.iter().find(|w| {
                    w.group.as_deref() == wa.group.as_deref()
                        && w.seq == wa.seq
                        && w.what() != wa.what()
                }) {
                    let members = wa.group.as_ref().map(|g| g.0.clone()).unwrap_or_default();
                    return Some(Error::CollectiveMismatch(Box::new(CollectiveMismatch {
                        members,
                        step: wa.seq,
                        rank_a: a,
                        what_a: wa.what(),
                        site_a: site_of(&wa.site()),
                        rank_b: b,
                        what_b: wb.what(),
                        site_b: site_of(&wb.site()),
                    })));
                }
            }
        }
    }
    let unfinished: Vec<usize> = (0..all.len())
        .filter(|&r| all[r].phase != Phase::Finished)
        .collect();
    if unfinished.is_empty() || unfinished.iter().any(|&r| all[r].phase == Phase::Running) {
        return None;
    }
    let in_flight = unfinished
        .iter()
        .any(|&r| all[r].waiting.iter().any(|w| matched(all, r, w)));
    if in_flight {
        return None;
    }
    // Nothing can move. A rank waiting for one that returned: that rank skipped the call.
    for &r in &unfinished {
        for w in all[r].waiting.iter() {
            if let Some(&peer) = waited_for(all, r, w)
                .iter()
                .find(|&&p| all.get(p).is_some_and(|s| s.phase == Phase::Finished))
            {
                return Some(Error::PeerFailed {
                    rank: r,
                    peer,
                    reason: PeerFailure::Exited,
                    site: Some(site_of(&w.site())),
                });
            }
        }
    }
    let waits = unfinished
        .iter()
        .filter_map(|&r| {
            let w = all[r].waiting.first()?;
            Some(RankWait {
                rank: r,
                site: site_of(&w.site()),
                what: w.what(),
                waiting_for: waited_for(all, r, w),
            })
        })
        .collect();
    Some(Error::Deadlock(DeadlockReport { waits }))
}

/// A call site from its text (`file:line:column`), for reports.
pub(super) fn site_of(text: &str) -> crate::model::CallSite {
    let mut parts = text.rsplitn(3, ':');
    let column = parts.next().and_then(|c| c.parse().ok()).unwrap_or(0);
    let line = parts.next().and_then(|l| l.parse().ok()).unwrap_or(0);
    let file = parts.next().unwrap_or(text);
    crate::model::CallSite {
        // Reports are printed once and the process ends: leaking the name is harmless.
        file: Box::leak(file.to_string().into_boxed_str()),
        line,
        column,
    }
}

/// The monitor thread's loop, on its own communicator `comm`: exchanges boards every period
/// until every rank has finished, and ends the job (from rank 0) on a verdict.
pub(super) fn watch(board: Arc<Board>, comm: SimpleCommunicator) -> Result<()> {
    let me = comm.rank() as usize;
    let mut last_versions: Option<Vec<u64>> = None;
    let mut sent_version: Option<u64> = None;
    loop {
        std::thread::sleep(PERIOD);
        // Boards are judged only when no version moved since the last exchange, so a rank
        // whose own board moved sends no calls this time: nobody will read them, and a batch
        // of a thousand calls made every few hundred microseconds would otherwise have each
        // monitor format and parse thousands of lines every period.
        let snapshot = board.snapshot();
        let calls = sent_version == Some(snapshot.version);
        sent_version = Some(snapshot.version);
        let all = exchange(&comm, &encode(&snapshot, calls))?
            .iter()
            .map(|b| decode(b))
            .collect::<Option<Vec<Snapshot>>>()
            .ok_or_else(|| Error::Internal("a monitor sent an unreadable board".into()))?;
        if all.iter().all(|s| s.phase == Phase::Finished) {
            return Ok(());
        }
        let versions: Vec<u64> = all.iter().map(|s| s.version).collect();
        let still = last_versions.as_ref() == Some(&versions);
        last_versions = Some(versions);
        if !still {
            continue;
        }
        if let Some(e) = judge(&all) {
            if me == 0 {
                super::abort_job_with(&e);
            }
            // Rank 0 ends the job; the others wait for that.
            loop {
                std::thread::park();
            }
        }
    }
}

/// Every rank's bytes, in rank order (`MPI_Iallgather` of the lengths, then
/// `MPI_Iallgatherv`), polled with short sleeps so that a waiting monitor takes no core.
fn exchange(comm: &SimpleCommunicator, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
    let n = comm.size() as usize;
    let len = raw::count(mine.len())?;
    let mut lens: Vec<c_int> = vec![0; n];
    raw::poll_allgather_int(comm, len, &mut lens)?;
    let mut displs = Vec::with_capacity(n);
    let mut at: c_int = 0;
    for &l in &lens {
        displs.push(at);
        at = at
            .checked_add(l)
            .ok_or_else(|| Error::Internal("monitor boards too large".into()))?;
    }
    let mut all = vec![0u8; at as usize];
    raw::poll_allgatherv_bytes(comm, mine, &mut all, &lens, &displs)?;
    Ok((0..n)
        .map(|j| all[displs[j] as usize..(displs[j] + lens[j]) as usize].to_vec())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked(waiting: Vec<Waiting>) -> Snapshot {
        Snapshot {
            phase: Phase::Blocked,
            waiting: waiting.into(),
            ..Snapshot::default()
        }
    }

    fn send(to: usize, seq: u64) -> Waiting {
        Waiting {
            kind: OpKind::Send,
            peer: Some(to),
            group: None,
            seq,
            call: Call::Remote {
                what: format!("send(to {to}, f32[4])"),
                site: "src/main.rs:7:9".into(),
            },
        }
    }

    fn coll(members: &[usize], seq: u64, what: &str) -> Waiting {
        Waiting {
            kind: OpKind::AllReduce,
            peer: None,
            group: Some(Arc::new((members.to_vec(), u32::MAX))),
            seq,
            call: Call::Remote {
                what: what.into(),
                site: "src/main.rs:9:9".into(),
            },
        }
    }

    #[test]
    fn boards_survive_the_wire() {
        let mut s = blocked(vec![
            send(1, 3),
            coll(&[0, 1, 2], 7, "all_reduce(Sum, f32[2])"),
        ]);
        s.sent.insert(1, 3);
        s.received.insert(2, 1);
        s.steps.insert((vec![0, 1, 2], u32::MAX), 7);
        s.version = 42;
        assert_eq!(decode(&encode(&s, true)), Some(s.clone()));
        // Without the calls: everything else, which is all a moving board is judged by.
        let moving = decode(&encode(&s, false)).expect("decodes");
        assert!(moving.waiting.is_empty());
        assert_eq!(
            Snapshot {
                waiting: s.waiting.clone(),
                ..moving
            },
            s
        );
    }

    #[test]
    fn two_ranks_sending_first_is_a_deadlock_naming_both() {
        let all = [blocked(vec![send(1, 0)]), blocked(vec![send(0, 0)])];
        let Some(Error::Deadlock(d)) = judge(&all) else {
            panic!("{:?}", judge(&all));
        };
        assert_eq!(d.waits.len(), 2);
        assert_eq!(d.waits[1].waiting_for, [0]);
        assert_eq!(d.waits[0].site.line, 7);
    }

    #[test]
    fn a_matched_pair_is_in_flight_not_a_deadlock() {
        let mut recv = send(0, 0);
        recv.kind = OpKind::Recv;
        assert!(judge(&[blocked(vec![send(1, 0)]), blocked(vec![recv])]).is_none());
        // A receive whose send already completed is in flight too.
        let mut done = Snapshot {
            phase: Phase::Running,
            ..Snapshot::default()
        };
        done.sent.insert(1, 1);
        let mut recv = send(0, 0);
        recv.kind = OpKind::Recv;
        assert!(judge(&[done, blocked(vec![recv])]).is_none());
    }

    #[test]
    fn a_rank_that_returned_is_named_as_the_one_that_skipped() {
        let finished = Snapshot {
            phase: Phase::Finished,
            ..Snapshot::default()
        };
        let w = coll(&[0, 1], 0, "all_reduce(Sum, f32[2])");
        let e = judge(&[blocked(vec![w]), finished]);
        assert!(
            matches!(
                e,
                Some(Error::PeerFailed {
                    rank: 0,
                    peer: 1,
                    reason: PeerFailure::Exited,
                    ..
                })
            ),
            "{e:?}"
        );
    }

    #[test]
    fn different_calls_at_one_step_are_a_mismatch() {
        let all = [
            blocked(vec![coll(&[0, 1], 2, "all_reduce(Sum, f32[2])")]),
            blocked(vec![coll(&[0, 1], 2, "all_reduce(Max, f32[2])")]),
        ];
        let Some(Error::CollectiveMismatch(m)) = judge(&all) else {
            panic!();
        };
        assert_eq!((m.rank_a, m.rank_b, m.step), (0, 1, 2));
    }

    #[test]
    fn members_at_one_step_with_one_call_are_in_flight() {
        let w = coll(&[0, 1], 0, "all_reduce(Sum, f32[1048576])");
        assert!(judge(&[blocked(vec![w.clone()]), blocked(vec![w])]).is_none());
    }
}
