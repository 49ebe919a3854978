use rankwise::prelude::*;

const CHUNK: usize = 3;

#[rankwise::program(world = 4)]
fn gather(ctx: &mut Ctx) -> Result<()> {
    let input = ctx.full([CHUNK], 1.0f32)?;
    let mut output = ctx.zeros::<f32>([CHUNK * 2])?;
    ctx.all_gather(&input, &mut output, 0)?;
    Ok(())
}

fn main() {}
