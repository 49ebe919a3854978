use rankwise::prelude::*;

#[rankwise::program(world = 2)]
fn per_tensor(ctx: &mut Ctx, mut tensors: Vec<Tensor<f32>>) -> Result<()> {
    for t in tensors.iter_mut() {
        ctx.all_reduce(t, ReduceOp::Sum)?;
    }
    Ok(())
}

fn main() {}
