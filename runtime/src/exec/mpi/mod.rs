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
//!    together; one `MPI_Testsome` loop drives all (`drive`). A batch of one small collective
//!    is run without that machinery (`run_small`).
//! 4. **Shared memory on one host.** An all_reduce that is not small (alone, or a packed run of
//!    them), or a large reduce_scatter with contiguous blocks, on a group whose members share a
//!    host is folded through the group's shared-memory window, polled by the same loop
//!    between `MPI_Testsome`s instead of sent as messages (`shm`); and small collectives'
//!    messages go through lanes in that window instead of MPI's sends and receives (`lanes`).
//!
//! **Posted messages** (`isend`/`irecv`) are `MPI_Issend`/`MPI_Irecv` on buffers the backend
//! owns, matched in posting order with the rank's other messages like any send or receive.
//! They join the wait arrays of every later call (so their completion is seen, counted on the
//! monitor's board and checked at once) and are listed on the board whenever the rank blocks,
//! so the monitor never mistakes a peer waiting for one of them for a deadlock.
//!
//! Once anything is posted, the buffers belong to MPI until the requests complete. A failure
//! then cannot be returned to the caller (it could free a buffer MPI still writes), so it ends
//! the job with `MPI_Abort` after printing the error: the same outcome the launcher gives any
//! rank that fails.

mod arena;
mod drive;
mod eager;
mod lanes;
pub(crate) mod launch;
mod monitor;
mod raw;
mod shm;
mod steps;

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::Arc;

use mpi::topology::{Communicator, SimpleCommunicator};

use crate::DType;
use crate::error::{Error, P2pMismatch, Result};
use crate::exec::{Backend, BatchMark, Op, PostedOp, Ticket};
use crate::model::{CallSite, GroupId, OpDesc, OpKind, WorldId};
use crate::plan::Target;
use crate::vars::{self, Choice};

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
    /// Its shared-memory window, created with its communicator when its members share a host
    /// (see `shm`).
    shm: Option<shm::Window>,
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
    /// Whether calls a `#[rankwise::program]` proof covers skip what only that proof needs
    /// (`RANKWISE_MPI_CHECK` other than `all`; see `Backend::trusts_proofs`).
    proofs: bool,
    /// Whether the small rooted collectives of the batch being run are exchanged both ways
    /// (`eager::one_way`): `check`, unless a proof covers the batch.
    rooted_check: bool,
    /// The wait loop's arrays, reused.
    lists: Lists,
    /// Posted sends and receives not yet waited for, in posting order.
    posted: Vec<MpiPosted>,
    next_ticket: u64,
    /// The last batch's board list, kept to be refilled in place by the next batch of the same
    /// length (see [`MpiBackend::board_list`]).
    spare_waits: Arc<[Waiting]>,
    /// Whether groups on one host get a shared-memory window (`RANKWISE_MPI_SHM`, see `shm`).
    shm_mode: shm::Mode,
    /// The batch (`BatchMark::serial`) whose descriptions `spare_waits` holds, if a batch's.
    waits_of: Option<u64>,
    /// Whether this host runs more of the job's ranks than it has cores: a rank polling
    /// shared memory then gives its core up at once when nothing moved (the peer it waits for
    /// may need it), as Open MPI's progress loop does when oversubscribed.
    crowded: bool,
    /// Where the shared heaps of this host's ranks are mapped (see `arena`), if they are.
    heaps: Option<arena::Peers>,
}

/// A posted send or receive: its request works on `data`, which the backend owns.
struct MpiPosted {
    ticket: Ticket,
    desc: OpDesc,
    /// Elements the buffer holds.
    len: usize,
    data: Vec<u8>,
    /// Null once completed.
    req: Request,
    wait: Waiting,
    done: bool,
}

/// The wait loop's arrays (empty between batches).
#[derive(Default)]
struct Lists {
    reqs: Vec<Request>,
    owners: Vec<Owner>,
    done: Vec<(Owner, raw::Received)>,
    waiter: raw::Waiter,
    new: Vec<(Request, Owner)>,
    /// A lone small collective's buffers (see [`MpiBackend::run_small`]).
    exchange: Option<eager::Buffers>,
}

/// `pending` after one of the requests it counts completed (`owner`'s). MPI reports each
/// request once, so it is never zero here; if it were, the bookkeeping is wrong, and the job
/// must end with an error that says so — not panic (debug builds), nor wrap and wait for
/// nothing forever (release builds).
fn settled(pending: usize, owner: &Owner) -> Result<usize> {
    pending.checked_sub(1).ok_or_else(|| {
        Error::Internal(format!(
            "MPI reported a request complete ({owner:?}) while no request was outstanding"
        ))
    })
}

/// What a request in the wait loop belongs to.
#[derive(Clone, Copy, Debug)]
enum Owner {
    Send(usize),
    Recv(usize),
    /// A phase of a collective (a slot of the `drive::Driver`).
    Task(usize),
    /// The call-record exchange of a collective (see `drive`).
    Check(usize),
    /// A message of an exchange of direct messages (see `eager`).
    Eager(usize, eager::Msg),
    /// A posted send or receive, by its index in `posted`.
    Posted(usize),
}

/// How long a lone small collective polls before it tells the monitor it is blocked (see
/// [`MpiBackend::run_small`]); far below the monitor's period, far above a small exchange.
const QUICK: std::time::Duration = std::time::Duration::from_micros(50);

/// `RANKWISE_MPI_CHECK`: whether collectives are checked for agreement before data moves (on
/// unless it is off), and whether calls a `#[rankwise::program]` proof covers are spared the
/// part of it the proof makes unnecessary (unless it is `all`). Every process of a job must
/// agree (mpirun passes its environment on; [`settings_agree`] checks it).
fn check_mode() -> Result<(bool, bool)> {
    Ok(vars::read("RANKWISE_MPI_CHECK", &CHECK_SETTINGS)?.unwrap_or((true, true)))
}

/// `RANKWISE_MPI_CHECK`'s settings: (check, trust proofs).
const CHECK_SETTINGS: [Choice<(bool, bool)>; 3] = [
    Choice {
        values: vars::ON,
        means: "check, sparing what a proof covers: the default",
        value: (true, true),
    },
    Choice {
        values: &["all"],
        means: "check every call as if no proof covered it",
        value: (true, false),
    },
    Choice {
        values: vars::OFF,
        means: "no agreement check before large collectives",
        value: (false, false),
    },
];

/// Checks that every rank of the job runs with the same `RANKWISE_MPI_CHECK` and
/// `RANKWISE_MPI_SHM` (this rank's reading: `check`, `proofs`, `shm`): an error naming each
/// setting and the ranks on each side when they differ. Collective over `world`.
fn settings_agree(
    world: &SimpleCommunicator,
    check: bool,
    proofs: bool,
    shm: shm::Mode,
    heap: bool,
) -> Result<()> {
    let shm_bits = match shm {
        shm::Mode::Off => 0,
        shm::Mode::On => 1,
        shm::Mode::Require => 2,
    };
    let mine =
        c_int::from(check) | c_int::from(proofs) << 1 | shm_bits << 2 | c_int::from(heap) << 4;
    let mut all = vec![0; world.size() as usize];
    raw::poll_allgather_int(world, mine, &mut all)?;
    if all.iter().all(|&w| w == mine) {
        return Ok(());
    }
    let check_of = |w: c_int| match w & 3 {
        0 => "0",
        1 => "all",
        _ => "on (the default)",
    };
    let heap_of = |w: c_int| {
        if w >> 4 & 1 == 1 {
            "on (the default)"
        } else {
            "0"
        }
    };
    let shm_of = |w: c_int| match w >> 2 & 3 {
        0 => "0",
        2 => "require",
        _ => "on (the default)",
    };
    let mut parts = Vec::new();
    for (name, of) in [
        (
            "RANKWISE_MPI_CHECK",
            &check_of as &dyn Fn(c_int) -> &'static str,
        ),
        ("RANKWISE_MPI_SHM", &shm_of),
        ("RANKWISE_MPI_HEAP", &heap_of),
    ] {
        let mut sides: Vec<(&str, Vec<usize>)> = Vec::new();
        for (rank, &w) in all.iter().enumerate() {
            match sides.iter_mut().find(|(v, _)| *v == of(w)) {
                Some((_, ranks)) => ranks.push(rank),
                None => sides.push((of(w), vec![rank])),
            }
        }
        if sides.len() > 1 {
            let said: Vec<String> = sides
                .iter()
                .map(|(v, ranks)| format!("{v} on ranks {ranks:?}"))
                .collect();
            parts.push(format!("{name} is {}", said.join(", ")));
        }
    }
    Err(Error::Backend {
        backend: "mpi",
        detail: format!(
            "the ranks of this job run with different settings: {}; every process must have \
             the same (set them before mpirun, which passes the environment on, or with `-x`)",
            parts.join("; ")
        ),
    })
}

/// The host's cores, whatever this process is bound to (mpirun binds each rank to one core
/// when they do not outnumber them).
fn cores_online() -> usize {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf reads a system constant; no memory is involved.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        if let Ok(n) = usize::try_from(n)
            && n > 0
        {
            return n;
        }
    }
    std::thread::available_parallelism().map_or(1, |n| n.get())
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
        (_, _, Some(key)) => count_step(s, g, key),
        _ => {}
    }
}

/// Counts one more completed step of group `g` (named `key`) on a board.
fn count_step(s: &mut monitor::Snapshot, g: GroupId, key: &Arc<GroupKey>) {
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
        eager::set_tag_ub(tag_ub);
        let (check, proofs) = check_mode()?;
        let members: Vec<usize> = (0..size).collect();
        let shm_mode = shm::Mode::from_env()?;
        // Read once, here, so that a value it does not know stops the job at start.
        crate::exec::copy::read_store_mode()?;
        // Before anything collective depends on them: ranks that disagree would otherwise wait
        // for each other in different calls (a window one rank creates and another skips).
        let heap_on = arena::wanted()?;
        settings_agree(world, check, proofs, shm_mode, heap_on)?;
        let mut be = MpiBackend {
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
                shm: None,
            }],
            board,
            issued_sends: HashMap::new(),
            issued_recvs: HashMap::new(),
            issued_steps: Vec::new(),
            check,
            proofs,
            rooted_check: check,
            lists: Lists::default(),
            posted: Vec::new(),
            next_ticket: 0,
            spare_waits: Arc::default(),
            shm_mode,
            waits_of: None,
            crowded: false,
            heaps: None,
        };
        be.crowded = raw::ranks_on_host(&be.world_eager)? > cores_online();
        // The shared heap, before the rank program makes its first tensor (see `arena`).
        if shm_mode != shm::Mode::Off && heap_on {
            match arena::create(world)? {
                arena::Made::Heaps(heap, peers) => {
                    crate::heap::install(heap);
                    be.heaps = Some(peers);
                }
                arena::Made::Failed if shm_mode == shm::Mode::Require => {
                    return Err(Error::Backend {
                        backend: "mpi",
                        detail: "RANKWISE_MPI_SHM=require, but a rank of this host could not \
                                 create or map its shared heap in /dev/shm (is it mounted, \
                                 writable and not full?)"
                            .into(),
                    });
                }
                arena::Made::Failed | arena::Made::Alone => {}
            }
        }
        // Every rank builds its backend at start: the world's window is made here.
        let heaps = be.heaps_of(&be.groups[0].members);
        be.groups[0].shm = shm::Window::create(&be.world_eager, size, rank, shm_mode, heaps)?;
        Ok(be)
    }

    /// Where each of `members`' shared heaps is mapped here (in their order), if every one of
    /// them has one mapped here.
    fn heaps_of(&self, members: &[usize]) -> Option<Vec<*mut u8>> {
        let peers = self.heaps.as_ref()?;
        members.iter().map(|&m| peers.base_of(m)).collect()
    }

    /// What a call described by `d` waits for, with its sequence number (counted here).
    fn waiting(&mut self, d: &OpDesc) -> Waiting {
        let seq = self.number(d);
        self.waiting_at(d, seq)
    }

    /// The sequence number of a call described by `d` (counted here).
    fn number(&mut self, d: &OpDesc) -> u64 {
        match d.kind {
            OpKind::Send => next_seq(&mut self.issued_sends, d.peer.unwrap_or(0)),
            OpKind::Recv => next_seq(&mut self.issued_recvs, d.peer.unwrap_or(0)),
            _ => self.next_step(d.group),
        }
    }

    /// The sequence number of the next collective step on group `g` (counted here).
    fn next_step(&mut self, g: GroupId) -> u64 {
        let g = g.0 as usize;
        if self.issued_steps.len() <= g {
            self.issued_steps.resize(g + 1, 0);
        }
        self.issued_steps[g] += 1;
        self.issued_steps[g] - 1
    }

    /// What a call described by `d`, numbered `seq`, waits for.
    fn waiting_at(&self, d: &OpDesc, seq: u64) -> Waiting {
        let mut w = Waiting {
            kind: d.kind,
            peer: None,
            group: None,
            seq,
            call: Call::Local(d.clone()),
        };
        self.aim(&mut w, d);
        w
    }

    /// Points `w` at the peer or communicator of `d`, keeping the communicator's key when `w`
    /// already holds it (a bucket refilled in place would otherwise swap a reference count
    /// twice per call).
    fn aim(&self, w: &mut Waiting, d: &OpDesc) {
        match d.kind {
            OpKind::Send | OpKind::Recv => {
                w.peer = Some(d.peer.unwrap_or(0));
                w.group = None;
            }
            _ => {
                w.peer = None;
                let key = self.groups.get(d.group.0 as usize).map(|e| &e.key);
                match (&w.group, key) {
                    (Some(held), Some(key)) if Arc::ptr_eq(held, key) => {}
                    _ => w.group = Some(key.cloned().unwrap_or_default()),
                }
            }
        }
    }

    /// [`Self::waiting`] into an entry of the last batch's list.
    fn refill(&mut self, w: &mut Waiting, d: &OpDesc) {
        w.seq = self.number(d);
        w.kind = d.kind;
        self.aim(w, d);
        match &mut w.call {
            Call::Local(held) => held.clone_from(d),
            call => *call = Call::Local(d.clone()),
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

    /// The shared-memory lanes of group `g` for small collectives' messages, if it has a
    /// window (see `lanes`).
    fn lanes_of(&self, g: GroupId) -> Option<&lanes::Lanes> {
        self.groups.get(g.0 as usize)?.shm.as_ref()?.lanes()
    }

    /// The shared-memory regions of group `g`, if it has a window (see `shm`).
    fn shm_of(&self, g: GroupId) -> Option<&shm::Regions> {
        self.groups
            .get(g.0 as usize)?
            .shm
            .as_ref()
            .map(shm::Window::regions)
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
            let eager = Comm::new(comm.duplicate())?;
            // Its window too, collective over the same members, right after.
            let me = self.member_index(&self.groups[i].members)?;
            let n = self.groups[i].members.len();
            let heaps = self.heaps_of(&self.groups[i].members);
            self.groups[i].shm = shm::Window::create(&eager, n, me, self.shm_mode, heaps)?;
            self.groups[i].comm = Some((Comm::new(comm)?, eager));
        }
        Ok(())
    }

    /// Checks a completed receive of `want` elements described by `d` against what the
    /// sender sent.
    fn check_recv(&self, d: &OpDesc, want: usize, got: raw::Received) -> Result<()> {
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

    /// Runs `ops` (a batch's, numbered by `mark`, or a lone call's); an error after anything was
    /// posted ends the job (see the module docs).
    fn execute_marked(&mut self, ops: &mut [Op], mark: Option<BatchMark>) -> Result<()> {
        let mut pending = 0;
        match self.run_batch(ops, mark, &mut pending) {
            Ok(()) => Ok(()),
            Err(e) if pending == 0 && self.posted.iter().all(|p| p.done) => Err(e),
            Err(e) => abort_job(self.rank, &e),
        }
    }

    /// Runs the batch; on error, tells how much is still posted.
    fn run_batch(
        &mut self,
        ops: &mut [Op],
        mark: Option<BatchMark>,
        pending: &mut usize,
    ) -> Result<()> {
        // The guard that admitted these calls is active on this thread (see `Guard::proven`).
        self.rooted_check = self.check && !(self.proofs && crate::guard::Guard::proven());
        if self.posted.iter().all(|p| p.done) && self.single_small(ops) {
            return self.run_small(&ops[0], pending);
        }
        // Planning sorts the ops by target; the board's entries (and the steps the driver
        // sends in its headers) are indexed like the sorted ops, so they are made after it.
        // (Numbering is per target, which the stable sort keeps in program order.)
        let plan = crate::plan::plan(ops);
        // A batch that repeats the one whose descriptions the kept list holds needs only its
        // sequence numbers renewed.
        let same = mark.is_some_and(|m| m.repeats.is_some() && m.repeats == self.waits_of);
        let waits = self.board_list(ops, same);
        self.board.update(|s| {
            s.phase = Phase::Blocked;
            s.waiting = Arc::clone(&waits);
            s.done.clear();
            s.done.resize(waits.len(), false);
            for (j, p) in self.posted.iter().enumerate() {
                s.done[ops.len() + j] = p.done;
            }
        });
        let result = self.post_and_wait(ops, &plan, &waits, pending);
        self.board.update(|s| {
            s.phase = Phase::Running;
            s.waiting = Arc::default();
            s.done.clear();
        });
        self.spare_waits = waits;
        self.waits_of = mark.map(|m| m.serial);
        result
    }

    /// What the batch `ops` waits for, for the board: each op, then the posted messages still
    /// open (board index `ops.len() + j`). A bucket repeated every step would otherwise build,
    /// copy and free a list of a thousand entries per batch — over 100 KiB, which the allocator
    /// hands back to the system and pages in again each time — so the last batch's list is
    /// refilled in place when nobody else holds it (the monitor clones it only while judging).
    fn board_list(&mut self, ops: &[Op], same: bool) -> Arc<[Waiting]> {
        let n = ops.len() + self.posted.len();
        let mut waits = std::mem::take(&mut self.spare_waits);
        if let Some(list) = Arc::get_mut(&mut waits).filter(|l| l.len() == n) {
            let (mine, posted) = list.split_at_mut(ops.len());
            for (w, o) in mine.iter_mut().zip(ops) {
                if same {
                    w.seq = self.number(&o.desc);
                } else {
                    self.refill(w, &o.desc);
                }
            }
            for (w, p) in posted.iter_mut().zip(&self.posted) {
                *w = p.wait.clone();
            }
            return waits;
        }
        let mut list: Vec<Waiting> = Vec::with_capacity(n);
        list.extend(ops.iter().map(|o| self.waiting(&o.desc)));
        list.extend(self.posted.iter().map(|p| p.wait.clone()));
        list.into()
    }

    /// Whether the batch is one small collective on a communicator that exists: the common
    /// case of a single blocking call, which [`Self::run_small`] runs without the machinery of
    /// batches (the same messages as `drive` would send, so members may take either path).
    fn single_small(&self, ops: &[Op]) -> bool {
        let [op] = ops else { return false };
        if matches!(op.desc.kind, OpKind::Send | OpKind::Recv) {
            return false;
        }
        self.eager_of(op.desc.group).is_ok_and(|(_, members)| {
            let g = op.desc.group;
            let (lanes, heaps) = (
                self.lanes_of(g).is_some(),
                self.shm_of(g).is_some_and(shm::Regions::has_heaps),
            );
            let (n, check) = (members.len(), self.rooted_check);
            eager::proposal(ops, 0, 1, n, check, false, 1, lanes, heaps).calls == 1
        })
    }

    /// Runs one small collective as one exchange (see `eager`).
    ///
    /// The board hears of the call only if it has to wait: an exchange that completes within
    /// [`QUICK`] (most do, when the members call it at about the same time) changes nothing the
    /// monitor could judge — it judges only when every rank is blocked, and samples every 100
    /// ms — so it costs no board update beyond its count. Publishing every call cost about a
    /// quarter of a microsecond (an allocation and two locks), which is most of what separated
    /// a small collective from raw MPI's.
    fn run_small(&mut self, op: &Op, pending: &mut usize) -> Result<()> {
        let mut waiter = std::mem::take(&mut self.lists.waiter);
        let mut reqs = std::mem::take(&mut self.lists.reqs);
        let mut from = std::mem::take(&mut self.lists.owners);
        let spare = self.lists.exchange.take();
        reqs.clear();
        from.clear();
        let seq = self.next_step(op.desc.group);
        let (comm, members) = self.eager_of(op.desc.group)?;
        let me = self.member_index(members)?;
        let lanes = self.lanes_of(op.desc.group);
        // SAFETY: the op's buffers are valid until `execute` returns, which is after every
        // request completes (or never: a failure after posting ends the job, and the exchange
        // is leaked so that its memory outlives the requests).
        // (Counted as posted at once: if posting fails halfway, the job must end.)
        let (mut ex, _) = unsafe {
            eager::Exchange::post(
                std::slice::from_ref(op),
                false,
                seq,
                comm,
                members,
                me,
                self.rooted_check,
                spare,
                lanes,
                |r, j| {
                    reqs.push(r);
                    from.push(Owner::Eager(0, j));
                    *pending += 1;
                },
            )?
        };
        let ty = |_| raw::datatype(DType::U8);
        let mut blocked = false;
        // The clock starts at the first poll that reads it: most exchanges complete before
        // then, and reading it at every call's start was 3 % of a lone 8-byte call in perf
        // (the call 30–50 ns faster without it, at world 2 on this VM).
        let mut start: Option<std::time::Instant> = None;
        let mut polls = 0u32;
        let crowded = self.crowded;
        let result = (|| -> Result<()> {
            loop {
                let busy = ex.lanes_busy();
                if *pending == 0 && !busy {
                    break;
                }
                let mut moved = false;
                if let (true, Some(l)) = (busy, lanes) {
                    // SAFETY: the lanes the exchange was posted with.
                    let (n, progress) = unsafe { ex.poll_lanes(l)? };
                    moved = n > 0;
                    if progress.heads_now && !progress.all_now {
                        // Headers before data (see `drive`): report, do not wait.
                        ex.verify(&op.desc, comm, members, me, seq)?;
                    }
                }
                if *pending > 0 {
                    let done = if blocked && !ex.lanes_busy() {
                        if ex.is_direct() {
                            // Headers may complete before data, and are verified first.
                            waiter.wait_some(&mut reqs, ty)?
                        } else {
                            waiter.wait_all(&mut reqs, ty)?
                        }
                    } else {
                        waiter.test_all(&mut reqs, ty)?.unwrap_or(&[])
                    };
                    moved |= !done.is_empty();
                    for &(i, got) in done {
                        *pending = settled(*pending, &from[i])?;
                        if let Owner::Eager(_, msg) = from[i] {
                            let progress = ex.received(msg, got)?;
                            if progress.heads_now && !progress.all_now {
                                ex.verify(&op.desc, comm, members, me, seq)?;
                            }
                        }
                    }
                }
                if moved {
                    continue;
                }
                polls += 1;
                if lanes.is_some() && (crowded || polls.is_multiple_of(64)) {
                    // Only shared memory moves this exchange: the member it waits for may need
                    // this core (MPI's own progress loop yields the same way).
                    std::thread::yield_now();
                }
                // The clock is read every 16 polls (a poll is far shorter).
                if blocked
                    || !polls.is_multiple_of(16)
                    || start.get_or_insert_with(std::time::Instant::now).elapsed() < QUICK
                {
                    continue;
                }
                // It has to wait: the monitor must know for what.
                let w = self.waiting_at(&op.desc, seq);
                self.board.update(|s| {
                    s.phase = Phase::Blocked;
                    s.waiting = Arc::new([w]);
                    s.done.clear();
                    s.done.push(false);
                });
                blocked = true;
            }
            // SAFETY: every message has arrived; the op's buffers are valid.
            unsafe { ex.deliver(std::slice::from_ref(op), comm, members, me, seq, lanes) }.map(drop)
        })()
        .map_err(|e| eager::in_exchange(e, &op.desc, seq, members));
        if let Err(e) = result {
            std::mem::forget(ex);
            return Err(e);
        }
        let key = self.groups.get(op.desc.group.0 as usize).map(|e| &e.key);
        self.board.update(|s| {
            if let Some(key) = key {
                count_step(s, op.desc.group, key);
            }
            if blocked {
                s.phase = Phase::Running;
                s.waiting = Arc::default();
                s.done.clear();
            }
        });
        self.lists.waiter = waiter;
        self.lists.reqs = reqs;
        self.lists.owners = from;
        self.lists.exchange = Some(ex.into_buffers());
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
            exchange,
        } = std::mem::take(&mut self.lists);
        reqs.clear();
        owners.clear();
        // Posted messages complete while the batch runs: their completions are taken here.
        for (j, p) in self.posted.iter().enumerate() {
            if !p.done {
                reqs.push(p.req);
                owners.push(Owner::Posted(j));
            }
        }
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
        let mut finished_posts: Vec<usize> = Vec::new();
        let mut driver = drive::Driver::new(self, ops, waits, chains);
        new.clear();
        let mut idle_polls = 0u32;
        let crowded = self.crowded;
        let mut drive = || -> Result<()> {
            driver.start(&mut new)?;
            loop {
                for (r, o) in new.drain(..) {
                    reqs.push(r);
                    owners.push(o);
                    *pending += 1;
                }
                let polling = driver.polling();
                if *pending == 0 && !polling {
                    break;
                }
                let posted = &self.posted;
                let ty = |i: usize| match owners[i] {
                    Owner::Recv(k) => raw::datatype(ops[k].desc.dtype),
                    Owner::Posted(j) => raw::datatype(posted[j].desc.dtype),
                    _ => raw::datatype(DType::U8),
                };
                // A shared-memory step in progress is polled between tests of the requests;
                // otherwise the loop waits for one to complete (`Waiter::wait_some`, which
                // polls too: see why there).
                let finished = if polling {
                    let moved = driver.poll_shared(&mut new)?;
                    if !new.is_empty() {
                        continue;
                    }
                    if !moved {
                        idle_polls += 1;
                        if crowded || idle_polls.is_multiple_of(64) {
                            // Let the members being waited for run (at once when ranks
                            // outnumber cores: they may need this one).
                            std::thread::yield_now();
                        }
                    }
                    if reqs.is_empty() {
                        continue;
                    }
                    waiter.test_some(&mut reqs, ty)?
                } else {
                    waiter.wait_some(&mut reqs, ty)?
                };
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
                    if let Owner::Posted(j) = owner {
                        // Not the batch's: completes a posted message instead (recorded on the
                        // board now, in `posted` once the driver lets go of `self`).
                        self.check_posted(j, ops.len() + j, got)?;
                        finished_posts.push(j);
                        continue;
                    }
                    *pending = settled(*pending, &owner)?;
                    match owner {
                        Owner::Send(k) => self.completed(k, &waits[k], GroupId::WORLD),
                        Owner::Recv(k) => {
                            self.check_recv(&ops[k].desc, ops[k].output.len, got)?;
                            self.completed(k, &waits[k], GroupId::WORLD);
                        }
                        Owner::Check(s) => driver.done(s, true, &mut new)?,
                        Owner::Task(s) => driver.done(s, false, &mut new)?,
                        Owner::Eager(s, from) => driver.eager_done(s, from, got, &mut new)?,
                        Owner::Posted(_) => {}
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
        for j in finished_posts {
            self.mark_posted_done(j);
        }
        self.lists = Lists {
            reqs,
            owners,
            done,
            waiter,
            new,
            exchange,
        };
        Ok(())
    }

    /// Records that posted message `j` completed (board index `k` while the rank is blocked)
    /// and checks a receive against what was sent.
    fn posted_done(&mut self, j: usize, k: usize, got: raw::Received) -> Result<()> {
        self.mark_posted_done(j);
        self.check_posted(j, k, got)
    }

    /// The board's and the check's part of [`Self::posted_done`].
    fn check_posted(&self, j: usize, k: usize, got: raw::Received) -> Result<()> {
        let Some(p) = self.posted.get(j) else {
            return Ok(());
        };
        if p.desc.kind == OpKind::Recv {
            self.check_recv(&p.desc, p.len, got)?;
        }
        self.completed(k, &p.wait, GroupId::WORLD);
        Ok(())
    }

    /// `posted`'s part of [`Self::posted_done`]: MPI freed the request.
    fn mark_posted_done(&mut self, j: usize) {
        if let Some(p) = self.posted.get_mut(j) {
            // SAFETY: reading rsmpi's null-request handle, initialised before `main`.
            p.req = unsafe { mpi::ffi::RSMPI_REQUEST_NULL };
            p.done = true;
        }
    }

    /// Blocks until the posted messages `until` selects have completed (everything else that
    /// is posted progresses and is recorded meanwhile), telling the monitor what it waits for:
    /// posted message `waited.0` at the `wait()` on `waited.1`, or (none) at the rank's return.
    fn wait_posted(
        &mut self,
        waited: Option<(usize, CallSite)>,
        until: impl Fn(&[MpiPosted]) -> bool,
    ) -> Result<()> {
        // Reported as the threads backend reports it: the wait and the message it waits for.
        let waits: Arc<[Waiting]> = self
            .posted
            .iter()
            .enumerate()
            .map(|(j, p)| {
                let what = p.desc.summary();
                let call = match waited {
                    Some((k, site)) if k == j => Call::Remote {
                        what: format!("wait() for {what} posted at {}", p.desc.site),
                        site: site.to_string(),
                    },
                    Some(_) => p.wait.call.clone(),
                    None => Call::Remote {
                        what: format!("the rank's return, which waits for {what} posted here"),
                        site: p.desc.site.to_string(),
                    },
                };
                Waiting {
                    call,
                    ..p.wait.clone()
                }
            })
            .collect();
        self.board.update(|s| {
            s.phase = Phase::Blocked;
            s.waiting = Arc::clone(&waits);
            s.done = self.posted.iter().map(|p| p.done).collect();
        });
        let mut waiter = std::mem::take(&mut self.lists.waiter);
        let mut result = Ok(());
        while !until(&self.posted) {
            let mut reqs: Vec<Request> = Vec::new();
            let mut idx: Vec<usize> = Vec::new();
            for (j, p) in self.posted.iter().enumerate() {
                if !p.done {
                    reqs.push(p.req);
                    idx.push(j);
                }
            }
            let posted = &self.posted;
            let finished: Vec<(usize, raw::Received)> =
                match waiter.wait_some(&mut reqs, |i| raw::datatype(posted[idx[i]].desc.dtype)) {
                    Ok(f) => f.iter().map(|&(i, got)| (idx[i], got)).collect(),
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                };
            for (j, got) in finished {
                if let Err(e) = self.posted_done(j, j, got) {
                    result = Err(e);
                }
            }
            if result.is_err() {
                break;
            }
        }
        self.lists.waiter = waiter;
        self.board.update(|s| {
            s.phase = Phase::Running;
            s.waiting = Arc::default();
            s.done.clear();
        });
        result
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

    fn trusts_proofs(&self) -> bool {
        self.check && self.proofs
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
            shm: None,
        });
        Ok(GroupId(self.groups.len() as u32 - 1))
    }

    fn execute(&mut self, ops: &mut [Op]) -> Result<()> {
        self.execute_marked(ops, None)
    }

    fn execute_batch(&mut self, ops: &mut [Op], mark: BatchMark) -> Result<()> {
        self.execute_marked(ops, Some(mark))
    }

    fn post(&mut self, op: PostedOp) -> Result<Ticket> {
        let PostedOp { desc, mut data } = op;
        let len = desc.numel();
        let ty = raw::datatype(desc.dtype);
        let n = raw::count(len)?;
        let peer = raw::count(desc.peer.unwrap_or(0))?;
        let wait = self.waiting(&desc);
        // SAFETY: `data` holds `len` elements of the dtype and is owned by `self.posted` until
        // the request completes; moving the `Vec` into it moves no bytes. A failure with
        // requests posted ends the job (see `execute`, `wait`, `drain` and `Drop`).
        let req = unsafe {
            match desc.kind {
                OpKind::Send => raw::isend(
                    raw::SendMode::Rendezvous,
                    data.as_mut_ptr(),
                    n,
                    ty,
                    peer,
                    tag_of(desc.dtype),
                    &self.world,
                )?,
                _ => raw::irecv(data.as_mut_ptr(), n, ty, peer, None, &self.world)?,
            }
        };
        let ticket = Ticket(self.next_ticket);
        self.next_ticket += 1;
        self.posted.push(MpiPosted {
            ticket,
            desc,
            len,
            data,
            req,
            wait,
            done: false,
        });
        Ok(ticket)
    }

    fn wait(&mut self, ticket: Ticket, site: CallSite) -> Result<Vec<u8>> {
        let Some(j) = self.posted.iter().position(|p| p.ticket == ticket) else {
            return Err(Error::Internal(format!(
                "wait on request {} that this rank never posted or already waited for",
                ticket.0
            )));
        };
        if let Err(e) = self.wait_posted(Some((j, site)), |p| p[j].done) {
            abort_job(self.rank, &e);
        }
        Ok(self.posted.remove(j).data)
    }

    fn drain(&mut self) -> Result<()> {
        if let Err(e) = self.wait_posted(None, |p| p.iter().all(|p| p.done)) {
            abort_job(self.rank, &e);
        }
        self.posted.clear();
        Ok(())
    }
}

impl Drop for MpiBackend {
    /// A backend dropped with messages still posted (the rank failed: the job is ending) leaks
    /// their buffers, which MPI may still write.
    fn drop(&mut self) {
        for p in self.posted.drain(..) {
            if !p.done {
                std::mem::forget(p.data);
            }
        }
    }
}
