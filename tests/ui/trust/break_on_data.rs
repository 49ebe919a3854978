use rankwise::prelude::*;

// A loop left on a run-time condition: later iterations' barriers may not happen.
#[rankwise::program(world = 2)]
fn rounds(ctx: &mut Ctx) -> Result<()> {
    let t = ctx.full([4], ctx.rank() as f32)?;
    for i in 0..4 {
        if t.as_slice()?[i] > 2.0 {
            break;
        }
        ctx.barrier()?;
    }
    Ok(())
}

fn main() {}
