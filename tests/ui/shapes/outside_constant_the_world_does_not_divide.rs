use rankwise::prelude::*;

const CHUNK: usize = 3;

// The macro cannot see CHUNK's value, so the split becomes a `const` assertion that rustc
// evaluates: 2 * 3 = 6 elements do not split into 4 equal parts.
#[rankwise::program(world = 4)]
fn split(ctx: &mut Ctx) -> Result<()> {
    let input = ctx.full([CHUNK * 2], 1.0f32)?;
    let mut output = ctx.zeros::<f32>([CHUNK * 2 / 4])?;
    ctx.reduce_scatter(&input, &mut output, ReduceOp::Sum, 0)?;
    Ok(())
}

fn main() {}
