use rankwise::prelude::*;

#[rankwise::program(world = 2)]
fn dtypes(ctx: &mut Ctx) -> Result<()> {
    if ctx.rank() == 0 {
        let mut t = ctx.zeros::<f32>([4])?;
        ctx.all_reduce(&mut t, ReduceOp::Sum)?;
    } else {
        let mut t = ctx.zeros::<f64>([4])?;
        ctx.all_reduce(&mut t, ReduceOp::Sum)?;
    }
    Ok(())
}

fn main() {}
