//! Seed 004, §5, with a second dimension: `[2, 5]` tensors of `rank` summed on every rank.
//!
//! `cargo run --example seed004_all_reduce_2d`

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
    let _ = world_size;
    let mut tensor = ctx.full([2, 5], rank as f32)?;
    let before = format!("Rank {rank} before all_reduce:\n{tensor}");
    ctx.all_reduce(&mut tensor, ReduceOp::Sum)?;
    let after = format!("Rank {rank} after all_reduce (sum):\n{tensor}");
    Ok(vec![vec![before], vec![after]])
}
// ANCHOR_END: program

port_main!(4, example);
