use rankwise::prelude::*;

#[rankwise::program(world = 4)]
fn disagree(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2, 5], ctx.rank() as f32)?;
    if ctx.rank() == 2 {
        ctx.broadcast(&mut t, 0)?;
    } else {
        ctx.all_reduce(&mut t, ReduceOp::Sum)?;
    }
    Ok(())
}

fn main() {}
