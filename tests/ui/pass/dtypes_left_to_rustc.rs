use rankwise::prelude::*;

// Data from a function the macro does not read: its element type is rustc's to know. The macro
// checks everything else and has rustc check that the calls which meet move one element type.
fn load(rank: usize) -> Vec<f32> {
    vec![rank as f32; 4]
}

#[rankwise::program(world in 2..=4)]
fn exchange(ctx: &mut Ctx) -> Result<Vec<f32>> {
    let (r, w) = (ctx.rank(), ctx.world());
    let mut t = ctx.tensor([4], load(r))?;
    ctx.all_reduce(&mut t, ReduceOp::Sum)?;
    let mut from_prev = ctx.zeros_like(&t)?;
    let posted = ctx.isend(&t, (r + 1) % w)?;
    ctx.recv(&mut from_prev, (r + w - 1) % w)?;
    posted.wait()?;
    // A free element type meeting a known one.
    let mut known = ctx.zeros::<f32>([4])?;
    if r == 0 {
        ctx.send(&from_prev, 1)?;
    } else if r == 1 {
        ctx.recv(&mut known, 0)?;
    }
    // Through a reference held in a variable.
    let mut again = ctx.tensor([4], load(r))?;
    let held = &mut again;
    ctx.broadcast(held, 0)?;
    // Lists of tensors of that type: the single tensor of the call carries it.
    let mut parts = vec![ctx.zeros_like(&t)?; w];
    ctx.all_gather_list(&t, &mut parts)?;
    let mut mine = ctx.zeros_like(&t)?;
    ctx.reduce_scatter_list(&parts, &mut mine, ReduceOp::Max)?;
    let mut out = from_prev.to_vec();
    out.extend(known.to_vec());
    out.extend(mine.to_vec());
    assert_eq!(again.to_vec(), vec![0.0; 4]);
    Ok(out)
}

fn main() {
    for w in 2..=4usize {
        let got = spawn(w, exchange).unwrap();
        let sum = (0..w).sum::<usize>() as f32;
        for (r, v) in got.iter().enumerate() {
            let k = if r == 1 { sum } else { 0.0 };
            assert_eq!(*v, [[sum; 4], [k; 4], [sum; 4]].concat(), "world {w}, rank {r}");
        }
    }
}
