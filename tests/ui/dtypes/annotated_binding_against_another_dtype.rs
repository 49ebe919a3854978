use rankwise::prelude::*;

// The annotation decides the type of both assignments, so rank 0 contributes f64 to an
// all_reduce where rank 1 contributes f32.
#[rankwise::program(world = 2)]
fn annotated(ctx: &mut Ctx) -> Result<()> {
    let mut t: Tensor<f64>;
    let mut u = ctx.zeros::<f32>([2])?;
    if ctx.rank() == 0 {
        t = ctx.full([2], 1.0)?;
        ctx.all_reduce(&mut t, ReduceOp::Sum)?;
    } else {
        ctx.all_reduce(&mut u, ReduceOp::Sum)?;
    }
    Ok(())
}

fn main() {}
