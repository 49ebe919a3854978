use rankwise::prelude::*;

// `1.0` with nothing else to decide its type is an f64 (rustc's default), so the receive of
// f32 does not match — the one place the literal's type is really the default.
#[rankwise::program(world = 2)]
fn default_float(ctx: &mut Ctx) -> Result<()> {
    if ctx.rank() == 0 {
        let x = ctx.full([3], 1.0)?;
        ctx.send(&x, 1)?;
    } else {
        let mut y = ctx.zeros::<f32>([3])?;
        ctx.recv(&mut y, 0)?;
    }
    Ok(())
}

fn main() {}
