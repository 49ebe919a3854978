//! Seed 000, §1.4: `reduce_scatter` with `Sum`. Each of four ranks holds eight copies of
//! `rank + 1`; afterwards each holds its two-element share of the sum, `[10., 10.]`.
//!
//! The seed passes `[input_tensor]` — a list of *one* tensor — where torch needs one tensor per
//! rank; its printed output is that of the call written here, which splits the one tensor into
//! four parts along dim 0. rankwise refuses the seed's spelling at compile time
//! (`tests/ui/shapes/seed000_reduce_scatter_list_of_one.rs`, RW006).
//!
//! `cargo run --example seed000_reduce_scatter`

#[path = "common/phases.rs"]
#[macro_use]
mod phases;

use phases::Phases;
use rankwise::prelude::*;

// ANCHOR: program
#[rankwise::program(world = 4)]
fn run_reduce_scatter(ctx: &mut Ctx) -> Result<Phases> {
    let rank = ctx.rank();
    let tensor_size = 2;
    let input_tensor = ctx.full([tensor_size * ctx.world()], rank as f32 + 1.0)?;
    let before = format!("Rank {rank} before reduce_scatter: {input_tensor}");
    let mut output_tensor = ctx.zeros::<f32>([tensor_size])?;
    ctx.reduce_scatter(&input_tensor, &mut output_tensor, ReduceOp::Sum, 0)?;
    let after = format!("Rank {rank} after reduce_scatter: {output_tensor}");
    Ok(vec![vec![before], vec![after]])
}
// ANCHOR_END: program

port_main!(4, run_reduce_scatter);
