use rankwise::prelude::*;

// A shape from a name the macro cannot see is taken for a constant every rank shares. A
// `static mut` is not one (each rank of a process may write it, each process has its own):
// rustc now refuses it where the shape uses it. The macro once accepted this program, whose
// ranks then disagreed on the all_reduce's shape at run time.
static mut SIZE: usize = 4;

#[rankwise::program(world = 2)]
fn sized(ctx: &mut Ctx) -> Result<()> {
    if ctx.rank() == 0 {
        unsafe { SIZE = 8 };
    }
    let mut t = ctx.full([unsafe { SIZE }], 1.0f32)?;
    ctx.all_reduce(&mut t, ReduceOp::Sum)?;
    Ok(())
}

fn main() {}
