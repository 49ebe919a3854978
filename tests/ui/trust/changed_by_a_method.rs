use rankwise::prelude::*;
use std::ops::AddAssign;

// Methods that change their receiver: the macro once kept the old value of each, verified
// root 0 on both ranks, and rank 1 broadcast from 1. Now each is unknown from there on, or
// followed exactly (`take` on an `Option` held by a variable: the ranks' roots disagree, RW004).
#[rankwise::program(world = 2)]
fn option_taken(ctx: &mut Ctx) -> Result<()> {
    let mut root = Some(0usize);
    if ctx.rank() == 1 {
        root.take();
    }
    let mut t = ctx.full([2], 1.0f32)?;
    ctx.broadcast(&mut t, root.unwrap_or(1))?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn number_add_assigned(ctx: &mut Ctx) -> Result<()> {
    let mut root = 0usize;
    if ctx.rank() == 1 {
        root.add_assign(1);
    }
    let mut t = ctx.full([2], 1.0f32)?;
    ctx.broadcast(&mut t, root)?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn written_through_as_mut(ctx: &mut Ctx) -> Result<()> {
    let mut root = Some(0usize);
    if ctx.rank() == 1
        && let Some(r) = root.as_mut()
    {
        *r = 1;
    }
    let mut t = ctx.full([2], 1.0f32)?;
    ctx.broadcast(&mut t, root.unwrap_or(0))?;
    Ok(())
}

fn main() {}
