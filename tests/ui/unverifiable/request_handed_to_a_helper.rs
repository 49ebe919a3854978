use rankwise::prelude::*;

fn finish(req: Request<'_>) -> Result<()> {
    req.wait()
}

// Where the helper waits is where the rank blocks: the macro cannot see it.
#[rankwise::program(world = 2)]
fn exchange(ctx: &mut Ctx) -> Result<()> {
    let mine = ctx.full([4], ctx.rank() as f32)?;
    let mut theirs = ctx.zeros::<f32>([4])?;
    let peer = 1 - ctx.rank();
    let req = ctx.isend(&mine, peer)?;
    ctx.recv(&mut theirs, peer)?;
    finish(req)?;
    Ok(())
}

fn main() {}
