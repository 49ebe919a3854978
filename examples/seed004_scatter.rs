//! Seed 004, §6 "Scatter": rank 0 scatters the rows of a `[4, 5]` tensor (row `i` filled with `i`), one `[5]` row
//! per rank, from a list as torch writes it (`scatter_list`).
//!
//! `cargo run --example seed004_scatter`

#[path = "common/phases.rs"]
#[macro_use]
mod phases;

use phases::*;
use rankwise::prelude::*;

// ANCHOR: program
#[rankwise::program(world = 4)]
fn example(ctx: &mut Ctx) -> Result<Phases> {
    let rank = ctx.rank();
    let world_size = ctx.world();
    let data_to_scatter = Tensor::from_fn([world_size, 5], |i| i[0] as f32)?;
    let scatter_list: Vec<Tensor<f32>> = (0..world_size)
        .map(|i| ctx.full([5], i as f32))
        .collect::<Result<_>>()?;
    let mut first = Vec::new();
    if rank == 0 {
        first.push(format!(
            "Rank {rank}: Original data to scatter:\n{data_to_scatter}"
        ));
        let shapes: Vec<&[usize]> = scatter_list.iter().map(|t| t.shape()).collect();
        first.push(format!("Rank {rank}: Scatter list shapes: {shapes:?}"));
    }
    let mut recv_tensor = ctx.zeros::<f32>([5])?;
    let list = if rank == 0 {
        Some(&scatter_list[..])
    } else {
        None
    };
    ctx.scatter_list(list, &mut recv_tensor, 0)?;
    let after = format!(
        "Rank {rank} received tensor of shape {:?}:\n{recv_tensor}",
        recv_tensor.shape()
    );
    Ok(vec![first, vec![after]])
}
// ANCHOR_END: program

port_main!(4, example);
