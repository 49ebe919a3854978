use rankwise::prelude::*;

// The peers start as a correct exchange, then a loop rewrites them through `iter_mut`: every
// rank now sends to rank 0, which nobody pairs. The macro must not check the old values.
#[rankwise::program(world = 2)]
fn exchange(ctx: &mut Ctx) -> Result<()> {
    let r = ctx.rank();
    let t = ctx.full([2], 1.0f32)?;
    let mut u = ctx.zeros::<f32>([2])?;
    let mut peers = vec![1 - r; 2];
    for p in peers.iter_mut() {
        *p = 0;
    }
    let mut b = ctx.batch();
    b.send(&t, peers[0]);
    b.recv(&mut u, peers[1]);
    b.run()?;
    Ok(())
}

fn main() {}
