use rankwise::prelude::*;

// `?` on a `None` returns `None` from the closure or helper it is in. The macro once went on
// past it, as if `?` gave its operand back: `first(None)` was `Some(0)` to the macro, `None`
// (so root 1) to the program. Now such a call's value is unknown, and so is one whose `?` may
// return early.
#[rankwise::program(world = 2)]
fn roots(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    let first = |o: Option<usize>| -> Option<usize> {
        o?;
        Some(0)
    };
    ctx.broadcast(&mut t, first(None).unwrap_or(1))?;

    fn second(o: Option<usize>) -> Option<usize> {
        o?;
        Some(0)
    }
    ctx.broadcast(&mut t, second(None).unwrap_or(1))?;

    // The same on an `Option` the data decides: the macro once went on past `?` on a value it
    // did not know, and took `Some(0)` for `third`'s value whatever `data` held.
    let data = t.to_vec()[0] > 5.0;
    let third = |o: Option<usize>| -> Option<usize> {
        o?;
        Some(0)
    };
    ctx.broadcast(&mut t, third(if data { Some(1) } else { None }).unwrap_or(1))?;
    Ok(())
}

fn main() {}
