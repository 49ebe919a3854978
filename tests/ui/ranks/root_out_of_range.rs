use rankwise::prelude::*;

#[rankwise::program(world = 2)]
fn bad_root(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([1], 1.0f32)?;
    ctx.broadcast(&mut t, 2)?;
    Ok(())
}

fn main() {}
