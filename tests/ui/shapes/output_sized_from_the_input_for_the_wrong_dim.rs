use rankwise::prelude::*;

// The output is sized from the input, but for a gather along rows while the call gathers
// along columns.
#[rankwise::program(world = 3)]
fn sized_for_rows(ctx: &mut Ctx) -> Result<()> {
    let local = ctx.full([2, 4], 1.0f32)?;
    let mut shape = local.shape().to_vec();
    shape[0] *= ctx.world();
    let mut out = ctx.zeros::<f32>(shape)?;
    ctx.all_gather(&local, &mut out, 1)?;
    Ok(())
}

fn main() {}
