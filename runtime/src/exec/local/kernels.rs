//! Data movement for one member's share of one collective step.
//!
//! Every member reads its peers' buffers in place and writes a region no other member writes:
//! its own output (scatter, reduce_scatter, all_to_all, a small broadcast, a large all_gather),
//! its own part of the root's output (gather), its own column block of every output (an
//! all_gather up to 4 MiB), its pieces of a large broadcast (see `run_share`), or the slice of
//! every output it owns (all_reduce, reduce). That disjointness is what makes the lock-free data
//! path sound.

use smallvec::SmallVec;

use crate::element::Arith;
use crate::element::with_dtype;
use crate::exec::Op;
use crate::exec::copy::copy_bytes;
pub(crate) use crate::exec::copy::copy_rows;
use crate::exec::copy::{copy_bytes_back, copy_rows_by};
use crate::model::{OpDesc, OpKind};
use crate::reduce::{Fold, Reducer};
use crate::rules::rows;

use super::pack::{NO_KEY, PackEntry};

/// Entries below this many bytes are reduced whole by one member (their [`reducer`])
/// rather than sliced: slicing tiny tensors costs more in bookkeeping than it saves.
const SLICE_MIN_BYTES: usize = 8 * 1024;

/// All-gathers whose output is at most this many bytes are pushed: each member copies its own
/// input into every output, rather than pulling every input into its own output. Measured on
/// the 2-core host at worlds 2 and 4 (`docs/decisions.md`, session 37), pushing is as fast from
/// 64 KiB and faster from 1 MiB to 4 MiB (faster from 64 KiB when the program reads its outputs
/// and writes its inputs between calls); at 16 MiB neither wins.
const PUSH_MAX_BYTES: usize = 4 << 20;

/// Slices of a large reduction up to this many bytes are reduced from both ends towards their
/// middle ([`Across::slice`]); larger ones stream from start to end. The edges cost a few
/// lines a call, nothing beside a large slice, and a descending stream prefetches worse from
/// the outer caches: at world 2 a 1 MiB all_reduce (512 KiB slices) took 22.9–24.2 µs from
/// both ends against 21.9–22.8 from one.
const MEET_MAX_BYTES: usize = 64 << 10;

/// One collective step as seen by member `me` of `n`: its description (ours; every member's
/// agrees) and every member's buffers, input and output, in member order.
pub(crate) struct Step<'a> {
    pub me: usize,
    /// The step's number on its communicator.
    pub seq: u64,
    pub desc: &'a OpDesc,
    pub bufs: &'a [(*mut u8, *mut u8)],
    /// Our [`own_part`] is done already (while the members were still arriving).
    pub own_done: bool,
}

impl Step<'_> {
    fn n(&self) -> usize {
        self.bufs.len()
    }

    fn input(&self, j: usize) -> *mut u8 {
        self.bufs[j].0
    }

    fn output(&self, j: usize) -> *mut u8 {
        self.bufs[j].1
    }

    /// Member index of the root (validated to be a member before posting).
    fn root(&self, members: &[usize]) -> usize {
        root_member(self.desc, members)
    }
}

/// The member index of a rooted step's root in `members` (0 for a step without a root).
pub(crate) fn root_member(desc: &OpDesc, members: &[usize]) -> usize {
    desc.peer
        .and_then(|r| members.binary_search(&r).ok())
        .unwrap_or(0)
}

/// Performs member `step.me`'s share of the step.
///
/// # Safety
/// `step.bufs` are the buffers of every member's op for the same collective step, each
/// description agreeing with `step.desc` and each op's buffers holding the elements it says
/// ([`fits`]), posted by a member that stays blocked in this step until every member has
/// finished its share, so that all buffers are live while we use them.
pub(crate) unsafe fn run_share(step: &Step<'_>, members: &[usize]) {
    fail_point!("kernel");
    let desc = step.desc;
    let es = desc.dtype.size();
    let n = step.n();
    let me = step.me;
    match desc.kind {
        OpKind::Barrier | OpKind::Send | OpKind::Recv => {}
        OpKind::Broadcast => {
            let root = step.root(members);
            let numel = desc.numel();
            let src = step.input(root);
            // Below the slicing size the lone copy is cheaper than sharing it.
            if numel * es < SLICE_MIN_BYTES {
                if me != root {
                    // SAFETY: the root's buffer and ours hold `numel` elements (agreed shape),
                    // are distinct tensors, and only we write ours during the step.
                    unsafe { copy_bytes(step.output(me), src, numel * es) };
                }
                return;
            }
            // The root would idle while the others copy, so the copying is shared: the buffer
            // is cut into one piece per member, every non-root copies every piece but its own
            // into its output, and the root copies piece j into member j's output. Each output
            // piece has exactly one writer, and every member copies (n - 1) / n of the buffer.
            let piece = |m: usize| owned_range(numel, es, n, m, 0);
            let copy = |dst: *mut u8, (lo, hi): (usize, usize)| {
                // SAFETY: [lo, hi) < numel lies in the root's buffer and in `dst` (agreed
                // shape); the pieces this member writes are written by no other member.
                unsafe { copy_bytes(dst.add(lo * es), src.add(lo * es), (hi - lo) * es) }
            };
            if me == root {
                for j in 0..n {
                    if let Some(p) = piece(j).filter(|_| j != root) {
                        copy(step.output(j), p);
                    }
                }
            } else {
                for m in (0..n).filter(|&m| m != me) {
                    if let Some(p) = piece(m) {
                        copy(step.output(me), p);
                    }
                }
            }
        }
        OpKind::AllReduce | OpKind::Reduce => {
            let numel = desc.numel();
            let red = reducer(step.seq, n);
            let Some((lo, hi)) = owned_range(numel, es, n, me, red) else {
                return;
            };
            let op = desc.op.unwrap_or(crate::ReduceOp::Sum);
            let all = desc.kind == OpKind::AllReduce;
            with_dtype!(desc.dtype, T => {
                // Element `lo` of every member's input, and of every output the step writes:
                // every member's, or the root's (`lo < numel`, inside every member's buffers:
                // agreed shape; only the fold below reads or writes through them).
                let at = |p: *mut u8| p.cast::<T>().wrapping_add(lo);
                let srcs = step.bufs.iter().map(|b| at(b.0).cast_const()).collect();
                let dsts = if all {
                    (0..n).map(|j| at(step.output(j))).collect()
                } else {
                    SmallVec::from_elem(at(step.output(step.root(members))), 1)
                };
                // SAFETY: [lo, hi) is within every member's buffer and owned by us alone; the
                // ops are in place (validated), so a destination is its member's source.
                let across = unsafe { Across::slice(srcs, dsts, hi - lo) };
                Reducer::<T>::new(op, n).fold(across)
            })
        }
        OpKind::ReduceScatter => {
            let (outer, row) = rows(&desc.shape, desc.dim);
            let chunk = row / n;
            let op = desc.op.unwrap_or(crate::ReduceOp::Sum);
            with_dtype!(desc.dtype, T => {
                // Column block `me` of every input's first row (`me * chunk <= row`, within
                // every input's first row: agreed shape).
                let from = (step.bufs.iter())
                    .map(|b| b.0.cast_const().cast::<T>().wrapping_add(me * chunk))
                    .collect();
                let dst = SmallVec::from_elem(step.output(me).cast::<T>(), 1);
                let back = Turn::Rows.take(outer * chunk * es);
                let shape = (outer, (row, chunk));
                // SAFETY: inputs are [outer, row] on every member and our output [outer, chunk];
                // `chunk` elements of each row's block `me` of each input and of each row of
                // our output, which is ours and no input.
                let across = unsafe { Across::rows(from, dst, chunk, shape, back) };
                Reducer::<T>::new(op, n).fold(across)
            })
        }
        OpKind::AllGather => {
            let (outer, inner) = rows(&desc.shape, desc.dim);
            let push = outer * n * inner * es <= PUSH_MAX_BYTES;
            let back = Turn::Copies.take(copied_bytes(desc, n));
            // Pushing, each member starts with its own output (or ends with it going back), so
            // that the members write to different outputs at any time.
            let peers = || {
                for i in 1..n {
                    let i = if back { n - i } else { i };
                    // Pulling, the other inputs in member order.
                    let j = if push {
                        (me + i) % n
                    } else {
                        i - usize::from(i <= me)
                    };
                    // Push: our input into column block `me` of member j's output. Pull: member
                    // j's input into column block j of ours. Either way each column block of each
                    // output has one writer.
                    let (dst, src, at) = if push {
                        (step.output(j), step.input(me), me)
                    } else {
                        (step.output(me), step.input(j), j)
                    };
                    // SAFETY: outputs are [outer, n*inner] and inputs [outer, inner] (agreed
                    // shape).
                    unsafe { gather_block(dst, src, at, n, (outer, inner), es, back) }
                }
            };
            // SAFETY: the caller's contract.
            unsafe { around_own_part(step, back, peers) };
        }
        OpKind::Gather => {
            let (outer, inner) = rows(&desc.shape, desc.dim);
            let root = step.output(step.root(members));
            // SAFETY: the root's output is [outer, n*inner]; we write only column block `me`.
            unsafe {
                copy_rows(
                    root.add(me * inner * es),
                    n * inner * es,
                    step.input(me),
                    inner * es,
                    outer,
                    inner * es,
                )
            }
        }
        OpKind::Scatter => {
            let (outer, inner) = rows(&desc.shape, desc.dim);
            let root = step.input(step.root(members));
            // SAFETY: the root's input is [outer, n*inner]; our output is [outer, inner].
            unsafe {
                copy_rows(
                    step.output(me),
                    inner * es,
                    root.add(me * inner * es),
                    n * inner * es,
                    outer,
                    inner * es,
                )
            }
        }
        OpKind::AllToAll => {
            let shape = rows(&desc.shape, desc.dim);
            let back = Turn::Copies.take(copied_bytes(desc, n));
            let peers = || {
                for i in 0..n {
                    let j = if back { n - 1 - i } else { i };
                    if j == me {
                        continue;
                    }
                    let (dst, src) = (step.output(me), step.input(j));
                    // SAFETY: inputs and our output are [outer, row] (agreed shape).
                    unsafe { exchange_block(dst, src, j, me, (shape, n, es), back) }
                }
            };
            // SAFETY: the caller's contract.
            unsafe { around_own_part(step, back, peers) };
        }
    }
}

/// A copying share's copies between peers (`peers`), with our [`own_part`] before them going
/// forward and after them going back (`back`, see [`Turn::Copies`]), unless it was done
/// ahead.
///
/// # Safety
/// As for [`run_share`]: the step's buffers are agreed and validated.
#[inline(always)]
unsafe fn around_own_part(step: &Step<'_>, back: bool, peers: impl FnOnce()) {
    let (me, n) = (step.me, step.n());
    // SAFETY: our buffers, agreed and validated (contract).
    let own = || unsafe { own_part(step.desc, n, me, step.input(me), step.output(me), back) };
    if !step.own_done && !back {
        own();
    }
    peers();
    if !step.own_done && back {
        own();
    }
}

/// Member `me`'s part of a step that needs no other member's buffers — an all_gather's or an
/// all_to_all's own block, from our input to our output, copied backward if `back` (see
/// [`Turn`]) — done; whether the step has one. A member may do it before the others arrive: it
/// is what the step writes there whatever they do (if they disagree, the call fails, with that
/// block written).
///
/// # Safety
/// `input` and `output` are member `me`'s buffers for a step described by `desc` on `n`
/// members, which fit it ([`fits`]); nobody else writes that block of `output` meanwhile.
pub(crate) unsafe fn own_part(
    desc: &OpDesc,
    n: usize,
    me: usize,
    input: *mut u8,
    output: *mut u8,
    back: bool,
) -> bool {
    let es = desc.dtype.size();
    let shape = rows(&desc.shape, desc.dim);
    match desc.kind {
        OpKind::AllGather => {
            // SAFETY: our output is [outer, n*inner] and our input [outer, inner] (contract).
            unsafe { gather_block(output, input, me, n, shape, es, back) };
            true
        }
        OpKind::AllToAll => {
            // SAFETY: our input and output are [outer, row] (contract).
            unsafe { exchange_block(output, input, me, me, (shape, n, es), back) };
            true
        }
        _ => false,
    }
}

/// The kinds of share whose direction through the buffers alternates from call to call on a
/// rank thread.
///
/// A rank that runs the same share on the same buffers call after call (a training loop's
/// all_to_all, a benchmark) finds in its caches the lines its last call touched last. Going
/// through the buffers in one fixed order, a call starts on the lines that were evicted first,
/// and evicts the rest before it reaches them: when they take a little more than the L1, as a
/// 64 KiB all_reduce's or all_to_all's share at world 2 does, every line is a miss. Every
/// other call goes the other way and starts on the lines still cached. Each kind has its own
/// turn, so that two kinds called in turn each still alternate. What a share writes, and the
/// order each element's contributions are combined in, are the same either way. Measured with
/// two threads sharing a call's work and its two hand-offs (`docs/decisions.md`, session 45):
/// a 64 KiB all_reduce's halves 770–800 → 570–600 ns a fold, an all_to_all's two 32 KiB
/// copies 1.34–1.40 → 0.88–0.94 µs.
#[derive(Clone, Copy)]
enum Turn {
    /// A large all_reduce's or reduce's slice ([`Order::Meet`]): which half goes first.
    Slice,
    /// A reduce_scatter's block ([`Order::Rows`]): forward or backward.
    Rows,
    /// An all_gather's or all_to_all's blocks ([`copy_bytes_back`], the blocks in reverse
    /// order, our own last).
    Copies,
}

thread_local! {
    /// Per [`Turn`], whether this thread's next share of that kind goes the other way.
    static TURNS: [std::cell::Cell<bool>; 3] = const {
        [const { std::cell::Cell::new(false) }; 3]
    };
}

impl Turn {
    /// Whether this thread's next share of this kind goes the other way, given its size:
    /// `bytes` of a reduction's slice or block in one buffer, or of a copy's output. Only up
    /// to [`Turn::max_bytes`]: past it, forward always.
    fn now(self, bytes: usize) -> bool {
        bytes <= self.max_bytes() && TURNS.with(|c| c[self as usize].get())
    }

    /// [`Turn::now`], and the turn flipped for the next share of the kind (the share's own
    /// question; past [`Turn::max_bytes`] nothing flips).
    fn take(self, bytes: usize) -> bool {
        bytes <= self.max_bytes()
            && TURNS.with(|c| c[self as usize].replace(!c[self as usize].get()))
    }

    /// The largest share of the kind that alternates. A fold going down a slice or block
    /// larger than [`MEET_MAX_BYTES`] streams worse from the outer caches than it gains (see
    /// there). Copies go down piece by piece, each piece up, and gained at every size up to 4
    /// MiB of output a member (an all_to_all at world 2 and 4 MiB: 333 → 262–276 µs a call,
    /// two threads copying); at 16 MiB they were even, and at 64 MiB the benchmark's rows came
    /// out 3–5 % slower in one run.
    fn max_bytes(self) -> usize {
        match self {
            Turn::Slice | Turn::Rows => MEET_MAX_BYTES,
            Turn::Copies => 4 << 20,
        }
    }
}

/// The bytes an all_gather's or all_to_all's share `desc` on `n` members writes: its output.
fn copied_bytes(desc: &OpDesc, n: usize) -> usize {
    let (outer, inner) = rows(&desc.shape, desc.dim);
    let blocks = if desc.kind == OpKind::AllGather { n } else { 1 };
    (outer * inner * blocks).saturating_mul(desc.dtype.size())
}

/// [`own_part`], done ahead of the share while the other members arrive, unless this
/// thread's next share of the step copies backward ([`Turn::Copies`]): that one does its own
/// part last, since it holds the lines the last copy started with, which the next one forward
/// needs first. Whether it is done.
///
/// # Safety
/// As for [`own_part`].
#[inline(always)]
pub(crate) unsafe fn own_part_ahead(
    desc: &OpDesc,
    n: usize,
    me: usize,
    input: *mut u8,
    output: *mut u8,
) -> bool {
    let copies = matches!(desc.kind, OpKind::AllGather | OpKind::AllToAll);
    // SAFETY: the caller's contract.
    copies
        && !Turn::Copies.now(copied_bytes(desc, n))
        && unsafe { own_part(desc, n, me, input, output, false) }
}

/// An all_gather's input `src`, `[outer, inner]`, into column block `at` of the output `dst`,
/// `[outer, n * inner]`.
///
/// # Safety
/// The buffers hold those shapes of `es`-byte elements; nobody else writes that block.
unsafe fn gather_block(
    dst: *mut u8,
    src: *const u8,
    at: usize,
    n: usize,
    (outer, inner): (usize, usize),
    es: usize,
    back: bool,
) {
    let width = inner * es;
    let copy = if back { copy_bytes_back } else { copy_bytes };
    // SAFETY: column block `at < n` of `dst`, all of `src` (contract).
    unsafe {
        copy_rows_by(
            copy,
            back,
            dst.add(at * width),
            n * width,
            src,
            width,
            outer,
            width,
        )
    }
}

/// An all_to_all's column block `to` of member `from`'s input `src` into column block `from` of
/// member `to`'s output `dst`, both `[outer, row]` with `row` in `n` blocks.
///
/// # Safety
/// The buffers hold that shape of `es`-byte elements, `from` and `to` are below `n`, and nobody
/// else writes that block of `dst`.
unsafe fn exchange_block(
    dst: *mut u8,
    src: *const u8,
    from: usize,
    to: usize,
    ((outer, row), n, es): ((usize, usize), usize, usize),
    back: bool,
) {
    let width = row / n * es;
    let copy = if back { copy_bytes_back } else { copy_bytes };
    let (dst, src, pitch) = (
        dst.wrapping_add(from * width),
        src.wrapping_add(to * width),
        row * es,
    );
    // SAFETY: column block `from` of `dst` and `to` of `src`, `[outer, row]` buffers
    // (contract).
    unsafe { copy_rows_by(copy, back, dst, pitch, src, pitch, outer, width) }
}

/// Member `me`'s share of a stretch of `len` small reductions, from its first step `first`:
/// the steps it is the [`reducer`] of, each checked and then reduced whole from every member's
/// pack entry. (Their [`checker`]s need not look: inside a packed pass every member's op is a
/// small reduction, and each step's reducer checks it — here, or in the step-by-step path if
/// it took that one.)
///
/// Every member's stretch shares its first op's kind, root, reduction and element type, so one
/// full comparison of a step (`check`, given the step's index in the stretch) proves those for
/// the whole stretch; after it, equal shape keys in every member's entry make a step agree,
/// and only a step without a key, or with differing ones, is compared in full again (and
/// reported from there). The first step `check` refuses ends the pass (`false`; `check` keeps
/// the error): the steps before it were reduced, as the step-by-step path would have done.
/// (A `bool` rather than a `Result`: a large error type would pass through memory.)
///
/// # Safety
/// `tables[j]` points at member j's pack entries for the stretch, whose buffers (exposed
/// addresses, see [`PackEntry`]) stay live until every member has marked the step done; a
/// step `check` accepts has equal element counts in every member's entry, below the
/// small-reduction size, buffers that hold that many elements of `desc.dtype`, and every
/// member's op is a `desc.kind` (all_reduce or reduce) with `desc`'s root and reduction;
/// `root` is the root's member index for a reduce.
pub(crate) unsafe fn reduce_pack(
    desc: &OpDesc,
    root: usize,
    tables: &[*const PackEntry],
    (first, len): (u64, u64),
    me: usize,
    check: impl FnMut(usize) -> bool,
) -> bool {
    fail_point!("kernel");
    let n = tables.len();
    let op = desc.op.unwrap_or(crate::ReduceOp::Sum);
    with_dtype!(desc.dtype, T => {
        let pass = PackPass {
            tables,
            first,
            len: len as usize,
            me,
            root: (desc.kind != OpKind::AllReduce).then_some(root),
            // Alone, a reduction other than PreMulSum leaves a buffer as it is.
            alone_unchanged: n == 1 && !matches!(op, crate::ReduceOp::PreMulSum(_)),
            check,
        };
        Reducer::<T>::new(op, n).fold(pass)
    })
}

/// The steps of a stretch that member `me` checks and reduces (see [`reduce_pack`]), as a
/// [`Fold`]: the operator's loop is compiled once per operator and type, and each step is one
/// pass over its elements.
struct PackPass<'a, C> {
    tables: &'a [*const PackEntry],
    /// The stretch's first collective step, and its length.
    first: u64,
    len: usize,
    me: usize,
    /// The root's member index for a reduce; `None` for an all_reduce.
    root: Option<usize>,
    /// Whether a step whose one member reduces in place has nothing to do.
    alone_unchanged: bool,
    check: C,
}

impl<C> PackPass<'_, C> {
    /// Asks for every member's input of step `i` of the stretch, the next this member reduces,
    /// while it reduces the one before. A bucket's tensors are separate buffers, each a few
    /// lines, mostly in the cache of the member that last wrote them: too short a run for the
    /// core to see where the next one starts. (1,000 × 1 KiB at world 2 after the same calls
    /// one by one, which leave every tensor with its own rank: 62–75 µs a bucket without,
    /// 56–64 with; `docs/decisions.md`, session 46.) The size is our own entry's, at most a
    /// small reduction's: a peer's is not checked yet, and a hint past a buffer costs nothing
    /// but the fetch.
    #[inline(always)]
    fn prefetch<T>(&self, i: usize) {
        // SAFETY: step `i` of the stretch is in every member's table (`reduce_pack`'s
        // contract).
        let numel = unsafe { (*self.tables[self.me].add(i)).numel } as usize;
        let bytes = numel.saturating_mul(size_of::<T>()).min(SLICE_MIN_BYTES);
        for table in self.tables {
            // SAFETY: as above.
            let input = unsafe { (*table.add(i)).input };
            super::prefetch::lines(std::ptr::without_provenance::<u8>(input), bytes);
        }
    }
}

impl<T: Arith, C: FnMut(usize) -> bool> Fold<T> for PackPass<'_, C> {
    type Output = bool;

    fn fold(
        mut self,
        start: impl Fn(T) -> T + Copy,
        combine: impl Fn(T, T) -> T + Copy,
        finish: impl Fn(T) -> T + Copy,
    ) -> Self::Output {
        let n = self.tables.len();
        let mut srcs: SmallVec<[*const T; 8]> = SmallVec::from_elem(std::ptr::null(), n);
        let mut dsts: SmallVec<[*mut T; 8]> = SmallVec::new();
        let mut checked = false;
        let mut steps = reduced_steps(self.first, self.len, self.me, n).peekable();
        while let Some(i) = steps.next() {
            if let Some(&next) = steps.peek() {
                self.prefetch::<T>(next);
            }
            // SAFETY: step `i` of the stretch is in every member's table (`reduce_pack`'s
            // contract).
            let key = unsafe { (*self.tables[self.me].add(i)).key };
            let same = key != NO_KEY
                && self
                    .tables
                    .iter()
                    // SAFETY: as above, for every member's table.
                    .all(|&t| unsafe { (*t.add(i)).key } == key);
            if !(checked && same) {
                if !(self.check)(i) {
                    return false;
                }
                checked = true;
            }
            dsts.clear();
            for (j, table) in self.tables.iter().enumerate() {
                // SAFETY: as above.
                let e = unsafe { &*table.add(i) };
                // The member exposed these addresses when it built its table (see `PackEntry`).
                srcs[j] = std::ptr::with_exposed_provenance(e.input);
                if self.root.is_none_or(|r| r == j) {
                    dsts.push(std::ptr::with_exposed_provenance_mut(e.output));
                }
            }
            if self.alone_unchanged && std::ptr::eq(srcs[0], dsts[0].cast_const()) {
                continue;
            }
            // SAFETY: as above, for our own table.
            let numel = unsafe { (*self.tables[self.me].add(i)).numel } as usize;
            // SAFETY: `check` accepted the step, so every buffer holds `numel` elements
            // (contract); we are the step's only writer; an output is either distinct from
            // every input or its member's input.
            unsafe { fold_across(&srcs, &dsts, numel, start, combine, finish) };
        }
        true
    }
}

/// A stretch of a reduction done in one pass over every member's buffer (see [`fold_across`]),
/// row by row: what a member owns of an all_reduce or a reduce too large to go whole to one
/// member, or its block of a reduce_scatter. One pass, not an accumulator block per source and
/// then a copy per destination: at world 2, a member's half of a 64 KiB all_reduce took 1.13
/// µs against 1.25 (one thread, a scratch loop), a 64 KiB reduce_scatter 1.80–1.88 µs against
/// 2.17–2.42 (`docs/decisions.md`, session 42).
struct Across<T> {
    srcs: SmallVec<[*const T; 8]>,
    dsts: SmallVec<[*mut T; 8]>,
    /// Elements per row.
    numel: usize,
    order: Order,
}

/// The order [`Across`] goes through its elements in.
#[derive(Clone, Copy, Debug)]
enum Order {
    /// `rows` rows, row `r` starting `r * pitches.0` elements past each source and
    /// `r * pitches.1` past each destination: from the first row's start to the last row's
    /// end, or from there back to the start if `back`.
    Rows {
        rows: usize,
        pitches: (usize, usize),
        back: bool,
    },
    /// One row that is a slice of buffers other members slice too, from both of its ends
    /// towards its middle, the lower half first if `.0` (see [`Across::slice`]).
    Meet(bool),
}

/// One row, from start to end.
const ONE_ROW: Order = Order::Rows {
    rows: 1,
    pitches: (0, 0),
    back: false,
};

/// The typed pointers an [`Across`] reduces from and into.
type Sources<T> = SmallVec<[*const T; 8]>;
/// See [`Sources`].
type Destinations<T> = SmallVec<[*mut T; 8]>;

impl<T> Across<T> {
    /// A member's slice of `numel` elements (one row) of buffers whose neighbouring slices
    /// other members reduce at the same time (a large all_reduce or reduce), reduced from both
    /// of its ends towards its middle: the upper half from its end down, then the lower half up
    /// (up to [`MEET_MAX_BYTES`]; a larger slice from start to end).
    ///
    /// A core streaming through memory prefetches past the end of its stream. Ending at a
    /// slice's edge, it took the first lines of the next member's slice out of that member's
    /// cache just after that member had written them, and at world 2 the second member's half
    /// of a 64 KiB all_reduce took 110–230 ns longer than the first's, which then waited for
    /// it. Streams that start at the edges and end inside the slice keep each member's lines
    /// its own: in a scratch loop, 807 and 919 ns became 771 and 765 (`docs/decisions.md`,
    /// session 43). The elements and the order each is combined in are the same either way.
    ///
    /// Which half goes first alternates from fold to fold on a thread ([`Turn::Slice`]): the
    /// lines of the half the last fold ended with are the ones still in the L1. A 64 KiB
    /// all_reduce's half at world 2, folded over and over by two threads, took 570–600 ns a
    /// fold that way against 770–800 with the upper half always first.
    ///
    /// # Safety
    /// As for [`fold_across`], until the fold is done.
    unsafe fn slice(srcs: Sources<T>, dsts: Destinations<T>, numel: usize) -> Self {
        let bytes = numel.saturating_mul(std::mem::size_of::<T>());
        let order = if bytes <= MEET_MAX_BYTES {
            Order::Meet(Turn::Slice.take(bytes))
        } else {
            ONE_ROW
        };
        Across {
            srcs,
            dsts,
            numel,
            order,
        }
    }

    /// `rows` rows of `numel` elements, row `r` starting `r * pitches.0` elements past each of
    /// `srcs` and `r * pitches.1` past each of `dsts`, from the last row's end back to the
    /// first's start if `back` (see [`Turn`]).
    ///
    /// # Safety
    /// As for [`fold_across`], for every row, until the fold is done.
    unsafe fn rows(
        srcs: Sources<T>,
        dsts: Destinations<T>,
        numel: usize,
        (rows, pitches): (usize, (usize, usize)),
        back: bool,
    ) -> Self {
        let order = Order::Rows {
            rows,
            pitches,
            back,
        };
        Across {
            srcs,
            dsts,
            numel,
            order,
        }
    }
}

impl<T: Arith> Fold<T> for Across<T> {
    type Output = ();

    fn fold(
        self,
        start: impl Fn(T) -> T + Copy,
        combine: impl Fn(T, T) -> T + Copy,
        finish: impl Fn(T) -> T + Copy,
    ) {
        let (mut srcs, mut dsts, numel) = (self.srcs, self.dsts, self.numel);
        let (rows, (src_pitch, dst_pitch), back) = match self.order {
            Order::Rows {
                rows,
                pitches,
                back,
            } => (rows, pitches, back),
            Order::Meet(lower_first) => {
                let Some((&first, rest)) = srcs.split_first() else {
                    return;
                };
                let mid = numel / 2 / LANES * LANES;
                let upper = (first, rest);
                // SAFETY: `Across::slice`'s contract, for elements `mid..numel` and `..mid`.
                return crate::reduce::widest(|| unsafe {
                    if !lower_first {
                        fold_across_down(upper, &dsts, mid, numel, start, combine, finish);
                    }
                    fold_across_loops(&srcs, &dsts, mid, start, combine, finish);
                    if lower_first {
                        fold_across_down(upper, &dsts, mid, numel, start, combine, finish);
                    }
                });
            }
        };
        // One choice of width for all the rows.
        crate::reduce::widest(|| {
            // Rows first to last, or last to first (each row then from its end). The pointers
            // move in place, a row at a time: a narrow reduce_scatter has thousands of rows of
            // a few elements.
            let dir = if back { -1 } else { 1 };
            let (ds, dd) = (dir * src_pitch as isize, dir * dst_pitch as isize);
            if back && rows > 1 {
                // SAFETY: the last row of every buffer (`Across::rows`' contract).
                unsafe {
                    srcs.iter_mut()
                        .for_each(|p| *p = p.add((rows - 1) * src_pitch));
                    dsts.iter_mut()
                        .for_each(|p| *p = p.add((rows - 1) * dst_pitch));
                }
            }
            for i in 0..rows {
                if i > 0 {
                    // SAFETY: the row after or before the one just folded, one of the `rows`
                    // rows of every buffer (`Across::rows`' contract).
                    unsafe {
                        srcs.iter_mut().for_each(|p| *p = p.offset(ds));
                        dsts.iter_mut().for_each(|p| *p = p.offset(dd));
                    }
                }
                // SAFETY: `Across::rows`' contract, for this row.
                unsafe {
                    match srcs.split_first() {
                        Some((&first, rest)) if back => {
                            fold_across_down((first, rest), &dsts, 0, numel, start, combine, finish)
                        }
                        _ => fold_across_loops(&srcs, &dsts, numel, start, combine, finish),
                    }
                }
            }
        })
    }
}

/// The indices, within a stretch of `len` steps from step `first`, of the steps member `me` of
/// `n` is the [`reducer`] of: whole runs at a time, the others skipped without a look.
fn reduced_steps(first: u64, len: usize, me: usize, n: usize) -> impl Iterator<Item = usize> {
    let end = first + len as u64;
    let shift = reducer_shift(n);
    // The first step of each run that overlaps the stretch, and the part of it in the stretch.
    (first >> shift..end.div_ceil(1 << shift))
        .filter(move |&run| reducer(run << shift, n) == me)
        .flat_map(move |run| {
            let (lo, hi) = reducer_run_of(run << shift, n);
            (lo.max(first) - first) as usize..(hi.min(end) - first) as usize
        })
}

/// Elements [`fold_across`] reduces at a time: a cache line of `f32`, held in registers.
const LANES: usize = 16;

/// Reduces element `i` of every source into element `i` of every destination, for `i` below
/// `numel`, in one pass: a group of [`LANES`] elements of every source is read before that
/// group of any destination is written, so a destination may be a source (in place).
///
/// One pass, not a reduction into an accumulator followed by a copy per destination: a small
/// step is all cache misses on a peer's lines, and reading and writing each line once halves
/// what a step of a packed bucket costs beside its bookkeeping (measured on 1,000 × 1 KiB at
/// world 2: the data pass 31 → 25 µs per rank).
///
/// # Safety
/// Every source holds `numel` readable elements, every destination `numel` writable ones that
/// no one else accesses meanwhile; destinations are distinct, and a destination overlaps a
/// source only by being the same buffer.
#[inline(always)]
unsafe fn fold_across<T: Arith>(
    srcs: &[*const T],
    dsts: &[*mut T],
    numel: usize,
    start: impl Fn(T) -> T + Copy,
    combine: impl Fn(T, T) -> T + Copy,
    finish: impl Fn(T) -> T + Copy,
) {
    // SAFETY: the caller's contract, passed on.
    crate::reduce::widest(|| unsafe {
        fold_across_loops(srcs, dsts, numel, start, combine, finish)
    })
}

/// The loops of [`fold_across`], at the width [`crate::reduce::widest`] picks.
///
/// # Safety
/// As for [`fold_across`].
#[inline(always)]
unsafe fn fold_across_loops<T: Arith>(
    srcs: &[*const T],
    dsts: &[*mut T],
    numel: usize,
    start: impl Fn(T) -> T + Copy,
    combine: impl Fn(T, T) -> T + Copy,
    finish: impl Fn(T) -> T + Copy,
) {
    let Some((&first, rest)) = srcs.split_first() else {
        return;
    };
    if let ([a, b], [x]) = (dsts, rest)
        && std::ptr::eq(a.cast_const(), first)
        && std::ptr::eq(b.cast_const(), *x)
    {
        // Two members in place (an all_reduce at world 2): one loop over both buffers, which
        // the compiler vectorises behind a check that they do not overlap.
        for i in 0..numel {
            // SAFETY: element i of both buffers (contract); read before written.
            unsafe {
                let v = finish(combine(start(*a.add(i)), *b.add(i)));
                *a.add(i) = v;
                *b.add(i) = v;
            }
        }
        return;
    }
    // Whole groups, with a constant count the compiler unrolls and vectorises, then the rest.
    let whole = numel - numel % LANES;
    let mut at = 0;
    while at < whole {
        // SAFETY: elements at..at + LANES are within every buffer (contract).
        unsafe { fold_group::<T, LANES>(first, rest, dsts, at, start, combine, finish) };
        at += LANES;
    }
    // SAFETY: the elements from `whole` on (contract).
    unsafe { fold_rest(first, rest, dsts, whole, numel, start, combine, finish) }
}

/// Elements `from..numel` of [`fold_across`] from the top down, sources `first` and `rest`:
/// the rest past the last whole group first, then the whole groups from the last down to
/// `from`.
///
/// # Safety
/// As for [`fold_across`]; `from <= numel`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn fold_across_down<T: Arith>(
    (first, rest): (*const T, &[*const T]),
    dsts: &[*mut T],
    from: usize,
    numel: usize,
    start: impl Fn(T) -> T + Copy,
    combine: impl Fn(T, T) -> T + Copy,
    finish: impl Fn(T) -> T + Copy,
) {
    let whole = numel - (numel - from) % LANES;
    // SAFETY: the elements from `whole` on (contract).
    unsafe { fold_rest(first, rest, dsts, whole, numel, start, combine, finish) };
    let mut at = whole;
    while at > from {
        at -= LANES;
        // SAFETY: elements at..at + LANES are within every buffer (contract).
        unsafe { fold_group::<T, LANES>(first, rest, dsts, at, start, combine, finish) };
    }
}

/// Elements `at..numel` of [`fold_across`], fewer than [`LANES`] (a narrow reduce_scatter's
/// rows are all rest), in halving groups.
///
/// # Safety
/// As for [`fold_across`], for those elements.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn fold_rest<T: Arith>(
    first: *const T,
    rest: &[*const T],
    dsts: &[*mut T],
    mut at: usize,
    numel: usize,
    start: impl Fn(T) -> T + Copy,
    combine: impl Fn(T, T) -> T + Copy,
    finish: impl Fn(T) -> T + Copy,
) {
    if numel - at >= LANES / 2 {
        // SAFETY: elements at..at + LANES / 2 are within every buffer (contract).
        unsafe { fold_group::<T, { LANES / 2 }>(first, rest, dsts, at, start, combine, finish) };
        at += LANES / 2;
    }
    if numel - at >= LANES / 4 {
        // SAFETY: elements at..at + LANES / 4 are within every buffer (contract).
        unsafe { fold_group::<T, { LANES / 4 }>(first, rest, dsts, at, start, combine, finish) };
        at += LANES / 4;
    }
    while at < numel {
        // SAFETY: element at is within every buffer (contract).
        unsafe { fold_group::<T, 1>(first, rest, dsts, at, start, combine, finish) };
        at += 1;
    }
}

/// `L` elements of [`fold_across`] from element `at`.
///
/// # Safety
/// As for [`fold_across`], for elements `at..at + L`.
#[inline(always)]
unsafe fn fold_group<T: Arith, const L: usize>(
    first: *const T,
    rest: &[*const T],
    dsts: &[*mut T],
    at: usize,
    start: impl Fn(T) -> T + Copy,
    combine: impl Fn(T, T) -> T + Copy,
    finish: impl Fn(T) -> T + Copy,
) {
    // SAFETY: L elements from `at` in source 0 (contract); unaligned reads, as tensors of
    // small element types need not be aligned to the group.
    let mut acc: [T; L] = unsafe { first.add(at).cast::<[T; L]>().read_unaligned() };
    for a in &mut acc {
        *a = start(*a);
    }
    for &s in rest {
        // SAFETY: as above, for this source.
        let x: [T; L] = unsafe { s.add(at).cast::<[T; L]>().read_unaligned() };
        for (a, x) in acc.iter_mut().zip(x) {
            *a = combine(*a, x);
        }
    }
    for a in &mut acc {
        *a = finish(*a);
    }
    for &d in dsts {
        // SAFETY: L elements from `at` of this destination, written only by us (contract);
        // every source's group was read above.
        unsafe { d.add(at).cast::<[T; L]>().write_unaligned(acc) };
    }
}

/// Whether every member's buffers have exactly the element counts `run_share` will touch for a
/// step over the `n` members of `members` — the backend's own communicator, not whatever the
/// caller validated against. Validation before posting already guarantees this; checking it
/// again where the raw pointers are used makes the kernels' safety contract local, so a bug
/// elsewhere (a handle resolved to the wrong communicator, a shape rule that overflowed) is an
/// error instead of an out-of-bounds write.
pub(crate) fn buffers_fit(ops: &[&Op], members: &[usize]) -> bool {
    let n = members.len();
    ops.len() == n && ops.iter().zip(members).all(|(op, &rank)| fits(op, rank, n))
}

/// Whether `op`, posted by `rank` on a communicator of `n`, has exactly the element counts
/// `run_share` will touch in its buffers (see [`buffers_fit`]).
pub(crate) fn fits(op: &Op, rank: usize, n: usize) -> bool {
    let d = &op.desc;
    let numel = d.numel();
    let is_root = d.peer == Some(rank);
    let split_ok = || d.shape.get(d.dim).is_some_and(|&s| s % n == 0);
    let times_n = numel.checked_mul(n);
    let want = match d.kind {
        OpKind::Barrier | OpKind::Send | OpKind::Recv => Some((0, 0)),
        OpKind::Broadcast | OpKind::AllReduce | OpKind::Reduce => Some((numel, numel)),
        OpKind::AllGather => times_n.map(|t| (numel, t)),
        OpKind::Gather if is_root => times_n.map(|t| (numel, t)),
        OpKind::Gather => Some((numel, 0)),
        OpKind::Scatter if is_root => times_n.map(|t| (t, numel)),
        OpKind::Scatter => Some((0, numel)),
        OpKind::ReduceScatter => split_ok().then(|| (numel, numel / n)),
        OpKind::AllToAll => split_ok().then_some((numel, numel)),
    };
    let len = |b: &crate::exec::Buf| if b.is_none() { 0 } else { b.len };
    let dim_ok = !d.kind.has_dim() || d.dim < d.shape.len();
    dim_ok && want == Some((len(&op.input), len(&op.output)))
}

/// The member that checks that everyone agrees on step `seq` of a communicator of `n`, whatever
/// the step is: members take turns.
pub(crate) fn checker(seq: u64, n: usize) -> usize {
    member_of(seq, n)
}

/// `x mod n`, a mask for the usual power-of-two group sizes: packed passes ask for every step's
/// checker and reducer, and a 64-bit division per question cost more than the rest of the
/// bookkeeping of a step.
#[inline(always)]
fn member_of(x: u64, n: usize) -> usize {
    let n = n as u64;
    (if n.is_power_of_two() {
        x & (n - 1)
    } else {
        x % n
    }) as usize
}

/// Consecutive small reductions go to one reducer in runs of `1 << reducer_shift(n)` steps:
/// 512 for a pair, 128 for more members, so that a bucket of a few hundred steps still has a
/// share for every member (at world 4, runs of 256 made a bucket of 1,000 × 1 KiB 3 % slower).
#[inline(always)]
fn reducer_shift(n: usize) -> u32 {
    if n <= 2 { 9 } else { 7 }
}

/// The member that does small reduction step `seq` whole: members take runs of consecutive
/// steps in turn ([`reducer_shift`]). Runs, not single steps, so that a member reduces
/// neighbouring tensors (a bucket's are usually allocated in order, and small ones share cache
/// lines at their ends) and each run of steps stays in one core's cache while it is reduced;
/// by step number, not by where the tensors live, so that every member has the same share —
/// a bucket of 1000 × 1 KiB at world 2 split by the 64 KiB block of member 0's inputs (the
/// rule before) gave 550 steps to one member and 450 to the other, and the bucket waited for
/// the first — and a member knows which steps are its own without reading anyone's op. Each
/// change of reducer between neighbouring tensors costs: at world 2 the same bucket took
/// 50–61 µs with runs of 32 steps, 42–43 with 64, 37–38 with 128, 35–36 with 256 or 512
/// (session 17); 512 against 128, 36–42 against 44–48 µs in the machine's slow state and
/// 25.6–26.1 against 26.8–26.9 µs in its fast one (session 23, `BENCHMARKS.md`).
pub(crate) fn reducer(seq: u64, n: usize) -> usize {
    member_of(seq >> reducer_shift(n), n)
}

/// The first step of the run of steps that holds step `seq`, and of the run after it.
fn reducer_run_of(seq: u64, n: usize) -> (u64, u64) {
    let shift = reducer_shift(n);
    let lo = seq >> shift << shift;
    (lo, lo + (1 << shift))
}

/// Whether member `me` of `n` must wait for step `seq` and take part in it, whatever the other
/// members posted. The step's [`checker`] always does; otherwise only members with data to
/// move: nobody in a barrier, and in a small reduction only its [`reducer`].
pub(crate) fn participates(desc: &OpDesc, n: usize, me: usize, seq: u64) -> bool {
    if checker(seq, n) == me {
        return true;
    }
    match desc.kind {
        OpKind::Barrier => false,
        OpKind::AllReduce | OpKind::Reduce => !is_small_reduction(desc),
        _ => true,
    }
}

/// Whether member `me` has work of its own in step `seq`: it [`participates`], or it is the
/// [`reducer`] of a small reduction. A member without leaves the comparing to the checker.
pub(crate) fn takes_part(desc: &OpDesc, n: usize, me: usize, seq: u64) -> bool {
    participates(desc, n, me, seq) || (is_small_reduction(desc) && reducer(seq, n) == me)
}

/// Whether a step is a reduction small enough for one member to do whole; runs of such steps
/// are done as one packed pass (see `LocalBackend::step_packed`).
pub(crate) fn is_small_reduction(desc: &OpDesc) -> bool {
    small_reduction(desc, desc.numel())
}

/// [`is_small_reduction`] for a caller that has the element count at hand.
pub(crate) fn small_reduction(desc: &OpDesc, numel: usize) -> bool {
    matches!(desc.kind, OpKind::AllReduce | OpKind::Reduce)
        && numel.saturating_mul(desc.dtype.size()) < SLICE_MIN_BYTES
}

/// Whether two small reductions (the caller has checked both) can share a packed pass: the
/// same kind, root, reduction and element type (shapes may differ).
pub(crate) fn packs_with(first: &OpDesc, next: &OpDesc) -> bool {
    next.kind == first.kind
        && next.peer == first.peer
        && next.op == first.op
        && next.dtype == first.dtype
}

/// The element range member `me` reduces: a 64-byte-aligned slice of a large tensor, or all of
/// a small one for its `reducer`.
fn owned_range(
    numel: usize,
    es: usize,
    n: usize,
    me: usize,
    reducer: usize,
) -> Option<(usize, usize)> {
    if numel == 0 {
        return None;
    }
    if numel * es < SLICE_MIN_BYTES {
        return (reducer == me).then_some((0, numel));
    }
    let align = (64 / es).max(1);
    let per = numel.div_ceil(n).div_ceil(align) * align;
    let lo = (me * per).min(numel);
    let hi = ((me + 1) * per).min(numel);
    (lo < hi).then_some((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_ranges_partition_large_tensors() {
        for n in 1..=8 {
            for numel in [4096usize, 5000, 100_003] {
                let mut covered = 0;
                let mut next = 0;
                for me in 0..n {
                    if let Some((lo, hi)) = owned_range(numel, 4, n, me, 0) {
                        assert_eq!(lo, next);
                        assert_eq!(lo % 16, 0);
                        covered += hi - lo;
                        next = hi;
                    }
                }
                assert_eq!(covered, numel, "n={n} numel={numel}");
            }
        }
    }

    #[test]
    fn small_tensors_have_one_reducer() {
        for red in 0..3 {
            let owners: Vec<_> = (0..3)
                .filter(|&me| owned_range(10, 4, 3, me, red).is_some())
                .collect();
            assert_eq!(owners, vec![red]);
        }
        assert_eq!(owned_range(0, 4, 3, 0, 0), None);
    }

    #[test]
    fn reducers_take_runs_of_steps_in_turn() {
        for n in 1..=8 {
            let run = if n <= 2 { 512 } else { 128 };
            // Every member gets the same share of any whole number of turns, from any step.
            for first in [0u64, 5, 63, 64, 1000] {
                let mut share = vec![0usize; n];
                for seq in first..first + (run * n) as u64 {
                    share[reducer(seq, n)] += 1;
                }
                assert_eq!(share, vec![run; n], "n={n} from {first}");
            }
            // A run of steps has one reducer; the next run has the next member.
            let run = run as u64;
            for turn in 0..3 * n as u64 {
                let start = turn * run;
                let r = reducer(start, n);
                assert!((start..start + run).all(|s| reducer(s, n) == r));
                assert_eq!(reducer(start + run, n), (r + 1) % n);
                assert_eq!(reducer_run_of(start + run / 2, n), (start, start + run));
            }
        }
    }

    /// A packed pass visits exactly the steps whose reducer it is, as the step-by-step path
    /// decides them one at a time: from any first step, for stretches within a run and across
    /// several.
    #[test]
    #[cfg_attr(miri, ignore)] // millions of plain steps, no unsafe code of its own
    fn a_member_visits_exactly_its_own_steps() {
        for n in 1..=8 {
            for first in [0u64, 1, 127, 128, 300, 511, 512, 1000, 4097] {
                for len in [0usize, 1, 5, 128, 129, 600, 1000, 2100] {
                    for me in 0..n {
                        let visited: Vec<usize> = reduced_steps(first, len, me, n).collect();
                        let own: Vec<usize> = (0..len)
                            .filter(|&i| reducer(first + i as u64, n) == me)
                            .collect();
                        assert_eq!(visited, own, "n={n} first={first} len={len} me={me}");
                    }
                }
            }
        }
    }

    /// [`fold_across`] against the slice reducer it must agree with bit for bit: every
    /// operator, one to four members, lengths around the group size, in place (an
    /// all_reduce), into separate buffers, and into one buffer (a reduce's root).
    #[test]
    fn fold_across_matches_the_slice_reducer() {
        use crate::ReduceOp::*;
        fn check<T: Arith>(ops: &[crate::ReduceOp], value: impl Fn(usize) -> T) {
            // Under Miri, which checks the pointers and not the arithmetic, one operator and
            // the lengths that reach every loop in both orders (the whole run took 420 s there).
            let (ops, lengths): (&[_], &[usize]) = if cfg!(miri) {
                (&ops[..1], &[0, 1, 13, 17, 40, 47])
            } else {
                (ops, &[0, 1, 4, 8, 13, 15, 16, 17, 28, 40, 47, 100])
            };
            for &op in ops {
                for n in 1..=4 {
                    for &numel in lengths {
                        let inputs: Vec<Vec<T>> = (0..n)
                            .map(|j| (0..numel).map(|i| value(7 * i + 3 * j + 1)).collect())
                            .collect();
                        let r = Reducer::<T>::new(op, n);
                        // The slice reducer on the baseline loops: the reference for both
                        // variants of the packed loops.
                        let want = crate::reduce::narrow(|| {
                            let mut want = inputs[0].clone();
                            r.start(&mut want);
                            for x in &inputs[1..] {
                                r.combine(&mut want, x);
                            }
                            r.finish(&mut want);
                            want
                        });
                        // Under Miri both variants are the baseline loops: checked once.
                        let variants: &[bool] = if cfg!(miri) { &[true] } else { &[true, false] };
                        // Every number of outputs, both loop variants, every order: from start to
                        // end and back, and from both ends, the upper or the lower half first.
                        let orders = [
                            ONE_ROW,
                            Order::Rows {
                                rows: 1,
                                pitches: (0, 0),
                                back: true,
                            },
                            Order::Meet(false),
                            Order::Meet(true),
                        ];
                        let cases = [n, 1, 0].into_iter().flat_map(|o| {
                            (variants.iter()).flat_map(move |&v| orders.map(|m| (o, v, m)))
                        });
                        for (outputs, narrow, order) in cases {
                            let mut bufs = inputs.clone();
                            let mut outs: Vec<Vec<T>> = vec![vec![T::default(); numel]; outputs];
                            let srcs: Sources<T> = bufs
                                .iter_mut()
                                .map(|b| b.as_mut_ptr().cast_const())
                                .collect();
                            // outputs == 0 stands for "in place": each member's own buffer.
                            let dsts: Destinations<T> = if outputs == 0 {
                                srcs.iter().map(|p| p.cast_mut()).collect()
                            } else {
                                outs.iter_mut().map(|o| o.as_mut_ptr()).collect()
                            };
                            // SAFETY: every buffer holds `numel` elements; destinations are
                            // distinct, and in place each is exactly its member's source.
                            let probe = unsafe {
                                Across {
                                    order,
                                    ..Across::slice(srcs, dsts, numel)
                                }
                            };
                            if narrow {
                                crate::reduce::narrow(|| r.fold(probe));
                            } else {
                                r.fold(probe);
                            }
                            let got: Vec<Vec<T>> = if outputs == 0 { bufs } else { outs };
                            for g in &got {
                                assert!(
                                    g == &want,
                                    "{op:?} n={n} numel={numel} outputs={outputs} narrow={narrow} \
                                     order={order:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
        let float = |k: usize| ((k * 37 % 101) as f32 - 50.0) / 8.0;
        check::<f32>(&[Sum, Avg, PreMulSum(0.75), Prod, Min, Max], float);
        check::<f64>(&[Sum, Avg, PreMulSum(-1.5)], |k| f64::from(float(k)));
        check::<half::f16>(&[Sum, Max], |k| half::f16::from_f32(float(k)));
        let int = |k: usize| (k * 2_654_435_761 % 1_000_003) as i32 - 500_000;
        check::<i32>(&[Sum, Avg, Prod, Min, Max, BitAnd, BitOr, BitXor], int);
        check::<u8>(&[Sum, BitXor], |k| (k * 31) as u8);
    }

    #[test]
    fn strided_copy_moves_columns() {
        // Copy a [3, 2] block into columns 2..4 of a [3, 4] matrix.
        let src: Vec<u8> = (0..6).collect();
        let mut dst = vec![9u8; 12];
        // SAFETY: 3 rows of 2 bytes, read 2 apart from a 6-byte source and written 4 apart
        // from byte 2 of a 12-byte destination: both in bounds, distinct vectors.
        unsafe { copy_rows(dst.as_mut_ptr().add(2), 4, src.as_ptr(), 2, 3, 2) };
        assert_eq!(dst, [9, 9, 0, 1, 9, 9, 2, 3, 9, 9, 4, 5]);
    }
}
