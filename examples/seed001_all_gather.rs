//! Seed 001, "all_gather": six ranks (two hosts × three NPUs in the seed) each draw a random
//! `[4]` tensor and gather everyone's into a list. The port uses the values the seed's run drew
//! (`torch.randn` is not reproducible across libraries), so it prints the seed's numbers.
//!
//! The seed prints `LOCAL_RANK` as `rank` (0–2 on each host); so does the port, from the global
//! rank and three ranks per host.
//!
//! `cargo run --example seed001_all_gather`, or across hosts:
//! `mpirun -np 6 --hostfile hosts target/debug/examples/seed001_all_gather`.

#[path = "common/phases.rs"]
#[macro_use]
mod phases;

use phases::{Phases, list};
use rankwise::prelude::*;

// ANCHOR: program
/// What `torch.randn(4)` gave each global rank in the seed's run.
const WEIGHTS: [[f32; 4]; 6] = [
    [0.1697, 1.1252, 1.9084, -0.1981],
    [-0.4507, -0.8248, 0.4962, -1.8013],
    [-0.3324, -0.7647, 0.4681, 1.1544],
    [-1.3327, 0.3076, -1.0683, -1.4375],
    [-0.9139, 0.4885, 0.1722, -0.1989],
    [0.5774, 1.4462, 0.1082, -1.3113],
];

/// Ranks per host in the seed's launch (`--nproc_per_node=3`).
const PER_HOST: usize = 3;

#[rankwise::program(world = 6)]
fn all_gather_func(ctx: &mut Ctx) -> Result<Phases> {
    let rank = ctx.rank();
    let word_size = ctx.world();
    let weight = ctx.tensor([4], WEIGHTS[rank].to_vec())?;
    let mut gather_list: Vec<Tensor<f32>> = (0..word_size)
        .map(|_| ctx.zeros_like(&weight))
        .collect::<Result<_>>()?;
    let before = format!(
        "weight={weight}, rank={},world_size={word_size}",
        rank % PER_HOST
    );
    ctx.all_gather_list(&weight, &mut gather_list)?;
    let after = format!("after gather={}", list(&gather_list));
    Ok(vec![vec![before], vec![after]])
}
// ANCHOR_END: program

port_main!(6, all_gather_func);
