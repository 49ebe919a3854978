//! Seed 004, §7.2 "Row reduce scatter" (`reduce_scatter_tensor`): the same with one `[4, 5]` input split along dim 0.
//!
//! `cargo run --example seed004_row_reduce_scatter`

#[path = "common/phases.rs"]
#[macro_use]
mod phases;

use phases::*;
use rankwise::prelude::*;

// ANCHOR: program
#[rankwise::program(world = 4)]
fn example(ctx: &mut Ctx) -> Result<Phases> {
    let rank = ctx.rank();
    let world_size = ctx.world();
    let input_tensor = Tensor::from_fn([world_size, 5], |i| (rank * 10 + i[0]) as f32)?;
    let before = format!(
        "Rank {rank} input_tensor (shape {:?}):\n{input_tensor}",
        input_tensor.shape()
    );
    let mut output = ctx.zeros::<f32>([1, 5])?;
    ctx.reduce_scatter(&input_tensor, &mut output, ReduceOp::Sum, 0)?;
    let after = format!(
        "Rank {rank} after reduce_scatter_tensor (sum), output shape {:?}:\n{output}",
        output.shape()
    );
    Ok(vec![vec![before], vec![after]])
}
// ANCHOR_END: program

port_main!(4, example);
