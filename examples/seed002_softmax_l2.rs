//! Seed 002, "all_reduce 实现 softmax": a weighted sum, a softmax and an L2 normalisation
//! across ranks, each from `all_reduce`s of `Sum` and `Max` and local arithmetic. As in the seed,
//! the softmax and the norm are taken per position across the ranks' tensors.
//!
//! `cargo run --example seed002_softmax_l2`

#[path = "common/phases.rs"]
#[macro_use]
mod phases;

use phases::*;
use rankwise::prelude::*;

// ANCHOR: program
#[rankwise::program(world = 4)]
fn init_process(ctx: &mut Ctx) -> Result<Phases> {
    let rank = ctx.rank();
    let r = rank as f32;
    let x: Vec<f32> = vec![r + 1.0, r + 2.0, r + 3.0];
    let tensor = ctx.tensor([3], x.clone())?;
    let mut lines = Vec::new();
    if rank == 0 {
        lines.push(format!("初始张量 (rank {rank}): {tensor}"));
    }
    // 1. A weighted sum.
    let weights = [0.3f32, 0.3, 0.4];
    let weighted_data: Vec<f32> = x.iter().zip(weights).map(|(x, w)| x * w).collect();
    let mut weighted = ctx.tensor([3], weighted_data)?;
    ctx.all_reduce(&mut weighted, ReduceOp::Sum)?;
    if rank == 0 {
        lines.push("=== 加权和结果 ===".to_string());
        lines.push(format!("加权后的张量: {weighted}"));
    }
    // 2. Softmax: the maximum, exp(x - max), their sum, the quotient.
    let mut max_tensor = ctx.tensor([3], x.clone())?;
    ctx.all_reduce(&mut max_tensor, ReduceOp::Max)?;
    let exp: Vec<f32> = x
        .iter()
        .zip(max_tensor.to_vec())
        .map(|(x, m)| (x - m).exp())
        .collect();
    let mut sum_exp = ctx.tensor([3], exp.clone())?;
    ctx.all_reduce(&mut sum_exp, ReduceOp::Sum)?;
    let softmax: Vec<f32> = exp
        .iter()
        .zip(sum_exp.to_vec())
        .map(|(e, s)| e / s)
        .collect();
    let softmax_result = ctx.tensor([3], softmax)?;
    if rank == 0 {
        lines.push(format!("max_tensor after all_reduce: {max_tensor}"));
        lines.push(format!("sum_exp after all_reduce: {sum_exp}"));
        lines.push("=== 分布式 Softmax 结果 ===".to_string());
        lines.push(format!("Softmax 结果: {softmax_result}"));
    }
    // 3. L2 normalisation: the sum of squares, its root, the quotient.
    let squared: Vec<f32> = x.iter().map(|x| x * x).collect();
    let mut sum_squared = ctx.tensor([3], squared)?;
    ctx.all_reduce(&mut sum_squared, ReduceOp::Sum)?;
    let norm: Vec<f32> = x
        .iter()
        .zip(sum_squared.to_vec())
        .map(|(x, s)| x / s.sqrt())
        .collect();
    let normalized = ctx.tensor([3], norm)?;
    if rank == 0 {
        lines.push(format!("sum_squared after all_reduce: {sum_squared}"));
        lines.push("=== 分布式 L2 正则化结果 ===".to_string());
        lines.push(format!("正则化结果: {normalized}"));
    }
    Ok(vec![lines])
}
// ANCHOR_END: program

port_main!(4, init_process);
