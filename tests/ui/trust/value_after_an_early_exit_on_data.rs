use rankwise::prelude::*;

// A `break` or `continue` on run-time data may end a loop (or skip the rest of an iteration)
// where the macro goes on: what the loop assigns after it, and the value a `loop` or labelled
// block ends with, are unknown (each rank may have left at another point).
#[rankwise::program(world = 2)]
fn exits(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], ctx.rank() as f32)?;
    let data = t.as_slice()?[0] > 0.5;

    let mut a = 0;
    for i in 0..2 {
        if data {
            break;
        }
        a = i;
    }
    ctx.broadcast(&mut t, a)?;

    let mut b = 1;
    let mut n = 0;
    while n < 1 {
        n += 1;
        if data {
            continue;
        }
        b = 0;
    }
    ctx.broadcast(&mut t, b)?;

    let c = 'found: {
        if data {
            break 'found 0;
        }
        1
    };
    ctx.broadcast(&mut t, c)?;

    let d = loop {
        if data {
            break 0;
        }
        break 1;
    };
    ctx.broadcast(&mut t, d)?;
    Ok(())
}

fn main() {}
