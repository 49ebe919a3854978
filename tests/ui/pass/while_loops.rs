use rankwise::prelude::*;

// MPI-style loops over static values: a binomial-tree broadcast and a recursive-doubling
// all-reduce written with `while mask < world`, and a `while` that only computes a value.
#[rankwise::program(world in 2..=8)]
fn trees(ctx: &mut Ctx) -> Result<(f32, f32)> {
    let (rank, world) = (ctx.rank(), ctx.world());

    // Binomial tree from rank 0: at step `mask`, ranks below `mask` send to `rank + mask`.
    let mut x = ctx.full([2], if rank == 0 { 42.0f32 } else { 0.0 })?;
    let mut mask = 1;
    while mask < world {
        if rank < mask && rank + mask < world {
            ctx.send(&x, rank + mask)?;
        } else if rank >= mask && rank < 2 * mask {
            ctx.recv(&mut x, rank - mask)?;
        }
        mask <<= 1;
    }

    // Recursive doubling among the largest power of two that fits, exchanging in batches.
    let mut pow2 = 1;
    while pow2 * 2 <= world {
        pow2 *= 2;
    }
    let mut acc = ctx.full([1], rank as f32)?;
    if rank < pow2 {
        let mut step = 1;
        while step < pow2 {
            let peer = rank ^ step;
            let mut got = ctx.zeros::<f32>([1])?;
            let mut b = ctx.batch();
            b.send(&acc, peer).recv(&mut got, peer);
            b.run()?;
            acc = ctx.full([1], acc.to_vec()[0] + got.to_vec()[0])?;
            step *= 2;
        }
    }
    Ok((x.to_vec()[0], acc.to_vec()[0]))
}

fn main() {
    for world in 2..=8usize {
        let got = spawn(world, trees).unwrap();
        let pow2 = 1 << (usize::BITS - 1 - world.leading_zeros());
        let sum: f32 = (0..pow2).map(|r| r as f32).sum();
        for (r, (x, acc)) in got.into_iter().enumerate() {
            assert_eq!(x, 42.0, "world {world} rank {r}");
            assert_eq!(acc, if r < pow2 { sum } else { r as f32 }, "world {world} rank {r}");
        }
    }
}
