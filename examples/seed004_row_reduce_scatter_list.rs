//! Seed 004, §7.1 "Row reduce scatter" (`dist.reduce_scatter`): each rank's `[4, 5]` data (row `i` = `rank·10 + i`) as a list of `[1, 5]` rows; row `i`
//! of every rank, summed, lands on rank `i` (`reduce_scatter_list`).
//!
//! `cargo run --example seed004_row_reduce_scatter_list`

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
    let data = Tensor::from_fn([world_size, 5], |i| (rank * 10 + i[0]) as f32)?;
    let before = format!(
        "Rank {rank} original data (shape {:?}):\n{data}",
        data.shape()
    );
    let input_list: Vec<Tensor<f32>> = (0..world_size)
        .map(|i| ctx.full([1, 5], (rank * 10 + i) as f32))
        .collect::<Result<_>>()?;
    let mut output = ctx.zeros::<f32>([1, 5])?;
    ctx.reduce_scatter_list(&input_list, &mut output, ReduceOp::Sum)?;
    let after = format!(
        "Rank {rank} after reduce_scatter (sum), output shape {:?}:\n{output}",
        output.shape()
    );
    Ok(vec![vec![before], vec![after]])
}
// ANCHOR_END: program

port_main!(4, example);
