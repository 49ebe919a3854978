use rankwise::prelude::*;

// Even ranks send first, odd ranks receive first: every pair meets, at every world size.
#[rankwise::program(world in 2..=8)]
fn exchange(ctx: &mut Ctx) -> Result<f32> {
    let rank = ctx.rank();
    let peer = rank ^ 1;
    let mine = ctx.full([2], rank as f32)?;
    let mut theirs = ctx.zeros::<f32>([2])?;
    if peer < ctx.world() {
        if rank % 2 == 0 {
            ctx.send(&mine, peer)?;
            ctx.recv(&mut theirs, peer)?;
        } else {
            ctx.recv(&mut theirs, peer)?;
            ctx.send(&mine, peer)?;
        }
    }
    Ok(theirs.to_vec()[0])
}

fn main() {
    for world in 2..=8 {
        let got = spawn(world, exchange).unwrap();
        for (r, v) in got.into_iter().enumerate() {
            let want = if (r ^ 1) < world { (r ^ 1) as f32 } else { 0.0 };
            assert_eq!(v, want);
        }
    }
}
