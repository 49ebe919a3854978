use rankwise::prelude::*;

// A tensor keeps its shape through its own methods, but a trait's method may replace it through
// `&mut self`. The macro took every method to keep it, and checked the all_gather below against
// the shape [2] where the run gathered [3] (the run-time shape check stopped it). The trait is
// outside the function, where the macro cannot see it: any method that is not the tensor's own
// now forgets its shape, also through a reference and in code on data.
trait Grow {
    fn grow(&mut self) -> Result<()>;
}

impl Grow for Tensor<f32> {
    fn grow(&mut self) -> Result<()> {
        *self = Tensor::full([3], 2.0f32)?;
        Ok(())
    }
}

#[rankwise::program(world = 2)]
fn called_on_the_tensor(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    t.grow()?;
    let mut out = ctx.zeros([4])?;
    ctx.all_gather(&t, &mut out, 0)?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn called_through_a_reference(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    let r = &mut t;
    r.grow()?;
    let mut out = ctx.zeros([4])?;
    ctx.all_gather(&t, &mut out, 0)?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn called_under_a_condition_on_data(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    if t.to_vec()[0] > 0.5 {
        t.grow()?;
    }
    let mut out = ctx.zeros([4])?;
    ctx.all_gather(&t, &mut out, 0)?;
    Ok(())
}

fn main() {}
