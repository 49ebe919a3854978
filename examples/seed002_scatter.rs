//! Seed 002, "scatter": rank 0 scatters `[10i, 10i + 1]` to each rank `i` from a
//! list (`scatter_list`; the other ranks pass `None`, as torch requires).
//!
//! `cargo run --example seed002_scatter`

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
    let scatter_list: Vec<Tensor<f32>> = (0..world_size)
        .map(|i| ctx.tensor([2], vec![(i * 10) as f32, (i * 10 + 1) as f32]))
        .collect::<Result<_>>()?;
    let mut before = Vec::new();
    if rank == 0 {
        before.push("=== scatter 前的数据 ===".to_string());
        for (i, t) in scatter_list.iter().enumerate() {
            before.push(format!("准备发送到 rank {i} 的数据: {}", tolist(t)));
        }
    }
    let mut output_tensor = ctx.zeros::<f32>([2])?;
    before.push(format!(
        "Rank {rank} 初始化接收数据: {}",
        tolist(&output_tensor)
    ));
    let list = if rank == 0 {
        Some(&scatter_list[..])
    } else {
        None
    };
    ctx.scatter_list(list, &mut output_tensor, 0)?;
    let after = format!("Rank {rank} 收到的数据: {}", tolist(&output_tensor));
    Ok(vec![before, vec![after]])
}
// ANCHOR_END: program

port_main!(4, init_process);
