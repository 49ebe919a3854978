//! The in-process backend: one thread per rank, sharing memory.
//!
//! # Protocol
//!
//! A rank runs a batch in three moves:
//!
//! 1. **Post.** Its ops are grouped by target — a communicator, or the channel to one peer —
//!    and each run is published through atomics: `base` and `entries` (a pointer to the ops,
//!    which stay in this rank's frame), then `posted` with `Release`. Receives are not
//!    published: the receiver pulls.
//! 2. **Progress.** Repeatedly, for every run: a collective step whose members have all posted
//!    is checked for agreement (every member compares every member's description, so nobody
//!    touches a buffer sized by a disagreeing peer) and this member does its share
//!    (`kernels::run_share`), reading peers' buffers in place and writing a region only it
//!    writes, then bumps its `done`. A stretch of small reductions that every member has
//!    posted is checked and reduced in one pass over compact per-step tables (`pack`). A run
//!    of one small collective is also posted eagerly and completes from every member's copy
//!    of its input, without the round trip (`eager`). A receive whose send is posted copies
//!    straight from the sender's tensor and bumps the channel's `copied`.
//! 3. **Complete.** The batch is done when every member's `done` covers its steps and every
//!    send has been copied. Only then may the rank return, so its buffers outlive every peer's
//!    access: a peer reads a posted op only while the step it belongs to is unfinished, and the
//!    poster cannot finish it without that peer. (An eager step is finished by each member on
//!    its own, but only once every member has taken the eager path, and then nobody reads
//!    anybody's op or buffers: only the slots' copies. A small broadcast's members leave even
//!    earlier, and are then read only through the copy of their op kept in their slot; see
//!    `eager`.)
//!
//! **Posted messages** (`isend`/`irecv`, [`Backend::post`]) are runs of one op that outlive the
//! call that made them: the backend owns their op and buffer, numbers them in order with the
//! rank's other messages on the pair, and progresses them in every pass of every later call
//! until `wait` hands the buffer back. Since a posted send may still be unread when the rank
//! sends again to the same peer, a channel holds one published run at a time: a send run is
//! published once every earlier message on its channel is copied, and receives copy strictly in
//! message order.
//!
//! Waiting spins, then yields, then parks (see `world`); a rank that publishes progress wakes
//! only the ranks that could need it. Every live rank asleep is a deadlock, reported with each
//! rank's call site. Disagreeing descriptions, size mismatches, failed or exited peers and
//! timeouts stop the world with an error instead of a hang.

mod eager;
mod fence;
mod kernels;
mod left;
mod lone;
mod pack;
mod prefetch;
mod world;

use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use crate::error::{CollectiveMismatch, Error, P2pMismatch, PeerFailure, RankWait, Result};
use crate::exec::{Backend, Buf, Op, PostedOp, Ticket};
use crate::model::{CallSite, GroupId};
use crate::plan::Target;

use eager::{RING, Sig};
use kernels::{Step, copy_rows};
use lone::Lone;
use pack::PackEntry;
use world::GroupState;
pub(crate) use world::{Abort, WorldState};

/// Spin iterations before yielding, when every rank has a core.
const SPINS: u32 = 200;
/// Turns of a wait by loads alone (see [`spin_until`]): some 20 µs on the 2-core host.
const QUICK_SPINS: u32 = 1000;
/// How often a root that left half a ring of broadcast steps unchecked checks them (see
/// `LocalBackend::leave`); a power of two dividing [`RING`] / 2. Under Miri, 2: its ring of
/// 8 is then half full at 4 steps, and the tests still pass steps that do not check.
const SETTLE_EVERY: u64 = if cfg!(miri) { 2 } else { 32 };
/// Spin iterations before yielding, when ranks outnumber cores.
const SPINS_OVERSUBSCRIBED: u32 = 4;
/// How long a rank with nothing to do keeps yielding before it parks. Waking a parked thread
/// costs tens of microseconds; a collective's peers usually arrive well within this.
const YIELD_FOR: Duration = Duration::from_micros(300);

/// The local backend's handle for one rank.
pub(crate) struct LocalBackend {
    shared: Arc<WorldState>,
    rank: usize,
    /// Communicators this rank has used, by id.
    groups: Vec<Option<Arc<GroupState>>>,
    /// Collective steps posted so far, per communicator id.
    steps: Vec<u64>,
    /// This rank's pack table per communicator id, kept between runs (see `pack::Table`).
    tables: Vec<pack::Table>,
    /// This rank's bookkeeping of eager slots and early-left broadcasts, per communicator id.
    local: Vec<GroupLocal>,
    /// Whether this rank left a broadcast step early that not every member has reached yet
    /// (or, as its root, that it has not checked yet); see `LocalBackend::settle`.
    unsettled: Cell<bool>,
    /// Messages posted to each peer, and received from each peer.
    sent: Vec<u64>,
    received: Vec<u64>,
    /// Posted sends and receives not yet waited for, in posting order.
    posted: Vec<PostedReq>,
    next_ticket: u64,
    /// The number and plan of the last batch that succeeded, while `tables` still hold what
    /// its runs built: a batch that repeats it exactly runs that plan with those tables (see
    /// `LocalBackend::execute_batch`).
    last_batch: Option<(u64, crate::plan::Runs)>,
}

/// A rank's own view of one communicator's eager slots (see `eager`).
struct GroupLocal {
    /// A lower bound on every member's `done`, refreshed only when a slot's reuse needs more
    /// (reading every member's counter at every step would move those lines between cores).
    floor: Cell<u64>,
    /// Broadcast steps this rank left as their root before anyone was compared with it,
    /// oldest first (see `LocalBackend::settle_group`).
    left: RefCell<left::Left>,
    /// Steps this rank has finished; its `done` is this, held at [`GroupLocal::hold`].
    fin: Cell<u64>,
    /// One past the last broadcast step this rank left early, until every member is done with
    /// it; 0 when none.
    reach: Cell<u64>,
    /// This rank's member index.
    me: usize,
}

impl Default for GroupLocal {
    fn default() -> Self {
        GroupLocal {
            floor: Cell::new(0),
            left: RefCell::new(left::Left::default()),
            fin: Cell::new(0),
            reach: Cell::new(0),
            me: 0,
        }
    }
}

impl GroupLocal {
    /// The oldest step of `left`, or `u64::MAX`: this rank's `done` stays at or below it.
    fn hold(&self) -> u64 {
        self.left.borrow().front().unwrap_or(u64::MAX)
    }
}

/// A posted send or receive, owned here until `wait` or `drain` takes it back.
struct PostedReq {
    ticket: Ticket,
    /// Boxed: peers read a posted send through a pointer to it.
    op: Box<Op>,
    /// The buffer `op` points into (moving the `Vec` moves no bytes).
    data: Vec<u8>,
    run: TargetRun,
}

/// What a drive waits for; every posted op progresses in any case.
#[derive(Clone, Copy, PartialEq)]
enum Until {
    /// The batch's runs.
    Runs,
    /// The posted op at this index, waited for at this call site.
    Posted(usize, CallSite),
    /// Every posted op.
    AllPosted,
    /// Every broadcast step this rank left early has been reached by every member (and checked,
    /// where it was the root), except on the communicator with this index
    /// (`LocalBackend::settle`).
    Settled(Option<usize>),
}

/// The op a [`Waiting`] names: indices past the batch's ops are posted ops, in order.
fn op_at<'a>(ops: &'a [Op], posted: &'a [PostedReq], i: usize) -> &'a Op {
    match i.checked_sub(ops.len()) {
        Some(j) => &posted[j].op,
        None => &ops[i],
    }
}

/// The call site of the first unfinished run, for an abort's report.
fn open_site(runs: &[TargetRun], ops: &[Op]) -> Option<CallSite> {
    runs.iter()
        .find(|r| !r.complete)
        .map(|r| ops[r.start].desc.site)
}

/// Where the rank is blocked and in what, for reports: a posted op is waited for at its
/// `wait()`, or by the rank's return.
fn blocked_call(ops: &[Op], posted: &[PostedReq], i: usize, until: Until) -> (CallSite, String) {
    let op = op_at(ops, posted, i);
    let what = op.desc.summary();
    match until {
        _ if i < ops.len() => (op.desc.site, what),
        Until::Posted(_, wait) => (
            wait,
            format!("wait() for {what} posted at {}", op.desc.site),
        ),
        _ => (
            op.desc.site,
            format!("the rank's return, which waits for {what} posted here"),
        ),
    }
}

/// The op for sequence number `k` of a run a peer published (`entries` points at the op of
/// sequence number `base`).
///
/// # Safety
/// The caller has seen (with `Acquire`) that the run holds `k`, and the peer cannot finish `k`
/// — nor publish another run — until the caller lets it, for as long as the reference lives.
unsafe fn published_op<'a>(entries: &AtomicPtr<Op>, base: &AtomicU64, k: u64) -> &'a Op {
    let base = base.load(Ordering::Relaxed);
    // SAFETY: the caller's contract: the run holds `k`, so `k - base` is within its ops.
    unsafe { &*entries.load(Ordering::Relaxed).add((k - base) as usize) }
}

/// Member `j`'s op for collective step `k`: the copy it kept in its eager slot if it may have
/// left the step early (a broadcast: see `eager`), otherwise the one in its published run.
///
/// # Safety
/// Member `j` has posted step `k` (seen with `Acquire`), and the caller has not finished `k`
/// (its `done` is at most `k`) while the reference lives: then the slot holds `k` still, and a
/// member that cannot leave early cannot complete `k` nor publish another run.
unsafe fn member_op(g: &GroupState, j: usize, k: u64) -> &Op {
    // SAFETY: the caller's contract.
    match unsafe { g.eager_slot(j, k).kept(k) } {
        Some(op) => op,
        // SAFETY: not kept, so member `j` stays in step `k` (the caller's contract).
        None => unsafe { published_op(&g.slots[j].entries, &g.slots[j].base, k) },
    }
}

/// The index of a collective run's communicator in the backend's lists.
fn gi_of(run: &TargetRun) -> Result<usize> {
    run.group
        .ok_or_else(|| Error::Internal("a collective run without its group".into()))
}

/// Whether `ready` holds within [`QUICK_SPINS`] looks, a spin-loop hint between two.
#[inline(always)]
fn spin_until(ready: impl Fn() -> bool) -> bool {
    for _ in 0..QUICK_SPINS {
        if ready() {
            return true;
        }
        std::hint::spin_loop();
    }
    ready()
}

/// A maximal run of a batch's ops with one target, and this rank's progress through it.
struct TargetRun {
    target: Target,
    /// Index of the first op in the (sorted) batch.
    start: usize,
    len: usize,
    /// Sequence number (step or message index) of the first op.
    base: u64,
    /// Next step to process (collectives, receives).
    next: u64,
    /// Member index of this rank (collectives).
    me: usize,
    /// Index of its communicator in the backend's `groups` (collectives).
    group: Option<usize>,
    /// Visible to peers (a send run waits until its channel has delivered every earlier
    /// message; other runs count as published from the start).
    published: bool,
    complete: bool,
    /// The run's pack table (collectives; see `pack`), empty when nothing packs. Peers read it
    /// while the run is posted; its heap block does not move when the run does. Lent by the
    /// backend's `tables` for the run and given back when the run succeeds.
    packs: pack::Table,
    /// The signature of a run of one small collective posted eagerly as well (see `eager`);
    /// cleared if the step runs in place.
    eager: Option<Sig>,
    /// The signature a run of one op going in place published in its slot's line (see
    /// `lone`).
    lone: Option<[u64; 2]>,
}

impl TargetRun {
    fn end(&self) -> u64 {
        self.base + self.len as u64
    }
}

/// The members that have not posted step `k` yet, if any.
fn unposted(g: &GroupState, k: u64) -> Option<SmallVec<[usize; 8]>> {
    let missing = |s: &world::CollSlot| s.posted.load(Ordering::Acquire) <= k;
    if !g.slots.iter().any(missing) {
        return None;
    }
    Some(
        g.slots
            .iter()
            .zip(g.members.iter())
            .filter(|(s, _)| missing(s))
            .map(|(_, &r)| r)
            .collect(),
    )
}

/// Whether step `k`'s checker (member `c`) compares every member's op at it, so that a member
/// with nothing to move in the step may leave the comparing to it; `None` until the checker
/// has posted `k`.
///
/// Not when the checker filled its slot for `k` with a step it may leave early (a broadcast or
/// scatter): it then compares itself with the root's slot alone, the root compares nobody
/// whose `done` is past the step (`settle_group`), and a member that called something else
/// there — a small all_reduce, a barrier — would pass unchecked, returning what nobody reduced
/// (found by the differential tests: a rank that skipped a scatter came back with its batch of
/// all_reduces "done").
fn checked_by_checker(g: &GroupState, c: usize, k: u64) -> Option<bool> {
    if g.slots[c].posted.load(Ordering::Acquire) <= k {
        return None;
    }
    // The checker fills its slot before it posts (Acquire above), and cannot refill it for a
    // later step before we finish `k`.
    let leaves = g
        .eager_slot(c, k)
        .read(k)
        .is_some_and(|(sig, _)| sig.leaves_early());
    Some(!leaves)
}

/// The members whose `done` is below `upto` (none: every member has finished those steps).
fn not_done(g: &GroupState, upto: u64) -> SmallVec<[usize; 8]> {
    g.slots
        .iter()
        .zip(g.members.iter())
        .filter(|(s, _)| s.done.0.load(Ordering::Acquire) < upto)
        .map(|(_, &r)| r)
        .collect()
}

/// What member `j` has posted for eager step `k`.
enum Slotted {
    /// Its eager slot holds the step: the signature and the input.
    Filled(Sig, *const u8),
    /// It posted the step without filling its slot: the step runs in place.
    InPlace,
    /// It has not posted the step yet.
    Absent,
}

/// Member `j`'s eager input for step `k`. The slot first, and only if it is empty the
/// member's `posted` and the slot again: a member fills its slot before it posts, so a slot
/// still empty after `posted` covered step `k` means the member runs the step in place. (Read
/// first, `posted` would cost every step a transfer of a line the member has just written.)
fn eager_input(g: &GroupState, j: usize, k: u64) -> Slotted {
    if let Some((sig, data)) = g.eager_slot(j, k).read(k) {
        return Slotted::Filled(sig, data);
    }
    let posted = g.slots[j].posted.load(Ordering::Acquire);
    match g.eager_slot(j, k).read(k) {
        Some((sig, data)) => Slotted::Filled(sig, data),
        None if posted > k => Slotted::InPlace,
        None => Slotted::Absent,
    }
}

/// Every member's op for collective step `k` of `run`, ours being `mine`, in member order.
///
/// # Safety
/// Every member has posted step `k` (seen with `Acquire`) and cannot complete it, nor post
/// again, while the returned references live.
unsafe fn step_ops<'a>(
    run: &TargetRun,
    g: &'a GroupState,
    mine: &'a Op,
    k: u64,
) -> SmallVec<[&'a Op; 8]> {
    (0..g.slots.len())
        .map(|j| {
            if j == run.me {
                mine
            } else {
                // SAFETY: the caller's contract.
                unsafe { member_op(g, j, k) }
            }
        })
        .collect()
}

/// What an eager attempt at a step came to.
enum Eager {
    /// Completed from the slots.
    Done,
    /// Some members have not arrived yet.
    Wait(Waiting),
    /// Some member runs the step in place: so must we.
    InPlace,
}

/// The short way a lone small broadcast or scatter takes (see `LocalBackend::execute_eager`).
enum Short {
    /// As its root.
    Lead,
    /// As a member whose root's slot holds the step: its data.
    Follow(*const u8),
}

/// A batch's runs, in plan order.
type Runs = SmallVec<[TargetRun; 4]>;

/// A blocked op (its index in the batch) and the ranks it waits for.
type Waiting = (usize, SmallVec<[usize; 8]>);

/// Result of one pass over a batch.
#[derive(Default)]
struct Pass {
    progressed: bool,
    complete: bool,
    /// The first run still waiting: its op index and the ranks it waits for.
    blocked: Option<Waiting>,
}

impl LocalBackend {
    pub(crate) fn new(shared: Arc<WorldState>, rank: usize) -> Self {
        let world = shared.world;
        LocalBackend {
            shared,
            rank,
            groups: Vec::new(),
            steps: Vec::new(),
            tables: Vec::new(),
            local: Vec::new(),
            unsettled: Cell::new(false),
            sent: vec![0; world],
            received: vec![0; world],
            posted: Vec::new(),
            next_ticket: 0,
            last_batch: None,
        }
    }

    /// Caches communicator `id`'s state; its index in `groups` and this rank's member index in
    /// it. Runs hold the index, not a clone of the `Arc`: every rank cloning and dropping the
    /// same `Arc` at every call would pass its reference count's cache line between cores.
    #[inline(always)]
    fn group_state(&mut self, id: GroupId) -> Result<(usize, usize)> {
        let i = id.0 as usize;
        if let (Some(Some(_)), Some(l)) = (self.groups.get(i), self.local.get(i)) {
            return Ok((i, l.me)); // cached, with our member index, at its first call
        }
        self.cache_group(id)
    }

    /// [`LocalBackend::group_state`] at a communicator's first call on this rank.
    #[cold]
    #[inline(never)]
    fn cache_group(&mut self, id: GroupId) -> Result<(usize, usize)> {
        let i = id.0 as usize;
        if self.groups.len() <= i {
            self.groups.resize(i + 1, None);
            self.steps.resize(i + 1, 0);
            self.tables.resize_with(i + 1, pack::Table::default);
            self.local.resize_with(i + 1, GroupLocal::default);
        }
        if self.groups[i].is_none() {
            self.groups[i] = self.shared.group(id);
        }
        // `Ctx` checks group handles against the world before any call reaches here.
        let g = self.groups[i].as_deref().ok_or_else(|| {
            Error::Internal(format!("group id {} was not created in this world", id.0))
        })?;
        let me = g.members.binary_search(&self.rank).map_err(|_| {
            Error::Internal(format!("rank {} posted to a group it is not in", self.rank))
        })?;
        self.local[i].me = me;
        Ok((i, me))
    }

    /// The members of `g` other than this rank: whom a change of ours there may concern.
    fn others<'g>(&self, g: &'g GroupState) -> impl Iterator<Item = usize> + 'g {
        let me = self.rank;
        g.members.iter().copied().filter(move |&r| r != me)
    }

    /// Wakes the members of `g` other than this rank, if any rank is asleep.
    #[inline(always)]
    fn wake_others(&self, g: &GroupState) {
        self.shared.wake_with(|| self.others(g));
    }

    /// The communicator of a collective run (cached by `group_state` when it was numbered).
    fn group_of(&self, run: &TargetRun) -> &GroupState {
        run.group
            .and_then(|i| self.groups.get(i)?.as_deref())
            .expect("collective runs carry their group")
    }

    /// Turns the (sorted) batch's plan into runs, appended to `runs`, numbering their steps and
    /// messages; nothing is visible to peers yet (see [`LocalBackend::publish`]). (The caller's
    /// list is filled in place: runs are large, and a one-op call should not pay for moving
    /// four of them.)
    fn number(&mut self, plan: &[(Target, Range<usize>)], runs: &mut Runs) -> Result<()> {
        for (t, range) in plan {
            runs.push(self.numbered(*t, range.start, range.len())?);
        }
        Ok(())
    }

    /// The run of `len` ops from index `start` on target `t`, numbered after the target's
    /// earlier ones (its steps or messages counted here); nothing is visible to peers yet.
    #[inline(always)]
    fn numbered(&mut self, t: Target, start: usize, len: usize) -> Result<TargetRun> {
        let mut packs = pack::Table::default();
        let (base, me, group) = match t {
            Target::Coll(id) => {
                let (gi, me) = self.group_state(id)?;
                let base = self.steps[gi];
                self.steps[gi] += len as u64;
                if len > 1 {
                    packs = std::mem::take(&mut self.tables[gi]);
                }
                (base, me, Some(gi))
            }
            Target::Send(dst) => {
                let base = self.sent[dst];
                self.sent[dst] += len as u64;
                (base, 0, None)
            }
            Target::Recv(src) => {
                let base = self.received[src];
                self.received[src] += len as u64;
                (base, 0, None)
            }
        };
        Ok(TargetRun {
            target: t,
            start,
            len,
            base,
            next: base,
            me,
            group,
            published: !matches!(t, Target::Send(_)),
            complete: false,
            packs,
            eager: None,
            lone: None,
        })
    }

    /// Makes the runs visible to peers, who may read `ops` and their buffers from here on; a
    /// send run whose channel still holds an earlier, undelivered run stays unpublished (see
    /// [`LocalBackend::try_publish_send`]).
    fn publish(&self, ops: &[Op], runs: &mut [TargetRun], again: bool) {
        let mut woken: SmallVec<[usize; 8]> = SmallVec::new();
        for run in runs {
            match run.target {
                Target::Coll(_) => {
                    let op = &ops[run.start];
                    let sig = (run.len == 1)
                        .then(|| Sig::of(op, self.shared.oversubscribed))
                        .flatten();
                    let g = self.post_coll(ops, run, sig, again);
                    woken.extend(self.others(g));
                }
                Target::Send(dst) => {
                    // Peers only ever read through this pointer.
                    let entries = ops[run.start..].as_ptr().cast_mut();
                    if self.try_publish_send(run, entries, dst) {
                        woken.push(dst);
                    }
                }
                Target::Recv(_) => {}
            }
        }
        fail_point!("post");
        self.shared.wake(woken);
    }

    /// Makes a collective run visible to its communicator's members (its pack table built —
    /// or, `again`, kept: the run repeats exactly the one the table was built for — a run of
    /// one small op with an eager signature `sig` also posted eagerly, and a run of one going in
    /// place described in the slot's line, see `lone`); the communicator, for the caller to
    /// wake.
    #[inline(always)]
    fn post_coll(
        &self,
        ops: &[Op],
        run: &mut TargetRun,
        sig: Option<Sig>,
        again: bool,
    ) -> &GroupState {
        // Peers only ever read through this pointer.
        let entries = ops[run.start..].as_ptr().cast_mut();
        if run.len > 1 {
            // A run of one has the empty table `numbered` gave it: nothing packs.
            let run_ops = &ops[run.start..run.start + run.len];
            if !(again && run.packs.refresh(run_ops)) {
                run.packs.build(run_ops);
            }
        }
        let packs = run.packs.as_ptr();
        let g = self.group_of(run);
        if run.len == 1 {
            let op = &ops[run.start];
            // Passed in, not read back from `run`: a signature just stored there field by
            // field and loaded whole stalls the load until the stores retire.
            let sig = sig.filter(|_| self.slot_free(run.group, g, run.base, op));
            run.eager = sig;
            if let Some(sig) = sig {
                // Its slot filled, and the run published with nothing packing (`numbered`
                // gave a run of one the empty table) and no lone description.
                run.lone = None;
                self.post_one(g, run.me, run.base, op, sig);
                return g;
            }
        }
        let slot = &g.slots[run.me];
        // A run of one going in place describes itself in the line peers read `posted` from;
        // an earlier description is cleared (eager steps, above, only clear it: they never
        // read it).
        let lone = if run.len == 1 {
            Lone::of(&ops[run.start], &g.members, run.me)
        } else {
            None
        };
        run.lone = lone.map(|l| l.sig);
        Lone::describe(lone, slot);
        slot.announce(run.base, run.end(), entries, packs);
        g
    }

    /// Whether our eager storage for step `base` of communicator `gi`, `op`, is free: every
    /// member has finished the step that used it last (`eager::ring_for` steps earlier). From a
    /// cached bound when it suffices.
    fn slot_free(&self, gi: Option<usize>, g: &GroupState, base: u64, op: &Op) -> bool {
        let ring = eager::ring_for(op.input.len * op.desc.dtype.size());
        let need = (base + 1).saturating_sub(ring);
        let Some(l) = gi.and_then(|i| self.local.get(i)) else {
            return false;
        };
        if l.floor.get() >= need {
            return true;
        }
        // Acquire: their reads of the slot happened before they stored `done`.
        let floor = g
            .slots
            .iter()
            .map(|s| s.done.0.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX);
        l.floor.set(floor);
        floor >= need
    }

    /// Marks our share of the run's steps before `upto` finished: our `done`, held below a
    /// broadcast step we left as root and have not checked yet (see `eager`).
    fn finish(&self, run: &TargetRun, g: &GroupState, upto: u64) {
        self.finish_at(run.group, g, run.me, upto);
    }

    /// [`LocalBackend::finish`] for member `me` of communicator `gi`, `g`.
    #[inline(always)]
    fn finish_at(&self, gi: Option<usize>, g: &GroupState, me: usize, upto: u64) {
        let hold = match gi.and_then(|i| self.local.get(i)) {
            Some(l) => {
                l.fin.set(upto);
                l.hold()
            }
            None => u64::MAX,
        };
        g.slots[me].done.0.store(upto.min(hold), Ordering::Release);
    }

    /// Member `me` of communicator `gi`, `g`, has completed broadcast step `k` from its root's
    /// slot and leaves it (see `eager`): its `done` passes `k`, and before its next call of
    /// another kind it waits for every member to reach `k` (`settle`).
    #[inline(always)]
    fn left_as_member(&self, gi: Option<usize>, g: &GroupState, me: usize, k: u64) {
        self.finish_at(gi, g, me, k + 1);
        if let Some(l) = gi.and_then(|i| self.local.get(i)) {
            l.reach.set(k + 1);
            self.unsettled.set(true);
        }
    }

    /// Publishes a send run on its channel if every earlier message there is delivered (the
    /// channel holds one run at a time; the receiver copies in order, so `copied` reaching the
    /// run's base means the previous run is finished with). Whether it is published now.
    fn try_publish_send(&self, run: &mut TargetRun, entries: *mut Op, dst: usize) -> bool {
        if run.published {
            return false;
        }
        let chan = self.shared.chan(self.rank, dst);
        if chan.copied.0.load(Ordering::Acquire) < run.base {
            return false;
        }
        chan.base.store(run.base, Ordering::Relaxed);
        chan.entries.store(entries, Ordering::Relaxed);
        chan.posted.store(run.end(), Ordering::Release);
        run.published = true;
        true
    }

    /// One pass over every unfinished run, posted ones first: do whatever work is possible.
    fn pass(
        &self,
        runs: &mut [TargetRun],
        ops: &[Op],
        posted: &mut [PostedReq],
        until: Until,
    ) -> Result<Pass> {
        let Some(_busy) = self.shared.enter(self.rank) else {
            return Err(self.shared.abort_error(self.rank, open_site(runs, ops)));
        };
        fail_point!("pass");
        self.pass_inner(runs, ops, posted, until)
    }

    fn pass_inner(
        &self,
        runs: &mut [TargetRun],
        ops: &[Op],
        posted: &mut [PostedReq],
        until: Until,
    ) -> Result<Pass> {
        let mut pass = Pass::default();
        let mut woken: SmallVec<[usize; 8]> = SmallVec::new();
        // Broadcasts left early go first: members that ran them in place wait for their check.
        if self.unsettled.get() {
            let keep = match until {
                Until::Settled(keep) => keep,
                _ => None,
            };
            let waiting = self.settle_all(&mut pass, keep)?;
            if matches!(until, Until::Settled(_)) {
                pass.blocked = waiting.map(|ranks| (0, ranks));
            }
        }
        // Posted ops hold the earlier messages of their pairs, so they go first.
        for (i, req) in posted.iter_mut().enumerate() {
            if req.run.complete {
                continue;
            }
            let one = std::slice::from_ref(&*req.op);
            let waiting = self.progress_run(&mut req.run, one, &mut pass, &mut woken)?;
            let awaited = match until {
                Until::AllPosted => true,
                Until::Posted(j, _) => j == i,
                Until::Runs | Until::Settled(_) => false,
            };
            if awaited && pass.blocked.is_none() {
                pass.blocked = waiting.map(|(_, ranks)| (ops.len() + i, ranks));
            }
        }
        for run in runs.iter_mut().filter(|r| !r.complete) {
            let waiting = self.progress_run(run, ops, &mut pass, &mut woken)?;
            if pass.blocked.is_none() {
                pass.blocked = waiting;
            }
        }
        pass.complete = match until {
            Until::Runs => runs.iter().all(|r| r.complete),
            Until::Posted(i, _) => posted[i].run.complete,
            Until::AllPosted => posted.iter().all(|p| p.run.complete),
            Until::Settled(keep) => !self.pending_besides(keep),
        };
        if !woken.is_empty() {
            self.shared.wake(woken);
        }
        Ok(pass)
    }

    /// Progresses one unfinished run; whom it still waits for, if anyone.
    fn progress_run(
        &self,
        run: &mut TargetRun,
        ops: &[Op],
        pass: &mut Pass,
        woken: &mut SmallVec<[usize; 8]>,
    ) -> Result<Option<Waiting>> {
        let waiting = match run.target {
            Target::Coll(_) => self.progress_coll(run, ops, pass, woken)?,
            Target::Send(dst) => {
                let entries = ops[run.start..].as_ptr().cast_mut();
                if self.try_publish_send(run, entries, dst) {
                    woken.push(dst);
                    pass.progressed = true;
                }
                let copied = self
                    .shared
                    .chan(self.rank, dst)
                    .copied
                    .0
                    .load(Ordering::Acquire);
                if copied >= run.end() {
                    run.complete = true;
                    None
                } else {
                    Some((
                        run.start + (copied.max(run.base) - run.base) as usize,
                        SmallVec::from_slice(&[dst]),
                    ))
                }
            }
            Target::Recv(src) => self.progress_recv(run, src, ops, pass, woken)?,
        };
        // A run that completed in this pass is progress too: the caller's exited-peer check
        // relies on "no progress" meaning "nothing changed since the last pass", and a send
        // whose receiver copied it and returned completes without moving any data here.
        pass.progressed |= run.complete;
        Ok(waiting)
    }

    fn progress_coll(
        &self,
        run: &mut TargetRun,
        ops: &[Op],
        pass: &mut Pass,
        woken: &mut SmallVec<[usize; 8]>,
    ) -> Result<Option<Waiting>> {
        let g = self.group_of(run);
        let before = run.next;
        let blocked = self.step_coll(run, g, ops);
        if run.next > before {
            pass.progressed = true;
            // A step completed eagerly needs no wake-up — every member completes it from the
            // slots, and nobody runs it in place — unless members may leave it early: then
            // members that ran it in place, and ranks settling it, wait for our `done`.
            if !(run.complete && run.eager.is_some_and(|s| !s.leaves_early())) {
                woken.extend(self.others(g));
            }
        }
        if let Some(waiting) = blocked? {
            return Ok(Some(waiting));
        }
        if run.complete {
            return Ok(None);
        }
        Ok(self.complete_coll(run, g))
    }

    /// Processes the run's steps that can go ahead; `Some` names whom the first blocked step
    /// waits for.
    fn step_coll(
        &self,
        run: &mut TargetRun,
        g: &GroupState,
        ops: &[Op],
    ) -> Result<Option<Waiting>> {
        let n = g.members.len();
        while run.next < run.end() {
            if run.eager.is_some() {
                match self.step_eager(run, g, ops)? {
                    Eager::Done => {
                        run.complete = true;
                        return Ok(None);
                    }
                    Eager::Wait(waiting) => return Ok(Some(waiting)),
                    Eager::InPlace => run.eager = None,
                }
            }
            if self.step_packed(run, g, ops)? {
                continue;
            }
            let k = run.next;
            let idx = run.start + (k - run.base) as usize;
            let desc = &ops[idx].desc;
            if !kernels::takes_part(desc, n, run.me, k) {
                let checker = kernels::checker(k, n);
                match checked_by_checker(g, checker, k) {
                    // Nothing to move or check for us in this step: the step's checker compares
                    // every member's op, its reducer does the work, and nobody completes the
                    // step before their `done` says so. Marking ours now saves a round trip.
                    Some(true) => {
                        self.finish(run, g, k + 1);
                        run.next += 1;
                        continue;
                    }
                    // The checker may compare itself with a root's slot alone: we check.
                    Some(false) => {}
                    None => return Ok(Some((idx, SmallVec::from_slice(&[g.members[checker]])))),
                }
            }
            if let Some(missing) = unposted(g, k) {
                return Ok(Some((idx, missing)));
            }
            let mine = &ops[idx];
            // Every member has posted step k (Acquire above) and cannot complete it — nor
            // repost its slot — before we bump our `done` past k: the contract of both reads.
            // SAFETY: see above.
            let lone = run
                .lone
                .and_then(|l| unsafe { lone::buffers(g, k, l, run.me, mine) });
            let bufs = match lone {
                Some(bufs) => bufs,
                None => {
                    // SAFETY: see above.
                    let entries = unsafe { step_ops(run, g, mine, k) };
                    self.check_agreement(&entries, &g.members, k)?;
                    if !kernels::buffers_fit(&entries, &g.members) {
                        return Err(self.unfit(mine, &g.members, k));
                    }
                    entries
                        .iter()
                        .map(|o| (o.input.ptr, o.output.ptr))
                        .collect()
                }
            };
            fail_point!("step");
            // SAFETY: all members posted agreeing ops for step k whose buffers fit it (checked
            // here, or each by its member for a lone description) and stay in it until every
            // member (us included) marks it done.
            unsafe { self.share(run, g, &mine.desc, &bufs, false) };
        }
        Ok(None)
    }

    /// Moves our share of the run's next step, whose every member's buffers are `bufs` (ours
    /// `own_done` already: see `kernels::own_part`), and marks it done.
    ///
    /// # Safety
    /// As for `kernels::run_share`.
    #[inline(always)]
    unsafe fn share(
        &self,
        run: &mut TargetRun,
        g: &GroupState,
        desc: &crate::model::OpDesc,
        bufs: &[(*mut u8, *mut u8)],
        own_done: bool,
    ) {
        let (me, seq) = (run.me, run.next);
        let step = Step {
            me,
            seq,
            desc,
            bufs,
            own_done,
        };
        // SAFETY: the caller's contract.
        unsafe { kernels::run_share(&step, &g.members) };
        self.finish(run, g, seq + 1);
        run.next += 1;
    }

    /// Does a stretch of small reductions starting at the run's next step in one pass, if every
    /// member has posted at least two of them (see `pack`): one look at the members' progress,
    /// the owned steps checked and reduced back to back, one `done` store at the end. Whether
    /// it did.
    ///
    /// The work is what the step-by-step path would do — each step's checker and reducer
    /// (`kernels::checker`, `kernels::reducer`) check that every member agrees on it, the
    /// reducer reduces it whole, the others have nothing to do — so members that batch the
    /// same calls differently still meet step by step.
    fn step_packed(&self, run: &mut TargetRun, g: &GroupState, ops: &[Op]) -> Result<bool> {
        let k = run.next;
        let at = (k - run.base) as usize;
        let Some(mine) = run.packs.entries().get(at) else {
            return Ok(false);
        };
        // Steps k.. that every member has posted, within our stretch.
        let ready = g
            .slots
            .iter()
            .map(|s| s.posted.load(Ordering::Acquire).saturating_sub(k))
            .min()
            .unwrap_or(0)
            .min(u64::from(mine.rest));
        if ready < 2 {
            return Ok(false);
        }
        let n = g.members.len();
        // Each member's op and pack entry for step k. SAFETY: member j has posted steps
        // k..k + ready (Acquire above), all in the run its slot holds (it cannot move on before
        // we are done with them), and cannot complete any of them before our `done` passes
        // them, so its ops, its table and their buffers are live and contiguous from here.
        let mut firsts: SmallVec<[*const Op; 8]> = SmallVec::with_capacity(n);
        let mut tables: SmallVec<[*const PackEntry; 8]> = SmallVec::with_capacity(n);
        for (j, slot) in g.slots.iter().enumerate() {
            if j == run.me {
                // Pointers into the whole slices (not to one element): the loops below step
                // through the stretch from them. `run.start + at` is in `ops` and `at` in the
                // table (`mine` exists).
                firsts.push(ops[run.start + at..].as_ptr());
                tables.push(run.packs.entries()[at..].as_ptr());
                continue;
            }
            // A member that may have left step k (a broadcast) has no stretch here, and its
            // published run may be a later one. SAFETY: it posted k; we have not finished k.
            if unsafe { g.eager_slot(j, k).kept(k) }.is_some() {
                return Ok(false);
            }
            let table = slot.packs.load(Ordering::Relaxed);
            if table.is_null() {
                return Ok(false);
            }
            let off = (k - slot.base.load(Ordering::Relaxed)) as usize;
            // SAFETY: see above; step k is within member j's posted run and its table.
            unsafe {
                firsts.push(slot.entries.load(Ordering::Relaxed).add(off).cast_const());
                tables.push(table.add(off).cast_const());
            }
        }
        // The stretch: as long as every member's own stretch from step k.
        let len = tables
            .iter()
            // SAFETY: step k's entry of every table (above).
            .map(|&t| u64::from(unsafe { (*t).rest }))
            .fold(ready, u64::min);
        if len < 2 {
            return Ok(false);
        }
        // One full comparison of a step, when the pass asks for it (see `reduce_pack`).
        let mut entries: SmallVec<[&Op; 8]> = SmallVec::with_capacity(n);
        let mut failure = None;
        let check = |i: usize| {
            let step = k + i as u64;
            entries.clear();
            // SAFETY: step i of the stretch is posted by every member (above).
            entries.extend(firsts.iter().map(|&p| unsafe { &*p.add(i) }));
            let agreed = match self.check_agreement(&entries, &g.members, step) {
                Ok(()) if kernels::buffers_fit(&entries, &g.members) => return true,
                Ok(()) => self.unfit(entries[run.me], &g.members, step),
                Err(e) => e,
            };
            failure = Some(agreed);
            false
        };
        let desc = &ops[run.start + at].desc;
        let root = kernels::root_member(desc, &g.members);
        fail_point!("step");
        // SAFETY: `check` accepts a step only when every member's op agrees with ours on it
        // (equal shapes, hence equal element counts, which every member's table holds only
        // for buffers of that size); the stretch is posted by every member, who stays in it
        // until we mark it done.
        if !unsafe { kernels::reduce_pack(desc, root, &tables, (k, len), run.me, check) } {
            return Err(failure.unwrap_or_else(|| {
                Error::Internal("a packed step refused without a cause".into())
            }));
        }
        self.finish(run, g, k + len);
        run.next = k + len;
        Ok(true)
    }

    /// Tries to complete the run's one step eagerly (see `eager`): from every member's slot if
    /// all are filled and agree; in place if a member posted the step without filling its slot.
    fn step_eager(&self, run: &mut TargetRun, g: &GroupState, ops: &[Op]) -> Result<Eager> {
        let k = run.next;
        let idx = run.start;
        let op = &ops[idx];
        let Some(mine) = run.eager else {
            return Ok(Eager::InPlace);
        };
        let root = kernels::root_member(&op.desc, &g.members);
        if mine.leaves_early() && root != run.me {
            return self.step_from_root(run, g, ops, mine, root);
        }
        let n = g.members.len();
        let mut inputs: SmallVec<[*const u8; 8]> = SmallVec::with_capacity(n);
        let mut missing: SmallVec<[usize; 8]> = SmallVec::new();
        let mut agree = true;
        for j in 0..n {
            match eager_input(g, j, k) {
                Slotted::Filled(sig, data) => {
                    agree &= sig == mine;
                    inputs.push(data);
                }
                Slotted::InPlace => return Ok(Eager::InPlace),
                Slotted::Absent => missing.push(g.members[j]),
            }
        }
        if !missing.is_empty() {
            return Ok(Eager::Wait((idx, missing)));
        }
        if !agree {
            return self.eager_mismatch(run, g, ops).map(Eager::Wait);
        }
        fail_point!("step");
        // SAFETY: every member's slot holds step k with our signature, hence an input of our
        // op's size, stable until we finish this step; our output is ours alone.
        unsafe { eager::complete(op, &inputs, root, run.me) };
        self.finish(run, g, k + 1);
        run.next = k + 1;
        Ok(Eager::Done)
    }

    /// A broadcast's (or scatter's) non-root completes its step from the root's slot alone, and
    /// leaves: it needs nothing from anyone else, and the root checks every member before the
    /// step's slots are reused (see `eager`).
    fn step_from_root(
        &self,
        run: &mut TargetRun,
        g: &GroupState,
        ops: &[Op],
        mine: Sig,
        root: usize,
    ) -> Result<Eager> {
        let k = run.next;
        match eager_input(g, root, k) {
            Slotted::Filled(sig, data) if sig == mine => {
                fail_point!("step");
                let op = &ops[run.start];
                // SAFETY: the root's slot holds step k with our signature, hence an input of
                // our op's size, and stays until we finish k (`slot_free`); our output is ours.
                unsafe { eager::copy_from(op, data, run.me) };
                self.left_as_member(run.group, g, run.me, k);
                run.next = k + 1;
                Ok(Eager::Done)
            }
            Slotted::Filled(..) => self.eager_mismatch(run, g, ops).map(Eager::Wait),
            Slotted::InPlace => Ok(Eager::InPlace),
            Slotted::Absent => Ok(Eager::Wait((
                run.start,
                SmallVec::from_slice(&[g.members[root]]),
            ))),
        }
    }

    /// Members' eager slots disagree: reports the mismatch from their full descriptions, as
    /// the in-place path does, once every member has posted its op (until then, whom we wait
    /// for). Nobody leaves a step whose signatures differ, so the ops stay live (members of a
    /// broadcast that left it are read through the ops they kept: `member_op`).
    fn eager_mismatch(&self, run: &TargetRun, g: &GroupState, ops: &[Op]) -> Result<Waiting> {
        let k = run.next;
        let idx = run.start;
        if let Some(unposted) = unposted(g, k) {
            return Ok((idx, unposted));
        }
        // SAFETY: every member posted step k (`unposted` above) and stays in it: some slot
        // disagrees with its own, so it cannot complete the step eagerly, nor in place
        // without us.
        let entries = unsafe { step_ops(run, g, &ops[idx], k) };
        self.check_agreement(&entries, &g.members, k)?;
        let err = Error::Internal(format!(
            "{}: eager signatures of collective step {k} on group {:?} differ, but the \
             descriptions agree",
            ops[idx].desc.site, g.members
        ));
        self.shared.abort(Abort::Error(err.clone()));
        Err(err)
    }

    /// How many times a waiting rank looks again before it yields: few when ranks outnumber
    /// cores (spinning then holds the core the awaited rank needs).
    fn spins(&self) -> u32 {
        if self.shared.oversubscribed {
            SPINS_OVERSUBSCRIBED
        } else {
            SPINS
        }
    }

    /// Stops the world on buffers that do not fit their step (a bug caught before any access).
    fn unfit(&self, op: &Op, members: &[usize], step: u64) -> Error {
        let err = Error::Internal(format!(
            "{}: the buffers of collective step {step} on group {members:?} do not have the \
             sizes the call needs",
            op.desc.site
        ));
        self.shared.abort(Abort::Error(err.clone()));
        err
    }

    /// Leaves step `k` of communicator `gi`, a broadcast whose root we are, right after
    /// filling our slot (see `eager`): nobody has been compared with us yet, so the step joins
    /// those `settle_group` checks, and our `done` stays below it until then.
    #[inline(always)]
    fn leave(&self, gi: usize, k: u64) -> Result<()> {
        let Some(l) = self.local.get(gi) else {
            return Err(Error::Internal("a collective run without its group".into()));
        };
        let pending = {
            let mut left = l.left.borrow_mut();
            left.push(k);
            left.len()
        };
        l.fin.set(k + 1);
        l.reach.set(k + 1);
        self.unsettled.set(true);
        // Check before the ring runs out (a slot of the oldest step is needed again `RING`
        // steps later), inside a pass: we read members' ops. Once half the ring is pending,
        // every [`SETTLE_EVERY`] steps: a member that far behind gains a step or so between
        // two calls, and checking at every call (reading its `done` and slot) took those lines
        // from it at every call — a loop of 8-byte broadcasts at world 2 went from 120 to 250
        // ns a call once the root was half a ring ahead.
        if pending >= RING / 2
            && pending % SETTLE_EVERY == 0
            && let Some(_busy) = self.shared.enter(self.rank)
        {
            self.settle_group(gi)?;
        }
        Ok(())
    }

    /// Checks the broadcast steps this rank left as root on communicator `gi`, oldest first,
    /// as far as every member has posted them: every member's op must agree with ours (each
    /// non-root compared itself with us only, and we compared nobody). Each step checked
    /// releases our `done` past it. Then sees whether every member is done with the last step
    /// we left early. `Some` names the members still awaited. Called inside a pass.
    fn settle_group(&self, gi: usize) -> Result<Option<SmallVec<[usize; 8]>>> {
        let (Some(l), Some(g)) = (
            self.local.get(gi),
            self.groups.get(gi).and_then(|g| g.as_deref()),
        ) else {
            return Ok(None);
        };
        let mut left = l.left.borrow_mut();
        let before = left.len();
        // A member other than a step's root finishes a step that leaves early only after
        // agreeing with the root: eagerly with the root's exact signature, or in place once the
        // root checked the step (it waits for the root's `done`, held below the step until
        // then). So the steps every other member has finished need no comparing — one read of
        // each member's `done` instead of one of its slot per step.
        let finished = (g.slots.iter().enumerate())
            .filter(|&(j, _)| j != l.me)
            .map(|(_, slot)| slot.done.0.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX);
        left.drop_below(finished);
        let waiting = loop {
            let Some(k) = left.front() else {
                break None;
            };
            let Some((mine, _)) = g.eager_slot(l.me, k).read(k) else {
                return Err(Error::Internal(format!(
                    "the broadcast step {k} this rank left is no longer in its slot"
                )));
            };
            // A member whose slot holds the step with our signature agrees with us
            // (signatures are exact); any other is compared in full once it has posted.
            let mut missing: SmallVec<[usize; 8]> = SmallVec::new();
            let mut compare = false;
            for (j, slot) in g.slots.iter().enumerate() {
                if j == l.me || g.eager_slot(j, k).read(k).is_some_and(|(s, _)| s == mine) {
                    continue;
                }
                if slot.posted.load(Ordering::Acquire) <= k {
                    missing.push(g.members[j]);
                } else {
                    compare = true;
                }
            }
            if !missing.is_empty() {
                break Some(missing);
            }
            if compare {
                let entries: SmallVec<[&Op; 8]> = (0..g.members.len())
                    // SAFETY: every member posted k or filled its slot for it (above), and our
                    // `done` is held at k; ours is our own slot.
                    .map(|j| unsafe { member_op(g, j, k) })
                    .collect();
                self.check_agreement(&entries, &g.members, k)?;
            }
            left.pop_front();
        };
        if left.len() != before {
            // Released past every step checked: our `done` stays below the oldest left.
            let hold = left.front().unwrap_or(u64::MAX);
            g.slots[l.me]
                .done
                .0
                .store(l.fin.get().min(hold), Ordering::Release);
            self.wake_others(g);
        }
        drop(left);
        if waiting.is_some() || l.reach.get() == 0 {
            return Ok(waiting);
        }
        // Every member done with it: every member arrived, and each step's root has checked it
        // (a root's `done` stays below a step it left until then).
        let behind = not_done(g, l.reach.get());
        if !behind.is_empty() {
            return Ok(Some(behind));
        }
        l.reach.set(0);
        Ok(None)
    }

    /// Whether a communicator other than `keep` has broadcast steps left early and unsettled.
    fn pending_besides(&self, keep: Option<usize>) -> bool {
        self.local
            .iter()
            .enumerate()
            .any(|(i, l)| Some(i) != keep && l.reach.get() > 0)
    }

    /// Before any call but a broadcast on communicator `keep` (which may leave early too), and
    /// before the rank returns, waits until every member is done with every broadcast step this
    /// rank left early on the other communicators — which means every member arrived and every
    /// step's root checked it: so past a broadcast, a rank does nothing else before every member
    /// has arrived at it (the verifier's model), a member that never arrives is reported here
    /// rather than as an error of a later call, and a disagreement reaches every member.
    ///
    /// Inlined down to the cheap checks: a root of a loop of broadcasts is always unsettled,
    /// but only on the communicator it keeps calling.
    #[inline(always)]
    fn settle(&mut self, keep: Option<usize>) -> Result<()> {
        if !self.unsettled.get() || !self.pending_besides(keep) {
            return Ok(());
        }
        self.settle_slow(keep)
    }

    /// [`LocalBackend::settle`] once broadcast steps left early await on a communicator other
    /// than `keep` (any, when `keep` is `None`).
    #[cold]
    #[inline(never)]
    fn settle_slow(&mut self, keep: Option<usize>) -> Result<()> {
        let mut reqs = std::mem::take(&mut self.posted);
        let result = self.guarded(|me| me.drive(&mut [], &[], &mut reqs, Until::Settled(keep)));
        self.posted = reqs;
        result
    }

    /// [`LocalBackend::settle_group`] on every communicator with broadcast steps left early;
    /// whom the first (other than `keep`) still waits for.
    fn settle_all(
        &self,
        pass: &mut Pass,
        keep: Option<usize>,
    ) -> Result<Option<SmallVec<[usize; 8]>>> {
        let mut first = None;
        let mut pending = false;
        for (gi, l) in self.local.iter().enumerate() {
            if l.reach.get() == 0 {
                continue;
            }
            let before = (l.left.borrow().len(), l.reach.get());
            let waiting = self.settle_group(gi)?;
            pass.progressed |= (l.left.borrow().len(), l.reach.get()) != before;
            pending |= l.reach.get() > 0;
            if Some(gi) != keep {
                first = first.or(waiting);
            }
        }
        self.unsettled.set(pending);
        Ok(first)
    }

    /// Where a rank settling its broadcasts left early is blocked, for reports: at the last
    /// one it left, waiting for every member to reach it.
    fn left_call(&self, keep: Option<usize>) -> (CallSite, String) {
        for (i, (l, g)) in self.local.iter().zip(&self.groups).enumerate() {
            let (k, Some(g)) = (l.reach.get(), g.as_deref()) else {
                continue;
            };
            if k == 0 || Some(i) == keep {
                continue;
            }
            // SAFETY: our own slot, which only we refill, and not while this reference lives
            // (`kept` checks that it still holds the step).
            if let Some(op) = unsafe { g.eager_slot(l.me, k - 1).kept(k - 1) } {
                let what = format!(
                    "{}, which this rank left early: before its next call it waits for every \
                     member of group {:?} to reach it",
                    op.desc.summary(),
                    g.members,
                );
                return (op.desc.site, what);
            }
        }
        (
            CallSite::caller(),
            "a broadcast this rank left early, for every member to reach it".into(),
        )
    }

    /// [`blocked_call`], or [`LocalBackend::left_call`] while waiting for left broadcasts.
    fn blocked_at(
        &self,
        ops: &[Op],
        posted: &[PostedReq],
        i: usize,
        until: Until,
    ) -> (CallSite, String) {
        if let Until::Settled(keep) = until {
            return self.left_call(keep);
        }
        blocked_call(ops, posted, i, until)
    }

    /// Whether every member is done with the run's steps; if not, whom we wait for.
    fn complete_coll(&self, run: &mut TargetRun, g: &GroupState) -> Option<Waiting> {
        fail_point!("complete");
        let behind = not_done(g, run.end());
        if behind.is_empty() {
            run.complete = true;
            return None;
        }
        // Blocked: name the members that have not even arrived, if any, as the ones we wait for.
        let absent: SmallVec<[usize; 8]> = g
            .slots
            .iter()
            .zip(g.members.iter())
            .filter(|(s, _)| s.posted.load(Ordering::Acquire) < run.end())
            .map(|(_, &r)| r)
            .collect();
        Some((
            run.start + run.len - 1,
            if absent.is_empty() { behind } else { absent },
        ))
    }

    /// Every member checks all members against member 0, so all of them stop on the same,
    /// deterministic report before touching a buffer.
    fn check_agreement(&self, entries: &[&Op], members: &[usize], step: u64) -> Result<()> {
        let first = &entries[0].desc;
        if let Some(j) = entries.iter().position(|e| !e.desc.agrees_with(first)) {
            let other = &entries[j].desc;
            let err = Error::CollectiveMismatch(Box::new(CollectiveMismatch {
                members: members.to_vec(),
                step,
                rank_a: members[0],
                what_a: first.summary(),
                site_a: first.site,
                rank_b: members[j],
                what_b: other.summary(),
                site_b: other.site,
            }));
            self.shared.abort(Abort::Error(err.clone()));
            return Err(err);
        }
        Ok(())
    }

    fn progress_recv(
        &self,
        run: &mut TargetRun,
        src: usize,
        ops: &[Op],
        pass: &mut Pass,
        woken: &mut SmallVec<[usize; 8]>,
    ) -> Result<Option<Waiting>> {
        let chan = self.shared.chan(src, self.rank);
        while run.next < run.end() {
            let k = run.next;
            let idx = run.start + (k - run.base) as usize;
            // Messages are copied in order: an earlier one (a posted receive not progressed
            // yet, or not sent yet) goes first. Only this rank writes `copied`.
            if chan.posted.load(Ordering::Acquire) <= k
                || chan.copied.0.load(Ordering::Relaxed) != k
            {
                return Ok(Some((idx, SmallVec::from_slice(&[src]))));
            }
            // SAFETY: the sender posted message k (Acquire above) and its send cannot complete
            // before we bump `copied` past k, so the op and its tensor are live.
            let send = unsafe { published_op(&chan.entries, &chan.base, k) };
            let recv = &ops[idx];
            if send.desc.dtype != recv.desc.dtype || send.input.len != recv.output.len {
                let err = Error::P2pMismatch(Box::new(P2pMismatch {
                    src,
                    dst: self.rank,
                    send_site: Some(send.desc.site),
                    recv_site: recv.desc.site,
                    send_what: format!("{}[{}]", send.desc.dtype, send.input.len),
                    recv_what: format!("{}[{}]", recv.desc.dtype, recv.output.len),
                }));
                self.shared.abort(Abort::Error(err.clone()));
                return Err(err);
            }
            fail_point!("recv");
            let bytes = recv.output.len * recv.desc.dtype.size();
            // SAFETY: same dtype and length; the sender's tensor is live (above) and only read,
            // ours is exclusively borrowed by this call. A self-send in a batch reads one tensor
            // and writes another, distinct borrow.
            unsafe { copy_rows(recv.output.ptr, 0, send.input.ptr, 0, 1, bytes) };
            chan.copied.0.store(k + 1, Ordering::Release);
            if !pass.progressed || woken.last() != Some(&src) {
                woken.push(src);
            }
            pass.progressed = true;
            run.next += 1;
        }
        run.complete = true;
        Ok(None)
    }

    /// Drives the runs (and the posted ops) until `until` is complete, spinning, yielding and
    /// finally parking.
    fn drive(
        &self,
        runs: &mut [TargetRun],
        ops: &[Op],
        posted: &mut [PostedReq],
        until: Until,
    ) -> Result<()> {
        // When this call started waiting for longer than a spin, and its deadline: the clock is
        // read only then (most calls never wait that long, and reading it costs as much as a
        // pass). A timeout too long to represent as an instant (`Duration::MAX`) is none.
        let mut clock: Option<(Instant, Option<Instant>)> = None;
        let spins = self.spins();
        let mut idle: u32 = 0;
        let mut idle_since: Option<Instant> = None;
        let mut announced = false;
        loop {
            if self.shared.is_aborted() {
                if announced {
                    self.shared.withdraw(self.rank);
                }
                return Err(self.shared.abort_error(self.rank, open_site(runs, ops)));
            }
            let pass = self.pass(runs, ops, posted, until)?;
            if pass.complete || pass.progressed {
                if announced {
                    self.shared.withdraw(self.rank);
                    announced = false;
                }
                if pass.complete {
                    return Ok(());
                }
                idle = 0;
                idle_since = None;
                continue;
            }
            let (op_idx, waiting_for) = pass.blocked.unwrap_or((0, SmallVec::new()));
            fail_point!("blocked");
            // A peer that has returned will never post what we wait for.
            if let Some(&gone) = waiting_for.iter().find(|&&r| self.shared.has_exited(r)) {
                // Re-check once: its last posts and copies happened before it marked itself
                // exited. If this pass changes nothing (no data moved, no run completed), what
                // we wait for from it is still missing and never will come.
                let again = self.pass(runs, ops, posted, until)?;
                if !(again.progressed || again.complete) {
                    if announced {
                        self.shared.withdraw(self.rank);
                    }
                    return Err(Error::PeerFailed {
                        rank: self.rank,
                        peer: gone,
                        reason: PeerFailure::Exited,
                        site: Some(self.blocked_at(ops, posted, op_idx, until).0),
                    });
                }
                continue;
            }
            idle = idle.saturating_add(1);
            if idle < spins {
                std::hint::spin_loop();
                continue;
            }
            let (started, deadline) = *clock.get_or_insert_with(|| {
                let now = Instant::now();
                (now, self.shared.timeout.and_then(|t| now.checked_add(t)))
            });
            if let Some(d) = deadline
                && Instant::now() >= d
            {
                let call = self.blocked_at(ops, posted, op_idx, until);
                return Err(self.timed_out(call, waiting_for.to_vec(), started, announced));
            }
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() < YIELD_FOR {
                std::thread::yield_now();
                continue;
            }
            if !announced {
                let (site, what) = self.blocked_at(ops, posted, op_idx, until);
                let wait = RankWait {
                    rank: self.rank,
                    site,
                    what,
                    waiting_for: waiting_for.to_vec(),
                };
                self.shared.announce(self.rank, wait);
                announced = true;
                fail_point!("announce");
                continue; // look for work once more before sleeping
            }
            announced = false;
            if self.shared.sleep(self.rank, deadline).is_err() {
                let call = self.blocked_at(ops, posted, op_idx, until);
                return Err(self.timed_out(call, waiting_for.to_vec(), started, false));
            }
            idle = 0;
            idle_since = None;
        }
    }

    fn timed_out(
        &self,
        (site, what): (CallSite, String),
        waiting_for: Vec<usize>,
        started: Instant,
        announced: bool,
    ) -> Error {
        if announced {
            self.shared.withdraw(self.rank);
        }
        let err = Error::Timeout {
            rank: self.rank,
            site,
            what,
            waiting_for,
            after: started.elapsed(),
        };
        self.shared.abort(Abort::Failed {
            peer: self.rank,
            reason: PeerFailure::Errored(err.to_string()),
        });
        err
    }
}

/// Stops the world and waits out peers' accesses when dropped — by a panic unwinding through
/// it — or ended with an error; see `LocalBackend::guarded`. Two words: it lives in memory
/// (the unwinding path needs it), written at every call.
struct Posted<'a> {
    shared: &'a WorldState,
    rank: usize,
}

impl Posted<'_> {
    /// Ends the guard with what it covered: disarmed on success; on an error, the world stops
    /// with it as the cause.
    #[inline(always)]
    fn end(self, result: Result<()>) -> Result<()> {
        match result {
            Ok(()) => {
                std::mem::forget(self);
                // A fresh `Ok`, not the result moved: copying the whole (large) `Result` out
                // of the slot just written stalls on the store.
                Ok(())
            }
            Err(e) => {
                self.stop(Abort::for_error(self.rank, &e));
                std::mem::forget(self);
                Err(e)
            }
        }
    }

    /// Stops the world for `cause` and waits until no peer is inside a pass.
    #[cold]
    fn stop(&self, cause: Abort) {
        self.shared.abort(cause);
        self.shared.quiesce(self.rank);
    }
}

impl Drop for Posted<'_> {
    fn drop(&mut self) {
        self.stop(Abort::Failed {
            peer: self.rank,
            reason: PeerFailure::Panicked("panicked inside the local backend".into()),
        });
    }
}

// SAFETY: every collective step checks each member's buffer lengths against this rank's own
// communicator first (`kernels::buffers_fit`), a send and its recv are copied only when their
// lengths are equal, and `execute` returns only after every peer has stopped touching the posted buffers
// (`Posted`'s drop quiesces them even on a panic).
unsafe impl Backend for LocalBackend {
    fn name(&self) -> &'static str {
        "local"
    }

    fn world_id(&self) -> crate::model::WorldId {
        self.shared.id
    }

    fn create_group(&mut self, members: &[usize], ordinal: u32) -> Result<GroupId> {
        Ok(self.shared.group_id(members, ordinal))
    }

    fn execute(&mut self, ops: &mut [Op]) -> Result<()> {
        if self.shared.is_aborted() {
            let site = ops.first().map(|o| o.desc.site);
            return Err(self.shared.abort_error(self.rank, site));
        }
        if let [op] = &*ops
            && self.posted.is_empty()
            && let Some(sig) = Sig::of(op, self.shared.oversubscribed)
        {
            // A broadcast may leave early after others on its own communicator (whose index in
            // `local` is its id).
            self.settle(sig.leaves_early().then_some(op.desc.group.0 as usize))?;
            return self.execute_eager(op, sig);
        }
        if let [op] = &*ops
            && self.posted.is_empty()
            && !op.desc.kind.is_p2p()
        {
            self.settle(None)?;
            return self.execute_lone(op);
        }
        // Runs of two or more ops (which only batches make) rebuild tables.
        if ops.len() > 1 {
            self.last_batch = None;
        }
        self.settle(None)?;
        let plan = crate::plan::plan(ops);
        self.execute_plan(ops, &plan, false)
    }

    /// Runs a batch; one that repeats the last batch that succeeded exactly runs that batch's
    /// plan with the pack tables its runs built, which describe these ops too — only the
    /// buffers' provenance is taken from the new ops (see `pack::Table::refresh`). A bucket of
    /// a thousand small all_reduces spends about a fifth of its bookkeeping planning and
    /// describing itself otherwise.
    fn execute_batch(&mut self, ops: &mut [Op], mark: crate::exec::BatchMark) -> Result<()> {
        let kept = self.last_batch.take();
        if ops.len() < 2 || self.shared.is_aborted() {
            return self.execute(ops);
        }
        self.settle(None)?;
        let (plan, again) = match kept {
            Some((serial, plan))
                if Some(serial) == mark.repeats
                    && plan.last().is_some_and(|(_, r)| r.end == ops.len()) =>
            {
                (plan, true)
            }
            _ => (crate::plan::plan(ops), false),
        };
        let done = self.execute_plan(ops, &plan, again);
        if done.is_ok() {
            self.last_batch = Some((mark.serial, plan));
        }
        done
    }

    fn post(&mut self, posted: PostedOp) -> Result<Ticket> {
        if self.shared.is_aborted() {
            return Err(self.shared.abort_error(self.rank, Some(posted.desc.site)));
        }
        self.settle(None)?;
        let PostedOp { desc, mut data } = posted;
        let buf = Buf::host(data.as_mut_ptr(), desc.numel());
        let send = desc.kind == crate::model::OpKind::Send;
        let op = Box::new(Op {
            desc,
            input: if send { buf } else { Buf::NONE },
            output: if send { Buf::NONE } else { buf },
        });
        let plan = [(crate::plan::target(&op), 0..1)];
        let mut runs = Runs::new();
        self.number(&plan, &mut runs)?;
        let run = runs
            .pop()
            .ok_or_else(|| Error::Internal("a post without a run".into()))?;
        let ticket = Ticket(self.next_ticket);
        self.next_ticket += 1;
        let mut reqs = std::mem::take(&mut self.posted);
        reqs.push(PostedReq {
            ticket,
            op,
            data,
            run,
        });
        // Owned by `reqs` before peers can see it, so a panic while publishing quiesces them
        // (the guard) before the buffer is freed.
        let result = self.guarded(|me| {
            if let Some(req) = reqs.last_mut() {
                me.publish(
                    std::slice::from_ref(&*req.op),
                    std::slice::from_mut(&mut req.run),
                    false,
                );
            }
            Ok(())
        });
        self.posted = reqs;
        result.map(|()| ticket)
    }

    fn wait(&mut self, ticket: Ticket, site: CallSite) -> Result<Vec<u8>> {
        self.settle(None)?;
        let Some(i) = self.posted.iter().position(|p| p.ticket == ticket) else {
            return Err(Error::Internal(format!(
                "wait on request {} that this rank never posted or already waited for",
                ticket.0
            )));
        };
        let mut reqs = std::mem::take(&mut self.posted);
        let result = self.guarded(|me| me.drive(&mut [], &[], &mut reqs, Until::Posted(i, site)));
        // Complete: a send's receiver has copied it, a receive has copied into `data`; nobody
        // reads this buffer any more.
        let done = result.map(|()| reqs.remove(i).data);
        self.posted = reqs;
        done
    }

    fn settle_left(&mut self) -> Result<()> {
        self.settle(None)
    }

    fn drain(&mut self) -> Result<()> {
        self.settle(None)?;
        if self.posted.is_empty() {
            return Ok(());
        }
        let mut reqs = std::mem::take(&mut self.posted);
        let result = self.guarded(|me| me.drive(&mut [], &[], &mut reqs, Until::AllPosted));
        if result.is_ok() {
            reqs.clear();
        }
        self.posted = reqs;
        result
    }
}

impl LocalBackend {
    /// Runs `ops` as planned (`plan`, see [`crate::plan`]); `again`: they repeat the last
    /// batch that succeeded exactly, and `plan` is its plan (see `execute_batch`).
    fn execute_plan(
        &mut self,
        ops: &[Op],
        plan: &[(Target, Range<usize>)],
        again: bool,
    ) -> Result<()> {
        // Declared before the guard: the runs own their pack tables, which peers read, so on
        // the way out through an error they must outlive the guard's quiescing (dropped inside
        // the closure they were freed while a peer could still be reading them).
        let mut runs = Runs::new();
        let numbered = self.number(plan, &mut runs);
        let mut reqs = std::mem::take(&mut self.posted);
        let result = self.guarded(|me| {
            numbered?;
            me.publish(ops, &mut runs, again);
            me.drive(&mut runs, ops, &mut reqs, Until::Runs)
        });
        self.posted = reqs;
        if result.is_ok() {
            // Every member has finished every step, so nobody reads the tables any more.
            for run in runs.iter_mut().filter(|r| r.packs.is_allocated()) {
                if let Some(gi) = run.group {
                    self.tables[gi] = std::mem::take(&mut run.packs);
                }
            }
        }
        drop(runs);
        result
    }

    /// Runs a lone small collective (see `eager`) while no posted message needs progress: the
    /// same protocol as a batch of one, minus the batch machinery (plan, run list, passes) on
    /// the way in and out, which costs more than the step itself. If the step cannot complete
    /// eagerly within a spin — a member is late, runs it in place, or disagrees — `drive` takes
    /// over from where it stands, with the deadlock detector and every check.
    ///
    /// A broadcast or scatter whose slot is free goes shorter still when nothing needs waiting
    /// for: its root always ([`LocalBackend::lead`]), a member whose root's slot already holds
    /// the step with its signature ([`LocalBackend::follow`]).
    fn execute_eager(&mut self, op: &Op, sig: Sig) -> Result<()> {
        if sig.leaves_early() {
            let (gi, me) = self.group_state(op.desc.group)?;
            let k = self.steps[gi];
            let short = match self.groups[gi].as_deref() {
                Some(g) if self.slot_free(Some(gi), g, k, op) => {
                    if op.desc.peer == Some(self.rank) {
                        Some(Short::Lead)
                    } else {
                        let root = kernels::root_member(&op.desc, &g.members);
                        // The root's slot, if it holds the step with our signature; stable
                        // until we finish the step.
                        let ready = g.eager_slot(root, k).read(k).filter(|&(s, _)| s == sig);
                        if ready.is_some() {
                            g.eager_slot(root, k + eager::FOLLOW_AHEAD).prefetch();
                        }
                        ready.map(|(_, data)| Short::Follow(data))
                    }
                }
                _ => None,
            };
            match short {
                Some(Short::Lead) => return self.lead(op, sig, gi, me),
                Some(Short::Follow(data)) => return self.follow(op, sig, gi, me, data),
                None => {}
            }
        }
        let mut run = self.numbered(crate::plan::target(op), 0, 1)?;
        let ops = std::slice::from_ref(op);
        self.guarded(|b| {
            if sig.leaves_early() {
                b.await_slot(&run, op)?;
            }
            let g = b.post_coll(ops, &mut run, Some(sig), false);
            fail_point!("post");
            b.wake_others(g);
            // A broadcast's or scatter's root that filled its slot is done once it has its own
            // part (a scatter's): the members copy from the slot.
            if run.eager.is_some_and(Sig::leaves_early)
                && kernels::root_member(&op.desc, &g.members) == run.me
            {
                return b.root_leaves(op, gi_of(&run)?, run.me, run.base);
            }
            // With ranks outnumbering cores, the member we wait for may need our core: give it
            // up at once rather than spin (measured at worlds 3, 4 and 8: 20–35 % faster per
            // small call; see `docs/decisions.md`, "Waiting: spin, yield, park").
            let crowded = b.shared.oversubscribed;
            for _ in 0..b.spins() {
                // Inside a pass, as `drive` is: a mismatch reads the members' ops.
                let Some(_busy) = b.shared.enter(b.rank) else {
                    break; // aborted: `drive` reports it
                };
                fail_point!("pass");
                match b.step_eager(&mut run, g, ops)? {
                    Eager::Done => {
                        // Our `done` moved: see `progress_coll` for who may wait for it.
                        if sig.leaves_early() {
                            b.wake_others(g);
                        }
                        return Ok(());
                    }
                    Eager::InPlace => break,
                    Eager::Wait(_) if crowded => std::thread::yield_now(),
                    Eager::Wait(_) => std::hint::spin_loop(),
                }
            }
            b.drive(std::slice::from_mut(&mut run), ops, &mut [], Until::Runs)
        })
    }

    /// A lone small broadcast's or scatter's root, whose eager slot for the step is free:
    /// fills it, posts the step, and leaves (see `eager`) — what `execute_eager` does for it,
    /// without the run a step that waits needs. A root that loops over small broadcasts is
    /// the side that bounds the loop, and each store it makes waits behind the one that takes
    /// back the slot's line from the member reading it: building the run was 18 of the call's
    /// 104 stores (counted by `valgrind --tool=lackey`; `docs/decisions.md`, session 41).
    #[inline(always)]
    fn lead(&mut self, op: &Op, sig: Sig, gi: usize, me: usize) -> Result<()> {
        let k = self.steps[gi];
        self.steps[gi] = k + 1;
        let (g, posted) = self.post_short(gi, me, k, op, sig)?;
        self.wake_others(g);
        if let Err(e) = self.root_leaves(op, gi, me, k) {
            return posted.end(Err(e));
        }
        posted.end(Ok(()))
    }

    /// The root (member `me`) of step `k` of communicator `gi`, a small broadcast or scatter
    /// that filled its slot, is done once it has its own part (a scatter's; the members copy
    /// from the slot), and leaves the step.
    #[inline(always)]
    fn root_leaves(&self, op: &Op, gi: usize, me: usize, k: u64) -> Result<()> {
        if op.desc.kind == crate::model::OpKind::Scatter {
            // SAFETY: our input holds every member's part (validated), our output one;
            // distinct tensors.
            unsafe { eager::copy_from(op, op.input.ptr.cast_const(), me) };
        }
        self.leave(gi, k)
    }

    /// A lone small broadcast's or scatter's non-root, whose eager slot for the step is free
    /// and whose root's slot holds the step with our signature `sig`, its input at `data`:
    /// posts the step as `execute_eager` would, completes it from the root's data and leaves —
    /// without the run, the passes, or a wait (see [`LocalBackend::lead`]).
    #[inline(always)]
    fn follow(&mut self, op: &Op, sig: Sig, gi: usize, me: usize, data: *const u8) -> Result<()> {
        let k = self.steps[gi];
        self.steps[gi] = k + 1;
        let (g, posted) = self.post_short(gi, me, k, op, sig)?;
        fail_point!("step");
        // SAFETY: the root's slot holds step k with our signature, hence an input of our op's
        // size, and stays until we finish k (`slot_free`); our output is ours.
        unsafe { eager::copy_from(op, data, me) };
        self.left_as_member(Some(gi), g, me, k);
        // Members that ran the step in place, and a root settling it, wait for our `done`.
        self.wake_others(g);
        posted.end(Ok(()))
    }

    /// [`LocalBackend::post_one`] for the short ways (`lead`, `follow`) of step `k` of
    /// communicator `gi`, under the guard returned for the caller to end.
    #[inline(always)]
    fn post_short(
        &self,
        gi: usize,
        me: usize,
        k: u64,
        op: &Op,
        sig: Sig,
    ) -> Result<(&GroupState, Posted<'_>)> {
        let Some(g) = self.groups[gi].as_deref() else {
            return Err(Error::Internal("a broadcast without its group".into()));
        };
        let posted = self.guard();
        self.post_one(g, me, k, op, sig);
        fail_point!("post");
        Ok((g, posted))
    }

    /// Posts step `k` of `g`, a lone eager `op` with signature `sig`, as member `me`: its slot
    /// filled, then the run of one published (see `LocalBackend::post_coll`).
    #[inline(always)]
    fn post_one(&self, g: &GroupState, me: usize, k: u64, op: &Op, sig: Sig) {
        // SAFETY: our own slot and data area, whose previous uses every member has finished
        // (`slot_free`, checked by the caller for step k); `Sig::of` checked the input's size,
        // host memory.
        unsafe { g.eager_slot(me, k).fill(k, sig, op, || g.eager_data(me, k)) };
        let slot = &g.slots[me];
        Lone::describe(None, slot);
        // Peers only ever read through this pointer.
        let entries = std::ptr::from_ref(op).cast_mut();
        slot.announce(k, k + 1, entries, std::ptr::null_mut());
    }

    /// Runs a lone collective that goes in place (too large to go eagerly) while no posted
    /// message needs progress: a batch of one without the batch machinery — no plan, no run
    /// list, whose bookkeeping took 0.1–0.2 µs of a 2.6 µs all_gather of 64 KiB at world 2 —
    /// and, when it can, without `drive`'s passes (`lone_step`).
    fn execute_lone(&mut self, op: &Op) -> Result<()> {
        let mut run = self.numbered(crate::plan::target(op), 0, 1)?;
        let ops = std::slice::from_ref(op);
        self.guarded(|b| {
            let g = b.post_coll(ops, &mut run, None, false);
            fail_point!("post");
            b.wake_others(g);
            b.lone_step(&mut run, g, op)?;
            if run.complete {
                return Ok(());
            }
            b.drive(std::slice::from_mut(&mut run), ops, &mut [], Until::Runs)
        })
    }

    /// A lone run's step done directly, the way a pass would do it, when every member posts
    /// it within a spin with the description we published (see `lone`): wait for their posts,
    /// move our share, mark it done, wait for theirs — watching each counter by loads alone,
    /// without a pass's bookkeeping between two looks. Anything else leaves the run where it
    /// stands for `drive`, which goes on from there with every check and the deadlock detector:
    /// no description, a member late or disagreeing, a step we have no share in (its checker
    /// decides for us), ranks outnumbering cores (where spinning keeps a peer off its core), an
    /// abort.
    #[inline(always)]
    fn lone_step(&self, run: &mut TargetRun, g: &GroupState, op: &Op) -> Result<()> {
        let (Some(sig), false) = (run.lone, self.shared.oversubscribed) else {
            return Ok(());
        };
        let (k, n) = (run.base, g.members.len());
        if !kernels::takes_part(&op.desc, n, run.me, k) {
            return Ok(());
        }
        // What needs nobody else's buffers is done while they arrive (if they disagree, the
        // call fails with it done: see `kernels::own_part`; a fall back to `drive` redoes it)
        // — unless this share copies backward, which does it last.
        // SAFETY: our own buffers, which fit the step (`Lone::of` checked them before we
        // published `sig`); nobody else writes that block.
        let own_done =
            unsafe { kernels::own_part_ahead(&op.desc, n, run.me, op.input.ptr, op.output.ptr) };
        let posted = || g.slots.iter().all(|s| s.posted.load(Ordering::Acquire) > k);
        if !spin_until(posted) {
            return Ok(());
        }
        {
            let Some(_busy) = self.shared.enter(self.rank) else {
                return Ok(()); // `drive` reports the abort
            };
            fail_point!("pass");
            // SAFETY: every member has posted step k (Acquire above) and cannot complete it —
            // nor repost its slot — before we bump our `done` past k.
            let Some(bufs) = (unsafe { lone::buffers(g, k, sig, run.me, op) }) else {
                return Ok(());
            };
            fail_point!("step");
            // SAFETY: as in `step_coll`: agreeing ops for step k whose buffers fit it (each
            // checked by its member), every member in the step until we all mark it done.
            unsafe { self.share(run, g, &op.desc, &bufs, own_done) };
        }
        // Members may be waiting for our `done` (see `progress_coll`).
        self.wake_others(g);
        fail_point!("complete");
        let done = || g.slots.iter().all(|s| s.done.0.load(Ordering::Acquire) > k);
        run.complete = spin_until(done);
        Ok(())
    }

    /// Before a broadcast that may leave early: while our slot for its step is still in use
    /// (a member has not finished the step `RING` earlier — typically the root running ahead,
    /// or its own checks of steps it left), checks what we left and gives up the core, for a
    /// while. If the slot is still busy then, the step runs in place, where `drive` waits with
    /// the deadlock detector and every check.
    #[inline(always)]
    fn await_slot(&self, run: &TargetRun, op: &Op) -> Result<()> {
        if self.slot_free(run.group, self.group_of(run), run.base, op) {
            return Ok(()); // the rule: the root stays less than a ring ahead
        }
        self.await_slot_slow(run, op)
    }

    /// [`LocalBackend::await_slot`] once the slot is busy.
    #[cold]
    #[inline(never)]
    fn await_slot_slow(&self, run: &TargetRun, op: &Op) -> Result<()> {
        let (Some(gi), g) = (run.group, self.group_of(run)) else {
            return Ok(());
        };
        let mut since: Option<Instant> = None;
        while !self.slot_free(Some(gi), g, run.base, op) {
            let Some(_busy) = self.shared.enter(self.rank) else {
                return Ok(()); // aborted: the next step reports it
            };
            self.settle_group(gi)?;
            drop(_busy);
            if since.get_or_insert_with(Instant::now).elapsed() > YIELD_FOR {
                break;
            }
            std::thread::yield_now();
        }
        Ok(())
    }

    /// Runs `f`, which may publish buffers peers then read. If it leaves early — an error, or
    /// a panic unwinding through here — the world must stop and every access under way must
    /// end before the buffers are freed; the guard does that on every path out but success.
    #[inline(always)]
    fn guarded(&self, f: impl FnOnce(&Self) -> Result<()>) -> Result<()> {
        let posted = self.guard();
        posted.end(f(self))
    }

    /// The guard of [`LocalBackend::guarded`], for a caller that ends it itself
    /// ([`Posted::end`]): without a closure, whose captures a long one stores to the stack.
    #[inline(always)]
    fn guard(&self) -> Posted<'_> {
        Posted {
            shared: &self.shared,
            rank: self.rank,
        }
    }
}

impl Drop for LocalBackend {
    /// Posted ops still in flight (a rank that failed, or whose program was dropped without
    /// draining) are readable by peers: stop the world and wait out their accesses before the
    /// buffers go.
    fn drop(&mut self) {
        if self.posted.iter().any(|p| !p.run.complete) {
            self.shared.abort(Abort::Failed {
                peer: self.rank,
                reason: PeerFailure::Errored(
                    "returned with posted sends or receives still pending".into(),
                ),
            });
            self.shared.quiesce(self.rank);
        }
    }
}

#[cfg(test)]
mod tests;
