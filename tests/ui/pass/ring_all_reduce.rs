use rankwise::prelude::*;

// A ring all-reduce written by hand: W−1 reduce-scatter steps, then W−1 all-gather steps, each
// a send to the next rank and a recv from the previous one, posted together.
#[rankwise::program(world in 2..=16)]
fn ring_all_reduce(ctx: &mut Ctx) -> Result<Vec<f32>> {
    let rank = ctx.rank();
    let world = ctx.world();
    let next = (rank + 1) % world;
    let prev = (rank + world - 1) % world;
    let chunk = 3;
    let mut data: Vec<f32> = (0..world * chunk).map(|i| (rank * 100 + i) as f32).collect();
    let mut outgoing = ctx.zeros::<f32>([3])?;
    let mut incoming = ctx.zeros::<f32>([3])?;
    for step in 0..2 * (world - 1) {
        let reducing = step < world - 1;
        let s = step % (world - 1);
        let send_chunk = if reducing { (rank + world - s) % world } else { (rank + 1 + world - s) % world };
        let recv_chunk = (send_chunk + world - 1) % world;
        outgoing.as_mut_slice()?.copy_from_slice(&data[send_chunk * chunk..][..chunk]);
        let mut b = ctx.batch();
        b.send(&outgoing, next);
        b.recv(&mut incoming, prev);
        b.run()?;
        let got = incoming.as_slice()?;
        for (d, x) in data[recv_chunk * chunk..][..chunk].iter_mut().zip(got) {
            *d = if reducing { *d + *x } else { *x };
        }
    }
    Ok(data)
}

fn main() {
    for world in [2, 3, 5, 8, 16] {
        let got = spawn(world, ring_all_reduce).unwrap();
        let want: Vec<f32> =
            (0..world * 3).map(|i| (0..world).map(|r| (r * 100 + i) as f32).sum()).collect();
        for data in got {
            assert_eq!(data, want, "world {world}");
        }
    }
}
