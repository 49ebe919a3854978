//! The MPI backend: one process per rank, started by `mpirun`/`mpiexec` (see `launch`).
//!
//! # How a batch runs
//!
//! 1. **Messages first.** Every send is posted as `MPI_Issend` (it completes only once the
//!    receive has started: the rendezvous the verifier assumes, so a program that deadlocks on
//!    threads deadlocks here too rather than passing on an eager buffer), every receive as
//!    `MPI_Irecv` from its peer with any tag. The tag carries the sender's dtype, and the
//!    receive's status its length, so a mismatched pair is an error naming both ranks.
//! 2. **Communicators, lazily and in one global order.** A group's communicator is created
//!    (`MPI_Comm_create_group`, collective over its members only) the first time a batch uses
//!    it, after that batch's messages are posted, and groups first used together are created
//!    in the order of their (members, ordinal) key on every rank. Creating groups is local in
//!    rankwise, so ranks may declare them in different orders; creating eagerly in declaration
//!    order could deadlock where the program does not.
//! 3. **Collectives in order per communicator.** MPI requires every member to start the
//!    collectives of a communicator in the same order, so the collectives of one communicator
//!    start one after another (each a few non-blocking phases, see `steps`, or one exchange of
//!    direct messages, see `eager`), while different communicators and the messages progress
//!    together; one `MPI_Waitsome` loop drives all (`drive`). A batch of one small collective
//!    is run without that machinery (`run_small`).
//!
//! Once anything is posted, the buffers belong to MPI until the requests complete. A failure
//! then cannot be returned to the caller (it could free a buffer MPI still writes), so it ends
//! the job with `MPI_Abort` after printing the error: the same outcome the launcher gives any
//! rank that fails.

mod drive;
mod eager;
mod launch;
mod monitor;
mod raw;
mod steps;

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::Arc;

use mpi::topology::{Communicator, SimpleCommunicator};

use crate::DType;
use crate::error::{Error, P2pMismatch, Result};
use crate::exec::{Backend, Op};
use crate::model::{GroupId, OpKind, WorldId};
use crate::plan::Target;

use launch::abort_job_with;
pub(crate) use launch::{abort_job, run};
use monitor::{Board, Call, GroupKey, Phase, Waiting};
use raw::{Comm, Request};

/// A communicator as this rank knows it.
struct GroupEntry {
    members: Vec<usize>,
    ordinal: u32,
    /// How every rank names it (see `monitor::GroupKey`).
    key: Arc<GroupKey>,
    /// Created on first use (see the module docs), with its duplicate for small collectives'
    /// messages (see `eager`).
    comm: Option<(Comm, Comm)>,
}

/// This process's rank of an MPI job.
pub(super) struct MpiBackend {
    rank: usize,
    world_id: WorldId,
    /// Data traffic: a duplicate of `MPI_COMM_WORLD`, returning errors.
    world: Comm,
    /// Small collectives' messages on the world (see `eager`): a duplicate of its own.
    world_eager: Comm,
    /// Where sub-communicators are created (a duplicate of its own, so creation traffic never
    /// meets data).
    create: SimpleCommunicator,
    /// The largest tag this MPI allows, for creation tags.
    tag_ub: c_int,
    /// Index = `GroupId`; entry 0 is the world.
    groups: Vec<GroupEntry>,
    /// Where this rank tells the monitor what it waits for.
    board: Arc<Board>,
    /// Sends to each peer, receives from each peer, collectives on each communicator, issued
    /// so far: the sequence numbers of the next ones.
    issued_sends: HashMap<usize, u64>,
    issued_recvs: HashMap<usize, u64>,
    /// By group index.
    issued_steps: Vec<u64>,
    /// Whether members exchange call records before each collective (`RANKWISE_MPI_CHECK`).
    check: bool,
    /// The wait loop's arrays, reused.
    lists: Lists,
}

/// The wait loop's arrays (empty between batches).
#[derive(Default)]
struct Lists {
    reqs: Vec<Request>,
    owners: Vec<Owner>,
    done: Vec<(Owner, raw::Received)>,
    waiter: raw::Waiter,
    new: Vec<(Request, Owner)>,
}

/// What a request in the wait loop belongs to.
#[derive(Clone, Copy)]
enum Owner {
    Send(usize),
    Recv(usize),
    /// A phase of a collective (a slot of the `drive::Driver`).
    Task(usize),
    /// The call-record exchange of a collective (see `drive`).
    Check(usize),
    /// A message of an exchange of direct messages (see `eager`).
    Eager(usize, eager::Msg),
}

/// Whether collectives are checked for agreement before data moves: on unless
/// `RANKWISE_MPI_CHECK` is `0`, `off` or `false` (every process of a job must agree, which the
/// environment mpirun passes on ensures).
fn check_enabled() -> bool {
    !matches!(
        std::env::var("RANKWISE_MPI_CHECK")
            .as_deref()
            .map(str::trim),
        Ok("0" | "off" | "false")
    )
}

/// Counts one more under `k`, returning the count before.
fn next_seq<K: std::hash::Hash + Eq>(m: &mut HashMap<K, u64>, k: K) -> u64 {
    let e = m.entry(k).or_insert(0);
    *e += 1;
    *e - 1
}

/// Marks op `k` (waiting for `w`, on group `g` if a collective) done on a board, and counts it.
fn count_done(s: &mut monitor::Snapshot, k: usize, w: &Waiting, g: GroupId) {
    if let Some(d) = s.done.get_mut(k) {
        *d = true;
    }
    match (w.kind, w.peer, &w.group) {
        (OpKind::Send, Some(p), _) => _ = next_seq(&mut s.sent, p),
        (OpKind::Recv, Some(p), _) => _ = next_seq(&mut s.received, p),
        (_, _, Some(key)) => {
            let i = g.0 as usize;
            if s.group_steps.len() <= i {
                s.group_steps.resize(i + 1, (Arc::default(), 0));
            }
            let e = &mut s.group_steps[i];
            if e.1 == 0 {
                e.0 = Arc::clone(key);
            }
            e.1 += 1;
        }
        _ => {}
    }
}

/// The tag that carries a sender's dtype.
fn tag_of(dtype: DType) -> c_int {
    1 + DType::ALL.iter().position(|d| *d == dtype).unwrap_or(0) as c_int
}

fn dtype_of_tag(tag: c_int) -> Option<DType> {
    usize::try_from(tag - 1)
        .ok()
        .and_then(|i| DType::ALL.get(i).copied())
}

impl MpiBackend {
    /// The backend of this process's rank, on duplicates of `world`.
    fn new(world: &SimpleCommunicator, board: Arc<Board>) -> Result<Self> {
        let rank = world.rank() as usize;
        let size = world.size() as usize;
        let tag_ub = raw::tag_ub(world);
        let members: Vec<usize> = (0..size).collect();
        Ok(MpiBackend {
            rank,
            world_id: WorldId::fresh(),
            world: Comm::new(world.duplicate())?,
            world_eager: Comm::new(world.duplicate())?,
            create: world.duplicate(),
            tag_ub,
            groups: vec![GroupEntry {
                key: Arc::new((members.clone(), u32::MAX)),
                members,
                ordinal: 0,
                comm: None,
            }],
            board,
            issued_sends: HashMap::new(),
            issued_recvs: HashMap::new(),
            issued_steps: Vec::new(),
            check: check_enabled(),
            lists: Lists::default(),
        })
    }

    /// What op `op` waits for, with its sequence number (counted here).
    fn waiting(&mut self, op: &Op) -> Waiting {
        let d = &op.desc;
        let (peer, group, seq) = match d.kind {
            OpKind::Send => {
                let p = d.peer.unwrap_or(0);
                (Some(p), None, next_seq(&mut self.issued_sends, p))
            }
            OpKind::Recv => {
                let p = d.peer.unwrap_or(0);
                (Some(p), None, next_seq(&mut self.issued_recvs, p))
            }
            _ => {
                let g = d.group.0 as usize;
                let key = self
                    .groups
                    .get(g)
                    .map(|e| e.key.clone())
                    .unwrap_or_default();
                if self.issued_steps.len() <= g {
                    self.issued_steps.resize(g + 1, 0);
                }
                let seq = self.issued_steps[g];
                self.issued_steps[g] += 1;
                (None, Some(key), seq)
            }
        };
        Waiting {
            kind: d.kind,
            peer,
            group,
            seq,
            call: Call::Local(d.clone()),
        }
    }

    /// Records on the board that op `k` of the batch (waiting for `w`, on group `g` if a
    /// collective) completed.
    fn completed(&self, k: usize, w: &Waiting, g: GroupId) {
        self.board.update(|s| count_done(s, k, w, g));
    }

    /// [`Self::completed`] for the ops `ks` at once (one lock for a packed run).
    fn completed_all(&self, ks: std::ops::Range<usize>, waits: &[Waiting], ops: &[Op]) {
        self.board.update(|s| {
            for k in ks {
                count_done(s, k, &waits[k], ops[k].desc.group);
            }
        });
    }

    /// The communicator of group `g` and its sorted members.
    fn comm_of(&self, g: GroupId) -> Result<(&Comm, &[usize])> {
        self.comms_of(g).map(|(data, _, members)| (data, members))
    }

    /// The communicator for small collectives' messages of group `g`, and its members.
    fn eager_of(&self, g: GroupId) -> Result<(&Comm, &[usize])> {
        self.comms_of(g).map(|(_, eager, members)| (eager, members))
    }

    fn comms_of(&self, g: GroupId) -> Result<(&Comm, &Comm, &[usize])> {
        let e = self.groups.get(g.0 as usize).ok_or_else(|| {
            Error::Internal(format!("group id {} was not created in this world", g.0))
        })?;
        if g == GroupId::WORLD {
            return Ok((&self.world, &self.world_eager, &e.members));
        }
        let (data, eager) = e.comm.as_ref().ok_or_else(|| {
            Error::Internal(format!("group {:?} used before it was created", e.members))
        })?;
        Ok((data, eager, &e.members))
    }

    /// This rank's index among `members` (sorted).
    fn member_index(&self, members: &[usize]) -> Result<usize> {
        members.binary_search(&self.rank).map_err(|_| {
            Error::Internal(format!(
                "rank {} runs a collective of a group it is not in",
                self.rank
            ))
        })
    }

    /// Creates the communicators of the groups `plan` uses for the first time, in the global
    /// order of their (members, ordinal) key.
    fn create_missing(&mut self, plan: &[(Target, std::ops::Range<usize>)]) -> Result<()> {
        let mut missing: Vec<usize> = plan
            .iter()
            .filter_map(|(t, _)| match t {
                Target::Coll(g) if *g != GroupId::WORLD => Some(g.0 as usize),
                _ => None,
            })
            .filter(|&i| self.groups.get(i).is_some_and(|e| e.comm.is_none()))
            .collect();
        missing.sort_by(|&a, &b| {
            let (a, b) = (&self.groups[a], &self.groups[b]);
            (&a.members, a.ordinal).cmp(&(&b.members, b.ordinal))
        });
        for i in missing {
            let e = &self.groups[i];
            let tag = raw::creation_tag(&e.members, e.ordinal, self.tag_ub);
            let comm = raw::create_group(&self.create, &e.members, tag)?;
            // Collective over the same members, right after the creation they all run.
            let eager = comm.duplicate();
            self.groups[i].comm = Some((Comm::new(comm)?, Comm::new(eager)?));
        }
        Ok(())
    }

    /// Checks a completed receive against what the sender sent.
    fn check_recv(&self, op: &Op, got: raw::Received) -> Result<()> {
        let d = &op.desc;
        let want = op.output.len;
        let sent = dtype_of_tag(got.tag);
        if sent == Some(d.dtype) && got.count == Some(want) {
            return Ok(());
        }
        let src = d.peer.unwrap_or(0);
        let send_what = match (sent, got.count) {
            (Some(t), Some(c)) => format!("{t}[{}]", c * d.dtype.size() / t.size()),
            (Some(t), None) => format!("{t}[more than {want}]"),
            (None, _) => "a message rankwise did not send".to_string(),
        };
        Err(Error::P2pMismatch(Box::new(P2pMismatch {
            src,
            dst: self.rank,
            send_site: None,
            recv_site: d.site,
            send_what,
            recv_what: format!("{}[{want}]", d.dtype),
        })))
    }

    /// Runs the batch; on error, tells how much is still posted.
    fn run_batch(&mut self, ops: &mut [Op], pending: &mut usize) -> Result<()> {
        let waits: Arc<[Waiting]> = ops.iter().map(|o| self.waiting(o)).collect();
        self.board.update(|s| {
            s.phase = Phase::Blocked;
            s.waiting = Arc::clone(&waits);
            s.done.clear();
            s.done.resize(waits.len(), false);
        });
        let result = if self.single_small(ops) {
            self.run_small(&ops[0], &waits[0], pending)
        } else {
            let plan = crate::plan::plan(ops);
            self.post_and_wait(ops, &plan, &waits, pending)
        };
        self.board.update(|s| {
            s.phase = Phase::Running;
            s.waiting = Arc::default();
            s.done.clear();
        });
        result
    }

    /// Whether the batch is one small collective on a communicator that exists: the common
    /// case of a single blocking call, which [`Self::run_small`] runs without the machinery of
    /// batches (the same messages as `drive` would send, so members may take either path).
    fn single_small(&self, ops: &[Op]) -> bool {
        let [op] = ops else { return false };
        if matches!(op.desc.kind, OpKind::Send | OpKind::Recv) {
            return false;
        }
        self.eager_of(op.desc.group)
            .is_ok_and(|(_, members)| eager::proposal(ops, 0, 1, members.len(), self.check) == 1)
    }

    /// Runs one small collective as one exchange (see `eager`).
    fn run_small(&mut self, op: &Op, w: &Waiting, pending: &mut usize) -> Result<()> {
        let mut waiter = std::mem::take(&mut self.lists.waiter);
        let mut reqs = std::mem::take(&mut self.lists.reqs);
        let mut from = std::mem::take(&mut self.lists.owners);
        reqs.clear();
        from.clear();
        let (comm, members) = self.eager_of(op.desc.group)?;
        let me = self.member_index(members)?;
        // SAFETY: the op's buffers are valid until `execute` returns, which is after every
        // request completes (or never: a failure after posting ends the job, and the exchange
        // is leaked so that its memory outlives the requests).
        // (Counted as posted at once: if posting fails halfway, the job must end.)
        let (mut ex, _) = unsafe {
            eager::Exchange::post(
                std::slice::from_ref(op),
                comm,
                members,
                me,
                self.check,
                |r, j| {
                    reqs.push(r);
                    from.push(Owner::Eager(0, j));
                    *pending += 1;
                },
            )?
        };
        let mut run = || -> Result<()> {
            while *pending > 0 {
                for &(i, got) in waiter.wait_some(&mut reqs, |_| raw::datatype(DType::U8))? {
                    *pending -= 1;
                    if let Owner::Eager(_, msg) = from[i] {
                        let progress = ex.received(msg, got)?;
                        if progress.heads_now && !progress.all_now {
                            // Headers before data (see `drive`): report, do not wait.
                            ex.verify(&op.desc, comm, members, me, w.seq)?;
                        }
                    }
                }
            }
            // SAFETY: every message has arrived; the op's buffers are valid.
            unsafe { ex.deliver(std::slice::from_ref(op), comm, members, me, w.seq)? };
            Ok(())
        };
        if let Err(e) = run() {
            std::mem::forget(ex);
            return Err(e);
        }
        self.completed(0, w, op.desc.group);
        self.lists.waiter = waiter;
        self.lists.reqs = reqs;
        self.lists.owners = from;
        Ok(())
    }

    /// Posts the batch and drives it to completion (see the module docs).
    fn post_and_wait(
        &mut self,
        ops: &[Op],
        plan: &[(Target, std::ops::Range<usize>)],
        waits: &[Waiting],
        pending: &mut usize,
    ) -> Result<()> {
        // The wait loop's arrays, kept across batches (a small call would otherwise allocate
        // them every time); taken here, and put back only when the batch succeeds.
        let Lists {
            mut reqs,
            mut owners,
            mut done,
            mut waiter,
            mut new,
        } = std::mem::take(&mut self.lists);
        reqs.clear();
        owners.clear();
        for (t, range) in plan {
            for i in range.clone() {
                let op = &ops[i];
                let d = &op.desc;
                let ty = raw::datatype(d.dtype);
                let peer = raw::count(d.peer.unwrap_or(0))?;
                // SAFETY: the op's buffers are valid for its description until `execute`
                // returns, and `execute` returns only once every request has completed (or
                // never, see `execute`).
                let (req, owner) = unsafe {
                    match t {
                        Target::Send(_) => {
                            let n = raw::count(op.input.len)?;
                            let tag = tag_of(d.dtype);
                            (
                                raw::isend(
                                    raw::SendMode::Rendezvous,
                                    op.input.ptr,
                                    n,
                                    ty,
                                    peer,
                                    tag,
                                    &self.world,
                                )?,
                                Owner::Send(i),
                            )
                        }
                        Target::Recv(_) => {
                            let n = raw::count(op.output.len)?;
                            (
                                raw::irecv(op.output.ptr, n, ty, peer, None, &self.world)?,
                                Owner::Recv(i),
                            )
                        }
                        Target::Coll(_) => continue,
                    }
                };
                reqs.push(req);
                owners.push(owner);
                *pending += 1;
            }
        }
        self.create_missing(plan)?;
        // One chain per communicator: its collectives, in order.
        let chains = plan.iter().filter_map(|(t, r)| match t {
            Target::Coll(g) => Some((*g, r.clone())),
            _ => None,
        });
        let mut driver = drive::Driver::new(self, ops, waits, chains);
        new.clear();
        let mut drive = || -> Result<()> {
            driver.start(&mut new)?;
            loop {
                for (r, o) in new.drain(..) {
                    reqs.push(r);
                    owners.push(o);
                    *pending += 1;
                }
                if *pending == 0 {
                    break;
                }
                let finished = waiter.wait_some(&mut reqs, |i| match owners[i] {
                    Owner::Recv(k) => raw::datatype(ops[k].desc.dtype),
                    _ => raw::datatype(DType::U8),
                })?;
                done.clear();
                done.extend(finished.iter().map(|&(i, got)| (owners[i], got)));
                // Only live requests stay in the arrays MPI scans (a batch of thousands of calls
                // would otherwise make every wait scan every finished one).
                let mut i = 0;
                while i < reqs.len() {
                    if raw::is_null(reqs[i]) {
                        reqs.swap_remove(i);
                        owners.swap_remove(i);
                    } else {
                        i += 1;
                    }
                }
                for &(owner, got) in &done {
                    *pending -= 1;
                    match owner {
                        Owner::Send(k) => self.completed(k, &waits[k], GroupId::WORLD),
                        Owner::Recv(k) => {
                            self.check_recv(&ops[k], got)?;
                            self.completed(k, &waits[k], GroupId::WORLD);
                        }
                        Owner::Check(s) => driver.done(s, true, &mut new)?,
                        Owner::Task(s) => driver.done(s, false, &mut new)?,
                        Owner::Eager(s, from) => driver.eager_done(s, from, got, &mut new)?,
                    }
                }
            }
            Ok(())
        };
        if let Err(e) = drive() {
            // Requests may still be posted into the driver's scratch memory, and the caller
            // ends the job rather than wait for them: the memory must outlive them. (Requests
            // posted but not yet in the wait arrays count too.)
            *pending += new.len();
            std::mem::forget(driver);
            return Err(e);
        }
        drop(driver);
        self.lists = Lists {
            reqs,
            owners,
            done,
            waiter,
            new,
        };
        Ok(())
    }

    /// Posts the next phase of `task` (on group `g`).
    fn post(&self, task: &mut steps::Task, op: &Op, g: GroupId) -> Result<Vec<Request>> {
        let (comm, pairs, members) = self.comms_of(g)?;
        let n = members.len();
        let me = self.member_index(members)?;
        let root = eager::root_index(&op.desc, members)?;
        // SAFETY: the op's buffers are valid until `execute` returns, which is after every
        // request completes; the task (holding its scratch) lives in `run_batch` as long.
        unsafe { task.advance(op, comm, pairs, me, n, root) }
    }
}

// SAFETY: MPI handles are plain handles of the library; `launch` requires
// `MPI_THREAD_MULTIPLE`, under which any thread may use them, and `&mut self` keeps one thread
// at a time in the backend.
unsafe impl Send for MpiBackend {}

// SAFETY: every op's buffers are read or written only through the MPI calls posted for it
// (with the counts its validated description implies: `steps` sizes every call from the
// description and allocates its own scratch), and `execute` does not return while any of them
// is posted: on success all have completed, and a failure after posting ends the process
// (`abort_job`) instead of returning.
unsafe impl Backend for MpiBackend {
    fn name(&self) -> &'static str {
        "mpi"
    }

    fn world_id(&self) -> WorldId {
        self.world_id
    }

    fn create_group(&mut self, members: &[usize], ordinal: u32) -> Result<GroupId> {
        // Entry 0 (the world) is never a match: a group of every rank is a communicator of
        // its own, whose collectives are matched apart from the world's.
        if let Some(i) = self
            .groups
            .iter()
            .skip(1)
            .position(|e| e.members == members && e.ordinal == ordinal)
        {
            return Ok(GroupId(i as u32 + 1));
        }
        self.groups.push(GroupEntry {
            members: members.to_vec(),
            ordinal,
            key: Arc::new((members.to_vec(), ordinal)),
            comm: None,
        });
        Ok(GroupId(self.groups.len() as u32 - 1))
    }

    fn execute(&mut self, ops: &mut [Op]) -> Result<()> {
        let mut pending = 0;
        match self.run_batch(ops, &mut pending) {
            Ok(()) => Ok(()),
            Err(e) if pending == 0 => Err(e),
            Err(e) => abort_job(self.rank, &e),
        }
    }
}
