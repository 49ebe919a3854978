use rankwise::prelude::*;

// One buffer per peer in a `Vec` of static length, filled by a batch that iterates over it —
// the all-to-all written by hand.
#[rankwise::program(world in 2..=4)]
fn by_hand(ctx: &mut Ctx) -> Result<Vec<f32>> {
    let (r, w) = (ctx.rank(), ctx.world());
    let outgoing: Vec<Tensor<f32>> = (0..w)
        .map(|peer| ctx.full([2], (10 * r + peer) as f32))
        .collect::<Result<_>>()?;
    let mut incoming: Vec<Tensor<f32>> = (0..w).map(|_| ctx.zeros::<f32>([2])).collect::<Result<_>>()?;
    let mut b = ctx.batch();
    for (peer, buf) in incoming.iter_mut().enumerate() {
        b.recv(buf, peer);
    }
    for (peer, t) in outgoing.iter().enumerate() {
        b.send(t, peer);
    }
    b.run()?;
    Ok(incoming.iter().map(|t| t.to_vec()[0]).collect())
}

fn main() {
    for w in 2..=4usize {
        let got = spawn(w, by_hand).unwrap();
        for (r, v) in got.iter().enumerate() {
            let want: Vec<f32> = (0..w).map(|p| (10 * p + r) as f32).collect();
            assert_eq!(*v, want);
        }
    }
}
