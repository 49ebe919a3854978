use rankwise::prelude::*;

#[rankwise::program(world = 4)]
fn columns(ctx: &mut Ctx) -> Result<()> {
    let local = ctx.full([5, 2], ctx.rank() as f32)?;
    let mut gathered = ctx.zeros::<f32>([5, 6])?;
    ctx.all_gather(&local, &mut gathered, 1)?;
    Ok(())
}

fn main() {}
