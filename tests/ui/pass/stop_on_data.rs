use rankwise::prelude::*;

// Stopping on data (a loss, a convergence test): the step is checked, the loop that decides
// when to stop is not. Every rank computes the same loss from the all_reduce, so every rank
// stops after the same step; were they to disagree, the runtime's checks would report the
// rank left behind instead of hanging.
#[rankwise::program(world in [2, 4])]
fn step(ctx: &mut Ctx, epoch: usize) -> Result<f32> {
    let mut grad = ctx.full([4], (ctx.rank() + epoch) as f32)?;
    ctx.all_reduce(&mut grad, ReduceOp::Sum)?;
    Ok(grad.to_vec().iter().sum())
}

fn train(ctx: &mut Ctx) -> Result<(usize, f32)> {
    let mut loss = 0.0;
    for epoch in 0..10 {
        loss = step(ctx, epoch)?;
        if loss > 40.0 {
            return Ok((epoch, loss));
        }
    }
    Ok((10, loss))
}

fn main() {
    for world in [2, 4usize] {
        // Epoch e's loss: 4 elements of the sum over ranks of (rank + e).
        let loss = |e: usize| (4 * (0..world).map(|r| r + e).sum::<usize>()) as f32;
        let stop = (0..10).find(|&e| loss(e) > 40.0).unwrap();
        for (r, got) in spawn(world, train).unwrap().into_iter().enumerate() {
            assert_eq!(got, (stop, loss(stop)), "world {world} rank {r}");
        }
    }
}
