use rankwise::prelude::*;

// Assignments to a place a method lends: they write `peers`, which the macro must then forget
// (it once kept `peers` as it was, verified root 0 on both ranks, and rank 1 broadcast from 1).
#[rankwise::program(world = 2)]
fn first_mut(ctx: &mut Ctx) -> Result<()> {
    let mut peers = vec![0usize, 1];
    if ctx.rank() == 1 {
        *peers.first_mut().unwrap() = 1;
    }
    let mut t = ctx.full([2], 1.0f32)?;
    ctx.broadcast(&mut t, peers[0])?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn as_mut_slice(ctx: &mut Ctx) -> Result<()> {
    let mut peers = vec![0usize, 1];
    if ctx.rank() == 1 {
        peers.as_mut_slice()[0] = 1;
    }
    let mut t = ctx.full([2], 1.0f32)?;
    ctx.broadcast(&mut t, peers[0])?;
    Ok(())
}

fn main() {}
