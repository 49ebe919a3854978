use rankwise::prelude::*;

fn load() -> Vec<f32> {
    vec![1.0; 4]
}

// A bitwise reduction of a tensor whose element type only rustc knows: a float.
#[rankwise::program(world = 2)]
fn reduce(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.tensor([4], load())?;
    ctx.all_reduce(&mut t, ReduceOp::BitOr)?;
    Ok(())
}

fn main() {}
