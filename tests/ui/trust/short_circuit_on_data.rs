use rankwise::prelude::*;

// The right side of `&&`/`||` runs only if the left side does not decide. The macro once ran
// it whatever the left side was: after `data && it.next().is_some()`, `it` had moved on for
// the macro (root 1) but not in a run where `data` is false (root 0); and a call on the right
// was taken for one every rank makes.
#[rankwise::program(world = 2)]
fn advanced(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    let data = t.to_vec()[0] > 5.0;
    let peers = vec![0usize, 1];
    let mut it = peers.iter();
    let _ = data && it.next().is_some();
    ctx.broadcast(&mut t, *it.next().unwrap_or(&0))?;
    Ok(())
}

#[rankwise::program(world = 2)]
fn called(ctx: &mut Ctx) -> Result<()> {
    let t = ctx.full([2], 1.0f32)?;
    let data = t.to_vec()[0] > 5.0;
    let _ = data || ctx.barrier().is_ok();
    Ok(())
}

fn main() {}
