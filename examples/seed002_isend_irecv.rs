//! Seed 002, "isend and irecv": the same chain as `seed002_send_recv` (rank 0 → rank 1, which
//! doubles the data → rank 2), with every transfer posted and waited for, so that each rank can
//! work while its message is under way. A request borrows its tensor until `wait()`: reading a
//! receive's tensor early, or changing a send's, does not compile. Waiting in an order that
//! deadlocks is RW001 at compile time (`tests/ui/deadlock/wait_in_the_wrong_order.rs`).
//!
//! `cargo run --example seed002_isend_irecv`

#[path = "common/phases.rs"]
#[macro_use]
mod phases;

use phases::*;
use rankwise::prelude::*;

/// Stands in for the seed's `time.sleep(1)`: work done while a message is under way.
fn other_work() -> f64 {
    (1..=1000).map(|i| 1.0 / i as f64).sum()
}

// ANCHOR: program
#[rankwise::program(world = 3)]
fn init_process(ctx: &mut Ctx) -> Result<Phases> {
    let rank = ctx.rank();
    let mut lines = Vec::new();
    if rank == 0 {
        let tensor = ctx.tensor([2], vec![100.0f32, 200.0])?;
        lines.push("\n=== 初始状态 ===".to_string());
        lines.push(format!("Rank 0 的初始数据: {tensor}"));
        lines.push("Rank 0 准备发送数据...".to_string());
        let send_req = ctx.isend(&tensor, 1)?;
        lines.push("Rank 0 启动异步发送".to_string());
        lines.push("Rank 0 正在处理其他任务...".to_string());
        other_work();
        send_req.wait()?;
        lines.push("Rank 0 确认发送完成".to_string());
    } else if rank == 1 {
        let mut tensor = ctx.zeros::<f32>([2])?;
        lines.push("Rank 1 准备接收数据...".to_string());
        let recv_req = ctx.irecv(&mut tensor, 0)?;
        lines.push("Rank 1 启动异步接收".to_string());
        lines.push("Rank 1 正在处理其他任务...".to_string());
        other_work();
        recv_req.wait()?;
        lines.push(format!("Rank 1 接收完成，数据为: {tensor}"));
        let doubled: Vec<f32> = tensor.to_vec().iter().map(|x| x * 2.0).collect();
        let tensor = ctx.tensor([2], doubled)?;
        lines.push(format!("Rank 1 处理后的数据: {tensor}"));
        lines.push("Rank 1 准备发送数据给 Rank 2...".to_string());
        let send_req = ctx.isend(&tensor, 2)?;
        lines.push("Rank 1 启动异步发送".to_string());
        lines.push("Rank 1 正在处理其他任务...".to_string());
        other_work();
        send_req.wait()?;
        lines.push("Rank 1 确认发送完成".to_string());
    } else {
        let mut tensor = ctx.zeros::<f32>([2])?;
        lines.push("Rank 2 准备接收数据...".to_string());
        let recv_req = ctx.irecv(&mut tensor, 1)?;
        lines.push("Rank 2 启动异步接收".to_string());
        lines.push("Rank 2 正在处理其他任务...".to_string());
        other_work();
        recv_req.wait()?;
        lines.push(format!("Rank 2 接收完成，最终数据为: {tensor}"));
        lines.push("\n=== 传输完成 ===".to_string());
    }
    Ok(vec![lines])
}
// ANCHOR_END: program

port_main!(3, init_process);
