use rankwise::prelude::*;

// Recursive-doubling all-reduce for power-of-two worlds: in round k every rank exchanges its
// partial sum with the rank whose number differs in bit k.
#[rankwise::program(world in [2, 4, 8, 16])]
fn doubling_sum(ctx: &mut Ctx) -> Result<i64> {
    let rank = ctx.rank();
    let rounds = ctx.world().trailing_zeros();
    let mut sum = ctx.full([1], rank as i64)?;
    let mut theirs = ctx.zeros::<i64>([1])?;
    for round in 0..rounds {
        let peer = rank ^ (1 << round);
        let mut b = ctx.batch();
        b.send(&sum, peer);
        b.recv(&mut theirs, peer);
        b.run()?;
        let add = theirs.as_slice()?[0];
        sum.as_mut_slice()?[0] += add;
    }
    Ok(sum.to_vec()[0])
}

fn main() {
    for world in [2usize, 4, 8, 16] {
        let total = (world * (world - 1) / 2) as i64;
        assert_eq!(spawn(world, doubling_sum).unwrap(), vec![total; world]);
    }
}
