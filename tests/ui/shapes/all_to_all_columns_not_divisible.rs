use rankwise::prelude::*;

#[rankwise::program(world = 2)]
fn uneven_columns(ctx: &mut Ctx) -> Result<()> {
    let input = ctx.full([5, 3], 1i32)?;
    let mut output = ctx.zeros::<i32>([5, 3])?;
    ctx.all_to_all(&input, &mut output, 1)?;
    Ok(())
}

fn main() {}
