use rankwise::prelude::*;

// Shapes whose sizes overflow: a diagnostic naming the call, not an overflow in the macro.
#[rankwise::program(world = 2)]
fn huge(ctx: &mut Ctx) -> Result<()> {
    let big = ctx.zeros::<f32>([1 << 62])?;
    let mut out = ctx.zeros::<f32>([1 << 62])?;
    ctx.all_gather(&big, &mut out, 0)?;
    Ok(())
}

fn main() {}
