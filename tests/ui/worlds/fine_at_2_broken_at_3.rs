use rankwise::prelude::*;

#[rankwise::program(world in [2, 3])]
fn halves(ctx: &mut Ctx) -> Result<()> {
    let input = ctx.full([4, 3], 1.0f32)?;
    let mut output = ctx.zeros::<f32>([2, 3])?;
    ctx.reduce_scatter(&input, &mut output, ReduceOp::Sum, 0)?;
    Ok(())
}

fn main() {}
