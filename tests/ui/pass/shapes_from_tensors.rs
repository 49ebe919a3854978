use rankwise::prelude::*;

// Outputs sized from inputs, as torch users write them: `t.shape()[i]`, `numel()`, `ndim()`,
// `shape().to_vec()` and `zeros_like`.
#[rankwise::program(world in 2..=4)]
fn sized_from_inputs(ctx: &mut Ctx) -> Result<Vec<f32>> {
    let (rank, world) = (ctx.rank(), ctx.world());
    let local = ctx.full([2, 3], rank as f32)?;
    // all_gather along rows: the output has `world` times the input's rows.
    let mut rows = ctx.zeros::<f32>([local.shape()[0] * world, local.shape()[1]])?;
    ctx.all_gather(&local, &mut rows, 0)?;
    // along columns, from a copy of the shape
    let mut shape = local.shape().to_vec();
    shape[1] *= world;
    let mut cols = ctx.zeros::<f32>(shape)?;
    ctx.all_gather(&local, &mut cols, 1)?;
    // reduce_scatter back to one block per rank, sized from the gathered tensor
    let mut mine = ctx.zeros::<f32>([rows.shape()[0] / world, rows.shape()[1]])?;
    ctx.reduce_scatter(&rows, &mut mine, ReduceOp::Sum, 0)?;
    // a flat buffer of `numel` elements and a receive buffer like the one sent
    let mut flat = ctx.zeros::<f32>([local.numel() * local.ndim()])?;
    ctx.all_reduce(&mut flat, ReduceOp::Sum)?;
    let mut got = ctx.zeros_like(&local)?;
    let mut batch = ctx.batch();
    batch.send(&local, (rank + 1) % world);
    batch.recv(&mut got, (rank + world - 1) % world);
    batch.run()?;
    let mut out = mine.to_vec();
    out.extend(got.to_vec());
    out.push(cols.to_vec()[5]);
    Ok(out)
}

fn main() {
    for world in 2..=4 {
        let got = spawn(world, sized_from_inputs).unwrap();
        for (r, v) in got.iter().enumerate() {
            // Block r of the reduce_scatter holds rank r's rows summed over `world` ranks.
            assert_eq!(v[..6], [r as f32 * world as f32; 6]);
            // From the previous rank.
            assert_eq!(v[6..12], [((r + world - 1) % world) as f32; 6]);
            // Row 0 of the column gather: [0,0,0, 1,1,1, ...]; element 5 is rank 1's.
            assert_eq!(v[12], 1.0);
        }
    }
}
