use rankwise::prelude::*;

trait SumAll {
    fn sum_all(&mut self, t: &mut Tensor<f32>) -> Result<()>;
}

impl SumAll for Ctx {
    fn sum_all(&mut self, t: &mut Tensor<f32>) -> Result<()> {
        self.all_reduce(t, ReduceOp::Sum)
    }
}

// A method the macro does not know, on the context: it may communicate.
#[rankwise::program(world = 2)]
fn via_trait(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([1], 1.0f32)?;
    ctx.sum_all(&mut t)?;
    Ok(())
}

fn main() {}
