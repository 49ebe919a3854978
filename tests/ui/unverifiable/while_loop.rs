use rankwise::prelude::*;

// The loop runs until the data says so: how many all_reduces each rank makes is known only at
// run time. (A `while` over static values is unrolled: see tests/ui/pass/while_loops.rs.)
#[rankwise::program(world = 4)]
fn until_large(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([1], 1.0f32)?;
    while t.to_vec()[0] < 100.0 {
        ctx.all_reduce(&mut t, ReduceOp::Sum)?;
    }
    Ok(())
}

fn main() {}
