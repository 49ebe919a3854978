use rankwise::prelude::*;

// Ranges collected or mapped keep their own integers: values beyond `usize` (a `u128` range),
// negative values, and the order of `.rev()`. (The macro once took each value through
// `usize`, and computed root 0 where the program computes 1: the guard refused the run.)
#[rankwise::program(world = 2)]
fn ranges(ctx: &mut Ctx) -> Result<f32> {
    let rank = ctx.rank();
    let mut t = ctx.full([1], rank as f32)?;
    let wide: Vec<u128> = ((1u128 << 70)..(1u128 << 70) + 2).collect();
    ctx.broadcast(&mut t, (wide[0] >> 70) as usize)?;
    let high = ((1u128 << 70)..(1u128 << 70) + 2)
        .map(|x| (x >> 70) as usize)
        .sum::<usize>();
    ctx.broadcast(&mut t, high / 2)?;
    let down: Vec<usize> = (0..3usize).rev().collect();
    ctx.broadcast(&mut t, down[0] - 1)?;
    let below: Vec<i64> = (-2i64..0).collect();
    ctx.broadcast(&mut t, (below[0] + 3) as usize)?;
    Ok(t.to_vec()[0])
}

fn main() {
    assert_eq!(spawn(2, ranges).unwrap(), vec![1.0, 1.0]);
}
