// args: world in [2, 4]
// A dimension from a constant outside the function: the verifier checks a placeholder and
// rustc gets the real divisibility as a `const` assertion at the call.
fn shard(ctx: &mut Ctx) -> Result<()> {
    let x = ctx.full([ROWS, 3], 1.0f32)?;
    let mut part = ctx.zeros::<f32>([ROWS / ctx.world(), 3])?;
    ctx.reduce_scatter(&x, &mut part, ReduceOp::Sum, 0)?;
    Ok(())
}
