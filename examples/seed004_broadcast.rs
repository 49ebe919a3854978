//! Seed 004, §9 "Broadcast": rank 0's `[5, 2]` ones replace every other rank's zeros.
//!
//! `cargo run --example seed004_broadcast`

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
    let shape = [5, 2];
    let (mut tensor, before) = if rank == 0 {
        let t = ctx.full(shape, 1.0f32)?;
        let line = format!("Rank {rank} before broadcast:\n{t}");
        (t, line)
    } else {
        let t = ctx.zeros::<f32>(shape)?;
        let line = format!("Rank {rank} before broadcast (initial zeros):\n{t}");
        (t, line)
    };
    ctx.broadcast(&mut tensor, 0)?;
    let after = format!("Rank {rank} after broadcast:\n{tensor}");
    Ok(vec![vec![before], vec![after]])
}
// ANCHOR_END: program

port_main!(4, example);
