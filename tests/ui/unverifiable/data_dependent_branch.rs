use rankwise::prelude::*;

#[rankwise::program(world = 2)]
fn data_decides(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([1], 1.0f32)?;
    if t.to_vec()[0] > 0.5 {
        ctx.all_reduce(&mut t, ReduceOp::Sum)?;
    }
    Ok(())
}

fn main() {}
