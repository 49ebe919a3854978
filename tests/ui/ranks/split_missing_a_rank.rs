use rankwise::prelude::*;

// Rank 3 is in no part: the runtime refuses this split, so the macro must too.
#[rankwise::program(world in [2, 4])]
fn halves(ctx: &mut Ctx) -> Result<()> {
    let g = ctx.split(&[&[0], &[1, 2]])?;
    let mut t = ctx.full([1], 1.0f32)?;
    ctx.group(&g).all_reduce(&mut t, ReduceOp::Sum)?;
    Ok(())
}

fn main() {}
