use rankwise::prelude::*;

// The same through an iterator held in a variable and advanced by `while let`.
#[rankwise::program(world = 2)]
fn exchange(ctx: &mut Ctx) -> Result<()> {
    let r = ctx.rank();
    let t = ctx.full([2], 1.0f32)?;
    let mut u = ctx.zeros::<f32>([2])?;
    let mut peers = vec![1 - r; 2];
    let mut it = peers.iter_mut();
    while let Some(p) = it.next() {
        *p = 0;
    }

    let mut b = ctx.batch();
    b.send(&t, peers[0]);
    b.recv(&mut u, peers[1]);
    b.run()?;
    Ok(())
}
fn main() {}
