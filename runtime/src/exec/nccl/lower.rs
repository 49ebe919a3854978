//! Lowering: a batch of validated ops → the NCCL calls and copies that run it on one rank.
//!
//! A pure function of the batch's descriptions, this rank, the communicators' members and the
//! loaded NCCL version — no pointers, no devices — so that what a GPU will be asked to do is
//! checked here, by tests that compare call lists and by the host emulation (`super::host`),
//! which executes call lists with NCCL's semantics and is compared with the threads backend.
//!
//! Shape of the result ([`Lowered`]): copies that prepare inputs (`pre`), then one NCCL group
//! (`ncclGroupStart`, the calls, `ncclGroupEnd`), then copies that lay results out (`post`).
//! NCCL enqueues a group's kernels on the stream at `ncclGroupEnd`, so a copy issued on the same
//! stream before the group runs before its kernels, and one issued after runs after them: the
//! split into `pre` and `post` is what makes stream order right.
//!
//! Decisions every member must make alike depend only on what members agree on (kinds, dtypes,
//! shapes, ops, roots — never addresses), so every member emits the same collectives in the
//! same order on each communicator, as NCCL requires.

use std::fmt;

use crate::error::{Error, P2pMismatch, Result};
use crate::model::{GroupId, OpDesc, OpKind};
use crate::rules::rows;
use crate::{DType, ReduceOp};

/// The first NCCL with its own `ncclAlltoAll`, `ncclGather` and `ncclScatter` (2.28); before
/// it, those are grouped sends and receives.
pub(crate) const NATIVE_ALL_TO_ALL: u32 = 22800;

/// Same-kind reductions and broadcasts up to this size in one batch share one call (packed
/// into one buffer): below it a call's launch and synchronisation cost more than the copies;
/// above it NCCL's own grouping of separate calls is as fast and packing would only copy.
pub(crate) const PACK_MAX_BYTES: usize = 64 * 1024;

/// A communicator of the NCCL backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Comm {
    /// The communicator of a rankwise group (the world is group 0); collectives and the
    /// grouped sends that stand in for them on older NCCL.
    Group(GroupId),
    /// A duplicate of the world for the user's own sends and receives, so that they can never
    /// be matched with the messages a lowered collective exchanges on the world communicator.
    P2p,
}

/// A buffer of this rank's batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mem {
    /// The input of op `i` (in the planned order of the batch).
    In(usize),
    /// The output of op `i`.
    Out(usize),
    /// Scratch buffer `s` of [`Lowered::scratch`].
    Scratch(usize),
}

/// A byte address inside one of the batch's buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct At {
    pub mem: Mem,
    pub offset: usize,
}

impl At {
    fn of(mem: Mem) -> At {
        At { mem, offset: 0 }
    }

    fn plus(self, bytes: usize) -> At {
        At {
            mem: self.mem,
            offset: self.offset + bytes,
        }
    }
}

/// NCCL's reductions (`ncclRedOp_t`); `PreMulSum` becomes an op made by
/// `ncclRedOpCreatePreMulSum` for the call's communicator and dtype.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Red {
    Sum,
    Prod,
    Max,
    Min,
    Avg,
    PreMulSum(f64),
}

/// The collective NCCL calls rankwise issues. Roots are ranks of the call's communicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Coll {
    AllReduce,
    Reduce { root: usize },
    Broadcast { root: usize },
    AllGather,
    ReduceScatter,
    AllToAll,
    Gather { root: usize },
    Scatter { root: usize },
}

/// One NCCL call inside the batch's group. Counts are NCCL's: elements per call for
/// all_reduce, reduce and broadcast; per rank for all_gather (send count), reduce_scatter
/// (receive count), all_to_all, gather and scatter.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Call {
    /// A collective; `send` or `recv` is `None` where NCCL does not use that buffer on this
    /// rank (gather's receive buffer off the root, scatter's send buffer off the root).
    Coll {
        /// The op (index in the batch) this call serves; the first, when packed.
        of: usize,
        coll: Coll,
        comm: Comm,
        send: Option<At>,
        recv: Option<At>,
        count: usize,
        dtype: DType,
        op: Option<Red>,
    },
    /// `ncclSend` to rank `peer` of `comm`.
    Send {
        of: usize,
        comm: Comm,
        peer: usize,
        buf: At,
        count: usize,
        dtype: DType,
    },
    /// `ncclRecv` from rank `peer` of `comm`.
    Recv {
        of: usize,
        comm: Comm,
        peer: usize,
        buf: At,
        count: usize,
        dtype: DType,
    },
}

impl Coll {
    /// The bytes NCCL reads from the send buffer and writes to the receive buffer on member
    /// `me` of `n`, for a call of `b` bytes' count; zero where NCCL does not touch that buffer
    /// on this member (a broadcast's send off the root, a reduce's or gather's receive off it, a
    /// scatter's send off it).
    pub(crate) fn bytes(self, b: usize, n: usize, me: usize) -> (usize, usize) {
        let on_root = |root: usize, x: usize| if me == root { x } else { 0 };
        match self {
            Coll::AllReduce => (b, b),
            Coll::Broadcast { root } => (on_root(root, b), b),
            Coll::Reduce { root } => (b, on_root(root, b)),
            Coll::AllGather => (b, n * b),
            Coll::Gather { root } => (b, on_root(root, n * b)),
            Coll::ReduceScatter => (n * b, b),
            Coll::Scatter { root } => (on_root(root, n * b), b),
            Coll::AllToAll => (n * b, n * b),
        }
    }
}

impl Call {
    /// The communicator the call runs on.
    pub(crate) fn comm(&self) -> Comm {
        match *self {
            Call::Coll { comm, .. } | Call::Send { comm, .. } | Call::Recv { comm, .. } => comm,
        }
    }

    /// The op of the batch the call serves.
    pub(crate) fn of(&self) -> usize {
        match *self {
            Call::Coll { of, .. } | Call::Send { of, .. } | Call::Recv { of, .. } => of,
        }
    }
}

/// A strided device copy (`cuMemcpy2DAsync`): `rows` rows of `width` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Copy2d {
    pub dst: At,
    pub dst_pitch: usize,
    pub src: At,
    pub src_pitch: usize,
    pub rows: usize,
    pub width: usize,
}

impl At {
    /// The bytes `bytes` long at this address inside a buffer of `size` bytes, or the error
    /// that says the lowering addressed outside it (every executor checks before touching).
    pub(crate) fn within(self, bytes: usize, size: usize) -> Result<std::ops::Range<usize>> {
        match self.offset.checked_add(bytes) {
            Some(end) if end <= size => Ok(self.offset..end),
            _ => Err(Error::Internal(format!(
                "the NCCL lowering addressed bytes {}..{} of a {size}-byte buffer ({:?})",
                self.offset,
                self.offset.saturating_add(bytes),
                self.mem
            ))),
        }
    }
}

impl Copy2d {
    /// The bytes the copy spans in its destination and its source (first row to end of the
    /// last), or an error if its rows would overlap each other.
    pub(crate) fn extents(&self) -> Result<(usize, usize)> {
        if self.dst_pitch < self.width || self.src_pitch < self.width {
            return Err(Error::Internal(format!("a copy's rows overlap: {self:?}")));
        }
        let extent = |pitch: usize| {
            self.rows
                .checked_sub(1)
                .map_or(0, |r| r * pitch + self.width)
        };
        Ok((extent(self.dst_pitch), extent(self.src_pitch)))
    }
}

/// Everything one rank does for one batch, in order: allocate `scratch`, run `pre`, issue
/// `calls` as one NCCL group, run `post`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Lowered {
    /// Sizes in bytes of the scratch buffers the calls use.
    pub scratch: Vec<usize>,
    pub pre: Vec<Copy2d>,
    pub calls: Vec<Call>,
    pub post: Vec<Copy2d>,
}

impl fmt::Display for Lowered {
    /// One line per step, for tests and `RANKWISE_NCCL_TRACE`-style debugging.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.pre {
            writeln!(f, "pre  {c:?}")?;
        }
        writeln!(f, "ncclGroupStart")?;
        for c in &self.calls {
            writeln!(f, "  {c:?}")?;
        }
        writeln!(f, "ncclGroupEnd")?;
        for c in &self.post {
            writeln!(f, "post {c:?}")?;
        }
        Ok(())
    }
}

/// What the lowering needs to know besides the batch.
pub(crate) struct Setting<'a> {
    /// This rank (global).
    pub rank: usize,
    /// The loaded NCCL's version code (`ncclGetVersion`: 22803 for 2.28.3).
    pub version: u32,
    /// The sorted members of each group, by group id (index 0: the world).
    pub groups: &'a [Box<[usize]>],
    /// Whether to pack runs of small same-kind collectives into one call. Only sound when
    /// every member of each communicator puts the same collectives in the same batches: the
    /// packed call's count depends on the batch, and members that batch differently would
    /// issue different calls. rankwise's semantics allow ranks to batch differently, so this
    /// is an opt-in promise (`RANKWISE_NCCL_PACK=1`), never the default.
    pub pack: bool,
}

/// Lowers a batch whose ops are in the planned order (`plan::plan`: sorted by target, the
/// user's order kept within each). Errors come before any call is made: a reduction NCCL does
/// not have, a send to itself with no receive in the batch.
pub(crate) fn lower(ops: &[&OpDesc], setting: &Setting<'_>) -> Result<Lowered> {
    let mut l = Lowering {
        out: Lowered::default(),
        setting,
        self_sends: Vec::new(),
        self_recvs: Vec::new(),
    };
    let mut i = 0;
    while i < ops.len() {
        i += l.op(ops, i)?;
    }
    l.pair_self_messages(ops)?;
    Ok(l.out)
}

struct Lowering<'a> {
    out: Lowered,
    setting: &'a Setting<'a>,
    /// Indices of sends to this rank and receives from it, paired in order at the end.
    self_sends: Vec<usize>,
    self_recvs: Vec<usize>,
}

/// A collective op and what the lowering needs of its group.
struct Ctx<'d> {
    i: usize,
    desc: &'d OpDesc,
    comm: Comm,
    /// Group size and this rank's index in it.
    n: usize,
    me: usize,
    /// The root's index in the group (rooted collectives).
    root: usize,
    es: usize,
}

impl Lowering<'_> {
    /// Lowers op `i` (and, when packing, the ops after it that share its call); returns how
    /// many ops it consumed.
    fn op(&mut self, ops: &[&OpDesc], i: usize) -> Result<usize> {
        let d = ops[i];
        match d.kind {
            OpKind::Send | OpKind::Recv => {
                self.p2p(d, i);
                return Ok(1);
            }
            _ => {}
        }
        let c = self.ctx(d, i)?;
        if c.desc.numel() == 0 && d.kind != OpKind::Barrier {
            return Ok(1); // nothing to move; every member skips it alike
        }
        match d.kind {
            OpKind::Barrier => Ok(self.barrier(ops, &c)),
            OpKind::AllReduce | OpKind::Reduce | OpKind::Broadcast => self.in_place(ops, &c),
            OpKind::AllGather | OpKind::Gather => {
                self.gather(&c);
                Ok(1)
            }
            OpKind::Scatter => {
                self.scatter(&c);
                Ok(1)
            }
            OpKind::ReduceScatter => {
                self.reduce_scatter(&c)?;
                Ok(1)
            }
            OpKind::AllToAll => {
                self.all_to_all(&c);
                Ok(1)
            }
            OpKind::Send | OpKind::Recv => Ok(1),
        }
    }

    fn ctx<'d>(&self, d: &'d OpDesc, i: usize) -> Result<Ctx<'d>> {
        let members = self.setting.groups.get(d.group.0 as usize).ok_or_else(|| {
            Error::Internal(format!("{}: group {} is unknown", d.site, d.group.0))
        })?;
        let me = members.binary_search(&self.setting.rank).map_err(|_| {
            Error::Internal(format!(
                "{}: rank {} is not in its group",
                d.site, self.setting.rank
            ))
        })?;
        let root = match d.peer {
            Some(p) if d.kind.is_rooted() => members.binary_search(&p).map_err(|_| {
                Error::Internal(format!("{}: root {p} is not in the group", d.site))
            })?,
            _ => 0,
        };
        Ok(Ctx {
            i,
            desc: d,
            comm: Comm::Group(d.group),
            n: members.len(),
            me,
            root,
            es: d.dtype.size(),
        })
    }

    fn scratch(&mut self, bytes: usize) -> At {
        self.out.scratch.push(bytes);
        At::of(Mem::Scratch(self.out.scratch.len() - 1))
    }

    fn coll(&mut self, c: &Ctx<'_>, coll: Coll, send: Option<At>, recv: Option<At>, count: usize) {
        self.out.calls.push(Call::Coll {
            of: c.i,
            coll,
            comm: c.comm,
            send,
            recv,
            count,
            dtype: c.desc.dtype,
            op: None,
        });
    }

    fn p2p(&mut self, d: &OpDesc, i: usize) {
        let peer = d.peer.unwrap_or(self.setting.rank);
        let is_send = d.kind == OpKind::Send;
        if peer == self.setting.rank {
            // A message to itself is a copy, paired with its receive once the batch is read.
            if is_send {
                self.self_sends.push(i);
            } else {
                self.self_recvs.push(i);
            }
            return;
        }
        let (count, dtype) = (d.numel(), d.dtype);
        if count == 0 {
            return;
        }
        self.out.calls.push(if is_send {
            Call::Send {
                of: i,
                comm: Comm::P2p,
                peer,
                buf: At::of(Mem::In(i)),
                count,
                dtype,
            }
        } else {
            Call::Recv {
                of: i,
                comm: Comm::P2p,
                peer,
                buf: At::of(Mem::Out(i)),
                count,
                dtype,
            }
        });
    }

    fn pair_self_messages(&mut self, ops: &[&OpDesc]) -> Result<()> {
        if self.self_sends.len() != self.self_recvs.len() {
            let (&first, what) = match self.self_sends.first() {
                Some(s) if self.self_sends.len() > self.self_recvs.len() => (s, "send to"),
                _ => (self.self_recvs.first().unwrap_or(&0), "receive from"),
            };
            let site = ops
                .get(first)
                .map(|d| d.site.to_string())
                .unwrap_or_default();
            return Err(Error::Backend {
                backend: "nccl",
                detail: format!(
                    "{site}: a {what} rank {} itself has no matching call in the same batch; \
                     on NCCL a message to oneself must be sent and received in one batch",
                    self.setting.rank
                ),
            });
        }
        for (&s, &r) in self.self_sends.iter().zip(&self.self_recvs) {
            let (send, recv) = (ops[s], ops[r]);
            if send.dtype != recv.dtype || send.numel() != recv.numel() {
                return Err(Error::P2pMismatch(Box::new(P2pMismatch {
                    src: self.setting.rank,
                    dst: self.setting.rank,
                    send_site: Some(send.site),
                    recv_site: recv.site,
                    send_what: format!("{}[{}]", send.dtype, send.numel()),
                    recv_what: format!("{}[{}]", recv.dtype, recv.numel()),
                })));
            }
            self.out.pre.push(contiguous(
                At::of(Mem::Out(r)),
                At::of(Mem::In(s)),
                send.numel() * send.dtype.size(),
            ));
        }
        Ok(())
    }

    /// Consecutive barriers of one communicator in a batch are one barrier: the batch ends
    /// when all of them have, and none moves data. NCCL has no barrier: a one-byte all_reduce.
    fn barrier(&mut self, ops: &[&OpDesc], c: &Ctx<'_>) -> usize {
        let same = ops[c.i..]
            .iter()
            .take_while(|d| d.kind == OpKind::Barrier && d.group == c.desc.group)
            .count();
        let at = self.scratch(1);
        self.out.calls.push(Call::Coll {
            of: c.i,
            coll: Coll::AllReduce,
            comm: c.comm,
            send: Some(at),
            recv: Some(at),
            count: 1,
            dtype: DType::U8,
            op: Some(Red::Sum),
        });
        same
    }

    /// all_reduce, reduce and broadcast work in place on one buffer; a run of small ones with
    /// the same kind, dtype, op and root becomes one call on a packed buffer.
    fn in_place(&mut self, ops: &[&OpDesc], c: &Ctx<'_>) -> Result<usize> {
        let d = c.desc;
        let red = d.op.map(|op| red(op, d)).transpose()?;
        let coll = match d.kind {
            OpKind::AllReduce => Coll::AllReduce,
            OpKind::Reduce => Coll::Reduce { root: c.root },
            _ => Coll::Broadcast { root: c.root },
        };
        let small = |x: &OpDesc| {
            let bytes = x.numel() * x.dtype.size();
            bytes > 0 && bytes <= PACK_MAX_BYTES
        };
        let run = if self.setting.pack && small(d) {
            ops[c.i..]
                .iter()
                .take_while(|x| {
                    x.kind == d.kind
                        && x.group == d.group
                        && x.dtype == d.dtype
                        && x.op == d.op
                        && x.peer == d.peer
                        && small(x)
                })
                .count()
        } else {
            1
        };
        if run == 1 {
            let at = At::of(Mem::In(c.i));
            let out = At::of(Mem::Out(c.i));
            self.out.calls.push(Call::Coll {
                of: c.i,
                coll,
                comm: c.comm,
                send: Some(at),
                recv: Some(out),
                count: d.numel(),
                dtype: d.dtype,
                op: red,
            });
            return Ok(1);
        }
        let sizes: Vec<usize> = ops[c.i..c.i + run]
            .iter()
            .map(|x| x.numel() * c.es)
            .collect();
        let total: usize = sizes.iter().sum();
        let buf = self.scratch(total);
        // Who contributes data, and who gets a result.
        let (reads, writes) = match coll {
            Coll::AllReduce => (true, true),
            Coll::Reduce { .. } => (true, c.me == c.root),
            _ => (c.me == c.root, c.me != c.root),
        };
        let mut offset = 0;
        for (k, bytes) in sizes.iter().enumerate() {
            let at = buf.plus(offset);
            if reads {
                self.out
                    .pre
                    .push(contiguous(at, At::of(Mem::In(c.i + k)), *bytes));
            }
            if writes {
                self.out
                    .post
                    .push(contiguous(At::of(Mem::Out(c.i + k)), at, *bytes));
            }
            offset += bytes;
        }
        self.out.calls.push(Call::Coll {
            of: c.i,
            coll,
            comm: c.comm,
            send: Some(buf),
            recv: Some(buf),
            count: total / c.es,
            dtype: d.dtype,
            op: red,
        });
        Ok(run)
    }

    /// all_gather and gather: NCCL concatenates whole blocks (along dim 0); along another dim
    /// the blocks land in scratch and are interleaved into the output by one strided copy each.
    fn gather(&mut self, c: &Ctx<'_>) {
        let d = c.desc;
        let (outer, inner) = rows(&d.shape, d.dim);
        let count = d.numel();
        let receives = d.kind == OpKind::AllGather || c.me == c.root;
        let recv = match (receives, outer) {
            (false, _) => None,
            (true, 1) => Some(At::of(Mem::Out(c.i))),
            (true, _) => {
                let s = self.scratch(c.n * count * c.es);
                let out = At::of(Mem::Out(c.i));
                (self.out.post).extend(blocks(out, s, c.n, outer, inner * c.es, false));
                Some(s)
            }
        };
        let send = At::of(Mem::In(c.i));
        if d.kind == OpKind::AllGather {
            self.coll(c, Coll::AllGather, Some(send), recv, count);
        } else if self.setting.version >= NATIVE_ALL_TO_ALL {
            self.coll(c, Coll::Gather { root: c.root }, Some(send), recv, count);
        } else if let Some(recv) = recv {
            for j in 0..c.n {
                let block = recv.plus(j * count * c.es);
                if j == c.me {
                    self.out.pre.push(contiguous(block, send, count * c.es));
                } else {
                    self.msg(c, false, j, block, count);
                }
            }
        } else {
            self.msg(c, true, c.root, send, count);
        }
    }

    /// scatter: the root's input is cut into whole blocks (packed into scratch first when the
    /// dim is not the leading one); every member receives its block into its output.
    fn scatter(&mut self, c: &Ctx<'_>) {
        let d = c.desc;
        let (outer, inner) = rows(&d.shape, d.dim);
        let count = d.numel();
        let recv = At::of(Mem::Out(c.i));
        let send = match (c.me == c.root, outer) {
            (false, _) => None,
            (true, 1) => Some(At::of(Mem::In(c.i))),
            (true, _) => {
                let s = self.scratch(c.n * count * c.es);
                let input = At::of(Mem::In(c.i));
                (self.out.pre).extend(blocks(input, s, c.n, outer, inner * c.es, true));
                Some(s)
            }
        };
        if self.setting.version >= NATIVE_ALL_TO_ALL {
            self.coll(c, Coll::Scatter { root: c.root }, send, Some(recv), count);
        } else if let Some(send) = send {
            for j in 0..c.n {
                let block = send.plus(j * count * c.es);
                if j == c.me {
                    self.out.pre.push(contiguous(recv, block, count * c.es));
                } else {
                    self.msg(c, true, j, block, count);
                }
            }
        } else {
            self.msg(c, false, c.root, recv, count);
        }
    }

    /// reduce_scatter: NCCL reduces whole blocks; along another dim the input's column blocks
    /// are packed into scratch first. The output ([outer, chunk]) is already contiguous.
    fn reduce_scatter(&mut self, c: &Ctx<'_>) -> Result<()> {
        let d = c.desc;
        let red = d.op.map(|op| red(op, d)).transpose()?;
        let (outer, row) = rows(&d.shape, d.dim);
        let chunk = row / c.n;
        let count = outer * chunk;
        let send = self.pack_blocks(c, outer, row, chunk);
        self.out.calls.push(Call::Coll {
            of: c.i,
            coll: Coll::ReduceScatter,
            comm: c.comm,
            send: Some(send),
            recv: Some(At::of(Mem::Out(c.i))),
            count,
            dtype: d.dtype,
            op: red,
        });
        Ok(())
    }

    /// all_to_all: column blocks packed into scratch, exchanged whole, and unpacked — or, at
    /// dim 0, straight from the input to the output.
    fn all_to_all(&mut self, c: &Ctx<'_>) {
        let d = c.desc;
        let (outer, row) = rows(&d.shape, d.dim);
        let chunk = row / c.n;
        let count = outer * chunk;
        let send = self.pack_blocks(c, outer, row, chunk);
        let recv = if outer == 1 {
            At::of(Mem::Out(c.i))
        } else {
            let s = self.scratch(c.n * count * c.es);
            let out = At::of(Mem::Out(c.i));
            (self.out.post).extend(blocks(out, s, c.n, outer, chunk * c.es, false));
            s
        };
        if self.setting.version >= NATIVE_ALL_TO_ALL {
            self.coll(c, Coll::AllToAll, Some(send), Some(recv), count);
            return;
        }
        for j in 0..c.n {
            let (from, to) = (send.plus(j * count * c.es), recv.plus(j * count * c.es));
            if j == c.me {
                self.out.pre.push(contiguous(to, from, count * c.es));
            } else {
                self.msg(c, true, j, from, count);
                self.msg(c, false, j, to, count);
            }
        }
    }

    /// The input of op `c.i`, [outer, row], as `n` whole blocks of [outer, chunk] each: the
    /// input itself at dim 0, otherwise a scratch buffer filled by one strided copy per block.
    fn pack_blocks(&mut self, c: &Ctx<'_>, outer: usize, row: usize, chunk: usize) -> At {
        if outer == 1 {
            return At::of(Mem::In(c.i));
        }
        let count = outer * chunk;
        debug_assert_eq!(row, c.n * chunk);
        let s = self.scratch(c.n * count * c.es);
        let input = At::of(Mem::In(c.i));
        (self.out.pre).extend(blocks(input, s, c.n, outer, chunk * c.es, true));
        s
    }

    /// A send or receive standing in for part of a collective on NCCL before 2.28.
    fn msg(&mut self, c: &Ctx<'_>, send: bool, peer: usize, buf: At, count: usize) {
        let (of, comm, dtype) = (c.i, c.comm, c.desc.dtype);
        self.out.calls.push(if send {
            Call::Send {
                of,
                comm,
                peer,
                buf,
                count,
                dtype,
            }
        } else {
            Call::Recv {
                of,
                comm,
                peer,
                buf,
                count,
                dtype,
            }
        });
    }
}

/// The copies between a tensor of `outer` rows holding `n` member blocks of `width` bytes side
/// by side in each row (the layout of a dim other than the first) and scratch holding the
/// blocks one after another (what NCCL's dim-0 calls read and write): tensor → scratch when
/// `pack`, scratch → tensor otherwise.
fn blocks(
    tensor: At,
    scratch: At,
    n: usize,
    outer: usize,
    width: usize,
    pack: bool,
) -> impl Iterator<Item = Copy2d> {
    (0..n).map(move |j| {
        let (t, s) = (tensor.plus(j * width), scratch.plus(j * outer * width));
        let (t_pitch, s_pitch) = (n * width, width);
        if pack {
            Copy2d {
                dst: s,
                dst_pitch: s_pitch,
                src: t,
                src_pitch: t_pitch,
                rows: outer,
                width,
            }
        } else {
            Copy2d {
                dst: t,
                dst_pitch: t_pitch,
                src: s,
                src_pitch: s_pitch,
                rows: outer,
                width,
            }
        }
    })
}

fn contiguous(dst: At, src: At, bytes: usize) -> Copy2d {
    Copy2d {
        dst,
        dst_pitch: bytes,
        src,
        src_pitch: bytes,
        rows: 1,
        width: bytes,
    }
}

/// Whether NCCL has reduction `op` (every one but the bitwise ones).
pub(crate) fn has_reduction(op: ReduceOp) -> bool {
    !matches!(op, ReduceOp::BitAnd | ReduceOp::BitOr | ReduceOp::BitXor)
}

/// NCCL's reduction for `op`, or the error that says NCCL has none.
fn red(op: ReduceOp, d: &OpDesc) -> Result<Red> {
    Ok(match op {
        ReduceOp::Sum => Red::Sum,
        ReduceOp::Prod => Red::Prod,
        ReduceOp::Min => Red::Min,
        ReduceOp::Max => Red::Max,
        ReduceOp::Avg => Red::Avg,
        ReduceOp::PreMulSum(s) => Red::PreMulSum(s),
        ReduceOp::BitAnd | ReduceOp::BitOr | ReduceOp::BitXor => {
            return Err(Error::Backend {
                backend: "nccl",
                detail: format!(
                    "{}: {} with {op:?} on {}: NCCL has no bitwise reductions. Run this \
                     program on the threads or MPI backend, or reduce with Max/Min/Sum on \
                     values that encode the bits you need",
                    d.site,
                    d.kind.name(),
                    d.dtype
                ),
            });
        }
    })
}

#[cfg(test)]
mod tests;
