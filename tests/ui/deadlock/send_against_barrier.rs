use rankwise::prelude::*;

#[rankwise::program(world = 2)]
fn crossed(ctx: &mut Ctx) -> Result<()> {
    let x = ctx.full([1], 1u8)?;
    let mut y = ctx.zeros::<u8>([1])?;
    if ctx.rank() == 0 {
        ctx.send(&x, 1)?;
        ctx.barrier()?;
    } else {
        ctx.barrier()?;
        ctx.recv(&mut y, 0)?;
    }
    Ok(())
}

fn main() {}
