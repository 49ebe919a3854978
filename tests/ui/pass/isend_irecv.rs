use rankwise::prelude::*;

// torch's non-blocking point-to-point as users write it: every rank posts its send first
// around a ring (the fix for "both ranks send first"), posts in both directions and waits in
// either order, and leaves a request to the rank's return (or drops it: it is still delivered).
#[rankwise::program(world in 2..=6)]
fn ring(ctx: &mut Ctx) -> Result<Vec<f32>> {
    let (r, w) = (ctx.rank(), ctx.world());
    let next = (r + 1) % w;
    let prev = (r + w - 1) % w;
    let mine = ctx.full([3], r as f32)?;
    let mut from_prev = ctx.zeros::<f32>([3])?;
    let send = ctx.isend(&mine, next)?;
    ctx.recv(&mut from_prev, prev)?;
    send.wait()?;

    let mut from_next = ctx.zeros::<f32>([3])?;
    let back = ctx.isend(&mine, prev)?;
    let recv = ctx.irecv(&mut from_next, next)?;
    if r % 2 == 0 {
        recv.wait()?;
        back.wait()?;
    } else {
        back.wait()?;
        recv.wait()?;
    }
    // Left to the return: the rank finishes only once it is delivered.
    let _unwaited = ctx.isend(&mine, next)?;
    let mut last = ctx.zeros::<f32>([3])?;
    ctx.recv(&mut last, prev)?;
    // Dropped: still delivered.
    let dropped = ctx.isend(&mine, prev)?;
    drop(dropped);
    let mut from_next_again = ctx.zeros::<f32>([3])?;
    ctx.recv(&mut from_next_again, next)?;

    let mut out = from_prev.to_vec();
    out.extend(from_next.to_vec());
    out.extend(last.to_vec());
    out.extend(from_next_again.to_vec());
    Ok(out)
}

fn main() {
    for w in 2..=6usize {
        let got = spawn(w, ring).unwrap();
        for (r, v) in got.iter().enumerate() {
            let (p, n) = (((r + w - 1) % w) as f32, ((r + 1) % w) as f32);
            assert_eq!(*v, [[p; 3], [n; 3], [p; 3], [n; 3]].concat(), "world {w}, rank {r}");
        }
    }
}
