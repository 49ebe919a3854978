use rankwise::prelude::*;

#[rankwise::program(world = 4)]
fn skipped(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    if ctx.rank() == 0 {
        ctx.all_reduce(&mut t, ReduceOp::Sum)?;
    }
    ctx.barrier()?;
    Ok(())
}

fn main() {}
