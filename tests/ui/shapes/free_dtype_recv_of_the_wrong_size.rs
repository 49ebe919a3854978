use rankwise::prelude::*;

fn load() -> Vec<f32> {
    vec![1.0; 4]
}

// The element type is rustc's to know; the sizes are the macro's, and they differ.
#[rankwise::program(world = 2)]
fn exchange(ctx: &mut Ctx) -> Result<()> {
    if ctx.rank() == 0 {
        let t = ctx.tensor([4], load())?;
        ctx.send(&t, 1)?;
    } else {
        let mut t = ctx.tensor([3], load())?;
        ctx.recv(&mut t, 0)?;
    }
    Ok(())
}

fn main() {}
