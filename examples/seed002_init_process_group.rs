//! Seed 002, "init_process_group": every rank encodes a line about itself as
//! bytes in an `i32` tensor, `all_gather` collects them and rank 0 decodes them; then an
//! `all_reduce` sums the ranks. (The seed reports the GPU's name; the port reports its rank.)
//!
//! `cargo run --example seed002_init_process_group`

#[path = "common/phases.rs"]
#[macro_use]
mod phases;

use phases::*;
use rankwise::prelude::*;

// ANCHOR: program
/// Room for one rank's description, in bytes (the seed's `max_len`).
const MAX_LEN: usize = 100;

/// The text of a tensor of bytes, zero-padded.
fn decode(t: &Tensor<i32>) -> String {
    let bytes: Vec<u8> = t.to_vec().into_iter().map(|b| b as u8).collect();
    String::from_utf8_lossy(&bytes)
        .trim_matches('\0')
        .to_string()
}

#[rankwise::program(world = 4)]
fn init_process(ctx: &mut Ctx) -> Result<Phases> {
    let rank = ctx.rank();
    let world_size = ctx.world();
    let mut lines = vec![format!("进程已启动: 此进程的 rank 是 {rank}")];
    let process_info = format!("\n进程 {rank} 信息:\n- Device: {rank}\n");
    // The string as bytes in a fixed-length, zero-padded `i32` tensor.
    let mut bytes: Vec<i32> = process_info.bytes().map(i32::from).take(MAX_LEN).collect();
    bytes.resize(MAX_LEN, 0);
    let process_info_tensor = ctx.tensor([MAX_LEN], bytes)?;
    let mut gathered_tensors = vec![Tensor::<i32>::zeros([MAX_LEN])?; world_size];
    ctx.all_gather_list(&process_info_tensor, &mut gathered_tensors)?;
    if rank == 0 {
        lines.push("=============== 所有进程信息 ===============".to_string());
        lines.extend(gathered_tensors.iter().map(decode));
    }
    let mut tensor = ctx.full([1], rank as f32)?;
    lines.push(format!(
        "进程 {rank} 的原始张量值: {:?}",
        tensor.to_vec()[0]
    ));
    ctx.all_reduce(&mut tensor, ReduceOp::Sum)?;
    let after = format!("进程 {rank} 的最终张量值: {:?}", tensor.to_vec()[0]);
    Ok(vec![lines, vec![after]])
}
// ANCHOR_END: program

port_main!(4, init_process);
