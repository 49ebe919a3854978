use rankwise::prelude::*;

#[rankwise::program(world = 4)]
fn last_one(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    ctx.all_reduce(&mut t, ReduceOp::Sum)?;
    if ctx.rank() % 2 == 0 {
        ctx.all_reduce(&mut t, ReduceOp::Max)?;
    }
    Ok(())
}

fn main() {}
