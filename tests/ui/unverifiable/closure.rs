use rankwise::prelude::*;

#[rankwise::program(world = 2)]
fn in_a_closure(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([1], 1.0f32)?;
    let mut sum = |c: &mut Ctx| c.all_reduce(&mut t, ReduceOp::Sum);
    sum(ctx)?;
    Ok(())
}

fn main() {}
