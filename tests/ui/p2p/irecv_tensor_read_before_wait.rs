use rankwise::prelude::*;

// A posted receive's tensor is written at `wait()`: reading it before is a borrow error.
#[rankwise::program(world = 2)]
fn exchange(ctx: &mut Ctx) -> Result<Vec<f32>> {
    let mine = ctx.full([4], ctx.rank() as f32)?;
    let mut theirs = ctx.zeros::<f32>([4])?;
    let peer = 1 - ctx.rank();
    let req = ctx.irecv(&mut theirs, peer)?;
    let early = theirs.to_vec();
    ctx.send(&mine, peer)?;
    req.wait()?;
    Ok(early)
}

fn main() {}
