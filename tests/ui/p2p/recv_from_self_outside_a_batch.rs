use rankwise::prelude::*;

#[rankwise::program(world = 2)]
fn from_self(ctx: &mut Ctx) -> Result<()> {
    let mut y = ctx.zeros::<f32>([1])?;
    let me = ctx.rank();
    ctx.recv(&mut y, me)?;
    Ok(())
}

fn main() {}
