//! All-reduces (and broadcasts) through shared memory, for groups whose members share one host.
//!
//! A bucket of small all-reduces is agreed through one exchange and packed into one run (see
//! `eager::Proposal`). On the MPI path that run costs what one all-reduce of its size costs,
//! and on one host that is Open MPI moving every byte through its shared-memory transport
//! (single-copy reads by the kernel, its progress engine) after rankwise packed it into a
//! buffer: at world 2, a bucket of 1,000 × 1 KiB took four times less than its calls one by one,
//! where the issue asks ten. A lone large all-reduce paid the same transport. Members on one
//! host can read each other's memory directly instead, as the threads backend does, if that
//! memory is shared: each member has a *region* in one window (`MPI_Win_allocate_shared`),
//! created with the group's communicator, collectively, at the same point as the communicator
//! itself.
//!
//! # One step (generation `g`, the same sequence on every member)
//!
//! A *run* is one all-reduce, or a packed run of them, agreed by every member; its bytes (its
//! tensors one after another) go through the window in steps of at most [`AREA`] bytes, and
//! each step's bytes are cut into one *slice* per member.
//!
//! 1. **Arrive.** Copy this member's data of every *other* member's slice into its pack area;
//!    then publish `arrived = g`.
//! 2. **Reduce.** Once every member has arrived at `g`: fold this member's slice, in member
//!    order, from its own tensors and the others' pack areas, into its own tensors and its
//!    result area (of two members: into the other's pack area, over the bytes just folded);
//!    then publish `reduced = g`.
//! 3. **Collect.** Once every member has reduced at `g`: copy every other member's slice from
//!    where that member put its results into this member's tensors.
//!
//! Each byte is copied out once and in once, and folded where it is — no message, no copy by
//! MPI. Every member's result is the same fold in the same order, so every member gets the same
//! bits, the bits the MPI path and the threads backend give.
//!
//! **Direct members.** A member whose tensors of an all-reduce run all lie in its shared heap
//! (see `arena` and `crate::heap`) copies nothing in step 1: it publishes where each call's
//! input and output lie in its heap (its *table*) and says so (`direct`) before `arrived`. In
//! step 2 the others read its data of their slices where it is, and write their slices'
//! results straight into its outputs; it collects nothing in step 3, since every slice is
//! already there once every member has reduced. Members whose tensors are elsewhere copy as
//! above, in the same run: each member reads each other member's part from its tensors or its
//! pack area, and writes its results into the direct members' outputs and, if any member
//! copies, where that member collects them. The run's call tag covers every call's size, so
//! members that agree on it have tables of the same calls; a table that places a call outside
//! its member's heap is refused like a differing call.
//!
//! **A broadcast** (lone, larger than one message of `eager`, among more than two; a pair's goes
//! directly through MPI) takes the same steps with less in them: in step 1 the root alone copies
//! the step's bytes into its pack area; in step 2 every other member copies them out, once the
//! root has arrived; step 3 has nothing to collect. The root copies each byte once and every
//! member once, where MPI's tree relays them through intermediate ranks (at world 4: 1 MiB in
//! 0.53–0.91 of raw MPI's time, against 0.85–1.26 on the schedule path).
//!
//! **An all-gather** (lone, its blocks contiguous, and one that `eager` neither exchanges nor
//! sends directly: see [`gather_block`]) likewise: in step 1 each member copies its bytes of the
//! step into its pack area; in step 2 each copies every other member's out, and its own from
//! its input, into its output. Each block is copied into shared memory once for all of its
//! n − 1 readers, where MPI's transfers between every pair move it once per reader and add a
//! handshake per pair.
//!
//! **Reading senders where they are.** With shared heaps, a broadcast, all-gather or
//! all-to-all above a small collective comes here at any size ([`pulls`]). A sender whose
//! bytes lie in its heap publishes where (its table) instead of copying them in step 1, and in
//! step 2 each member copies what it receives straight from there: each byte is copied once,
//! by its reader, with nothing between — where MPI's transfer costs a handshake and a copy by
//! the kernel, and a copy through the pack area costs two. A sender whose bytes are elsewhere
//! copies them into its pack area as above, except in a run that pulls only ([`pulls_only`]: a
//! pair's broadcast or all-gather, or an all-to-all, where the copies cost more than the way
//! the group runs the call without heaps). There it copies nothing, and once every member has
//! read every sender's `direct` word (step 2: the same words on every member, so the same
//! decision), the run is handed back (`drive` then runs it as without heaps). A run that
//! pulls only is one step, of any size, since it uses no area.
//!
//! **Why areas can be reused without a third signal.** A member writes its pack area only in
//! step 1 of the next step, after it saw every member reduced at `g` — so every reader of that
//! area (step 2 of `g`) is done. It writes its result area only in step 2 of the next step,
//! after every member arrived at `g + 1` — which each did only after its own step 3 of `g`, the
//! last read of that area. Slices may therefore differ from one step to the next. Of two
//! members, member `s` writes its results into the other's pack area, at its own slice's place:
//! after the other arrived at `g` (nobody else reads those bytes), and the other reads them in
//! its step 3 of `g`, before it rewrites its pack area in step 1 of the next step.
//!
//! **No new way to wait forever.** A run starts only after every member agreed to it (through
//! an exchange, or a large call's records, which all of them receive), and a step never blocks:
//! the driver polls it between MPI tests, as it does messages, so members that meet several
//! communicators' steps in different orders still progress. Without the check
//! (`RANKWISE_MPI_CHECK=0`), members that disagree wait for each other, and the monitor names
//! both calls, as on the MPI path. The monitor sees the rank blocked in the run's calls, as on the MPI
//! path; a member that fails ends the job (`MPI_Abort`), which ends the others' polling too.
//! Tensors are shared only when they lie in the ranks' shared heap (direct members, above);
//! others never leave their process.
//!
//! `RANKWISE_MPI_SHM` decides ([`MODES`]): `0`/`off`/`false`/`no` never (every run goes through
//! MPI, as it must across hosts); `require`, for tests, always (a group that cannot have a window
//! is an error); unset or `1`/`on`/`true`/`yes` when every member of the group is on one host
//! (`MPI_Comm_split_type` says so). Any other value stops the job at start (`vars::read`).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use smallvec::SmallVec;

use super::lanes::{self, Lanes};
use super::raw::{self, Comm};
use super::steps::{fold_into_own, fold_parts};
use crate::error::{Error, Result};
use crate::exec::Op;
use crate::exec::copy::copy_bytes;
use crate::model::{OpDesc, OpKind};
use crate::rules::rows;
use crate::vars::{self, Choice};

/// Bytes of each member's pack area, and of its result area: the most one step moves (a longer
/// run takes several). Pages of the window that no run touches cost no memory (the window is a
/// mapped file).
pub(super) const AREA: usize = 4 << 20;

/// Where a region's counters and areas start. The counters sit 128 bytes apart, so that the
/// adjacent-line prefetch of one never pulls in the other, nor the first bytes of data.
const ARRIVED: usize = 0;
/// The run's call tag (see [`Regions::start`]), written before `arrived`, in its line.
const CALL: usize = 8;
/// Whether this member's tensors of the step are in its shared heap (1) or copied into its pack
/// area (0): written before `arrived`, in its line.
const DIRECT: usize = 16;
const REDUCED: usize = 128;
const PACK: usize = 256;
/// Where a direct member publishes its tensors' offsets in its shared heap (input, then
/// output, 8 bytes each, per call of the run).
const TABLE: usize = PACK + 2 * AREA;
/// The most calls of a run whose members can go direct.
const TABLE_CALLS: usize = 2048;
/// Where a region's lanes for small collectives' messages start (see `lanes`).
const LANES: usize = TABLE + 16 * TABLE_CALLS;
/// Bytes of one member's region.
pub(super) const REGION: usize = LANES + lanes::BYTES;
/// Slices start at multiples of a cache line (and so of every element size).
const LINE: usize = crate::exec::CACHE_LINE;

/// What `RANKWISE_MPI_SHM` asks for (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Mode {
    Off,
    On,
    Require,
}

impl Mode {
    /// The mode of this process (every process of a job must agree: mpirun passes its
    /// environment on, and the backend checks it at start).
    pub(super) fn from_env() -> Result<Mode> {
        Ok(vars::read("RANKWISE_MPI_SHM", &MODES)?.unwrap_or(Mode::On))
    }
}

/// `RANKWISE_MPI_SHM`'s settings.
pub(super) const MODES: [Choice<Mode>; 3] = [
    Choice {
        values: vars::ON,
        means: "a window for every group whose ranks share a host: the default",
        value: Mode::On,
    },
    Choice {
        values: &["require"],
        means: "a window for every group, or an error",
        value: Mode::Require,
    },
    Choice {
        values: vars::OFF,
        means: "MPI's messages only",
        value: Mode::Off,
    },
];

/// Whether the run `ops` goes through the window of a group of `n` members (`heaps`: whose
/// members all have shared heaps): all-reduces (one, or a packed run: one kind, dtype and
/// reduce op, see `drive::same_kind_run`), one step per [`AREA`] bytes; a lone broadcast,
/// likewise; a lone reduce-scatter whose blocks are contiguous (along dim 0, or dims before it
/// of size 1) and whose input fits one area; a lone all-gather whose blocks are contiguous
/// (see [`gather_block`]); and, with heaps, a lone all-to-all whose blocks are contiguous (see
/// [`pulls`]). Every member decides alike, from the agreed run and the group alone. (Calls the
/// exchange or a direct transfer takes never come here.)
pub(super) fn takes(ops: &[Op], n: usize, heaps: bool) -> bool {
    match ops {
        [o, ..] if o.desc.kind == OpKind::AllReduce => true,
        [o] if o.desc.kind == OpKind::Broadcast => true,
        [o] if o.desc.kind == OpKind::AllToAll => heaps && pulls(&o.desc, n),
        [o] if o.desc.kind == OpKind::ReduceScatter => {
            let d = &o.desc;
            rows(&d.shape, d.dim).0 == 1
                && d.numel()
                    .checked_mul(d.dtype.size())
                    .is_some_and(|b| b <= AREA)
        }
        _ => gather_block(ops, n).is_some(),
    }
}

/// The bytes of one member's block, if `ops` is a lone all-gather among `n` members whose
/// blocks are contiguous (along dim 0, or dims before it of size 1). Why only all-gathers of
/// the calls that move blocks without folding them: each of its blocks goes to every other
/// member, so one copy into shared memory serves n − 1 readers. A gather's, scatter's or
/// all-to-all's block goes to one member only, and MPI moves it once (a single copy by the
/// kernel), where the window would copy it twice: an all-to-all of 16 MiB at world 4 through
/// the window took 1.22–1.32× raw MPI's time against 1.02–1.03× directly (`BENCHMARKS.md`,
/// session 30).
fn gather_block(ops: &[Op], n: usize) -> Option<usize> {
    let [o] = ops else { return None };
    let d = &o.desc;
    (d.kind == OpKind::AllGather && n >= 2 && rows(&d.shape, d.dim).0 == 1)
        .then(|| d.numel().checked_mul(d.dtype.size()))
        .flatten()
}

/// Whether `d` is a call whose members can read the bytes they receive where their senders'
/// tensors are, when those lie in the senders' shared heaps: a broadcast, or an all-gather or
/// all-to-all whose blocks are contiguous (along dim 0, or dims before it of size 1). Each
/// received byte is then copied once, by its reader, with no copy into shared memory first and
/// none by the kernel or MPI's progress engine. With heaps such calls above `eager`'s small
/// size come here (`eager::proposal`); see [`pulls_only`] for those that come here only then.
pub(super) fn pulls(d: &OpDesc, n: usize) -> bool {
    n >= 2
        && match d.kind {
            OpKind::Broadcast => true,
            OpKind::AllGather | OpKind::AllToAll => rows(&d.shape, d.dim).0 == 1,
            _ => false,
        }
}

/// Whether the run is a call that goes through the window only to be read where it is (see
/// [`pulls`]): a pair's broadcast or all-gather, or an all-to-all. Copied through the window
/// these cost more than the way the group runs them without heaps (measured with
/// `RANKWISE_BENCH_TENSORS=vec`: 1 MiB at world 2 in 1.5–2.4× of MPI's time, against about
/// 1.0× handed back), so a run whose senders' tensors are not all in their heaps goes that way
/// after all ([`Polled::ByMpi`]), every member deciding alike from the senders' `direct`
/// words. (An all-gather or broadcast among more than two copies through the window instead:
/// one copy into shared memory serves n − 1 readers.)
fn pulls_only(ops: &[Op], n: usize) -> bool {
    matches!(ops, [o] if pulls(&o.desc, n)
        && (o.desc.kind == OpKind::AllToAll || n == 2))
}

/// The bytes of one member's block, if `ops` is a lone all-to-all among `n` members whose
/// blocks are contiguous.
fn exchange_block(ops: &[Op], n: usize) -> Option<usize> {
    match ops {
        [o] if o.desc.kind == OpKind::AllToAll && pulls(&o.desc, n) => o
            .desc
            .numel()
            .checked_mul(o.desc.dtype.size())
            .map(|b| b / n),
        _ => None,
    }
}

/// What one poll of a run says (see [`Regions::poll`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Polled {
    /// Other members have yet to do their part.
    Pending,
    /// Every tensor of the run holds its result.
    Done,
    /// The run moved nothing: a sender's tensor is outside its heap ([`pulls_only`]), and the
    /// caller must run the call as the group would without heaps (`drive::reroute`), on every
    /// member alike.
    ByMpi,
}

/// Whether the run is a reduce-scatter: each member's slice is its own block of the input,
/// folded straight into its output, and nothing is collected.
fn scatters(ops: &[Op]) -> bool {
    ops.first()
        .is_some_and(|o| o.desc.kind == OpKind::ReduceScatter)
}

/// Whether the run is a broadcast: the root copies each step's bytes into its pack area, and
/// every other member copies them out (step 2), once the root has arrived.
fn broadcasts(ops: &[Op]) -> bool {
    matches!(ops, [o] if o.desc.kind == OpKind::Broadcast)
}

/// The members' regions, as this member sees them, and where this member is in the sequence of
/// steps. (The MPI window that holds them is [`Window`]; tests use plain shared memory.)
pub(super) struct Regions {
    /// Each member's region, in member order: [`REGION`] bytes at a 64-byte-aligned address.
    bases: Vec<*mut u8>,
    me: usize,
    /// The generation of this member's last step.
    generation: Cell<u64>,
    /// Where each member's shared heap is mapped here (member order), when every member has
    /// one (see `arena`); `heap_span` is how many bytes each maps.
    heaps: Option<Vec<*mut u8>>,
    heap_span: usize,
}

/// A run in progress: one step per [`AREA`] bytes of it, one after another (see the module
/// docs).
pub(super) struct Step {
    generation: u64,
    /// The current step's bytes of the run: `lo..hi`.
    lo: usize,
    hi: usize,
    /// Member `s`'s slice is `bounds[s]..bounds[s + 1]` of the run's bytes (within `lo..hi`).
    bounds: Vec<usize>,
    /// Where each op's bytes end in the run.
    ends: Vec<usize>,
    /// Step 2 is done.
    reduced: bool,
    /// A broadcast's root (a member index; 0 for other runs).
    root: usize,
    /// What the run is (see [`Regions::start`]): compared with the other members' before any
    /// of their bytes is used.
    call: u64,
    /// An all-gather's block bytes (see [`gather_block`]); `lo..hi` then lie within one block.
    gathers: Option<usize>,
    /// An all-to-all's block bytes (see [`exchange_block`]).
    exchanges: Option<usize>,
    /// The run goes through the window only if its senders' tensors are in their heaps
    /// ([`pulls_only`]): one step, whatever its size, with nothing copied into the areas.
    pulls_only: bool,
    /// Its senders' tensors were not all in their heaps: the run is handed back.
    by_mpi: bool,
    /// This member's tensors are all in its shared heap: it copies nothing into the window,
    /// and the others read and write them where they are.
    direct: bool,
}

/// A member whose run through the window is not this member's (its call tag differs): only
/// possible without the agreement check (`RANKWISE_MPI_CHECK=0`), which would have found it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Differs {
    /// Its member index.
    pub(super) member: usize,
}

impl Regions {
    /// The regions at `bases` (member order), this member being `me`.
    ///
    /// # Safety
    /// Every base must point to [`REGION`] bytes, 64-byte aligned, shared with the members and
    /// valid as long as this value lives; their counters must start at zero on every member
    /// before any member's first step; and every member must run the same sequence of steps.
    pub(super) unsafe fn new(bases: Vec<*mut u8>, me: usize) -> Result<Regions> {
        if me >= bases.len()
            || bases
                .iter()
                .any(|b| b.is_null() || !(*b as usize).is_multiple_of(LINE))
        {
            return Err(Error::Internal(format!(
                "shared-memory regions for member {me} of {} are not usable",
                bases.len()
            )));
        }
        Ok(Regions {
            bases,
            me,
            generation: Cell::new(0),
            heaps: None,
            heap_span: 0,
        })
    }

    /// Lets members read and write each other's tensors that lie in their shared heaps:
    /// `heaps[j]` is where member `j`'s heap is mapped here, `span` bytes of it.
    ///
    /// # Safety
    /// Every `heaps[j]` points to `span` bytes mapped here, the same memory member `j` maps
    /// at its own `heaps[j]`, for as long as these regions live; every member's regions are
    /// given heaps alike (all or none).
    pub(super) unsafe fn with_heaps(mut self, heaps: Vec<*mut u8>, span: usize) -> Regions {
        if heaps.len() == self.bases.len() {
            self.heaps = Some(heaps);
            self.heap_span = span;
        }
        self
    }

    /// Whether every member has a shared heap (alike on every member).
    pub(super) fn has_heaps(&self) -> bool {
        self.heaps.is_some()
    }

    /// Publishes where this member's `bytes` bytes at `ptr`, the bytes the others read of a
    /// call that moves blocks, lie in its heap (as call 0's input and output, so that
    /// [`Regions::table_fits`] checks them), if they do: whether it did.
    fn publish_source(&self, ptr: *const u8, bytes: usize) -> bool {
        let Some(at) = self.in_heap(ptr, bytes) else {
            return false;
        };
        let table = self.table(self.me);
        // SAFETY: as in `publish_table`: entry 0 is within the table, and nobody reads it
        // before `arrived` says so.
        unsafe {
            table.write(at as u64);
            table.add(1).write(at as u64);
        }
        true
    }

    /// The offset of `bytes` bytes at `ptr` in this member's heap, if they lie within it.
    fn in_heap(&self, ptr: *const u8, bytes: usize) -> Option<usize> {
        let own = *self.heaps.as_ref()?.get(self.me)? as usize;
        let at = (ptr as usize).checked_sub(own)?;
        (at.checked_add(bytes)? <= self.heap_span).then_some(at)
    }

    /// Publishes `ops`' offsets in this member's heap in its table, if every call's input and
    /// output lie there (and the run is an all-reduce with room in the table): whether it did.
    fn publish_table(&self, ops: &[Op]) -> bool {
        if ops.len() > TABLE_CALLS || !ops.iter().all(|o| o.desc.kind == OpKind::AllReduce) {
            return false;
        }
        let table = self.table(self.me);
        for (k, o) in ops.iter().enumerate() {
            let bytes = o.desc.numel().saturating_mul(o.desc.dtype.size());
            let (Some(i), Some(out)) = (
                self.in_heap(o.input.ptr, bytes),
                self.in_heap(o.output.ptr, bytes),
            ) else {
                return false;
            };
            // SAFETY: the table has TABLE_CALLS entries of two u64s (k < TABLE_CALLS), 8-byte
            // aligned; only this member writes it, and nobody reads it before `arrived` says
            // so (and everyone finished reading it before this member's arrival: module docs).
            unsafe {
                table.add(2 * k).write(i as u64);
                table.add(2 * k + 1).write(out as u64);
            }
        }
        true
    }

    fn table(&self, member: usize) -> *mut u64 {
        // SAFETY: TABLE + 16 * TABLE_CALLS <= REGION; regions are 64-byte aligned.
        unsafe { self.bases[member].add(TABLE) as *mut u64 }
    }

    /// Whether member `j`'s table places every call of a run cut at `ends` within its heap.
    fn table_fits(&self, j: usize, ends: &[usize]) -> bool {
        ends.len() <= TABLE_CALLS
            && ends.iter().enumerate().all(|(k, &end)| {
                let bytes = end - if k == 0 { 0 } else { ends[k - 1] };
                (0..2).all(|w| {
                    // SAFETY: entry k < TABLE_CALLS is within the table, 8-byte aligned.
                    let at = unsafe { self.table(j).add(2 * k + w).read() } as usize;
                    at.checked_add(bytes).is_some_and(|e| e <= self.heap_span)
                })
            })
    }

    /// Where call `k`'s input (`output`: its output) lies in member `j`'s memory, as mapped
    /// here, for a member that went direct.
    ///
    /// # Safety
    /// Member `j` published its table for this step (it arrived, direct).
    unsafe fn in_member(&self, j: usize, k: usize, output: bool) -> *mut u8 {
        // SAFETY: the caller's contract: entry k is within the table and was written.
        let at = unsafe { self.table(j).add(2 * k + usize::from(output)).read() } as usize;
        match &self.heaps {
            Some(h) => h[j].wrapping_add(at),
            None => std::ptr::null_mut(),
        }
    }

    /// How many members the regions are for.
    pub(super) fn members(&self) -> usize {
        self.bases.len()
    }

    fn counter(&self, member: usize, at: usize) -> &AtomicU64 {
        // SAFETY: every base points to REGION bytes, 64-byte aligned (`new`'s contract), so the
        // counter is in bounds and aligned; it is only ever accessed atomically, by every
        // member, as the protocol says.
        unsafe { &*(self.bases[member].add(at) as *const AtomicU64) }
    }

    fn pack(&self, member: usize) -> *mut u8 {
        // SAFETY: PACK < REGION.
        unsafe { self.bases[member].add(PACK) }
    }

    fn result(&self, member: usize) -> *mut u8 {
        // SAFETY: PACK + AREA < REGION.
        unsafe { self.bases[member].add(PACK + AREA) }
    }

    /// Where member `s` puts its slice's results in step 2 (at the slice's place in the step):
    /// its result area, or, of two members, the other's pack area, whose bytes at that place
    /// (the other's data of the slice) it has just folded. That keeps each member's working
    /// set to its tensors and two areas, where a third pushed a 1 MiB bucket's steps out of
    /// the core's cache: a world-2 bucket of 1,000 × 1 KiB took about a quarter less time.
    fn results_of(&self, s: usize) -> *mut u8 {
        if self.bases.len() == 2 {
            self.pack(1 - s)
        } else {
            self.result(s)
        }
    }

    /// Starts the run `ops` (a broadcast from member `root`; `root` is ignored for other runs):
    /// its first step (step 1 of the module docs). `call` tags the run (its first call's kind,
    /// dtype, operator, root and shape, the same on every member that runs the same call; the
    /// run's number of calls and bytes are added here): each step compares the tag with the
    /// other members' before it uses their bytes, so members that disagree unchecked get an
    /// error, never each other's bytes cut to the wrong size.
    ///
    /// # Safety
    /// [`takes`] holds for `ops`; their buffers are valid for their descriptions until the run
    /// is done ([`Regions::poll`] returned true); no other run of these regions is in progress.
    pub(super) unsafe fn start(&self, ops: &[Op], root: usize, call: u64) -> Result<Step> {
        if root >= self.bases.len() {
            return Err(Error::Internal(format!(
                "a shared-memory run from member {root} of {}",
                self.bases.len()
            )));
        }
        let n = self.bases.len();
        let gathers = gather_block(ops, n);
        // An all-gather goes through one block's bytes; other runs through all their tensors'
        // bytes, one after another.
        let ends: Vec<usize> = match gathers {
            Some(block) => vec![block],
            None => ops
                .iter()
                .scan(0usize, |end, o| {
                    *end = end.saturating_add(o.desc.numel().saturating_mul(o.desc.dtype.size()));
                    Some(*end)
                })
                .collect(),
        };
        let mut step = Step {
            generation: 0,
            lo: 0,
            hi: 0,
            bounds: Vec::new(),
            // Every call's size is in the tag, not only the total: members whose runs cut
            // differently never meet, and direct members' tables (one entry per call) match.
            call: ends.iter().fold(
                call.rotate_left(17)
                    .wrapping_add(ops.len() as u64)
                    .wrapping_mul(0x9e37_79b9_7f4a_7c15),
                |h, &e| (h ^ e as u64).wrapping_mul(0x0100_0000_01b3).rotate_left(5),
            ),
            ends,
            reduced: false,
            root,
            gathers,
            exchanges: exchange_block(ops, n),
            pulls_only: self.heaps.is_some() && pulls_only(ops, n),
            by_mpi: false,
            direct: false,
        };
        // SAFETY: the caller's contract.
        unsafe { self.next_step(&mut step, ops) };
        Ok(step)
    }

    /// Starts the step of `step`'s run that follows its current one (the first, for a new run).
    ///
    /// # Safety
    /// As for [`Regions::start`].
    unsafe fn next_step(&self, step: &mut Step, ops: &[Op]) {
        let total = step.ends.last().copied().unwrap_or(0);
        let n = self.bases.len();
        let lo = step.hi;
        let hi = if step.pulls_only {
            total
        } else {
            total.min(lo.saturating_add(AREA))
        };
        let generation = self.generation.get() + 1;
        self.generation.set(generation);
        step.bounds.clear();
        if scatters(ops) {
            // Member `s`'s block (the whole input is one step: `takes`).
            step.bounds.extend((0..=n).map(|s| total / n * s));
        } else {
            step.bounds.extend((0..=n).map(|s| {
                if s == n {
                    hi
                } else {
                    lo + (hi - lo) * s / n / LINE * LINE
                }
            }));
        }
        (step.generation, step.lo, step.hi, step.reduced) = (generation, lo, hi, false);
        if step.moves(ops) {
            // The bytes the others read of this member: an all-gather's block, an all-to-all's
            // input, a broadcast root's tensor (its description: `total` bytes).
            let source = if broadcasts(ops) {
                (self.me == step.root).then_some(ops[0].output.ptr)
            } else {
                Some(ops[0].input.ptr)
            };
            step.direct = source.is_some_and(|p| self.publish_source(p, total));
            if step.direct {
                crate::heap::note_direct_step();
            } else if let (Some(p), false) = (source, step.pulls_only) {
                // SAFETY: the caller's contract: `lo..hi` lies within the source, and the pack
                // area has room for it (`hi - lo <= AREA` unless the run pulls only); nobody
                // reads the area before `arrived` says so, and everyone finished reading it in
                // the last step.
                unsafe { copy_bytes(self.pack(self.me), p.add(lo), hi - lo) };
            }
        } else if !scatters(ops) && self.publish_table(ops) {
            // Direct: the others read this member's tensors where they are.
            step.direct = true;
            crate::heap::note_direct_step();
        } else {
            step.direct = false;
            // SAFETY: the caller's contract; the pack area has room for the step (`hi - lo <=
            // AREA`), nobody reads it before `arrived` says so, and everyone finished reading
            // it in the last step (module docs).
            unsafe { self.copy_slices(ops, step, |_| self.pack(self.me), true) };
        }
        self.counter(self.me, DIRECT)
            .store(u64::from(step.direct), Ordering::Relaxed);
        self.counter(self.me, CALL)
            .store(step.call, Ordering::Relaxed);
        self.counter(self.me, ARRIVED)
            .store(generation, Ordering::Release);
    }

    /// The first of `members` that arrived at this step with another call than this member's.
    /// (Read after their `arrived` says `g`, acquire: their tag is this step's, and stays until
    /// this member says `reduced`.)
    fn differing(
        &self,
        step: &Step,
        mut members: impl Iterator<Item = usize>,
    ) -> Result<(), Differs> {
        match members.find(|&j| self.counter(j, CALL).load(Ordering::Relaxed) != step.call) {
            Some(member) => Err(Differs { member }),
            None => Ok(()),
        }
    }

    /// Copies, for every member `s` but this one, slice `s` of the step between the tensors of
    /// `ops` and `area(s)` (each byte at its place in the step): from the inputs into the area
    /// (`into_area`), or from the area into the outputs.
    ///
    /// # Safety
    /// The ops' buffers are valid for their descriptions; each `area(s)` holds the step's
    /// bytes and is not written by anyone else meanwhile.
    unsafe fn copy_slices(
        &self,
        ops: &[Op],
        step: &Step,
        area: impl Fn(usize) -> *mut u8,
        into_area: bool,
    ) {
        let n = self.bases.len();
        for s in (0..n).filter(|&s| s != self.me) {
            let at_area = area(s);
            let (lo, hi) = (step.bounds[s], step.bounds[s + 1]);
            for_segments(ops, &step.ends, lo, hi, |_, o, within, at, len| {
                // SAFETY: the segment lies within the op's buffers (its description) and
                // within the area (the caller's contract).
                unsafe {
                    let (tensor, shared) = (within, at_area.add(at - step.lo));
                    if into_area {
                        copy_bytes(shared, o.input.ptr.add(tensor), len);
                    } else {
                        copy_bytes(o.output.ptr.add(tensor), shared, len);
                    }
                }
            });
        }
    }

    /// Advances `step` as far as the other members allow (steps 2 and 3, then the run's next
    /// step), until the run is done and every tensor of `ops` holds its result, or the run
    /// is handed back (see [`Polled`]). A member that arrived with another call is an
    /// error, found before any of its bytes is used.
    ///
    /// # Safety
    /// As for [`Regions::start`], with the `ops` the step was started with.
    pub(super) unsafe fn poll(&self, step: &mut Step, ops: &[Op]) -> Result<Polled, Differs> {
        let (n, me, g, lo) = (self.bases.len(), self.me, step.generation, step.lo);
        let all = |at| (0..n).all(|j| self.counter(j, at).load(Ordering::Acquire) >= g);
        if !step.reduced && step.moves(ops) {
            // The members whose bytes this member reads: a broadcast's root (none for the root
            // itself), or every other member.
            let bcast = broadcasts(ops);
            let read = |j: usize| j != me && (!bcast || j == step.root);
            if !(0..n)
                .filter(|&j| read(j))
                .all(|j| self.counter(j, ARRIVED).load(Ordering::Acquire) >= g)
            {
                return Ok(Polled::Pending);
            }
            self.differing(step, (0..n).filter(|&j| read(j)))?;
            // Which members' bytes lie in their heaps: their `direct` words are this step's
            // (written before their `arrived`, read after it, acquire above).
            let direct: SmallVec<[bool; 8]> = (0..n)
                .map(|j| {
                    if j == me {
                        step.direct
                    } else {
                        read(j) && self.counter(j, DIRECT).load(Ordering::Relaxed) != 0
                    }
                })
                .collect();
            if let Some(j) =
                (0..n).find(|&j| read(j) && direct[j] && !self.table_fits(j, &step.ends))
            {
                return Err(Differs { member: j });
            }
            // Every member decides alike: from the root's word, or from every member's (each
            // waited for all of them).
            let senders_direct = if bcast {
                direct[step.root]
            } else {
                direct.iter().all(|&d| d)
            };
            if step.pulls_only && !senders_direct {
                step.by_mpi = true;
            } else {
                // SAFETY: the caller's contract; every member this member reads arrived with
                // this run (tags compared above): its bytes are in its pack area, or, if it went
                // direct, where its table says in its heap (which fits the run's bytes); it
                // changes neither before this member says `reduced`.
                unsafe { self.pull(step, ops, &direct) };
            }
            self.counter(me, REDUCED).store(g, Ordering::Release);
            step.reduced = true;
        }
        if !step.reduced {
            if !all(ARRIVED) {
                return Ok(Polled::Pending);
            }
            self.differing(step, (0..n).filter(|&j| j != me))?;
            // Which members went direct: their `direct` words are this step's (written before
            // their `arrived`, read after it, acquire above).
            let direct: SmallVec<[bool; 8]> = (0..n)
                .map(|j| {
                    j == me && step.direct
                        || j != me && self.counter(j, DIRECT).load(Ordering::Relaxed) != 0
                })
                .collect();
            // Results go straight into the direct members' outputs, and into the window for
            // the others to collect (if there are any).
            let direct_others = (0..n).any(|j| j != me && direct[j]);
            // A direct member's table must place each call within its heap: one that does not
            // is not running this run (only possible unchecked, through a bug).
            if let Some(j) =
                (0..n).find(|&j| j != me && direct[j] && !self.table_fits(j, &step.ends))
            {
                return Err(Differs { member: j });
            }
            let collectors = (0..n).any(|j| j != me && !direct[j]);
            let result = self.results_of(me);
            let mut parts: Vec<*const u8> = vec![std::ptr::null(); n];
            // Folded where it is when that costs one pass (the first member's own part, or the
            // second of two); otherwise into the result area and copied back, which keeps the
            // fold from setting each block of its own part aside. Of two members, the results
            // go where the other's part was read (`results_of`): into the output first, since
            // the fold must not write a part it reads. With direct members, always into the
            // output first, from where they are copied to each.
            let in_place_ok = me == 0 || n == 2 || direct_others;
            let scatter = scatters(ops);
            let block = step.bounds[me];
            for_segments(
                ops,
                &step.ends,
                step.bounds[me],
                step.bounds[me + 1],
                |k, o, within, at, len| {
                    let elems = len / o.desc.dtype.size();
                    let in_place = in_place_ok && o.input.ptr == o.output.ptr;
                    // SAFETY: the segment lies within the op's buffers and within every area; the
                    // others' pack areas hold their data of this slice (they arrived) and nobody
                    // writes them before this member says `reduced`; a direct member's table
                    // entry `k` says where its call `k` lies in its heap, mapped here (it
                    // arrived, direct), and it waits for this member's `reduced` before it
                    // touches that call's tensors again; the fold's parts are aligned for the
                    // dtype (slices start at multiples of 64 bytes, tensors at multiples of
                    // their element size, regions 64-byte aligned).
                    unsafe {
                        for (j, p) in parts.iter_mut().enumerate() {
                            *p = if j == me {
                                o.input.ptr.add(within)
                            } else if direct[j] {
                                self.in_member(j, k, false).add(within)
                            } else {
                                self.pack(j).add(at - lo)
                            };
                        }
                        if scatter {
                            // This member's block of the result is its whole output.
                            fold_parts(o, &parts, elems, o.output.ptr.add(within - block));
                            return;
                        }
                        let dst = o.output.ptr.add(within);
                        let res = result.add(at - lo);
                        if direct_others {
                            if in_place {
                                fold_into_own(o, &parts, me, elems, dst);
                            } else {
                                fold_parts(o, &parts, elems, dst);
                            }
                            for j in (0..n).filter(|&j| j != me && direct[j]) {
                                copy_bytes(self.in_member(j, k, true).add(within), dst, len);
                            }
                            if collectors {
                                copy_bytes(res, dst, len);
                            }
                        } else if in_place {
                            fold_into_own(o, &parts, me, elems, dst);
                            copy_bytes(res, dst, len);
                        } else if n == 2 {
                            fold_parts(o, &parts, elems, dst);
                            copy_bytes(res, dst, len);
                        } else {
                            fold_parts(o, &parts, elems, res);
                            copy_bytes(dst, res, len);
                        }
                    }
                },
            );
            self.counter(me, REDUCED).store(g, Ordering::Release);
            step.reduced = true;
        }
        if !all(REDUCED) {
            return Ok(Polled::Pending);
        }
        if step.by_mpi {
            // Every member has read every `direct` word of the step (it said `reduced`).
            return Ok(Polled::ByMpi);
        }
        if !step.direct && !scatters(ops) && !step.moves(ops) {
            // (A direct member's outputs already hold every slice: each member wrote its own.)
            // SAFETY: the caller's contract; member `s` wrote its slice's results where
            // `results_of(s)` says before saying `reduced`; that place is written again only
            // after this member's next arrival (module docs).
            unsafe { self.copy_slices(ops, step, |s| self.results_of(s), false) };
        }
        if step.hi < step.ends.last().copied().unwrap_or(0) {
            // SAFETY: the caller's contract; this step is done on this member.
            unsafe { self.next_step(step, ops) };
            return Ok(Polled::Pending);
        }
        Ok(Polled::Done)
    }

    /// Copies into this member's output what it receives of a call that moves blocks (step 2
    /// of a broadcast, all-gather or all-to-all): each block from its sender's tensor where
    /// `direct` says it lies in the sender's heap, or else from the sender's pack area; an
    /// all-gather's and an all-to-all's own block from this member's input.
    ///
    /// # Safety
    /// As for [`Regions::poll`]; every member this member reads arrived at this step with this
    /// run, and those with `direct` published tables that fit the run; of a run that pulls
    /// only, every sender is direct.
    unsafe fn pull(&self, step: &Step, ops: &[Op], direct: &[bool]) {
        let (me, lo, len, o) = (self.me, step.lo, step.hi - step.lo, &ops[0]);
        let n = self.bases.len();
        // Where member `j`'s bytes of the run lie, from byte `at` of its source (the pack area
        // holds the step's bytes `lo..hi` of it).
        // SAFETY (of the closure's uses): `at` lies within the source's bytes of this step.
        let from = |j: usize, at: usize| -> *const u8 {
            if j == me {
                // SAFETY: within this member's input (its description).
                unsafe { o.input.ptr.add(at) }
            } else if direct[j] {
                // SAFETY: member `j`'s table fits the run (checked by the caller).
                unsafe { self.in_member(j, 0, false).add(at) }
            } else {
                self.pack(j).wrapping_add(at - lo)
            }
        };
        // SAFETY: the caller's contract; each destination lies within this member's output
        // (its description: the whole tensor, or `n` blocks), which nobody else writes; each
        // source holds `len` bytes from there. `copy`: a tensor cannot be both an input and an
        // output of a gather, but nothing here depends on it.
        unsafe {
            if broadcasts(ops) {
                if me != step.root {
                    copy_bytes(o.output.ptr.add(lo), from(step.root, lo), len);
                }
            } else if let Some(block) = step.gathers {
                for j in 0..n {
                    std::ptr::copy(from(j, lo), o.output.ptr.add(j * block + lo), len);
                }
            } else if let Some(block) = step.exchanges {
                // One step: `lo..hi` is the whole input; member `j`'s block for this member is
                // its `me`-th.
                for j in 0..n {
                    std::ptr::copy(from(j, me * block), o.output.ptr.add(j * block), block);
                }
            }
        }
    }
}

impl Step {
    /// Whether the run moves blocks without folding them: a broadcast, an all-gather or an
    /// all-to-all (see [`Regions::pull`]).
    fn moves(&self, ops: &[Op]) -> bool {
        self.gathers.is_some() || self.exchanges.is_some() || broadcasts(ops)
    }
}

/// Calls `f(k, op k, byte offset within the op, byte offset within the run, bytes)` for every
/// piece of the run's bytes `lo..hi` (the run being `ops`' tensors one after another, op `k`
/// ending at `ends[k]`).
fn for_segments(
    ops: &[Op],
    ends: &[usize],
    lo: usize,
    hi: usize,
    mut f: impl FnMut(usize, &Op, usize, usize, usize),
) {
    let first = ends.partition_point(|&e| e <= lo);
    for k in first..ops.len().min(ends.len()) {
        let start = if k == 0 { 0 } else { ends[k - 1] };
        if start >= hi {
            return;
        }
        let (a, b) = (lo.max(start), hi.min(ends[k]));
        if a < b {
            f(k, &ops[k], a - start, a, b - a);
        }
    }
}

/// A group's window: its regions, in memory every member maps.
///
/// The window is never freed: `MPI_Win_free` is collective, and members drop their groups at
/// different times; `MPI_Finalize` releases it.
pub(super) struct Window {
    regions: Regions,
    /// The lanes of small collectives' messages, for a group small enough to exchange them
    /// (see `eager`).
    lanes: Option<Lanes>,
}

// SAFETY: the window's memory stays mapped until MPI_Finalize, after every rank's backend is
// gone; a `Window` is used only by the rank that owns its backend, one call at a time.
unsafe impl Send for Window {}

impl Window {
    /// The window of the group whose communicator is `comm` (this member being `me` of `n`),
    /// if `mode` allows and its members share one host. Collective over the group: every
    /// member calls it at the same point (right after the communicator is created).
    ///
    /// `heaps`, if given, is where each member's shared heap is mapped here (member order): a
    /// run whose tensors lie in them goes direct (see `arena`).
    pub(super) fn create(
        comm: &Comm,
        n: usize,
        me: usize,
        mode: Mode,
        heaps: Option<Vec<*mut u8>>,
    ) -> Result<Option<Window>> {
        if mode == Mode::Off || n < 2 {
            return Ok(None);
        }
        if !raw::on_one_host(comm, n)? {
            if mode == Mode::Require {
                return Err(Error::Backend {
                    backend: "mpi",
                    detail: "RANKWISE_MPI_SHM=require, but the members of a group are on \
                             several hosts"
                        .into(),
                });
            }
            return Ok(None);
        }
        // Open MPI puts members' parts at 8-byte boundaries: each part has a line to spare, and
        // its region starts at the first 64-byte boundary within it.
        let bases: Vec<*mut u8> = raw::allocate_shared(comm, REGION + LINE, n)
            .map_err(|e| Error::Backend {
                backend: "mpi",
                detail: format!(
                    "could not create the shared-memory window of a group of {n} ranks on one \
                     host ({e}); RANKWISE_MPI_SHM=0 runs without it, through MPI's messages"
                ),
            })?
            .into_iter()
            .map(|b| b.wrapping_add(b.align_offset(LINE)))
            .collect();
        let lanes = (n <= lanes::MAX_MEMBERS)
            .then(|| {
                let at = bases.iter().map(|b| b.wrapping_add(LANES)).collect();
                // SAFETY: each member's lanes lie at LANES within its region, BYTES long (the
                // region's end), 64-byte aligned (LANES is a multiple of 64); they are zeroed
                // below before the barrier, and used only through `Lanes`.
                unsafe { Lanes::new(at, me) }
            })
            .transpose()?;
        // SAFETY: MPI_Win_allocate_shared gave every member REGION + LINE bytes, shared and
        // mapped until MPI_Finalize (the window is never freed); the region starts less than
        // LINE bytes into it; alignment is checked by `new`.
        let mut regions = unsafe { Regions::new(bases, me)? };
        if let Some(heaps) = heaps {
            // SAFETY: `arena` mapped every member's heap here, SPAN bytes, for the process's
            // life; every member of the group has all of them mapped (all or none per host,
            // and the group is on one host), so all members' regions get heaps alike.
            regions = unsafe { regions.with_heaps(heaps, super::arena::SPAN) };
        }
        regions.counter(me, ARRIVED).store(0, Ordering::Relaxed);
        regions.counter(me, CALL).store(0, Ordering::Relaxed);
        regions.counter(me, REDUCED).store(0, Ordering::Relaxed);
        if let Some(l) = &lanes {
            l.clear_own();
        }
        // Nobody looks at a counter before every member has zeroed its own.
        raw::barrier(comm)?;
        Ok(Some(Window { regions, lanes }))
    }

    /// The regions, for steps.
    pub(super) fn regions(&self) -> &Regions {
        &self.regions
    }

    /// The lanes, for small collectives' messages (none for a group too large to exchange
    /// them).
    pub(super) fn lanes(&self) -> Option<&Lanes> {
        self.lanes.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Buf;
    use crate::model::{CallSite, GroupId, OpDesc, Shape};
    use crate::{DType, ReduceOp};

    /// `RANKWISE_MPI_SHM` and `RANKWISE_MPI_CHECK` take their documented values, and a value
    /// that is none of them is an error, not the default.
    #[test]
    fn the_window_and_check_settings_take_their_values_and_refuse_others() {
        let shm = |v| vars::parse("RANKWISE_MPI_SHM", v, &MODES);
        for (v, want) in [
            ("0", Mode::Off),
            ("off", Mode::Off),
            ("false", Mode::Off),
            ("1", Mode::On),
            ("on", Mode::On),
            ("require", Mode::Require),
            (" REQUIRE ", Mode::Require),
        ] {
            assert!(matches!(shm(v), Ok(Some(m)) if m == want), "{v}");
        }
        let check = |v| vars::parse("RANKWISE_MPI_CHECK", v, &super::super::CHECK_SETTINGS);
        for (v, want) in [
            ("0", (false, false)),
            ("off", (false, false)),
            ("all", (true, false)),
            ("1", (true, true)),
            ("true", (true, true)),
        ] {
            assert!(matches!(check(v), Ok(Some(m)) if m == want), "{v}");
        }
        for (e, name) in [
            (shm("requre").map(|_| ()), "RANKWISE_MPI_SHM"),
            (check("al").map(|_| ()), "RANKWISE_MPI_CHECK"),
        ] {
            let e = e.expect_err("a typo");
            assert!(
                matches!(e, Error::Setting { name: n, .. } if n == name),
                "{e}"
            );
        }
    }

    /// Runs `member(regions, me)` on one thread per member of `n`, over fresh shared regions
    /// in plain memory (threads stand in for processes).
    fn members(n: usize, member: impl Fn(&Regions, usize) + Sync) {
        // One spare line so the first region can start on a 64-byte boundary.
        let mut shared = vec![0u64; (n * REGION + LINE) / 8];
        let base = shared.as_mut_ptr() as usize;
        let first = base.div_ceil(LINE) * LINE;
        std::thread::scope(|scope| {
            for me in 0..n {
                let member = &member;
                scope.spawn(move || {
                    let ptrs = (0..n).map(|j| (first + j * REGION) as *mut u8).collect();
                    // SAFETY: the regions are REGION bytes each, aligned, zeroed and shared by
                    // these threads for the scope's whole life (`shared` outlives it); members
                    // that run different steps (one test's point) still only touch the regions.
                    let regions = unsafe { Regions::new(ptrs, me).unwrap() };
                    member(&regions, me);
                });
            }
        });
        drop(shared);
    }

    /// Polls `ops`' run from its start until it is done or handed to MPI (or finds a member
    /// that differs): how it ended, and whether this member went direct (in its last step).
    ///
    /// # Safety
    /// As for [`Regions::start`].
    unsafe fn run_to_end(
        regions: &Regions,
        ops: &[Op],
        root: usize,
        call: u64,
    ) -> Result<(Polled, bool), Differs> {
        // SAFETY: the caller's contract.
        let mut step = unsafe { regions.start(ops, root, call) }.expect("a run starts");
        let start = std::time::Instant::now();
        loop {
            // SAFETY: as above.
            match unsafe { regions.poll(&mut step, ops) }? {
                Polled::Pending => {}
                end => return Ok((end, step.direct)),
            }
            // A member that panicked (a failed assertion) never arrives: fail, do not hang.
            assert!(
                start.elapsed() < std::time::Duration::from_secs(60),
                "a run waited a minute for the other members: see a member's panic above"
            );
            std::thread::yield_now();
        }
    }

    /// [`run_to_end`] of a run that must end done: whether this member went direct.
    ///
    /// # Safety
    /// As for [`Regions::start`].
    unsafe fn run(regions: &Regions, ops: &[Op], root: usize, call: u64) -> Result<bool, Differs> {
        // SAFETY: the caller's contract.
        let (end, direct) = unsafe { run_to_end(regions, ops, root, call) }?;
        assert_eq!(end, Polled::Done);
        Ok(direct)
    }

    fn all_reduce(dtype: DType, op: ReduceOp, t: *mut u8, len: usize) -> Op {
        let b = Buf::host(t, len);
        Op {
            desc: OpDesc {
                kind: OpKind::AllReduce,
                group: GroupId::WORLD,
                dtype,
                shape: Shape::from_slice(&[len]),
                dim: 0,
                peer: None,
                op: Some(op),
                site: CallSite::caller(),
            },
            input: b,
            output: b,
        }
    }

    fn sum_of(t: &mut [f32]) -> Op {
        all_reduce(
            DType::F32,
            ReduceOp::Sum,
            t.as_mut_ptr() as *mut u8,
            t.len(),
        )
    }

    fn broadcast(t: &mut [f32]) -> Op {
        let mut o = sum_of(t);
        o.desc.kind = OpKind::Broadcast;
        o.desc.op = None;
        o
    }

    /// An all-reduce of 300 elements right after another run: every member gets the sum, so the
    /// areas were left usable.
    fn then_an_all_reduce(regions: &Regions, n: usize, me: usize, round: usize) {
        let mut u = vec![(me + round) as f32; 300];
        // SAFETY: the tensor lives until the run is done.
        unsafe { run(regions, &[sum_of(&mut u)], 0, 7) }.unwrap();
        let want = (0..n).map(|m| (m + round) as f32).sum::<f32>();
        assert!(
            u.iter().all(|&x| x == want),
            "n {n} member {me} round {round}"
        );
    }

    /// Members fold runs of different sizes, step after step with no pause between them, and
    /// every member's tensors end as the sums in member order (exact here: small integers in
    /// f32), including runs too small to give every member a slice and a run of several steps.
    #[test]
    fn steps_of_changing_runs_give_every_member_the_sums() {
        let runs: Vec<Vec<usize>> = vec![
            vec![256; 40],
            vec![3, 1, 17],
            vec![1],
            vec![1000, 5, 64, 2048],
            // Larger than one area: three steps, the first ending inside a tensor.
            vec![AREA / 4 - 100, 300, AREA / 4 + 17, 9],
            vec![7; 3],
        ];
        for n in [2usize, 3, 4] {
            members(n, |regions, me| {
                for (r, lens) in runs.iter().enumerate() {
                    let mut ts: Vec<Vec<f32>> = lens
                        .iter()
                        .enumerate()
                        .map(|(k, &len)| {
                            (0..len)
                                .map(|e| (me * 1000 + k * 7 + e % 13 + r) as f32)
                                .collect()
                        })
                        .collect();
                    let ops: Vec<Op> = ts.iter_mut().map(|t| sum_of(t)).collect();
                    assert!(takes(&ops, n, false));
                    // SAFETY: the ops' tensors live until the run is done.
                    unsafe { run(regions, &ops, 0, 7) }.unwrap();
                    for (k, t) in ts.iter().enumerate() {
                        for (e, &v) in t.iter().enumerate() {
                            let want: usize = (0..n).map(|m| m * 1000 + k * 7 + e % 13 + r).sum();
                            assert_eq!(v, want as f32, "n {n} member {me} run {r} tensor {k}[{e}]");
                        }
                    }
                }
            });
        }
    }

    /// [`members`], each member also given a shared heap of `heap` bytes (plain memory every
    /// thread sees, as `arena` maps files): `member(regions, me, heap)` carves its tensors from
    /// its own heap (or not: then it copies through the window).
    fn members_with_heaps(n: usize, heap: usize, member: impl Fn(&Regions, usize, *mut u8) + Sync) {
        let mut heaps = vec![0u64; (n * heap + LINE) / 8];
        let first = (heaps.as_mut_ptr() as usize).div_ceil(LINE) * LINE;
        members(n, |regions, me| {
            let bases: Vec<*mut u8> = (0..n).map(|j| (first + j * heap) as *mut u8).collect();
            // SAFETY: `with_heaps`'s contract: each base points to `heap` bytes of `heaps`,
            // which outlives every member (the scope ends first), seen alike by all threads;
            // every member gets the same bases.
            let regions = unsafe {
                Regions::new(regions.bases.clone(), me)
                    .unwrap()
                    .with_heaps(bases, heap)
            };
            member(&regions, me, (first + me * heap) as *mut u8);
        });
        drop(heaps);
    }

    /// Tensors of `lens` elements carved one after another (64-byte aligned) from `heap`, or
    /// owned `Vec`s when `heap` is null; each element `value(k, e)`.
    struct Tensors {
        owned: Vec<Vec<f32>>,
        at: Vec<(*mut f32, usize)>,
    }

    impl Tensors {
        fn new(heap: *mut u8, lens: &[usize], value: impl Fn(usize, usize) -> f32) -> Tensors {
            let mut t = Tensors {
                owned: Vec::new(),
                at: Vec::new(),
            };
            let mut next = 0usize;
            for (k, &len) in lens.iter().enumerate() {
                let p = if heap.is_null() {
                    t.owned.push(vec![0.0; len]);
                    t.owned
                        .last_mut()
                        .map_or(std::ptr::null_mut(), |v| v.as_mut_ptr())
                } else {
                    let p = heap.wrapping_add(next) as *mut f32;
                    next = (next + 4 * len).next_multiple_of(LINE);
                    p
                };
                t.at.push((p, len));
                for e in 0..len {
                    // SAFETY: `p` holds `len` elements: an owned `Vec`'s, or the test heap's,
                    // which is large enough and outlives `t` (tensors do not overlap).
                    unsafe { p.add(e).write(value(k, e)) };
                }
            }
            t
        }

        fn get(&self, k: usize) -> &[f32] {
            let (p, len) = self.at[k];
            // SAFETY: as in `new`; read only between runs.
            unsafe { std::slice::from_raw_parts(p, len) }
        }
    }

    /// Members whose tensors lie in their shared heaps read and write each other's where they
    /// are, mixed with members that copy through the window (every mix of two, three and four
    /// members, in place and not, runs of several steps): every output gets the sums in member
    /// order, inputs of out-of-place calls stay, and the areas stay usable for copying runs,
    /// broadcasts and all-gathers after them.
    #[test]
    fn direct_members_and_copying_members_meet_in_one_run() {
        let lens = [300usize, AREA / 4 + 33, 64, 5, 1000];
        let heap = 2 * 4 * (lens.iter().sum::<usize>() + 64 * lens.len()) + 4096;
        for n in [2usize, 3, 4] {
            for copying in 0..(1u32 << n) {
                members_with_heaps(n, heap, |regions, me, base| {
                    let direct = copying & (1 << me) == 0;
                    let value = |m: usize, k: usize, e: usize| (m * 100 + k * 3 + e % 7) as f32;
                    let at = if direct { base } else { std::ptr::null_mut() };
                    let inputs = Tensors::new(at, &lens, |k, e| value(me, k, e));
                    let outputs = Tensors::new(
                        if direct {
                            base.wrapping_add(heap / 2)
                        } else {
                            std::ptr::null_mut()
                        },
                        &lens,
                        |_, _| -1.0,
                    );
                    let ops: Vec<Op> = (0..lens.len())
                        .map(|k| {
                            let (i, len) = inputs.at[k];
                            let mut op = all_reduce(DType::F32, ReduceOp::Sum, i as *mut u8, len);
                            if k % 2 == 0 {
                                op.output = Buf::host(outputs.at[k].0 as *mut u8, len);
                            }
                            op
                        })
                        .collect();
                    // SAFETY: the ops' tensors live until the run is done.
                    let went = unsafe { run(regions, &ops, 0, 11) }.unwrap();
                    assert_eq!(went, direct, "n {n} copying {copying:b} member {me}");
                    for (k, &len) in lens.iter().enumerate() {
                        let got = if k % 2 == 0 {
                            outputs.get(k)
                        } else {
                            inputs.get(k)
                        };
                        assert_eq!(got.len(), len);
                        for (e, &got) in got.iter().enumerate() {
                            let want: f32 = (0..n).map(|m| value(m, k, e)).sum();
                            assert_eq!(
                                got, want,
                                "n {n} copying {copying:b} member {me} tensor {k}[{e}]"
                            );
                            if k % 2 == 0 {
                                assert_eq!(
                                    inputs.get(k)[e],
                                    value(me, k, e),
                                    "input {k}[{e}] changed"
                                );
                            }
                        }
                    }
                    then_an_all_reduce(regions, n, me, 1);
                    // A broadcast from a tensor outside the heap: through the pack area, or, of
                    // two members (where it pulls only), handed back.
                    let mut b = vec![me as f32; 100];
                    // SAFETY: as above.
                    let (end, _) =
                        unsafe { run_to_end(regions, &[broadcast(&mut b)], 1, 5) }.unwrap();
                    let (want_end, want) = if n == 2 {
                        (Polled::ByMpi, me as f32)
                    } else {
                        (Polled::Done, 1.0)
                    };
                    assert_eq!(end, want_end);
                    assert!(b.iter().all(|&x| x == want));
                });
            }
        }
    }

    /// All-reduces whose outputs are not their inputs, mixed with in-place ones in one run
    /// (a run longer than one area, so its steps' slices change): every output gets the sums,
    /// every input is left as it was. Of two members the results go through the other's pack
    /// area; of three, through the result areas.
    #[test]
    fn out_of_place_all_reduces_leave_their_inputs_and_fill_their_outputs() {
        let lens = [300usize, AREA / 4 + 33, 64, 5];
        for n in [2usize, 3] {
            members(n, |regions, me| {
                for round in 0..2 {
                    let value =
                        |k: usize, e: usize, m: usize| (m * 100 + k * 3 + e % 7 + round) as f32;
                    let mut inputs: Vec<Vec<f32>> = lens
                        .iter()
                        .enumerate()
                        .map(|(k, &len)| (0..len).map(|e| value(k, e, me)).collect())
                        .collect();
                    let mut outputs: Vec<Vec<f32>> =
                        lens.iter().map(|&len| vec![-1.0; len]).collect();
                    let ops: Vec<Op> = inputs
                        .iter_mut()
                        .zip(outputs.iter_mut())
                        .enumerate()
                        .map(|(k, (i, o))| {
                            let mut op = sum_of(i);
                            // Every other tensor in place, the rest out of place.
                            if k % 2 == 0 {
                                op.output = Buf::host(o.as_mut_ptr() as *mut u8, o.len());
                            }
                            op
                        })
                        .collect();
                    assert!(takes(&ops, n, false));
                    // SAFETY: the ops' tensors live until the run is done.
                    unsafe { run(regions, &ops, 0, 11) }.unwrap();
                    for (k, &len) in lens.iter().enumerate() {
                        let got = if k % 2 == 0 { &outputs[k] } else { &inputs[k] };
                        for e in 0..len {
                            let want: f32 = (0..n).map(|m| value(k, e, m)).sum();
                            assert_eq!(
                                got[e], want,
                                "n {n} member {me} round {round} tensor {k}[{e}]"
                            );
                            if k % 2 == 0 {
                                assert_eq!(inputs[k][e], value(k, e, me), "input {k}[{e}] changed");
                            }
                        }
                    }
                }
                then_an_all_reduce(regions, n, me, 3);
            });
        }
    }

    /// A reduce-scatter between all-reduces: each member's output is the sum of every member's
    /// block of the input for it, and the areas stay usable for the next step.
    #[test]
    fn a_reduce_scatter_folds_each_members_block() {
        for n in [2usize, 3, 4] {
            members(n, |regions, me| {
                let m = 1000;
                for round in 0..3usize {
                    let mut input: Vec<f32> = (0..n * m)
                        .map(|e| (me * 100 + e % 97 + round) as f32)
                        .collect();
                    let mut output = vec![0f32; m];
                    let mut op = sum_of(&mut input);
                    op.desc.kind = OpKind::ReduceScatter;
                    op.output = Buf::host(output.as_mut_ptr() as *mut u8, m);
                    let ops = [op];
                    assert!(takes(&ops, n, false));
                    // SAFETY: the tensors live until the run is done.
                    unsafe { run(regions, &ops, 0, 7) }.unwrap();
                    for (e, &v) in output.iter().enumerate() {
                        let want: usize = (0..n).map(|j| j * 100 + (me * m + e) % 97 + round).sum();
                        assert_eq!(v, want as f32, "n {n} member {me} round {round} [{e}]");
                    }
                    then_an_all_reduce(regions, n, me, round);
                }
            });
        }
    }

    /// Broadcasts from every root, of changing sizes (several steps among them), between
    /// all-reduces on the same regions: every member ends with the root's bytes, the root's
    /// tensor is untouched, and the areas stay usable.
    #[test]
    fn a_broadcast_gives_every_member_the_roots_bytes() {
        for n in [2usize, 3, 4] {
            members(n, |regions, me| {
                let sizes = [1usize, 1000, AREA / 4 + 3, 2 * AREA / 4 + 1, 17];
                for (round, &len) in sizes.iter().enumerate() {
                    let root = round % n;
                    let value = |m: usize, e: usize| (m * 10_000 + e % 4099 + round) as f32;
                    let mut t: Vec<f32> = (0..len).map(|e| value(me, e)).collect();
                    let ops = [broadcast(&mut t)];
                    assert!(takes(&ops, n, false));
                    // SAFETY: the tensor lives until the run is done.
                    unsafe { run(regions, &ops, root, 8) }.unwrap();
                    for (e, &v) in t.iter().enumerate() {
                        assert_eq!(v, value(root, e), "n {n} member {me} round {round} [{e}]");
                    }
                    then_an_all_reduce(regions, n, me, round);
                }
                // A root that is not a member is an error, not a run.
                // SAFETY: nothing runs.
                assert!(unsafe { regions.start(&[], n, 0) }.is_err());
            });
        }
    }

    /// All-gathers of changing sizes (one element, a few lines, more than one step), between
    /// all-reduces on the same regions: every member gets each member's block at its place,
    /// its own copied across (every element is checked against a value that names its sender
    /// and place), and the areas stay usable.
    #[test]
    fn an_all_gather_gives_every_member_every_block() {
        for n in [2usize, 3, 4] {
            members(n, |regions, me| {
                for (round, block) in [1usize, 1000, AREA / 4 + 3, 5].into_iter().enumerate() {
                    let value = |m: usize, at: usize| (m * 10_000_000 + at + round) as u32;
                    let mut input: Vec<u32> = (0..block).map(|at| value(me, at)).collect();
                    let mut output = vec![u32::MAX; n * block];
                    let mut op = sum_of(&mut []);
                    op.desc.kind = OpKind::AllGather;
                    op.desc.op = None;
                    op.desc.dtype = DType::U32;
                    op.desc.shape = Shape::from_slice(&[block]);
                    op.input = Buf::host(input.as_mut_ptr() as *mut u8, block);
                    op.output = Buf::host(output.as_mut_ptr() as *mut u8, n * block);
                    let ops = [op];
                    assert!(takes(&ops, n, false));
                    // SAFETY: the tensors live until the run is done.
                    unsafe { run(regions, &ops, 0, 9) }.unwrap();
                    for (at, &v) in output.iter().enumerate() {
                        let want = value(at / block, at % block);
                        assert_eq!(v, want, "n {n} member {me} block {block} [{at}]");
                    }
                    then_an_all_reduce(regions, n, me, round);
                }
            });
        }
    }

    /// Members whose runs differ (another call, or another size: tags differ) each get the
    /// other named before either uses the other's bytes; a broadcast's members find a root
    /// with another call, and the root, which reads nobody's bytes, waits (the members' error
    /// ends the job).
    #[test]
    fn members_with_different_calls_are_named_before_their_bytes_are_used() {
        // Another call of the same size; the same call, sizes that differ by one element.
        for (case, lens) in [[256usize, 256], [256, 257]].into_iter().enumerate() {
            members(2, |regions, me| {
                let mut t = vec![me as f32; lens[me]];
                let tag = if case == 0 { 10 + me as u64 } else { 10 };
                // SAFETY: the tensor lives until the poll returns.
                let got = unsafe { run(regions, &[sum_of(&mut t)], 0, tag) };
                assert_eq!(got, Err(Differs { member: 1 - me }), "case {case}");
                assert!(t.iter().all(|&x| x == me as f32), "its bytes were used");
            });
        }
        members(3, |regions, me| {
            let mut t = vec![me as f32 + 1.0; 1000];
            let ops = [broadcast(&mut t)];
            if me == 0 {
                // SAFETY: as above.
                let mut step = unsafe { regions.start(&ops, 0, 20) }.unwrap();
                for _ in 0..1000 {
                    // SAFETY: as above.
                    let polled = unsafe { regions.poll(&mut step, &ops) };
                    assert_eq!(polled, Ok(Polled::Pending));
                }
                return;
            }
            // SAFETY: as above.
            let got = unsafe { run(regions, &ops, 0, 20 + me as u64) };
            assert_eq!(got, Err(Differs { member: 0 }));
            assert!(
                t.iter().all(|&x| x == me as f32 + 1.0),
                "the root's bytes were used"
            );
        });
    }

    /// Broadcasts, all-gathers and all-to-alls between members some of whose tensors lie in
    /// their shared heaps (every mix of two, three and four members, every root, sizes of one
    /// step and of several): members read senders whose bytes are in their heaps where they
    /// are, and the others' through the window; a run that pulls only (a pair's broadcast or
    /// all-gather, every all-to-all) whose senders are not all in their heaps is handed back
    /// by every member alike, its outputs untouched. Every element is checked against a value
    /// that names its sender and place, and the areas stay usable after each run.
    #[test]
    fn moves_are_read_where_they_lie_or_handed_to_mpi() {
        let sizes = [1000usize, AREA / 4 + 3];
        let heap = 2 * 4 * 4 * (AREA / 4 + 3) + 4096;
        for n in [2usize, 3, 4] {
            for in_heap in 0..(1u32 << n) {
                members_with_heaps(n, heap, |regions, me, base| {
                    let direct = in_heap & (1 << me) != 0;
                    let value = |m: usize, e: usize| (m * 2_000_000 + e) as f32;
                    // Runs of several steps (and an all-to-all of 16 MiB) for some mixes only:
                    // debug code checks every element.
                    let sizes = if in_heap % 3 == 0 {
                        &sizes[..]
                    } else {
                        &sizes[..1]
                    };
                    for (round, &len) in sizes.iter().enumerate() {
                        let place = |at: usize| {
                            if direct {
                                base.wrapping_add(at)
                            } else {
                                std::ptr::null_mut()
                            }
                        };
                        for kind in [OpKind::Broadcast, OpKind::AllGather, OpKind::AllToAll] {
                            let root = (round + in_heap as usize) % n;
                            let (ins, outs) = match kind {
                                OpKind::Broadcast => (len, len),
                                OpKind::AllGather => (len, n * len),
                                _ => (n * len, n * len),
                            };
                            let input = Tensors::new(place(0), &[ins], |_, e| value(me, e));
                            let output = Tensors::new(std::ptr::null_mut(), &[outs], |_, _| -1.0);
                            let mut op = sum_of(&mut []);
                            op.desc.kind = kind;
                            op.desc.op = None;
                            op.desc.shape = Shape::from_slice(&[ins]);
                            op.input = Buf::host(input.at[0].0 as *mut u8, ins);
                            op.output = if kind == OpKind::Broadcast {
                                op.input
                            } else {
                                Buf::host(output.at[0].0 as *mut u8, outs)
                            };
                            let ops = [op];
                            assert!(takes(&ops, n, true));
                            let senders_in_heaps = if kind == OpKind::Broadcast {
                                in_heap & (1 << root) != 0
                            } else {
                                in_heap == (1 << n) - 1
                            };
                            let mpi = pulls_only(&ops, n) && !senders_in_heaps;
                            let what =
                                format!("n {n} in heap {in_heap:b} member {me} {kind:?} len {len}");
                            // SAFETY: the tensors live until the run is done.
                            let (end, went) =
                                unsafe { run_to_end(regions, &ops, root, 3) }.unwrap();
                            let sends = kind != OpKind::Broadcast || me == root;
                            assert_eq!(went, direct && sends, "{what}");
                            assert_eq!(
                                end,
                                if mpi { Polled::ByMpi } else { Polled::Done },
                                "{what}"
                            );
                            let got = if kind == OpKind::Broadcast {
                                input.get(0)
                            } else {
                                output.get(0)
                            };
                            for (at, &v) in got.iter().enumerate() {
                                let want = match (mpi, kind) {
                                    (true, OpKind::Broadcast) => value(me, at),
                                    (true, _) => -1.0,
                                    (false, OpKind::Broadcast) => value(root, at),
                                    (false, OpKind::AllGather) => value(at / len, at % len),
                                    (false, _) => value(at / len, me * len + at % len),
                                };
                                assert_eq!(v, want, "{what} [{at}]");
                            }
                            then_an_all_reduce(regions, n, me, round);
                        }
                    }
                });
            }
        }
    }

    /// All-reduces take this path, of any size (in steps of one area), alone or packed; so do a
    /// lone broadcast of any size, and reduce-scatters whose blocks are contiguous and fit one
    /// area.
    #[test]
    fn what_takes_the_window() {
        let mut t = vec![0f32; 4];
        let p = t.as_mut_ptr() as *mut u8;
        assert!(takes(
            &[all_reduce(DType::F32, ReduceOp::Max, p, 4)],
            4,
            false
        ));
        let mut big = all_reduce(DType::F32, ReduceOp::Sum, p, 4);
        big.desc.shape = Shape::from_slice(&[AREA / 4 + 1]);
        assert!(takes(&[big], 4, false));
        let bcast = || {
            let mut o = all_reduce(DType::F32, ReduceOp::Sum, p, 4);
            o.desc.kind = OpKind::Broadcast;
            o.desc.op = None;
            o
        };
        // A lone broadcast of any size, not a run of them (their pack goes through MPI).
        assert!(takes(&[bcast()], 4, false));
        let mut large = bcast();
        large.desc.shape = Shape::from_slice(&[3 * AREA]);
        assert!(takes(&[large], 4, false));
        assert!(!takes(&[bcast(), bcast()], 4, false));
        // An all-gather whose blocks are contiguous, alone, of any size; not the calls that
        // send each member a block of its own.
        let moves = |kind, shape: &[usize], dim| {
            let mut o = bcast();
            o.desc.kind = kind;
            o.desc.shape = Shape::from_slice(shape);
            o.desc.dim = dim;
            o
        };
        let all_gather = |shape: &[usize], dim| moves(OpKind::AllGather, shape, dim);
        assert!(takes(&[all_gather(&[8, 3], 0)], 4, false));
        assert!(takes(&[all_gather(&[1, 8], 1)], 4, false));
        assert!(takes(&[all_gather(&[4 * AREA], 0)], 4, false));
        assert!(
            !takes(&[all_gather(&[3, 8], 1)], 4, false),
            "blocks not contiguous"
        );
        assert!(!takes(
            &[all_gather(&[8], 0), all_gather(&[8], 0)],
            4,
            false
        ));
        assert!(
            !takes(&[all_gather(&[8], 0)], 1, false),
            "nobody to gather from"
        );
        for kind in [OpKind::Gather, OpKind::Scatter, OpKind::AllToAll] {
            assert!(!takes(&[moves(kind, &[8], 0)], 4, false), "{kind:?}");
        }
        // With heaps, a lone all-to-all whose blocks are contiguous too (read where it is);
        // still not gathers and scatters, nor an all-to-all of rows.
        assert!(takes(&[moves(OpKind::AllToAll, &[8], 0)], 4, true));
        assert!(takes(&[moves(OpKind::AllToAll, &[1, 8], 1)], 2, true));
        assert!(!takes(&[moves(OpKind::AllToAll, &[8, 2], 1)], 4, true));
        let two = [0, 1].map(|_| moves(OpKind::AllToAll, &[8], 0));
        assert!(!takes(&two, 4, true));
        for kind in [OpKind::Gather, OpKind::Scatter] {
            assert!(!takes(&[moves(kind, &[8], 0)], 4, true), "{kind:?}");
        }
        // Which of them are handed back when their senders' bytes are not in heaps: a pair's
        // broadcast and all-gather, and every all-to-all, of any size.
        for n in [2, 3, 4] {
            assert_eq!(pulls_only(&[bcast()], n), n == 2);
            let mut wide = bcast();
            wide.desc.shape = Shape::from_slice(&[3 * AREA]);
            assert_eq!(pulls_only(&[wide], n), n == 2);
            assert_eq!(pulls_only(&[all_gather(&[8], 0)], n), n == 2);
            assert!(pulls_only(&[moves(OpKind::AllToAll, &[8], 0)], n));
            assert!(pulls_only(&[moves(OpKind::AllToAll, &[4 * AREA], 0)], n));
            let sum = all_reduce(DType::F32, ReduceOp::Sum, p, 4);
            assert!(!pulls_only(&[sum], n));
        }
        let scatter = |shape: &[usize], dim| {
            let mut o = all_reduce(DType::F32, ReduceOp::Sum, p, 4);
            o.desc.kind = OpKind::ReduceScatter;
            o.desc.shape = Shape::from_slice(shape);
            o.desc.dim = dim;
            o
        };
        assert!(takes(&[scatter(&[8, 3], 0)], 4, false));
        assert!(takes(&[scatter(&[1, 8], 1)], 4, false));
        assert!(!takes(&[scatter(&[3, 8], 1)], 4, false));
        assert!(!takes(&[scatter(&[AREA / 4 + 4], 0)], 4, false));
        assert!(!takes(&[scatter(&[8], 0), scatter(&[8], 0)], 4, false));
        assert!(!takes(&[], 4, false));
    }
}
