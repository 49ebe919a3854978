use rankwise::prelude::*;

const ROOT: usize = 1;

// Rank 1's root is 1 (the pattern `ROOT` compares with the constant), rank 0's is 0. The macro
// once took `ROOT` for a binding that always matches, saw root 1 on both ranks, and accepted.
#[rankwise::program(world = 2)]
fn constant_pattern(ctx: &mut Ctx) -> Result<()> {
    let root = match ctx.rank() {
        ROOT => 1,
        _ => 0,
    };
    let mut t = ctx.full([2], 1.0f32)?;
    ctx.broadcast(&mut t, root)?;
    Ok(())
}

// A range bounded by a constant: whether it matches is unknown to the macro, so the arms after
// it are too (it once went on to the next arm as if this one had failed).
#[rankwise::program(world = 2)]
fn constant_range(ctx: &mut Ctx) -> Result<()> {
    let root = match ctx.rank() {
        1..=ROOT => 1,
        _ => 0,
    };
    let mut t = ctx.full([2], 1.0f32)?;
    ctx.broadcast(&mut t, root)?;
    Ok(())
}

// `x @ pattern` and or-patterns the macro reads: a true disagreement (RW004).
#[rankwise::program(world = 2)]
fn bound_subpattern(ctx: &mut Ctx) -> Result<()> {
    let root = match ctx.rank() {
        x @ (1 | 3) => x,
        _ => 0,
    };
    let mut t = ctx.full([2], 1.0f32)?;
    ctx.broadcast(&mut t, root)?;
    Ok(())
}

fn main() {}
