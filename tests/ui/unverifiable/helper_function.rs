use rankwise::prelude::*;

fn sum(ctx: &mut Ctx, t: &mut Tensor<f32>) -> Result<()> {
    ctx.all_reduce(t, ReduceOp::Sum)
}

#[rankwise::program(world = 2)]
fn with_helper(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([1], 1.0f32)?;
    sum(ctx, &mut t)?;
    Ok(())
}

fn main() {}
