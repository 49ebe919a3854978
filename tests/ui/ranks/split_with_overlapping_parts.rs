use rankwise::prelude::*;

// Rank 1 is in both parts: the runtime refuses this split, so the macro must too.
#[rankwise::program(world = 4)]
fn halves(ctx: &mut Ctx) -> Result<()> {
    let g = ctx.split(&[&[0, 1], &[1, 2, 3]])?;
    let mut t = ctx.full([1], 1.0f32)?;
    ctx.group(&g).all_reduce(&mut t, ReduceOp::Sum)?;
    Ok(())
}

fn main() {}
