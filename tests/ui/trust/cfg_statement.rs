use rankwise::prelude::*;

// Whether this barrier exists depends on the build's features, which the macro cannot know.
#[rankwise::program(world = 2)]
fn configured(ctx: &mut Ctx) -> Result<()> {
    #[cfg(test)]
    ctx.barrier()?;
    let _ = ctx.rank();
    Ok(())
}

fn main() {}
