use rankwise::prelude::*;

// The members come from an iterator chain the macro evaluates: the odd ranks are not in the
// group they use.
#[rankwise::program(world = 4)]
fn evens_only(ctx: &mut Ctx) -> Result<()> {
    let evens: Vec<usize> = (0..ctx.world()).filter(|x| x % 2 == 0).collect();
    let g = ctx.new_group(&evens)?;
    let mut t = ctx.full([1], 1.0f32)?;
    ctx.group(&g).all_reduce(&mut t, ReduceOp::Sum)?;
    Ok(())
}

fn main() {}
