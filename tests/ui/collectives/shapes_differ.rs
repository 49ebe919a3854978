use rankwise::prelude::*;

#[rankwise::program(world = 3)]
fn shapes(ctx: &mut Ctx) -> Result<()> {
    let n = 2 + ctx.rank() / 2;
    let mut t = ctx.zeros::<f64>([n])?;
    ctx.all_reduce(&mut t, ReduceOp::Sum)?;
    Ok(())
}

fn main() {}
