use rankwise::prelude::*;

#[rankwise::program(ranks = 4)]
fn f(ctx: &mut Ctx) -> Result<()> {
    ctx.barrier()
}

fn main() {}
