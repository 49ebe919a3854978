//! Seed 004, §8.2 "Column alltoall": column `j` of each rank's `[5, 4]` tensor (`rank·10 + j`) goes to rank `j` (torch uses
//! lists of `[5, 1]` columns and concatenates them; rankwise exchanges along dim 1).
//!
//! `cargo run --example seed004_column_all_to_all`

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
    let local_tensor = Tensor::from_fn([5, world_size], |i| (rank * 10 + i[1]) as f32)?;
    let before = format!(
        "Rank {rank} local tensor (shape {:?}):\n{local_tensor}",
        local_tensor.shape()
    );
    let mut result = ctx.zeros::<f32>([5, world_size])?;
    ctx.all_to_all(&local_tensor, &mut result, 1)?;
    let after = format!(
        "Rank {rank} after column-wise all_to_all (shape {:?}):\n{result}",
        result.shape()
    );
    Ok(vec![vec![before], vec![after]])
}
// ANCHOR_END: program

port_main!(4, example);
