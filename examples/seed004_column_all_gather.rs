//! Seed 004, §3.2 "Column allgather": every rank's `[5, 2]` block gathered on every rank along the columns into `[5, 8]`.
//!
//! `cargo run --example seed004_column_all_gather`

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
    let cols_per_rank = 2;
    let tensor = Tensor::from_fn([5, cols_per_rank], |i| (rank * 10 + i[1]) as f32)?;
    let before = format!(
        "Rank {rank} local tensor shape {:?}:\n{tensor}",
        tensor.shape()
    );
    let mut gathered_tensor = ctx.zeros::<f32>([5, world_size * cols_per_rank])?;
    ctx.all_gather(&tensor, &mut gathered_tensor, 1)?;
    let after = format!(
        "Rank {rank} after column-wise all_gather, shape {:?}:\n{gathered_tensor}",
        gathered_tensor.shape()
    );
    Ok(vec![vec![before], vec![after]])
}
// ANCHOR_END: program

port_main!(4, example);
