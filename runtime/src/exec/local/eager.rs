//! Eager steps: a lone small collective completes with one-way signalling.
//!
//! A step done in place is a round trip: every member posts, the step's owner checks and moves
//! the data, and every member waits for the owner's `done`. For a payload of a few bytes — a
//! loss, a norm, a flag, a barrier — that round trip is the whole cost. So a collective run of
//! one small op (see [`Sig::of`]) is also posted *eagerly*: before its regular publication the
//! member writes its description's exact signature and a copy of its input into its eager slot
//! for the step (flag, signature and the first 32 bytes share a cache line, as NCCL's LL
//! protocol and MPI's eager messages carry the data with the flag), and a member that finds
//! every member's slot filled for the step, with equal signatures, computes its own output from
//! the copies — every member the same way, in member order, so the results are bit-identical to
//! the in-place path's — and returns without waiting for anyone.
//!
//! **Mixing with the in-place path.** Members that record the same call differently (alone on
//! one rank, inside a batch on another) must still meet. A member that posted step `k` without
//! filling its eager slot runs it in place; an eager member that sees such a peer (its regular
//! `posted` covers `k`, its eager slot does not) runs step `k` in place too — its op is posted
//! regularly as well, so the in-place members find it. Nobody completes a step eagerly unless
//! every member filled its slot, so a step is either eager for all or in place for all — except
//! a broadcast (below), whose in-place members read the members that left through their kept
//! ops.
//!
//! **Slot reuse.** Each member has a ring of [`RING`] slots per communicator, by step, each a
//! cache line (step, signature, an input of up to [`INLINE_BYTES`]) and a kept op, and a ring of
//! [`DATA_RING`] data areas of [`EAGER_BYTES`] for larger inputs. A member fills its slot for
//! step `t` only once every member's `done` covers step `t - RING`, or `t - DATA_RING` for an
//! input that needs an area (the previous use of either, `LocalBackend::slot_free`); otherwise
//! the step runs in place. Without broadcasts that leave early this always holds (completing
//! step `t - 1` needs every member past `t - 2`); with them it is what keeps a slot or an area
//! from being refilled while a peer reads it, and the ring's depth is how far a root runs ahead.
//!
//! **Broadcasts and scatters leave early.** A non-root of a small broadcast or scatter needs only
//! the root's data, and the root needs nothing from anyone: so a member completes such a step as
//! soon as the root's slot holds it with its own signature (a non-root), or at once (a root
//! making the call alone, after copying a scatter's own part), as MPI's eager broadcast and
//! NCCL's LL protocol let a rank go. What that gives up, and how it is restored:
//!
//! * *Members still read a member that left.* Each such slot also keeps a copy of the
//!   member's op ([`EagerSlot::kept`]), its buffers pointing into the slot; members that run
//!   the step in place, and mismatch reports, read that copy instead of the member's published
//!   run (which it may since have replaced). The root's copy is what in-place members copy
//!   from.
//! * *Nobody compared everyone.* A non-root compares itself with the root only; a root that
//!   left compared nothing. So a root that leaves keeps its `done` below the step until it has
//!   compared every member's op for it (`LocalBackend::settle_group`, in every later pass and at
//!   the rank's return): members that ran the step in place wait for that `done`, and nobody
//!   refills a slot of the step before it — a disagreement is still reported, from the full
//!   descriptions, before any slot of the step is reused. A member other than the root whose
//!   `done` passed the step agreed with the root (eagerly, by signature; in place, only after
//!   the root's check), so the root compares only steps some member has not finished.
//! * *The model says a collective blocks until every member arrives.* A rank that left a
//!   broadcast early waits, before any call other than another broadcast on that communicator
//!   and before it returns, until every member is done with it (`LocalBackend::settle`): so a
//!   member that never comes, a deadlock behind the broadcast, or a disagreement is reported
//!   where the verifier would put it, on every rank. A member that completes such a step wakes
//!   the others, who may be waiting for its `done`.
//!
//! **Disagreement.** Signatures are exact encodings of what [`OpDesc::agrees_with`] compares, so
//! unequal signatures are a collective mismatch, reported from the full descriptions as the
//! in-place path does (every member finds it; nobody leaves the step).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};

use smallvec::SmallVec;

use crate::element::with_dtype;
use crate::exec::{Buf, Op};
use crate::model::OpKind;

use super::pack::{NO_KEY, shape_key};

/// The largest input an eager step carries, in bytes (a data area's size): a broadcast's or a
/// scatter's, whose members leave as soon as the root's data is there, and any step's once
/// ranks outnumber cores, where an in-place step's round trip costs context switches that dwarf
/// the copying (world 4 on two cores, 2 KiB: broadcast 6.96 µs in place, 0.82 eagerly;
/// all_reduce 6.64 and 4.25; `docs/decisions.md`, session 38). Under Miri, 32: the same code,
/// at sizes its interpretation gets through (the tests probe both sides of the limits).
pub(crate) const EAGER_BYTES: usize = if cfg!(miri) { 32 } else { 4096 };

/// The largest input of an eager step whose members all wait for each other (every kind but a
/// broadcast or scatter) while every rank has a core of its own. Above it the in-place path,
/// where each member moves 1/n of the data rather than all of it, is faster (world 2, 4 KiB:
/// all_reduce 0.91 µs in place, 1.50 eagerly).
pub(crate) const EAGER_SHARED_BYTES: usize = if cfg!(miri) { 32 } else { 1024 };

/// The eager limit of a step of `kind` (see [`EAGER_BYTES`], [`EAGER_SHARED_BYTES`]); `crowded`:
/// the world has more ranks than cores. Every member of a communicator computes the same.
#[inline(always)]
pub(crate) fn limit(kind: OpKind, crowded: bool) -> usize {
    if crowded || matches!(kind, OpKind::Broadcast | OpKind::Scatter) {
        EAGER_BYTES
    } else {
        EAGER_SHARED_BYTES
    }
}

/// Eager slots per member and communicator: how far a broadcast's root may run ahead of its
/// slowest member. Deep, because the slots are small (a cache line and a kept op): with ranks
/// outnumbering cores, a root that can run further before it must give up its core for its
/// members makes fewer context switches per call (a loop of 8-byte broadcasts at world 4 on two
/// cores: 64 slots 225–361 ns a call, 256 205, 512 175; `BENCHMARKS.md`). Under Miri, 8: the
/// tests it can get through then still wrap the ring.
pub(crate) const RING: u64 = if cfg!(miri) { 8 } else { 512 };

/// Inputs of at most this many bytes travel in the slot's first cache line, with its step and
/// signature; larger ones in the member's [`EagerData`] for the step.
pub(crate) const INLINE_BYTES: usize = 24;

/// Data areas per member and communicator, for inputs larger than [`INLINE_BYTES`]: a step with
/// one may run at most this far ahead of the slowest member (their four kilobytes each are what
/// would make a deep ring costly; 32 made a loop of 1 KiB broadcasts at world 4 on two cores
/// 0.78–0.90 µs a call against 0.64–0.78 with 64). Divides [`RING`], so a slot always uses the
/// same area. Under Miri, 4: the tests wrap both rings.
pub(crate) const DATA_RING: u64 = if cfg!(miri) { 4 } else { 64 };

const _: () = assert!(RING.is_multiple_of(DATA_RING) && INLINE_BYTES <= EAGER_BYTES);

/// How many steps ahead a member that found its root's slot filled asks for the root's slot of
/// a later step (see [`EagerSlot::prefetch`]). A root that loops over small broadcasts runs
/// ahead of its members (it waits for nobody), so a member reads each of its slots after the
/// root wrote it: one miss to the root's core a call, which took most of the member's time, and
/// made the member the side that bounds the loop. Asked for early, the line is there when the
/// member comes to it. Eight steps: 8-byte broadcasts at world 2 took 74–88 ns a call on the
/// member without it, 48–51 with it (2: 46–50, 16: 49–50; `docs/decisions.md`, session 46).
pub(crate) const FOLLOW_AHEAD: u64 = 8;

/// How many steps apart two uses of the storage of an eager step with an input of `bytes` bytes
/// are: a member may fill its slot for step `t` once every member has finished step
/// `t - ring_for(bytes)`.
#[inline(always)]
pub(crate) fn ring_for(bytes: usize) -> u64 {
    if in_line(bytes) { RING } else { DATA_RING }
}

/// Whether an input of `bytes` bytes travels in its slot's line rather than a data area: the one
/// rule both where [`EagerSlot::fill`] puts it and how far [`ring_for`] lets it run ahead follow.
#[inline(always)]
fn in_line(bytes: usize) -> bool {
    bytes <= INLINE_BYTES
}

/// What agreement compares, as three words: equal signatures mean agreeing descriptions.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Sig([u64; 3]);

impl Sig {
    /// The signature of a description that can go eagerly, or `None`: a collective (those
    /// that split or concatenate only if their parts are contiguous), an input within its
    /// kind's [`limit`] (`crowded`: ranks outnumber cores), a shape with an exact key.
    #[inline(always)]
    pub(crate) fn of(op: &Op, crowded: bool) -> Option<Sig> {
        let d = &op.desc;
        let bytes = op.input.len.checked_mul(d.dtype.size())?;
        let eligible = match d.kind {
            OpKind::AllReduce | OpKind::Reduce | OpKind::Broadcast | OpKind::Barrier => true,
            // The parts of the split or concatenated tensor are contiguous only if nothing
            // comes before `dim`.
            OpKind::AllGather
            | OpKind::Gather
            | OpKind::Scatter
            | OpKind::ReduceScatter
            | OpKind::AllToAll => d.shape.iter().take(d.dim).all(|&s| s == 1),
            OpKind::Send | OpKind::Recv => false,
        };
        let fits = bytes <= limit(d.kind, crowded);
        if !eligible || !fits {
            return None;
        }
        Sig::exact(op, shape_key)
    }

    /// The signature of `op`'s description with its shape encoded by `key` (injective, or
    /// [`NO_KEY`]), whatever its size: `None` for a description that has no exact one, or
    /// buffers on a device.
    #[inline(always)]
    pub(crate) fn exact(op: &Op, key: impl FnOnce(&[usize]) -> u64) -> Option<Sig> {
        let d = &op.desc;
        if op.input.on_device || op.output.on_device {
            return None;
        }
        let barrier = d.kind == OpKind::Barrier;
        let key = if barrier { 0 } else { key(&d.shape) };
        let peer = match d.peer {
            None => 0,
            Some(p) => u32::try_from(p).ok()? as u64 + 1,
        };
        let dim = if d.kind.has_dim() { d.dim } else { 0 };
        if key == NO_KEY || dim >= 16 {
            return None;
        }
        let kind = d.kind as u64;
        let dtype = if barrier { 0 } else { d.dtype as u64 + 1 };
        let (op_tag, scale) = match d.op {
            None => (0, 0),
            Some(crate::ReduceOp::PreMulSum(s)) => (1, s.to_bits()),
            Some(o) => (
                2 + crate::ReduceOp::ALL.iter().position(|&x| x == o)? as u64,
                0,
            ),
        };
        // 4 bits each for kind, dtype, op and dim (every one has fewer than 16 values; kinds and
        // dtypes by discriminant), then
        // the root + 1 in the high half.
        let w0 = kind | dtype << 4 | op_tag << 8 | (dim as u64) << 12 | peer << 32;
        Some(Sig([w0, key, scale]))
    }

    /// The signature's three words: the description's kind, element type, reduction,
    /// dimension and root; the shape's key; a pre-multiplied sum's scale (0 for any other).
    pub(crate) fn words(self) -> [u64; 3] {
        self.0
    }

    /// Whether the signature is a broadcast's or a scatter's — calls whose non-roots need only
    /// the root's data and whose root needs nothing — whose members may leave the step early
    /// and so keep a copy of their op in the slot (module docs).
    pub(crate) fn leaves_early(self) -> bool {
        let kind = self.0[0] & 0xf;
        kind == OpKind::Broadcast as u64 || kind == OpKind::Scatter as u64
    }
}

/// One member's eager slot for one step of its ring: the step, the signature, where the input
/// is, and a small input itself, all in the first cache line (a larger input lives in the
/// member's [`EagerData`] for the step).
#[repr(C, align(64))]
pub(crate) struct EagerSlot {
    /// One past the step the slot holds (Release after the body; readers Acquire).
    seq: AtomicU64,
    body: UnsafeCell<Body>,
}

#[repr(C)]
struct Body {
    sig: Sig,
    /// Where this step's input is: `inline`, or the member's data area for the step.
    data: *const u8,
    /// An input of at most [`INLINE_BYTES`] (8-byte aligned: offset 40 of the slot).
    inline: [u8; INLINE_BYTES],
    /// The signature of the step `kept` was made for.
    kept_sig: Sig,
    /// The member's op for the last step with a signature that leaves early that used this
    /// slot, its buffers pointing at that step's data: current only while `sig` leaves early
    /// (other steps leave it in place, so that a loop mixing them with broadcasts does not
    /// drop and rebuild it at every use).
    kept: Option<Op>,
}

impl Default for EagerSlot {
    fn default() -> Self {
        EagerSlot {
            seq: AtomicU64::new(0),
            body: UnsafeCell::new(Body {
                sig: Sig([0; 3]),
                data: std::ptr::null(),
                inline: [0; INLINE_BYTES],
                kept_sig: Sig([0; 3]),
                kept: None,
            }),
        }
    }
}

// SAFETY: `body` is written only by the slot's member, before it stores `seq` (Release), and
// read by peers only after they load that `seq` (Acquire); the member rewrites it only for a
// later step, once every peer has finished the step it holds (module docs, "Slot reuse"). The
// data pointer and the kept op's buffers point into the slot itself or the member's data area
// for the step, which follows the same rule.
unsafe impl Sync for EagerSlot {}
// SAFETY: the data pointer only ever points into the world's own slots and areas, which move
// between threads with the slot (as the kept op's buffers, already `Send`, do).
unsafe impl Send for EagerSlot {}

/// A member's storage for an eager input larger than [`INLINE_BYTES`]; one per [`DATA_RING`]
/// steps.
#[repr(C, align(64))]
pub(crate) struct EagerData(UnsafeCell<[u8; EAGER_BYTES]>);

impl EagerData {
    /// `len` zeroed areas, from zeroed memory: the system maps those pages on first write, so
    /// a communicator whose calls never need an area (most: scalars travel in the slots, and
    /// large calls in place) costs no memory for its 256 KiB per member.
    pub(crate) fn ring(len: usize) -> Box<[EagerData]> {
        // (`Box::new_zeroed_slice` does this, but is newer than the crate's minimum Rust.)
        let layout = match std::alloc::Layout::array::<EagerData>(len) {
            Ok(l) if l.size() > 0 => l,
            Ok(_) => return Box::default(),
            Err(_) => panic!("{len} eager data areas do not fit in memory"),
        };
        // SAFETY: the layout's size is not zero.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<EagerData>();
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: `ptr` is a fresh allocation by the global allocator with the layout of `len`
        // areas, which the box frees with that layout; an area is an `UnsafeCell` of bytes,
        // for which all zeroes is a valid value, so every element is initialised.
        unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) }
    }
}

// SAFETY: as for `EagerSlot`: written by its member before the `seq` of the slot that points
// at it is stored (Release), read by peers after they load it (Acquire), rewritten only once
// every peer has finished the step (`ring_for`).
unsafe impl Sync for EagerData {}

impl EagerSlot {
    /// Fills the slot for `step` with `sig` and `op`'s input (in the slot, or in the data area
    /// `area` gives if it is larger than [`INLINE_BYTES`]: looked up only then).
    ///
    /// # Safety
    /// The caller is the slot's member, `area` gives its data area for `step`, and every peer has
    /// finished the previous step that used either (`ring_for`; module docs); `op`'s input is a
    /// live host buffer of the size `sig` was made for (at most [`EAGER_BYTES`]).
    #[inline(always)]
    pub(crate) unsafe fn fill<'a>(
        &self,
        step: u64,
        sig: Sig,
        op: &Op,
        area: impl FnOnce() -> &'a EagerData,
    ) {
        let bytes = op.input.len * op.desc.dtype.size();
        let body = self.body.get();
        // SAFETY: no peer reads the body or the area now (contract). Written in place, through
        // raw pointers: only the first `bytes` of the data are read for this step (equal
        // signatures, equal sizes), so the rest is left as it is.
        unsafe {
            (&raw mut (*body).sig).write(sig);
            let data = if in_line(bytes) {
                (&raw mut (*body).inline).cast::<u8>()
            } else {
                area().0.get().cast::<u8>()
            };
            (&raw mut (*body).data).write(data);
            // The input holds `bytes` (≤ EAGER_BYTES) bytes (contract); the data has room. A
            // missing input (a non-root's scatter) is a null pointer: nothing to copy.
            copy_small(op.input.ptr.cast_const(), data, bytes);
            // A member that may leave early (a broadcast's, a scatter's) may go before peers
            // are done with its op: they read this copy, whose buffers are the step's data,
            // never the member's tensors (a root's input is all its peers read from it).
            // A loop of the same broadcast finds its copy there already: rewriting it would
            // cost more than the step's data.
            // If the kept op was made for the same signature (an exact encoding of everything
            // but the group, which is the slot's, and the site), only the site, the sizes and
            // where the data is are left to compare.
            // (Compared field by field, without closures: their captures went to the stack,
            // stores that wait behind the slot's.)
            if sig.leaves_early() {
                let input = at_data(op.input, data);
                let same = (*body).kept_sig == sig
                    && (*body).kept.as_ref().is_some_and(|k| {
                        crate::exec::same_site(&k.desc.site, &op.desc.site)
                            && k.input.len == op.input.len
                            && k.output.len == op.output.len
                            && k.input.ptr == input.ptr
                    });
                if !same {
                    keep(body, sig, op, input, at_data(op.output, data));
                }
            }
        }
        self.seq.store(step + 1, Ordering::Release);
    }

    /// The op the member kept in the slot for `step` (a broadcast's or a scatter's: see the
    /// module docs), if the slot holds that step and kept one.
    ///
    /// # Safety
    /// The caller has seen (with `Acquire`) that the member posted `step` or filled this slot
    /// for it, and the slot cannot be refilled while the reference lives: the caller has not
    /// finished `step` (or, a root that left it, has not yet released it).
    pub(crate) unsafe fn kept(&self, step: u64) -> Option<&Op> {
        if self.seq.load(Ordering::Acquire) != step + 1 {
            return None;
        }
        // SAFETY: filled before `seq` (Acquire above), stable by the contract.
        let body = unsafe { &*self.body.get().cast_const() };
        // A step that does not leave early keeps nothing: an op left from an earlier one is not
        // this step's.
        if body.sig.leaves_early() {
            body.kept.as_ref()
        } else {
            None
        }
    }

    /// Asks the core to bring the slot's first line — its step, signature and in-line input —
    /// into its cache, ahead of a [`EagerSlot::read`] (see [`FOLLOW_AHEAD`]). If the member has
    /// not written the slot yet, the line is only fetched again when it has.
    #[inline(always)]
    pub(crate) fn prefetch(&self) {
        super::prefetch::line(self);
    }

    /// The slot's signature and input if it holds `step`.
    pub(crate) fn read(&self, step: u64) -> Option<(Sig, *const u8)> {
        if self.seq.load(Ordering::Acquire) != step + 1 {
            return None;
        }
        let body = self.body.get().cast_const();
        // SAFETY: the member filled the body before storing `seq` (Acquire above) and will not
        // touch it or the data it points at again before we finish this step (module docs). A
        // raw pointer to the data, not a reference: it stays valid (slots and areas live as
        // long as the world).
        unsafe { Some(((*body).sig, (*body).data)) }
    }
}

/// `b` pointing at an eager step's `data` (a missing buffer stays missing).
#[inline(always)]
fn at_data(b: Buf, data: *mut u8) -> Buf {
    if b.is_none() {
        b
    } else {
        Buf { ptr: data, ..b }
    }
}

/// Keeps a copy of `op` in the slot body (see [`EagerSlot::fill`]), its buffers `input` and
/// `output` pointing at the step's data, made for signature `sig`. Out of line: a loop of the
/// same call finds its copy there already.
///
/// # Safety
/// As for [`EagerSlot::fill`]: no peer reads the body now.
#[inline(never)]
unsafe fn keep(body: *mut Body, sig: Sig, op: &Op, input: Buf, output: Buf) {
    // SAFETY: the caller's contract.
    unsafe {
        (*body).kept = Some(Op {
            desc: op.desc.clone(),
            input,
            output,
        });
        (*body).kept_sig = sig;
    }
}

/// Computes member `me`'s output of an eager step from every member's input, in member order
/// — what the in-place path computes, by the same kernels.
///
/// # Safety
/// `inputs` holds every member's input for the step (their signatures equal `op`'s, so they
/// have `op`'s size), readable for the call; `op` is this member's validated op, its output
/// writable by this call alone.
pub(crate) unsafe fn complete(op: &Op, inputs: &[*const u8], root: usize, me: usize) {
    fail_point!("kernel");
    let desc = &op.desc;
    let n = inputs.len();
    let es = desc.dtype.size();
    let numel = op.input.len;
    match desc.kind {
        OpKind::AllReduce | OpKind::Reduce => {
            if numel == 0 || (desc.kind == OpKind::Reduce && me != root) {
                return;
            }
            let red = desc.op.unwrap_or(crate::ReduceOp::Sum);
            with_dtype!(desc.dtype, T => {
                // SAFETY: every input holds `numel` elements, our output too, and no input
                // aliases it (they are copies in the slots).
                unsafe { reduce_into::<T>(red, inputs, op.output.ptr, numel) }
            })
        }
        OpKind::Broadcast if me != root => {
            // SAFETY: the root's input and our output hold `numel` elements; distinct.
            unsafe { copy_small(inputs[root], op.output.ptr, numel * es) };
        }
        // SAFETY: every input holds one part (equal signatures), the output `n` (validated).
        OpKind::AllGather => unsafe { gather_parts(op, inputs, numel * es) },
        // SAFETY: as for all_gather; only the root has an output.
        OpKind::Gather if me == root => unsafe { gather_parts(op, inputs, numel * es) },
        OpKind::Scatter => {
            let part = op.output.len * es;
            // SAFETY: the root's input holds `n` parts of `part` bytes (signature: the root's
            // input is exactly that), contiguous (`Sig::of`); our output holds one part.
            unsafe {
                std::ptr::copy_nonoverlapping(inputs[root].add(me * part), op.output.ptr, part)
            };
        }
        OpKind::AllToAll => {
            let part = numel * es / n;
            for (j, &input) in inputs.iter().enumerate() {
                // SAFETY: every input and our output hold `n` contiguous parts of `part` bytes
                // (equal signatures: equal shapes; `Sig::of`); part `me` of member j's input
                // goes to part j of our output.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        input.add(me * part),
                        op.output.ptr.add(j * part),
                        part,
                    )
                };
            }
        }
        OpKind::ReduceScatter => {
            let part = numel / n;
            if part == 0 {
                return;
            }
            let srcs: SmallVec<[*const u8; 8]> =
                // SAFETY: part `me` lies within every input (`n` contiguous parts).
                inputs.iter().map(|&x| unsafe { x.add(me * part * es) }).collect();
            let red = desc.op.unwrap_or(crate::ReduceOp::Sum);
            with_dtype!(desc.dtype, T => {
                // SAFETY: every source holds `part` elements, our output too, and no source
                // aliases it (they are copies in the slots).
                unsafe { reduce_into::<T>(red, &srcs, op.output.ptr, part) }
            })
        }
        _ => {}
    }
}

/// A broadcast's or a scatter's non-root output (member `me`), from the root's slot: what
/// [`complete`] does for it, without the other members' inputs, which it does not need.
///
/// # Safety
/// `data` holds the root's input for `op`'s step (its signature equals `op`'s, so it has the
/// size `op`'s description gives the root's input) and stays readable for the call; `op`'s
/// output is writable by this call alone.
pub(crate) unsafe fn copy_from(op: &Op, data: *const u8, me: usize) {
    fail_point!("kernel");
    let bytes = op.output.len * op.desc.dtype.size();
    // A scatter's part `me` of the root's input (contiguous: `Sig::of`); a broadcast's whole.
    let at = if op.desc.kind == OpKind::Scatter {
        me * bytes
    } else {
        0
    };
    // SAFETY: the contract; `at + bytes` is within the root's input; the slot's data is not
    // our output.
    unsafe { copy_small(data.add(at), op.output.ptr, bytes) };
}

/// Copies `bytes` bytes. The scalars that make up most eager steps (4 and 8 bytes) as one
/// move each: a call into `memcpy` costs more than the step's data.
///
/// # Safety
/// As for [`std::ptr::copy_nonoverlapping`]: `src` readable and `dst` writable for `bytes`
/// bytes, not overlapping (nothing is read or written when `bytes` is 0).
#[inline(always)]
unsafe fn copy_small(src: *const u8, dst: *mut u8, bytes: usize) {
    // SAFETY: the contract, for each constant size the match selects.
    unsafe {
        match bytes {
            0 => {}
            4 => std::ptr::copy_nonoverlapping(src, dst, 4),
            8 => std::ptr::copy_nonoverlapping(src, dst, 8),
            _ => std::ptr::copy_nonoverlapping(src, dst, bytes),
        }
    }
}

/// Reduces `inputs` into `out`, in member order, with the operations the in-place kernels
/// apply (`Reducer`: start, combine each further input, finish), so both paths give the same
/// bits. At most [`EAGER_BYTES`] of elements: straight into the output, no blocking.
///
/// # Safety
/// Every input holds `numel` elements of `T`, aligned (slot data is 8-byte aligned); `out`
/// holds `numel`, is written by this call alone and aliases no input.
unsafe fn reduce_into<T: crate::element::Arith>(
    red: crate::ReduceOp,
    inputs: &[*const u8],
    out: *mut u8,
    numel: usize,
) {
    let r = crate::reduce::Reducer::<T>::new(red, inputs.len());
    // SAFETY: the contract.
    let acc = unsafe { std::slice::from_raw_parts_mut(out.cast::<T>(), numel) };
    for (j, &x) in inputs.iter().enumerate() {
        // SAFETY: the contract; `x` is not `out`.
        let x = unsafe { std::slice::from_raw_parts(x.cast::<T>(), numel) };
        if j == 0 {
            acc.copy_from_slice(x);
            r.start(acc);
        } else {
            r.combine(acc, x);
        }
    }
    r.finish(acc);
}

/// Writes every member's input, in member order, as the contiguous parts of `op`'s output.
///
/// # Safety
/// As for [`complete`]: every input holds `part` bytes and the output `inputs.len()` parts.
unsafe fn gather_parts(op: &Op, inputs: &[*const u8], part: usize) {
    for (j, &input) in inputs.iter().enumerate() {
        // SAFETY: the output holds `n` parts of `part` bytes, laid out in member order
        // (nothing comes before `dim`: `Sig::of`); every input holds one part.
        unsafe { std::ptr::copy_nonoverlapping(input, op.output.ptr.add(j * part), part) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn a_slot_is_one_line_for_small_inputs_and_four_in_all() {
        // The step, the signature, the data pointer and a small input share the first line: a
        // non-root of a small broadcast reads one line of its root per step.
        let inline = offset_of!(EagerSlot, body) + offset_of!(Body, inline);
        assert_eq!(inline + INLINE_BYTES, 64);
        assert_eq!(
            inline % 8,
            0,
            "inline inputs must be 8-byte aligned for the kernels"
        );
        // The ring's memory (`docs/decisions.md`, "Small slots, a deep ring", session 38): 512
        // slots of four lines and 64 areas of 4 KiB (mapped when first written) per member and
        // communicator.
        assert!(size_of::<EagerSlot>() <= 256, "{}", size_of::<EagerSlot>());
        assert_eq!(size_of::<EagerData>(), EAGER_BYTES.next_multiple_of(64));
    }

    #[test]
    fn inputs_that_fit_the_line_take_the_deep_ring() {
        assert_eq!(ring_for(0), RING);
        assert_eq!(ring_for(INLINE_BYTES), RING);
        assert_eq!(ring_for(INLINE_BYTES + 1), DATA_RING);
        assert_eq!(ring_for(EAGER_BYTES), DATA_RING);
    }
}
