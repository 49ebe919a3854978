use rankwise::prelude::*;

// Rank 0 calls all_reduce then broadcast, rank 1 the other way round: a mismatch at the first
// step, not a skipped call.
#[rankwise::program(world = 2)]
fn swapped(ctx: &mut Ctx) -> Result<()> {
    let mut a = ctx.full([2], 1.0f32)?;
    let mut b = ctx.full([2], 2.0f32)?;
    if ctx.rank() == 0 {
        ctx.all_reduce(&mut a, ReduceOp::Sum)?;
        ctx.broadcast(&mut b, 0)?;
    } else {
        ctx.broadcast(&mut b, 0)?;
        ctx.all_reduce(&mut a, ReduceOp::Sum)?;
    }
    Ok(())
}

fn main() {}
