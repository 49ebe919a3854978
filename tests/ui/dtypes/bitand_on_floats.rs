use rankwise::prelude::*;

#[rankwise::program(world = 2)]
fn bits(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([4], 1.0f32)?;
    ctx.all_reduce(&mut t, ReduceOp::BitAnd)?;
    Ok(())
}

fn main() {}
