//! A first rank program: four ranks sum a value, gather columns, and pass a tensor around a
//! ring — printed per rank in the style of the seed tutorials.
//!
//! Run it with `cargo run --example quickstart`, or as four processes with
//! `mpirun -np 4 target/debug/examples/quickstart` (built with `--features mpi`).

use rankwise::prelude::*;

/// Each rank's printout, one string per step.
type Steps = [String; 3];

/// The rank program: every rank runs this function (≈ the function given to `mp.spawn`).
fn program(ctx: &mut Ctx) -> Result<Steps> {
    let rank = ctx.rank();
    let world = ctx.world();

    // 1. all_reduce: every rank contributes rank + 1; all of them get the sum.
    let mut t = Tensor::full([1], rank as f32 + 1.0)?;
    let before = format!("Rank {rank} before all_reduce: {t}\n");
    ctx.all_reduce(&mut t, ReduceOp::Sum)?;
    let all_reduce = format!("{before}Rank {rank} after all_reduce: {t}\n");

    // 2. all_gather along columns: each rank holds a [5, 2] block of rank*10 + column.
    let local = Tensor::from_fn([5, 2], |i| (rank * 10 + i[1]) as f32)?;
    let mut gathered = Tensor::zeros([5, 2 * world])?;
    ctx.all_gather(&local, &mut gathered, 1)?;
    let all_gather = format!(
        "Rank {rank} after column-wise all_gather, shape {:?}:\n{gathered}\n",
        gathered.shape()
    );

    // 3. A ring shift: send to the next rank, receive from the previous one. Both are posted
    //    in one batch, so no rank blocks waiting for another to receive first.
    let next = (rank + 1) % world;
    let prev = (rank + world - 1) % world;
    let mine = Tensor::full([2], rank as f32)?;
    let mut received = Tensor::<f32>::zeros([2])?;
    let mut batch = ctx.batch();
    batch.send(&mine, next);
    batch.recv(&mut received, prev);
    batch.run()?;
    let ring = format!("Rank {rank} received from rank {prev}: {received}\n");

    Ok([all_reduce, all_gather, ring])
}

// ANCHOR: run
/// Runs the program on four ranks and renders the output step by step, in rank order: on four
/// threads, or on this process's rank under `mpirun` (each process prints its own rank's steps).
pub fn run() -> Result<String> {
    let ranks = rankwise::launch(4, program)?;
    let mut out = String::new();
    for step in 0..3 {
        for (_rank, steps) in ranks.iter() {
            out.push_str(&steps[step]);
        }
    }
    Ok(out)
}
// ANCHOR_END: run

#[allow(dead_code)] // also compiled into the golden-output test, which calls `run` directly
fn main() -> Result<()> {
    print!("{}", run()?);
    Ok(())
}
