use rankwise::prelude::*;

// A rank whose data says so returns early, skipping the all_reduce the others make.
#[rankwise::program(world = 2)]
fn maybe_skip(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], ctx.rank() as f32)?;
    if t.as_slice()?[0] > 0.5 {
        return Ok(());
    }
    ctx.all_reduce(&mut t, ReduceOp::Sum)?;
    Ok(())
}

fn main() {}
