use rankwise::prelude::*;

// Forms a schedule is naturally written with: the world split with `partition` or `chunks`,
// neighbours from `windows`, a root chosen by `max_by_key` or `fold`, peers taken one at a time
// from an iterator held in a variable, `match`es on tuples and slices (also through
// references, as `Some(&p)`), and `let` chains.
#[rankwise::program(world in [2, 4, 6])]
fn schedule(ctx: &mut Ctx) -> Result<(f32, f32, usize)> {
    let (rank, world) = (ctx.rank(), ctx.world());

    // Halves by `partition`, then pairs by `chunks`: one sub-group each.
    let (low, high): (Vec<usize>, Vec<usize>) = (0..world).partition(|&r| r < world / 2);
    let halves = ctx.split(&[&low, &high])?;
    let mut h = ctx.full([1], rank as f32)?;
    ctx.group(&halves).all_reduce(&mut h, ReduceOp::Sum)?;
    let ranks: Vec<usize> = (0..world).collect();
    let pairs = ctx.split(&ranks.chunks(2).collect::<Vec<_>>())?;
    let mut p = ctx.full([1], rank as f32)?;
    ctx.group(&pairs).all_reduce(&mut p, ReduceOp::Max)?;

    // A pipeline along `windows(2)`: each stage hands the token to the next.
    let mut token = ctx.full([1], rank as f32)?;
    for w in ranks.windows(2) {
        if let [from, to] = w {
            if rank == *from {
                ctx.send(&token, *to)?;
            } else if rank == *to {
                ctx.recv(&mut token, *from)?;
            }
        }
    }

    // Roots chosen by key and by a fold; the last of equal keys wins in `max_by_key`.
    let busiest = (0..world).max_by_key(|&r| r % 2).unwrap_or(0);
    let mut x = ctx.full([1], rank as f32)?;
    ctx.broadcast(&mut x, busiest)?;
    let folded = (0..world).fold(0, |acc, r| (acc + r) % world);
    ctx.broadcast(&mut x, folded)?;

    // Peers taken from a held iterator, one per step.
    let mut others = (0..world).filter(|&r| r != rank).collect::<Vec<_>>().into_iter();
    let mut seen = 0;
    while let Some(peer) = others.next() {
        let mut got = ctx.zeros::<f32>([1])?;
        let mut b = ctx.batch();
        b.send(&x, peer).recv(&mut got, peer);
        b.run()?;
        seen += 1;
    }

    // `match` on a tuple and on a slice decide the last root.
    let root = match (world % 4, ranks.as_slice()) {
        (0, [.., last]) => *last,
        (_, [first, ..]) => *first + 1,
        _ => 0,
    };
    let root = if let Some(&r) = ranks.get(root) { r } else { 0 };
    // A destructuring assignment with a rest: the first and the last.
    let (mut first, mut last) = (world, world);
    let ends_were_unset = first + last == 2 * world;
    [first, .., last] = [ranks[0], root, root, ranks[world - 1]];
    assert!(ends_were_unset);
    let root = if first == 0 && last == world - 1 { root } else { world };
    ctx.broadcast(&mut x, root)?;

    // A `let` chain (Rust 2024) guards one more broadcast, from the last rank.
    let mut y = ctx.full([1], rank as f32)?;
    if let Some(&last) = ranks.last()
        && last > 0
    {
        ctx.broadcast(&mut y, last)?;
    }
    let sums = h.to_vec()[0] + token.to_vec()[0] + y.to_vec()[0];
    Ok((sums, p.to_vec()[0], seen + root))
}

fn main() {
    for world in [2, 4, 6usize] {
        let half = world / 2;
        let low: f32 = (0..half).map(|r| r as f32).sum();
        let high: f32 = (half..world).map(|r| r as f32).sum();
        let root = if world % 4 == 0 { world - 1 } else { 1 };
        for (r, (sums, pair_max, seen)) in spawn(world, schedule).unwrap().into_iter().enumerate() {
            // The token from rank 0 reached every rank along the pipeline.
            let half_sum = if r < half { low } else { high };
            assert_eq!(sums, half_sum + (world - 1) as f32, "world {world} rank {r}");
            assert_eq!(pair_max, (r | 1) as f32, "world {world} rank {r}");
            assert_eq!(seen, world - 1 + root, "world {world} rank {r}");
        }
    }
}
