use rankwise::prelude::*;

// The guard's binding is hygienic: user code cannot reach it to drop it.
#[rankwise::program(world = 2)]
fn unguarded(ctx: &mut Ctx) -> Result<()> {
    drop(__rankwise_guard);
    ctx.barrier()?;
    Ok(())
}

fn main() {}
