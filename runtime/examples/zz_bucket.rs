use rankwise_runtime::{Ctx, ReduceOp, Result, Tensor, launch};
use std::time::Instant;
fn main() {
    let world: usize = std::env::var("W")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let out = launch(world, |ctx: &mut Ctx| -> Result<f64> {
        let n = ctx.world();
        let r = ctx.rank();
        let mut bucket: Vec<Tensor<f32>> = (0..1000)
            .map(|i| Tensor::from_fn([256], |ix| (r * 100 + i % 7 + ix[0] % 5) as f32))
            .collect::<Result<_>>()?;
        let mut batch = ctx.batch();
        for b in bucket.iter_mut() {
            batch.all_reduce(b, ReduceOp::Sum);
        }
        batch.run()?;
        for (i, b) in bucket.iter().enumerate() {
            for (e, &x) in b.as_slice()?.iter().enumerate() {
                let want: usize = (0..n).map(|q| q * 100 + i % 7 + e % 5).sum();
                assert_eq!(x, want as f32, "rank {r} tensor {i}[{e}]");
            }
        }
        let iters: usize = std::env::var("N")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(2000);
        ctx.barrier()?;
        let t = Instant::now();
        for _ in 0..iters {
            let mut batch = ctx.batch();
            for b in bucket.iter_mut() {
                batch.all_reduce(b, ReduceOp::Sum);
            }
            batch.run()?;
        }
        let tot = t.elapsed().as_secs_f64() / iters as f64 * 1e6;
        eprintln!("rank {} total {tot:.1}", ctx.rank());
        Ok(tot)
    });
    println!("{:?}", out.map(|_| ()));
}
