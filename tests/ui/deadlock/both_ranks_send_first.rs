use rankwise::prelude::*;

// The seed's classic mistake: both ranks send first, and a blocking send waits for its recv.
#[rankwise::program(world = 2)]
fn exchange(ctx: &mut Ctx) -> Result<()> {
    let mine = ctx.full([4], ctx.rank() as f32)?;
    let mut theirs = ctx.zeros::<f32>([4])?;
    let peer = 1 - ctx.rank();
    ctx.send(&mine, peer)?;
    ctx.recv(&mut theirs, peer)?;
    Ok(())
}

fn main() {}
