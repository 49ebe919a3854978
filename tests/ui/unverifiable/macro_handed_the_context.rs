use rankwise::prelude::*;

macro_rules! sum_all {
    ($ctx:ident, $t:ident) => {
        $ctx.all_reduce(&mut $t, ReduceOp::Sum)?
    };
}

#[rankwise::program(world = 2)]
fn hidden(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([1], 1.0f32)?;
    println!("rank {} of {}", ctx.rank(), ctx.world()); // fine: formatting only
    sum_all!(ctx, t);
    Ok(())
}

fn main() {}
