use rankwise::prelude::*;

// A list grown inside another value (`lists[0].push(x)`, `pair.0.push(x)`): what holds it is
// no longer known (the macro once kept the old list, and a wrong root).
#[rankwise::program(world = 2)]
fn grown(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    let mut lists = vec![vec![0usize], vec![1]];
    lists[0].push(5);
    ctx.broadcast(&mut t, lists[0].len() - 1)?;
    let mut pair = (vec![0usize], 1usize);
    pair.0.push(5);
    ctx.broadcast(&mut t, pair.0.len() - 1)?;
    Ok(())
}

fn main() {}
