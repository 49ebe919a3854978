use rankwise::prelude::*;

// A `const` of a block is that block's: the macro once took every `N` for the module's, so
// the send of 4 elements and the receive of 8 looked alike. A block's `static mut` is never
// known (every rank of the process shares it).
const N: usize = 4;

#[rankwise::program(world = 2)]
fn shadowed(ctx: &mut Ctx) -> Result<()> {
    let t = ctx.full([N], 1.0f32)?;
    if ctx.rank() == 0 {
        ctx.send(&t, 1)?;
    } else {
        const N: usize = 8;
        let mut u = ctx.zeros::<f32>([N])?;
        ctx.recv(&mut u, 0)?;
    }
    Ok(())
}

#[rankwise::program(world = 2)]
fn shared(ctx: &mut Ctx) -> Result<()> {
    static mut COUNT: usize = 2;
    if ctx.rank() == 0 {
        unsafe { COUNT = 3 };
    }
    let mut v = ctx.full([unsafe { COUNT }], 1.0f32)?;
    ctx.all_reduce(&mut v, ReduceOp::Sum)?;
    Ok(())
}

fn main() {}
