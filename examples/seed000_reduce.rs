//! Seed 000, §1.3: `reduce` to root 0 with `Sum`. The root ends with `[10.]`; the other ranks'
//! tensors are unchanged.
//!
//! `cargo run --example seed000_reduce`

#[path = "common/phases.rs"]
#[macro_use]
mod phases;

use phases::Phases;
use rankwise::prelude::*;

// ANCHOR: program
#[rankwise::program(world = 4)]
fn run_reduce(ctx: &mut Ctx) -> Result<Phases> {
    let rank = ctx.rank();
    let mut tensor = ctx.tensor([1], vec![rank as f32 + 1.0])?;
    let before = format!("Rank {rank} before reduce: {tensor}");
    let root_rank = 0;
    // The seed calls `reduce` in both branches of its `if`; every rank makes the same call.
    let mut after = Vec::new();
    if rank == root_rank {
        after.push(format!("Rank {rank} is the root."));
        ctx.reduce(&mut tensor, root_rank, ReduceOp::Sum)?;
        after.push(format!("Rank {rank} after reduce: {tensor}"));
    } else {
        ctx.reduce(&mut tensor, root_rank, ReduceOp::Sum)?;
        after.push(format!("Rank {rank} after reduce: (unchanged) {tensor}"));
    }
    Ok(vec![vec![before], after])
}
// ANCHOR_END: program

port_main!(4, run_reduce);
