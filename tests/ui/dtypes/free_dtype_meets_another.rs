use rankwise::prelude::*;

// The macro cannot see `load`'s element type; rustc can, and the receive that meets the send
// holds another one.
fn load() -> Vec<f64> {
    vec![1.0; 4]
}

#[rankwise::program(world = 2)]
fn exchange(ctx: &mut Ctx) -> Result<()> {
    if ctx.rank() == 0 {
        let t = ctx.tensor([4], load())?;
        ctx.send(&t, 1)?;
    } else {
        let mut t = ctx.zeros::<f32>([4])?;
        ctx.recv(&mut t, 0)?;
    }
    Ok(())
}

fn main() {}
