use rankwise::prelude::*;

// Element types the way rustc infers them: from data (`vec![x as f32]`, a `Vec<f32>`
// annotation, `collect::<Vec<f32>>()`), from an annotation on a binding initialised later in
// branches, and from the other arm of an `if` or `match` when one arm has an unsuffixed literal.
#[rankwise::program(world in 2..=3)]
fn inferred(ctx: &mut Ctx) -> Result<Vec<f32>> {
    let (r, w) = (ctx.rank(), ctx.world());
    let x = r as f32 + 1.0;
    let mut a = ctx.tensor([1], vec![x as f32])?;
    ctx.all_reduce(&mut a, ReduceOp::Sum)?;

    let v: Vec<f32> = (0..4).map(|i| (i + r) as f32).collect();
    let mut b = ctx.tensor([4], v)?;
    ctx.all_reduce(&mut b, ReduceOp::Max)?;

    let c_data = (0..2).map(|i| i as f32).collect::<Vec<f32>>();
    let mut c = Tensor::from_vec([2], c_data)?;
    ctx.broadcast(&mut c, 0)?;

    // Deferred initialisation: the annotation gives the type both assignments have.
    let d: Tensor<f32>;
    if r == 0 {
        d = ctx.full([2], 7.0)?;
    } else {
        d = ctx.zeros([2])?;
    }
    let mut gathered = ctx.zeros::<f32>([2 * w])?;
    ctx.all_gather(&d, &mut gathered, 0)?;

    // One arm's unsuffixed literal is the other arm's f32.
    let mut e = if r == 0 {
        ctx.full([5, 2], 1.0)?
    } else {
        ctx.zeros::<f32>([5, 2])?
    };
    ctx.broadcast(&mut e, 0)?;
    let mut f = match r {
        0 => ctx.full([3], 2.5)?,
        _ => ctx.zeros::<f32>([3])?,
    };
    ctx.broadcast(&mut f, 0)?;

    // Unsuffixed on both sides of a message: f64 on both, by rustc's default.
    if r == 0 {
        ctx.send(&ctx.full([3], 2.0)?, 1)?;
    } else if r == 1 {
        let mut got: Tensor<f64> = ctx.zeros([3])?;
        ctx.recv(&mut got, 0)?;
    }
    let mut out = a.to_vec();
    out.extend(b.to_vec());
    out.extend(c.to_vec());
    out.extend(gathered.to_vec());
    out.push(e.to_vec()[0]);
    out.push(f.to_vec()[2]);
    Ok(out)
}

fn main() {
    for w in 2..=3usize {
        let got = spawn(w, inferred).unwrap();
        let sum: f32 = (1..=w).map(|x| x as f32).sum();
        for v in &got {
            assert_eq!(v[0], sum);
            assert_eq!(v[1..5], [(w - 1) as f32, w as f32, (w + 1) as f32, (w + 2) as f32]);
            assert_eq!(v[5..7], [0.0, 1.0]);
            let mut g = vec![7.0, 7.0];
            g.extend(vec![0.0; 2 * (w - 1)]);
            assert_eq!(v[7..7 + 2 * w], g[..]);
            assert_eq!(v[7 + 2 * w..], [1.0, 2.5]);
        }
    }
}
