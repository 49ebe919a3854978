use rankwise::prelude::*;

// `?` on a `None` returns `None` from the closure or helper it is in. The macro once went on
// past it, as if `?` gave its operand back: `first(None)` was `Some(0)` to the macro, `None`
// (so root 1) to the program. Now such a call's value is unknown.
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
    Ok(())
}

fn main() {}
