use rankwise::prelude::*;

// Forms a ring or a tree is naturally written with: double buffers swapped with
// `std::mem::swap`, a value handed on with `mem::replace`/`mem::take`, a `loop` that breaks
// with a value, a `while let` over a stack of roots, and closures (`move` or not) that use
// what they captured.
#[rankwise::program(world in 2..=4)]
fn ring(ctx: &mut Ctx) -> Result<(f32, usize, usize)> {
    let (rank, world) = (ctx.rank(), ctx.world());
    let next = move |step: usize| (rank + step) % world;
    let prev = |step: usize| (rank + world - step) % world;

    // A ring pass: each step sends what arrived last and swaps the buffers.
    let mut send = ctx.full([2], rank as f32)?;
    let mut recv = ctx.zeros::<f32>([2])?;
    let mut sum = rank as f32;
    for _ in 1..world {
        let mut b = ctx.batch();
        b.send(&send, next(1)).recv(&mut recv, prev(1));
        b.run()?;
        sum += recv.to_vec()[0];
        std::mem::swap(&mut send, &mut recv);
    }

    // The first power of two not below the world, found by a `loop`.
    let mut p = 1usize;
    let cover = loop {
        if p >= world {
            break p;
        }
        p *= 2;
    };

    // Broadcasts from every root on a stack, last pushed first.
    let mut roots: Vec<usize> = (0..world).collect();
    let mut x = ctx.full([1], rank as f32)?;
    let mut last = world;
    while let Some(root) = roots.pop() {
        ctx.broadcast(&mut x, root)?;
        last = root;
    }

    // A value handed on: `replace` gives the old one, `take` leaves the default.
    let mut held = world - 1;
    let old = std::mem::replace(&mut held, 0);
    let taken = std::mem::take(&mut held) + old;
    ctx.broadcast(&mut x, taken)?;

    // A list of peers edited in place: every other rank, the nearest first.
    let mut peers: Vec<usize> = (0..world).collect();
    peers.retain(|&p| p != rank);
    peers.sort_by_key(|&p| (p + world - rank) % world);
    peers.reverse();
    peers.reverse();
    let first = peers.first().copied().unwrap_or(rank);
    let mut pair = ctx.zeros::<f32>([2])?;
    let mut b = ctx.batch();
    b.send(&send, first).recv(&mut pair, (rank + world - 1) % world);
    b.run()?;

    // A destructuring assignment swaps two roots.
    let (mut first, mut second) = (world - 1, 0usize);
    (first, second) = (second, first);
    ctx.broadcast(&mut x, first + second * 0)?;

    // A name captured by a closure and shadowed afterwards: the closure keeps the first.
    let k = 1usize;
    let hop = |r: usize| (r + k) % world;
    let k = 0usize;
    let mut y = ctx.full([1], rank as f32)?;
    ctx.broadcast(&mut y, hop(k))?;
    Ok((sum, cover + last, y.to_vec()[0] as usize))
}

// Sub-groups from rows computed by an iterator chain, handed to `split` as slices.
#[rankwise::program(world in [2, 4, 6])]
fn rows(ctx: &mut Ctx) -> Result<f32> {
    let rank = ctx.rank();
    let rows: Vec<Vec<usize>> = (0..ctx.world() / 2).map(|r| vec![2 * r, 2 * r + 1]).collect();
    let parts: Vec<&[usize]> = rows.iter().map(|r| r.as_slice()).collect();
    let g = ctx.split(&parts)?;
    let mut t = ctx.full([1], rank as f32)?;
    ctx.group(&g).all_reduce(&mut t, ReduceOp::Sum)?;
    Ok(t.to_vec()[0])
}

fn main() {
    for world in [2, 4, 6] {
        for (r, got) in spawn(world, rows).unwrap().into_iter().enumerate() {
            let pair = (r / 2 * 4 + 1) as f32;
            assert_eq!(got, pair, "world {world} rank {r}");
        }
    }
    for world in 2..=4usize {
        let got = spawn(world, ring).unwrap();
        let total: f32 = (0..world).map(|r| r as f32).sum();
        let cover = world.next_power_of_two();
        for (r, (sum, c, y)) in got.into_iter().enumerate() {
            assert_eq!(sum, total, "world {world} rank {r}");
            assert_eq!(c, cover, "world {world} rank {r}");
            assert_eq!(y, 1, "world {world} rank {r}");
        }
    }
}
