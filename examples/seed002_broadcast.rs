//! Seed 002, "broadcast": two broadcasts in a row, from rank 0 and then from rank 1;
//! every rank ends with both.
//!
//! `cargo run --example seed002_broadcast`

#[path = "common/phases.rs"]
#[macro_use]
mod phases;

use phases::*;
use rankwise::prelude::*;

// ANCHOR: program
#[rankwise::program(world = 4)]
fn init_process(ctx: &mut Ctx) -> Result<Phases> {
    let rank = ctx.rank();
    let (mut data1, mut data2) = match rank {
        0 => (
            ctx.tensor([5], vec![1.0f32, 2.0, 3.0, 4.0, 5.0])?,
            ctx.zeros::<f32>([3])?,
        ),
        1 => (
            ctx.zeros::<f32>([5])?,
            ctx.tensor([3], vec![10.0f32, 20.0, 30.0])?,
        ),
        _ => (ctx.zeros::<f32>([5])?, ctx.zeros::<f32>([3])?),
    };
    let start = format!("Rank {rank} 初始数据: data1={data1}, data2={data2}");
    ctx.broadcast(&mut data1, 0)?;
    let first = vec![
        format!("Rank {rank} 第一次广播后: data1={data1}"),
        format!("Rank {rank} 第一次广播后: data2={data2}"),
    ];
    ctx.broadcast(&mut data2, 1)?;
    let second = vec![
        format!("Rank {rank} 第二次广播后: data1={data1}"),
        format!("Rank {rank} 第二次广播后: data2={data2}"),
    ];
    Ok(vec![vec![start], first, second])
}
// ANCHOR_END: program

port_main!(4, init_process);
