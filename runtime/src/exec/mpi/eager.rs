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
//! Large gathers and scatters with contiguous blocks (and large broadcasts between two) use the
//! same exchange *directly*: the header message first, then the data straight from the input
//! into the output (see [`direct`]). All-gathers and all-to-alls, where every member sends
//! every other one data, send no header at all: the agreement is the data message's tag (see
//! [`call_tag`]).
//!
//! Messages go over a communicator of their own per group (a duplicate made with the group's),
//! so they never meet point-to-point traffic, whose receives take any tag. On a group whose
//! members share a host, the header messages (with a small exchange's data) go through the
//! group's shared-memory lanes instead (see `lanes`): the same bytes in the same order, so
//! nothing here depends on which way they went.

use super::drive::{MAX_PACK, PREFIXES, RECORD, Records, compare, record};
use super::lanes::{Held, Lanes};
use super::raw::{self, Comm, Received, Request};
use super::steps::{Scratch, fold_parts};
use crate::error::{Error, Result};
use crate::exec::Op;
use crate::exec::copy::{CopyFn, copy_bytes, copy_rows, copy_rows_by, copy_to_shared};
use crate::model::{OpDesc, OpKind};
use crate::rules::rows;

/// Groups up to this many members run small collectives here (each member sends `n - 1`
/// messages, which beats a schedule only while `n` is small).
pub(super) const MAX_MEMBERS: usize = super::lanes::MAX_MEMBERS;
/// A collective is small when its tensor is at most this many bytes.
const SMALL: usize = 16 * 1024;
/// The most payload bytes one message carries: a packed run stops before it would exceed it.
const CAP: usize = 64 * 1024;
/// Tags: exchanges (headers and data) and the full records sent when headers disagree, kept
/// apart so that a record never lands in an exchange's receive (or the other way round) when
/// members disagree about what they exchange.
const DATA: std::ffi::c_int = 0;
const RECORDS: std::ffi::c_int = 1;
/// The tags of a direct all_reduce's two rounds (`steps`), on the same communicator: their own,
/// so that no message of an exchange can ever match one of theirs (a round may still be in
/// flight when the next call's exchange is posted; today the order of posting already keeps
/// them apart, and the tags make that hold whatever the order).
pub(super) const SPREAD: std::ffi::c_int = 2;
pub(super) const SHARE: std::ffi::c_int = 3;
/// The first tag of [`call_tag`]'s range (which runs to MPI's tag bound), above every tag
/// named here.
const FIRST_CALL_TAG: std::ffi::c_int = 4;
const _: () = assert!(DATA < RECORDS && RECORDS < SPREAD && SPREAD < SHARE);
const _: () = assert!(SHARE < FIRST_CALL_TAG);
/// Tagged exchanges need at least this many tags (Open MPI has 2^31): a disagreement goes
/// unseen when two calls' tags collide, one chance in the range's size.
const MIN_CALL_TAGS: std::ffi::c_int = 1 << 24;

/// MPI's largest tag (`MPI_TAG_UB`, a property of the process's MPI), set by the backend.
static TAG_UB: std::sync::OnceLock<std::ffi::c_int> = std::sync::OnceLock::new();

/// Records MPI's tag bound (once per process; the backend calls it as it starts).
pub(super) fn set_tag_ub(ub: std::ffi::c_int) {
    _ = TAG_UB.set(ub);
}

/// The tag of a *tagged* exchange's data messages: a hash of the head call's record and
/// collective step (the header's first two words) folded into the tags above [`RECORDS`]; none
/// when MPI has too few tags for it to tell calls apart.
///
/// A member receives only with the tag its own call gives, so members that disagree about the
/// call (or are at different steps) never match each other's messages: each waits, and the
/// monitor, seeing them blocked at one step of the communicator in different calls, names both
/// (as a header exchange would, without its message: at 64 KiB and world 2 the header put these
/// calls 9–15 % above raw MPI, 5–7 % without it). Calls whose tags collide (one chance in 2^31
/// with Open MPI) would pass unseen; their sizes are still compared on arrival.
fn call_tag(header: &[u8; HEAD_MAX]) -> Option<std::ffi::c_int> {
    tag_within(header, *TAG_UB.get()?)
}

/// [`call_tag`] for the tag bound `ub`.
fn tag_within(header: &[u8; HEAD_MAX], ub: std::ffi::c_int) -> Option<std::ffi::c_int> {
    if ub - FIRST_CALL_TAG < MIN_CALL_TAGS {
        return None;
    }
    // The head hash is already well mixed; the step word is not (one multiply spreads it).
    let h = word(header, 0) ^ word(header, 8).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let span = (ub - FIRST_CALL_TAG) as u64 + 1;
    Some(FIRST_CALL_TAG + ((h >> 1) % span) as std::ffi::c_int)
}

/// `e` with the exchange it came from when it is an internal error (the head call `head`, at
/// collective step `step` of the group `members`): a failure rankwise never expects should say
/// where it happened.
pub(super) fn in_exchange(e: Error, head: &OpDesc, step: u64, members: &[usize]) -> Error {
    match e {
        Error::Internal(m) => Error::Internal(format!(
            "{m} (in the exchange of {} at {}, step {step} of group {members:?})",
            head.summary(),
            head.site
        )),
        e => e,
    }
}

/// Whether a direct exchange of `d` is *tagged*: every member sends every other data (an
/// all-gather or all-to-all), so each message can carry the agreement in its tag. A rooted
/// direct call still exchanges headers, since members that send the root nothing must still
/// tell it what they called.
fn symmetric(d: &OpDesc) -> bool {
    matches!(d.kind, OpKind::AllGather | OpKind::AllToAll)
}

/// Bytes of one member's region in the receive buffer: a header and a full payload.
const REGION: usize = HEAD_MAX + CAP;
// Every message an exchange sends fits a shared-memory lane (see `lanes`).
const _: () = assert!(REGION <= super::lanes::MSG_MAX);

/// The header of a message: the head call's hash, the proposal `p` (in a word that also holds
/// the low bits of the head's collective step), the hashes of the first 1, 2, 4, … calls up to
/// `p` — the parts of the call record that agreement compares — and, for a long proposal, the
/// hash of its whole run (whose length need not be a power of two). The
/// rest of the record (the calls as data, their sites) is sent only when headers disagree, to
/// name the calls: shared memory moves a message of up to ~100 bytes markedly faster than one
/// of 256.
fn head_len(p: Proposal) -> usize {
    16 + 8 * (p.prefixes().trailing_zeros() as usize + 1) + if p.long { 8 } else { 0 }
}
const HEAD_MAX: usize = 16 + 8 * (MAX_PACK.trailing_zeros() as usize + 1) + 8;

/// Writes the call record of `run` (proposed `long` or not, at collective step `step` of its
/// group) into `rec` and returns the header made from it (its first `head_len` bytes are
/// meant).
fn header_of(run: &[Op], long: bool, step: u64, rec: &mut [u8; RECORD]) -> [u8; HEAD_MAX] {
    let proposal = Proposal {
        calls: run.len(),
        long,
    };
    let head = head_len(proposal);
    let whole = record(run, rec);
    let mut header = [0u8; HEAD_MAX];
    header[..16].copy_from_slice(&rec[..16]);
    header[8..16].copy_from_slice(&proposal.word(step).to_le_bytes());
    let hashes = head - if long { 8 } else { 0 };
    header[16..hashes].copy_from_slice(&rec[PREFIXES..PREFIXES + hashes - 16]);
    if long {
        header[hashes..head].copy_from_slice(&whole.to_le_bytes());
    }
    header
}

/// The word at `at` of a header (0 past its end: a short header then fails the checks).
fn word(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .and_then(|w| w.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

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

/// What a posted message of an exchange is.
#[derive(Clone, Copy, Debug)]
pub(super) enum Msg {
    Sent,
    /// The header (with a small exchange's data) from a member.
    Head(usize),
    /// A direct exchange's data from a member, received in place.
    Data(usize),
}

/// Whether `d` is exchanged *directly*: a gather or scatter of more than 4 KiB whose blocks
/// are contiguous (along dim 0, or dims before it of size 1), or a broadcast between two of
/// more than 16 KiB, goes as a header message and then the data, straight from the input and
/// into the output — no copy, each byte sent once, which is what these collectives need at any
/// size. On a group with shared-memory `lanes`, both only above one message's payload
/// ([`CAP`]): below it the exchange through the lanes is cheaper. There an all-gather among
/// more than two goes through the group's window instead (`shm::gather_block`), which copies
/// each block into shared memory once for all its readers, where MPI moves it once per pair
/// with a handshake each. (All-gathers and all-to-alls send no header: see [`call_tag`].)
/// (Reductions need every member's data folded, which the schedule path does with ring
/// bandwidth.)
pub(super) fn direct(d: &OpDesc, n: usize, lanes: bool) -> bool {
    let gathers = matches!(
        d.kind,
        OpKind::AllGather | OpKind::Gather | OpKind::AllToAll | OpKind::Scatter
    ) && rows(&d.shape, d.dim).0 == 1;
    // A broadcast's root would send the whole tensor to every member: only for a pair, where
    // that is all a tree would do too.
    let pair_broadcast = d.kind == OpKind::Broadcast && n <= 2;
    let (gather_above, broadcast_above) = if lanes {
        (CAP, CAP)
    } else {
        (DIRECT_GATHER, SMALL)
    };
    let gathers = gathers && !(lanes && n > 2 && d.kind == OpKind::AllGather);
    n <= MAX_MEMBERS
        && ((gathers && bound(d) > gather_above) || (pair_broadcast && bound(d) > broadcast_above))
}

/// Gathers and scatters whose tensor is larger go directly through MPI: above Open MPI's
/// shared-memory eager limit (4 KiB) their data moves by rendezvous anyway, and copying it into
/// and out of an exchange's buffers costs more than the header's separate message. Through a
/// group's shared-memory lanes (see `lanes`) the exchange's copies cost less than MPI's
/// rendezvous up to one message's payload ([`CAP`]): 16 KiB all_to_all at world 4 took
/// 4.2 µs in the exchange against 20 µs directly (raw MPI 16 µs).
const DIRECT_GATHER: usize = 4 * 1024;

/// Whether `d` moves data without folding it (a broadcast, gather, scatter or all-to-all):
/// through lanes such a call is exchanged alone up to one message's payload.
fn moves_only(d: &OpDesc) -> bool {
    matches!(
        d.kind,
        OpKind::Broadcast | OpKind::AllGather | OpKind::Gather | OpKind::AllToAll | OpKind::Scatter
    )
}

/// What a member proposes for the exchange at the head of its run: how many collectives the
/// exchange agrees on, and whether they are a *long* run.
///
/// A short proposal's calls all travel in the exchange (their data after the header). A long
/// proposal is a run of small same-kind reductions or broadcasts (`drive::same_kind_run`)
/// whose data does not fit one exchange's payload cap: its message carries the hashes of the
/// whole run but the data of the head call alone, and when every member proposes long, the
/// rest of the agreed run is packed into one buffer and reduced as one large collective (two
/// rounds of direct messages, each byte crossing twice, where an exchange sends every
/// member's whole payload to every other member). Members that batch alike therefore move a
/// bucket of small all_reduces at about the cost of one all_reduce of its size; members that
/// do not still meet, one call per exchange.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Proposal {
    /// Calls proposed (a power of two unless long, at most [`MAX_PACK`]); 0: the head takes
    /// the schedule path of `steps`.
    pub(super) calls: usize,
    pub(super) long: bool,
}

impl Proposal {
    const SCHEDULE: Proposal = Proposal {
        calls: 0,
        long: false,
    };
    const fn short(calls: usize) -> Proposal {
        Proposal { calls, long: false }
    }
    /// The longest power-of-two prefix of the calls: the one the header has a hash for.
    fn prefixes(self) -> usize {
        1 << self.calls.max(1).ilog2()
    }
    /// Calls whose data the member's message carries.
    fn carried(self) -> usize {
        if self.long { 1 } else { self.calls }
    }
    /// The header word that says it, for collective step `step` (of which the word keeps the
    /// low bits: enough to tell a message of this step from one left over from an earlier one).
    fn word(self, step: u64) -> u64 {
        self.calls as u64 | u64::from(self.long) << LONG_BIT | (step & STEP_MASK) << STEP_SHIFT
    }
}

/// The bit of a header's proposal word that marks a long proposal.
const LONG_BIT: u32 = 32;
/// Where the step's low bits sit in a header's proposal word, and how many there are.
const STEP_SHIFT: u32 = LONG_BIT + 1;
const STEP_MASK: u64 = (1 << (64 - STEP_SHIFT)) - 1;

/// Why an exchange's headers do not agree: member `j`'s call differs, or its message belongs
/// to another of its steps (whose low bits it says) — one left unread by a collective on which
/// the members disagreed without noticing (see [`one_way`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Disagreement {
    Call(usize),
    Step(usize, u64),
}

/// What the exchange at the head of a run came to, the same on every member.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Agreed {
    /// Calls whose results the exchange delivered (from the head on).
    pub(super) delivered: usize,
    /// Calls after those to run as one packed collective (every member proposed long).
    pub(super) packed: usize,
    /// This member proposed long, and some member short: they batch differently, so it should
    /// stop proposing long runs on this communicator for the rest of the batch.
    pub(super) met_short: bool,
}

impl Agreed {
    /// The head call alone (a direct exchange's one call).
    const ONE: Agreed = Agreed {
        delivered: 1,
        packed: 0,
        met_short: false,
    };
}

/// How many collectives from `k` go into one exchange (see [`Proposal`]; a long one only if
/// `long` allows, a short one of at most `cap`, a power of two); none when the head is neither
/// small nor direct (it then takes the schedule path of `steps`), except that through `lanes` a
/// call that moves data without folding it is exchanged alone up to one message's payload.
/// With `heaps` (every member of the group has a shared heap), a broadcast, all-gather or
/// all-to-all above [`SMALL`] whose senders can be read where they are (`shm::pulls`) takes the
/// schedule path, where the group's window reads it (or hands it back, to run as without
/// heaps: see `shm::pulls_only`): each byte is copied once, by its reader, where MPI and the
/// lanes copy it twice or through the kernel. Every member decides the head's path alike, from the
/// description all members share and whether the group has lanes and heaps, which all members
/// know alike.
// The run and where it stands, the group's size and transport, and this member's choices:
// none of it belongs together in a type of its own.
#[allow(clippy::too_many_arguments)]
pub(super) fn proposal(
    ops: &[Op],
    k: usize,
    end: usize,
    n: usize,
    check: bool,
    long: bool,
    cap: usize,
    lanes: bool,
    heaps: bool,
) -> Proposal {
    if heaps && bound(&ops[k].desc) > SMALL && super::shm::pulls(&ops[k].desc, n) {
        return Proposal::SCHEDULE;
    }
    if direct(&ops[k].desc, n, lanes) {
        return Proposal::short(1);
    }
    if n > MAX_MEMBERS {
        return Proposal::SCHEDULE;
    }
    if bound(&ops[k].desc) > SMALL {
        // Through lanes, a call that moves data without folding it is exchanged alone up to one
        // message's payload: copying it through a lane beats MPI's tree or rendezvous there.
        return if lanes && moves_only(&ops[k].desc) && bound(&ops[k].desc) <= CAP {
            Proposal::short(1)
        } else {
            Proposal::SCHEDULE
        };
    }
    if one_way(&ops[k].desc, check) {
        return Proposal::short(1);
    }
    let mut bytes = 0;
    let run = ops[k..end]
        .iter()
        .take(MAX_PACK)
        .take_while(|o| {
            let b = bound(&o.desc);
            bytes += b;
            b <= SMALL && bytes <= CAP
        })
        .count();
    // Only a run that the payload cap (or the largest run) cuts short is worth a collective
    // of its own.
    let same = if long {
        super::drive::same_kind_run(ops, k, end)
    } else {
        1
    };
    let calls = ops[k..k + same]
        .iter()
        .take_while(|o| bound(&o.desc) <= SMALL)
        .count();
    if calls > run {
        Proposal { calls, long: true }
    } else {
        Proposal::short((1 << run.max(1).ilog2()).min(cap.max(1)))
    }
}

/// Whether `d`, at the head of a run, is exchanged one way — only the messages that carry data
/// (root to members, or members to root), alone. Only without the agreement check (`check`
/// false: `RANKWISE_MPI_CHECK=0`, or a call a `#[rankwise::program]` proof covers): a member
/// that sends nothing tells nobody what it called, so a disagreement is found only by the
/// members that receive (the header still travels with the data and is compared), and only its
/// existence, not the other call; a disagreement about the root is not found at all — which a
/// proof rules out (the macro compares a checked program's roots, computing them as the program
/// does, and the guard makes sure each call names the root the macro verified: see
/// `Guard::check_peer`). With the
/// check, every member hears from every other: one round trip more than a one-way broadcast,
/// the measured price of naming both calls.
pub(super) fn one_way(d: &OpDesc, check: bool) -> bool {
    !check && d.kind.is_rooted()
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
    /// Member `i`'s region (`REGION` bytes): its header, then its payload for this member.
    /// This member's own region is filled locally.
    recv: Scratch,
    /// This member's message to member `j` at `j · send_stride`.
    send: Scratch,
    /// This member's full call record (sent only if the headers disagree).
    record: [u8; RECORD],
    /// Bytes received from each member (this one's own included); 0: nothing comes from it.
    got: [usize; MAX_MEMBERS],
    /// Exchanged one way (see [`one_way`]).
    one_way: bool,
    /// Exchanged directly (see [`direct`]): headers, then data in place.
    direct: bool,
    /// Directly, without headers: the data's tag is the agreement (see [`call_tag`]).
    tagged: bool,
    /// Header receives still outstanding.
    pending: usize,
    /// A direct exchange's data receives still outstanding, and the bytes each brought (a
    /// message shorter than its receive is no MPI error: it is compared in `deliver`).
    data_pending: usize,
    got_data: [usize; MAX_MEMBERS],
    /// Members (one bit each) whose header this member posted a receive for, whose header
    /// arrived, and whose direct data arrived: each message is counted once, so a completion
    /// reported twice, or a member never heard from, is named instead of read as data.
    expected: Members,
    heads: Members,
    datas: Members,
    /// Through the group's shared-memory lanes (see `lanes`): the headers whose messages are
    /// still to be placed in a peer's lane, and still to be taken from one, with their numbers
    /// in the lane; the bytes of this member's message to each member (at `j · stride` of
    /// `send`).
    lane_out: Members,
    lane_in: Members,
    out_no: [u64; MAX_MEMBERS],
    in_no: [u64; MAX_MEMBERS],
    out_len: [usize; MAX_MEMBERS],
    stride: usize,
    /// Messages taken from lanes but read where they are (see `Lanes::take`): member `i`'s
    /// bytes are there instead of in its region until `deliver` releases them.
    held: [Option<Held>; MAX_MEMBERS],
}

/// A set of member indices, one bit each.
type Members = u8;
const _: () = assert!(MAX_MEMBERS <= Members::BITS as usize);

/// An exchange's buffers, kept for the next one.
pub(super) struct Buffers {
    recv: Scratch,
    send: Scratch,
}

/// How far an exchange is after a message.
#[derive(Debug)]
pub(super) struct Progress {
    /// Every header has arrived (before this message, not all had).
    pub(super) heads_now: bool,
    /// Everything has arrived (before this message, not all had).
    pub(super) all_now: bool,
}

impl Exchange {
    /// Writes this member's header and payloads for `run` (a power of two of calls; a `long`
    /// proposal carries the head's data alone, see [`Proposal`]; the head is collective step
    /// `step` of the group) and posts
    /// its messages: a receive from, and a send to, every other member (only those that carry
    /// data, one way; the data after the header, directly; the data alone, tagged by the call,
    /// for a direct all-gather or all-to-all), each MPI request handed to `push` with what it
    /// is. With `lanes` (the group's window, see `lanes`), the header messages go through
    /// them instead, and [`Exchange::poll_lanes`] moves what could not move at once. Returns
    /// the exchange and how many requests and lane messages it left outstanding.
    ///
    /// # Safety
    /// The ops' buffers must be valid for their descriptions until the exchange is delivered;
    /// the posted requests must complete before the exchange is dropped.
    // The run, its group and this member's place in it, and what the caller does with each
    // request: none of it belongs together in a type of its own.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn post(
        run: &[Op],
        long: bool,
        step: u64,
        comm: &Comm,
        members: &[usize],
        me: usize,
        check: bool,
        spare: Option<Buffers>,
        lanes: Option<&Lanes>,
        mut push: impl FnMut(Request, Msg),
    ) -> Result<(Self, usize)> {
        let n = members.len();
        if n > MAX_MEMBERS {
            return Err(Error::Internal(format!("an exchange among {n} members")));
        }
        let proposal = Proposal {
            calls: run.len(),
            long,
        };
        let head = head_len(proposal);
        let is_direct = run.len() == 1 && direct(&run[0].desc, n, lanes.is_some());
        // The calls whose data travels here (a long run's head alone).
        let carried = &run[..proposal.carried()];
        let payload: usize = carried.iter().map(|o| bound(&o.desc)).sum();
        let stride = head + if is_direct { 0 } else { payload };
        let (recv, send) = spare.map_or((None, None), |b| (Some(b.recv), Some(b.send)));
        let mut ex = Exchange {
            one_way: one_way(&run[0].desc, check),
            direct: is_direct,
            ..Exchange::unposted(
                Scratch::reuse(recv, n * REGION)?,
                Scratch::reuse(send, n * stride)?,
                stride,
            )
        };
        let header = header_of(run, long, step, &mut ex.record);
        // (Hashed only for the calls that use it: every small call comes through here.)
        let call = (is_direct && symmetric(&run[0].desc))
            .then(|| call_tag(&header))
            .flatten();
        ex.tagged = call.is_some();
        let tag = call.unwrap_or(DATA);
        // Everything that can fail before posting is checked here: once a message is posted,
        // the exchange's memory must outlive it, so a later failure leaks the exchange (the
        // caller then ends the job) rather than free memory MPI may still use.
        for o in run {
            root_index(&o.desc, members)?;
        }
        let head_root = root_index(&run[0].desc, members)?;
        let region = raw::count(REGION)?;
        let (recv, send) = (ex.recv.ptr(), ex.send.ptr());
        let u8s = raw::datatype(crate::DType::U8);
        let mut posted = 0;
        let mut post_all = |ex: &mut Exchange| -> Result<()> {
            for j in 0..n {
                // The message's length: the header, then each carried call's segment for j.
                let mut len = head;
                for o in carried.iter().filter(|_| !is_direct) {
                    let root = root_index(&o.desc, members).unwrap_or(0);
                    len += pad8(seg(&o.desc, me, j, n, root) * o.desc.dtype.size());
                }
                let (from_j, to_j) = if j == me {
                    (false, false)
                } else if ex.one_way {
                    let d = &run[0].desc;
                    (
                        seg(d, j, me, n, head_root) > 0,
                        seg(d, me, j, n, head_root) > 0,
                    )
                } else {
                    // (A tagged exchange's data says it all.)
                    (!ex.tagged, !ex.tagged)
                };
                // Our own message goes straight into our receive region; one through a lane
                // straight into the lane when it has room (written once, where the peer
                // reads it), else into the send scratch until it has.
                let m = lanes.filter(|_| to_j).map(|l| l.number_out(j));
                let room = match (lanes, m) {
                    (Some(l), Some(m)) => l.reserve(j, m, len)?.map(|r| (l, r)),
                    _ => None,
                };
                let msg = match &room {
                    _ if j == me => recv.wrapping_add(me * REGION),
                    Some((_, room)) => room.dst,
                    None => send.wrapping_add(j * stride),
                };
                // SAFETY: `msg` has room for `len` bytes: our region (REGION ≥ the header and
                // the run's payload, at most CAP), the send scratch's region j (`stride`
                // bytes, the most any member's message takes), or the lane's room (`len`).
                unsafe { std::ptr::copy_nonoverlapping(header.as_ptr(), msg, head) };
                let mut at = head;
                // (A lane's room is read next by the peer's core.)
                let copy: CopyFn = if room.is_some() {
                    copy_to_shared
                } else {
                    copy_bytes
                };
                for o in carried.iter().filter(|_| !is_direct) {
                    let root = root_index(&o.desc, members).unwrap_or(0);
                    let seg_len = seg(&o.desc, me, j, n, root);
                    // SAFETY: as above; the op's buffers are valid for its description.
                    unsafe { write_seg(o, msg.add(at), j, n, seg_len, copy) };
                    at += pad8(seg_len * o.desc.dtype.size());
                }
                if j == me {
                    ex.got[me] = at;
                    continue;
                }
                // Published at once: nothing between reserving and publishing may fail, or
                // the lane would wait for this message forever.
                let queued = match room {
                    Some((l, room)) => {
                        l.publish(room);
                        None
                    }
                    None => m,
                };
                // Ranks of the group's communicator are member indices.
                let (peer, len) = (raw::count(j)?, raw::count(at)?);
                // SAFETY: the receive writes at most REGION bytes of region j, the send reads
                // `at` bytes of its message; both scratches live in the exchange until the
                // requests complete (the caller's contract).
                unsafe {
                    if from_j {
                        if let Some(l) = lanes {
                            ex.in_no[j] = l.number_in(j);
                            ex.lane_in |= 1 << j;
                        } else {
                            push(
                                raw::irecv(
                                    recv.add(j * REGION),
                                    region,
                                    u8s,
                                    peer,
                                    Some(DATA),
                                    comm,
                                )?,
                                Msg::Head(j),
                            );
                        }
                        posted += 1;
                        ex.pending += 1;
                        ex.expected |= 1 << j;
                    }
                    if to_j {
                        if lanes.is_some() {
                            if let Some(m) = queued {
                                (ex.out_no[j], ex.out_len[j]) = (m, at);
                                ex.lane_out |= 1 << j;
                                posted += 1;
                            }
                        } else {
                            push(
                                raw::isend(
                                    raw::SendMode::Standard,
                                    msg,
                                    len,
                                    u8s,
                                    peer,
                                    DATA,
                                    comm,
                                )?,
                                Msg::Sent,
                            );
                            posted += 1;
                        }
                    }
                    if is_direct {
                        // The data follows its header, straight from and into the tensors, on
                        // MPI's channel between the two (which keeps its order: through lanes,
                        // where headers go their own way, it carries only direct exchanges'
                        // data, posted in the same exchange order on both sides).
                        let o = &run[0];
                        let d = &o.desc;
                        let es = d.dtype.size();
                        let inward = seg(d, j, me, n, head_root);
                        if inward > 0 {
                            let at = block(o, j, me, n, head_root, Side::Into);
                            let c = raw::count(inward * es)?;
                            push(raw::irecv(at, c, u8s, peer, Some(tag), comm)?, Msg::Data(j));
                            posted += 1;
                            ex.data_pending += 1;
                        }
                        let outward = seg(d, me, j, n, head_root);
                        if outward > 0 {
                            let at = block(o, me, j, n, head_root, Side::From);
                            let c = raw::count(outward * es)?;
                            push(
                                raw::isend(raw::SendMode::Standard, at, c, u8s, peer, tag, comm)?,
                                Msg::Sent,
                            );
                            posted += 1;
                        }
                    }
                }
            }
            Ok(())
        };
        if let Err(e) = post_all(&mut ex) {
            if posted > 0 {
                std::mem::forget(ex);
            }
            return Err(e);
        }
        Ok((ex, posted))
    }

    /// An exchange on these buffers (messages to members `stride` bytes apart in `send`) with
    /// nothing written, posted or heard yet, both ways and not direct.
    fn unposted(recv: Scratch, send: Scratch, stride: usize) -> Exchange {
        Exchange {
            recv,
            send,
            record: [0; RECORD],
            got: [0; MAX_MEMBERS],
            one_way: false,
            direct: false,
            tagged: false,
            pending: 0,
            data_pending: 0,
            got_data: [0; MAX_MEMBERS],
            expected: 0,
            heads: 0,
            datas: 0,
            lane_out: 0,
            lane_in: 0,
            out_no: [0; MAX_MEMBERS],
            in_no: [0; MAX_MEMBERS],
            out_len: [0; MAX_MEMBERS],
            stride,
            held: [const { None }; MAX_MEMBERS],
        }
    }

    /// Its buffers, for the next exchange (only once every request has completed).
    pub(super) fn into_buffers(self) -> Buffers {
        Buffers {
            recv: self.recv,
            send: self.send,
        }
    }

    /// Whether this is a direct exchange (headers first, then data in place).
    pub(super) fn is_direct(&self) -> bool {
        self.direct
    }

    /// Whether messages of this exchange are still to move through the group's lanes.
    pub(super) fn lanes_busy(&self) -> bool {
        self.lane_out | self.lane_in != 0
    }

    /// Moves this exchange's lane messages as far as the peers allow: places those whose slots
    /// are free, takes those that arrived (as [`Exchange::received`] counts an MPI receive).
    /// Returns how many moved, and what the arrivals complete.
    ///
    /// # Safety
    /// `lanes` are the ones the exchange was posted with.
    pub(super) unsafe fn poll_lanes(&mut self, lanes: &Lanes) -> Result<(usize, Progress)> {
        let mut moved = 0;
        let mut progress = Progress {
            heads_now: false,
            all_now: false,
        };
        let mut out = self.lane_out;
        while out != 0 {
            let j = out.trailing_zeros() as usize;
            out &= out - 1;
            // SAFETY: message j was written at j · stride of `send` (`post`), `out_len[j]`
            // bytes, and the scratch lives in the exchange.
            let placed = unsafe {
                let msg = self.send.ptr().add(j * self.stride);
                lanes.send(j, self.out_no[j], msg, self.out_len[j])?
            };
            if placed {
                self.lane_out &= !(1 << j);
                moved += 1;
            }
        }
        let mut from = self.lane_in;
        while from != 0 {
            let j = from.trailing_zeros() as usize;
            from &= from - 1;
            // Read in the lane itself, where it stays until `deliver`: one copy fewer.
            if let Some(held) = lanes.take(j, self.in_no[j], REGION)? {
                let len = held.len;
                self.held[j] = Some(held);
                self.lane_in &= !(1 << j);
                moved += 1;
                let p = self.received(
                    Msg::Head(j),
                    Received {
                        tag: DATA,
                        count: Some(len),
                    },
                )?;
                progress.heads_now |= p.heads_now;
                progress.all_now |= p.all_now;
            }
        }
        Ok((moved, progress))
    }

    /// Whether every message to receive has arrived.
    pub(super) fn all_in(&self) -> bool {
        self.pending == 0 && self.data_pending == 0
    }

    /// A message arrived (`msg`, with its status); says what that completes.
    pub(super) fn received(&mut self, msg: Msg, got: Received) -> Result<Progress> {
        let before = (self.pending == 0, self.all_in());
        match msg {
            Msg::Sent => {
                return Ok(Progress {
                    heads_now: false,
                    all_now: false,
                });
            }
            Msg::Head(i) if self.heads & 1 << i != 0 || self.expected & 1 << i == 0 => {
                return Err(self.miscounted("header", i));
            }
            Msg::Data(i) if self.datas & 1 << i != 0 || !self.direct => {
                return Err(self.miscounted("data", i));
            }
            Msg::Head(i) => match got.count {
                Some(c) if c >= head_len(Proposal::short(1)) => {
                    self.got[i] = c;
                    self.heads |= 1 << i;
                    self.pending -= 1;
                }
                _ => {
                    return Err(Error::Internal(format!(
                        "a collective's message from member {i} has {} bytes, not a header",
                        got.count.map_or("too many".to_string(), |c| c.to_string())
                    )));
                }
            },
            Msg::Data(i) => {
                self.datas |= 1 << i;
                self.data_pending -= 1;
                // Too long (truncated) counts as nothing: the size check in `deliver` fails.
                self.got_data[i] = got.count.unwrap_or(0);
            }
        }
        Ok(Progress {
            heads_now: !before.0 && self.pending == 0,
            all_now: !before.1 && self.all_in(),
        })
    }

    /// The error for a completion of member `i`'s `what` this exchange did not wait for: one
    /// reported twice, or one it never posted (a bug, in rankwise or in MPI's request
    /// bookkeeping — either way the data cannot be trusted).
    fn miscounted(&self, what: &str, i: usize) -> Error {
        Error::Internal(format!(
            "a small collective's {what} message from member {i} completed although it was not \
             awaited (receives posted from members {:#010b}, headers heard {:#010b}, data heard \
             {:#010b})",
            self.expected, self.heads, self.datas
        ))
    }

    /// Where member `i`'s message is (`got[i]` bytes): in its lane while held there, else in
    /// its region.
    fn message(&self, i: usize) -> *const u8 {
        match &self.held[i] {
            Some(h) => h.src,
            None => self.recv.bytes().as_ptr().wrapping_add(i * REGION),
        }
    }

    /// Member `i`'s header: its message's first bytes.
    fn header(&self, i: usize) -> &[u8] {
        // SAFETY: member i's message has `got[i]` bytes (at most REGION in its region, its
        // length where it is held), and a held message stays unchanged until it is released,
        // which takes `&mut self`.
        unsafe { std::slice::from_raw_parts(self.message(i), self.got[i].min(HEAD_MAX)) }
    }

    /// Member `i`'s proposal, if its header is well formed.
    fn proposal(&self, i: usize) -> Option<Proposal> {
        let h = self.header(i);
        let w = word(h, 8);
        let long = (w >> LONG_BIT) & 1 == 1;
        let calls = usize::try_from(w & ((1 << LONG_BIT) - 1)).ok()?;
        let p = Proposal { calls, long };
        let well_formed = (1..=MAX_PACK).contains(&calls)
            && (long || calls.is_power_of_two())
            && head_len(p) <= h.len();
        well_formed.then_some(p)
    }

    /// The hash of member `i`'s whole run, if it proposed long.
    fn whole(&self, i: usize, p: Proposal) -> Option<u64> {
        p.long.then(|| word(self.header(i), head_len(p) - 8))
    }

    /// Checks the headers of the members heard from (every message has arrived): returns what
    /// the exchange comes to, or the first member whose call differs from this member's.
    ///
    /// The agreed run is the shortest proposal's power-of-two prefix (its calls' hashes
    /// compared); it is delivered here unless some member proposed long (and so sent the
    /// head's data alone): then the head is, and when *every* member proposed long, the rest
    /// of the run is packed — the whole run when every member proposed the same run (same
    /// length, same hash of all its calls), else the agreed prefix. Every member sees every
    /// header (long proposals are never one way), so all decide alike.
    fn agreed(&self, n: usize, me: usize) -> Result<std::result::Result<Agreed, Disagreement>> {
        match self.unanimous(n, me) {
            Some(a) => Ok(Ok(a)),
            None => self.agreed_in_full(n, me),
        }
    }

    /// [`Exchange::agreed`], every header parsed and compared field by field.
    fn agreed_in_full(
        &self,
        n: usize,
        me: usize,
    ) -> Result<std::result::Result<Agreed, Disagreement>> {
        let heard = |i: &usize| self.got[*i] > 0;
        let (mut m, mut any_long, mut all_long) = (MAX_PACK, false, true);
        // (`m`: the shortest proposal's power-of-two prefix.)
        let mine = self.proposal(me);
        let mut same_run = mine.is_some_and(|p| p.long);
        for i in (0..n).filter(heard) {
            let p = self.proposal(i).ok_or_else(|| {
                Error::Internal(format!(
                    "a malformed small-collective header from member {i}"
                ))
            })?;
            m = m.min(p.prefixes());
            any_long |= p.long;
            all_long &= p.long;
            same_run &=
                mine.is_some_and(|q| q.calls == p.calls && self.whole(i, p) == self.whole(me, q));
        }
        let step = |i: usize| word(self.header(i), 8) >> STEP_SHIFT;
        if let Some(j) = (0..n).filter(heard).find(|&j| step(j) != step(me)) {
            return Ok(Err(Disagreement::Step(j, step(j))));
        }
        let head = |i: usize| word(self.header(i), 0);
        if let Some(i) = (0..n).filter(heard).find(|&i| head(i) != head(me)) {
            return Ok(Err(Disagreement::Call(i)));
        }
        // The heads agree: the run is the longest power-of-two prefix whose hashes agree. A
        // disagreement further on is found by a later exchange — each one at least halves the
        // run — whose head it then is, reported with that exact call and step.
        let prefix =
            |i: usize, m: usize| word(self.header(i), 16 + 8 * m.trailing_zeros() as usize);
        let shortest = m;
        let m = super::drive::agreeing_prefix(shortest, |m| {
            (0..n).filter(heard).any(|i| prefix(i, m) != prefix(me, m))
        });
        // A run whose prefixes differ is not the same run, whatever its whole hash says.
        same_run &= m == shortest;
        Ok(Ok(match (any_long, all_long) {
            (false, _) => Agreed {
                delivered: m,
                packed: 0,
                met_short: false,
            },
            (true, true) => Agreed {
                delivered: 1,
                packed: match mine {
                    Some(p) if same_run => p.calls - 1,
                    _ => m - 1,
                },
                met_short: false,
            },
            (true, false) => Agreed {
                delivered: 1,
                packed: 0,
                met_short: mine.is_some_and(|p| p.long),
            },
        }))
    }

    /// What the exchange comes to when every header heard is byte for byte this member's (the
    /// common case): the same step, head, proposal and hashes, so [`Exchange::agreed`]'s answer
    /// follows from this member's proposal alone — one comparison per member instead of
    /// parsing and comparing each header field by field. `None`: some header differs (or this
    /// member's own is malformed), for the full comparison to judge.
    fn unanimous(&self, n: usize, me: usize) -> Option<Agreed> {
        let p = self.proposal(me)?;
        let len = head_len(p);
        let at = |i: usize| self.header(i).get(..len);
        let mine = at(me)?;
        let same = (0..n)
            .filter(|&i| i != me && self.got[i] > 0)
            .all(|i| self.got[i] >= len && at(i) == Some(mine));
        same.then_some(if p.long {
            Agreed {
                delivered: 1,
                packed: p.calls - 1,
                met_short: false,
            }
        } else {
            Agreed {
                delivered: p.prefixes(),
                packed: 0,
                met_short: false,
            }
        })
    }

    /// Checks the headers (all have arrived): returns what the exchange comes to, or the
    /// error that names the disagreement. Members that called different collectives exchange
    /// their full records to name both calls (except one way, where only this member's is
    /// known).
    pub(super) fn verify(
        &self,
        head: &OpDesc,
        comm: &Comm,
        members: &[usize],
        me: usize,
        step: u64,
    ) -> Result<Agreed> {
        let n = members.len();
        match self.agreed(n, me)? {
            Ok(a) => Ok(a),
            Err(Disagreement::Step(j, low)) => Err(Error::Backend {
                backend: "mpi",
                detail: format!(
                    "collective mismatch on group {members:?}: at step {step} rank {} calls {} at \
                     {}, but the message rank {} sent for it belongs to its step {} — the \
                     members disagreed about a collective on this group without noticing it \
                     (with RANKWISE_MPI_CHECK=0 a small broadcast, scatter, reduce or gather \
                     goes one way, so ranks that disagree about its root are found only here); \
                     run without RANKWISE_MPI_CHECK=0 to see the calls where they first \
                     disagree",
                    members[me],
                    head.summary(),
                    head.site,
                    members[j],
                    // The step's high bits are this member's (a leftover message is recent).
                    step & !STEP_MASK | low
                ),
            }),
            Err(Disagreement::Call(j)) if self.one_way => Err(Error::Backend {
                backend: "mpi",
                detail: format!(
                    "collective mismatch on group {members:?}, step {step}: rank {} calls {} at \
                     {}, but rank {}'s call differs (in kind, root, dtype, shape or operator); \
                     with RANKWISE_MPI_CHECK=0 small rooted collectives do not exchange their \
                     calls — run without it to see both",
                    members[me],
                    head.summary(),
                    head.site,
                    members[j]
                ),
            }),
            Err(Disagreement::Call(_)) => {
                let records = self.full_records(comm, n, me)?;
                compare(&Records::new(records.bytes(), RECORD), members, step)?;
                Err(Error::Internal(
                    "members' call headers differ but their records agree".into(),
                ))
            }
        }
    }

    /// Checks the headers (every message has arrived) and computes this member's results of
    /// the calls the exchange delivers (the first ones of `run`); says what it came to. Then
    /// gives the messages it read in `lanes` (those it was posted with) back to their senders,
    /// whatever the outcome.
    ///
    /// # Safety
    /// Every message has arrived, and the ops' buffers are valid for their descriptions.
    #[allow(clippy::too_many_arguments)] // the run, its group and step, and the lanes
    pub(super) unsafe fn deliver(
        &mut self,
        run: &[Op],
        comm: &Comm,
        members: &[usize],
        me: usize,
        step: u64,
        lanes: Option<&Lanes>,
    ) -> Result<Agreed> {
        // The work, with the messages still where they arrived.
        let agreed = (|| -> Result<Agreed> {
            let n = members.len();
            if !self.all_in() {
                return Err(Error::Internal(format!(
                    "a small collective was delivered with {} headers and {} data messages still \
                     outstanding",
                    self.pending, self.data_pending
                )));
            }
            let agreed = if self.tagged {
                // Every message matched this member's tag: the calls agree (see `call_tag`).
                Agreed::ONE
            } else {
                self.verify(&run[0].desc, comm, members, me, step)?
            };
            if agreed.delivered + agreed.packed > run.len() {
                return Err(Error::Internal(format!(
                    "an exchange agreed on {} calls where this member proposed {}",
                    agreed.delivered + agreed.packed,
                    run.len()
                )));
            }
            if self.direct {
                // SAFETY: every message has arrived; the op's buffers are valid.
                unsafe { self.deliver_direct(&run[0], members, me)? };
                return Ok(Agreed::ONE);
            }
            let mut at = [0usize; MAX_MEMBERS];
            for (i, a) in at.iter_mut().enumerate().take(n) {
                *a = head_len(self.proposal(i).unwrap_or(Proposal::short(1)));
            }
            let mut parts = [std::ptr::null::<u8>(); MAX_MEMBERS];
            for o in run.iter().take(agreed.delivered) {
                let d = &o.desc;
                let es = d.dtype.size();
                let root = root_index(d, members)?;
                for i in 0..n {
                    let bytes = seg(d, i, me, n, root) * es;
                    if bytes == 0 {
                        parts[i] = std::ptr::null(); // nothing comes from member i: never read
                        continue;
                    }
                    if at[i] + bytes > self.got[i] {
                        return Err(Error::Internal(if self.heads & 1 << i == 0 {
                            format!(
                                "the agreed small collectives need data from member {i}, but no \
                                 message from it was {} (receives posted from members {:#010b}, \
                                 headers heard {:#010b})",
                                if self.expected & 1 << i == 0 {
                                    "awaited"
                                } else {
                                    "received"
                                },
                                self.expected,
                                self.heads
                            )
                        } else {
                            format!(
                                "the small-collective message from member {i} is shorter ({} bytes) \
                                 than the agreed calls need",
                                self.got[i]
                            )
                        }));
                    }
                    // Within member i's message (checked against what arrived).
                    parts[i] = self.message(i).wrapping_add(at[i]);
                    at[i] += pad8(bytes);
                }
                // SAFETY: the parts hold what `seg` says for this op; the op's buffers are valid.
                unsafe { read_segs(o, &parts[..n], me, n, root) };
            }
            Ok(agreed)
        })();
        for held in self.held.iter_mut().filter_map(Option::take) {
            match lanes {
                Some(l) => l.release(held),
                None => {
                    return Err(Error::Internal(
                        "an exchange held messages in shared-memory lanes it was not given".into(),
                    ));
                }
            }
        }
        agreed
    }

    /// A direct exchange's data is in place: checks its sizes and copies this member's own
    /// block.
    ///
    /// # Safety
    /// As for [`Exchange::deliver`].
    unsafe fn deliver_direct(&self, o: &Op, members: &[usize], me: usize) -> Result<()> {
        let (d, n) = (&o.desc, members.len());
        let es = d.dtype.size();
        let root = root_index(d, members)?;
        for i in (0..n).filter(|&i| i != me) {
            let want = seg(d, i, me, n, root) * es;
            if want > 0 && self.got_data[i] != want {
                return Err(Error::Internal(format!(
                    "member {i} sent {} bytes where its agreed call sends {want}",
                    self.got_data[i]
                )));
            }
        }
        let own = seg(d, me, me, n, root) * es;
        // (A broadcast's root keeps its tensor: nothing to copy.)
        if own > 0 && d.kind != OpKind::Broadcast {
            let (from, into) = (
                block(o, me, me, n, root, Side::From),
                block(o, me, me, n, root, Side::Into),
            );
            // SAFETY: this member's block of its input and of its output, `own` bytes each,
            // in different tensors.
            unsafe { copy_bytes(into, from, own) };
        }
        Ok(())
    }

    /// Every member's full record, exchanged (only when headers disagree, so every member
    /// comes here alike): n records in member order.
    fn full_records(&self, comm: &Comm, n: usize, me: usize) -> Result<Scratch> {
        let mut all = Scratch::with_bytes(n * RECORD)?;
        let base = all.ptr();
        let u8s = raw::datatype(crate::DType::U8);
        let mut reqs = Vec::with_capacity(2 * n);
        let mut exchange = || -> Result<()> {
            // SAFETY: region `me` of `all` is in bounds; every other region receives at most
            // RECORD bytes; `all` and `self.record` outlive the requests (waited for below,
            // and on error `all` is leaked while the caller ends the job).
            unsafe {
                std::ptr::copy_nonoverlapping(self.record.as_ptr(), base.add(me * RECORD), RECORD);
                for j in (0..n).filter(|&j| j != me) {
                    let peer = raw::count(j)?;
                    let count = raw::count(RECORD)?;
                    reqs.push(raw::irecv(
                        base.add(j * RECORD),
                        count,
                        u8s,
                        peer,
                        Some(RECORDS),
                        comm,
                    )?);
                    reqs.push(raw::isend(
                        raw::SendMode::Standard,
                        self.record.as_ptr(),
                        count,
                        u8s,
                        peer,
                        RECORDS,
                        comm,
                    )?);
                }
            }
            let mut waiter = raw::Waiter::default();
            let mut left = reqs.len();
            while left > 0 {
                let done = waiter.wait_some(&mut reqs, |_| u8s)?.len();
                // MPI reports each request once: more than are left is a broken count.
                left = left.checked_sub(done).ok_or_else(|| {
                    Error::Internal(format!(
                        "MPI reported {done} requests of a record exchange complete with \
                         {left} outstanding"
                    ))
                })?;
            }
            Ok(())
        };
        match exchange() {
            Ok(()) => Ok(all),
            Err(e) => {
                std::mem::forget(all);
                Err(e)
            }
        }
    }
}

/// Which buffer of a direct exchange a block is in: the sender's input or the receiver's
/// output.
#[derive(Clone, Copy)]
enum Side {
    From,
    Into,
}

/// Where the block member `from` sends member `to` in a direct exchange lies (blocks are
/// contiguous there, see [`direct`]).
fn block(o: &Op, from: usize, to: usize, n: usize, root: usize, side: Side) -> *mut u8 {
    let d = &o.desc;
    let len = seg(d, from, to, n, root) * d.dtype.size();
    match (side, d.kind) {
        (Side::From, OpKind::AllToAll | OpKind::Scatter) => o.input.ptr.wrapping_add(to * len),
        (_, OpKind::Broadcast) | (Side::Into, OpKind::Scatter) => o.output.ptr,
        (Side::From, _) => o.input.ptr,
        (Side::Into, _) => o.output.ptr.wrapping_add(from * len),
    }
}

/// Writes what this member sends member `to` for `o` (`len` elements) at `dst`.
///
/// # Safety
/// `dst` has room for `len` elements; `o`'s buffers are valid for its description.
unsafe fn write_seg(o: &Op, dst: *mut u8, to: usize, n: usize, len: usize, copy: CopyFn) {
    if len == 0 {
        return;
    }
    let d = &o.desc;
    let es = d.dtype.size();
    // SAFETY: the caller's contract; every source range lies in the op's buffer for its
    // description (`rows` of the validated shape).
    unsafe {
        match d.kind {
            OpKind::Broadcast => copy(dst, o.output.ptr, len * es),
            // Block `to` of the root's input: the `to`-th slice along `dim` of every row.
            OpKind::Scatter | OpKind::AllToAll | OpKind::ReduceScatter => {
                let (outer, row) = rows(&d.shape, d.dim);
                let (width, pitch) = if d.kind == OpKind::Scatter {
                    (row * es, n * row * es)
                } else {
                    (row / n * es, row * es)
                };
                copy_rows_by(
                    copy,
                    false,
                    dst,
                    width,
                    o.input.ptr.add(to * width),
                    pitch,
                    outer,
                    width,
                )
            }
            _ => copy(dst, o.input.ptr, len * es),
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
                copy_bytes(o.output.ptr, parts[root], d.numel() * es)
            }
            OpKind::Scatter => copy_bytes(o.output.ptr, parts[root], d.numel() * es),
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::exec::Buf;
    use crate::model::{CallSite, GroupId, Shape};
    use crate::{DType, ReduceOp};

    /// A call of `kind` on `numel` f32s (a sum where it reduces), with no buffers.
    pub(in crate::exec::mpi) fn op(kind: OpKind, numel: usize) -> Op {
        Op {
            desc: OpDesc {
                kind,
                group: GroupId::WORLD,
                peer: None,
                op: Some(ReduceOp::Sum),
                dtype: DType::F32,
                shape: Shape::from_slice(&[numel]),
                dim: 0,
                site: CallSite::caller(),
            },
            input: Buf::NONE,
            output: Buf::NONE,
        }
    }

    #[test]
    fn proposals_are_powers_of_two_within_the_payload_cap() {
        // 1 KiB each, kinds alternating (so nothing packs into one call): 64 fit in 64 KiB; the
        // run of 100 is cut to 64.
        let kinds = [OpKind::AllReduce, OpKind::AllGather];
        let kib: Vec<Op> = (0..100).map(|i| op(kinds[i % 2], 256)).collect();
        assert_eq!(
            proposal(&kib, 0, 100, 2, true, true, MAX_PACK, false, false),
            Proposal::short(64)
        );
        // 3 left: the largest power of two within them.
        assert_eq!(
            proposal(&kib, 97, 100, 2, true, true, MAX_PACK, false, false).calls,
            2
        );
        // Too many members, or a large head: the schedule path.
        assert_eq!(
            proposal(
                &kib,
                0,
                100,
                MAX_MEMBERS + 1,
                true,
                true,
                MAX_PACK,
                false,
                false
            )
            .calls,
            0
        );
        let mut mixed = vec![op(OpKind::AllGather, 4)];
        mixed.push(op(OpKind::AllReduce, SMALL / 4 + 1));
        assert_eq!(
            proposal(&mixed, 1, 2, 4, true, true, MAX_PACK, false, false).calls,
            0
        );
        // A small head packs until the first large call.
        assert_eq!(
            proposal(&mixed, 0, 2, 4, true, true, MAX_PACK, false, false).calls,
            1
        );
        // Mixed kinds pack together; barriers carry no data.
        let kinds = [
            OpKind::Barrier,
            OpKind::Broadcast,
            OpKind::AllToAll,
            OpKind::Gather,
        ];
        let mixed: Vec<Op> = kinds.iter().map(|&k| op(k, 8)).collect();
        assert_eq!(
            proposal(&mixed, 0, 4, 4, true, true, MAX_PACK, false, false).calls,
            4
        );
        // Without the check, a rooted head goes one way, alone; other heads still pack.
        assert_eq!(
            proposal(&mixed, 1, 4, 4, false, true, MAX_PACK, false, false).calls,
            1
        );
        assert_eq!(
            proposal(&kib, 0, 100, 2, false, true, MAX_PACK, false, false).calls,
            64
        );
        assert!(one_way(&mixed[3].desc, false) && !one_way(&mixed[3].desc, true));
        assert!(!one_way(&mixed[2].desc, false));
    }

    #[test]
    fn a_run_the_payload_cap_cuts_short_is_proposed_long() {
        // 1000 all_reduces of 1 KiB: 64 fit in an exchange, 512 pack.
        let kib: Vec<Op> = (0..1000).map(|_| op(OpKind::AllReduce, 256)).collect();
        let long = proposal(&kib, 0, 1000, 4, true, true, MAX_PACK, false, false);
        assert_eq!((long.calls, long.long), (1000, true));
        assert_eq!(long.prefixes(), 512);
        assert_eq!(long.carried(), 1);
        // Without the check too (all_reduce is never one way).
        assert_eq!(
            proposal(&kib, 0, 1000, 4, false, true, MAX_PACK, false, false),
            long
        );
        // The tail of 40: all fit, so the exchange carries them (short).
        assert_eq!(
            proposal(&kib, 960, 1000, 4, true, true, MAX_PACK, false, false),
            Proposal::short(32)
        );
        // A kind change ends the packable run: 64 all_reduces then gathers is short.
        let mut mixed: Vec<Op> = (0..64).map(|_| op(OpKind::AllReduce, 256)).collect();
        mixed.extend((0..64).map(|_| op(OpKind::AllGather, 64)));
        assert_eq!(
            proposal(&mixed, 0, 128, 4, true, true, MAX_PACK, false, false),
            Proposal::short(64)
        );
        // A large call ends a long run (it would pay for a copy into the packed buffer).
        let mut big: Vec<Op> = (0..1000).map(|_| op(OpKind::AllReduce, 256)).collect();
        big[100] = op(OpKind::AllReduce, SMALL);
        assert_eq!(
            proposal(&big, 0, 1000, 4, true, true, MAX_PACK, false, false).calls,
            100
        );
        // Tiny tensors fit however many: short.
        let tiny: Vec<Op> = (0..1000).map(|_| op(OpKind::AllReduce, 2)).collect();
        assert_eq!(
            proposal(&tiny, 0, 1000, 4, true, true, MAX_PACK, false, false),
            Proposal::short(512)
        );
        // Rooted heads one way (no check) stay alone.
        let bcast: Vec<Op> = (0..1000).map(|_| op(OpKind::Broadcast, 256)).collect();
        assert_eq!(
            proposal(&bcast, 0, 1000, 4, false, true, MAX_PACK, false, false),
            Proposal::short(1)
        );
        assert!(proposal(&bcast, 0, 1000, 4, true, true, MAX_PACK, false, false).long);
        // A member whose peers batch differently stops proposing long: short again.
        assert_eq!(
            proposal(&kib, 0, 1000, 4, true, false, MAX_PACK, false, false),
            Proposal::short(64)
        );
        // A member whose last exchange took fewer calls proposes at most the cap it set.
        assert_eq!(
            proposal(&kib, 960, 1000, 4, true, false, 2, false, false),
            Proposal::short(2)
        );
        // The header word round-trips.
        assert_eq!(long.word(0), 1000 | 1 << LONG_BIT);
        // The step's low bits ride along, and do not disturb the rest.
        assert_eq!(long.word(3) >> STEP_SHIFT, 3);
        assert_eq!(long.word(u64::MAX) & ((1 << STEP_SHIFT) - 1), long.word(0));
    }

    /// An exchange in which member `i`'s header arrived as `post` writes it for `runs[i]`
    /// (its calls, proposed long or not).
    fn heard(runs: &[(&[Op], bool)]) -> Exchange {
        let n = runs.len();
        let recv = Scratch::with_bytes(n * REGION).expect("scratch");
        let mut ex = Exchange::unposted(recv, Scratch::default(), 0);
        let base = ex.recv.ptr();
        for (i, &(run, long)) in runs.iter().enumerate() {
            let mut rec = [0; RECORD];
            let h = header_of(run, long, 5, &mut rec);
            let len = head_len(Proposal {
                calls: run.len(),
                long,
            });
            // SAFETY: region i holds REGION ≥ HEAD_MAX bytes.
            unsafe { std::ptr::copy_nonoverlapping(h.as_ptr(), base.add(i * REGION), len) };
            ex.got[i] = len;
            ex.expected |= 1 << i;
            ex.heads |= 1 << i;
        }
        ex
    }

    fn agreed_as(runs: &[(&[Op], bool)]) -> std::result::Result<(usize, usize), Disagreement> {
        let ex = heard(runs);
        // Every member decides alike; only a long proposer learns that it met a short one.
        let all: Vec<_> = (0..runs.len())
            .map(|me| {
                let a = ex.agreed(runs.len(), me).expect("well formed");
                // The shortcut for identical headers says what the full comparison says.
                let full = ex.agreed_in_full(runs.len(), me).expect("well formed");
                assert_eq!(a, full, "member {me}");
                let identical = runs
                    .iter()
                    .all(|r| r.0.len() == runs[0].0.len() && r.1 == runs[0].1)
                    && (0..runs[0].0.len())
                        .all(|k| runs.iter().all(|r| r.0[k].desc == runs[0].0[k].desc));
                assert_eq!(
                    ex.unanimous(runs.len(), me).is_some(),
                    identical,
                    "member {me}"
                );
                if let Ok(a) = a {
                    let met = runs[me].1 && runs.iter().any(|r| !r.1);
                    assert_eq!(a.met_short, met, "member {me}");
                }
                a.map(|a| (a.delivered, a.packed))
            })
            .collect();
        for a in &all[1..] {
            assert_eq!(a, &all[0], "members decide differently");
        }
        all[0]
    }

    #[test]
    fn exchanges_agree_on_what_every_member_proposed_and_no_further() {
        let kib: Vec<Op> = (0..1000).map(|_| op(OpKind::AllReduce, 256)).collect();
        let long = |len: usize| (&kib[..len], true);
        let short = |len: usize| (&kib[..len], false);
        // The same long run everywhere: its head here, the rest packed, whole.
        assert_eq!(
            agreed_as(&[long(1000), long(1000), long(1000)]),
            Ok((1, 999))
        );
        // Long runs of different lengths: the shortest's largest power of two.
        assert_eq!(agreed_as(&[long(1000), long(300), long(700)]), Ok((1, 255)));
        // Someone proposed short (its data for 64 calls is here, not the others'): the head.
        assert_eq!(agreed_as(&[long(1000), short(64)]), Ok((1, 0)));
        // The same short run everywhere (the common case, found without parsing): delivered.
        assert_eq!(agreed_as(&[short(64), short(64), short(64)]), Ok((64, 0)));
        assert_eq!(agreed_as(&[short(1), short(1)]), Ok((1, 0)));
        // Short proposals: the shortest, delivered.
        assert_eq!(agreed_as(&[short(64), short(32), short(64)]), Ok((32, 0)));
        // A call that differs deep in a run of the same length: the prefix before it.
        let mut other: Vec<Op> = (0..1000).map(|_| op(OpKind::AllReduce, 256)).collect();
        other[700].desc.op = Some(ReduceOp::Max);
        assert_eq!(
            agreed_as(&[long(1000), (&other[..], true)]),
            Ok((1, 511)),
            "up to call 700, the first 512 agree"
        );
        other[100].desc.op = Some(ReduceOp::Max);
        assert_eq!(agreed_as(&[long(1000), (&other[..], true)]), Ok((1, 63)));
        // … and in short runs too, down to the call before the difference.
        assert_eq!(
            agreed_as(&[short(64), (&other[96..160], false)]),
            Ok((4, 0))
        );
        // A shape differing at call 1: the head alone.
        let mut shapes: Vec<Op> = (0..8).map(|_| op(OpKind::AllReduce, 256)).collect();
        shapes[1] = op(OpKind::AllReduce, 255);
        assert_eq!(agreed_as(&[short(8), (&shapes[..], false)]), Ok((1, 0)));
        // Heads that differ are a mismatch, found by every member (naming the other one).
        let ex = heard(&[short(8), (&other[100..108], false)]);
        assert_eq!(
            ex.agreed(2, 0).expect("well formed"),
            Err(Disagreement::Call(1))
        );
        assert_eq!(
            ex.agreed(2, 1).expect("well formed"),
            Err(Disagreement::Call(0))
        );
        // A message left over from an earlier step (the same call, even): found as such.
        let mut ex = heard(&[short(8), short(8)]);
        let stale = Proposal::short(8).word(4);
        // SAFETY: the proposal word of member 1's header, within its region.
        unsafe {
            std::ptr::copy_nonoverlapping(
                stale.to_le_bytes().as_ptr(),
                ex.recv.ptr().add(REGION + 8),
                8,
            )
        };
        assert_eq!(
            ex.agreed(2, 0).expect("well formed"),
            Err(Disagreement::Step(1, 4))
        );
        assert_eq!(
            ex.agreed(2, 1).expect("well formed"),
            Err(Disagreement::Step(0, 5))
        );
    }

    #[test]
    fn a_malformed_proposal_is_an_error_not_a_run() {
        let kib: Vec<Op> = (0..4).map(|_| op(OpKind::AllReduce, 256)).collect();
        for bad in [3u64, 0, MAX_PACK as u64 * 2, 3 | 1 << 40] {
            let mut ex = heard(&[(&kib[..4], false), (&kib[..4], false)]);
            let at = REGION + 8;
            // SAFETY: the proposal word of member 1's header, within its region.
            unsafe {
                std::ptr::copy_nonoverlapping(bad.to_le_bytes().as_ptr(), ex.recv.ptr().add(at), 8)
            };
            assert!(ex.agreed(2, 0).is_err(), "proposal word {bad:#x} accepted");
        }
    }

    /// Every awaited message counts once: a header completed twice, one never awaited, or data
    /// on an exchange that has none is an error naming the member, not a count gone wrong
    /// (which would deliver a member's region before it arrived).
    #[test]
    fn a_message_counted_twice_or_never_awaited_is_an_error() {
        let kib: Vec<Op> = (0..2).map(|_| op(OpKind::AllReduce, 256)).collect();
        let head = Received {
            tag: 0,
            count: Some(HEAD_MAX),
        };
        let mut ex = heard(&[(&kib[..1], false), (&kib[..1], false), (&kib[..1], false)]);
        // Members 1 and 2 awaited, neither heard yet.
        (ex.heads, ex.got[1], ex.got[2], ex.pending) = (1, 0, 0, 2);
        let progress = ex.received(Msg::Head(1), head).expect("first header");
        assert!(!progress.heads_now);
        let twice = ex
            .received(Msg::Head(1), head)
            .expect_err("a second completion");
        assert!(twice.to_string().contains("member 1"), "{twice}");
        assert_eq!(ex.pending, 1, "the repeat must not count");
        let data = ex
            .received(Msg::Data(2), head)
            .expect_err("data on an exchange without");
        assert!(
            data.to_string().contains("data message from member 2"),
            "{data}"
        );
        ex.expected &= !(1 << 2);
        let unposted = ex
            .received(Msg::Head(2), head)
            .expect_err("a header never awaited");
        assert!(unposted.to_string().contains("member 2"), "{unposted}");
    }

    /// An internal error says which exchange it came from; other errors pass unchanged.
    #[test]
    fn an_internal_error_names_its_exchange() {
        let o = op(OpKind::AllGather, 8);
        let e = in_exchange(Error::Internal("lost".into()), &o.desc, 7, &[0, 2]);
        let said = e.to_string();
        for part in [
            "lost",
            "all_gather(",
            "f32[8], dim 0)",
            "step 7 of group [0, 2]",
        ] {
            assert!(said.contains(part), "no {part:?} in {said}");
        }
        assert!(said.contains(&o.desc.site.to_string()), "no site in {said}");
        let other = in_exchange(Error::Tensor("bad shape".into()), &o.desc, 7, &[0, 2]);
        assert!(!other.to_string().contains("exchange"), "{other}");
    }

    /// A tagged exchange's tag tells calls and steps apart, stays within MPI's bound and clear
    /// of the header and record tags, and is not used where MPI has too few tags.
    #[test]
    fn call_tags_differ_by_call_and_step_within_the_bound() {
        let ub = i32::MAX;
        let mut seen = std::collections::HashMap::new();
        for kind in [OpKind::AllGather, OpKind::AllToAll] {
            for numel in [1024, 1025, 4096, 16384] {
                // (Headers keep a step's low bits: steps that far apart are never both live.)
                for step in [1u64, 2, 3, 1 << 20, (1 << 30) + 1] {
                    let o = op(kind, numel);
                    let mut rec = [0; RECORD];
                    let h = header_of(std::slice::from_ref(&o), false, step, &mut rec);
                    let t = tag_within(&h, ub).expect("Open MPI's bound has room");
                    assert!((FIRST_CALL_TAG..=ub).contains(&t), "tag {t}");
                    // Ranks may make one call from different lines: the site is no part of it.
                    let mut elsewhere = op(kind, numel);
                    elsewhere.desc.site = CallSite::caller();
                    assert_ne!(elsewhere.desc.site, o.desc.site);
                    let again = header_of(std::slice::from_ref(&elsewhere), false, step, &mut rec);
                    assert_eq!(tag_within(&again, ub), Some(t), "the site changed the tag");
                    let before = seen.insert(t, (kind, numel, step));
                    assert!(
                        before.is_none(),
                        "{before:?} and {:?} share tag {t}",
                        (kind, numel, step)
                    );
                    assert_eq!(
                        tag_within(&h, 32767),
                        None,
                        "the standard's minimum is too few"
                    );
                    let small = tag_within(&h, FIRST_CALL_TAG + MIN_CALL_TAGS).expect("enough");
                    assert!(small <= FIRST_CALL_TAG + MIN_CALL_TAGS, "tag {small}");
                }
            }
        }
    }

    #[test]
    fn segments_follow_each_collective_s_data_movement() {
        let (n, root) = (4, 2);
        let d = |k| op(k, 8).desc;
        // Everyone sends everyone the whole tensor.
        assert_eq!(seg(&d(OpKind::AllReduce), 0, 3, n, root), 8);
        assert_eq!(seg(&d(OpKind::AllGather), 1, 0, n, root), 8);
        // Only to the root.
        assert_eq!(seg(&d(OpKind::Reduce), 0, root, n, root), 8);
        assert_eq!(seg(&d(OpKind::Gather), 0, 1, n, root), 0);
        // Only from the root.
        assert_eq!(seg(&d(OpKind::Broadcast), root, 0, n, root), 8);
        assert_eq!(seg(&d(OpKind::Scatter), 1, 0, n, root), 0);
        // A member's block each.
        assert_eq!(seg(&d(OpKind::AllToAll), 0, 1, n, root), 2);
        assert_eq!(seg(&d(OpKind::ReduceScatter), 3, 3, n, root), 2);
        assert_eq!(seg(&d(OpKind::Barrier), 0, 1, n, root), 0);
    }

    /// Gathers go directly through MPI above 4 KiB without lanes, above one message's 64 KiB
    /// with them (where the exchange's copies are cheaper); a pair's broadcast above 16 KiB
    /// without, 64 KiB with; never a reduction.
    #[test]
    fn what_goes_directly_depends_on_the_transport() {
        let f32s = |kib: usize| kib * 1024 / 4;
        for kind in [
            OpKind::AllGather,
            OpKind::AllToAll,
            OpKind::Gather,
            OpKind::Scatter,
        ] {
            let d = |kib| op(kind, f32s(kib)).desc;
            assert!(!direct(&d(4), 4, false), "{kind:?}");
            assert!(direct(&d(8), 4, false), "{kind:?}");
            assert!(!direct(&d(64), 2, true), "{kind:?}");
            assert!(direct(&d(128), 2, true), "{kind:?}");
            // Among more than two through lanes, a larger all-gather takes the window's steps.
            let wide = kind == OpKind::AllGather;
            assert_eq!(direct(&d(128), 3, true), !wide, "{kind:?}");
            let p = proposal(
                &[op(kind, f32s(128))],
                0,
                1,
                3,
                true,
                false,
                MAX_PACK,
                true,
                false,
            );
            let want = if wide {
                Proposal::SCHEDULE
            } else {
                Proposal::short(1)
            };
            assert_eq!(p, want, "{kind:?}");
            assert!(!direct(&d(128), MAX_MEMBERS + 1, true), "{kind:?}");
            // Above a small collective, up to one message's payload: exchanged alone.
            let big = [op(kind, f32s(64)), op(kind, f32s(1))];
            let p = proposal(&big, 0, 2, 4, true, false, MAX_PACK, true, false);
            assert_eq!(p, Proposal::short(1), "{kind:?}");
            // A 16 KiB gather is a small collective through lanes: it packs with its neighbours.
            let run = [op(kind, f32s(16)), op(kind, f32s(16))];
            let p = proposal(&run, 0, 2, 4, true, false, MAX_PACK, true, false);
            assert_eq!(p, Proposal::short(2), "{kind:?}");
            assert_eq!(
                proposal(&run, 0, 2, 4, true, false, MAX_PACK, false, false),
                Proposal::short(1)
            );
        }
        let bcast = |kib| op(OpKind::Broadcast, f32s(kib)).desc;
        assert!(!direct(&bcast(16), 2, false));
        assert!(direct(&bcast(32), 2, false));
        assert!(!direct(&bcast(64), 2, true));
        assert!(direct(&bcast(128), 2, true));
        for lanes in [false, true] {
            assert!(!direct(&bcast(128), 3, lanes));
            assert!(!direct(&op(OpKind::AllReduce, f32s(64)).desc, 2, lanes));
        }
        // A broadcast among more than two up to one message's payload: exchanged alone through
        // lanes, on the schedule path without; an all_reduce above 16 KiB always on the latter
        // (or the window).
        let wide = [op(OpKind::Broadcast, f32s(64))];
        assert_eq!(
            proposal(&wide, 0, 1, 4, true, false, MAX_PACK, true, false),
            Proposal::short(1)
        );
        assert_eq!(
            proposal(&wide, 0, 1, 4, true, false, MAX_PACK, false, false).calls,
            0
        );
        let wide = [op(OpKind::Broadcast, f32s(65))];
        assert_eq!(
            proposal(&wide, 0, 1, 4, true, false, MAX_PACK, true, false).calls,
            0
        );
        let sum = [op(OpKind::AllReduce, f32s(32))];
        assert_eq!(
            proposal(&sum, 0, 1, 4, true, false, MAX_PACK, true, false).calls,
            0
        );
    }

    /// With shared heaps, broadcasts, all-gathers and all-to-alls above a small collective take
    /// the schedule path at every size and group size (the window reads them where they are);
    /// small ones, calls that fold, and gathers and scatters go as without.
    #[test]
    fn with_heaps_moves_above_a_small_collective_go_to_the_window() {
        let f32s = |kib: usize| kib * 1024 / 4;
        let p = |kind, kib, n, heaps| {
            proposal(
                &[op(kind, f32s(kib))],
                0,
                1,
                n,
                true,
                false,
                MAX_PACK,
                true,
                heaps,
            )
        };
        for kind in [OpKind::Broadcast, OpKind::AllGather, OpKind::AllToAll] {
            for n in [2, 3, 4] {
                for kib in [17, 64, 128, 4096] {
                    assert_eq!(
                        p(kind, kib, n, true),
                        Proposal::SCHEDULE,
                        "{kind:?} {n} {kib}"
                    );
                }
                assert_eq!(p(kind, 16, n, true), p(kind, 16, n, false), "{kind:?} {n}");
            }
            // Without heaps, a pair's goes directly, or through the lanes.
            assert_ne!(p(kind, 128, 2, false), Proposal::SCHEDULE, "{kind:?}");
        }
        for kind in [
            OpKind::Gather,
            OpKind::Scatter,
            OpKind::AllReduce,
            OpKind::ReduceScatter,
        ] {
            for kib in [16, 64, 128] {
                assert_eq!(
                    p(kind, kib, 2, true),
                    p(kind, kib, 2, false),
                    "{kind:?} {kib}"
                );
            }
        }
    }

    #[test]
    fn headers_hold_one_hash_per_power_of_two() {
        assert_eq!(head_len(Proposal::short(1)), 24);
        assert_eq!(head_len(Proposal::short(64)), 16 + 8 * 7);
        // A long run: hashes up to its largest power of two, then its whole run's.
        let long = |calls| Proposal { calls, long: true };
        assert_eq!(head_len(long(1000)), 16 + 8 * 10 + 8);
        assert_eq!(head_len(long(MAX_PACK)), HEAD_MAX);
    }
}
