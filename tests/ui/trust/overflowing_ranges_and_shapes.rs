use rankwise::prelude::*;

// Arithmetic at the edges of the integer types: diagnostics, never a crashed compiler.
#[rankwise::program(world = 2)]
fn edges(ctx: &mut Ctx) -> Result<()> {
    for _ in 0..=i128::MAX {
        ctx.barrier()?;
    }
    Ok(())
}

fn main() {}
