use rankwise::prelude::*;

// The peers start as a correct exchange, then a closure rewrites them through iter_mut: the macro must not check the old values.
#[rankwise::program(world = 2)]
fn exchange(ctx: &mut Ctx) -> Result<()> {
    let r = ctx.rank();
    let t = ctx.full([2], 1.0f32)?;
    let mut u = ctx.zeros::<f32>([2])?;
    let mut peers = vec![1 - r; 2];
    peers.iter_mut().for_each(|p| *p = 0);
    let mut b = ctx.batch();
    b.send(&t, peers[0]);
    b.recv(&mut u, peers[1]);
    b.run()?;
    Ok(())
}
fn main() {}
