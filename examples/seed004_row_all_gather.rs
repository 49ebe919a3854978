//! Seed 004, §3.1 "Row allgather": every rank's `[1, 5]` row gathered on every rank into `[4, 5]`.
//!
//! `cargo run --example seed004_row_all_gather`

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
    let tensor_shard = ctx.full([1, 5], rank as f32)?;
    let mut gathered_tensor = ctx.zeros::<f32>([world_size, 5])?;
    ctx.all_gather(&tensor_shard, &mut gathered_tensor, 0)?;
    let shape = format!("rank {rank} after cat: {:?}", gathered_tensor.shape());
    let tensor = format!("Rank {rank} gathered tensor:\n {gathered_tensor}");
    Ok(vec![vec![shape], vec![tensor]])
}
// ANCHOR_END: program

port_main!(4, example);
