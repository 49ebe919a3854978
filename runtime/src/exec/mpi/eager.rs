//! Small collectives as direct messages: each member sends every other member one message —
//! its call record followed by the data that member needs — and computes its results from what
//! arrives. One round, no schedule: Open MPI's non-blocking collectives (libnbc) cost 1–2 µs
//! per call in bookkeeping alone, more than moving a few bytes.
//!
//! The record doubles as the agreement check (so small collectives are always checked: it costs
//! nothing here) and carries the member's pack proposal. A member sends the data of its whole
//! proposed run, so once every record is in, each member knows the agreed run (the shortest
//! proposal, see `drive`) *and* already holds everyone's data for it: packing small collectives
//! costs no extra round. Data beyond the agreed run is ignored.
//!
//! Messages go over a communicator of their own per group (a duplicate made with the group's),
//! so they never meet point-to-point traffic, whose receives take any tag.

use super::drive::{RECORD, Records, record};
use super::raw::{self, Comm, Received, Request};
use super::steps::{Scratch, fold_parts};
use crate::error::{Error, Result};
use crate::exec::Op;
use crate::exec::copy::copy_rows;
use crate::model::{OpDesc, OpKind};
use crate::rules::rows;

/// Groups up to this many members run small collectives here (each member sends `n - 1`
/// messages, which beats a schedule only while `n` is small).
const MAX_MEMBERS: usize = 8;
/// A collective is small when its tensor is at most this many bytes.
const SMALL: usize = 16 * 1024;
/// The most payload bytes one message carries: a packed run stops before it would exceed it.
const CAP: usize = 64 * 1024;
/// Bytes of one member's region in the receive buffer: a record and a full payload.
const REGION: usize = RECORD + CAP;

fn pad8(bytes: usize) -> usize {
    bytes.div_ceil(8) * 8
}

/// The most payload bytes `d` puts in one message (to any member).
fn bound(d: &OpDesc) -> usize {
    pad8(d.numel().saturating_mul(d.dtype.size()))
}

/// Elements member `from` sends member `to` for `d` (member indices; `root` the root's).
fn seg(d: &OpDesc, from: usize, to: usize, n: usize, root: usize) -> usize {
    let numel = d.numel();
    match d.kind {
        OpKind::AllReduce | OpKind::AllGather => numel,
        OpKind::Reduce | OpKind::Gather if to == root => numel,
        OpKind::Broadcast | OpKind::Scatter if from == root => numel,
        OpKind::AllToAll | OpKind::ReduceScatter => numel / n,
        _ => 0,
    }
}

/// How many collectives from `k` (a power of two) go into one exchange, or 0 when the head is
/// not small (it then takes the schedule path of `steps`). Every member decides the head's path
/// alike, from the description all members share.
pub(super) fn proposal(ops: &[Op], k: usize, end: usize, n: usize) -> usize {
    if n > MAX_MEMBERS || bound(&ops[k].desc) > SMALL {
        return 0;
    }
    let mut bytes = 0;
    let run = ops[k..end]
        .iter()
        .take(super::drive::MAX_PACK)
        .take_while(|o| {
            let b = bound(&o.desc);
            bytes += b;
            b <= SMALL && bytes <= CAP
        })
        .count();
    1 << run.max(1).ilog2()
}

/// The member index of `d`'s root among `members` (0 for calls without one).
pub(super) fn root_index(d: &OpDesc, members: &[usize]) -> Result<usize> {
    match d.peer {
        Some(r) => members
            .binary_search(&r)
            .map_err(|_| Error::Internal(format!("root {r} is not a member of {members:?}"))),
        None => Ok(0),
    }
}

/// One exchange in flight: its buffers (which the posted messages use until they complete) and
/// what has arrived.
pub(super) struct Exchange {
    /// Member `i`'s region (`REGION` bytes): its record, then its payload for this member.
    /// This member's own region is filled locally.
    recv: Scratch,
    /// This member's message to member `j` at `j · send_stride`.
    send: Scratch,
    /// Bytes received from each member.
    got: Vec<usize>,
    /// Receives still outstanding.
    pending: usize,
}

impl Exchange {
    /// Writes this member's record and payloads for `run` and posts its messages: a receive
    /// from, and a send to, every other member. Returns the requests, each with the member it
    /// receives from (`None` for sends).
    ///
    /// # Safety
    /// The ops' buffers must be valid for their descriptions until the exchange is delivered;
    /// the returned requests must complete before the exchange is dropped.
    pub(super) unsafe fn post(
        run: &[Op],
        comm: &Comm,
        members: &[usize],
        me: usize,
    ) -> Result<(Self, Vec<(Request, Option<usize>)>)> {
        let n = members.len();
        let stride = RECORD + run.iter().map(|o| bound(&o.desc)).sum::<usize>();
        let mut ex = Exchange {
            recv: Scratch::with_bytes(n * REGION)?,
            send: Scratch::with_bytes(n * stride)?,
            got: vec![0; n],
            pending: n - 1,
        };
        let roots = run
            .iter()
            .map(|o| root_index(&o.desc, members))
            .collect::<Result<Vec<_>>>()?;
        let (recv, send) = (ex.recv.ptr(), ex.send.ptr());
        // SAFETY: our region's first RECORD bytes are in bounds.
        let mine = unsafe { recv.add(me * REGION) };
        record(run, unsafe { std::slice::from_raw_parts_mut(mine, RECORD) });
        let mut reqs = Vec::with_capacity(2 * (n - 1));
        for j in 0..n {
            // Our own message goes straight into our receive region.
            let msg = if j == me {
                mine
            } else {
                // SAFETY: region j of the send scratch is in bounds (n regions); the record
                // is copied from our region, which does not overlap it.
                unsafe {
                    let msg = send.add(j * stride);
                    std::ptr::copy_nonoverlapping(mine, msg, RECORD);
                    msg
                }
            };
            let mut at = RECORD;
            for (o, &root) in run.iter().zip(&roots) {
                let len = seg(&o.desc, me, j, n, root);
                // SAFETY: the segment is at most `bound` bytes, which the stride (and for our
                // own region, CAP ≥ the run's total) leaves room for; the op's buffers are
                // valid for its description.
                unsafe { write_seg(o, msg.add(at), j, n, len) };
                at += pad8(len * o.desc.dtype.size());
            }
            if j == me {
                ex.got[me] = at;
                continue;
            }
            // Ranks of the group's communicator are member indices.
            let peer = raw::count(j)?;
            let u8s = raw::datatype(crate::DType::U8);
            // SAFETY: the send reads `at` bytes of region j, the receive writes at most REGION
            // bytes of region j; both scratches live in the exchange until the requests
            // complete (the caller's contract).
            unsafe {
                reqs.push((
                    raw::irecv(recv.add(j * REGION), raw::count(REGION)?, u8s, peer, comm)?,
                    Some(j),
                ));
                reqs.push((raw::isend(msg, raw::count(at)?, u8s, peer, comm)?, None));
            }
        }
        Ok((ex, reqs))
    }

    /// Member `i`'s message arrived; returns whether every message has.
    pub(super) fn received(&mut self, i: usize, got: Received) -> Result<bool> {
        match got.count {
            Some(c) if c >= RECORD => self.got[i] = c,
            _ => {
                return Err(Error::Internal(format!(
                    "a small-collective message from member {i} has {} bytes, not a record \
                     and its data",
                    got.count.map_or("too many".to_string(), |c| c.to_string())
                )));
            }
        }
        self.pending -= 1;
        Ok(self.pending == 0)
    }

    /// Every member's record (all have arrived).
    pub(super) fn records(&self) -> Records<'_> {
        Records::new(self.recv.bytes(), REGION)
    }

    /// Computes this member's results of `run` (the agreed first ops of the exchange) from the
    /// messages.
    ///
    /// # Safety
    /// Every message has arrived, and the ops' buffers are valid for their descriptions.
    pub(super) unsafe fn deliver(
        &mut self,
        run: &[Op],
        members: &[usize],
        me: usize,
    ) -> Result<()> {
        let n = members.len();
        if n > MAX_MEMBERS {
            return Err(Error::Internal(format!("an exchange among {n} members")));
        }
        // n ≤ MAX_MEMBERS (see `proposal`): fixed arrays, no allocation per call.
        let mut at = [RECORD; MAX_MEMBERS];
        let mut parts = [std::ptr::null::<u8>(); MAX_MEMBERS];
        let base = self.recv.ptr();
        for o in run {
            let d = &o.desc;
            let es = d.dtype.size();
            let root = root_index(d, members)?;
            for i in 0..n {
                let bytes = seg(d, i, me, n, root) * es;
                if at[i] + bytes > self.got[i] {
                    return Err(Error::Internal(format!(
                        "the small-collective message from member {i} is shorter ({} bytes) \
                         than the agreed calls need",
                        self.got[i]
                    )));
                }
                // SAFETY: within region i (checked against what arrived, ≤ REGION).
                parts[i] = unsafe { base.add(i * REGION + at[i]) };
                at[i] += pad8(bytes);
            }
            // SAFETY: the parts hold what `seg` says for this op; the op's buffers are valid.
            unsafe { read_segs(o, &parts[..n], me, n, root) };
        }
        Ok(())
    }
}

/// Writes what this member sends member `to` for `o` (`len` elements) at `dst`.
///
/// # Safety
/// `dst` has room for `len` elements; `o`'s buffers are valid for its description.
unsafe fn write_seg(o: &Op, dst: *mut u8, to: usize, n: usize, len: usize) {
    if len == 0 {
        return;
    }
    let d = &o.desc;
    let es = d.dtype.size();
    // SAFETY: the caller's contract; every source range lies in the op's buffer for its
    // description (`rows` of the validated shape).
    unsafe {
        match d.kind {
            OpKind::Broadcast => std::ptr::copy_nonoverlapping(o.output.ptr, dst, len * es),
            // Block `to` of the root's input: the `to`-th slice along `dim` of every row.
            OpKind::Scatter | OpKind::AllToAll | OpKind::ReduceScatter => {
                let (outer, row) = rows(&d.shape, d.dim);
                let (width, pitch) = if d.kind == OpKind::Scatter {
                    (row * es, n * row * es)
                } else {
                    (row / n * es, row * es)
                };
                copy_rows(dst, width, o.input.ptr.add(to * width), pitch, outer, width)
            }
            _ => std::ptr::copy_nonoverlapping(o.input.ptr, dst, len * es),
        }
    }
}

/// Computes `o`'s result on this member from every member's segment (`parts[i]`, sized as `seg`
/// says; this member's own among them).
///
/// # Safety
/// As for [`Exchange::deliver`].
unsafe fn read_segs(o: &Op, parts: &[*const u8], me: usize, n: usize, root: usize) {
    let d = &o.desc;
    let es = d.dtype.size();
    // SAFETY: the caller's contract; every destination range lies in the op's output for its
    // description.
    unsafe {
        match d.kind {
            OpKind::AllReduce | OpKind::ReduceScatter => {
                fold_parts(o, parts, seg(d, 0, me, n, root), o.output.ptr)
            }
            OpKind::Reduce if me == root => fold_parts(o, parts, d.numel(), o.output.ptr),
            OpKind::Broadcast if me != root => {
                std::ptr::copy_nonoverlapping(parts[root], o.output.ptr, d.numel() * es)
            }
            OpKind::Scatter => {
                std::ptr::copy_nonoverlapping(parts[root], o.output.ptr, d.numel() * es)
            }
            OpKind::AllGather | OpKind::AllToAll => place(o, parts, n),
            OpKind::Gather if me == root => place(o, parts, n),
            _ => {}
        }
    }
}

/// Member `i`'s block into slice `i` along `dim` of every row of the output.
///
/// # Safety
/// As for [`read_segs`].
unsafe fn place(o: &Op, parts: &[*const u8], n: usize) {
    let d = &o.desc;
    let es = d.dtype.size();
    let (outer, row) = rows(&d.shape, d.dim);
    // all_gather's output rows hold n input rows; all_to_all's are the input's.
    let (width, pitch) = if d.kind == OpKind::AllToAll {
        (row / n * es, row * es)
    } else {
        (row * es, n * row * es)
    };
    for (i, &p) in parts.iter().enumerate() {
        // SAFETY: the caller's contract; slice i of the output's rows, block i's rows.
        unsafe { copy_rows(o.output.ptr.add(i * width), pitch, p, width, outer, width) }
    }
}
