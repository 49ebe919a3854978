//! Call lists for hand-made batches, against the calls and copies worked out by hand. (The
//! host emulation checks the lowering's results on random programs; these pin down its shape:
//! how many calls, which buffers, which copies.)

use super::*;
use crate::model::{CallSite, Shape};

const F32: DType = DType::F32;

fn op(kind: OpKind, group: u32, shape: &[usize]) -> OpDesc {
    OpDesc {
        kind,
        group: GroupId(group),
        peer: None,
        op: kind.is_reducing().then_some(ReduceOp::Sum),
        dtype: F32,
        shape: Shape::from_slice(shape),
        dim: 0,
        site: CallSite::caller(),
    }
}

fn rooted(kind: OpKind, shape: &[usize], root: usize) -> OpDesc {
    OpDesc {
        peer: Some(root),
        ..op(kind, 0, shape)
    }
}

fn along(kind: OpKind, shape: &[usize], dim: usize) -> OpDesc {
    OpDesc {
        dim,
        ..op(kind, 0, shape)
    }
}

fn p2p(kind: OpKind, peer: usize, len: usize) -> OpDesc {
    OpDesc {
        peer: Some(peer),
        ..op(kind, 0, &[len])
    }
}

/// Lowers `ops` for `rank` of a world of `world` (plus group 1 = ranks 0 and 2), NCCL
/// `version`.
fn lower_at(ops: &[OpDesc], rank: usize, world: usize, version: u32) -> Result<Lowered> {
    lower_with(ops, rank, world, version, true)
}

fn lower_with(
    ops: &[OpDesc],
    rank: usize,
    world: usize,
    version: u32,
    pack: bool,
) -> Result<Lowered> {
    let groups: Vec<Box<[usize]>> = vec![(0..world).collect(), Box::new([0, 2])];
    let refs: Vec<&OpDesc> = ops.iter().collect();
    lower(
        &refs,
        &Setting {
            rank,
            version,
            groups: &groups,
            pack,
        },
    )
}

fn at(mem: Mem, offset: usize) -> At {
    At { mem, offset }
}

fn flat(dst: At, src: At, bytes: usize) -> Copy2d {
    contiguous(dst, src, bytes)
}

const NEW: u32 = 23203;
const OLD: u32 = 22703;
use Mem::{In, Out, Scratch};

#[test]
fn small_all_reduces_share_one_call_on_a_packed_buffer() {
    let ops = [
        op(OpKind::AllReduce, 0, &[2]),
        op(OpKind::AllReduce, 0, &[3]),
        op(OpKind::AllReduce, 0, &[1]),
    ];
    let l = lower_at(&ops, 1, 4, NEW).unwrap();
    assert_eq!(l.scratch, vec![24]);
    let s = |o| at(Scratch(0), o);
    assert_eq!(
        l.pre,
        vec![
            flat(s(0), at(In(0), 0), 8),
            flat(s(8), at(In(1), 0), 12),
            flat(s(20), at(In(2), 0), 4),
        ]
    );
    assert_eq!(
        l.calls,
        vec![Call::Coll {
            of: 0,
            coll: Coll::AllReduce,
            comm: Comm::Group(GroupId::WORLD),
            send: Some(s(0)),
            recv: Some(s(0)),
            count: 6,
            dtype: F32,
            op: Some(Red::Sum),
        }]
    );
    assert_eq!(
        l.post,
        vec![
            flat(at(Out(0), 0), s(0), 8),
            flat(at(Out(1), 0), s(8), 12),
            flat(at(Out(2), 0), s(20), 4),
        ]
    );
}

#[test]
fn without_the_packing_promise_every_op_is_its_own_call() {
    let ops = [
        op(OpKind::AllReduce, 0, &[2]),
        op(OpKind::AllReduce, 0, &[3]),
    ];
    let l = lower_with(&ops, 1, 4, NEW, false).unwrap();
    assert!(
        l.scratch.is_empty() && l.pre.is_empty() && l.post.is_empty(),
        "{l}"
    );
    assert_eq!(l.calls.len(), 2);
}

#[test]
fn packing_stops_at_a_different_op_dtype_group_or_a_large_tensor() {
    let big = PACK_MAX_BYTES / 4 + 1;
    let mut max = op(OpKind::AllReduce, 0, &[2]);
    max.op = Some(ReduceOp::Max);
    let ops = [
        op(OpKind::AllReduce, 0, &[2]),
        max,
        op(OpKind::AllReduce, 0, &[big]),
        op(OpKind::AllReduce, 0, &[big]),
        op(OpKind::AllReduce, 1, &[2]),
    ];
    let l = lower_at(&ops, 0, 4, NEW).unwrap();
    // Five calls, each in place on the user's tensor, no copies.
    assert!(
        l.pre.is_empty() && l.post.is_empty() && l.scratch.is_empty(),
        "{l}"
    );
    let counts: Vec<(usize, usize)> = l
        .calls
        .iter()
        .map(|c| match c {
            Call::Coll { of, count, .. } => (*of, *count),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(counts, vec![(0, 2), (1, 2), (2, big), (3, big), (4, 2)]);
}

#[test]
fn packed_reduce_copies_results_out_on_the_root_only() {
    let ops = [
        rooted(OpKind::Reduce, &[2], 2),
        rooted(OpKind::Reduce, &[2], 2),
    ];
    let off_root = lower_at(&ops, 0, 4, NEW).unwrap();
    assert_eq!(off_root.pre.len(), 2);
    assert!(off_root.post.is_empty());
    let root = lower_at(&ops, 2, 4, NEW).unwrap();
    assert_eq!((root.pre.len(), root.post.len()), (2, 2));
    assert!(matches!(
        root.calls[..],
        [Call::Coll {
            coll: Coll::Reduce { root: 2 },
            count: 4,
            ..
        }]
    ));
    // Broadcast: the root only sends, the others only receive.
    let ops = [
        rooted(OpKind::Broadcast, &[1], 1),
        rooted(OpKind::Broadcast, &[1], 1),
    ];
    let (r, o) = (
        lower_at(&ops, 1, 2, NEW).unwrap(),
        lower_at(&ops, 0, 2, NEW).unwrap(),
    );
    assert_eq!((r.pre.len(), r.post.len()), (2, 0));
    assert_eq!((o.pre.len(), o.post.len()), (0, 2));
}

#[test]
fn all_gather_along_columns_interleaves_blocks_from_scratch() {
    // Input [2, 3] f32 on each of 2 ranks; output [2, 6].
    let l = lower_at(&[along(OpKind::AllGather, &[2, 3], 1)], 0, 2, NEW).unwrap();
    assert_eq!(l.scratch, vec![48]);
    assert!(l.pre.is_empty());
    assert!(matches!(
        l.calls[..],
        [Call::Coll {
            coll: Coll::AllGather,
            send: Some(At {
                mem: In(0),
                offset: 0
            }),
            recv: Some(At {
                mem: Scratch(0),
                offset: 0
            }),
            count: 6,
            ..
        }]
    ));
    let block = |j: usize| Copy2d {
        dst: at(Out(0), j * 12),
        dst_pitch: 24,
        src: at(Scratch(0), j * 24),
        src_pitch: 12,
        rows: 2,
        width: 12,
    };
    assert_eq!(l.post, vec![block(0), block(1)]);
    // Along rows: straight into the output.
    let rows = lower_at(&[along(OpKind::AllGather, &[2, 3], 0)], 0, 2, NEW).unwrap();
    assert!(rows.scratch.is_empty() && rows.post.is_empty());
}

#[test]
fn reduce_scatter_along_columns_packs_blocks_first() {
    // Input [2, 4] on 2 ranks: blocks are columns 0..2 and 2..4; output [2, 2].
    let l = lower_at(&[along(OpKind::ReduceScatter, &[2, 4], 1)], 1, 2, NEW).unwrap();
    let block = |j: usize| Copy2d {
        dst: at(Scratch(0), j * 16),
        dst_pitch: 8,
        src: at(In(0), j * 8),
        src_pitch: 16,
        rows: 2,
        width: 8,
    };
    assert_eq!(l.pre, vec![block(0), block(1)]);
    assert!(matches!(
        l.calls[..],
        [Call::Coll {
            coll: Coll::ReduceScatter,
            recv: Some(At {
                mem: Out(0),
                offset: 0
            }),
            count: 4,
            ..
        }]
    ));
    assert!(l.post.is_empty());
}

#[test]
fn all_to_all_is_nccls_own_call_from_2_28_and_grouped_messages_before() {
    let ops = [op(OpKind::AllToAll, 0, &[6])];
    let new = lower_at(&ops, 1, 3, NEW).unwrap();
    assert!(matches!(
        new.calls[..],
        [Call::Coll {
            coll: Coll::AllToAll,
            count: 2,
            ..
        }]
    ));
    let old = lower_at(&ops, 1, 3, OLD).unwrap();
    // Its own block is a copy; one send and one receive per other member, block j to j.
    assert_eq!(old.pre, vec![flat(at(Out(0), 8), at(In(0), 8), 8)]);
    let world = Comm::Group(GroupId::WORLD);
    let msg = |send: bool, peer: usize| {
        let (of, count, dtype) = (0, 2, F32);
        if send {
            Call::Send {
                of,
                comm: world,
                peer,
                buf: at(In(0), peer * 8),
                count,
                dtype,
            }
        } else {
            Call::Recv {
                of,
                comm: world,
                peer,
                buf: at(Out(0), peer * 8),
                count,
                dtype,
            }
        }
    };
    assert_eq!(
        old.calls,
        vec![msg(true, 0), msg(false, 0), msg(true, 2), msg(false, 2)]
    );
}

#[test]
fn gather_before_2_28_is_sends_to_the_root() {
    let ops = [rooted(OpKind::Gather, &[3], 2)];
    let member = lower_at(&ops, 0, 3, OLD).unwrap();
    assert!(matches!(
        member.calls[..],
        [Call::Send {
            peer: 2,
            count: 3,
            ..
        }]
    ));
    let root = lower_at(&ops, 2, 3, OLD).unwrap();
    assert_eq!(root.pre, vec![flat(at(Out(0), 24), at(In(0), 0), 12)]);
    let peers: Vec<usize> = root
        .calls
        .iter()
        .map(|c| match c {
            Call::Recv { peer, buf, .. } => {
                assert_eq!(*buf, at(Out(0), peer * 12));
                *peer
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(peers, vec![0, 1]);
    // On a sub-group, roots are ranks of the group: global rank 2 is rank 1 of {0, 2}.
    let mut sub = rooted(OpKind::Scatter, &[3], 2);
    sub.group = GroupId(1);
    let l = lower_at(&[sub], 0, 3, NEW).unwrap();
    assert!(matches!(
        l.calls[..],
        [Call::Coll {
            coll: Coll::Scatter { root: 1 },
            send: None,
            comm: Comm::Group(GroupId(1)),
            ..
        }]
    ));
}

#[test]
fn user_messages_use_their_own_communicator_and_messages_to_self_are_copies() {
    let ops = [
        p2p(OpKind::Send, 1, 4),
        p2p(OpKind::Send, 0, 2),
        p2p(OpKind::Recv, 0, 2),
        p2p(OpKind::Recv, 1, 4),
    ];
    let l = lower_at(&ops, 0, 2, NEW).unwrap();
    assert_eq!(l.pre, vec![flat(at(Out(2), 0), at(In(1), 0), 8)]);
    assert!(
        l.calls.iter().all(|c| matches!(
            c,
            Call::Send {
                comm: Comm::P2p,
                peer: 1,
                ..
            } | Call::Recv {
                comm: Comm::P2p,
                peer: 1,
                ..
            }
        )),
        "{l}"
    );
    assert_eq!(l.calls.len(), 2);
    // A message to oneself must be received in the same batch, with the same size.
    let unmatched = lower_at(&[p2p(OpKind::Send, 0, 2)], 0, 2, NEW).unwrap_err();
    assert!(
        unmatched.to_string().contains("in one batch"),
        "{unmatched}"
    );
    let sizes = lower_at(
        &[p2p(OpKind::Send, 0, 2), p2p(OpKind::Recv, 0, 3)],
        0,
        2,
        NEW,
    );
    assert!(matches!(sizes, Err(Error::P2pMismatch(_))), "{sizes:?}");
}

#[test]
fn barriers_in_a_row_are_one_byte_all_reduce_and_empty_tensors_no_call() {
    let ops = [
        op(OpKind::Barrier, 0, &[]),
        op(OpKind::Barrier, 0, &[]),
        op(OpKind::AllReduce, 0, &[0]),
        op(OpKind::Barrier, 1, &[]),
    ];
    let l = lower_at(&ops, 0, 3, NEW).unwrap();
    assert_eq!(l.scratch, vec![1, 1]);
    let comms: Vec<Comm> = l
        .calls
        .iter()
        .map(|c| match c {
            Call::Coll {
                coll: Coll::AllReduce,
                comm,
                count: 1,
                dtype: DType::U8,
                ..
            } => *comm,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        comms,
        vec![Comm::Group(GroupId::WORLD), Comm::Group(GroupId(1))]
    );
}

#[test]
fn bitwise_reductions_are_refused_before_any_call_with_the_call_site() {
    let mut x = op(OpKind::AllReduce, 0, &[2]);
    x.dtype = DType::I32;
    x.op = Some(ReduceOp::BitXor);
    let e = lower_at(&[x.clone()], 0, 2, NEW).unwrap_err().to_string();
    assert!(e.contains("NCCL has no bitwise reductions"), "{e}");
    assert!(e.contains(&x.site.to_string()), "{e}");
}

#[test]
fn pre_mul_sum_and_avg_are_nccl_ops() {
    let mut a = op(OpKind::AllReduce, 0, &[big_enough()]);
    a.op = Some(ReduceOp::PreMulSum(0.5));
    let mut b = a.clone();
    b.op = Some(ReduceOp::Avg);
    let l = lower_at(&[a, b], 0, 2, NEW).unwrap();
    let ops: Vec<Option<Red>> = l
        .calls
        .iter()
        .map(|c| match c {
            Call::Coll { op, .. } => *op,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ops, vec![Some(Red::PreMulSum(0.5)), Some(Red::Avg)]);
}

fn big_enough() -> usize {
    PACK_MAX_BYTES
}
