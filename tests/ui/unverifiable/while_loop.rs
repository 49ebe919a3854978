use rankwise::prelude::*;

#[rankwise::program(world = 4)]
fn doubling(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([1], 1.0f32)?;
    let mut k = 1;
    while k < ctx.world() {
        ctx.all_reduce(&mut t, ReduceOp::Sum)?;
        k *= 2;
    }
    Ok(())
}

fn main() {}
