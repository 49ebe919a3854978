use rankwise::prelude::*;

#[rankwise::program(world = 2)]
fn one_too_many(ctx: &mut Ctx) -> Result<()> {
    let x = ctx.full([3], 0.5f64)?;
    let mut y = ctx.zeros::<f64>([3])?;
    if ctx.rank() == 0 {
        ctx.send(&x, 1)?;
        ctx.send(&x, 1)?;
    } else {
        ctx.recv(&mut y, 0)?;
    }
    Ok(())
}

fn main() {}
