use rankwise::prelude::*;

// `continue 'ranks` skips rank 1's barrier; every other rank makes one per outer iteration.
#[rankwise::program(world = 2)]
fn rounds(ctx: &mut Ctx) -> Result<()> {
    'ranks: for round in 0..2 {
        for _ in 0..1 {
            if ctx.rank() == 1 && round == 1 {
                continue 'ranks;
            }
        }
        ctx.barrier()?;
    }
    Ok(())
}

fn main() {}
