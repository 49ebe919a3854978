use rankwise::prelude::*;

// `peer` may change under a condition on data: the macro no longer knows it.
#[rankwise::program(world = 2)]
fn exchange(ctx: &mut Ctx) -> Result<()> {
    let x = ctx.full([2], 1.0f32)?;
    let mut peer = 1 - ctx.rank();
    if x.as_slice()?[0] > 10.0 {
        peer = ctx.rank();
    }
    let mut y = ctx.zeros::<f32>([2])?;
    let mut b = ctx.batch();
    b.send(&x, peer).recv(&mut y, peer);
    b.run()?;
    Ok(())
}

fn main() {}
