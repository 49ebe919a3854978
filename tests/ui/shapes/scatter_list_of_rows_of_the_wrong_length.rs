use rankwise::prelude::*;

// Rows of 4 scattered into outputs of 5.
#[rankwise::program(world = 4)]
fn rows(ctx: &mut Ctx) -> Result<()> {
    let rows: Vec<Tensor<f32>> = (0..4).map(|i| ctx.full([4], i as f32)).collect::<Result<_>>()?;
    let mut row = ctx.zeros::<f32>([5])?;
    let root = ctx.rank() == 0;
    ctx.scatter_list(if root { Some(&rows[..]) } else { None }, &mut row, 0)?;
    Ok(())
}

fn main() {}
