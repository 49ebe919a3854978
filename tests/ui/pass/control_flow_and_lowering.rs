use rankwise::prelude::*;

const CHUNK: usize = 2;

// `break`, `continue`, labelled blocks and loops that only compute values, all followed
// exactly: the program is accepted because it is right, and runs.
#[rankwise::program(world in 2..=5)]
fn control_flow(ctx: &mut Ctx) -> Result<f32> {
    let (r, w) = (ctx.rank(), ctx.world());
    // `next` found by a loop that does not communicate.
    let mut next = 0;
    for candidate in 0..w {
        if candidate == (r + 1) % w {
            next = candidate;
            break;
        }
    }
    let prev = 'found: {
        for candidate in 0..w {
            if (candidate + 1) % w == r {
                break 'found candidate;
            }
        }
        0
    };
    let x = ctx.full([2], r as f32)?;
    let mut y = ctx.zeros::<f32>([2])?;
    let mut b = ctx.batch();
    b.send(&x, next).recv(&mut y, prev);
    b.run()?;
    // Barriers on every round but the skipped one, on every rank alike.
    'rounds: for round in 0..3 {
        for _ in 0..2 {
            if round == 1 {
                continue 'rounds;
            }
        }
        ctx.barrier()?;
    }
    // Values computed from data in code that does not communicate are fine.
    let mut scale = 1.0f32;
    if y.as_slice()?[0] > 100.0 {
        scale = 0.5;
    }
    Ok(y.to_vec()[0] * scale)
}

// A reference held in a variable is not batched with a call that reads the same tensor.
#[rankwise::program(world = 3)]
fn borrowed(ctx: &mut Ctx) -> Result<f32> {
    let mut x = ctx.full([1], ctx.rank() as f32)?;
    match ctx.rank() {
        0 => {
            let r = &mut x;
            ctx.recv(r, 1)?;
            ctx.send(&x, 2)?;
        }
        1 => ctx.send(&x, 0)?,
        _ => ctx.recv(&mut x, 0)?,
    }
    Ok(x.to_vec()[0])
}

// A const generic used in a shape: its divisibility check is an inline `const` block.
#[rankwise::program(world in [2, 4])]
fn generic<const N: usize>(ctx: &mut Ctx) -> Result<Vec<f32>> {
    let input = ctx.full([N * CHUNK * 4], 1.0f32)?;
    let mut output = ctx.zeros::<f32>([N * CHUNK * 4 / ctx.world()])?;
    ctx.reduce_scatter(&input, &mut output, ReduceOp::Sum, 0)?;
    Ok(output.to_vec())
}

// The same in brackets: the generic parameter is found inside them.
#[rankwise::program(world in [2, 4])]
fn generic_in_brackets<const N: usize>(ctx: &mut Ctx) -> Result<Vec<f32>> {
    let input = ctx.full([(N + 1) * CHUNK * 4], 1.0f32)?;
    let mut output = ctx.zeros::<f32>([(N + 1) * CHUNK * 4 / ctx.world()])?;
    ctx.reduce_scatter(&input, &mut output, ReduceOp::Sum, 0)?;
    Ok(output.to_vec())
}

// The attribute twice: each expansion keeps its names to itself, and both guards hold.
#[rankwise::program(world = 2)]
#[rankwise::program(world in [2, 3])]
fn twice(ctx: &mut Ctx) -> Result<()> {
    ctx.barrier()
}

fn main() {
    assert!(spawn(2, twice).is_ok());
    assert!(spawn(3, twice).is_err()); // the outer guard was checked for 2 only
    for world in 2..=5 {
        let got = spawn(world, control_flow).unwrap();
        for (r, v) in got.into_iter().enumerate() {
            assert_eq!(v, ((r + world - 1) % world) as f32);
        }
    }
    assert_eq!(spawn(3, borrowed).unwrap(), vec![1.0, 1.0, 1.0]);
    assert_eq!(spawn(2, generic::<1>).unwrap(), vec![vec![2.0; 4]; 2]);
    assert_eq!(spawn(4, generic::<2>).unwrap(), vec![vec![4.0; 4]; 4]);
    assert_eq!(
        spawn(2, generic_in_brackets::<1>).unwrap(),
        vec![vec![2.0; 8]; 2]
    );
}
