// args: world = 2
// Both ranks send first: RW001, and the function is emitted unchanged after the errors.
fn both_send(ctx: &mut Ctx) -> Result<()> {
    let x = ctx.full([4], 1.0f32)?;
    let mut y = ctx.zeros::<f32>([4])?;
    let peer = 1 - ctx.rank();
    ctx.send(&x, peer)?;
    ctx.recv(&mut y, peer)?;
    Ok(())
}
