//! A hand-written ring all-reduce, checked at compile time for every world size from 2 to 8:
//! each rank passes a chunk to the next rank and receives one from the previous, `2·(W−1)`
//! times, with the send and the receive of each step posted together.
//!
//! Run it with `cargo run --example ring_allreduce`, or with `mpirun -np 4` (any size from 2 to 8;
//! others are refused on every rank before any communication).

use rankwise::prelude::*;

#[rankwise::program(world in 2..=8)]
fn ring_all_reduce(ctx: &mut Ctx) -> Result<Vec<f32>> {
    let rank = ctx.rank();
    let world = ctx.world();
    let next = (rank + 1) % world;
    let prev = (rank + world - 1) % world;
    let out = ctx.full([4], rank as f32 + 1.0)?;
    let mut inbox = ctx.zeros::<f32>([4])?;
    for _step in 0..2 * (world - 1) {
        let mut b = ctx.batch();
        b.send(&out, next);
        b.recv(&mut inbox, prev);
        b.run()?;
    }
    Ok(inbox.to_vec())
}

fn main() -> Result<()> {
    // Four threads, or under `mpirun -np N` this process's rank of N.
    let ranks = rankwise::launch(4, ring_all_reduce)?;
    for (rank, got) in ranks.iter() {
        println!("world {}: rank {rank} received {got:?}", ranks.world());
    }
    if rankwise::Engine::detect()? == rankwise::Engine::Threads {
        for world in [2, 8] {
            let got = spawn(world, ring_all_reduce)?;
            println!("world {world}: rank 0 received {:?}", got[0]);
        }
        // A world size the macro did not check is refused before any communication.
        match spawn(9, ring_all_reduce) {
            Err(e) => println!("world 9: {e}"),
            Ok(_) => println!("world 9 ran"),
        }
    }
    Ok(())
}
