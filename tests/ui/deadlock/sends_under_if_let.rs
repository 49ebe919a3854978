use rankwise::prelude::*;

// Every rank has a next one (a ring), so every rank sends first: the macro follows the
// `if let` into its branch and finds the cycle.
#[rankwise::program(world = 3)]
fn ring_sends_first(ctx: &mut Ctx) -> Result<()> {
    let (rank, world) = (ctx.rank(), ctx.world());
    let next = Some((rank + 1) % world);
    let x = ctx.full([2], 1.0f32)?;
    let mut y = ctx.zeros::<f32>([2])?;
    if let Some(n) = next {
        ctx.send(&x, n)?;
    }
    ctx.recv(&mut y, (rank + world - 1) % world)?;
    Ok(())
}

fn main() {}
