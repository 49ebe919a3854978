use rankwise::prelude::*;

#[rankwise::program(world = 2)]
fn second(n: usize, ctx: &mut Ctx) -> Result<()> {
    let _ = n;
    ctx.barrier()
}

fn main() {}
