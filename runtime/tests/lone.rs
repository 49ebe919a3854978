//! Lone calls too large to go eagerly, which the threads backend runs in place with each
//! member's signature and buffers in its slot's own line: results against hand-computed values
//! with fresh tensors at every call (a stale address would show as old data), shapes the
//! packing key cannot encode (dimensions of 2^14 and more), every disagreement the two-word
//! signature must tell apart (same byte count, different call), and descriptions left by one
//! call that must not stand for the next one (an eager call, a batch, a call that disagrees).

use rankwise_runtime::{Ctx, Error, Options, ReduceOp, Result, Tensor, spawn, spawn_each};

/// The length of a vector beyond the packing key (2^14), and beyond every eager limit; under
/// Miri, whose limits are 32 bytes, 16 (the same paths at a size it interprets in seconds).
const WIDE: usize = if cfg!(miri) { 16 } else { 1 << 14 };

/// The element count of a "64 KiB" f32 call (even, and divisible by 4 after halving twice).
const BIG: usize = if cfg!(miri) { 16 } else { 16384 };

/// Element `i` of `rank`'s input at call `call` (small integers: exact in any sum here).
fn value(rank: usize, call: usize, i: usize) -> i64 {
    (rank * 1_000_003 + call * 7_919 + i % 9_973) as i64
}

fn input(shape: &[usize], rank: usize, call: usize) -> Result<Tensor<i64>> {
    let numel: usize = shape.iter().product();
    Tensor::from_vec(shape, (0..numel).map(|i| value(rank, call, i)).collect())
}

/// The calls of one rank: every kind that moves data, on a shape whose last dimension is beyond
/// the packing key (2^14), split along dim 0 and dim 1; each call's result checked against what
/// the inputs make it, element by element.
fn calls(ctx: &mut Ctx, rounds: usize) -> Result<()> {
    let (n, me) = (ctx.world(), ctx.rank());
    let wide = WIDE;
    for round in 0..rounds {
        let call = |k: usize| round * 16 + k;
        // all_reduce, 1-D.
        let mut t = input(&[wide], me, call(0))?;
        ctx.all_reduce(&mut t, ReduceOp::Sum)?;
        let want: Vec<i64> = (0..wide)
            .map(|i| (0..n).map(|r| value(r, call(0), i)).sum())
            .collect();
        assert_eq!(t.to_vec(), want, "all_reduce, rank {me}, round {round}");
        // broadcast from each root in turn.
        let root = round % n;
        let mut t = input(&[3, wide], me, call(1))?;
        ctx.broadcast(&mut t, root)?;
        let want: Vec<i64> = (0..3 * wide).map(|i| value(root, call(1), i)).collect();
        assert_eq!(t.to_vec(), want, "broadcast from {root}, rank {me}");
        // all_gather along dim 0 and dim 1 of [2, wide].
        for dim in 0..2 {
            let x = input(&[2, wide], me, call(2 + dim))?;
            let shape = if dim == 0 {
                [2 * n, wide]
            } else {
                [2, n * wide]
            };
            let mut out = Tensor::<i64>::zeros(shape)?;
            ctx.all_gather(&x, &mut out, dim)?;
            let got = out.to_vec();
            for (at, &v) in got.iter().enumerate() {
                let (row, col) = (at / shape[1], at % shape[1]);
                let (r, i) = if dim == 0 {
                    (row / 2, (row % 2) * wide + col)
                } else {
                    (col / wide, row * wide + col % wide)
                };
                assert_eq!(v, value(r, call(2 + dim), i), "all_gather dim {dim}, {at}");
            }
        }
        // reduce_scatter and all_to_all along dim 1 of [2, n * wide].
        let x = input(&[2, n * wide], me, call(4))?;
        let mut out = Tensor::<i64>::zeros([2, wide])?;
        ctx.reduce_scatter(&x, &mut out, ReduceOp::Sum, 1)?;
        for (at, &v) in out.to_vec().iter().enumerate() {
            let i = (at / wide) * n * wide + me * wide + at % wide;
            let want: i64 = (0..n).map(|r| value(r, call(4), i)).sum();
            assert_eq!(v, want, "reduce_scatter, rank {me}, {at}");
        }
        let mut out = Tensor::<i64>::zeros([2, n * wide])?;
        ctx.all_to_all(&x, &mut out, 1)?;
        for (at, &v) in out.to_vec().iter().enumerate() {
            let (row, col) = (at / (n * wide), at % (n * wide));
            let (src, off) = (col / wide, col % wide);
            let i = row * n * wide + me * wide + off;
            assert_eq!(v, value(src, call(4), i), "all_to_all, rank {me}, {at}");
        }
    }
    Ok(())
}

#[test]
fn lone_in_place_calls_match_hand_computed_results_with_fresh_tensors() {
    let rounds = if cfg!(miri) { 1 } else { 3 };
    for world in if cfg!(miri) { 2..=3 } else { 2..=4 } {
        spawn(world, |ctx| calls(ctx, rounds)).unwrap_or_else(|e| panic!("world {world}: {e}"));
    }
}

/// One side of a disagreement: a call on a 64 KiB tensor ([`BIG`] elements).
#[derive(Clone, Copy, Debug)]
enum Call {
    /// all_reduce of an `f32` tensor of the shape given (zeros dropped).
    Reduce(ReduceOp, [usize; 2]),
    /// The same bytes as `i32`.
    ReduceInt,
    Broadcast(usize),
    Gather(usize),
}

fn make(ctx: &mut Ctx, call: Call) -> Result<()> {
    match call {
        Call::Reduce(op, shape) => {
            let shape: Vec<usize> = shape.into_iter().filter(|&d| d > 0).collect();
            let mut t = Tensor::<f32>::full(shape, 1.0)?;
            ctx.all_reduce(&mut t, op)
        }
        Call::ReduceInt => {
            let mut t = Tensor::<i32>::full([BIG], 1)?;
            ctx.all_reduce(&mut t, ReduceOp::Sum)
        }
        Call::Broadcast(root) => {
            let mut t = Tensor::<f32>::full([BIG], 1.0)?;
            ctx.broadcast(&mut t, root)
        }
        Call::Gather(dim) => {
            let x = Tensor::<f32>::full([2, BIG / 2], 1.0)?;
            let n = ctx.world();
            let shape = if dim == 0 {
                [2 * n, BIG / 2]
            } else {
                [2, BIG / 2 * n]
            };
            let mut out = Tensor::<f32>::zeros(shape)?;
            ctx.all_gather(&x, &mut out, dim)
        }
    }
}

/// Every rank but `odd` makes `ours`, `odd` makes `theirs`, after `before` agreeing calls; every
/// rank must get the mismatch at that step.
fn mismatch(world: usize, odd: usize, before: usize, ours: Call, theirs: Call) {
    let results = spawn_each(world, Options::default(), |ctx| {
        for _ in 0..before {
            make(ctx, ours)?;
        }
        make(ctx, if ctx.rank() == odd { theirs } else { ours })
    })
    .unwrap_or_else(|e| panic!("{e}"));
    for (rank, r) in results.iter().enumerate() {
        let case = format!("{ours:?} vs {theirs:?} on rank {odd} of {world}, rank {rank}");
        let Err(Error::CollectiveMismatch(m)) = r else {
            panic!("{case}: expected a mismatch, got {r:?}")
        };
        assert_eq!(m.step, before as u64, "{case}");
        assert_eq!(m.rank_b, odd.max(1), "{case}");
    }
}

#[test]
fn lone_descriptions_of_the_same_bytes_tell_every_disagreement_apart() {
    let sum = Call::Reduce(ReduceOp::Sum, [BIG, 0]);
    let theirs = [
        Call::Reduce(ReduceOp::Max, [BIG, 0]),
        Call::Reduce(ReduceOp::Sum, [2, BIG / 2]),
        Call::Reduce(ReduceOp::Sum, [BIG / 2, 2]),
        Call::ReduceInt,
        Call::Broadcast(0),
    ];
    for world in [2, 3] {
        for odd in 0..world {
            for &t in &theirs {
                mismatch(world, odd, 1, sum, t);
            }
            mismatch(world, odd, 0, Call::Broadcast(0), Call::Broadcast(1));
            mismatch(world, odd, 2, Call::Gather(0), Call::Gather(1));
            // Scales have no two-word signature: the full path compares them.
            let scaled = |s| Call::Reduce(ReduceOp::PreMulSum(s), [BIG, 0]);
            mismatch(world, odd, 1, scaled(2.0), scaled(3.0));
        }
    }
}

#[test]
fn a_description_left_by_one_call_never_stands_for_the_next() {
    // Rank `odd` makes a lone in-place call, then one that is not (an eager scalar, a batch of
    // two); the others repeat the lone call. Had `odd`'s slot kept the first description, they
    // would take the second step for an agreeing one and read the first call's buffers.
    for world in [2, 3] {
        for odd in 0..world {
            for second in 0..2 {
                let results = spawn_each(world, Options::default(), |ctx| {
                    let mut big = Tensor::<f32>::full([BIG], 1.0)?;
                    ctx.all_reduce(&mut big, ReduceOp::Sum)?;
                    if ctx.rank() != odd {
                        return ctx.all_reduce(&mut big, ReduceOp::Sum);
                    }
                    let mut small = Tensor::<f32>::full([2], 1.0)?;
                    if second == 0 {
                        return ctx.all_reduce(&mut small, ReduceOp::Sum);
                    }
                    let mut other = Tensor::<f32>::full([2], 1.0)?;
                    let mut b = ctx.batch();
                    b.all_reduce(&mut small, ReduceOp::Sum);
                    b.all_reduce(&mut other, ReduceOp::Sum);
                    b.run()
                })
                .unwrap_or_else(|e| panic!("{e}"));
                for (rank, r) in results.iter().enumerate() {
                    let case = format!("odd {odd} of {world}, second call {second}, rank {rank}");
                    let Err(Error::CollectiveMismatch(m)) = r else {
                        panic!("{case}: expected a mismatch, got {r:?}")
                    };
                    assert_eq!(m.step, 1, "{case}");
                }
            }
        }
    }
}

#[test]
fn ranks_that_batch_a_large_call_meet_ranks_that_make_it_alone() {
    // One rank makes each call inside a batch (a run of two: no lone description), the others
    // alone; the results must be the same either way.
    for world in [2, 3] {
        let results = spawn(world, |ctx| {
            let me = ctx.rank();
            let mut sums = Vec::new();
            for call in 0..4 {
                let mut a = input(&[WIDE], me, call)?;
                let mut b = input(&[WIDE], me, call + 100)?;
                if me == call % world {
                    let mut batch = ctx.batch();
                    batch.all_reduce(&mut a, ReduceOp::Sum);
                    batch.all_reduce(&mut b, ReduceOp::Sum);
                    batch.run()?;
                } else {
                    ctx.all_reduce(&mut a, ReduceOp::Sum)?;
                    ctx.all_reduce(&mut b, ReduceOp::Sum)?;
                }
                sums.push((a.to_vec(), b.to_vec()));
            }
            Ok(sums)
        })
        .unwrap_or_else(|e| panic!("world {world}: {e}"));
        for (rank, sums) in results.iter().enumerate() {
            for (call, (a, b)) in sums.iter().enumerate() {
                for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
                    let want = |c| (0..world).map(|r| value(r, c, i)).sum::<i64>();
                    assert_eq!(x, want(call), "rank {rank}, call {call}, a[{i}]");
                    assert_eq!(y, want(call + 100), "rank {rank}, call {call}, b[{i}]");
                }
            }
        }
    }
}
