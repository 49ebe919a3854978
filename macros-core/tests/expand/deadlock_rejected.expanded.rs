::core::compile_error! {
    "RW001: deadlock: rank 0 waits in send(to 1, f32[4]) at line 6 for rank 1, which waits in send(to 0, f32[4]) at line 6 for rank 0 (world = 2)\n= help: a blocking send waits until the peer receives: let one side receive first (e.g. even ranks send first, odd ranks receive first), or post both in one `ctx.batch()`"
}
fn both_send(ctx: &mut Ctx) -> Result<()> {
    let x = ctx.full([4], 1.0f32)?;
    let mut y = ctx.zeros::<f32>([4])?;
    let peer = 1 - ctx.rank();
    ctx.send(&x, peer)?;
    ctx.recv(&mut y, peer)?;
    Ok(())
}
