//! Seed 004, §8.1 "Row alltoall" (`all_to_all_single`): row `dst` of each rank's `[4, 2]` send tensor (`rank·10 + dst`) goes to rank `dst`.
//!
//! `cargo run --example seed004_row_all_to_all`

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
    let element_size = 2;
    let send_tensor = Tensor::from_fn([world_size, element_size], |i| (rank * 10 + i[0]) as f32)?;
    let before = format!("Rank {rank} send_tensor (before alltoall):\n{send_tensor}");
    let mut recv_tensor = ctx.zeros::<f32>([world_size, element_size])?;
    ctx.all_to_all(&send_tensor, &mut recv_tensor, 0)?;
    let after = format!("\nRank {rank} recv_tensor (after alltoall):\n{recv_tensor}");
    Ok(vec![vec![before], vec![after]])
}
// ANCHOR_END: program

port_main!(4, example);
