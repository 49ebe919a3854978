use rankwise::prelude::*;

// Every collective, rows and columns, roots other than 0, a split into halves and a group.
#[rankwise::program(world in [2, 4])]
fn tour(ctx: &mut Ctx) -> Result<f32> {
    let rank = ctx.rank();
    let world = ctx.world();
    let half = world / 2;
    let lo: Vec<usize> = (0..half).collect();
    let hi: Vec<usize> = (half..world).collect();
    let mine = ctx.split(&[&lo, &hi])?;
    let evens = ctx.new_group([0])?;

    let mut t = ctx.full([2, 5], rank as f32)?;
    ctx.all_reduce(&mut t, ReduceOp::Sum)?;
    ctx.reduce(&mut t, world - 1, ReduceOp::Max)?;
    ctx.broadcast(&mut t, 1)?;

    let local = ctx.full([5, 2], rank as f32)?;
    let mut cols = ctx.zeros::<f32>([5, 2 * world])?;
    ctx.all_gather(&local, &mut cols, 1)?;
    let mut gathered = ctx.zeros::<f32>([world, 2])?;
    let row = ctx.full([1, 2], rank as f32)?;
    let root = world - 1;
    ctx.gather(&row, if rank == root { Some(&mut gathered) } else { None }, root, 0)?;
    let mut part = ctx.zeros::<f32>([5, 2])?;
    ctx.scatter((rank == 0).then_some(&cols), &mut part, 0, 1)?;
    let mut reduced = ctx.zeros::<f32>([5, 2])?;
    ctx.reduce_scatter(&cols, &mut reduced, ReduceOp::Sum, 1)?;
    let mut swapped = ctx.zeros::<f32>([5, 2 * world])?;
    ctx.all_to_all(&cols, &mut swapped, 1)?;

    let mut g = ctx.full([3], 1.0f32)?;
    ctx.group(&mine).all_reduce(&mut g, ReduceOp::Sum)?;
    if evens.contains(rank) {
        ctx.group(&evens).barrier()?;
    }
    let mut b = ctx.batch();
    b.all_reduce(&mut t, ReduceOp::Min);
    b.group(&mine).broadcast(&mut g, mine.members()[0]);
    b.run()?;
    ctx.barrier()?;
    Ok(g.to_vec()[0])
}

fn main() {
    for world in [2, 4] {
        let got = spawn(world, tour).unwrap();
        assert_eq!(got, vec![(world / 2) as f32; world]);
    }
}
