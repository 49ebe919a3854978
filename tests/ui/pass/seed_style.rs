use rankwise::prelude::*;

// Patterns from the seed tutorials: groups from member lists tested with `contains`, a value
// that depends on the rank through `if`, a tensor filled by a closure (its dtype comes from the
// closure's `as f32`), column all_gather and a row scatter from rank 0.
#[rankwise::program(world = 4)]
fn seed_style(ctx: &mut Ctx) -> Result<(f32, f32, f32)> {
    let rank = ctx.rank();
    let world = ctx.world();
    let group1_ranks = [0, 1];
    let group2_ranks = [2, 3];
    let group1 = ctx.new_group(group1_ranks)?;
    let group2 = ctx.new_group(group2_ranks)?;
    let mut tensor = ctx.full([1], rank as f32)?;
    let mut group1_sum = ctx.zeros::<f32>([1])?;
    let mut group2_sum = ctx.zeros::<f32>([1])?;
    if group1_ranks.contains(&rank) {
        ctx.group(&group1).all_reduce(&mut tensor, ReduceOp::Sum)?;
        group1_sum = tensor.clone();
    } else {
        ctx.group(&group2).all_reduce(&mut tensor, ReduceOp::Sum)?;
        group2_sum = tensor.clone();
    }
    ctx.all_reduce(&mut group1_sum, ReduceOp::Max)?;
    ctx.all_reduce(&mut group2_sum, ReduceOp::Max)?;

    let local = Tensor::from_fn([5, 2], |i| (rank * 10 + i[1]) as f32)?;
    let mut gathered = ctx.zeros::<f32>([5, 2 * world])?;
    ctx.all_gather(&local, &mut gathered, 1)?;

    let rows = Tensor::from_fn([world, 5], |i| i[0] as f32)?;
    let mut row = ctx.zeros::<f32>([1, 5])?;
    let root_rows = if rank == 0 { Some(&rows) } else { None };
    ctx.scatter(root_rows, &mut row, 0, 0)?;
    Ok((group1_sum.to_vec()[0], group2_sum.to_vec()[0], gathered.to_vec()[7] + row.to_vec()[0]))
}

fn main() {
    let got = spawn(4, seed_style).unwrap();
    for (r, (g1, g2, x)) in got.into_iter().enumerate() {
        assert_eq!((g1, g2), (1.0, 5.0));
        // Row 0, column 7 of the gathered [5, 8] tensor is rank 3's column 1: 31; rank r gets row r of 0..4.
        assert_eq!(x, 31.0 + r as f32);
    }
}
