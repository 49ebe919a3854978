use rankwise::prelude::*;

// Integers in the program's own types. `saturating_sub` on an `i64` goes below zero: rank 0's
// root is 0, rank 1's is 1, and the macro must see that (it once clamped at zero as for an
// unsigned type, saw root 1 on both ranks, and accepted a broadcast whose ranks disagree).
#[rankwise::program(world = 2)]
fn signed_saturation(ctx: &mut Ctx) -> Result<()> {
    let r = ctx.rank() as i64 - 1;
    let root = (r.saturating_sub(0) + 1) as usize;
    let mut t = ctx.full([2], 1.0f32)?;
    ctx.broadcast(&mut t, root)?;
    Ok(())
}

// `rank - 1` at rank 0 is no `usize`: a debug build panics, a release build wraps to
// `usize::MAX` (so `d > 5` there). The macro cannot say which, and says why.
#[rankwise::program(world = 2)]
fn underflow(ctx: &mut Ctx) -> Result<()> {
    let rank = ctx.rank();
    let d = rank - 1;
    let root = if d > 5 { 1 } else { 0 };
    let mut t = ctx.full([2], 1.0f32)?;
    ctx.broadcast(&mut t, root)?;
    Ok(())
}

// Wrapping in `usize` depends on its width (32 or 64 bits), which the macro does not see.
#[rankwise::program(world = 3)]
fn width(ctx: &mut Ctx) -> Result<()> {
    let prev = ctx.rank().wrapping_sub(1) % 7;
    let mut t = ctx.full([2], 1.0f32)?;
    ctx.broadcast(&mut t, prev % 3)?;
    Ok(())
}

fn main() {}
