use rankwise::prelude::*;

// A binomial-tree broadcast from rank 0: in round k, the ranks that have the data send it to
// the rank 2^k above them. Round counts come from the world size, so `for` can be unrolled.
#[rankwise::program(world in 2..=9)]
fn tree_broadcast(ctx: &mut Ctx) -> Result<f64> {
    let rank = ctx.rank();
    let world = ctx.world();
    let mut value = ctx.full([1], if rank == 0 { 42.0 } else { 0.0f64 })?;
    let rounds = world.next_power_of_two().trailing_zeros();
    for round in 0..rounds {
        let k = 1 << round;
        if rank < k && rank + k < world {
            ctx.send(&value, rank + k)?;
        } else if rank >= k && rank < 2 * k {
            ctx.recv(&mut value, rank - k)?;
        }
    }
    Ok(value.to_vec()[0])
}

fn main() {
    for world in 2..=9 {
        assert_eq!(spawn(world, tree_broadcast).unwrap(), vec![42.0; world]);
    }
}
