use rankwise::prelude::*;

// A pattern's bindings are references into what it matches when it matches `&mut x`, or binds
// by `ref mut`: writing through them changes `x`. The macro once bound copies, and kept `x` as
// it was (root 0 to the macro, 1 to the program). Now `x` is unknown from there on.
#[rankwise::program(world = 2)]
fn borrowed(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;

    let mut a = Some(0usize);
    if let Some(p) = &mut a {
        *p = 1;
    }
    ctx.broadcast(&mut t, a.unwrap())?;

    let mut b = Some(0usize);
    match b {
        Some(ref mut p) => *p = 1,
        None => {}
    }
    ctx.broadcast(&mut t, b.unwrap())?;

    let mut c = (0usize, 0usize);
    let (ref mut first, _) = c;
    *first = 1;
    ctx.broadcast(&mut t, c.0)?;

    let mut d = [0usize, 0];
    if let [ref mut head, _] = d {
        *head = 1;
    }
    ctx.broadcast(&mut t, d[0])?;
    Ok(())
}

fn main() {}
