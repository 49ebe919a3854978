//! NCCL's semantics on host memory: the oracle for the lowering, and a way to run a program's
//! NCCL call lists on a laptop.
//!
//! Each rank is a thread (as in the threads backend). A batch is lowered exactly as for a GPU
//! ([`lower::lower`]); the copies run on host buffers, and the group's calls are posted to a
//! shared emulated NCCL that matches them the way NCCL does — collectives per communicator in
//! order, sends and receives per (communicator, sender, receiver) in order — and completes the
//! group when every call in it has completed (a send when its receiver has taken it).
//!
//! It is strict where NCCL is silent: members issuing different collectives at one step, a
//! receive whose sender sent a different count or dtype, two calls of one group touching the
//! same bytes (one of them writing), and any address outside its buffer are errors naming the
//! op, not undefined behaviour. Every member folds reductions in member order, as the threads
//! backend does, so results are compared bit for bit; real NCCL orders floating-point sums by
//! its ring or tree and may round differently.
//!
//! Nothing here shares a pointer between threads: a rank's posted data is copied into the
//! shared state, and only the rank itself writes its buffers.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::lower::{self, At, Call, Coll, Comm, Copy2d, Lowered, Mem, Red};
use crate::element::{Arith, Element, with_dtype};
use crate::error::{
    CollectiveMismatch, DeadlockReport, Error, P2pMismatch, PeerFailure, RankWait, Result,
};
use crate::exec::local::{Abort, WorldState};
use crate::exec::{Backend, Op, copy::copy_rows};
use crate::model::{CallSite, GroupId, WorldId};
use crate::reduce::Reducer;
use crate::tensor::{Device, DeviceMemory};
use crate::{DType, ReduceOp};

mod memory;

/// The NCCL version the emulation lowers for unless told otherwise: the one whose header CI
/// checks `nccl-sys` against.
pub(crate) const DEFAULT_VERSION: u32 = 23203;

/// How often a waiting rank looks at the world's abort and exit flags, which are not tied to
/// this module's condition variable.
const POLL: Duration = Duration::from_millis(5);

/// The emulated NCCL shared by the ranks of one world.
pub(crate) struct HostNccl {
    shared: Arc<WorldState>,
    version: u32,
    pack: bool,
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    /// Collective steps under way, by communicator and step.
    steps: HashMap<(Comm, u64), Step>,
    /// Messages by (communicator, sender, receiver), in ranks of that communicator.
    chans: HashMap<(Comm, usize, usize), Chan>,
    /// Bumped on every change; a rank that found nothing to do records the generation it saw.
    generation: u64,
    stuck: HashMap<usize, (u64, RankWait)>,
}

/// One collective step of one communicator.
struct Step {
    posts: Vec<Option<Post>>,
    /// Each member's result, once every member has posted.
    results: Option<Vec<Option<Vec<u8>>>>,
    taken: usize,
}

/// A member's collective call as posted: what it is and the data it contributes.
struct Post {
    sig: Sig,
    data: Vec<u8>,
    site: CallSite,
    what: String,
}

/// What members of one step must agree on.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Sig {
    coll: Coll,
    count: usize,
    dtype: DType,
    op: Option<Red>,
}

impl std::fmt::Display for Sig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "an NCCL {:?} of {} × {}",
            self.coll, self.count, self.dtype
        )
    }
}

#[derive(Default)]
struct Chan {
    queue: VecDeque<Msg>,
    /// Messages the receiver has taken.
    taken: u64,
}

struct Msg {
    data: Vec<u8>,
    count: usize,
    dtype: DType,
    site: CallSite,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // Nothing panics while holding the lock in a way that leaves the state half-changed.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl HostNccl {
    pub(crate) fn new(shared: Arc<WorldState>, version: u32, pack: bool) -> Arc<Self> {
        Arc::new(HostNccl {
            shared,
            version,
            pack,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        })
    }
}

/// One rank's handle.
pub(crate) struct HostBackend {
    nccl: Arc<HostNccl>,
    rank: usize,
    /// Members of every group this rank knows, by id (index 0: the world).
    groups: Vec<Box<[usize]>>,
    /// Next collective step per communicator, and next message per (communicator, peer).
    steps: HashMap<Comm, u64>,
    sent: HashMap<(Comm, usize), u64>,
    received: HashMap<(Comm, usize), u64>,
}

impl HostBackend {
    pub(crate) fn new(nccl: Arc<HostNccl>, rank: usize) -> Self {
        let world = nccl.shared.world;
        HostBackend {
            nccl,
            rank,
            groups: vec![(0..world).collect()],
            steps: HashMap::new(),
            sent: HashMap::new(),
            received: HashMap::new(),
        }
    }

    /// This rank's index in `comm`.
    fn me(&self, comm: Comm) -> usize {
        match comm {
            Comm::P2p => self.rank,
            Comm::Group(g) => self.groups[g.0 as usize]
                .binary_search(&self.rank)
                .unwrap_or(0),
        }
    }

    fn members(&self, comm: Comm) -> &[usize] {
        match comm {
            Comm::P2p => &self.groups[0],
            Comm::Group(g) => &self.groups[g.0 as usize],
        }
    }

    /// Makes sure every group the batch uses is in `self.groups`.
    fn learn_groups(&mut self, ops: &[Op]) -> Result<()> {
        for op in ops {
            let i = op.desc.group.0 as usize;
            while self.groups.len() <= i {
                let id = GroupId(self.groups.len() as u32);
                let g = self.nccl.shared.group(id).ok_or_else(|| {
                    Error::Internal(format!("group id {} was not created in this world", id.0))
                })?;
                self.groups.push(g.members.clone());
            }
        }
        Ok(())
    }
}

/// A batch's buffers, resolved from the lowering's symbolic addresses with bounds checks.
struct Buffers<'a> {
    ops: &'a [Op],
    scratch: Vec<Vec<u64>>,
    sizes: &'a [usize],
}

impl Buffers<'_> {
    /// The address range `bytes` long at `at`, checked against its buffer.
    fn range(&self, at: At, bytes: usize) -> Result<Range<usize>> {
        let (base, size) = match at.mem {
            Mem::In(i) | Mem::Out(i) => {
                let op = self
                    .ops
                    .get(i)
                    .ok_or_else(|| Error::Internal(format!("lowering named op {i}")))?;
                let buf = if matches!(at.mem, Mem::In(_)) {
                    op.input
                } else {
                    op.output
                };
                if buf.is_none() {
                    return Err(Error::Internal(format!(
                        "{}: the NCCL lowering used a buffer this rank does not have ({:?})",
                        op.desc.site, at.mem
                    )));
                }
                (buf.ptr as usize, buf.len * op.desc.dtype.size())
            }
            Mem::Scratch(s) => {
                let b = self
                    .scratch
                    .get(s)
                    .ok_or_else(|| Error::Internal(format!("lowering named scratch {s}")))?;
                (b.as_ptr() as usize, self.sizes[s])
            }
        };
        let r = at.within(bytes, size)?;
        Ok(base + r.start..base + r.end)
    }

    /// Runs a strided copy after checking both regions and that they do not overlap.
    fn copy(&self, c: &Copy2d) -> Result<()> {
        if c.rows == 0 || c.width == 0 {
            return Ok(());
        }
        let (dst_bytes, src_bytes) = c.extents()?;
        let dst = self.range(c.dst, dst_bytes)?;
        let src = self.range(c.src, src_bytes)?;
        if overlap(&dst, &src) {
            return Err(Error::Internal(format!("a copy overlaps itself: {c:?}")));
        }
        // SAFETY: both regions lie inside live buffers of this batch (checked above), do not
        // overlap, and only this thread touches this rank's buffers during `execute`.
        unsafe {
            copy_rows(
                dst.start as *mut u8,
                c.dst_pitch,
                src.start as *const u8,
                c.src_pitch,
                c.rows,
                c.width,
            )
        };
        Ok(())
    }

    fn read(&self, at: At, bytes: usize) -> Result<Vec<u8>> {
        let r = self.range(at, bytes)?;
        // SAFETY: `r` lies inside a live buffer of this batch (checked), read only here.
        Ok(unsafe { std::slice::from_raw_parts(r.start as *const u8, bytes) }.to_vec())
    }

    fn write(&self, at: At, data: &[u8]) -> Result<()> {
        let r = self.range(at, data.len())?;
        // SAFETY: `r` lies inside a live buffer of this batch that this rank may write (checked
        // by `check_hazards`), and no other thread touches it.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), r.start as *mut u8, data.len()) };
        Ok(())
    }
}

fn overlap(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

/// A region of a batch's buffers: where it starts and how many bytes.
type Region = Option<(At, usize)>;

/// Bytes a call reads and writes on this rank.
fn footprint(call: &Call, me: usize, n: usize) -> (Region, Region) {
    match *call {
        Call::Send {
            buf, count, dtype, ..
        } => (Some((buf, count * dtype.size())), None),
        Call::Recv {
            buf, count, dtype, ..
        } => (None, Some((buf, count * dtype.size()))),
        Call::Coll {
            coll,
            send,
            recv,
            count,
            dtype,
            ..
        } => {
            let (sb, rb) = coll.bytes(count * dtype.size(), n, me);
            (
                send.filter(|_| sb > 0).map(|a| (a, sb)),
                recv.filter(|_| rb > 0).map(|a| (a, rb)),
            )
        }
    }
}

// SAFETY: every byte this backend reads or writes goes through `Buffers::range`, which checks
// it against the op's own buffer length (`len` elements of its dtype) or a scratch buffer it
// allocated; a peer's data is copied into this rank's memory only after its length is checked
// against the call's count; nothing is touched after `execute` returns.
unsafe impl Backend for HostBackend {
    fn name(&self) -> &'static str {
        "nccl-host"
    }

    fn world_id(&self) -> WorldId {
        self.nccl.shared.id
    }

    fn create_group(&mut self, members: &[usize], ordinal: u32) -> Result<GroupId> {
        Ok(self.nccl.shared.group_id(members, ordinal))
    }

    fn supports(&self, op: ReduceOp) -> bool {
        lower::has_reduction(op)
    }

    /// The rank's emulated GPU, as under NCCL rank r of one process uses GPU r.
    fn device(&self) -> Device {
        Device::Cuda(self.rank as u32)
    }

    fn alloc_device(&mut self, bytes: usize) -> Option<Result<Box<dyn DeviceMemory>>> {
        Some(
            memory::EmulatedMemory::new(self.device(), bytes)
                .map(|m| Box::new(m) as Box<dyn DeviceMemory>),
        )
    }

    fn execute(&mut self, ops: &mut [Op]) -> Result<()> {
        let result = self.run(ops);
        lock(&self.nccl.state).stuck.remove(&self.rank);
        result
    }
}

/// A receive this rank waits to complete.
#[derive(Clone, Copy)]
struct Incoming {
    of: usize,
    buf: At,
    count: usize,
    dtype: DType,
}

impl HostBackend {
    /// Stops the world with a world-level error (mismatch, deadlock) found while waiting at
    /// `site`, and returns what stops it: that error, or an earlier cause. (A rank that panics
    /// aborts the world and then exits; a peer that checked for an abort just before, and
    /// finds it exited just after, sees every other rank stuck — a deadlock by the numbers,
    /// but the panic is what happened, and what every rank must report.)
    fn fail(&self, err: Error, site: Option<CallSite>) -> Error {
        self.nccl.shared.abort(Abort::Error(err));
        self.nccl.changed.notify_all();
        self.nccl.shared.abort_error(self.rank, site)
    }

    fn run(&mut self, ops: &mut [Op]) -> Result<()> {
        if self.nccl.shared.is_aborted() {
            let site = ops.first().map(|o| o.desc.site);
            return Err(self.nccl.shared.abort_error(self.rank, site));
        }
        crate::plan::plan(ops);
        self.learn_groups(ops)?;
        let descs: Vec<_> = ops.iter().map(|o| &o.desc).collect();
        let lowered = lower::lower(
            &descs,
            &lower::Setting {
                rank: self.rank,
                version: self.nccl.version,
                groups: &self.groups,
                pack: self.nccl.pack,
            },
        )?;
        let bufs = Buffers {
            ops,
            scratch: lowered
                .scratch
                .iter()
                .map(|&b| vec![0u64; b.div_ceil(8)])
                .collect(),
            sizes: &lowered.scratch,
        };
        for c in &lowered.pre {
            bufs.copy(c)?;
        }
        self.check_hazards(&lowered, &bufs)?;
        self.group(&lowered, &bufs)?;
        for c in &lowered.post {
            bufs.copy(c)?;
        }
        Ok(())
    }

    /// Within one group NCCL runs the calls concurrently: a call may not write bytes another
    /// call reads or writes.
    fn check_hazards(&self, lowered: &Lowered, bufs: &Buffers<'_>) -> Result<()> {
        let mut touched: Vec<(usize, Range<usize>, bool)> = Vec::new();
        for (k, call) in lowered.calls.iter().enumerate() {
            let comm = call.comm();
            let (r, w) = footprint(call, self.me(comm), self.members(comm).len());
            if let Some((at, b)) = r {
                touched.push((k, bufs.range(at, b)?, false));
            }
            if let Some((at, b)) = w {
                touched.push((k, bufs.range(at, b)?, true));
            }
        }
        for (i, (ka, a, wa)) in touched.iter().enumerate() {
            for (kb, b, wb) in &touched[i + 1..] {
                if ka != kb && (*wa || *wb) && overlap(a, b) {
                    return Err(Error::Internal(format!(
                        "the NCCL lowering put calls {ka} and {kb} of one group on the same \
                         bytes:\n{lowered}"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Posts the group's calls and waits until all of them have completed.
    fn group(&mut self, lowered: &Lowered, bufs: &Buffers<'_>) -> Result<()> {
        // What this rank still waits for: collective results, messages to take, sends to be
        // taken.
        let mut colls: Vec<(Comm, u64, &Call)> = Vec::new();
        let mut recvs: Vec<(Comm, usize, u64, Incoming)> = Vec::new();
        let mut sends: Vec<(Comm, usize, u64, usize)> = Vec::new();
        let mut posted_colls = Vec::new();
        let mut posted_msgs = Vec::new();
        for call in &lowered.calls {
            let comm = call.comm();
            let (me, n) = (self.me(comm), self.members(comm).len());
            match *call {
                Call::Coll {
                    of,
                    coll,
                    send,
                    count,
                    dtype,
                    op,
                    ..
                } => {
                    let seq = next(&mut self.steps, comm);
                    let data = match footprint(call, me, n).0 {
                        Some((at, b)) if send.is_some() => bufs.read(at, b)?,
                        _ => Vec::new(),
                    };
                    let desc = &bufs.ops[of].desc;
                    let sig = Sig {
                        coll,
                        count,
                        dtype,
                        op,
                    };
                    posted_colls.push((
                        comm,
                        seq,
                        me,
                        n,
                        Post {
                            sig,
                            data,
                            site: desc.site,
                            what: desc.summary(),
                        },
                    ));
                    colls.push((comm, seq, call));
                }
                Call::Send {
                    of,
                    peer,
                    buf,
                    count,
                    dtype,
                    ..
                } => {
                    let k = next(&mut self.sent, (comm, peer));
                    let data = bufs.read(buf, count * dtype.size())?;
                    let site = bufs.ops[of].desc.site;
                    posted_msgs.push((
                        (comm, me, peer),
                        Msg {
                            data,
                            count,
                            dtype,
                            site,
                        },
                    ));
                    sends.push((comm, peer, k, of));
                }
                Call::Recv {
                    of,
                    peer,
                    buf,
                    count,
                    dtype,
                    ..
                } => {
                    let k = next(&mut self.received, (comm, peer));
                    recvs.push((
                        comm,
                        peer,
                        k,
                        Incoming {
                            of,
                            buf,
                            count,
                            dtype,
                        },
                    ));
                }
            }
        }
        let first_site = bufs.ops.first().map(|o| o.desc.site);
        let nccl = Arc::clone(&self.nccl);
        let mut st = lock(&nccl.state);
        for (comm, seq, me, n, post) in posted_colls {
            let step = st.steps.entry((comm, seq)).or_insert_with(|| Step {
                posts: (0..n).map(|_| None).collect(),
                results: None,
                taken: 0,
            });
            step.posts[me] = Some(post);
            if step.posts.iter().all(Option::is_some) {
                match complete(step, self.members(comm), seq) {
                    Ok(results) => step.results = Some(results),
                    Err(e) => {
                        drop(st);
                        return Err(self.fail(e, first_site));
                    }
                }
            }
        }
        for (key, msg) in posted_msgs {
            st.chans.entry(key).or_default().queue.push_back(msg);
        }
        st.generation += 1;
        nccl.changed.notify_all();

        let started = Instant::now();
        let deadline = nccl.shared.timeout.and_then(|t| started.checked_add(t));
        loop {
            if nccl.shared.is_aborted() {
                return Err(nccl.shared.abort_error(self.rank, first_site));
            }
            let mut progressed = false;
            // Collective results this rank has not taken yet.
            let mut i = 0;
            while i < colls.len() {
                let (comm, seq, call) = colls[i];
                let me = self.me(comm);
                let Some(step) = st.steps.get_mut(&(comm, seq)) else {
                    return Err(Error::Internal("an emulated step vanished".into()));
                };
                let Some(results) = step.results.as_mut() else {
                    i += 1;
                    continue;
                };
                if let (Some(data), Call::Coll { recv: Some(at), .. }) = (results[me].take(), call)
                {
                    bufs.write(*at, &data)?;
                }
                step.taken += 1;
                if step.taken == step.posts.len() {
                    st.steps.remove(&(comm, seq));
                }
                colls.swap_remove(i);
                progressed = true;
            }
            // Messages for this rank, in order per channel.
            let mut i = 0;
            while i < recvs.len() {
                let (
                    comm,
                    peer,
                    k,
                    Incoming {
                        of,
                        buf,
                        count,
                        dtype,
                    },
                ) = recvs[i];
                let me = self.me(comm);
                let chan = st.chans.entry((comm, peer, me)).or_default();
                if chan.taken != k {
                    i += 1;
                    continue;
                }
                let Some(msg) = chan.queue.pop_front() else {
                    i += 1;
                    continue;
                };
                chan.taken += 1;
                if msg.count != count || msg.dtype != dtype {
                    let recv = &bufs.ops[of].desc;
                    let err = Error::P2pMismatch(Box::new(P2pMismatch {
                        src: self.members(comm)[peer],
                        dst: self.rank,
                        send_site: Some(msg.site),
                        recv_site: recv.site,
                        send_what: format!("{}[{}]", msg.dtype, msg.count),
                        recv_what: format!("{dtype}[{count}]"),
                    }));
                    drop(st);
                    return Err(self.fail(err, first_site));
                }
                bufs.write(buf, &msg.data)?;
                recvs.swap_remove(i);
                progressed = true;
            }
            sends.retain(|&(comm, peer, k, _)| {
                let me = self.me(comm);
                st.chans.get(&(comm, me, peer)).is_none_or(|c| c.taken <= k)
            });
            if progressed {
                st.generation += 1;
                st.stuck.remove(&self.rank);
                nccl.changed.notify_all();
            }
            if colls.is_empty() && recvs.is_empty() && sends.is_empty() {
                return Ok(());
            }
            if !progressed {
                // What this rank is blocked in (its first unfinished call) and on whom.
                let mut waiting_for: Vec<usize> = Vec::new();
                let mut blocked_in: Option<usize> = None;
                for &(comm, seq, call) in &colls {
                    blocked_in.get_or_insert(call.of());
                    if let Some(step) = st.steps.get(&(comm, seq)) {
                        let members = self.members(comm);
                        waiting_for.extend(
                            step.posts
                                .iter()
                                .zip(members)
                                .filter(|(p, _)| p.is_none())
                                .map(|(_, &r)| r),
                        );
                    }
                }
                for &(comm, peer, _, Incoming { of, .. }) in &recvs {
                    blocked_in.get_or_insert(of);
                    waiting_for.push(self.members(comm)[peer]);
                }
                for &(comm, peer, _, of) in &sends {
                    blocked_in.get_or_insert(of);
                    waiting_for.push(self.members(comm)[peer]);
                }
                waiting_for.sort_unstable();
                waiting_for.dedup();
                let desc = blocked_in.map(|i| &bufs.ops[i].desc);
                let generation = st.generation;
                st.stuck.insert(
                    self.rank,
                    (
                        generation,
                        RankWait {
                            rank: self.rank,
                            site: desc.map_or_else(CallSite::caller, |d| d.site),
                            what: desc.map(|d| d.summary()).unwrap_or_default(),
                            waiting_for,
                        },
                    ),
                );
                if let Some(report) = deadlock(&st, &nccl.shared) {
                    drop(st);
                    return Err(self.fail(Error::Deadlock(report), first_site));
                }
            }
            if let Some(d) = deadline
                && Instant::now() >= d
            {
                drop(st);
                let err = Error::Timeout {
                    rank: self.rank,
                    site: first_site.unwrap_or_else(CallSite::caller),
                    what: "an emulated NCCL group".into(),
                    waiting_for: Vec::new(),
                    after: started.elapsed(),
                };
                nccl.shared.abort(Abort::Failed {
                    peer: self.rank,
                    reason: PeerFailure::Errored(err.to_string()),
                });
                nccl.changed.notify_all();
                return Err(err);
            }
            st = nccl
                .changed
                .wait_timeout(st, POLL)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// Every rank either returned or waits at the current generation: nothing can change.
fn deadlock(st: &State, shared: &WorldState) -> Option<DeadlockReport> {
    let all = (0..shared.world).all(|r| {
        shared.has_exited(r) || st.stuck.get(&r).is_some_and(|(g, _)| *g == st.generation)
    });
    all.then(|| DeadlockReport {
        waits: (0..shared.world)
            .filter_map(|r| st.stuck.get(&r).map(|(_, w)| w.clone()))
            .collect(),
    })
}

fn next<K: std::hash::Hash + Eq>(counters: &mut HashMap<K, u64>, key: K) -> u64 {
    let c = counters.entry(key).or_insert(0);
    *c += 1;
    *c - 1
}

/// Computes every member's result of a step whose members have all posted, after checking
/// that they issued the same call with the data it needs.
fn complete(step: &Step, members: &[usize], seq: u64) -> Result<Vec<Option<Vec<u8>>>> {
    let posts: Vec<&Post> = step.posts.iter().flatten().collect();
    let n = posts.len();
    let first = &posts[0];
    if let Some(j) = posts.iter().position(|p| p.sig != first.sig) {
        // The same user call lowered to different NCCL calls: packing saw different batches.
        let packed = first.what == posts[j].what;
        let what = |p: &Post| {
            if packed {
                format!(
                    "{}, packed with the calls batched with it into {}",
                    p.what, p.sig
                )
            } else {
                p.what.clone()
            }
        };
        return Err(Error::CollectiveMismatch(Box::new(CollectiveMismatch {
            members: members.to_vec(),
            step: seq,
            rank_a: members[0],
            what_a: what(first),
            site_a: first.site,
            rank_b: members[j],
            what_b: what(posts[j]),
            site_b: posts[j].site,
        })));
    }
    let Sig {
        coll,
        count,
        dtype,
        op,
    } = first.sig;
    let b = count * dtype.size();
    // What each member must have contributed: the bytes its call reads.
    let want = |j: usize| coll.bytes(b, n, j).0;
    if let Some(j) = (0..n).find(|&j| posts[j].data.len() != want(j)) {
        return Err(Error::Internal(format!(
            "{}: member {j} of an emulated {coll:?} posted {} bytes, not {}",
            posts[j].site,
            posts[j].data.len(),
            want(j)
        )));
    }
    let data = |j: usize| posts[j].data.as_slice();
    let everyone = |v: Vec<u8>| (0..n).map(|_| Some(v.clone())).collect();
    let only = |root: usize, v: Vec<u8>| (0..n).map(|j| (j == root).then(|| v.clone())).collect();
    Ok(match coll {
        Coll::AllReduce => everyone(fold(&posts, op, dtype, 0..b)),
        Coll::Reduce { root } => only(root, fold(&posts, op, dtype, 0..b)),
        Coll::Broadcast { root } => everyone(data(root).to_vec()),
        Coll::AllGather => everyone(posts.iter().flat_map(|p| p.data.clone()).collect()),
        Coll::Gather { root } => only(root, posts.iter().flat_map(|p| p.data.clone()).collect()),
        Coll::ReduceScatter => (0..n)
            .map(|j| Some(fold(&posts, op, dtype, j * b..(j + 1) * b)))
            .collect(),
        Coll::AllToAll => (0..n)
            .map(|j| {
                Some(
                    (0..n)
                        .flat_map(|i| data(i)[j * b..(j + 1) * b].to_vec())
                        .collect(),
                )
            })
            .collect(),
        Coll::Scatter { root } => (0..n)
            .map(|j| Some(data(root)[j * b..(j + 1) * b].to_vec()))
            .collect(),
    })
}

/// Reduces bytes `range` of every member's data, in member order.
fn fold(posts: &[&Post], op: Option<Red>, dtype: DType, range: Range<usize>) -> Vec<u8> {
    let op = match op.unwrap_or(Red::Sum) {
        Red::Sum => ReduceOp::Sum,
        Red::Prod => ReduceOp::Prod,
        Red::Max => ReduceOp::Max,
        Red::Min => ReduceOp::Min,
        Red::Avg => ReduceOp::Avg,
        Red::PreMulSum(s) => ReduceOp::PreMulSum(s),
    };
    with_dtype!(dtype, T => fold_as::<T>(posts, op, range))
}

fn fold_as<T: Arith>(posts: &[&Post], op: ReduceOp, range: Range<usize>) -> Vec<u8> {
    let r = Reducer::<T>::new(op, posts.len());
    let mut acc: Vec<T> = elements(&posts[0].data[range.clone()]);
    r.start(&mut acc);
    for p in &posts[1..] {
        r.combine(&mut acc, &elements::<T>(&p.data[range.clone()]));
    }
    r.finish(&mut acc);
    bytes(&acc)
}

/// The elements encoded by `data` (its length a multiple of `T`'s size).
fn elements<T: Element>(data: &[u8]) -> Vec<T> {
    let n = data.len() / size_of::<T>();
    let mut v = Vec::<T>::with_capacity(n);
    // SAFETY: `v` has room for `n` elements; every `Element` is plain data for which any bit
    // pattern is a value (integers, IEEE floats, `half` types), so the copied bytes are `n`
    // valid elements.
    unsafe {
        std::ptr::copy_nonoverlapping(
            data.as_ptr(),
            v.as_mut_ptr().cast::<u8>(),
            n * size_of::<T>(),
        );
        v.set_len(n);
    }
    v
}

fn bytes<T: Element>(v: &[T]) -> Vec<u8> {
    // SAFETY: `Element` types are plain data without padding; viewing them as bytes is sound.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
        .to_vec()
}

#[cfg(test)]
mod tests;
