use rankwise::prelude::*;

#[rankwise::program(world = 4)]
fn off_the_end(ctx: &mut Ctx) -> Result<()> {
    let x = ctx.full([1], 1u8)?;
    let mut y = ctx.zeros::<u8>([1])?;
    // A ring that forgot the `% world`: the last rank sends to rank 4 of a 4-rank world.
    let next = ctx.rank() + 1;
    let prev = (ctx.rank() + ctx.world() - 1) % ctx.world();
    let mut b = ctx.batch();
    b.send(&x, next);
    b.recv(&mut y, prev);
    b.run()?;
    Ok(())
}

fn main() {}
