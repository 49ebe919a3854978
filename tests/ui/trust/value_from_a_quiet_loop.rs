use rankwise::prelude::*;

// `next` is computed in a loop that does not communicate; the loop is run, so the macro sees
// the value it really has (this rank itself) and reports the blocking send to self.
#[rankwise::program(world = 3)]
fn ring(ctx: &mut Ctx) -> Result<()> {
    let x = ctx.full([2], 1.0f32)?;
    let mut next = (ctx.rank() + 1) % ctx.world();
    for candidate in 0..ctx.world() {
        if candidate == ctx.rank() {
            next = candidate;
        }
    }
    ctx.send(&x, next)?;
    Ok(())
}

fn main() {}
