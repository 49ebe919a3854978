//! State shared by the ranks of one in-process world, and the slow path that parks, wakes and
//! detects deadlocks.
//!
//! The data path is lock-free: ranks publish the ops they post through per-member and
//! per-channel atomics (see `engine`). The single mutex here is taken only by a rank that has
//! found nothing to do for a while and is about to sleep, by ranks waking such sleepers, and at
//! exit — never to move data.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use crate::error::{DeadlockReport, Error, PeerFailure, RankWait};
use crate::exec::Op;

use super::eager::{DATA_RING, EagerData, EagerSlot, RING};
use super::pack::PackEntry;
use crate::model::{CallSite, GroupId, WorldId};

/// A rank's published run of collective ops on one communicator. In C order: the eight words
/// before `done` fill one cache line, which a peer's load of `posted` brings whole (see `lone`).
#[repr(C, align(128))]
#[derive(Default)]
pub(crate) struct CollSlot {
    /// One past the last step this member has posted (Release; readers Acquire).
    pub posted: AtomicU64,
    /// The step of `entries[0]`.
    pub base: AtomicU64,
    /// The member's ops for steps `base..posted`, in its own stack/heap frame.
    pub entries: AtomicPtr<Op>,
    /// The pack table of those steps (see `pack`), or null.
    pub packs: AtomicPtr<PackEntry>,
    /// A run of one op: its signature, zero if none (see `lone`), in the line `posted` brings.
    pub lone: [AtomicU64; 2],
    /// A run of one op with a signature: its input's first byte.
    pub lone_input: AtomicPtr<u8>,
    /// And its output's.
    pub lone_output: AtomicPtr<u8>,
    /// Number of steps whose share this member has finished (Release; readers Acquire). On
    /// its own cache line: it changes every step, the fields above once per run.
    pub done: PaddedU64,
}

const _: () = assert!(std::mem::offset_of!(CollSlot, lone_output) == 56);

impl CollSlot {
    /// Publishes the member's run of steps `base..end`: its ops `entries` and their pack table
    /// `packs` (or null), `posted` last (Release), after everything the run describes.
    #[inline(always)]
    pub(crate) fn announce(&self, base: u64, end: u64, entries: *mut Op, packs: *mut PackEntry) {
        self.base.store(base, Ordering::Relaxed);
        self.entries.store(entries, Ordering::Relaxed);
        self.packs.store(packs, Ordering::Relaxed);
        self.posted.store(end, Ordering::Release);
    }
}

/// A communicator: its members, one slot per member, and a ring of eager slots per member.
pub(crate) struct GroupState {
    pub members: Box<[usize]>,
    pub slots: Box<[CollSlot]>,
    /// Member `j`'s eager slot for step `k` is `eager[RING * j + k % RING]` (see `eager`).
    pub eager: Box<[EagerSlot]>,
    /// Member `j`'s data area for step `k` is `data[DATA_RING * j + k % DATA_RING]`.
    pub data: Box<[EagerData]>,
}

impl GroupState {
    fn new(members: Box<[usize]>) -> Self {
        let n = members.len();
        GroupState {
            members,
            slots: (0..n).map(|_| CollSlot::default()).collect(),
            eager: (0..RING as usize * n)
                .map(|_| EagerSlot::default())
                .collect(),
            data: EagerData::ring(DATA_RING as usize * n),
        }
    }

    /// Member `j`'s eager slot for `step`.
    pub(crate) fn eager_slot(&self, j: usize, step: u64) -> &EagerSlot {
        &self.eager[RING as usize * j + (step % RING) as usize]
    }

    /// Member `j`'s data area for `step` (an eager input larger than a slot holds).
    pub(crate) fn eager_data(&self, j: usize, step: u64) -> &EagerData {
        &self.data[DATA_RING as usize * j + (step % DATA_RING) as usize]
    }
}

/// The sender's side of the ordered channel `src → dst`.
#[repr(align(128))]
#[derive(Default)]
pub(crate) struct Channel {
    pub posted: AtomicU64,
    pub base: AtomicU64,
    pub entries: AtomicPtr<Op>,
    /// Messages delivered: written by the receiver after copying (its own cache line).
    pub copied: PaddedU64,
}

#[repr(align(128))]
#[derive(Default)]
pub(crate) struct PaddedU64(pub AtomicU64);

#[repr(align(128))]
#[derive(Default)]
struct PaddedBool(AtomicBool);

/// A rank's "inside a progress pass" mark; see [`WorldState::enter`].
pub(crate) struct Busy<'a> {
    shared: &'a WorldState,
    rank: usize,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.shared.busy[self.rank]
            .0
            .store(false, Ordering::Release);
    }
}

/// Why the world stopped early. The first cause wins; every rank reports it.
#[derive(Debug, Clone)]
pub(crate) enum Abort {
    /// A rank failed; the others report `PeerFailed`.
    Failed { peer: usize, reason: PeerFailure },
    /// A world-level error every rank returns as is (deadlock, mismatch).
    Error(Error),
}

impl Abort {
    /// The abort a rank publishes when it leaves with `err`: an echo of another rank's failure
    /// passes on that rank and its reason (so every waiting rank names the rank that caused the
    /// failure, not the one that relayed it), world-level errors pass as they are, and anything
    /// else is this rank's own failure.
    pub(crate) fn for_error(rank: usize, err: &Error) -> Abort {
        match err {
            Error::PeerFailed { peer, reason, .. } => Abort::Failed {
                peer: *peer,
                reason: reason.clone(),
            },
            Error::Deadlock(_) | Error::CollectiveMismatch(_) | Error::P2pMismatch(_) => {
                Abort::Error(err.clone())
            }
            other => Abort::Failed {
                peer: rank,
                reason: PeerFailure::Errored(other.to_string()),
            },
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Park {
    Running,
    /// Announced it will sleep; has not yet re-checked for work.
    Announced,
    /// Re-checked after announcing and found nothing; waiting to be woken.
    Sleeping,
}

struct Ctl {
    park: Vec<Park>,
    waits: Vec<Option<RankWait>>,
}

/// Everything the ranks of one world share.
pub(crate) struct WorldState {
    /// This world's identity, carried by its group handles.
    pub id: WorldId,
    pub world: usize,
    pub timeout: Option<Duration>,
    /// Whether there are more ranks than cores (then waiting ranks yield early).
    pub oversubscribed: bool,
    chans: Box<[Channel]>,
    groups: RwLock<Vec<Arc<GroupState>>>,
    registry: Mutex<HashMap<(Vec<usize>, u32), GroupId>>,
    exited: Box<[AtomicBool]>,
    /// Set while a rank is inside a progress pass (and may touch peers' buffers).
    busy: Box<[PaddedBool]>,
    aborted: AtomicBool,
    abort: OnceLock<Abort>,
    /// Ranks announced or sleeping; wakers skip the mutex while it is zero.
    parked: AtomicUsize,
    ctl: Mutex<Ctl>,
    cvs: Box<[Condvar]>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding these locks; if something did, the state is still valid.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl WorldState {
    pub(crate) fn new(world: usize, timeout: Option<Duration>) -> Arc<Self> {
        // Before any rank thread can wake or announce.
        super::fence::init();
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let world_group = Arc::new(GroupState::new((0..world).collect()));
        let mut registry = HashMap::new();
        registry.insert(((0..world).collect(), u32::MAX), GroupId::WORLD);
        Arc::new(WorldState {
            id: WorldId::fresh(),
            world,
            timeout,
            oversubscribed: world > cores,
            chans: (0..world * world).map(|_| Channel::default()).collect(),
            groups: RwLock::new(vec![world_group]),
            registry: Mutex::new(registry),
            exited: (0..world).map(|_| AtomicBool::new(false)).collect(),
            busy: (0..world).map(|_| PaddedBool::default()).collect(),
            aborted: AtomicBool::new(false),
            abort: OnceLock::new(),
            parked: AtomicUsize::new(0),
            ctl: Mutex::new(Ctl {
                park: vec![Park::Running; world],
                waits: vec![None; world],
            }),
            cvs: (0..world).map(|_| Condvar::new()).collect(),
        })
    }

    pub(crate) fn chan(&self, src: usize, dst: usize) -> &Channel {
        &self.chans[src * self.world + dst]
    }

    pub(crate) fn group_id(&self, members: &[usize], ordinal: u32) -> GroupId {
        let mut reg = lock(&self.registry);
        if let Some(&id) = reg.get(&(members.to_vec(), ordinal)) {
            return id;
        }
        let mut groups = self.groups.write().unwrap_or_else(PoisonError::into_inner);
        let id = GroupId(groups.len() as u32);
        groups.push(Arc::new(GroupState::new(members.into())));
        reg.insert((members.to_vec(), ordinal), id);
        id
    }

    pub(crate) fn group(&self, id: GroupId) -> Option<Arc<GroupState>> {
        let groups = self.groups.read().unwrap_or_else(PoisonError::into_inner);
        groups.get(id.0 as usize).cloned()
    }

    /// Marks `rank` as possibly touching peers' buffers until the returned guard is dropped;
    /// `None` if the world is stopping, in which case it must not touch them.
    ///
    /// A store-then-load handshake with [`WorldState::quiesce`] (which follows an abort): either
    /// this check sees the abort, or the quiescing rank sees us busy and waits for us. This is
    /// its light side (every pass runs it), `quiesce` the heavy one (see `fence`). The mark is
    /// cleared by the guard's destructor, so a panic inside the pass cannot leave it set (peers
    /// quiescing would wait for it forever).
    pub(crate) fn enter(&self, rank: usize) -> Option<Busy<'_>> {
        self.busy[rank].0.store(true, Ordering::Relaxed);
        super::fence::light();
        let busy = Busy { shared: self, rank };
        if self.aborted.load(Ordering::SeqCst) {
            return None; // `busy` drops here and clears the mark
        }
        Some(busy)
    }

    /// After an abort: waits until no other rank is inside a progress pass, so that buffers
    /// `rank` posted can no longer be read or written by anyone.
    ///
    /// The abort is visible here (this rank stored it or saw it); the heavy side of the fence
    /// pairs with `enter`'s light one. Without it a pass could start after the check below and
    /// touch buffers about to be freed, so if it cannot be made (see `fence::heavy`) the
    /// process stops rather than go on.
    pub(crate) fn quiesce(&self, rank: usize) {
        if let Err(e) = super::fence::heavy() {
            eprintln!(
                "rankwise: {e}; stopping the process, since a rank could otherwise still read \
                 buffers that are about to be freed"
            );
            std::process::abort();
        }
        for (r, b) in self.busy.iter().enumerate() {
            while r != rank && b.0.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
        }
    }

    pub(crate) fn has_exited(&self, rank: usize) -> bool {
        self.exited[rank].load(Ordering::Acquire)
    }

    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire)
    }

    /// The error rank `rank` (waiting at `site`) reports for the abort.
    pub(crate) fn abort_error(&self, rank: usize, site: Option<CallSite>) -> Error {
        match self.abort.get() {
            Some(Abort::Failed { peer, reason }) => Error::PeerFailed {
                rank,
                peer: *peer,
                reason: reason.clone(),
                site,
            },
            Some(Abort::Error(e)) => e.clone(),
            None => Error::Internal("the world was aborted without a cause".into()),
        }
    }

    /// The first abort cause, if any.
    pub(crate) fn abort_cause(&self) -> Option<&Abort> {
        self.abort.get()
    }

    /// Stops the world: every waiting rank wakes and returns the error for `cause` (unless an
    /// earlier cause won).
    pub(crate) fn abort(&self, cause: Abort) {
        let _ = self.abort.set(cause);
        self.aborted.store(true, Ordering::SeqCst);
        self.wake_all();
    }

    /// Marks `rank` as finished (its function returned) and wakes everyone so that ranks
    /// waiting on it notice.
    pub(crate) fn exit(&self, rank: usize) {
        self.exited[rank].store(true, Ordering::Release);
        self.wake_all();
    }

    fn wake_all(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        let mut ctl = lock(&self.ctl);
        for r in 0..self.world {
            self.unpark(&mut ctl, r);
        }
    }

    fn unpark(&self, ctl: &mut Ctl, r: usize) {
        if ctl.park[r] != Park::Running {
            ctl.park[r] = Park::Running;
            self.parked.fetch_sub(1, Ordering::SeqCst);
            self.cvs[r].notify_one();
        }
    }

    /// Called after publishing progress that `targets` may be waiting for.
    ///
    /// Inlined down to its check of `parked`: it runs once or twice per call, and nobody is
    /// asleep in a busy program.
    #[inline(always)]
    pub(crate) fn wake(&self, targets: impl IntoIterator<Item = usize>) {
        self.wake_with(|| targets);
    }

    /// [`WorldState::wake`] with the targets made only if some rank is asleep (rarely: made
    /// at every call, they are stores that wait behind the call's stores to shared lines).
    #[inline(always)]
    pub(crate) fn wake_with<I: IntoIterator<Item = usize>>(&self, targets: impl FnOnce() -> I) {
        // Pairs with the fence in `announce`: either the sleeper's re-check sees our progress,
        // or we see its announcement here. The light side of an asymmetric fence: this runs on
        // every call that makes progress, `announce` after hundreds of microseconds of waiting.
        super::fence::light();
        if self.parked.load(Ordering::Relaxed) == 0 {
            return;
        }
        self.wake_parked(targets());
    }

    /// [`WorldState::wake`] once some rank is asleep.
    #[cold]
    #[inline(never)]
    fn wake_parked(&self, targets: impl IntoIterator<Item = usize>) {
        let mut ctl = lock(&self.ctl);
        for r in targets {
            self.unpark(&mut ctl, r);
        }
    }

    /// First half of going to sleep: announce it (with what we wait for). The caller must then
    /// look for work once more before calling [`WorldState::sleep`]. If the fence that makes
    /// the re-check see every waker's progress cannot be made, the world stops with that error
    /// (sleeping without it could miss a wake-up and be taken for a deadlock).
    pub(crate) fn announce(&self, rank: usize, wait: RankWait) {
        {
            let mut ctl = lock(&self.ctl);
            if ctl.park[rank] == Park::Running {
                self.parked.fetch_add(1, Ordering::SeqCst);
            }
            ctl.park[rank] = Park::Announced;
            ctl.waits[rank] = Some(wait);
        }
        // Pairs with the light fence in `wake`.
        if let Err(e) = super::fence::heavy() {
            self.abort(Abort::Error(Error::Internal(e)));
        }
    }

    /// Withdraws an announcement after finding work.
    pub(crate) fn withdraw(&self, rank: usize) {
        let mut ctl = lock(&self.ctl);
        self.unpark(&mut ctl, rank);
    }

    /// Second half: sleep until woken. If every unfinished rank is asleep, nobody can wake
    /// anybody: that is a deadlock, reported to all. Returns `Err` after `deadline`.
    pub(crate) fn sleep(&self, rank: usize, deadline: Option<Instant>) -> Result<(), ()> {
        let mut ctl = lock(&self.ctl);
        if ctl.park[rank] != Park::Announced {
            return Ok(()); // woken between the announcement and now
        }
        ctl.park[rank] = Park::Sleeping;
        let all_asleep =
            (0..self.world).all(|r| ctl.park[r] == Park::Sleeping || self.has_exited(r));
        if all_asleep {
            let waits = (0..self.world)
                .filter_map(|r| ctl.waits[r].clone())
                .collect();
            drop(ctl);
            self.abort(Abort::Error(Error::Deadlock(DeadlockReport { waits })));
            return Ok(());
        }
        while ctl.park[rank] == Park::Sleeping {
            ctl = match deadline {
                None => self.cvs[rank]
                    .wait(ctl)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        self.unpark(&mut ctl, rank);
                        return Err(());
                    }
                    self.cvs[rank]
                        .wait_timeout(ctl, d - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
        drop(ctl);
        crate::pin::back_home();
        Ok(())
    }
}
