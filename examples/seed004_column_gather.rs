//! Seed 004, §2.2 "Column Gather": each rank's `[5, 2]` block (`rank·10 + column`) gathered on rank 0 along the columns
//! into `[5, 8]`.
//!
//! `cargo run --example seed004_column_gather`

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
    let local_tensor = Tensor::from_fn([5, 2], |i| (rank * 10 + i[1]) as f32)?;
    let before = format!(
        "Rank {rank} local tensor (shape {:?}):\n{local_tensor}",
        local_tensor.shape()
    );
    let mut gathered = ctx.zeros::<f32>([5, 2 * world_size])?;
    let out = if rank == 0 { Some(&mut gathered) } else { None };
    ctx.gather(&local_tensor, out, 0, 1)?;
    let after = if rank == 0 {
        format!(
            "\nRank 0 final gathered tensor (shape {:?}):\n{gathered}",
            gathered.shape()
        )
    } else {
        format!("Rank {rank} has sent its data, no local copy of gathered tensor.\n")
    };
    Ok(vec![vec![before], vec![after]])
}
// ANCHOR_END: program

port_main!(4, example);
