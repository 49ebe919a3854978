use rankwise::prelude::*;

// torch's list spellings, written as a PyTorch user writes them: `gather_list = [zeros_like(t)
// for _ in range(world)]; all_gather(gather_list, t)`, a scatter list on the root only, a
// reduce_scatter and an all_to_all from lists built per peer.
#[rankwise::program(world in 1..=4)]
fn lists(ctx: &mut Ctx) -> Result<Vec<f32>> {
    let (r, w) = (ctx.rank(), ctx.world());
    let t = ctx.full([3], r as f32)?;
    let mut gathered: Vec<Tensor<f32>> = (0..w).map(|_| ctx.zeros_like(&t)).collect::<Result<_>>()?;
    ctx.all_gather_list(&t, &mut gathered)?;

    let mut at_root = vec![Tensor::zeros([3])?; w];
    ctx.gather_list(&t, if r == 0 { Some(&mut at_root[..]) } else { None }, 0)?;

    let parts: Vec<Tensor<f32>> = (0..w).map(|i| ctx.full([3], i as f32)).collect::<Result<_>>()?;
    let mut mine = ctx.zeros::<f32>([3])?;
    ctx.scatter_list((r == 0).then_some(&parts[..]), &mut mine, 0)?;

    let mut reduced = ctx.zeros::<f32>([3])?;
    ctx.reduce_scatter_list(&parts, &mut reduced, ReduceOp::Sum)?;

    let mut swapped = vec![Tensor::<f32>::zeros([3])?; w];
    ctx.all_to_all_list(&parts, &mut swapped)?;

    let mut out: Vec<f32> = gathered.iter().map(|g| g.to_vec()[0]).collect();
    out.extend([mine.to_vec()[0], reduced.to_vec()[0]]);
    out.extend(swapped.iter().map(|s| s.to_vec()[0]));
    Ok(out)
}

fn main() {
    for w in 1..=4usize {
        let got = spawn(w, lists).unwrap();
        for (r, v) in got.iter().enumerate() {
            let mut want: Vec<f32> = (0..w).map(|p| p as f32).collect();
            want.extend([r as f32, (w * r) as f32]);
            want.extend((0..w).map(|_| r as f32));
            assert_eq!(*v, want, "world {w}, rank {r}");
        }
    }
}
