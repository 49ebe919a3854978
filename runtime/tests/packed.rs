//! Buckets of small reductions, which the threads backend checks and reduces as packed
//! stretches: results bit for bit against the sequential reference in `common`, ranks that
//! batch the same calls differently (so one rank's stretch meets another's single calls),
//! stretches broken by other kinds and by shapes without a key, and disagreements inside a
//! stretch, which must be reported like any other collective mismatch.

mod common;

use common::{Num, data, reduce};
use rankwise_runtime::{Error, ReduceOp, Result, Tensor, f16, spawn};

/// How a rank issues the bucket.
#[derive(Clone, Copy, Debug)]
enum Issue {
    /// One batch for the whole bucket, on every rank.
    OneBatch,
    /// Rank 0 one call at a time, the others in one batch.
    Rank0Alone,
    /// Each rank in batches of its own size (rank + 2 calls).
    Uneven,
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    AllReduce,
    /// A reduce to this root.
    Reduce(usize),
}

/// The bucket's shapes for element type `T`: both sides of the 8 KiB small-reduction limit,
/// empty tensors, shapes with more than four dimensions or with a dimension of 2^14 elements
/// or more (no shape key: compared in full), and shapes of equal size but different form.
fn shapes<T>() -> Vec<Vec<usize>> {
    let limit = 8192 / std::mem::size_of::<T>();
    let mut out = vec![
        vec![1],
        vec![3],
        vec![2, 3],
        vec![3, 2],
        vec![0],
        vec![limit - 1],
        vec![limit],
        vec![1, 1, 1, 1, 2],
        vec![7],
        vec![4, 4],
        vec![16384, 0],
        vec![5],
    ];
    // A long stretch of equal small tensors, as gradient buckets are.
    out.extend(std::iter::repeat_n(vec![64], 40));
    out
}

/// Every rank's result for the bucket, issued as `issue` says.
fn run_bucket<T: Num>(world: usize, kind: Kind, op: ReduceOp, issue: Issue) -> Vec<Vec<Vec<T>>> {
    let shapes = shapes::<T>();
    spawn(world, |ctx| {
        let rank = ctx.rank();
        let mut ts: Vec<Tensor<T>> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| Tensor::from_vec(s.clone(), data(rank, i, s.iter().product())))
            .collect::<Result<_>>()?;
        let chunk = match issue {
            Issue::OneBatch => ts.len(),
            Issue::Rank0Alone if rank == 0 => 1,
            Issue::Rank0Alone => ts.len(),
            Issue::Uneven => rank + 2,
        };
        for part in ts.chunks_mut(chunk) {
            let mut b = ctx.batch();
            for t in part.iter_mut() {
                match kind {
                    Kind::AllReduce => b.all_reduce(t, op),
                    Kind::Reduce(root) => b.reduce(t, root, op),
                };
            }
            b.run()?;
        }
        Ok(ts.into_iter().map(Tensor::into_vec).collect())
    })
    .expect("the bucket runs")
}

fn check<T: Num + Bits>(world: usize, kind: Kind, op: ReduceOp, issue: Issue) {
    let got = run_bucket::<T>(world, kind, op, issue);
    for (i, s) in shapes::<T>().iter().enumerate() {
        let numel = s.iter().product();
        let inputs: Vec<Vec<T>> = (0..world).map(|r| data(r, i, numel)).collect();
        let reduced = reduce(&inputs, op);
        for (rank, result) in got.iter().enumerate() {
            let want = match kind {
                Kind::Reduce(root) if rank != root => &inputs[rank],
                _ => &reduced,
            };
            let same = result[i].len() == want.len()
                && result[i]
                    .iter()
                    .zip(want)
                    .all(|(a, b)| a.to_bits_for_test() == b.to_bits_for_test());
            assert!(
                same,
                "world {world}, {kind:?} {op:?} {issue:?}: tensor {i} {s:?} on rank {rank}"
            );
        }
    }
}

/// Bit patterns, so that NaN-free float results compare exactly.
trait Bits {
    fn to_bits_for_test(self) -> u64;
}
impl Bits for f32 {
    fn to_bits_for_test(self) -> u64 {
        self.to_bits().into()
    }
}
impl Bits for i32 {
    fn to_bits_for_test(self) -> u64 {
        self as u32 as u64
    }
}
impl Bits for f16 {
    fn to_bits_for_test(self) -> u64 {
        self.to_bits().into()
    }
}

#[test]
fn buckets_of_small_reductions_match_the_reference() {
    for world in 1..=5 {
        for issue in [Issue::OneBatch, Issue::Rank0Alone, Issue::Uneven] {
            check::<f32>(world, Kind::AllReduce, ReduceOp::Sum, issue);
            check::<i32>(world, Kind::AllReduce, ReduceOp::BitXor, issue);
            check::<f16>(world, Kind::AllReduce, ReduceOp::Avg, issue);
            check::<f32>(world, Kind::Reduce(world - 1), ReduceOp::Max, issue);
            check::<f32>(world, Kind::AllReduce, ReduceOp::PreMulSum(0.5), issue);
        }
    }
}

#[test]
fn other_calls_inside_a_bucket_break_the_stretch_but_not_the_results() {
    let out = spawn(3, |ctx| {
        let rank = ctx.rank();
        let mut a: Vec<Tensor<f32>> = (0..20)
            .map(|i| Tensor::full([4], (rank * 10 + i) as f32))
            .collect::<Result<_>>()?;
        let mut bcast = Tensor::full([2], rank as f32)?;
        let mut ints = Tensor::full([3], rank as i32 + 1)?;
        let (head, rest) = a.split_at_mut(7);
        let (mid, tail) = rest.split_at_mut(6);
        let mut b = ctx.batch();
        for t in head.iter_mut() {
            b.all_reduce(t, ReduceOp::Sum);
        }
        b.broadcast(&mut bcast, 2);
        for t in mid.iter_mut() {
            b.all_reduce(t, ReduceOp::Sum);
        }
        b.all_reduce(&mut ints, ReduceOp::Prod);
        for t in tail.iter_mut() {
            b.all_reduce(t, ReduceOp::Sum);
        }
        b.run()?;
        Ok((
            a.into_iter().map(Tensor::into_vec).collect::<Vec<_>>(),
            bcast.into_vec(),
            ints.into_vec(),
        ))
    })
    .expect("runs");
    for (a, bcast, ints) in out {
        for (i, t) in a.iter().enumerate() {
            // Ranks 0, 1, 2 hold 10·r + i.
            assert_eq!(t, &vec![(30 + 3 * i) as f32; 4]);
        }
        assert_eq!(bcast, vec![2.0; 2]);
        assert_eq!(ints, vec![6; 3]);
    }
}

/// Rank `odd` posts something else at position `at` of a bucket of 24 small all_reduces; every
/// rank must stop with a mismatch naming that step.
fn mismatch_at(at: usize, odd: usize) -> Error {
    spawn(3, move |ctx| {
        let rank = ctx.rank();
        let mut ts: Vec<Tensor<f32>> = (0..24)
            .map(|i| {
                let shape = if i == at && rank == odd {
                    vec![3, 2]
                } else {
                    vec![2, 3]
                };
                Tensor::full(shape, 1.0)
            })
            .collect::<Result<_>>()?;
        let mut b = ctx.batch();
        for t in ts.iter_mut() {
            b.all_reduce(t, ReduceOp::Sum);
        }
        b.run()
    })
    .unwrap_err()
}

#[test]
fn a_shape_disagreement_inside_a_stretch_is_a_mismatch_at_its_step() {
    // Equal sizes, different shapes: only the shape keys tell them apart.
    for (at, odd) in [(0, 1), (1, 2), (7, 1), (23, 0), (16, 2)] {
        let err = mismatch_at(at, odd);
        let Error::CollectiveMismatch(m) = &err else {
            panic!("at {at}: expected a mismatch, got {err}")
        };
        assert_eq!(m.step, at as u64, "{err}");
        assert_eq!(m.rank_b, odd.max(1), "{err}");
        let whats = [m.what_a.as_str(), m.what_b.as_str()];
        assert!(
            whats.contains(&"all_reduce(Sum, f32[3, 2])")
                && whats.contains(&"all_reduce(Sum, f32[2, 3])"),
            "{err}"
        );
    }
}

#[test]
fn a_dtype_or_op_disagreement_inside_a_stretch_is_a_mismatch() {
    for variant in 0..2 {
        let err = spawn(2, move |ctx| {
            let rank = ctx.rank();
            let mut fs: Vec<Tensor<f32>> = (0..10)
                .map(|_| Tensor::full([5], 1.0))
                .collect::<Result<_>>()?;
            let mut other = Tensor::full([5], 1.0f64)?;
            let (head, rest) = fs.split_at_mut(5);
            let (fifth, tail) = rest.split_at_mut(1);
            let mut b = ctx.batch();
            for t in head.iter_mut() {
                b.all_reduce(t, ReduceOp::Sum);
            }
            match (rank, variant) {
                (1, 0) => b.all_reduce(&mut other, ReduceOp::Sum),
                (1, _) => b.all_reduce(&mut fifth[0], ReduceOp::Max),
                _ => b.all_reduce(&mut fifth[0], ReduceOp::Sum),
            };
            for t in tail.iter_mut() {
                b.all_reduce(t, ReduceOp::Sum);
            }
            b.run()
        })
        .unwrap_err();
        let Error::CollectiveMismatch(m) = &err else {
            panic!("variant {variant}: expected a mismatch, got {err}")
        };
        assert_eq!(m.step, 5, "{err}");
    }
}

#[test]
fn whole_stretches_that_disagree_are_a_mismatch_at_their_first_step() {
    // Each rank's stretch is uniform and the shapes agree: only comparing the descriptions
    // of a stretch's first step tells the reductions, roots or kinds apart.
    for variant in 0..3 {
        let err = spawn(3, move |ctx| {
            let odd = ctx.rank() == 2;
            let mut fs: Vec<Tensor<f32>> = (0..12)
                .map(|_| Tensor::full([5], 1.0))
                .collect::<Result<_>>()?;
            let mut b = ctx.batch();
            for t in fs.iter_mut() {
                match (odd, variant) {
                    (true, 0) => b.all_reduce(t, ReduceOp::Max),
                    (true, 1) => b.reduce(t, 0, ReduceOp::Sum),
                    (_, 2) => b.reduce(t, usize::from(odd), ReduceOp::Sum),
                    _ => b.all_reduce(t, ReduceOp::Sum),
                };
            }
            b.run()
        })
        .unwrap_err();
        let Error::CollectiveMismatch(m) = &err else {
            panic!("variant {variant}: expected a mismatch, got {err}")
        };
        assert!(m.step < 12, "{err}");
        assert_eq!(m.rank_b, 2, "{err}");
    }
}

#[test]
fn buckets_that_change_between_iterations_are_checked_and_reduced_anew() {
    // Each rank keeps its pack table from one bucket to the next and rewrites only what
    // changed: a bucket that repeats, shrinks, moves to other tensors or changes shapes must
    // still be reduced exactly, and a disagreement at a step where the previous bucket agreed
    // must still be found.
    let world = 3;
    let err = spawn(world, move |ctx| {
        let rank = ctx.rank();
        let fill = |t: &mut Tensor<f32>, iter: usize, i: usize| {
            let v = ((rank + 1) * (iter + 1) + i) as f32;
            t.fill(v);
        };
        // What every member's value `(rank + 1) * (iter + 1) + i` sums to.
        let want =
            |iter: usize, i: usize| ((1..=world).sum::<usize>() * (iter + 1) + world * i) as f32;
        let mut a: Vec<Tensor<f32>> = (0..12)
            .map(|_| Tensor::full([2, 3], 0.0))
            .collect::<Result<_>>()?;
        let mut b: Vec<Tensor<f32>> = (0..12)
            .map(|_| Tensor::full([3, 2], 0.0))
            .collect::<Result<_>>()?;
        // Per iteration: whether it uses the second set of tensors, and how many of them.
        let plan: [(bool, usize); 6] = [
            (false, 12),
            (false, 12),
            (false, 6),
            (true, 12),
            (false, 9),
            (false, 12),
        ];
        for (iter, &(use_b, n)) in plan.iter().enumerate() {
            let ts = if use_b { &mut b } else { &mut a };
            for (i, t) in ts.iter_mut().enumerate() {
                fill(t, iter, i);
            }
            let mut batch = ctx.batch();
            for t in ts[..n].iter_mut() {
                batch.all_reduce(t, ReduceOp::Sum);
            }
            batch.run()?;
            for (i, t) in ts.iter().enumerate() {
                let expect = if i < n {
                    want(iter, i)
                } else {
                    ((rank + 1) * (iter + 1) + i) as f32
                };
                assert!(
                    t.to_vec().iter().all(|&x| x == expect),
                    "iteration {iter}, tensor {i} on rank {rank}: {:?}, want {expect}",
                    t.to_vec()
                );
            }
        }
        // Rank 2 reshapes step 4 of a bucket that agreed at step 4 last time, in place: the
        // same buffer, only the shape differs.
        if rank == 2 {
            let t = std::mem::replace(&mut a[4], Tensor::full([1], 0.0)?);
            a[4] = t.reshape([3, 2])?;
        }
        let mut batch = ctx.batch();
        for t in a.iter_mut() {
            batch.all_reduce(t, ReduceOp::Sum);
        }
        batch.run()
    })
    .unwrap_err();
    let Error::CollectiveMismatch(m) = &err else {
        panic!("expected a mismatch, got {err}")
    };
    // 63 steps in the six buckets before it.
    assert_eq!(m.step, 67, "{err}");
    assert_eq!(m.rank_b, 2, "{err}");
}
