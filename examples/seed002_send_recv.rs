//! Seed 002, "send and recv": a chain over three ranks: rank 0 sends `[100, 200]` to
//! rank 1, which doubles it and sends it on to rank 2.
//!
//! `cargo run --example seed002_send_recv`

#[path = "common/phases.rs"]
#[macro_use]
mod phases;

use phases::*;
use rankwise::prelude::*;

// ANCHOR: program
#[rankwise::program(world = 3)]
fn init_process(ctx: &mut Ctx) -> Result<Phases> {
    let rank = ctx.rank();
    let mut lines = Vec::new();
    if rank == 0 {
        let tensor = ctx.tensor([2], vec![100.0f32, 200.0])?;
        lines.push(format!("Rank 0 的初始数据: {tensor}"));
        ctx.send(&tensor, 1)?;
        lines.push("Rank 0 已发送数据到 Rank 1".to_string());
    } else if rank == 1 {
        let mut tensor = ctx.zeros::<f32>([2])?;
        ctx.recv(&mut tensor, 0)?;
        lines.push(format!("Rank 1 收到数据: {tensor}"));
        let doubled: Vec<f32> = tensor.to_vec().iter().map(|x| x * 2.0).collect();
        let tensor = ctx.tensor([2], doubled)?;
        lines.push(format!("Rank 1 处理后的数据: {tensor}"));
        ctx.send(&tensor, 2)?;
        lines.push("Rank 1 已发送数据到 Rank 2".to_string());
    } else {
        let mut tensor = ctx.zeros::<f32>([2])?;
        ctx.recv(&mut tensor, 1)?;
        lines.push(format!("Rank 2 收到数据: {tensor}"));
    }
    Ok(vec![lines])
}
// ANCHOR_END: program

port_main!(3, init_process);
