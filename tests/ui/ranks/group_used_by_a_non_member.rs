use rankwise::prelude::*;

#[rankwise::program(world = 4)]
fn outsider(ctx: &mut Ctx) -> Result<()> {
    let evens = ctx.new_group([0, 2])?;
    let mut t = ctx.full([1], 1.0f32)?;
    ctx.group(&evens).all_reduce(&mut t, ReduceOp::Sum)?;
    Ok(())
}

fn main() {}
