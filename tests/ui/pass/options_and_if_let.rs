use rankwise::prelude::*;

// A pipeline hand-off written with `Option`s, as pipeline-parallel code is: each stage receives
// from the previous one if there is one, and sends to the next if there is one. The macro
// follows `if let Some(…)`, `match` on `Some`/`None`, and `Option`s built from ranks.
#[rankwise::program(world in 1..=4)]
fn pipeline(ctx: &mut Ctx) -> Result<Vec<f32>> {
    let (rank, world) = (ctx.rank(), ctx.world());
    let prev = if rank > 0 { Some(rank - 1) } else { None };
    let next = (rank + 1 < world).then_some(rank + 1);
    let mut act = ctx.full([2], 0.0f32)?;
    if let Some(p) = prev {
        ctx.recv(&mut act, p)?;
    }
    let stage = act.to_vec().iter().map(|x| x + 1.0).collect::<Vec<f32>>();
    let out = ctx.tensor([2], stage)?;
    match next {
        Some(n) => ctx.send(&out, n)?,
        None => {}
    }
    // The last stage holds the result; everyone gets it (its rank found through `?` on an
    // `Option` in a helper, which unwraps a `Some`).
    fn last_of(prev: Option<usize>, world: usize) -> Option<usize> {
        let _ = prev?;
        Some(world - 1)
    }
    let last = last_of(Some(rank), world).unwrap_or(0);
    let mut result = out;
    ctx.broadcast(&mut result, last)?;
    Ok(result.to_vec())
}

fn main() {
    for world in 1..=4usize {
        let got = spawn(world, pipeline).unwrap();
        assert_eq!(got, vec![vec![world as f32; 2]; world], "world {world}");
    }
}
