use rankwise_runtime::{ReduceOp, Tensor, launch};

fn main() -> rankwise_runtime::Result<()> {
    let out = launch(4, |ctx| {
        let r = ctx.rank() as f32;
        let mut t = Tensor::full([3], r + 1.0)?;
        ctx.all_reduce(&mut t, ReduceOp::Sum)?;
        let mut big = Tensor::full([10000], r)?;
        ctx.all_reduce(&mut big, ReduceOp::Max)?;
        let x = Tensor::full([2, 1], r)?;
        let mut y = Tensor::zeros([2, ctx.world()])?;
        ctx.all_gather(&x, &mut y, 1)?;
        let next = (ctx.rank() + 1) % ctx.world();
        let prev = (ctx.rank() + ctx.world() - 1) % ctx.world();
        let mut z = Tensor::<f32>::zeros([2])?;
        let s = Tensor::full([2], r)?;
        let mut b = ctx.batch();
        b.send(&s, next);
        b.recv(&mut z, prev);
        b.run()?;
        let g = ctx.split(&[&[0, 1], &[2, 3]])?;
        let mut h = Tensor::full([1], r)?;
        ctx.group(&g).all_reduce(&mut h, ReduceOp::Sum)?;
        Ok(format!(
            "{:?} {:?} {:?} {:?} {:?}",
            t.to_vec(),
            big.to_vec()[0],
            y.to_vec(),
            z.to_vec(),
            h.to_vec()
        ))
    })?;
    for (r, v) in out.iter() {
        println!("rank {r}: {v}");
    }
    Ok(())
}
