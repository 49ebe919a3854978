use rankwise::prelude::*;

// A closure that assigns only its own names is evaluated when called; one that writes through
// a `&mut` parameter changes what it is lent. What is lent to it is forgotten, as for a helper.
#[rankwise::program(world = 2)]
fn lent(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    let mut x = 0usize;
    let set = |r: &mut usize| {
        *r = 1;
    };
    set(&mut x);
    ctx.broadcast(&mut t, x)?;

    let mut v = vec![0usize];
    let grow = |w: &mut Vec<usize>| w.push(1);
    grow(&mut v);
    ctx.broadcast(&mut t, v.len() - 1)?;
    Ok(())
}

fn main() {}
