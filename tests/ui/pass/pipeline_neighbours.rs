use rankwise::prelude::*;

// A pipeline's neighbours as `Option`s (`checked_sub` for the one before, `then_some` for the
// one after), and a list of tensors grown by `push` from `Vec::new()` for a list collective.
#[rankwise::program(world in 2..=4)]
fn pipeline(ctx: &mut Ctx) -> Result<(f32, Vec<f32>)> {
    let (rank, world) = (ctx.rank(), ctx.world());
    let prev = rank.checked_sub(1);
    let next = (rank + 1 < world).then_some(rank + 1);

    // Stage by stage: each adds its rank to what arrives and hands it on.
    let mut act = ctx.zeros::<f32>([2])?;
    if let Some(p) = prev {
        ctx.recv(&mut act, p)?;
    }
    let mine: Vec<f32> = act.to_vec().iter().map(|x| x + rank as f32).collect();
    let act = ctx.tensor([2], mine)?;
    if let Some(n) = next {
        ctx.send(&act, n)?;
    }
    // The last stage's value, to everyone.
    let mut out = act.clone();
    ctx.broadcast(&mut out, world - 1)?;

    // Every stage's rank, gathered into a list built by `push`.
    let mut all = Vec::new();
    for _ in 0..world {
        all.push(ctx.zeros::<f32>([1])?);
    }
    let me = ctx.full([1], rank as f32)?;
    ctx.all_gather_list(&me, &mut all)?;
    Ok((out.to_vec()[0], all.iter().map(|t| t.to_vec()[0]).collect()))
}

fn main() {
    for world in 2..=4usize {
        let total = (0..world).sum::<usize>() as f32;
        let ranks: Vec<f32> = (0..world).map(|r| r as f32).collect();
        for (r, (last, all)) in spawn(world, pipeline).unwrap().into_iter().enumerate() {
            assert_eq!(last, total, "world {world} rank {r}");
            assert_eq!(all, ranks, "world {world} rank {r}");
        }
    }
}
