use rankwise::prelude::*;

#[rankwise::program(world = 2)]
fn sizes(ctx: &mut Ctx) -> Result<()> {
    if ctx.rank() == 0 {
        let x = ctx.full([4], 1.0f32)?;
        ctx.send(&x, 1)?;
    } else {
        let mut y = ctx.zeros::<f32>([3])?;
        ctx.recv(&mut y, 0)?;
    }
    Ok(())
}

fn main() {}
