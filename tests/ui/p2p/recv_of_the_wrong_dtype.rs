use rankwise::prelude::*;

#[rankwise::program(world = 2)]
fn dtypes(ctx: &mut Ctx) -> Result<()> {
    if ctx.rank() == 0 {
        let x = ctx.full([4], 1i64)?;
        ctx.send(&x, 1)?;
    } else {
        let mut y = ctx.zeros::<i32>([4])?;
        ctx.recv(&mut y, 0)?;
    }
    Ok(())
}

fn main() {}
