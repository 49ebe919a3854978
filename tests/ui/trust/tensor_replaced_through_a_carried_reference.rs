use rankwise::prelude::*;

// A mutable reference to a tensor carried inside another value (`Some(r)`, a tuple, a list),
// moved or assigned to another variable, stored by a call, or returned by one still writes the
// tensor. The macro once lost track of it there: it
// checked each all_gather below against the tensor's first shape, [2], while the run gathered
// the [3] written through the reference (the run-time check of shapes stopped it).

#[rankwise::program(world = 2)]
fn inside_an_option(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    let r = &mut t;
    if let Some(x) = Some(r) {
        *x = ctx.full([3], 2.0f32)?;
    }
    let mut out = ctx.zeros([4])?;
    ctx.all_gather(&t, &mut out, 0)?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn inside_a_tuple(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    let r = &mut t;
    let h = (r, 0usize);
    *h.0 = ctx.full([3], 2.0f32)?;
    let mut out = ctx.zeros([4])?;
    ctx.all_gather(&t, &mut out, 0)?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn inside_a_list(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    let r = &mut t;
    for x in vec![r] {
        *x = ctx.full([3], 2.0f32)?;
    }
    let mut out = ctx.zeros([4])?;
    ctx.all_gather(&t, &mut out, 0)?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn moved_to_another_variable(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    let r = &mut t;
    let mut x = r;
    let mut u = ctx.full([3], 2.0f32)?;
    std::mem::swap(x, &mut u);
    x = &mut u;
    let _ = x;
    let mut out = ctx.zeros([4])?;
    ctx.all_gather(&t, &mut out, 0)?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn assigned_to_another_variable(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    let r = &mut t;
    let s;
    s = r;
    *s = ctx.full([3], 2.0f32)?;
    let mut out = ctx.zeros([4])?;
    ctx.all_gather(&t, &mut out, 0)?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn pushed_onto_a_list(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    let mut v: Vec<&mut Tensor<f32>> = Vec::new();
    v.push(&mut t);
    *v[0] = ctx.full([3], 2.0f32)?;
    let mut out = ctx.zeros([4])?;
    ctx.all_gather(&t, &mut out, 0)?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn kept_by_a_helper(ctx: &mut Ctx) -> Result<()> {
    fn keep<'a>(v: &mut Vec<&'a mut Tensor<f32>>, t: &'a mut Tensor<f32>) {
        v.push(t);
    }
    let mut t = ctx.full([2], 1.0f32)?;
    let mut v: Vec<&mut Tensor<f32>> = Vec::new();
    keep(&mut v, &mut t);
    *v[0] = ctx.full([3], 2.0f32)?;
    let mut out = ctx.zeros([4])?;
    ctx.all_gather(&t, &mut out, 0)?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn returned_by_a_call(ctx: &mut Ctx) -> Result<()> {
    fn pick(a: &mut Tensor<f32>) -> &mut Tensor<f32> {
        a
    }
    let mut t = ctx.full([2], 1.0f32)?;
    *pick(&mut t) = ctx.full([3], 2.0f32)?;
    let mut out = ctx.zeros([4])?;
    ctx.all_gather(&t, &mut out, 0)?;
    Ok(())
}

fn main() {}
