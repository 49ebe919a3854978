use rankwise::prelude::*;

// A pattern that destructures a mutable reference binds its names by reference (match
// ergonomics): `if let Some(x) = r { *x = 1 }` writes what `r` refers to. The macro once bound
// copies, so it kept `r`'s old value and verified each broadcast below with root 0 while the
// run used root 1 (the run-time guard stopped it). Each function is one shape of the hole.

#[rankwise::program(world = 2)]
fn if_let_on_a_reference(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    let mut a = Some(0usize);
    let r = &mut a;
    if let Some(x) = r {
        *x = 1;
    }
    ctx.broadcast(&mut t, r.unwrap_or(0))?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn reborrowed_by_a_typed_binding(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    let mut v = vec![0usize];
    let r = &mut v;
    {
        let s: &mut Vec<usize> = r;
        s[0] = 1;
    }
    ctx.broadcast(&mut t, r[0])?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn a_helper_s_reference_parameter(ctx: &mut Ctx) -> Result<()> {
    fn bump(o: &mut (usize, usize)) -> usize {
        let (x, _) = o;
        *x = 1;
        o.0
    }
    let mut t = ctx.full([2], 1.0f32)?;
    let mut pair = (0usize, 0usize);
    let root = bump(&mut pair);
    ctx.broadcast(&mut t, root)?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn elements_of_iter_mut(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    let mut slots = [Some(0usize)];
    for s in slots.iter_mut() {
        if let Some(x) = s {
            *x = 1;
        }
        ctx.broadcast(&mut t, s.unwrap_or(0))?;
    }
    Ok(())
}

// The reference's name shadowed where the write happens: the macro forgot the inner `r`.
#[rankwise::program(world = 2)]
fn name_shadowed_at_the_write(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    let mut a = Some(0usize);
    let r = &mut a;
    if let Some(x) = r {
        let r = 1usize;
        *x = r;
    }
    ctx.broadcast(&mut t, r.unwrap_or(0))?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn reborrowed_by_a_cast(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    let mut a = 0usize;
    let r = &mut a;
    {
        let s = r as &mut usize;
        *s = 1;
    }
    ctx.broadcast(&mut t, *r)?;
    Ok(())
}

fn main() {}
