use rankwise::prelude::*;

#[rankwise::program(world = 2)]
fn roots(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([3], 1u32)?;
    let root = ctx.rank();
    ctx.broadcast(&mut t, root)?;
    Ok(())
}

fn main() {}
