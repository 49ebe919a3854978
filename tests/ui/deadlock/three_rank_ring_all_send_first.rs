use rankwise::prelude::*;

#[rankwise::program(world = 3)]
fn ring(ctx: &mut Ctx) -> Result<()> {
    let (rank, world) = (ctx.rank(), ctx.world());
    let x = ctx.full([1], rank as i32)?;
    let mut y = ctx.zeros::<i32>([1])?;
    ctx.send(&x, (rank + 1) % world)?;
    ctx.recv(&mut y, (rank + world - 1) % world)?;
    Ok(())
}

fn main() {}
