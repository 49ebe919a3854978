use rankwise::prelude::*;

// Integer arithmetic in the program's own types, each computed as the program computes it:
// casts keep the low bits, `wrapping_*` wraps at the type's width, `saturating_*` clamps, a
// helper's parameter and return types are its values' types, `std::cmp` and `T::max` work.
#[rankwise::program(world in 2..=4)]
fn typed(ctx: &mut Ctx) -> Result<Vec<f32>> {
    fn twice(x: u8) -> u8 {
        x.wrapping_mul(2)
    }
    let rank = ctx.rank();
    let world = ctx.world();
    // 256 + 1 truncates to 1 in a `u8`: the root is 0 on every rank.
    let root = ((rank * 256 + 1) as u8) as usize - 1;
    let mut t = ctx.full([2], rank as f32 + 10.0)?;
    ctx.broadcast(&mut t, root)?;
    // 3e9 fits a `u32`, 6e9 wraps: both stay below 4e9, so nobody broadcasts from rank 1 here.
    let big = (rank as u32 % 2).wrapping_mul(3_000_000_000);
    if big > 4_000_000_000 {
        ctx.broadcast(&mut t, 1)?;
    }
    // 128 * 2 wraps to 0 in a `u8`.
    let zero = twice(128) as usize;
    let last = std::cmp::max(world - 1, zero);
    let first = usize::min(last, zero);
    ctx.broadcast(&mut t, last - first)?;
    // Associated constants every target agrees on, and tuple fields.
    let pair = (world - 1, u8::MAX as usize + u32::BITS as usize);
    ctx.broadcast(&mut t, pair.1 - 287)?;
    // Saturation: 0 - 5 stops at 0 in a `usize`, and -3 in an `i64` stays -3.
    let floor = rank.saturating_sub(5);
    let signed: i64 = (rank as i64).saturating_sub(3);
    let mut times = [0.0f32; 1];
    for _ in 0..(floor + (signed + 3) as usize) {
        times[0] += 1.0;
    }
    let mut sum = ctx.full([1], times[0])?;
    ctx.all_reduce(&mut sum, ReduceOp::Sum)?;
    let mut out = t.to_vec();
    out.extend(sum.to_vec());
    Ok(out)
}

fn main() {
    for world in 2..=4usize {
        let got = spawn(world, typed).unwrap();
        let last = (world - 1) as f32;
        // Rank 0's 10, then rank `world - 1`'s copy of it; the sum of 0 + 1 + … + (world - 1).
        let sum = (0..world).sum::<usize>() as f32;
        assert_eq!(got, vec![vec![10.0, 10.0, sum]; world], "world {world} (last {last})");
    }
}
