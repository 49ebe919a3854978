use rankwise::prelude::*;

// Rank 0 stops sending after the first peer, so ranks 2 and 3 wait for a message that never
// comes. Before `break` was modelled, the macro counted three sends and accepted this.
#[rankwise::program(world = 4)]
fn fan_out(ctx: &mut Ctx) -> Result<()> {
    let x = ctx.full([2], 1.0f32)?;
    let mut y = ctx.zeros::<f32>([2])?;
    if ctx.rank() == 0 {
        for peer in 1..ctx.world() {
            if peer == 2 {
                break;
            }
            ctx.send(&x, peer)?;
        }
    } else {
        ctx.recv(&mut y, 0)?;
    }
    Ok(())
}

fn main() {}
