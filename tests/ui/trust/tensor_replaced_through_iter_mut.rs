use rankwise::prelude::*;

// A loop over iter_mut replaces rank 0's buffers with larger ones: the send must not be checked with the old shape.
#[rankwise::program(world = 2)]
fn exchange(ctx: &mut Ctx) -> Result<()> {
    let r = ctx.rank();
    let mut bufs: Vec<Tensor<f32>> = vec![Tensor::zeros([2])?; 2];
    if r == 0 {
        for b in bufs.iter_mut() {
            *b = Tensor::zeros([3])?;
        }
    }
    let mut u = ctx.zeros::<f32>([2])?;
    if r == 0 {
        ctx.send(&bufs[0], 1)?;
    } else {
        ctx.recv(&mut u, 0)?;
    }
    Ok(())
}
fn main() {}
