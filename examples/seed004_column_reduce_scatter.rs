//! Seed 004, §7.3 "Column reduce scatter": each rank's `[5, 4]` data (column `j` = `rank·10 + j`); column `j` of every rank,
//! summed, lands on rank `j` (torch splits into a list of `[5, 1]` columns; rankwise splits dim 1).
//!
//! `cargo run --example seed004_column_reduce_scatter`

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
    let data = Tensor::from_fn([5, world_size], |i| (rank * 10 + i[1]) as f32)?;
    let before = format!(
        "Rank {rank} original data (shape {:?}):\n{data}",
        data.shape()
    );
    let mut output = ctx.zeros::<f32>([5, 1])?;
    ctx.reduce_scatter(&data, &mut output, ReduceOp::Sum, 1)?;
    let after = format!(
        "Rank {rank} after reduce_scatter (sum), output shape {:?}:\n{output}",
        output.shape()
    );
    Ok(vec![vec![before], vec![after]])
}
// ANCHOR_END: program

port_main!(4, example);
