//! Driving a batch's collectives to completion: one chain per communicator (its collectives in
//! order), the agreement check before each, and packing. Small collectives run as one exchange
//! of direct messages (see `eager`), which carries the same record hashes; what follows is the
//! path of the others.
//!
//! **Agreement.** Before a collective's data moves, the members exchange a *call record* (a
//! hash and the text of the call's description, its site) in one `MPI_Iallgather` posted ahead
//! of the call itself, so it is matched even when the calls are not. Different records are a
//! collective mismatch, reported before any local work; mismatched calls can then neither
//! return wrong data nor go unexplained. The exchange overlaps the call (both are posted
//! together), so it costs bandwidth, not a round trip. `RANKWISE_MPI_CHECK=0` turns it off
//! (and packing with it) for large collectives: for programs already checked, when every
//! microsecond counts.
//!
//! **Packing.** A run of same-kind collectives at the head of a chain (all_reduces, reduces or
//! broadcasts with one reduce op, root and dtype, in one batch) is packed into one buffer and one
//! call. Batches are a
//! local choice — members may batch the same collectives differently — so the pack size is
//! agreed through the records: each member proposes how many it could pack (the largest power
//! of two within its run, up to [`MAX_PACK`]), all pack the smallest proposal, and the records
//! carry hashes of the run's power-of-two prefixes so that the packed calls are checked too. A member proposing one call
//! posts it with the exchange, so unbatched collectives pay nothing for this; members with
//! more wait for the exchange, then post the packed call.

use std::ops::Range;

use super::eager::{self, Exchange, Msg};
use super::monitor::{Waiting, site_of};
use super::raw::{self, Request};
use super::shm;
use super::steps::{Scratch, Task};
use super::{MpiBackend, Owner};
use crate::error::{CollectiveMismatch, Error, Result};
use crate::exec::copy::copy_bytes;
use crate::exec::{Buf, Op};
use crate::model::{CallSite, GroupId, OpDesc, OpKind, Shape};
use crate::{DType, ReduceOp};

/// The most collectives packed into one call.
pub(super) const MAX_PACK: usize = 1 << PACK_LEVELS;
/// Proposals are powers of two (up to `2^PACK_LEVELS`), so a record needs a prefix hash only
/// at each power of two.
const PACK_LEVELS: usize = 10;

/// Bytes of one member's call record: the head call's hash and the proposal, the head call's
/// description and site in binary (so no text is formatted unless a mismatch is reported), and
/// the prefix hashes of the proposed run.
pub(super) const RECORD: usize = 8 + 8 + DESC + SITE + 8 * (PACK_LEVELS + 1);
/// Where a record's prefix hashes start (the hash of the first `2^l` calls at `PREFIXES + 8l`).
pub(super) const PREFIXES: usize = 16 + DESC + SITE;
/// Binary description: kind, dtype, dim, rank count, op tag, padding; peer; op scalar; shape.
const DESC: usize = 8 + 8 + 8 + 8 * MAX_DIMS;
const MAX_DIMS: usize = 8;
/// Binary call site: line, column, then the file name, cut to fit.
const SITE: usize = 8 + 56;

const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// One step of an FNV-style hash over 64-bit words (a record hashes a few dozen words per
/// call, so words, not bytes; the rotation spreads high bits back down).
fn mix(h: u64, word: u64) -> u64 {
    (h ^ word).wrapping_mul(0x0100_0000_01b3).rotate_left(29)
}

/// What members must agree on, in binary (see `OpDesc::agrees_with`): every field but the
/// site and the group (each member names it with its own id); the whole shape goes into the
/// hash, its first dimensions into the text.
fn encode_desc(d: &OpDesc, out: &mut [u8]) -> u64 {
    let op_tag = d.op.map_or(0u8, |o| {
        1 + ReduceOp::ALL
            .iter()
            .position(|x| x.name() == o.name())
            .unwrap_or(0) as u8
    });
    let scalar = match d.op {
        Some(ReduceOp::PreMulSum(s)) => s,
        _ => 0.0,
    };
    out[..DESC].fill(0);
    out[0] = OpKind::ALL.iter().position(|x| *x == d.kind).unwrap_or(0) as u8;
    out[1] = DType::ALL.iter().position(|x| *x == d.dtype).unwrap_or(0) as u8;
    out[2] = d.dim.min(255) as u8;
    out[3] = d.shape.len().min(255) as u8;
    out[4] = op_tag;
    out[8..16].copy_from_slice(&d.peer.map_or(u64::MAX, |p| p as u64).to_le_bytes());
    out[16..24].copy_from_slice(&scalar.to_bits().to_le_bytes());
    let mut h = FNV_START;
    for w in out[..24].chunks_exact(8) {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        h = mix(h, u64::from_le_bytes(b));
    }
    for (i, &x) in d.shape.iter().enumerate() {
        if i < MAX_DIMS {
            out[24 + 8 * i..32 + 8 * i].copy_from_slice(&(x as u64).to_le_bytes());
        }
        h = mix(h, x as u64);
    }
    h
}

/// What tags a run through a group's window (see `shm::Regions::start`, which adds its number
/// of calls and bytes): its first call's encoding, every field members must agree on but the
/// site. The first alone: a packed run of a thousand calls was agreed on already.
fn run_tag(run: &[Op]) -> u64 {
    let mut out = [0u8; DESC];
    run.first()
        .map_or(FNV_START, |o| encode_desc(&o.desc, &mut out))
}

/// Whether [`encode_desc`] encodes `a` and `b` alike (every field it reads is equal; the op
/// compares `PreMulSum` scalars by bits, as the encoding does).
fn same_encoding(a: &OpDesc, b: &OpDesc) -> bool {
    a.kind == b.kind
        && a.dtype == b.dtype
        && a.dim == b.dim
        && a.op == b.op
        && a.peer == b.peer
        && a.shape == b.shape
}

/// The description encoded by [`encode_desc`], as its summary text.
fn desc_text(b: &[u8], site: &CallSite) -> String {
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let ndim = usize::from(b[3]);
    let shape: Vec<usize> = (0..ndim.min(MAX_DIMS))
        .map(|i| word(24 + 8 * i) as usize)
        .collect();
    let op = match b[4] {
        0 => None,
        t => ReduceOp::ALL.get(usize::from(t) - 1).map(|o| match o {
            ReduceOp::PreMulSum(_) => ReduceOp::PreMulSum(f64::from_bits(word(16))),
            o => *o,
        }),
    };
    let peer = word(8);
    let d = OpDesc {
        kind: OpKind::ALL
            .get(usize::from(b[0]))
            .copied()
            .unwrap_or(OpKind::Barrier),
        group: GroupId::WORLD,
        peer: (peer != u64::MAX).then_some(peer as usize),
        op,
        dtype: DType::ALL
            .get(usize::from(b[1]))
            .copied()
            .unwrap_or(DType::U8),
        shape: Shape::from_slice(&shape),
        dim: usize::from(b[2]),
        site: *site,
    };
    let text = d.summary();
    if ndim > MAX_DIMS {
        format!("{text} (shape cut to its first {MAX_DIMS} dimensions)")
    } else {
        text
    }
}

fn encode_site(site: &CallSite, out: &mut [u8]) {
    out[..SITE].fill(0);
    out[..4].copy_from_slice(&site.line.to_le_bytes());
    out[4..8].copy_from_slice(&site.column.to_le_bytes());
    let n = site.file.len().min(SITE - 8);
    out[8..8 + n].copy_from_slice(&site.file.as_bytes()[..n]);
}

fn site_text(b: &[u8]) -> String {
    let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let name = &b[8..SITE];
    let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
    format!(
        "{}:{}:{}",
        String::from_utf8_lossy(&name[..end]),
        u32_at(0),
        u32_at(4)
    )
}

/// Writes this member's record for the run `ops` (its first entry is the head call) into `r`
/// (`RECORD` bytes); returns the hash of the whole run.
pub(super) fn record(ops: &[Op], r: &mut [u8]) -> u64 {
    r[..RECORD].fill(0);
    let mut scratch = [0u8; DESC];
    let head = &ops[0].desc;
    let h0 = encode_desc(head, &mut r[16..16 + DESC]);
    r[..8].copy_from_slice(&h0.to_le_bytes());
    r[8..16].copy_from_slice(&(ops.len() as u64).to_le_bytes());
    encode_site(&head.site, &mut r[16 + DESC..16 + DESC + SITE]);
    let mut h = FNV_START;
    let mut hj = h0;
    for (j, o) in ops.iter().enumerate() {
        // A bucket repeats one description a thousand times: encoded once.
        if j > 0 && !same_encoding(&o.desc, &ops[j - 1].desc) {
            hj = encode_desc(&o.desc, &mut scratch);
        }
        h = mix(h, hj);
        let len = j + 1;
        if len.is_power_of_two() {
            let at = PREFIXES + 8 * len.trailing_zeros() as usize;
            r[at..at + 8].copy_from_slice(&h.to_le_bytes());
        }
    }
    h
}

/// The records of every member, in member order, `stride` bytes apart.
pub(super) struct Records<'a> {
    bytes: &'a [u8],
    stride: usize,
}

impl<'a> Records<'a> {
    pub(super) fn new(bytes: &'a [u8], stride: usize) -> Self {
        Records { bytes, stride }
    }
    fn at(&self, j: usize) -> &[u8] {
        &self.bytes[j * self.stride..j * self.stride + RECORD]
    }
    fn word(&self, j: usize, at: usize) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.at(j)[at..at + 8]);
        u64::from_le_bytes(w)
    }
    /// Member `j`'s proposal: a power of two up to [`MAX_PACK`].
    fn proposal(&self, j: usize) -> usize {
        let p = (self.word(j, 8) as usize).clamp(1, MAX_PACK);
        1 << p.ilog2()
    }
    /// The hash of member `j`'s first `m` calls (`m` a power of two it proposed at least).
    fn prefix(&self, j: usize, m: usize) -> u64 {
        self.word(j, PREFIXES + 8 * m.trailing_zeros() as usize)
    }
    /// Member `j`'s head call, as text, and its site.
    fn call(&self, j: usize) -> (String, String) {
        let r = self.at(j);
        let site = site_text(&r[16 + DESC..16 + DESC + SITE]);
        (desc_text(&r[16..16 + DESC], &site_of(&site)), site)
    }
}

/// Checks that every member's head call agrees with member 0's; returns the agreed run's
/// length: the longest power-of-two prefix of the shortest proposal on which every member's
/// hashes agree. (A disagreement further into the run is then the head of a later agreement,
/// reported there with its own call and step, rather than here under the head's name.)
pub(super) fn compare(recs: &Records, members: &[usize], step: u64) -> Result<usize> {
    let n = members.len();
    let shortest = (0..n).map(|j| recs.proposal(j)).min().unwrap_or(1);
    let m = agreeing_prefix(shortest, |m| {
        (1..n).any(|j| recs.prefix(j, m) != recs.prefix(0, m))
    });
    if let Some(j) = (1..n).find(|&j| recs.word(j, 0) != recs.word(0, 0)) {
        let ((what_a, site_a), (what_b, site_b)) = (recs.call(0), recs.call(j));
        return Err(Error::CollectiveMismatch(Box::new(CollectiveMismatch {
            members: members.to_vec(),
            step,
            rank_a: members[0],
            what_a,
            site_a: site_of(&site_a),
            rank_b: members[j],
            what_b,
            site_b: site_of(&site_b),
        })));
    }
    Ok(m)
}

/// The longest power-of-two prefix, at most `m` (a power of two), on which the members'
/// hashes agree (`differ(p)`: whether they differ on the first `p` calls); at least 1, the
/// head alone, whose agreement is checked apart.
pub(super) fn agreeing_prefix(mut m: usize, differ: impl Fn(usize) -> bool) -> usize {
    while m > 1 && differ(m) {
        m /= 2;
    }
    m
}

/// How many collectives, from `k`, could go into one packed call: a run of all_reduces with
/// all_reduces, reduces or broadcasts with one reduce op, root and dtype, cut to a power of two
/// (at most [`MAX_PACK`], and within `end`).
fn packable(ops: &[Op], k: usize, end: usize) -> usize {
    1 << same_kind_run(ops, k, end).ilog2()
}

/// How many collectives from `k` (at least 1, at most [`MAX_PACK`], within `end`) are
/// all_reduces, reduces or broadcasts of the head's kind, reduce op, root and dtype: what one
/// packed call can carry.
pub(super) fn same_kind_run(ops: &[Op], k: usize, end: usize) -> usize {
    let head = &ops[k].desc;
    if !matches!(
        head.kind,
        OpKind::AllReduce | OpKind::Reduce | OpKind::Broadcast
    ) {
        return 1;
    }
    ops[k..end]
        .iter()
        .take(MAX_PACK)
        .take_while(|o| {
            let d = &o.desc;
            d.kind == head.kind && d.op == head.op && d.dtype == head.dtype && d.peer == head.peer
        })
        .count()
        .max(1)
}

/// Several collectives as one: their data side by side in one buffer.
struct Packed {
    op: Op,
    buf: Scratch,
}

impl Packed {
    /// Copies the tensors of `ops` into one buffer, described as one call (of their kind) on it.
    fn new(ops: &[Op]) -> Result<Self> {
        let es = ops[0].desc.dtype.size();
        let total: usize = ops.iter().map(|o| o.desc.numel()).sum();
        let mut buf = Scratch::with_bytes(total * es)?;
        let base = buf.ptr();
        let mut at = 0;
        for o in ops {
            let bytes = o.desc.numel() * es;
            // SAFETY: the op's input holds `numel` elements (its validated description) and
            // the scratch `total` elements; they do not overlap.
            unsafe { copy_bytes(base.add(at), o.input.ptr, bytes) };
            at += bytes;
        }
        let mut desc = ops[0].desc.clone();
        desc.shape = Shape::from_slice(&[total]);
        let b = Buf::host(base, total);
        Ok(Packed {
            op: Op {
                desc,
                input: b,
                output: b,
            },
            buf,
        })
    }

    /// Copies the results back into each op's tensor.
    fn unpack(&mut self, ops: &[Op]) {
        let es = ops[0].desc.dtype.size();
        let base = self.buf.ptr();
        let mut at = 0;
        for o in ops {
            let bytes = o.desc.numel() * es;
            // SAFETY: as in `new`, the other way.
            unsafe { copy_bytes(o.output.ptr, base.add(at), bytes) };
            at += bytes;
        }
    }
}

/// A collective (or a packed run of them) in progress.
struct Slot {
    /// The ops it covers (one, or a packed run).
    ops: Range<usize>,
    chain: usize,
    /// Requests of the current phase still outstanding.
    outstanding: usize,
    /// Waiting for the record exchange to fix the pack size (`ops` is the head alone then).
    negotiating: bool,
    task: Task,
    packed: Option<Packed>,
    records: Scratch,
    /// MPI phases initiated so far (see `steps::mpi_phases`).
    posted: u8,
    /// A run of small collectives exchanged as direct messages (see `eager`).
    eager: Option<Exchange>,
    /// An all-reduce run through the group's shared memory (see `shm`), until done.
    shm: Option<shm::Step>,
}

impl Slot {
    /// A slot for the collectives `ops` of chain `chain`, with nothing posted yet.
    fn new(ops: Range<usize>, chain: usize) -> Slot {
        Slot {
            ops,
            chain,
            outstanding: 0,
            negotiating: false,
            task: Task::new(),
            packed: None,
            records: Scratch::default(),
            posted: 0,
            eager: None,
            shm: None,
        }
    }
}

/// A communicator's collectives in this batch, in order, several in flight at once.
///
/// MPI requires every member to *initiate* the collectives of a communicator in one order; they
/// may complete in any. So ops start in op order, each op's phases are initiated back to back:
/// while an op still has a phase to initiate (a large reduction between its exchange and its
/// gather) or a pack size to agree, no later op starts. The order of initiations is then the
/// same on every member whatever the timing.
struct Chain {
    group: GroupId,
    next: usize,
    end: usize,
    /// Slots of this chain not yet finished.
    inflight: usize,
    /// The slot that must initiate its last phase (or agree on its pack) before another op
    /// starts.
    blocker: Option<usize>,
    /// Whether this member still proposes long runs (see `eager::Proposal`). It stops once a
    /// long proposal meets a short one: the peers batch differently, and proposing long again
    /// at every later call would hash the rest of the run each time (1000 × 1 KiB batched on
    /// one rank and called one by one on the other: 13.9–14.2 ms per bucket without this,
    /// 12.4–13.7 ms with it).
    long: bool,
    /// The most calls this member proposes short (a power of two): twice what the last
    /// exchange took when it took fewer than proposed. A short proposal carries the data of
    /// every call it proposes, so a member whose peer takes one call at a time would otherwise
    /// send 64 calls' data with every header.
    cap: usize,
}

/// Collectives of one communicator in flight at once, at most.
const WINDOW: usize = 64;

/// Drives the collectives of one batch.
pub(super) struct Driver<'a> {
    be: &'a MpiBackend,
    ops: &'a [Op],
    waits: &'a [Waiting],
    chains: Vec<Chain>,
    slots: Vec<Slot>,
    /// Slots whose shared-memory step is in progress: the wait loop polls them.
    shm_slots: Vec<usize>,
    /// Slots whose exchange has messages still to move through its group's lanes (see
    /// `lanes`): the wait loop polls them too.
    lane_slots: Vec<usize>,
}

impl<'a> Driver<'a> {
    pub(super) fn new(
        be: &'a MpiBackend,
        ops: &'a [Op],
        waits: &'a [Waiting],
        chains: impl Iterator<Item = (GroupId, Range<usize>)>,
    ) -> Self {
        let chains = chains
            .map(|(group, r)| Chain {
                group,
                next: r.start,
                end: r.end,
                inflight: 0,
                blocker: None,
                long: true,
                cap: MAX_PACK,
            })
            .collect();
        Driver {
            be,
            ops,
            waits,
            chains,
            slots: Vec::new(),
            shm_slots: Vec::new(),
            lane_slots: Vec::new(),
        }
    }

    /// Starts every chain.
    pub(super) fn start(&mut self, reqs: &mut Vec<(Request, Owner)>) -> Result<()> {
        for c in 0..self.chains.len() {
            self.fill(c, reqs)?;
        }
        Ok(())
    }

    /// Starts collectives of chain `c` while the window has room and no op blocks.
    fn fill(&mut self, c: usize, reqs: &mut Vec<(Request, Owner)>) -> Result<()> {
        loop {
            let chain = &self.chains[c];
            if chain.next >= chain.end || chain.inflight >= WINDOW || chain.blocker.is_some() {
                return Ok(());
            }
            self.start_next(c, reqs)?;
        }
    }

    /// Whether slot `s` has initiated every MPI phase it has.
    fn initiated_all(&self, s: usize) -> bool {
        let slot = &self.slots[s];
        if slot.negotiating {
            return false;
        }
        let op = match &slot.packed {
            Some(p) => &p.op,
            None => &self.ops[slot.ops.start],
        };
        slot.posted >= super::steps::mpi_phases(op)
    }

    /// Starts the next collective of chain `c` (there is one).
    fn start_next(&mut self, c: usize, reqs: &mut Vec<(Request, Owner)>) -> Result<()> {
        let chain = &self.chains[c];
        let k = chain.next;
        let (comm, members) = self.be.comm_of(chain.group)?;
        let small = eager::proposal(
            self.ops,
            k,
            chain.end,
            members.len(),
            self.be.rooted_check,
            chain.long,
            chain.cap,
            self.be.lanes_of(chain.group).is_some(),
            self.be
                .shm_of(chain.group)
                .is_some_and(shm::Regions::has_heaps),
        );
        if small.calls > 0 {
            let check = self.be.rooted_check;
            return self.start_eager(c, k..k + small.calls, small.long, check, reqs);
        }
        let s = self.slots.len();
        let mut slot = Slot::new(k..k + 1, c);
        if self.be.check {
            let proposal = packable(self.ops, k, chain.end);
            slot.records = Scratch::with_bytes(RECORD * (members.len() + 1))?;
            let base = slot.records.ptr();
            // SAFETY: `records` holds n + 1 records: ours is written into the last slot and
            // sent from there, every member's lands in the first n; the scratch lives in the
            // slot until the request completes.
            let req = unsafe {
                record(
                    &self.ops[k..k + proposal],
                    std::slice::from_raw_parts_mut(base.add(RECORD * members.len()), RECORD),
                );
                raw::iallgather(
                    base.add(RECORD * members.len()),
                    base,
                    raw::count(RECORD)?,
                    raw::datatype(crate::DType::U8),
                    comm,
                )?
            };
            reqs.push((req, Owner::Check(s)));
            slot.outstanding += 1;
            slot.negotiating = proposal > 1;
        }
        let group = self.chains[c].group;
        if !slot.negotiating && self.through_window(group, k..k + 1) {
            // Its data moves only once its record agrees (in `done`), or at once unchecked.
            self.chains[c].next = k + 1;
            if slot.outstanding == 0 {
                self.slots.push(slot);
                self.chains[c].inflight += 1;
                return self.start_window(s, reqs);
            }
        } else if !slot.negotiating {
            self.chains[c].next = k + 1;
            let new = match self
                .be
                .post(&mut slot.task, &self.ops[k], self.chains[c].group)
            {
                Ok(new) => new,
                Err(e) => {
                    // The record exchange may be posted into the slot's memory, and the job
                    // ends on this error: keep the memory.
                    std::mem::forget(slot);
                    return Err(e);
                }
            };
            slot.posted += u8::from(!new.is_empty());
            slot.outstanding += new.len();
            reqs.extend(new.into_iter().map(|r| (r, Owner::Task(s))));
        }
        // A negotiating slot leaves `next` alone: `agree` sets it once the pack size is known,
        // and the slot blocks the chain until then.
        self.open(slot, reqs)
    }

    /// Adds `slot` (index `self.slots.len()`, its first phase posted or its pack size being
    /// negotiated) to its chain: it blocks the chain until it has initiated every phase, and
    /// completes at once if it posted nothing (never the case today).
    fn open(&mut self, slot: Slot, reqs: &mut Vec<(Request, Owner)>) -> Result<()> {
        let (s, c, idle) = (self.slots.len(), slot.chain, slot.outstanding == 0);
        self.slots.push(slot);
        self.chains[c].inflight += 1;
        if !self.initiated_all(s) {
            self.chains[c].blocker = Some(s);
        }
        if idle {
            return self.finish(s, reqs);
        }
        Ok(())
    }

    /// Starts the exchange of the small collectives `run` of chain `c` (this member's proposed
    /// run, `long` or not: see `eager::Proposal`; the agreed one may be shorter), `check`ed or
    /// not (see `eager::one_way`). It blocks the chain until every record is in.
    fn start_eager(
        &mut self,
        c: usize,
        run: Range<usize>,
        long: bool,
        check: bool,
        reqs: &mut Vec<(Request, Owner)>,
    ) -> Result<()> {
        let group = self.chains[c].group;
        let (comm, members) = self.be.eager_of(group)?;
        let me = self.be.member_index(members)?;
        let s = self.slots.len();
        // SAFETY: the ops' buffers are valid until `execute` returns, after every request
        // completes; the exchange lives in its slot as long.
        let (ex, outstanding) = unsafe {
            Exchange::post(
                &self.ops[run.clone()],
                long,
                self.waits[run.start].seq,
                comm,
                members,
                me,
                check,
                None,
                self.be.lanes_of(group),
                |r, from| reqs.push((r, Owner::Eager(s, from))),
            )?
        };
        let all_in = ex.all_in();
        if ex.lanes_busy() {
            self.lane_slots.push(s);
        }
        self.slots.push(Slot {
            outstanding,
            negotiating: true,
            eager: Some(ex),
            ..Slot::new(run, c)
        });
        self.chains[c].inflight += 1;
        self.chains[c].blocker = Some(s);
        if all_in {
            // Nothing to receive (a group of one, or a one-way sender): agreed as it stands.
            self.eager_agreed(s, reqs)?;
        }
        if outstanding == 0 {
            return self.finish(s, reqs);
        }
        Ok(())
    }

    /// A message of slot `s`'s exchange completed (`msg` says which).
    pub(super) fn eager_done(
        &mut self,
        s: usize,
        msg: Msg,
        got: raw::Received,
        reqs: &mut Vec<(Request, Owner)>,
    ) -> Result<()> {
        self.slots[s].outstanding -= 1;
        let (c, k) = (self.slots[s].chain, self.slots[s].ops.start);
        let Some(ex) = self.slots[s].eager.as_mut() else {
            return Err(Error::Internal("an exchange without its buffers".into()));
        };
        let (be, group) = (self.be, self.chains[c].group);
        let (head, step) = (&self.ops[k].desc, self.waits[k].seq);
        // The group is looked up for an error's name only: this runs for every message.
        let named = |e| match be.eager_of(group) {
            Ok((_, members)) => eager::in_exchange(e, head, step, members),
            Err(_) => e,
        };
        let progress = ex.received(msg, got).map_err(named)?;
        self.eager_progress(s, progress, reqs)
    }

    /// Slot `s`'s exchange made `progress` (its outstanding count already lowered): checks a
    /// direct exchange's headers once all are in, delivers once everything is, and finishes
    /// the slot once nothing is outstanding.
    fn eager_progress(
        &mut self,
        s: usize,
        progress: eager::Progress,
        reqs: &mut Vec<(Request, Owner)>,
    ) -> Result<()> {
        if progress.heads_now && !progress.all_now {
            // A direct exchange: its headers are checked before its data is waited for, so
            // that a disagreement is reported, not waited on.
            let (c, k) = (self.slots[s].chain, self.slots[s].ops.start);
            let (comm, members) = self.be.eager_of(self.chains[c].group)?;
            let me = self.be.member_index(members)?;
            let (head, step) = (&self.ops[k].desc, self.waits[k].seq);
            let Some(ex) = self.slots[s].eager.as_ref() else {
                return Err(Error::Internal("an exchange without its buffers".into()));
            };
            ex.verify(head, comm, members, me, step)
                .map_err(|e| eager::in_exchange(e, head, step, members))?;
        }
        if progress.all_now {
            self.eager_agreed(s, reqs)?;
        }
        let slot = &self.slots[s];
        if slot.outstanding == 0 && !slot.negotiating {
            return self.finish(s, reqs);
        }
        Ok(())
    }

    /// Every record of slot `s`'s exchange is in: checks them, fixes the run, computes its
    /// results, and lets the chain go on.
    fn eager_agreed(&mut self, s: usize, reqs: &mut Vec<(Request, Owner)>) -> Result<()> {
        let (c, k) = (self.slots[s].chain, self.slots[s].ops.start);
        let be = self.be;
        let (comm, members) = be.eager_of(self.chains[c].group)?;
        let me = be.member_index(members)?;
        let lanes = be.lanes_of(self.chains[c].group);
        let slot = &mut self.slots[s];
        let Some(ex) = slot.eager.as_mut() else {
            return Err(Error::Internal("an exchange without its buffers".into()));
        };
        let step = self.waits[k].seq;
        // SAFETY: every message has arrived; the ops' buffers are valid (see `start_eager`).
        let agreed =
            unsafe { ex.deliver(&self.ops[slot.ops.clone()], comm, members, me, step, lanes) }
                .map_err(|e| eager::in_exchange(e, &self.ops[k].desc, step, members))?;
        let m = agreed.delivered;
        let (proposed, took) = (slot.ops.len(), m + agreed.packed);
        slot.ops = k..k + m;
        slot.negotiating = false;
        self.chains[c].next = k + m;
        self.chains[c].blocker = None;
        let chain = &mut self.chains[c];
        chain.long &= !agreed.met_short;
        chain.cap = if took < proposed {
            (2 * took).next_power_of_two().min(MAX_PACK)
        } else {
            (2 * chain.cap).min(MAX_PACK)
        };
        if agreed.packed > 0 {
            // Agreed through the exchange's hashes: no record of its own.
            self.start_packed(c, k + m..k + m + agreed.packed, reqs)?;
        }
        self.fill(c, reqs)
    }

    /// Starts the collectives `run` of chain `c`, already agreed on by every member (the rest of
    /// a long run, see `eager::Proposal`): through the group's window when it takes them, else
    /// as one packed call on the schedule path.
    fn start_packed(
        &mut self,
        c: usize,
        run: Range<usize>,
        reqs: &mut Vec<(Request, Owner)>,
    ) -> Result<()> {
        let s = self.slots.len();
        if self.through_window(self.chains[c].group, run.clone()) {
            self.chains[c].next = run.end;
            self.slots.push(Slot::new(run, c));
            self.chains[c].inflight += 1;
            return self.start_window(s, reqs);
        }
        let packed = Packed::new(&self.ops[run.clone()])?;
        let mut task = Task::new();
        let new = self.be.post(&mut task, &packed.op, self.chains[c].group)?;
        let outstanding = new.len();
        reqs.extend(new.into_iter().map(|r| (r, Owner::Task(s))));
        self.chains[c].next = run.end;
        let slot = Slot {
            outstanding,
            task,
            packed: Some(packed),
            posted: u8::from(outstanding > 0),
            ..Slot::new(run, c)
        };
        self.open(slot, reqs)
    }

    /// Whether the collectives `run` (agreed, or unchecked) of `group` go through its
    /// shared-memory window (see `shm::takes`), if the group has one. Every member decides
    /// alike.
    fn through_window(&self, group: GroupId, run: Range<usize>) -> bool {
        self.be
            .shm_of(group)
            .is_some_and(|r| shm::takes(&self.ops[run], r.members(), r.has_heaps()))
    }

    /// Starts slot `s`'s run through its group's window. The slot blocks its chain until the
    /// run is done (one run per window at a time), and is polled by the wait loop.
    fn start_window(&mut self, s: usize, reqs: &mut Vec<(Request, Owner)>) -> Result<()> {
        let be = self.be;
        let slot = &mut self.slots[s];
        let c = slot.chain;
        let Some(regions) = be.shm_of(self.chains[c].group) else {
            return Err(Error::Internal(
                "a shared-memory run without its window".into(),
            ));
        };
        slot.packed = None;
        let (_, members) = be.comm_of(self.chains[c].group)?;
        let run = &self.ops[slot.ops.clone()];
        let root = eager::root_index(&run[0].desc, members)?;
        // SAFETY: the ops' buffers are valid until `execute` returns, which is after the run
        // is done (or never: a failure ends the job); the chain's blocker keeps any other run
        // of this group from starting before this one is done.
        slot.shm = Some(unsafe { regions.start(run, root, run_tag(run))? });
        self.chains[c].blocker = Some(s);
        self.shm_slots.push(s);
        // The other members may be there already.
        self.poll_shm(reqs).map(drop)
    }

    /// Whether a shared-memory step or lane message is in progress (the wait loop must poll,
    /// not block).
    pub(super) fn polling(&self) -> bool {
        !self.shm_slots.is_empty() || !self.lane_slots.is_empty()
    }

    /// Advances everything in shared memory: lane messages, then steps; says whether anything
    /// moved.
    pub(super) fn poll_shared(&mut self, reqs: &mut Vec<(Request, Owner)>) -> Result<bool> {
        let moved = self.poll_lanes(reqs)?;
        Ok(self.poll_shm(reqs)? || moved)
    }

    /// Moves the lane messages of every exchange that has some.
    fn poll_lanes(&mut self, reqs: &mut Vec<(Request, Owner)>) -> Result<bool> {
        let (mut i, mut any) = (0, false);
        while i < self.lane_slots.len() {
            let s = self.lane_slots[i];
            let group = self.chains[self.slots[s].chain].group;
            let (Some(lanes), Some(ex)) = (self.be.lanes_of(group), self.slots[s].eager.as_mut())
            else {
                return Err(Error::Internal(
                    "an exchange through shared-memory lanes without its lanes".into(),
                ));
            };
            // SAFETY: the lanes the exchange was posted with (its group's).
            let (moved, progress) = unsafe { ex.poll_lanes(lanes)? };
            if ex.lanes_busy() {
                i += 1;
            } else {
                self.lane_slots.swap_remove(i);
            }
            if moved > 0 {
                any = true;
                self.slots[s].outstanding -= moved;
                self.eager_progress(s, progress, reqs)?;
            }
        }
        Ok(any)
    }

    /// Advances every shared-memory step in progress; those done finish their slots (says
    /// whether any did).
    fn poll_shm(&mut self, reqs: &mut Vec<(Request, Owner)>) -> Result<bool> {
        let (mut i, mut any) = (0, false);
        while i < self.shm_slots.len() {
            let s = self.shm_slots[i];
            let group = self.chains[self.slots[s].chain].group;
            let Some(regions) = self.be.shm_of(group) else {
                return Err(Error::Internal(
                    "a shared-memory step without its window".into(),
                ));
            };
            let slot = &mut self.slots[s];
            let Some(step) = slot.shm.as_mut() else {
                return Err(Error::Internal(
                    "a shared-memory slot without its step".into(),
                ));
            };
            let run = &self.ops[slot.ops.clone()];
            // SAFETY: as in `start_window`, with the ops the run started with.
            let done = unsafe { regions.poll(step, run) }.map_err(|d| {
                let (head, seq) = (&run[0].desc, self.waits[slot.ops.start].seq);
                match self.be.comm_of(group) {
                    Ok((_, members)) => Error::Backend {
                        backend: "mpi",
                        detail: format!(
                            "collective mismatch on group {members:?}, step {seq}: rank {} calls \
                             {} at {}, but rank {}'s call through the shared-memory window \
                             differs (in kind, dtype, operator, root or size); \
                             RANKWISE_MPI_CHECK=0 skipped the check that names both calls — \
                             run without it to see them",
                            self.be.rank,
                            head.summary(),
                            head.site,
                            members.get(d.member).copied().unwrap_or(usize::MAX),
                        ),
                    },
                    Err(e) => e,
                }
            })?;
            match done {
                shm::Polled::Pending => i += 1,
                shm::Polled::Done => {
                    slot.shm = None;
                    self.shm_slots.swap_remove(i);
                    self.finish(s, reqs)?;
                    any = true;
                }
                shm::Polled::ByMpi => {
                    slot.shm = None;
                    self.shm_slots.swap_remove(i);
                    self.reroute(s, reqs)?;
                    any = true;
                }
            }
        }
        Ok(any)
    }

    /// One request of slot `s` completed (`check`: its record exchange).
    pub(super) fn done(
        &mut self,
        s: usize,
        check: bool,
        reqs: &mut Vec<(Request, Owner)>,
    ) -> Result<()> {
        if check {
            self.agree(s)?;
        }
        let slot = &mut self.slots[s];
        slot.outstanding -= 1;
        if slot.outstanding > 0 || slot.negotiating {
            return Ok(());
        }
        let c = slot.chain;
        let group = self.chains[c].group;
        let (posted, run) = (slot.posted, slot.ops.clone());
        if posted == 0 && self.through_window(group, run) {
            // Agreed (its record, and for a pack its size): the run goes through the window.
            return self.start_window(s, reqs);
        }
        self.post_mpi(s, reqs)
    }

    /// Runs slot `s`'s call, which its group's window handed back (`shm::Polled::ByMpi`: its
    /// senders' tensors are not all in their shared heaps), the way the group would run it
    /// without heaps: as an exchange of its own (through the lanes, or sent directly), or on
    /// its schedule path. Every member hands the call back alike, and decides its path alike.
    fn reroute(&mut self, s: usize, reqs: &mut Vec<(Request, Owner)>) -> Result<()> {
        let (c, run) = (self.slots[s].chain, self.slots[s].ops.clone());
        let group = self.chains[c].group;
        let (_, members) = self.be.comm_of(group)?;
        // The members agree on the call already: every member compared the tag of every
        // member whose bytes it would have read (a broadcast's root, or all of them) before
        // the window handed the call back. So the exchange needs no check of its own, and a
        // broadcast goes one way (without the round trip the check costs).
        let alone = eager::proposal(
            self.ops,
            run.start,
            run.end,
            members.len(),
            false,
            false,
            1,
            self.be.lanes_of(group).is_some(),
            false,
        );
        crate::heap::note_handed_back();
        if alone.calls != 1 {
            return self.post_mpi(s, reqs);
        }
        // The slot gives its call up, unfinished, to an exchange's slot (it posted nothing
        // that is still outstanding: its record exchange completed before the window's step).
        let slot = &mut self.slots[s];
        slot.task = Task::new();
        slot.records = Scratch::default();
        let chain = &mut self.chains[c];
        chain.inflight -= 1;
        if chain.blocker == Some(s) {
            chain.blocker = None;
        }
        self.start_eager(c, run, false, false, reqs)
    }

    /// Posts slot `s`'s next MPI phase (its packed collective's, or its call's), nothing else
    /// being outstanding; lets its chain go on once every phase is initiated.
    fn post_mpi(&mut self, s: usize, reqs: &mut Vec<(Request, Owner)>) -> Result<()> {
        let c = self.slots[s].chain;
        let group = self.chains[c].group;
        let slot = &mut self.slots[s];
        let new = match &slot.packed {
            Some(p) => self.be.post(&mut slot.task, &p.op, group)?,
            None => self
                .be
                .post(&mut slot.task, &self.ops[slot.ops.start], group)?,
        };
        if new.is_empty() {
            return self.finish(s, reqs);
        }
        slot.posted += 1;
        slot.outstanding = new.len();
        reqs.extend(new.into_iter().map(|r| (r, Owner::Task(s))));
        if self.chains[c].blocker == Some(s) && self.initiated_all(s) {
            self.chains[c].blocker = None;
            self.fill(c, reqs)?;
        }
        Ok(())
    }

    /// Compares the members' records; for a negotiating slot, fixes the pack size (its call is
    /// posted by `done`, now that nothing else is outstanding).
    fn agree(&mut self, s: usize) -> Result<()> {
        let slot = &self.slots[s];
        let (_, members) = self.be.comm_of(self.chains[slot.chain].group)?;
        let recs = Records::new(slot.records.bytes(), RECORD);
        let m = compare(&recs, members, self.waits[slot.ops.start].seq)?;
        if !slot.negotiating {
            return Ok(());
        }
        let k = slot.ops.start;
        let c = slot.chain;
        let slot = &mut self.slots[s];
        slot.negotiating = false;
        slot.ops = k..k + m;
        self.chains[c].next = k + m;
        // Still the blocker: its first phase is posted by `done`, which then lets others start.
        if m > 1 && !self.through_window(self.chains[c].group, k..k + m) {
            let slot = &mut self.slots[s];
            slot.packed = Some(Packed::new(&self.ops[k..k + m])?);
        }
        Ok(())
    }

    /// Slot `s` completed: results back into packed tensors, its ops off the board, and its
    /// chain's next collective started.
    fn finish(&mut self, s: usize, reqs: &mut Vec<(Request, Owner)>) -> Result<()> {
        let slot = &mut self.slots[s];
        if let Some(p) = &mut slot.packed {
            // A reduce writes only the root's tensors; the others keep theirs.
            let d = &p.op.desc;
            if d.kind != OpKind::Reduce || d.peer == Some(self.be.rank) {
                p.unpack(&self.ops[slot.ops.clone()]);
            }
        }
        // Every request of the slot has completed: its memory goes back to the scratch pool
        // now, not at the end of the batch (a long batch would otherwise allocate afresh).
        slot.packed = None;
        slot.eager = None;
        slot.task = Task::new();
        slot.records = Scratch::default();
        self.be
            .completed_all(slot.ops.clone(), self.waits, self.ops);
        let c = slot.chain;
        let chain = &mut self.chains[c];
        chain.inflight -= 1;
        if chain.blocker == Some(s) {
            chain.blocker = None;
        }
        self.fill(c, reqs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::mpi::eager::tests::op;

    /// Every member's record for its run, back to back, as the agreement exchange leaves them.
    fn records(runs: &[&[Op]]) -> Vec<u8> {
        let mut all = vec![0; RECORD * runs.len()];
        for (r, run) in all.chunks_exact_mut(RECORD).zip(runs) {
            record(run, r);
        }
        all
    }

    fn compared(runs: &[&[Op]]) -> Result<usize> {
        let members: Vec<usize> = (0..runs.len()).collect();
        compare(&Records::new(&records(runs), RECORD), &members, 7)
    }

    /// A run's calls after its head reuse the previous call's hash when its description encodes
    /// alike: a change of any encoded field in the middle of a run must still be seen, and the
    /// call after it (like the one before it again) must be hashed afresh.
    #[test]
    fn every_encoded_field_of_a_later_call_counts() {
        type Change = fn(&mut OpDesc);
        let changes: [(&str, Change); 8] = [
            ("kind", |d| d.kind = OpKind::Reduce),
            ("dtype", |d| d.dtype = DType::I32),
            ("dim", |d| d.dim = 1),
            ("op", |d| d.op = Some(ReduceOp::Max)),
            ("scalar", |d| d.op = Some(ReduceOp::PreMulSum(3.0))),
            ("peer", |d| d.peer = Some(1)),
            ("shape", |d| d.shape = Shape::from_slice(&[4, 2])),
            ("rank", |d| d.shape = Shape::from_slice(&[8, 1])),
        ];
        let run = |scalar: f64| {
            (0..8)
                .map(|_| {
                    let mut o = op(OpKind::AllReduce, 8);
                    o.desc.op = Some(ReduceOp::PreMulSum(scalar));
                    o
                })
                .collect::<Vec<_>>()
        };
        let same = run(2.0);
        for (field, change) in changes {
            let mut other = run(2.0);
            change(&mut other[3].desc);
            // The three calls before it pack (the largest power of two); not one more.
            assert_eq!(compared(&[&same, &other]).ok(), Some(2), "{field}");
            // The same change on both sides agrees on the whole run.
            assert_eq!(compared(&[&other, &other]).ok(), Some(8), "{field}");
        }
        // A change from the second call on is a difference at the second call.
        let mut tail = run(2.0);
        for o in &mut tail[1..] {
            o.desc.dim = 1;
        }
        assert_eq!(compared(&[&same, &tail]).ok(), Some(1));
        // NaN scalars compare by bits, as the encoding does.
        let nan = run(f64::NAN);
        assert_eq!(compared(&[&nan, &nan]).ok(), Some(8));
        // Sites are not compared.
        let mut moved = run(2.0);
        moved[5].desc.site = CallSite::caller();
        assert_eq!(compared(&[&same, &moved]).ok(), Some(8));
    }

    #[test]
    fn records_agree_on_the_calls_before_a_difference() {
        let big = || {
            (0..8)
                .map(|_| op(OpKind::AllReduce, 8192))
                .collect::<Vec<_>>()
        };
        let same = big();
        assert_eq!(compared(&[&same, &same, &same]).ok(), Some(8));
        // The shortest proposal.
        assert_eq!(compared(&[&same, &same[..2], &same]).ok(), Some(2));
        // Call 5 differs: the four before it pack; call 5 heads a later agreement.
        let mut other = big();
        other[5].desc.op = Some(ReduceOp::Max);
        assert_eq!(compared(&[&same, &other]).ok(), Some(4));
        other[1].desc.shape = Shape::from_slice(&[8191]);
        assert_eq!(compared(&[&same, &other]).ok(), Some(1));
        // Heads that differ: a mismatch naming both calls, at this step.
        match compared(&[&same, &other[5..]]) {
            Err(Error::CollectiveMismatch(m)) => {
                assert_eq!((m.step, m.rank_a, m.rank_b), (7, 0, 1));
                assert!(
                    m.what_a.contains("Sum") && m.what_b.contains("Max"),
                    "{m:?}"
                );
            }
            other => panic!("not a mismatch: {other:?}"),
        }
    }
}
