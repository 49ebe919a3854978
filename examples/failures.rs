//! Wrong programs, one per failure mode, to see what rankwise does with each: it reports the
//! failure — naming the ranks and the calls — and stops, instead of hanging. Under threads the
//! program returns the error; under `mpirun` the job ends (`MPI_Abort`) with a non-zero exit.
//!
//! `cargo run --example failures -- <case>`, or `mpirun -np 4 target/debug/examples/failures
//! <case>`, where `<case>` is one of: panic, error, deadlock, skip, mismatch, sizes, rooted,
//! gathers, exchanges, large, bucket, roots, batched, refilled, p2p, wait, posted, slow. (`slow` is
//! correct: a long transfer that must not be taken for a hang.)

use rankwise::prelude::*;

/// One batch of `calls` all_reduces of `len` zeros on every rank, the last rank's call `odd`
/// with another operator: the members must find the difference at that call, before any data
/// of it moves.
fn bucket_with_an_odd_call(ctx: &mut Ctx, calls: usize, len: usize, odd: usize) -> Result<()> {
    let last = ctx.rank() == ctx.world() - 1;
    let mut bucket: Vec<Tensor<f32>> = (0..calls)
        .map(|_| ctx.zeros::<f32>([len]))
        .collect::<Result<_>>()?;
    let mut b = ctx.batch();
    for (i, u) in bucket.iter_mut().enumerate() {
        let op = if i == odd && last {
            ReduceOp::Max
        } else {
            ReduceOp::Sum
        };
        b.all_reduce(u, op);
    }
    b.run()
}

fn main() -> Result<()> {
    let case = std::env::args().nth(1).unwrap_or_default();
    let ranks = rankwise::launch(4, |ctx| {
        let rank = ctx.rank();
        let world = ctx.world();
        let mut t = ctx.full([4], rank as f32)?;
        ctx.all_reduce(&mut t, ReduceOp::Sum)?;
        match case.as_str() {
            "panic" if rank == 2 => panic!("rank 2 lost its data"),
            "error" if rank == 1 => {
                return Err(rankwise::Error::user(std::io::Error::other("disk full")));
            }
            "deadlock" => {
                // Both ranks of each pair send first: a blocking send waits for its receive.
                let peer = rank ^ 1;
                if peer < world {
                    let x = ctx.full([4], 1.0f32)?;
                    let mut y = ctx.zeros::<f32>([4])?;
                    ctx.send(&x, peer)?;
                    ctx.recv(&mut y, peer)?;
                }
            }
            "skip" if rank == world - 1 => {} // the last rank skips the collective below
            "skip" => ctx.all_reduce(&mut t, ReduceOp::Sum)?,
            "mismatch" => {
                let op = if rank == 0 {
                    ReduceOp::Max
                } else {
                    ReduceOp::Sum
                };
                ctx.all_reduce(&mut t, op)?;
            }
            // Small on rank 0, large elsewhere: MPI runs the two by different algorithms.
            "sizes" => {
                let mut u = ctx.zeros::<f32>([if rank == 0 { 4 } else { 8192 }])?;
                ctx.all_reduce(&mut u, ReduceOp::Sum)?;
            }
            // A broadcast whose root sends a longer tensor than the others expect.
            "rooted" => {
                let mut u = ctx.zeros::<f32>([if rank == 0 { 4 } else { 3 }])?;
                ctx.broadcast(&mut u, 0)?;
            }
            // Large all_gathers of different lengths (the MPI backend sends them directly).
            "gathers" => {
                let len = if rank == 0 { 8192 } else { 8000 };
                let x = ctx.zeros::<f32>([len])?;
                let mut y = ctx.zeros::<f32>([len * world])?;
                ctx.all_gather(&x, &mut y, 0)?;
            }
            // Large exchanges of different kinds, the same size: rank 0 all-to-all, the others
            // all-gather (the MPI backend sends both directly, tagged by the call).
            "exchanges" => {
                let x = ctx.zeros::<f32>([8192])?;
                let mut y = ctx.zeros::<f32>([8192])?;
                if rank == 0 {
                    ctx.all_to_all(&x, &mut y, 0)?;
                } else {
                    let x = ctx.zeros::<f32>([8192 / world])?;
                    ctx.all_gather(&x, &mut y, 0)?;
                }
            }
            // Large tensors, different operators.
            "large" => {
                let op = if rank == 0 {
                    ReduceOp::Max
                } else {
                    ReduceOp::Sum
                };
                let mut u = ctx.zeros::<f32>([8192])?;
                ctx.all_reduce(&mut u, op)?;
            }
            // A large broadcast one rank makes one element longer: with the check, the records
            // name both calls; without it (`RANKWISE_MPI_CHECK=0`), the shared-memory window
            // finds the difference before any rank uses another's bytes.
            "broadcast_size" => {
                let len = if rank == 2 { 100_001 } else { 100_000 };
                let mut u = ctx.zeros::<f32>([len])?;
                ctx.broadcast(&mut u, 0)?;
            }
            // The same for an all_gather larger than one message (through the window too).
            "all_gather_size" => {
                let len = if rank == 2 { 30_001 } else { 30_000 };
                let x = ctx.zeros::<f32>([len])?;
                let mut y = ctx.zeros::<f32>([len * world])?;
                ctx.all_gather(&x, &mut y, 0)?;
            }
            // Large tensors every rank batches, the last rank's third with another operator:
            // agreed call by call through their records before any data moves (on one host,
            // the MPI backend then folds them through shared memory).
            "large_bucket" => bucket_with_an_odd_call(ctx, 3, 8192, 2)?,
            // A bucket larger than one small-collective exchange, every rank batching it
            // whole, in which the last rank's call 280 (beyond the first 256, which the
            // MPI backend reduces as one packed call) has another operator.
            "bucket" => bucket_with_an_odd_call(ctx, 300, 256, 280)?,
            // Rank 1 disagrees about a small broadcast's root, then all broadcast from it.
            // (Under MPI with RANKWISE_MPI_CHECK=0 a small broadcast goes one way: the first
            // disagreement goes unseen, and is found when its leftover message is read.)
            "roots" => {
                let mut u = ctx.zeros::<f32>([4])?;
                ctx.broadcast(&mut u, if rank == 1 { 1 } else { 0 })?;
                ctx.broadcast(&mut u, 1)?;
            }
            // Rank 0 batches a receive that rank 1 never sends with a collective every rank
            // makes: the receive is what hangs, and the report must say so. `refilled` first
            // runs a batch of the same length that completes: the board's list of what a batch
            // waits for is then refilled in place, and must name the new batch's ops.
            "batched" | "refilled" => {
                let mut u = ctx.zeros::<f32>([4])?;
                if case == "refilled" {
                    let mut v = ctx.zeros::<f32>([2])?;
                    let mut b = ctx.batch();
                    b.all_reduce(&mut u, ReduceOp::Sum);
                    b.all_reduce(&mut v, ReduceOp::Max);
                    b.run()?;
                }
                if rank == 0 {
                    let mut y = ctx.zeros::<f32>([4])?;
                    let mut b = ctx.batch();
                    b.recv(&mut y, 1);
                    b.all_reduce(&mut u, ReduceOp::Sum);
                    b.run()?;
                } else {
                    ctx.all_reduce(&mut u, ReduceOp::Sum)?;
                }
            }
            "p2p" if world >= 2 && rank < 2 => {
                if rank == 0 {
                    ctx.send(&ctx.full([4], 1.0f32)?, 1)?;
                } else {
                    let mut y = ctx.zeros::<f32>([3])?;
                    ctx.recv(&mut y, 0)?;
                }
            }
            // A posted receive waited for before the send its peer needs first.
            "wait" if world >= 2 && rank < 2 => {
                let mut y = ctx.zeros::<f32>([4])?;
                if rank == 0 {
                    let req = ctx.irecv(&mut y, 1)?;
                    req.wait()?;
                    ctx.send(&t, 1)?;
                } else {
                    ctx.recv(&mut y, 0)?;
                    ctx.send(&t, 0)?;
                }
            }
            // A posted send longer than the posted receive that meets it.
            "posted" if world >= 2 && rank < 2 => {
                if rank == 0 {
                    ctx.isend(&ctx.full([4], 1.0f32)?, 1)?.wait()?;
                } else {
                    let mut y = ctx.zeros::<f32>([3])?;
                    ctx.irecv(&mut y, 0)?.wait()?;
                }
            }
            "slow" => {
                // 64 MiB per rank: seconds of transfer on a loaded machine, never a hang.
                let mut big = ctx.full([16 << 20], 1.0f32)?;
                for _ in 0..3 {
                    ctx.all_reduce(&mut big, ReduceOp::Sum)?;
                }
                t = ctx.full([4], big.to_vec()[0])?;
            }
            _ => {}
        }
        Ok(t.to_vec())
    })?;
    for (rank, v) in ranks.iter() {
        println!("rank {rank}: {v:?}");
    }
    Ok(())
}
