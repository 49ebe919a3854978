use rankwise::prelude::*;

#[rankwise::program(world = 2)]
fn too_deep(ctx: &mut Ctx) -> Result<()> {
    let whole = ctx.full([2, 2], 1.0f32)?;
    let mut part = ctx.zeros::<f32>([2, 1])?;
    let root_input = if ctx.rank() == 0 { Some(&whole) } else { None };
    ctx.scatter(root_input, &mut part, 0, 2)?;
    Ok(())
}

fn main() {}
