use rankwise::prelude::*;

#[rankwise::program(world = 4)]
fn uneven(ctx: &mut Ctx) -> Result<()> {
    let input = ctx.full([6], 1.0f32)?;
    let mut output = ctx.zeros::<f32>([1])?;
    ctx.reduce_scatter(&input, &mut output, ReduceOp::Sum, 0)?;
    Ok(())
}

fn main() {}
