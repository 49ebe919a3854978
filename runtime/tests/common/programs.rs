//! Random SPMD programs as data: correct ones built from a list of events that every rank
//! involved issues consistently, and single mutations of them. Shared by the differential test
//! (which draws events with proptest) and the `random_programs` example (which draws them from
//! a seed, so that an MPI job can rebuild the same program on every rank).

#![allow(dead_code)]

use rankwise_runtime::verify::{Item, Program};
use rankwise_runtime::{DType, GroupId, OpKind, ReduceOp};

/// One event of a random SPMD program, as small integers interpreted modulo the world.
#[derive(Clone, Debug)]
pub struct Event {
    pub kind: u8,
    pub a: u8,
    pub b: u8,
    pub c: u8,
    pub d: u8,
}

/// A change to one rank's program.
#[derive(Clone, Debug)]
pub struct Mutation {
    pub rank: u8,
    pub item: u8,
    pub kind: u8,
}

const KINDS: [OpKind; 9] = [
    OpKind::AllReduce,
    OpKind::Reduce,
    OpKind::Broadcast,
    OpKind::Gather,
    OpKind::AllGather,
    OpKind::Scatter,
    OpKind::ReduceScatter,
    OpKind::AllToAll,
    OpKind::Barrier,
];

/// Builds a correct program: every event is issued consistently by every rank involved.
pub fn build(world: usize, group_masks: &[u8], events: &[Event]) -> Program {
    let mut p = Program::new(world);
    let mut groups = vec![(GroupId::WORLD, (0..world).collect::<Vec<_>>())];
    for &mask in group_masks {
        let mut m: Vec<usize> = (0..world).filter(|r| mask >> r & 1 == 1).collect();
        if m.is_empty() {
            m.push(mask as usize % world);
        }
        groups.push((p.group(&m), m));
    }
    for e in events {
        let w = world;
        match e.kind {
            0 | 3 => {
                let (g, members) = &groups[e.a as usize % groups.len()];
                let n = members.len();
                let dtype = DType::ALL[e.c as usize % 10];
                let ops: Vec<ReduceOp> = ReduceOp::ALL
                    .into_iter()
                    .filter(|o| o.supports(dtype))
                    .collect();
                let op = ops[e.c as usize / 10 % ops.len()];
                let ndim = 1 + e.d as usize % 2;
                let mut shape = vec![1 + (e.d as usize / 2) % 3, 1 + (e.d as usize / 6) % 2];
                shape.truncate(ndim);
                let dim = (e.d as usize / 12) % ndim;
                let root = members[e.a as usize / 8 % n];
                use OpKind::{AllGather, AllReduce, Broadcast, Reduce, ReduceScatter};
                // Batches: mixed kinds, and runs of one kind (which backends may pack).
                const BATCHES: [&[OpKind]; 4] = [
                    &[AllReduce, Broadcast],
                    &[AllReduce, AllReduce, AllReduce],
                    &[Broadcast, Broadcast, Reduce, Reduce],
                    &[AllGather, AllGather, ReduceScatter],
                ];
                let kinds: &[OpKind] = if e.kind == 3 {
                    BATCHES[e.b as usize % BATCHES.len()]
                } else {
                    &KINDS[e.b as usize % 9..][..1]
                };
                for &r in members {
                    let mut b = p.rank(r);
                    if e.kind == 3 {
                        b.batch();
                    }
                    for &kind in kinds {
                        let mut split = shape.clone();
                        split[dim] *= n;
                        match kind {
                            OpKind::AllReduce => b.all_reduce(*g, dtype, &shape, op),
                            OpKind::Reduce => b.reduce(*g, dtype, &shape, root, op),
                            OpKind::Broadcast => b.broadcast(*g, dtype, &shape, root),
                            OpKind::Gather => b.gather(*g, dtype, &shape, root, dim),
                            OpKind::AllGather => b.all_gather(*g, dtype, &shape, dim),
                            OpKind::Scatter => b.scatter(*g, dtype, &shape, root, dim),
                            OpKind::ReduceScatter => b.reduce_scatter(*g, dtype, &split, op, dim),
                            OpKind::AllToAll => b.all_to_all(*g, dtype, &split, dim),
                            _ => b.barrier(*g),
                        };
                    }
                    b.end_batch();
                }
            }
            1 => {
                // Everyone sends to the rank `shift` ahead and receives from the one behind, in a
                // batch (shift 0: to itself).
                let shift = e.a as usize % w;
                let dtype = DType::ALL[e.c as usize % 10];
                for r in 0..w {
                    p.rank(r)
                        .batch()
                        .send(dtype, &[2], (r + shift) % w)
                        .recv(dtype, &[2], (r + w - shift) % w)
                        .end_batch();
                }
            }
            2 if w >= 2 => {
                // An ordered blocking exchange between two distinct ranks.
                let x = e.a as usize % w;
                let y = (x + 1 + e.b as usize % (w - 1)) % w;
                p.rank(x)
                    .send(DType::F32, &[3], y)
                    .recv(DType::F32, &[3], y);
                p.rank(y)
                    .recv(DType::F32, &[3], x)
                    .send(DType::F32, &[3], x);
            }
            4 if w >= 2 => {
                // A blocking pipeline: each rank receives from the previous, then sends on.
                for r in 0..w {
                    let mut b = p.rank(r);
                    if r > 0 {
                        b.recv(DType::I64, &[1], r - 1);
                    }
                    if r + 1 < w {
                        b.send(DType::I64, &[1], r + 1);
                    }
                }
            }
            6 if w >= 2 => {
                // Posted ring exchange: everyone posts a send `shift` ahead and a receive from
                // `shift` behind, then waits in one of three orders (or leaves both to its
                // return).
                let shift = 1 + e.a as usize % (w - 1);
                let dtype = DType::ALL[e.c as usize % 10];
                for r in 0..w {
                    let mut b = p.rank(r);
                    let s = b.isend(dtype, &[2], (r + shift) % w);
                    let q = b.irecv(dtype, &[2], (r + w - shift) % w);
                    match e.b % 3 {
                        0 => _ = b.wait(s).wait(q),
                        1 => _ = b.wait(q).wait(s),
                        _ => {}
                    }
                }
            }
            7 if w >= 2 => {
                // MPI's pattern between two ranks: post both, wait for one, make a blocking
                // call the peer needs, wait for the other.
                let x = e.a as usize % w;
                let y = (x + 1 + e.b as usize % (w - 1)) % w;
                let mut b = p.rank(x);
                let s = b.isend(DType::U8, &[1], y);
                let q = b.irecv(DType::U8, &[1], y);
                b.wait(s).send(DType::U8, &[2], y).wait(q);
                drop(b);
                p.rank(y)
                    .recv(DType::U8, &[1], x)
                    .recv(DType::U8, &[2], x)
                    .send(DType::U8, &[1], x);
            }
            8 => {
                // A batch whose ops are not in the order backends run them (collectives,
                // then sends, then receives): a ring exchange around an all_reduce of the
                // world, written receive first (shift 0: to itself).
                let shift = e.a as usize % w;
                let dtype = DType::ALL[e.c as usize % 10];
                for r in 0..w {
                    p.rank(r)
                        .batch()
                        .recv(dtype, &[3], (r + w - shift) % w)
                        .all_reduce(GroupId::WORLD, dtype, &[2], ReduceOp::Max)
                        .send(dtype, &[3], (r + shift) % w)
                        .end_batch();
                }
            }
            _ => {
                for r in 0..w {
                    p.rank(r).barrier(GroupId::WORLD);
                }
            }
        }
    }
    p
}

/// Applies `m` to one rank's items (no-op if that rank has none).
pub fn mutate(p: &mut Program, m: &Mutation) {
    let w = p.world;
    let items = &mut p.ranks[m.rank as usize % w];
    if items.is_empty() {
        return;
    }
    let i = m.item as usize % items.len();
    match m.kind {
        0 if i + 1 < items.len() => items.swap(i, i + 1),
        1 => {
            items.remove(i);
        }
        6 => {
            if let Item::Batch(ops) = &items[i] {
                let singles: Vec<Item> = ops.iter().cloned().map(Item::Op).collect();
                items.splice(i..=i, singles);
            }
        }
        k => {
            if matches!(&items[i], Item::Batch(ops) if ops.is_empty()) {
                return;
            }
            let op = match &mut items[i] {
                Item::Op(op) | Item::Post(op) => op,
                Item::Batch(ops) => &mut ops[0],
                Item::Wait { .. } => return,
            };
            match k {
                2 => op.desc.peer = op.desc.peer.map(|r| (r + 1) % w),
                3 => {
                    if let Some(d) = op.desc.shape.first_mut() {
                        *d += 1;
                    } else {
                        op.desc.kind = OpKind::AllReduce;
                        op.desc.op = Some(ReduceOp::Sum);
                        op.desc.shape.push(1);
                    }
                }
                4 => {
                    let i = DType::ALL
                        .iter()
                        .position(|d| *d == op.desc.dtype)
                        .unwrap_or(0);
                    op.desc.dtype = DType::ALL[(i + 1) % 10];
                }
                _ => {
                    if op.desc.kind.is_p2p() {
                        op.desc.peer = op.desc.peer.map(|r| (r + 1) % w);
                    } else {
                        op.desc.dim += 1;
                    }
                }
            }
        }
    }
}

/// A small deterministic generator (xorshift64*), the same on every process.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0.max(1);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn byte(&mut self) -> u8 {
        (self.next() >> 32) as u8
    }
}

/// The kinds of events without posted messages (which the NCCL lowering lacks).
pub const BLOCKING_KINDS: [u8; 7] = [0, 1, 2, 3, 4, 5, 8];

impl Event {
    pub fn random(r: &mut Rng) -> Self {
        Event {
            kind: BLOCKING_KINDS[r.byte() as usize % BLOCKING_KINDS.len()],
            a: r.byte(),
            b: r.byte(),
            c: r.byte(),
            d: r.byte(),
        }
    }
}

impl Mutation {
    pub fn random(r: &mut Rng) -> Self {
        Mutation {
            rank: r.byte(),
            item: r.byte(),
            kind: r.byte() % 7,
        }
    }
}

/// The correct program number `index` of `seed` at `world`, and a mutation for it.
pub fn numbered(seed: u64, index: u64, world: usize) -> (Program, Mutation) {
    let mut r = Rng(seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xa076_1d64_78bd_642f);
    for _ in 0..4 {
        r.next();
    }
    let masks: Vec<u8> = (0..r.byte() % 3).map(|_| r.byte()).collect();
    let events: Vec<Event> = (0..r.byte() % 12).map(|_| Event::random(&mut r)).collect();
    (build(world, &masks, &events), Mutation::random(&mut r))
}
