//! Seed 002, "all_reduce and all_gather": every rank's `[10r, 10r + 1]` gathered into a
//! list, then summed.
//!
//! `cargo run --example seed002_all_reduce_all_gather`

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
    let tensor = ctx.tensor([2], vec![(rank * 10) as f32, (rank * 10 + 1) as f32])?;
    let mut gathered = vec![Tensor::<f32>::zeros([2])?; world_size];
    ctx.all_gather_list(&tensor, &mut gathered)?;
    let mut lines = Vec::new();
    if rank == 0 {
        lines.push("=== all_gather 结果 ===".to_string());
        lines.push(format!("原始张量 (rank 0): {tensor}"));
        lines.push("收集所有进程的张量:".to_string());
        for (i, t) in gathered.iter().enumerate() {
            lines.push(format!("rank {i} 的数据: {}", tolist(t)));
        }
    }
    let mut reduced_tensor = ctx.tensor([2], tensor.to_vec())?;
    if rank == 0 {
        lines.push(format!("before all_reduce: {reduced_tensor}"));
    }
    ctx.all_reduce(&mut reduced_tensor, ReduceOp::Sum)?;
    if rank == 0 {
        lines.push("=== all_reduce 结果 ===".to_string());
        lines.push(format!("原始张量 (rank 0): {tensor}"));
        lines.push(format!("归约后的张量 (所有 rank 的和): {reduced_tensor}"));
    }
    Ok(vec![lines])
}
// ANCHOR_END: program

port_main!(4, init_process);
