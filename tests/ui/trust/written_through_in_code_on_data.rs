use rankwise::prelude::*;

// Code the macro does not run — a branch on data, a closure it does not follow — forgets what
// it may write. It once missed writes through a mutable reference handed on or matched there,
// and through a `ref mut` binding: it verified each broadcast below with root 0 while a run
// with `data` true used root 1 (the run-time guard stopped it).

#[rankwise::program(world = 2)]
fn handed_to_a_helper(ctx: &mut Ctx) -> Result<()> {
    fn set(x: &mut usize, v: usize) {
        *x = v;
    }
    let mut t = ctx.full([2], 1.0f32)?;
    let data = t.to_vec()[0] > 0.5;
    let mut a = 0usize;
    let r = &mut a;
    if data {
        set(r, 1);
    }
    ctx.broadcast(&mut t, *r)?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn handed_to_a_path_call(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    let data = t.to_vec()[0] > 0.5;
    let mut v = vec![0usize];
    let r = &mut v;
    if data {
        Vec::push(r, 1);
    }
    ctx.broadcast(&mut t, r.len() - 1)?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn matched_by_a_pattern(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    let data = t.to_vec()[0] > 0.5;
    let mut a = Some(0usize);
    let r = &mut a;
    if data {
        if let Some(x) = r {
            *x = 1;
        }
    }
    ctx.broadcast(&mut t, r.unwrap_or(0))?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn a_ref_mut_binding(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    let data = t.to_vec()[0] > 0.5;
    let mut a = Some(0usize);
    if data {
        if let Some(ref mut x) = a {
            *x = 1;
        }
    }
    ctx.broadcast(&mut t, a.unwrap_or(0))?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn in_a_closure_not_followed(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    let mut a = Some(0usize);
    let r = &mut a;
    (0..1).for_each(|_| {
        if let Some(x) = r {
            *x = 1;
        }
    });
    ctx.broadcast(&mut t, r.unwrap_or(0))?;
    Ok(())
}

fn main() {}
