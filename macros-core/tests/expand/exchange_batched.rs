// args: world = 2
fn exchange(ctx: &mut Ctx) -> Result<()> {
    let a = ctx.full([2], 1.0f32)?;
    let mut b = ctx.zeros::<f32>([2])?;
    let mut c = ctx.zeros::<f32>([3])?;
    let peer = 1 - ctx.rank();
    if ctx.rank() == 0 {
        ctx.send(&a, peer)?;
        ctx.recv(&mut b, peer)?;
    } else {
        ctx.recv(&mut b, peer)?;
        ctx.send(&a, peer)?;
    }
    ctx.all_reduce(&mut c, ReduceOp::Sum)?;
    ctx.all_reduce(&mut b, ReduceOp::Max)?;
    Ok(())
}
