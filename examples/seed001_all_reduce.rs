//! Seed 001, "all_reduce": six ranks each hold `[2, 3] + 2·rank` (integers) and sum them; every
//! rank ends with `[42, 48]`.
//!
//! `cargo run --example seed001_all_reduce`, or across hosts:
//! `mpirun -np 6 --hostfile hosts target/debug/examples/seed001_all_reduce`.

#[path = "common/phases.rs"]
#[macro_use]
mod phases;

use phases::Phases;
use rankwise::prelude::*;

// ANCHOR: program
#[rankwise::program(world = 6)]
fn all_reduce_func(ctx: &mut Ctx) -> Result<Phases> {
    let rank = ctx.rank();
    let r = rank as i64;
    let mut tensor = ctx.tensor([2], vec![2 + r * 2, 3 + r * 2])?;
    let before = format!("initial tensor={tensor}, rank={rank}");
    // torch's default op is SUM.
    ctx.all_reduce(&mut tensor, ReduceOp::Sum)?;
    let after = format!("after all_reduce tensor={tensor}, rank={rank}");
    Ok(vec![vec![before], vec![after]])
}
// ANCHOR_END: program

port_main!(6, all_reduce_func);
