use rankwise::prelude::*;

#[rankwise::program(world = 2)]
fn waiting(ctx: &mut Ctx) -> Result<()> {
    let mut y = ctx.zeros::<f32>([2])?;
    if ctx.rank() == 1 {
        ctx.recv(&mut y, 0)?;
    }
    Ok(())
}

fn main() {}
