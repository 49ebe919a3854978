use rankwise::prelude::*;

#[rankwise::program(world in [])]
fn f(ctx: &mut Ctx) -> Result<()> {
    ctx.barrier()
}

fn main() {}
