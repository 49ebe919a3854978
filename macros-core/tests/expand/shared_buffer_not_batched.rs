// args: world in [2, 4]
// Calls that share a buffer, or whose arguments use the context, keep their order and are not
// batched; a barrier is never batched.
fn apart(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([4], 1.0f32)?;
    ctx.all_reduce(&mut t, ReduceOp::Sum)?;
    ctx.broadcast(&mut t, 0)?;
    ctx.barrier()?;
    ctx.broadcast(&mut t, ctx.world() - 1)?;
    Ok(())
}
