//! Every collective × dtype × reduce op × dim, worlds 1..=8, on the world, on odd ranks and on a
//! split into halves; roots other than 0; odd and empty shapes. Each result is compared, bit for
//! bit, with the sequential reference in `common`.

mod common;

use common::{Num, concat, data, reduce, split, with_dim};
use rankwise_runtime::{Ctx, DType, Group, ReduceOp, Result, Tensor, bf16, f16, spawn};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    AllReduce,
    Reduce,
    Broadcast,
    AllGather,
    Gather,
    Scatter,
    ReduceScatter,
    AllToAll,
    Barrier,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum GroupSpec {
    World,
    Odd,
    Halves,
}

#[derive(Clone, Debug)]
struct Case {
    kind: Kind,
    group: GroupSpec,
    base: [usize; 3],
    dim: usize,
    op: ReduceOp,
    /// Index of the root among the members (taken modulo the group size).
    root_pick: usize,
}

fn members(spec: GroupSpec, world: usize, rank: usize) -> Option<Vec<usize>> {
    match spec {
        GroupSpec::World => Some((0..world).collect()),
        GroupSpec::Odd => (rank % 2 == 1).then(|| (1..world).step_by(2).collect()),
        GroupSpec::Halves => {
            let h = world / 2;
            Some(if rank < h {
                (0..h).collect()
            } else {
                (h..world).collect()
            })
        }
    }
}

fn cases(dtype: DType, world: usize) -> Vec<Case> {
    let mut out = Vec::new();
    let mut specs = vec![GroupSpec::World];
    if world >= 2 {
        specs.extend([GroupSpec::Odd, GroupSpec::Halves]);
    }
    let ops: Vec<ReduceOp> = ReduceOp::ALL
        .into_iter()
        .filter(|op| op.supports(dtype))
        .collect();
    for group in specs {
        let shapes: &[[usize; 3]] = if group == GroupSpec::World {
            &[[3, 5, 2], [1, 1, 1], [0, 2, 3]]
        } else {
            &[[3, 5, 2]]
        };
        for &base in shapes {
            let mut push = |kind, dim, op, root_pick| {
                out.push(Case {
                    kind,
                    group,
                    base,
                    dim,
                    op,
                    root_pick,
                });
            };
            for (i, &op) in ops.iter().enumerate() {
                push(Kind::AllReduce, 0, op, 0);
                push(Kind::Reduce, 0, op, i + 1);
                for dim in 0..3 {
                    push(Kind::ReduceScatter, dim, op, 0);
                }
            }
            for dim in 0..3 {
                push(Kind::AllGather, dim, ReduceOp::Sum, 0);
                push(Kind::Gather, dim, ReduceOp::Sum, dim + 1);
                push(Kind::Scatter, dim, ReduceOp::Sum, dim + 2);
                push(Kind::AllToAll, dim, ReduceOp::Sum, 0);
            }
            push(Kind::Broadcast, 0, ReduceOp::Sum, 3);
            push(Kind::Barrier, 0, ReduceOp::Sum, 0);
        }
    }
    out
}

/// Shape of each member's input for `case` over `n` members.
fn input_shape(case: &Case, n: usize) -> Vec<usize> {
    match case.kind {
        Kind::ReduceScatter | Kind::AllToAll | Kind::Scatter => {
            with_dim(&case.base, case.dim, |d| d * n)
        }
        _ => case.base.to_vec(),
    }
}

/// Runs one case on this rank and returns what it ends up holding.
fn run_case<T: Num>(
    ctx: &mut Ctx,
    c: usize,
    case: &Case,
    world_group: &Group,
    g: &Group,
) -> Result<Vec<T>> {
    let rank = ctx.rank();
    let n = g.size();
    let root = g.members()[case.root_pick % n];
    let in_shape = input_shape(case, n);
    let mut x = Tensor::from_vec(&in_shape, data::<T>(rank, c, in_shape.iter().product()))?;
    // Alternate between the world methods on `Ctx` and the same methods on a group handle.
    let direct = g == world_group && c.is_multiple_of(2);
    macro_rules! call {
        ($($m:tt)*) => {
            if direct { ctx.$($m)* } else { ctx.group(g).$($m)* }
        };
    }
    let base = case.base;
    Ok(match case.kind {
        Kind::AllReduce => {
            call!(all_reduce(&mut x, case.op))?;
            x.into_vec()
        }
        Kind::Reduce => {
            call!(reduce(&mut x, root, case.op))?;
            x.into_vec()
        }
        Kind::Broadcast => {
            call!(broadcast(&mut x, root))?;
            x.into_vec()
        }
        Kind::AllGather => {
            let mut out = Tensor::zeros(with_dim(&base, case.dim, |d| d * n))?;
            call!(all_gather(&x, &mut out, case.dim))?;
            out.into_vec()
        }
        Kind::Gather => {
            let mut out = Tensor::zeros(with_dim(&base, case.dim, |d| d * n))?;
            let is_root = rank == root;
            call!(gather(&x, is_root.then_some(&mut out), root, case.dim))?;
            if is_root { out.into_vec() } else { Vec::new() }
        }
        Kind::Scatter => {
            let mut out = Tensor::zeros(base)?;
            call!(scatter(
                (rank == root).then_some(&x),
                &mut out,
                root,
                case.dim
            ))?;
            out.into_vec()
        }
        Kind::ReduceScatter => {
            let mut out = Tensor::zeros(base)?;
            call!(reduce_scatter(&x, &mut out, case.op, case.dim))?;
            out.into_vec()
        }
        Kind::AllToAll => {
            let mut out = Tensor::zeros(&in_shape)?;
            call!(all_to_all(&x, &mut out, case.dim))?;
            out.into_vec()
        }
        Kind::Barrier => {
            call!(barrier())?;
            Vec::new()
        }
    })
}

/// What `rank` should hold after `case`, from the reference.
fn expected<T: Num>(c: usize, case: &Case, world: usize, rank: usize) -> Option<Vec<T>> {
    let m = members(case.group, world, rank)?;
    let n = m.len();
    let i = m.iter().position(|&r| r == rank).unwrap();
    let root_i = case.root_pick % n;
    let in_shape = input_shape(case, n);
    let numel: usize = in_shape.iter().product();
    let xs: Vec<Vec<T>> = m.iter().map(|&r| data::<T>(r, c, numel)).collect();
    Some(match case.kind {
        Kind::AllReduce => reduce(&xs, case.op),
        Kind::Reduce => {
            if i == root_i {
                reduce(&xs, case.op)
            } else {
                xs[i].clone()
            }
        }
        Kind::Broadcast => xs[root_i].clone(),
        Kind::AllGather => concat(&xs, &case.base, case.dim),
        Kind::Gather => {
            if i == root_i {
                concat(&xs, &case.base, case.dim)
            } else {
                Vec::new()
            }
        }
        Kind::Scatter => split(&xs[root_i], &in_shape, case.dim, n).swap_remove(i),
        Kind::ReduceScatter => split(&reduce(&xs, case.op), &in_shape, case.dim, n).swap_remove(i),
        Kind::AllToAll => {
            let parts: Vec<Vec<T>> = xs
                .iter()
                .map(|x| split(x, &in_shape, case.dim, n).swap_remove(i))
                .collect();
            concat(&parts, &case.base, case.dim)
        }
        Kind::Barrier => Vec::new(),
    })
}

fn check_dtype<T: Num>() {
    for world in 1..=8 {
        let cases = cases(T::DTYPE, world);
        let got = spawn(world, |ctx| {
            let world_group = ctx.world_group().clone();
            let odd: Vec<usize> = (1..world).step_by(2).collect();
            let odd_group = if world >= 2 {
                Some(ctx.new_group(&odd)?)
            } else {
                None
            };
            let h = world / 2;
            let halves = if world >= 2 {
                Some(ctx.split(&[&(0..h).collect::<Vec<_>>(), &(h..world).collect::<Vec<_>>()])?)
            } else {
                None
            };
            let mut outs = Vec::with_capacity(cases.len());
            for (c, case) in cases.iter().enumerate() {
                let g = match case.group {
                    GroupSpec::World => &world_group,
                    GroupSpec::Odd => match &odd_group {
                        Some(g) if g.contains(ctx.rank()) => g,
                        _ => {
                            outs.push(None);
                            continue;
                        }
                    },
                    GroupSpec::Halves => halves.as_ref().expect("halves exist for world >= 2"),
                };
                outs.push(Some(run_case::<T>(ctx, c, case, &world_group, g)?));
            }
            Ok(outs)
        })
        .unwrap_or_else(|e| panic!("{} world {world}: {e}", T::DTYPE));
        for (rank, outs) in got.iter().enumerate() {
            for (c, case) in cases.iter().enumerate() {
                let want = expected::<T>(c, case, world, rank);
                assert_eq!(
                    outs[c],
                    want,
                    "{} world {world} rank {rank} case {c}: {case:?}",
                    T::DTYPE
                );
            }
        }
    }
}

/// One test per dtype, each running `$check` for its type.
macro_rules! per_dtype {
    ($check:ident: $($name:ident => $t:ty),*) => {$(
        #[test]
        fn $name() {
            $check::<$t>()
        }
    )*};
}

per_dtype!(check_dtype:
    every_collective_f32 => f32, every_collective_f64 => f64, every_collective_f16 => f16,
    every_collective_bf16 => bf16, every_collective_i8 => i8, every_collective_u8 => u8,
    every_collective_i32 => i32, every_collective_u32 => u32, every_collective_i64 => i64,
    every_collective_u64 => u64
);

/// All_reduces and reduces just large enough that each member reduces its own slice (17
/// elements past 8 KiB), and reduce_scatters of 251 elements a member, in one row and along the
/// second dimension of three rows, with every operator the dtype supports, every root, at
/// worlds 1 to 5: bit for bit the sequential reference. The counts are odd, so members' slices
/// end inside a group of lanes.
fn sliced_reductions<T: Num>() {
    const CHUNK: usize = 251;
    let numel = 8192 / size_of::<T>() + 17;
    let ops: Vec<ReduceOp> = ReduceOp::ALL
        .into_iter()
        .filter(|op| op.supports(T::DTYPE))
        .collect();
    for world in 1..=5 {
        let got = spawn(world, |ctx| {
            let r = ctx.rank();
            let mut outs = Vec::new();
            for (c, &op) in ops.iter().enumerate() {
                let mut x = Tensor::from_vec([numel], data::<T>(r, c, numel))?;
                ctx.all_reduce(&mut x, op)?;
                outs.push(x.into_vec());
                for root in 0..world {
                    let mut x = Tensor::from_vec([numel], data::<T>(r, c + root, numel))?;
                    ctx.reduce(&mut x, root, op)?;
                    outs.push(x.into_vec());
                }
                let x = Tensor::from_vec([CHUNK * world], data::<T>(r, c, CHUNK * world))?;
                let mut out = Tensor::zeros([CHUNK])?;
                ctx.reduce_scatter(&x, &mut out, op, 0)?;
                outs.push(out.into_vec());
                let x = Tensor::from_vec([3, CHUNK * world], data::<T>(r, c, 3 * CHUNK * world))?;
                let mut out = Tensor::zeros([3, CHUNK])?;
                ctx.reduce_scatter(&x, &mut out, op, 1)?;
                outs.push(out.into_vec());
            }
            Ok(outs)
        })
        .unwrap();
        for (r, outs) in got.into_iter().enumerate() {
            let mut outs = outs.into_iter();
            for (c, &op) in ops.iter().enumerate() {
                let inputs = |case: usize| -> Vec<Vec<T>> {
                    (0..world).map(|q| data(q, case, numel)).collect()
                };
                let want = reduce(&inputs(c), op);
                assert!(
                    outs.next() == Some(want),
                    "all_reduce {op:?}, world {world}, rank {r}"
                );
                for root in 0..world {
                    let ins = inputs(c + root);
                    let want = if r == root {
                        reduce(&ins, op)
                    } else {
                        ins[r].clone()
                    };
                    assert!(
                        outs.next() == Some(want),
                        "reduce {op:?} to {root}, world {world}, rank {r}"
                    );
                }
                let ins: Vec<Vec<T>> = (0..world).map(|q| data(q, c, CHUNK * world)).collect();
                let want = reduce(&ins, op)[r * CHUNK..(r + 1) * CHUNK].to_vec();
                assert!(
                    outs.next() == Some(want),
                    "reduce_scatter {op:?}, world {world}, rank {r}"
                );
                let ins: Vec<Vec<T>> = (0..world).map(|q| data(q, c, 3 * CHUNK * world)).collect();
                let all = reduce(&ins, op);
                let row = CHUNK * world;
                let want: Vec<T> = (0..3)
                    .flat_map(|i| all[i * row + r * CHUNK..i * row + (r + 1) * CHUNK].to_vec())
                    .collect();
                assert!(
                    outs.next() == Some(want),
                    "reduce_scatter by rows {op:?}, world {world}"
                );
            }
        }
    }
}

per_dtype!(sliced_reductions:
    sliced_reductions_f32 => f32, sliced_reductions_f64 => f64, sliced_reductions_f16 => f16,
    sliced_reductions_bf16 => bf16, sliced_reductions_i8 => i8, sliced_reductions_u8 => u8,
    sliced_reductions_i32 => i32, sliced_reductions_u32 => u32, sliced_reductions_i64 => i64,
    sliced_reductions_u64 => u64
);

/// Broadcasts large enough that every member shares the copying, and all_gathers on both sides
/// of the switch from pushing to pulling (4 MiB of output), on the world and on halves, with
/// every root. Every element holds a value naming the rank and the place it came from, so a
/// piece copied from or to the wrong offset, or by nobody, shows.
fn large_moves<T: Num>() {
    let tag = |r: usize, i: usize| T::of((r * 1_000_000 + i) as f64);
    let tagged = |r: usize, numel: usize| (0..numel).map(|i| tag(r, i)).collect::<Vec<T>>();
    let gathers: [([usize; 2], usize); 3] = [([3, 1001], 1), ([3, 1001], 0), ([2, 150_000], 1)];
    let halves = |world: usize, r: usize| -> Vec<usize> {
        let h = world / 2;
        if r < h {
            (0..h).collect()
        } else {
            (h..world).collect()
        }
    };
    for world in 1..=5 {
        let got = spawn(world, |ctx| {
            let r = ctx.rank();
            let mut outs = Vec::new();
            for numel in [2051usize, 100_003] {
                for root in 0..world {
                    let mut x = Tensor::from_vec([numel], tagged(r, numel))?;
                    ctx.broadcast(&mut x, root)?;
                    outs.push(x.into_vec());
                }
            }
            for (shape, dim) in gathers {
                let x = Tensor::from_vec(shape, tagged(r, shape.iter().product()))?;
                let mut out = Tensor::zeros(with_dim(&shape, dim, |d| d * world))?;
                ctx.all_gather(&x, &mut out, dim)?;
                outs.push(out.into_vec());
            }
            if world >= 2 {
                let h = world / 2;
                let g =
                    ctx.split(&[&(0..h).collect::<Vec<_>>(), &(h..world).collect::<Vec<_>>()])?;
                let m = halves(world, r);
                let mut x = Tensor::from_vec([100_003], tagged(r, 100_003))?;
                ctx.group(&g).broadcast(&mut x, m[m.len() - 1])?;
                outs.push(x.into_vec());
                let x = Tensor::from_vec([3, 1001], tagged(r, 3003))?;
                let mut out = Tensor::zeros([3, 1001 * m.len()])?;
                ctx.group(&g).all_gather(&x, &mut out, 1)?;
                outs.push(out.into_vec());
            }
            Ok(outs)
        })
        .unwrap_or_else(|e| panic!("{} world {world}: {e}", T::DTYPE));
        // What every rank gets on the world, computed once (per rank, it cost more than the
        // collectives under the sanitizers).
        let mut everyone = Vec::new();
        for numel in [2051usize, 100_003] {
            everyone.extend((0..world).map(|root| tagged(root, numel)));
        }
        for (shape, dim) in gathers {
            let xs: Vec<Vec<T>> = (0..world)
                .map(|q| tagged(q, shape.iter().product()))
                .collect();
            everyone.push(concat(&xs, &shape, dim));
        }
        for (r, outs) in got.iter().enumerate() {
            let mut on_halves = Vec::new();
            if world >= 2 {
                let m = halves(world, r);
                on_halves.push(tagged(m[m.len() - 1], 100_003));
                let xs: Vec<Vec<T>> = m.iter().map(|&q| tagged(q, 3003)).collect();
                on_halves.push(concat(&xs, &[3, 1001], 1));
            }
            let want: Vec<&Vec<T>> = everyone.iter().chain(&on_halves).collect();
            assert_eq!(outs.len(), want.len());
            for (k, (o, &w)) in outs.iter().zip(&want).enumerate() {
                assert!(
                    o == w,
                    "{} world {world} rank {r}: result {k} differs",
                    T::DTYPE
                );
            }
        }
    }
}

#[test]
fn large_moves_land_where_they_belong_f32() {
    large_moves::<f32>()
}

#[test]
fn large_moves_land_where_they_belong_i64() {
    large_moves::<i64>()
}

/// Point-to-point: a ring shift in a batch (world 1 sends to itself), and an ordered blocking
/// exchange (even ranks send first) for every dtype's size class.
#[test]
fn ring_shift_and_ordered_exchange() {
    for world in 1..=8 {
        let got = spawn(world, |ctx| {
            let (r, w) = (ctx.rank(), ctx.world());
            let x = Tensor::from_vec([3], data::<i64>(r, 0, 3))?;
            let mut y = Tensor::<i64>::zeros([3])?;
            let mut b = ctx.batch();
            b.send(&x, (r + 1) % w).recv(&mut y, (r + w - 1) % w);
            b.run()?;
            let mut z = Tensor::<f16>::zeros([2, 2])?;
            if w >= 2 {
                let peer = r ^ 1;
                let mine = Tensor::from_vec([2, 2], data::<f16>(r, 1, 4))?;
                if peer < w {
                    if r % 2 == 0 {
                        ctx.send(&mine, peer)?;
                        ctx.recv(&mut z, peer)?;
                    } else {
                        ctx.recv(&mut z, peer)?;
                        ctx.send(&mine, peer)?;
                    }
                }
            }
            Ok((y.into_vec(), z.into_vec()))
        })
        .unwrap();
        for (r, (y, z)) in got.iter().enumerate() {
            assert_eq!(
                y,
                &data::<i64>((r + world - 1) % world, 0, 3),
                "world {world} rank {r}"
            );
            let peer = r ^ 1;
            if world >= 2 && peer < world {
                assert_eq!(z, &data::<f16>(peer, 1, 4));
            } else {
                assert_eq!(z, &vec![f16::ZERO; 4]);
            }
        }
    }
}

/// A batch mixing p2p with several collectives on two communicators; the same-kind collectives
/// fuse into one synchronisation, and each must still produce its own result.
#[test]
fn mixed_batches() {
    for world in 2..=8 {
        let got = spawn(world, |ctx| {
            let r = ctx.rank();
            let w = ctx.world();
            let evens: Vec<usize> = (0..w).step_by(2).collect();
            let g = ctx.new_group(&evens)?;
            let mut a: Vec<Tensor<f32>> = (0..5)
                .map(|k| Tensor::full([k + 1], (r * 10 + k) as f32))
                .collect::<Result<_>>()?;
            let mut e = Tensor::full([2], r as i32)?;
            let x = Tensor::full([1], r as u8)?;
            let mut y = Tensor::<u8>::zeros([1])?;
            let mut b = ctx.batch();
            for t in a.iter_mut() {
                b.all_reduce(t, ReduceOp::Sum);
            }
            b.send(&x, (r + 1) % w).recv(&mut y, (r + w - 1) % w);
            if g.contains(r) {
                b.group(&g).all_reduce(&mut e, ReduceOp::Max);
            }
            b.run()?;
            Ok((
                a.into_iter().map(Tensor::into_vec).collect::<Vec<_>>(),
                e.into_vec(),
                y.into_vec(),
            ))
        })
        .unwrap();
        let rank_sum: usize = (0..world).sum();
        for (r, (a, e, y)) in got.iter().enumerate() {
            for (k, t) in a.iter().enumerate() {
                let want = (rank_sum * 10 + k * world) as f32;
                assert_eq!(t, &vec![want; k + 1], "world {world} rank {r} tensor {k}");
            }
            let max_even = ((world - 1) / 2 * 2) as i32;
            let want_e = if r % 2 == 0 { max_even } else { r as i32 };
            assert_eq!(e, &vec![want_e; 2]);
            assert_eq!(y, &vec![((r + world - 1) % world) as u8]);
        }
    }
}
