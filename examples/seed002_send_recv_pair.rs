//! Seed 002, "send and recv", the corrected exchange: rank 0 sends, then receives; rank 1
//! receives first, then sends. The seed's wrong version, where both send first, deadlocks:
//! it is `tests/ui/deadlock/both_ranks_send_first.rs` (RW001 at compile time).
//!
//! `cargo run --example seed002_send_recv_pair`

#[path = "common/phases.rs"]
#[macro_use]
mod phases;

use phases::*;
use rankwise::prelude::*;

// ANCHOR: program
#[rankwise::program(world = 2)]
fn init_process(ctx: &mut Ctx) -> Result<Phases> {
    let rank = ctx.rank();
    let mut tensor1 = ctx.full([2], 1.0f32)?;
    let mut tensor2 = ctx.full([2], 2.0f32)?;
    if rank == 0 {
        ctx.send(&tensor1, 1)?;
        ctx.recv(&mut tensor2, 1)?;
    } else {
        ctx.recv(&mut tensor1, 0)?; // receive first
        ctx.send(&tensor2, 0)?; // then send
    }
    Ok(vec![vec![format!(
        "Rank {rank}: tensor1={tensor1}, tensor2={tensor2}"
    )]])
}
// ANCHOR_END: program

port_main!(2, init_process);
