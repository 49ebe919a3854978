//! Seed 002, "new_group": the world split into two halves; each sums its ranks within
//! its group, then two `all_reduce(Max)` on the world give every rank both sums.
//!
//! `cargo run --example seed002_new_group`

#[path = "common/phases.rs"]
#[macro_use]
mod phases;

use phases::*;
use rankwise::prelude::*;

// ANCHOR: program
#[rankwise::program(world = 4)]
fn init_process(ctx: &mut Ctx) -> Result<Phases> {
    let rank = ctx.rank();
    let world_size = ctx.world();
    let group1_ranks: Vec<usize> = (0..world_size / 2).collect();
    let group2_ranks: Vec<usize> = (world_size / 2..world_size).collect();
    let mut group1_sum = ctx.zeros::<f32>([1])?;
    let mut group2_sum = ctx.zeros::<f32>([1])?;
    let group1 = ctx.new_group(&group1_ranks)?;
    let group2 = ctx.new_group(&group2_ranks)?;
    let mut tensor = ctx.full([1], rank as f32)?;
    if group1_ranks.contains(&rank) {
        ctx.group(&group1).all_reduce(&mut tensor, ReduceOp::Sum)?;
        group1_sum = tensor;
    } else {
        ctx.group(&group2).all_reduce(&mut tensor, ReduceOp::Sum)?;
        group2_sum = tensor;
    }
    // Every rank gets both groups' sums (Max: the other group's slot is still 0 here).
    ctx.all_reduce(&mut group1_sum, ReduceOp::Max)?;
    ctx.all_reduce(&mut group2_sum, ReduceOp::Max)?;
    let mut lines = Vec::new();
    if rank == 0 {
        lines.push("=============== 通信完成 ===============".to_string());
        lines.push(format!(
            "Group1 (ranks {group1_ranks:?}): 累加结果为 {:?}",
            group1_sum.to_vec()[0]
        ));
        lines.push(format!(
            "Group2 (ranks {group2_ranks:?}): 累加结果为 {:?}",
            group2_sum.to_vec()[0]
        ));
    }
    Ok(vec![lines])
}
// ANCHOR_END: program

port_main!(4, init_process);
