use rankwise::prelude::*;

// A ring at every world size up to 1024 is millions of calls: a clear error, not an exhausted
// machine.
#[rankwise::program(world in 1..=1024)]
fn ring(ctx: &mut Ctx) -> Result<()> {
    let x = ctx.full([4], 1.0f32)?;
    let mut y = ctx.zeros::<f32>([4])?;
    let (r, w) = (ctx.rank(), ctx.world());
    for _ in 0..2 * (w - 1) {
        let mut b = ctx.batch();
        b.send(&x, (r + 1) % w).recv(&mut y, (r + w - 1) % w);
        b.run()?;
    }
    Ok(())
}

fn main() {}
