// The macro evaluates the module's helper: every rank receives from the rank it sends to, so
// each receive waits for a message that is never sent.
#[rankwise::program]
mod ring {
    use rankwise::prelude::*;

    fn next(r: usize, w: usize) -> usize {
        (r + 1) % w
    }

    #[rankwise::program(world = 3)]
    pub fn shift(ctx: &mut Ctx) -> Result<()> {
        let (r, w) = (ctx.rank(), ctx.world());
        let x = ctx.full([2], 1.0f32)?;
        let mut y = ctx.zeros::<f32>([2])?;
        let mut b = ctx.batch();
        b.send(&x, next(r, w)).recv(&mut y, next(r, w));
        b.run()?;
        Ok(())
    }
}

fn main() {}
