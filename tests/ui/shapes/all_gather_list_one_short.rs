use rankwise::prelude::*;

// The list is sized for the old world of 2: at world 4 it holds one tensor too few per member.
#[rankwise::program(world in [2, 4])]
fn gather_all(ctx: &mut Ctx) -> Result<()> {
    let t = ctx.full([3], ctx.rank() as f32)?;
    let mut gathered = vec![Tensor::<f32>::zeros([3])?; 2];
    ctx.all_gather_list(&t, &mut gathered)?;
    Ok(())
}

fn main() {}
