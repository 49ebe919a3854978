use rankwise::prelude::*;

#[rankwise::program(world = 4)]
fn twice(ctx: &mut Ctx) -> Result<()> {
    let g = ctx.new_group([1, 1, 2])?;
    let mut t = ctx.full([1], 1.0f32)?;
    if g.contains(ctx.rank()) {
        ctx.group(&g).all_reduce(&mut t, ReduceOp::Sum)?;
    }
    Ok(())
}

fn main() {}
