use rankwise::prelude::*;

fn sum(ctx: &mut Ctx, t: &mut Tensor<f32>) -> Result<()> {
    ctx.all_reduce(t, ReduceOp::Sum)
}

// The context reaches the helper through a reborrow held in another variable.
#[rankwise::program(world = 2)]
fn via_reborrow(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([1], 1.0f32)?;
    let c = &mut *ctx;
    sum(c, &mut t)?;
    Ok(())
}

fn main() {}
