use rankwise::prelude::*;

#[rankwise::program(world = 2)]
fn lonely(ctx: &mut Ctx) -> Result<()> {
    let x = ctx.full([3], 0.5f64)?;
    if ctx.rank() == 0 {
        ctx.send(&x, 1)?;
    }
    Ok(())
}

fn main() {}
