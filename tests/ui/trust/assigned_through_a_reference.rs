use rankwise::prelude::*;

// `next` and `y` change through references the macro cannot follow: both are forgotten, so the
// calls that use them are RW012 rather than checked against stale values.
#[rankwise::program(world = 2)]
fn through_refs(ctx: &mut Ctx) -> Result<()> {
    let x = ctx.full([2], 1.0f32)?;
    let mut next = 1 - ctx.rank();
    let r = &mut next;
    *r = ctx.rank();
    let mut z = ctx.zeros::<f32>([2])?;
    let prev = 1 - ctx.rank();
    let mut b = ctx.batch();
    b.send(&x, next).recv(&mut z, prev);
    b.run()?;
    let mut y = ctx.zeros::<f32>([2])?;
    let t = if ctx.rank() == 0 { &mut y } else { &mut z };
    *t = ctx.zeros::<f32>([3])?;
    ctx.all_reduce(&mut y, ReduceOp::Sum)?;
    Ok(())
}

fn main() {}
