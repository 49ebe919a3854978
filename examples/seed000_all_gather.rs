//! Seed 000, §1.1: `all_gather` into a list. Each of four ranks holds `[rank + 1]`; afterwards
//! every rank holds the list of all four.
//!
//! `cargo run --example seed000_all_gather`

#[path = "common/phases.rs"]
#[macro_use]
mod phases;

use phases::{Phases, list};
use rankwise::prelude::*;

// ANCHOR: program
#[rankwise::program(world = 4)]
fn run_all_gather(ctx: &mut Ctx) -> Result<Phases> {
    let rank = ctx.rank();
    let tensor = ctx.tensor([1], vec![rank as f32 + 1.0])?;
    let before = format!("Rank {rank} before all_gather: {tensor}");
    // torch: gather_list = [torch.zeros_like(tensor) for _ in range(world_size)]
    let mut gather_list: Vec<Tensor<f32>> = (0..ctx.world())
        .map(|_| ctx.zeros_like(&tensor))
        .collect::<Result<_>>()?;
    ctx.all_gather_list(&tensor, &mut gather_list)?;
    let after = format!("Rank {rank} after all_gather: {}", list(&gather_list));
    Ok(vec![vec![before], vec![after]])
}
// ANCHOR_END: program

port_main!(4, run_all_gather);
