use rankwise::prelude::*;

const CHUNK: usize = 2;

// Shapes from a constant defined outside the function: checked with the constant as a symbol,
// its divisibility left to rustc as a `const` assertion (4 * CHUNK splits into 2 and 4 parts).
#[rankwise::program(world in [2, 4])]
fn chunks(ctx: &mut Ctx) -> Result<Vec<f32>> {
    let input = ctx.full([CHUNK * 4], ctx.rank() as f32)?;
    let mut output = ctx.zeros::<f32>([CHUNK * 4 / ctx.world()])?;
    ctx.reduce_scatter(&input, &mut output, ReduceOp::Sum, 0)?;
    let mut all = ctx.zeros::<f32>([CHUNK * 4])?;
    ctx.all_gather(&output, &mut all, 0)?;
    Ok(all.to_vec())
}

// Constants of the body (followed as values) and an immutable `static` (a constant rustc can
// evaluate, like a `const`).
static ROWS: usize = 3;

#[rankwise::program(world = 2)]
fn local(ctx: &mut Ctx) -> Result<Vec<f32>> {
    const PART: usize = 2;
    const BOTH: usize = PART * 2;
    let t = ctx.full([PART, ROWS], ctx.rank() as f32)?;
    let mut all = ctx.zeros::<f32>([BOTH, ROWS])?;
    ctx.all_gather(&t, &mut all, 0)?;
    Ok(all.to_vec())
}

fn main() {
    for world in [2usize, 4] {
        let sum = (0..world).sum::<usize>() as f32;
        assert_eq!(spawn(world, chunks).unwrap(), vec![vec![sum; 8]; world]);
    }
    let rows = [vec![0.0f32; 6], vec![1.0; 6]].concat();
    assert_eq!(spawn(2, local).unwrap(), vec![rows.clone(), rows]);
}
