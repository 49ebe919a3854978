use rankwise::prelude::*;

fn post(b: &mut rankwise::Batch<'_, '_>) {
    let _ = b.len();
}

#[rankwise::program(world = 2)]
fn hidden(ctx: &mut Ctx) -> Result<()> {
    let mut b = ctx.batch();
    post(&mut b);
    b.run()
}

fn main() {}
