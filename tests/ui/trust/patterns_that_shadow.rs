use rankwise::prelude::*;

struct Pair {
    first: usize,
}

// Patterns bind new variables that shadow old ones. The macro once skipped the slice and
// struct patterns it did not read, so `x` still named the outer 0 on both ranks — while rank 1
// broadcast from 1.
#[rankwise::program(world = 2)]
fn slice(ctx: &mut Ctx) -> Result<()> {
    let x = 0usize;
    let _ = x;
    let (_, [x]) = (0usize, [ctx.rank()]);
    let mut t = ctx.full([2], 1.0f32)?;
    ctx.broadcast(&mut t, x)?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn structure(ctx: &mut Ctx) -> Result<()> {
    let x = 0usize;
    let _ = x;
    let Pair { first: x } = Pair { first: ctx.rank() };
    let mut t = ctx.full([2], 1.0f32)?;
    ctx.broadcast(&mut t, x)?;
    Ok(())
}

fn main() {}
