use rankwise::prelude::*;

#[rankwise::program(world = 3)]
fn wrong_source(ctx: &mut Ctx) -> Result<()> {
    let x = ctx.full([2], 1i64)?;
    let mut y = ctx.zeros::<i64>([2])?;
    match ctx.rank() {
        0 => ctx.send(&x, 2)?,
        2 => ctx.recv(&mut y, 1)?,
        _ => {}
    }
    Ok(())
}

fn main() {}
