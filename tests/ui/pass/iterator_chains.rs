use rankwise::prelude::*;

// Group members and peers from iterator chains over static ranges, as torch users write them.
#[rankwise::program(world in [2, 4, 6])]
fn chains(ctx: &mut Ctx) -> Result<Vec<f32>> {
    let (r, w) = (ctx.rank(), ctx.world());
    // Ranks of my parity: a group per parity.
    let same: Vec<usize> = (0..w).filter(|x| x % 2 == r % 2).collect();
    let parity = ctx.new_group(&same)?;
    let mut t = ctx.full([1], r as f32)?;
    ctx.group(&parity).all_reduce(&mut t, ReduceOp::Sum)?;

    // Every other rank, counted down, and the first half by `take`.
    let evens: Vec<usize> = (0..w).step_by(2).collect();
    let evens_group = ctx.new_group(evens.iter().rev().copied().collect::<Vec<_>>())?;
    let half: Vec<usize> = (0..w).take(w / 2).collect();
    let half_group = ctx.new_group(&half)?;
    let mut u = ctx.full([1], 1.0f32)?;
    if evens_group.contains(r) {
        ctx.group(&evens_group).all_reduce(&mut u, ReduceOp::Sum)?;
    }
    if half.iter().any(|&x| x == r) {
        ctx.group(&half_group).all_reduce(&mut u, ReduceOp::Sum)?;
    }

    // Peers by `map`, and a root found by `position`.
    let peers: Vec<usize> = (1..3).map(|k| (r + k) % w).collect();
    let root = same.iter().position(|&x| x == 0).unwrap_or(0);
    let mut v = ctx.full([1], if r == root { 5.0f32 } else { 0.0 })?;
    ctx.broadcast(&mut v, root)?;
    let mut got = ctx.zeros::<f32>([1])?;
    let mut b = ctx.batch();
    b.send(&t, peers[0]).recv(&mut got, (r + w - 1) % w);
    b.run()?;
    let total: usize = (0..w).map(|x| x * 2).sum();
    Ok(vec![t.to_vec()[0], u.to_vec()[0], v.to_vec()[0], got.to_vec()[0], total as f32])
}

fn main() {
    for w in [2usize, 4, 6] {
        let got = spawn(w, chains).unwrap();
        for (r, v) in got.iter().enumerate() {
            let parity_sum: usize = (0..w).filter(|x| x % 2 == r % 2).sum();
            assert_eq!(v[0], parity_sum as f32);
            // After the evens' sum: the number of evens on even ranks, 1 elsewhere; then the
            // first half sums those.
            let after_evens = |x: usize| if x % 2 == 0 { w.div_ceil(2) as f32 } else { 1.0 };
            let u = if r < w / 2 {
                (0..w / 2).map(after_evens).sum()
            } else {
                after_evens(r)
            };
            assert_eq!(v[1], u, "world {w} rank {r}");
            assert_eq!(v[2], 5.0);
            let prev = (r + w - 1) % w;
            let prev_sum: usize = (0..w).filter(|x| x % 2 == prev % 2).sum();
            assert_eq!(v[3], prev_sum as f32);
            assert_eq!(v[4], (w * (w - 1)) as f32);
        }
    }
}
