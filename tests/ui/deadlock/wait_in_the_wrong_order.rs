use rankwise::prelude::*;

// Posting the receive is fine; waiting for it before sending what the peer needs first is not.
#[rankwise::program(world = 2)]
fn exchange(ctx: &mut Ctx) -> Result<()> {
    let mine = ctx.full([4], ctx.rank() as f32)?;
    let mut theirs = ctx.zeros::<f32>([4])?;
    if ctx.rank() == 0 {
        let req = ctx.irecv(&mut theirs, 1)?;
        req.wait()?;
        ctx.send(&mine, 1)?;
    } else {
        ctx.recv(&mut theirs, 0)?;
        ctx.send(&mine, 0)?;
    }
    Ok(())
}

fn main() {}
