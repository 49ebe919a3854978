use rankwise::prelude::*;

#[rankwise::program(world = 2)]
fn f() -> Result<()> {
    Ok(())
}

fn main() {}
