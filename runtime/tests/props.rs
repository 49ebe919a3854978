//! Property tests: random worlds, shapes, dims, roots and ops against the reference.

mod common;

use common::{concat, data, reduce, split, with_dim};
use proptest::prelude::*;
use rankwise_runtime::{ReduceOp, Tensor, spawn};

fn shape_strategy() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..4, 1..=4)
}

fn op_strategy() -> impl Strategy<Value = ReduceOp> {
    prop::sample::select(ReduceOp::ALL.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// all_gather, reduce_scatter and all_to_all along a random dim, then gather and scatter
    /// at a random root, on i64 (bitwise ops included).
    #[test]
    fn split_and_concat_collectives(world in 1usize..=8, shape in shape_strategy(), dim_seed in 0usize..4,
                                    root_seed in 0usize..8, op in op_strategy()) {
        let dim = dim_seed % shape.len();
        let root = root_seed % world;
        let split_shape = with_dim(&shape, dim, |d| d * world);
        let numel: usize = shape.iter().product();
        let split_numel: usize = split_shape.iter().product();
        let got = spawn(world, |ctx| {
            let r = ctx.rank();
            let x = Tensor::from_vec(&shape, data::<i64>(r, 0, numel))?;
            let big = Tensor::from_vec(&split_shape, data::<i64>(r, 1, split_numel))?;
            let mut ag = Tensor::zeros(&split_shape)?;
            ctx.all_gather(&x, &mut ag, dim)?;
            let mut rs = Tensor::zeros(&shape)?;
            ctx.reduce_scatter(&big, &mut rs, op, dim)?;
            let mut a2a = Tensor::zeros(&split_shape)?;
            ctx.all_to_all(&big, &mut a2a, dim)?;
            let mut g = Tensor::zeros(&split_shape)?;
            ctx.gather(&x, (r == root).then_some(&mut g), root, dim)?;
            let mut s = Tensor::zeros(&shape)?;
            ctx.scatter((r == root).then_some(&big), &mut s, root, dim)?;
            Ok([ag, rs, a2a, g, s].map(Tensor::into_vec))
        }).unwrap();
        let xs: Vec<Vec<i64>> = (0..world).map(|r| data(r, 0, numel)).collect();
        let bigs: Vec<Vec<i64>> = (0..world).map(|r| data(r, 1, split_numel)).collect();
        let reduced = split(&reduce(&bigs, op), &split_shape, dim, world);
        for (r, [ag, rs, a2a, g, s]) in got.into_iter().enumerate() {
            prop_assert_eq!(&ag, &concat(&xs, &shape, dim));
            prop_assert_eq!(&rs, &reduced[r]);
            let parts: Vec<Vec<i64>> = bigs.iter().map(|b| split(b, &split_shape, dim, world).swap_remove(r)).collect();
            prop_assert_eq!(&a2a, &concat(&parts, &shape, dim));
            if r == root {
                prop_assert_eq!(&g, &concat(&xs, &shape, dim));
            } else {
                prop_assert_eq!(&g, &vec![0; split_numel]);
            }
            prop_assert_eq!(&s, &split(&bigs[root], &split_shape, dim, world)[r]);
        }
    }

    /// A batch of all_reduces and reduces of random sizes (some above the slicing threshold) is
    /// equivalent to reducing each tensor on its own.
    #[test]
    fn batched_reductions_match_individual_ones(world in 1usize..=6,
                                                sizes in prop::collection::vec(0usize..5000, 1..8),
                                                root_seed in 0usize..6,
                                                op in prop::sample::select(vec![ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg, ReduceOp::PreMulSum(0.5)])) {
        let root = root_seed % world;
        let got = spawn(world, |ctx| {
            let r = ctx.rank();
            let mut ts: Vec<Tensor<f64>> = sizes.iter().enumerate()
                .map(|(k, &n)| Tensor::from_vec([n], data(r, k, n)))
                .collect::<rankwise_runtime::Result<_>>()?;
            let mut b = ctx.batch();
            for (k, t) in ts.iter_mut().enumerate() {
                if k % 2 == 0 { b.all_reduce(t, op); } else { b.reduce(t, root, op); }
            }
            b.run()?;
            Ok(ts.into_iter().map(Tensor::into_vec).collect::<Vec<_>>())
        }).unwrap();
        for (r, ts) in got.into_iter().enumerate() {
            for (k, t) in ts.into_iter().enumerate() {
                let inputs: Vec<Vec<f64>> = (0..world).map(|q| data(q, k, sizes[k])).collect();
                let want = if k % 2 == 0 || r == root { reduce(&inputs, op) } else { inputs[r].clone() };
                prop_assert_eq!(t, want, "rank {} tensor {}", r, k);
            }
        }
    }
}
