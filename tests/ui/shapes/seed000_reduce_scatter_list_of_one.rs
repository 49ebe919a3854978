use rankwise::prelude::*;

// Seed 000's reduce_scatter as written: `dist.reduce_scatter(output_tensor, [input_tensor])` at
// world 4 — a list of one tensor where torch needs one per rank.
#[rankwise::program(world = 4)]
fn run_reduce_scatter(ctx: &mut Ctx) -> Result<()> {
    let rank = ctx.rank();
    let input_tensor = ctx.full([8], rank as f32 + 1.0)?;
    let mut output_tensor = ctx.zeros::<f32>([2])?;
    ctx.reduce_scatter_list(&[input_tensor], &mut output_tensor, ReduceOp::Sum)?;
    Ok(())
}

fn main() {}
