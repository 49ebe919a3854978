use rankwise::prelude::*;

// A function named where a closure goes, handed to a method that calls it on what `iter_mut`
// lends: it may write through its input. The macro once looked only at closures written at
// the call, so `lists[0]` kept its two elements for the macro (root 0) while the program
// cleared it (root 2). Now what was lent is unknown from there on.
#[rankwise::program(world = 4)]
fn cleared(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;

    let mut a = vec![vec![1usize, 0]];
    a.iter_mut().for_each(Vec::clear);
    ctx.broadcast(&mut t, 2 - a[0].len())?;

    fn clear_it(l: &mut Vec<usize>) {
        l.clear();
    }
    let mut b = vec![vec![1usize, 0]];
    b.iter_mut().for_each(clear_it);
    ctx.broadcast(&mut t, 2 - b[0].len())?;

    let mut c = vec![vec![1usize, 0]];
    let f: Box<dyn FnMut(&mut Vec<usize>)> = Box::new(|l| l.clear());
    c.iter_mut().for_each(f);
    ctx.broadcast(&mut t, 2 - c[0].len())?;
    Ok(())
}

fn main() {}
