use rankwise::prelude::*;

// Copies between the host and the rank's device keep what the macro knows of a tensor: its
// shape and element type flow through `to_host`, `ctx.to_device`, `try_clone` and `try_to_vec`.
#[rankwise::program(world in 2..=3)]
fn copies_keep_shapes(ctx: &mut Ctx) -> Result<Vec<f32>> {
    let (rank, world) = (ctx.rank(), ctx.world());
    let grad = ctx.full([4, 2], rank as f32)?;
    let host = grad.to_host()?;
    let mut back = ctx.to_device(&host)?;
    ctx.all_reduce(&mut back, ReduceOp::Sum)?;
    let mut rows = ctx.zeros::<f32>([host.shape()[0] * world, 2])?;
    ctx.all_gather(&back.try_clone()?, &mut rows, 0)?;
    let data = rows.try_to_vec()?;
    let again = ctx.tensor([rows.numel()], data)?;
    let mut sum = again.to_host()?;
    ctx.all_reduce(&mut sum, ReduceOp::Max)?;
    Ok(sum.to_vec())
}

fn main() {
    for world in 2..=3 {
        let got = spawn(world, copies_keep_shapes).unwrap();
        // Every row holds the sum of ranks, 0 + 1 + … + (world − 1).
        let total = (0..world).sum::<usize>() as f32;
        for v in got {
            assert_eq!(v, vec![total; 8 * world]);
        }
    }
}
