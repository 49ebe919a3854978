use rankwise::prelude::*;

// A destructuring assignment writes every place in it. The macro once read `(a, b) = (b, a)`
// as writing nothing (root 0 to the macro, 1 to the program); it now follows one it runs (see
// `tests/ui/pass/loops_swaps_and_captures.rs`) and forgets the places of one it skips.
#[rankwise::program(world = 2)]
fn swapped(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], ctx.rank() as f32)?;
    let data = t.as_slice()?[0] > 0.5;
    let (mut a, mut b) = (0usize, 1usize);
    if data {
        (a, b) = (b, a);
    }
    ctx.broadcast(&mut t, a)?;
    let mut pair = [0usize; 2];
    if data {
        [pair[0], _] = [1, 1];
    }
    ctx.broadcast(&mut t, pair[0] + b * 0)?;
    Ok(())
}

fn main() {}
