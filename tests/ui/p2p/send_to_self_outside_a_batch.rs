use rankwise::prelude::*;

#[rankwise::program(world = 2)]
fn to_self(ctx: &mut Ctx) -> Result<()> {
    let x = ctx.full([1], 1.0f32)?;
    let me = ctx.rank();
    ctx.send(&x, me)?;
    Ok(())
}

fn main() {}
