//! Seed 000, §1.2: `all_reduce` with `Sum`. Each of four ranks holds `[rank + 1]`; afterwards
//! every rank holds `[10.]`.
//!
//! `cargo run --example seed000_all_reduce`

#[path = "common/phases.rs"]
#[macro_use]
mod phases;

use phases::Phases;
use rankwise::prelude::*;

// ANCHOR: program
#[rankwise::program(world = 4)]
fn run_all_reduce(ctx: &mut Ctx) -> Result<Phases> {
    let rank = ctx.rank();
    let mut tensor = ctx.tensor([1], vec![rank as f32 + 1.0])?;
    let before = format!("Rank {rank} before all_reduce: {tensor}");
    ctx.all_reduce(&mut tensor, ReduceOp::Sum)?;
    let after = format!("Rank {rank} after all_reduce: {tensor}");
    Ok(vec![vec![before], vec![after]])
}
// ANCHOR_END: program

port_main!(4, run_all_reduce);
