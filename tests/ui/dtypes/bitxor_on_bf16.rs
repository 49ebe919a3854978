use rankwise::prelude::*;

#[rankwise::program(world = 2)]
fn bits(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.zeros::<rankwise::bf16>([4])?;
    ctx.reduce(&mut t, 0, ReduceOp::BitXor)?;
    Ok(())
}

fn main() {}
