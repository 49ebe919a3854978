//! Seed 004, §4 "Reduce": `[1, 5]` rows of `rank` summed on rank 0. The seed calls the other ranks' tensors
//! "undefined" after the call; in rankwise they are left unchanged (documented), which is what
//! the seed printed.
//!
//! `cargo run --example seed004_reduce`

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
    let before = format!("Rank {rank} before reduce: {}", tolist(&tensor));
    ctx.reduce(&mut tensor, 0, ReduceOp::Sum)?;
    let after = if rank == 0 {
        format!("Rank {rank} after reduce (sum): {}", tolist(&tensor))
    } else {
        format!(
            "Rank {rank} after reduce (tensor content undefined): {}",
            tolist(&tensor)
        )
    };
    Ok(vec![vec![before], vec![after]])
}
// ANCHOR_END: program

port_main!(4, example);
