use rankwise::prelude::*;

#[rankwise::program(world = 2)]
fn too_deep(ctx: &mut Ctx) -> Result<()> {
    let x = ctx.full([4], 1.0f32)?;
    let mut y = ctx.zeros::<f32>([8])?;
    ctx.all_gather(&x, &mut y, 1)?;
    Ok(())
}

fn main() {}
