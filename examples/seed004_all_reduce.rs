//! Seed 004, §5 "All reduce": `[1, 5]` rows of `rank` summed on every rank.
//!
//! `cargo run --example seed004_all_reduce`

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
    let mut tensor = ctx.full([1, 5], rank as f32)?;
    let before = format!("Rank {rank} before all_reduce: {}", tolist(&tensor));
    ctx.all_reduce(&mut tensor, ReduceOp::Sum)?;
    let after = format!("Rank {rank} after all_reduce (sum): {}", tolist(&tensor));
    Ok(vec![vec![before], vec![after]])
}
// ANCHOR_END: program

port_main!(4, example);
