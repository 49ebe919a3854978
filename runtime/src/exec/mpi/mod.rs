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
//!    run one after another (each a few non-blocking phases, see `steps`), while different
//!    communicators and the messages progress together; one `MPI_Waitsome` loop drives all.
//!
//! Once anything is posted, the buffers belong to MPI until the requests complete. A failure
//! then cannot be returned to the caller (it could free a buffer MPI still writes), so it ends
//! the job with `MPI_Abort` after printing the error: the same outcome the launcher gives any
//! rank that fails.

mod launch;
mod raw;
mod steps;

use std::ffi::c_int;

use mpi::topology::{Communicator, SimpleCommunicator};

use crate::DType;
use crate::error::{Error, P2pMismatch, Result};
use crate::exec::{Backend, Op};
use crate::model::{GroupId, WorldId};
use crate::plan::Target;

pub(crate) use launch::{abort_job, run};
use raw::{Comm, Request};
use steps::Task;

/// A communicator as this rank knows it.
struct GroupEntry {
    members: Vec<usize>,
    ordinal: u32,
    /// Created on first use (see the module docs).
    comm: Option<Comm>,
}

/// This process's rank of an MPI job.
pub(crate) struct MpiBackend {
    rank: usize,
    world_id: WorldId,
    /// Data traffic: a duplicate of `MPI_COMM_WORLD`, returning errors.
    world: Comm,
    /// Where sub-communicators are created (a duplicate of its own, so creation traffic never
    /// meets data).
    create: SimpleCommunicator,
    /// The largest tag this MPI allows, for creation tags.
    tag_ub: c_int,
    /// Index = `GroupId`; entry 0 is the world.
    groups: Vec<GroupEntry>,
}

/// What a request in the wait loop belongs to.
#[derive(Clone, Copy)]
enum Owner {
    Send,
    Recv(usize),
    Task(usize),
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
    pub(crate) fn new(world: &SimpleCommunicator) -> Result<Self> {
        let rank = world.rank() as usize;
        let size = world.size() as usize;
        let tag_ub = raw::tag_ub(world);
        Ok(MpiBackend {
            rank,
            world_id: WorldId::fresh(),
            world: Comm::new(world.duplicate())?,
            create: world.duplicate(),
            tag_ub,
            groups: vec![GroupEntry {
                members: (0..size).collect(),
                ordinal: 0,
                comm: None,
            }],
        })
    }

    /// The communicator of group `g`: its comm, this rank's index in it, and its size.
    fn comm_of(&self, g: GroupId) -> Result<(&Comm, &[usize])> {
        let e = self.groups.get(g.0 as usize).ok_or_else(|| {
            Error::Internal(format!("group id {} was not created in this world", g.0))
        })?;
        let comm = if g == GroupId::WORLD {
            &self.world
        } else {
            e.comm.as_ref().ok_or_else(|| {
                Error::Internal(format!("group {:?} used before it was created", e.members))
            })?
        };
        Ok((comm, &e.members))
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
            self.groups[i].comm = Some(Comm::new(comm)?);
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
        let plan = crate::plan::plan(ops);
        let mut reqs: Vec<Request> = Vec::new();
        let mut owners: Vec<Owner> = Vec::new();
        for (t, range) in &plan {
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
                                raw::issend(op.input.ptr, n, ty, peer, tag, &self.world)?,
                                Owner::Send,
                            )
                        }
                        Target::Recv(_) => {
                            let n = raw::count(op.output.len)?;
                            (
                                raw::irecv(op.output.ptr, n, ty, peer, &self.world)?,
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
        self.create_missing(&plan)?;
        // One chain per communicator: its collectives, in order.
        let mut chains: Vec<(GroupId, std::ops::Range<usize>)> = plan
            .iter()
            .filter_map(|(t, r)| match t {
                Target::Coll(g) => Some((*g, r.clone())),
                _ => None,
            })
            .collect();
        let mut tasks: Vec<(Task, usize, usize)> = Vec::new(); // (task, chain, outstanding)
        for c in 0..chains.len() {
            self.start_next(
                ops,
                &mut chains,
                c,
                &mut tasks,
                &mut reqs,
                &mut owners,
                pending,
            )?;
        }
        while *pending > 0 {
            let done = raw::wait_some(&mut reqs, |i| match owners[i] {
                Owner::Recv(k) => raw::datatype(ops[k].desc.dtype),
                _ => raw::datatype(DType::U8),
            })?;
            for (i, got) in done {
                *pending -= 1;
                match owners[i] {
                    Owner::Send => {}
                    Owner::Recv(k) => self.check_recv(&ops[k], got)?,
                    Owner::Task(t) => {
                        tasks[t].2 -= 1;
                        if tasks[t].2 == 0 {
                            let chain = tasks[t].1;
                            let new = {
                                let (g, _) = chains[chain];
                                let k = tasks[t].0.op;
                                self.post(&mut tasks[t].0, &ops[k], g)?
                            };
                            if new.is_empty() {
                                self.start_next(
                                    ops,
                                    &mut chains,
                                    chain,
                                    &mut tasks,
                                    &mut reqs,
                                    &mut owners,
                                    pending,
                                )?;
                            } else {
                                tasks[t].2 = new.len();
                                for r in new {
                                    reqs.push(r);
                                    owners.push(Owner::Task(t));
                                    *pending += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Posts the next phase of `task` (on group `g`).
    fn post(&self, task: &mut Task, op: &Op, g: GroupId) -> Result<Vec<Request>> {
        let (comm, members) = self.comm_of(g)?;
        let n = members.len();
        let me = members.binary_search(&self.rank).map_err(|_| {
            Error::Internal(format!(
                "rank {} runs a collective of a group it is not in",
                self.rank
            ))
        })?;
        let root = match op.desc.peer {
            Some(r) => members
                .binary_search(&r)
                .map_err(|_| Error::Internal(format!("root {r} is not a member of {members:?}")))?,
            None => 0,
        };
        // SAFETY: the op's buffers are valid until `execute` returns, which is after every
        // request completes; the task (holding its scratch) lives in `run_batch` as long.
        unsafe { task.advance(op, comm, me, n, root) }
    }

    /// Starts the first op of `chain` that has calls to post, skipping ops that complete at
    /// once (there are none today, but a zero-phase op must not stall its chain).
    #[allow(clippy::too_many_arguments)]
    fn start_next(
        &self,
        ops: &[Op],
        chains: &mut [(GroupId, std::ops::Range<usize>)],
        c: usize,
        tasks: &mut Vec<(Task, usize, usize)>,
        reqs: &mut Vec<Request>,
        owners: &mut Vec<Owner>,
        pending: &mut usize,
    ) -> Result<()> {
        let g = chains[c].0;
        for k in chains[c].1.by_ref() {
            let mut task = Task::new(k);
            let new = self.post(&mut task, &ops[k], g)?;
            if new.is_empty() {
                continue;
            }
            let t = tasks.len();
            tasks.push((task, c, new.len()));
            for r in new {
                reqs.push(r);
                owners.push(Owner::Task(t));
                *pending += 1;
            }
            return Ok(());
        }
        Ok(())
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
