//! Each op as a short sequence of non-blocking MPI calls ("phases") with local work between
//! them: packing a non-leading dimension into member blocks, unpacking after, and reductions,
//! which run in rankwise's own kernels in member order — so every backend computes
//! `((x0 ∘ x1) ∘ x2) ∘ …` and gets the same bits, for every dtype and operator (MPI's own
//! reductions may associate differently, and have no f16/bf16).
//!
//! Reductions move data like a ring all-reduce without its latency chain: small tensors are
//! all-gathered and folded by every member (one call); large ones are exchanged all-to-all in
//! member-owned chunks, folded, and all-gathered (two calls, each moving `(n - 1)/n` of the
//! tensor per member — the bandwidth of MPI's own large-message algorithms). Among 2 to 8
//! members a large all_reduce does the same with point-to-point messages on the group's second
//! communicator instead of MPI's collectives. (Small collectives and large gathers and
//! scatters among a few members do not come here: see `eager`.)

use std::ffi::c_int;

// The tags of a direct all_reduce's two rounds, defined with the exchanges' (see `eager`).
use super::eager::{SHARE, SPREAD};
use super::raw::{self, Comm, Request};
use crate::element::with_dtype;
use crate::error::Result;
use crate::exec::Op;
use crate::model::OpKind;
use crate::reduce::Reducer;
use crate::rules::rows;

/// Tensors up to this size are reduced by all-gather and fold (one call, `n`× the data);
/// larger ones by chunked all-to-all, fold and all-gather (two calls, ring bandwidth).
const SMALL_REDUCE_BYTES: usize = 16 * 1024;

/// Groups up to this many members run large all_reduces as direct messages.
const DIRECT_MEMBERS: usize = 8;

/// The phase of an op whose last call needs no local work after it.
const DONE: u8 = u8::MAX;
/// The phase of a small reduction after its all-gather: the fold.
const FOLD: u8 = 10;

/// 8-byte-aligned scratch memory (every dtype's alignment divides 8).
///
/// Buffers come from a per-thread pool and return to it when dropped: large fresh allocations
/// cost a page fault per 4 KiB (and zeroing), which at 16 MiB is more than the transfer.
#[derive(Default)]
pub(super) struct Scratch(Vec<u64>);

/// Buffers kept for reuse, and the most bytes the pool holds.
const POOL_BUFFERS: usize = 8;
const POOL_BYTES: usize = 512 << 20;

thread_local! {
    static POOL: std::cell::RefCell<Vec<Vec<u64>>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Scratch {
    pub(super) fn with_bytes(bytes: usize) -> Result<Self> {
        let words = bytes.div_ceil(8);
        // The smallest pooled buffer that is large enough; its contents are initialised (by its
        // first use), so it needs no zeroing.
        let reused = POOL.with(|p| {
            let mut p = p.borrow_mut();
            let best = p
                .iter()
                .enumerate()
                .filter(|(_, v)| v.len() >= words)
                .min_by_key(|(_, v)| v.len())
                .map(|(i, _)| i);
            best.map(|i| p.swap_remove(i))
        });
        if let Some(v) = reused {
            return Ok(Scratch(v));
        }
        let mut v = Vec::new();
        v.try_reserve_exact(words).map_err(|_| {
            crate::error::Error::Tensor(format!("cannot allocate {bytes} bytes of scratch for MPI"))
        })?;
        v.resize(words, 0);
        Ok(Scratch(v))
    }

    /// The scratch in `spare` if it holds at least `bytes`, else [`Self::with_bytes`]: a
    /// caller that makes the same exchange call after call keeps its buffers at hand.
    pub(super) fn reuse(spare: Option<Scratch>, bytes: usize) -> Result<Self> {
        match spare {
            Some(s) if s.0.len() * 8 >= bytes => Ok(s),
            _ => Self::with_bytes(bytes),
        }
    }

    pub(super) fn ptr(&mut self) -> *mut u8 {
        self.0.as_mut_ptr().cast()
    }

    /// The scratch as bytes.
    pub(super) fn bytes(&self) -> &[u8] {
        // SAFETY: initialised u64s are initialised bytes; u8 has alignment 1.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast(), self.0.len() * 8) }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.0);
        if v.is_empty() {
            return;
        }
        // `try_with`: a scratch dropped while the thread is being torn down is simply freed.
        let _ = POOL.try_with(|p| {
            let mut p = p.borrow_mut();
            let held: usize = p.iter().map(|v| v.len() * 8).sum();
            if p.len() < POOL_BUFFERS && held + v.len() * 8 <= POOL_BYTES {
                p.push(v);
            }
        });
    }
}

/// Where one member's data sits in a concatenation.
#[derive(Default)]
struct Layout {
    counts: Vec<c_int>,
    displs: Vec<c_int>,
}

impl Layout {
    /// `total` elements cut into `n` nearly equal consecutive chunks (the first ones longer).
    fn chunks(total: usize, n: usize) -> Result<Self> {
        let (base, extra) = (total / n, total % n);
        let mut l = Layout::default();
        let mut at = 0;
        for j in 0..n {
            let c = base + usize::from(j < extra);
            l.counts.push(raw::count(c)?);
            l.displs.push(raw::count(at)?);
            at += c;
        }
        Ok(l)
    }

    /// `n` blocks of `len` elements each, back to back.
    fn uniform(len: usize, n: usize) -> Result<Self> {
        let mut l = Layout::default();
        for j in 0..n {
            l.counts.push(raw::count(len)?);
            l.displs.push(raw::count(j * len)?);
        }
        Ok(l)
    }
}

/// How many MPI calls, one after another, `op` initiates (its phases): two for a large
/// reduction (exchange, then gather), one for everything else.
pub(super) fn mpi_phases(op: &Op) -> u8 {
    let d = &op.desc;
    let large = d.numel() * d.dtype.size() > SMALL_REDUCE_BYTES;
    if matches!(d.kind, OpKind::AllReduce | OpKind::Reduce) && large {
        2
    } else {
        1
    }
}

/// One collective in progress: which phase it is in and the memory its calls use (which must
/// outlive them, so it lives here until the op completes).
pub(super) struct Task {
    phase: u8,
    /// A large all_reduce among a few members, as direct messages (see `advance`).
    direct: bool,
    a: Scratch,
    b: Scratch,
    send: Layout,
    recv: Layout,
}

impl Task {
    pub(super) fn new() -> Self {
        Task {
            phase: 0,
            direct: false,
            a: Scratch::default(),
            b: Scratch::default(),
            send: Layout::default(),
            recv: Layout::default(),
        }
    }

    /// Runs the local work after the phase that just completed (none at the start) and posts
    /// the next phase's calls; an empty list means the op is complete.
    ///
    /// # Safety
    /// `op`'s buffers must be valid for its description (as `Ctx` guarantees) until the op is
    /// complete, and the returned requests must complete before `self` is dropped.
    pub(super) unsafe fn advance(
        &mut self,
        op: &Op,
        comm: &Comm,
        pairs: &Comm,
        me: usize,
        n: usize,
        root: usize,
    ) -> Result<Vec<Request>> {
        let d = &op.desc;
        let es = d.dtype.size();
        let ty = raw::datatype(d.dtype);
        let numel = d.numel();
        let phase = self.phase;
        self.phase = phase.saturating_add(1);
        let root_c = raw::count(root)?;
        // SAFETY: for every call below, the pointers are `op`'s buffers, valid for the sizes
        // its validated description implies, or scratch owned by `self`, sized here; the
        // caller keeps both alive until the requests complete.
        unsafe {
            match (d.kind, phase) {
                (OpKind::Barrier, 0) => Ok(vec![raw::ibarrier(comm)?]),
                (OpKind::Broadcast, 0) => Ok(vec![raw::ibcast(
                    op.output.ptr,
                    raw::count(numel)?,
                    ty,
                    root_c,
                    comm,
                )?]),
                (OpKind::AllGather | OpKind::Gather, 0) => {
                    let (outer, inner) = rows(&d.shape, d.dim);
                    let per = raw::count(outer * inner)?;
                    let rooted = d.kind == OpKind::Gather;
                    let direct = outer == 1;
                    let recv = if direct || (rooted && me != root) {
                        op.output.ptr
                    } else {
                        self.a = Scratch::with_bytes(n * outer * inner * es)?;
                        self.a.ptr()
                    };
                    let req = if rooted {
                        raw::igather(op.input.ptr, recv, per, ty, root_c, comm)?
                    } else {
                        raw::iallgather(op.input.ptr, recv, per, ty, comm)?
                    };
                    if direct {
                        self.phase = DONE; // nothing to unpack
                    }
                    Ok(vec![req])
                }
                (OpKind::AllGather | OpKind::Gather, 1) => {
                    if d.kind == OpKind::AllGather || me == root {
                        let (outer, inner) = rows(&d.shape, d.dim);
                        unpack(op.output.ptr, self.a.ptr(), n, outer, inner * es);
                    }
                    Ok(Vec::new())
                }
                (OpKind::Scatter, 0) => {
                    let (outer, inner) = rows(&d.shape, d.dim);
                    let send = if me != root || outer == 1 {
                        op.input.ptr
                    } else {
                        self.a = Scratch::with_bytes(n * outer * inner * es)?;
                        pack(self.a.ptr(), op.input.ptr, n, outer, inner * es);
                        self.a.ptr()
                    };
                    Ok(vec![raw::iscatter(
                        send,
                        op.output.ptr,
                        raw::count(outer * inner)?,
                        ty,
                        root_c,
                        comm,
                    )?])
                }
                (OpKind::AllToAll | OpKind::ReduceScatter, 0) => {
                    let (outer, row) = rows(&d.shape, d.dim);
                    let chunk = row / n;
                    let per = outer * chunk;
                    let send = if outer == 1 {
                        op.input.ptr
                    } else {
                        self.a = Scratch::with_bytes(n * per * es)?;
                        pack(self.a.ptr(), op.input.ptr, n, outer, chunk * es);
                        self.a.ptr()
                    };
                    let direct = d.kind == OpKind::AllToAll && outer == 1;
                    let recv = if direct {
                        op.output.ptr
                    } else {
                        self.b = Scratch::with_bytes(n * per * es)?;
                        self.b.ptr()
                    };
                    if direct {
                        self.phase = DONE;
                    }
                    Ok(vec![raw::ialltoall(
                        send,
                        recv,
                        raw::count(per)?,
                        ty,
                        comm,
                    )?])
                }
                (OpKind::AllToAll, 1) => {
                    let (outer, row) = rows(&d.shape, d.dim);
                    unpack(op.output.ptr, self.b.ptr(), n, outer, row / n * es);
                    Ok(Vec::new())
                }
                (OpKind::ReduceScatter, 1) => {
                    let (outer, row) = rows(&d.shape, d.dim);
                    fold(op, self.b.ptr(), n, outer * (row / n), op.output.ptr);
                    Ok(Vec::new())
                }
                // A large all_reduce among 2 to 8 members: each member's chunk of every
                // member's tensor goes straight to it (`pairs`, point to point), it folds them,
                // and its folded chunk goes straight into every member's output — each byte
                // crosses twice, as in a ring, in two rounds instead of 2(n - 1) steps.
                (OpKind::AllReduce, 0)
                    if numel * es > SMALL_REDUCE_BYTES && (2..=DIRECT_MEMBERS).contains(&n) =>
                {
                    self.direct = true;
                    self.send = Layout::chunks(numel, n)?;
                    let (counts, displs) = (&self.send.counts, &self.send.displs);
                    let mine = counts[me] as usize;
                    // Block `me` stays unused: our own chunk is folded where it is (phase 1).
                    self.a = Scratch::with_bytes(n * mine * es)?;
                    let a = self.a.ptr();
                    let chunk = |j: usize| displs[j] as usize * es;
                    let input = op.input.ptr;
                    pair_round(n, me, ty, SPREAD, pairs, |j| {
                        (
                            a.add(j * mine * es),
                            counts[me],
                            input.add(chunk(j)),
                            counts[j],
                        )
                    })
                }
                (OpKind::AllReduce, 1) if self.direct => {
                    let (counts, displs) = (&self.send.counts, &self.send.displs);
                    let mine = counts[me] as usize;
                    let chunk = |j: usize| displs[j] as usize * es;
                    let out = op.output.ptr;
                    let (a, own) = (self.a.ptr(), op.input.ptr.add(chunk(me)));
                    let parts: Vec<*const u8> = (0..n)
                        .map(|j| if j == me { own } else { a.add(j * mine * es) }.cast_const())
                        .collect();
                    if own == out.add(chunk(me)) {
                        fold_into_own(op, &parts, me, mine, out.add(chunk(me)));
                    } else {
                        fold_parts(op, &parts, mine, out.add(chunk(me)));
                    }
                    pair_round(n, me, ty, SHARE, pairs, |j| {
                        (out.add(chunk(j)), counts[j], out.add(chunk(me)), counts[me])
                    })
                }
                (OpKind::AllReduce | OpKind::Reduce, 0) if numel * es <= SMALL_REDUCE_BYTES => {
                    let rooted = d.kind == OpKind::Reduce;
                    self.phase = FOLD;
                    let c = raw::count(numel)?;
                    if rooted && me != root {
                        return Ok(vec![raw::igather(
                            op.input.ptr,
                            std::ptr::null_mut(),
                            c,
                            ty,
                            root_c,
                            comm,
                        )?]);
                    }
                    self.a = Scratch::with_bytes(n * numel * es)?;
                    Ok(vec![if rooted {
                        raw::igather(op.input.ptr, self.a.ptr(), c, ty, root_c, comm)?
                    } else {
                        raw::iallgather(op.input.ptr, self.a.ptr(), c, ty, comm)?
                    }])
                }
                (OpKind::AllReduce | OpKind::Reduce, FOLD) => {
                    if d.kind == OpKind::AllReduce || me == root {
                        fold(op, self.a.ptr(), n, numel, op.output.ptr);
                    }
                    Ok(Vec::new())
                }
                (OpKind::AllReduce | OpKind::Reduce, 0) => {
                    // Chunk j of every member goes to member j, which folds it.
                    self.send = Layout::chunks(numel, n)?;
                    let mine = self.send.counts[me] as usize;
                    self.recv = Layout::uniform(mine, n)?;
                    self.a = Scratch::with_bytes(n * mine * es)?;
                    Ok(vec![raw::ialltoallv(
                        op.input.ptr,
                        &self.send.counts,
                        &self.send.displs,
                        self.a.ptr(),
                        &self.recv.counts,
                        &self.recv.displs,
                        ty,
                        comm,
                    )?])
                }
                (OpKind::AllReduce | OpKind::Reduce, 1) => {
                    let mine = self.send.counts[me] as usize;
                    self.b = Scratch::with_bytes(mine * es)?;
                    fold(op, self.a.ptr(), n, mine, self.b.ptr());
                    let c = raw::count(mine)?;
                    let (out, counts, displs) =
                        (op.output.ptr, &self.send.counts, &self.send.displs);
                    Ok(vec![if d.kind == OpKind::AllReduce {
                        raw::iallgatherv(self.b.ptr(), c, out, counts, displs, ty, comm)?
                    } else {
                        // Only the root's output is written; the others keep theirs.
                        let out = if me == root {
                            out
                        } else {
                            std::ptr::null_mut()
                        };
                        raw::igatherv(self.b.ptr(), c, out, counts, displs, ty, root_c, comm)?
                    }])
                }
                _ => Ok(Vec::new()),
            }
        }
    }
}

/// One round of a direct all_reduce: with every other member `j`, a receive into `at(j).0`
/// (`at(j).1` elements) and a send from `at(j).2` (`at(j).3` elements), tagged `tag`.
///
/// Once any request of the round is posted a failure cannot be returned (the caller would free
/// memory MPI still uses, and the requests could not be found again), so it ends the job.
///
/// # Safety
/// Every pointer is valid for its count of `ty` elements until the requests complete.
unsafe fn pair_round(
    n: usize,
    me: usize,
    ty: mpi::ffi::MPI_Datatype,
    tag: c_int,
    pairs: &Comm,
    at: impl Fn(usize) -> (*mut u8, c_int, *mut u8, c_int),
) -> Result<Vec<Request>> {
    let mut reqs = Vec::with_capacity(2 * (n - 1));
    for j in (0..n).filter(|&j| j != me) {
        let (into, rc, from, sc) = at(j);
        // SAFETY: the caller's contract.
        let posted = raw::count(j).and_then(|peer| unsafe {
            let r = raw::irecv(into, rc, ty, peer, Some(tag), pairs)?;
            reqs.push(r);
            raw::isend(raw::SendMode::Standard, from, sc, ty, peer, tag, pairs)
        });
        match posted {
            Ok(r) => reqs.push(r),
            Err(e) if reqs.is_empty() => return Err(e),
            Err(e) => super::launch::abort_job_with(&e),
        }
    }
    Ok(reqs)
}

/// Copies member blocks into row-major position: block `j` (`outer` rows of `width` bytes,
/// back to back in `src`) becomes columns `j·width..` of `dst`'s rows of `n·width` bytes.
///
/// # Safety
/// `src` holds `n·outer·width` bytes, `dst` as many, and they do not overlap.
unsafe fn unpack(dst: *mut u8, src: *const u8, n: usize, outer: usize, width: usize) {
    for j in 0..n {
        // SAFETY: block j of `src` and column block j of `dst`, both in bounds.
        unsafe {
            crate::exec::copy::copy_rows(
                dst.add(j * width),
                n * width,
                src.add(j * outer * width),
                width,
                outer,
                width,
            )
        }
    }
}

/// The inverse of [`unpack`]: column block `j` of `src`'s rows becomes block `j` of `dst`.
///
/// # Safety
/// As for [`unpack`], with the roles of `src` and `dst` swapped.
unsafe fn pack(dst: *mut u8, src: *const u8, n: usize, outer: usize, width: usize) {
    for j in 0..n {
        // SAFETY: column block j of `src` and block j of `dst`, both in bounds.
        unsafe {
            crate::exec::copy::copy_rows(
                dst.add(j * outer * width),
                width,
                src.add(j * width),
                n * width,
                outer,
                width,
            )
        }
    }
}

/// `dst[..len] = blocks[0] ∘ blocks[1] ∘ … ∘ blocks[n-1]`, left to right, with `op`'s reduce
/// operator: the order every rankwise backend uses.
///
/// # Safety
/// `blocks` holds `n·len` elements of the op's dtype, 8-byte aligned; `dst` holds `len`,
/// aligned for the dtype, and does not overlap `blocks`.
unsafe fn fold(op: &Op, blocks: *const u8, n: usize, len: usize, dst: *mut u8) {
    let es = op.desc.dtype.size();
    let parts: Vec<*const u8> = (0..n).map(|j| blocks.wrapping_add(j * len * es)).collect();
    // SAFETY: the caller's contract, cut into its `n` blocks.
    unsafe { fold_parts(op, &parts, len, dst) }
}

/// `dst[..len] = parts[0] ∘ parts[1] ∘ …`, left to right, with `op`'s reduce operator.
///
/// # Safety
/// Every part holds `len` elements of the op's dtype, aligned for it; `dst` holds `len`,
/// aligned, and overlaps no part.
pub(super) unsafe fn fold_parts(op: &Op, parts: &[*const u8], len: usize, dst: *mut u8) {
    // SAFETY: the caller's contract.
    unsafe { fold_blocks(op, parts, None, len, dst) }
}

/// [`fold_parts`] where `parts[me]` is `dst` itself (an in-place all_reduce's own chunk),
/// folded where it is: one pass over the chunk's memory less than copying it out first (~3 %
/// of a 1 MiB all_reduce at world 2).
///
/// # Safety
/// As for [`fold_parts`], except that `parts[me] == dst`.
pub(super) unsafe fn fold_into_own(
    op: &Op,
    parts: &[*const u8],
    me: usize,
    len: usize,
    dst: *mut u8,
) {
    // SAFETY: the caller's contract.
    unsafe { fold_blocks(op, parts, Some(me), len, dst) }
}

/// The fold of [`fold_parts`] and [`fold_into_own`], block by block; with `own = Some(me)`,
/// part `me` is `dst`, and each of its blocks is set aside in a small buffer before the block
/// of part 0 overwrites it, so the result keeps member order.
///
/// # Safety
/// As for [`fold_parts`], except that `parts[me] == dst` when `own` is `Some(me)`.
unsafe fn fold_blocks(op: &Op, parts: &[*const u8], own: Option<usize>, len: usize, dst: *mut u8) {
    /// Elements per block: 16 KiB at most, so a set-aside block stays in L1.
    const BLOCK: usize = 2048;
    let d = &op.desc;
    let rop = d.op.unwrap_or(crate::ReduceOp::Sum);
    with_dtype!(d.dtype, T => {
        let r = Reducer::<T>::new(rop, parts.len());
        // Two parts, our own the second: `acc = part 0 ∘ acc` in one pass, where setting our
        // block aside and copying part 0 in would take three (PreMulSum scales part 0 first).
        let second = parts.len() == 2
            && own == Some(1)
            && !matches!(rop, crate::ReduceOp::PreMulSum(_));
        let set_aside = own.is_some_and(|me| me != 0) && !second;
        let mut saved: Vec<T> = vec![T::default(); if set_aside { BLOCK.min(len) } else { 0 }];
        let mut at = 0;
        while at < len {
            let m = (len - at).min(BLOCK);
            // SAFETY: the caller's contract: every part holds `len` elements; `at + m <= len`.
            // Never called for part `own`, which is `dst`.
            let part = |p: *const u8| unsafe {
                std::slice::from_raw_parts((p as *const T).add(at), m)
            };
            // SAFETY: as above, for `dst`, which only this slice touches from here on (our own
            // part, if any, is read through `saved` once set aside).
            let acc = unsafe { std::slice::from_raw_parts_mut((dst as *mut T).add(at), m) };
            if second {
                r.combine_before(acc, part(parts[0]));
                r.finish(acc);
                at += m;
                continue;
            }
            if set_aside {
                saved[..m].copy_from_slice(acc);
            }
            if own != Some(0) {
                acc.copy_from_slice(part(parts[0]));
            }
            r.start(acc);
            for (j, &p) in parts.iter().enumerate().skip(1) {
                if Some(j) == own {
                    r.combine(acc, &saved[..m]);
                } else {
                    r.combine(acc, part(p));
                }
            }
            r.finish(acc);
            at += m;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Buf;
    use crate::model::{CallSite, GroupId, OpDesc, Shape};
    use crate::{DType, ReduceOp};

    fn all_reduce(dtype: DType, op: ReduceOp, len: usize) -> Op {
        Op {
            desc: OpDesc {
                kind: OpKind::AllReduce,
                group: GroupId::WORLD,
                peer: None,
                op: Some(op),
                dtype,
                shape: Shape::from_slice(&[len]),
                dim: 0,
                site: CallSite::caller(),
            },
            input: Buf::NONE,
            output: Buf::NONE,
        }
    }

    /// Folding a member's own chunk in place gives the bits the fold from separate parts
    /// gives, for every member position, on both sides of the block size, with the operators
    /// that have a first or last step (PreMulSum, Avg) and one that has neither.
    #[test]
    fn folding_into_the_own_chunk_matches_folding_from_parts() {
        for op in [
            ReduceOp::Sum,
            ReduceOp::PreMulSum(0.3),
            ReduceOp::Avg,
            ReduceOp::Max,
            ReduceOp::Min,
            ReduceOp::Prod,
        ] {
            let compares = matches!(op, ReduceOp::Min | ReduceOp::Max);
            for n in 2..=4 {
                for len in [1usize, 7, 2048, 2049, 5000] {
                    let o = all_reduce(DType::F32, op, len);
                    let inputs: Vec<Vec<f32>> = (0..n)
                        .map(|j| {
                            (0..len)
                                .map(|i| match (i * 5 + j) % 11 {
                                    // Min and Max compare: with a NaN or a signed zero, a
                                    // swapped operand order shows in the bits. (Arithmetic
                                    // leaves a produced NaN's payload unspecified in Rust.)
                                    0 if compares => f32::from_bits(0x7fc0_0001 + j as u32),
                                    1 if compares => [0.0, -0.0][j % 2],
                                    _ => ((i * 7 + j * 13) % 29) as f32 * 0.37 - 3.1,
                                })
                                .collect()
                        })
                        .collect();
                    let parts: Vec<*const u8> = inputs.iter().map(|v| v.as_ptr().cast()).collect();
                    let mut want = vec![0f32; len];
                    // SAFETY: every part and `want` hold `len` f32s; none overlap.
                    unsafe { fold_parts(&o, &parts, len, want.as_mut_ptr().cast()) };
                    for me in 0..n {
                        let mut own = inputs[me].clone();
                        let mut with_own = parts.clone();
                        with_own[me] = own.as_ptr().cast();
                        // SAFETY: as above, with part `me` being `own`, the destination.
                        unsafe { fold_into_own(&o, &with_own, me, len, own.as_mut_ptr().cast()) };
                        let same = own
                            .iter()
                            .zip(&want)
                            .all(|(a, b)| a.to_bits() == b.to_bits());
                        assert!(same, "{op:?}, {n} members, {len} elements, member {me}");
                    }
                }
            }
        }
    }
}
