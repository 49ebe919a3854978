//! Seed 004, §2.1 "Row Gather": each rank's `[1, 5]` row gathered on rank 0 into `[4, 5]` (torch gathers a list and
//! concatenates it along dim 0; rankwise gathers along dim 0 directly).
//!
//! `cargo run --example seed004_row_gather`

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
    let tensor = ctx.full([1, 5], rank as f32)?;
    let mut gathered_tensor = ctx.zeros::<f32>([world_size, 5])?;
    let out = if rank == 0 {
        Some(&mut gathered_tensor)
    } else {
        None
    };
    ctx.gather(&tensor, out, 0, 0)?;
    let lines = if rank == 0 {
        vec![
            format!(
                "Rank {rank} gathered tensor shape: {:?}",
                gathered_tensor.shape()
            ),
            format!("Gathered tensor:\n {gathered_tensor}"),
        ]
    } else {
        vec![format!(
            "Rank {rank} has sent its data, no local copy of gathered tensor."
        )]
    };
    Ok(vec![lines])
}
// ANCHOR_END: program

port_main!(4, example);
