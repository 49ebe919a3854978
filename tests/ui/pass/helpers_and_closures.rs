use rankwise::prelude::*;

// Peers, roots and members computed by small helper functions — beside the program in a
// module under `#[rankwise::program]`, or inside its body — and by closures.
#[rankwise::program]
mod tree {
    use rankwise::prelude::*;

    /// The rank at `pos` of a tree rooted at `root`.
    pub fn to_rank(root: usize, pos: usize, world: usize) -> usize {
        (pos + root) % world
    }

    fn parent(pos: usize) -> usize {
        if pos == 0 { 0 } else { (pos - 1) / 2 }
    }

    /// A binary-tree broadcast from rank 1, written with helpers.
    #[rankwise::program(world in 2..=7)]
    pub fn tree_broadcast(ctx: &mut Ctx) -> Result<f32> {
        let (rank, world) = (ctx.rank(), ctx.world());
        let root = 1 % world;
        let pos = (rank + world - root) % world;
        let mut x = ctx.full([3], if rank == root { 9.0f32 } else { 0.0 })?;
        if pos > 0 {
            ctx.recv(&mut x, to_rank(root, parent(pos), world))?;
        }
        for child in [2 * pos + 1, 2 * pos + 2] {
            if child < world {
                ctx.send(&x, to_rank(root, child, world))?;
            }
        }
        Ok(x.to_vec()[0])
    }
}

#[rankwise::program(world in 2..=4)]
fn with_local_helpers(ctx: &mut Ctx) -> Result<f32> {
    fn next(r: usize, w: usize) -> usize {
        (r + 1) % w
    }
    let (r, w) = (ctx.rank(), ctx.world());
    let prev = |k: usize| (r + w - k) % w;
    let mut got = ctx.zeros::<f32>([1])?;
    let mine = ctx.full([1], r as f32)?;
    let mut b = ctx.batch();
    b.send(&mine, next(r, w)).recv(&mut got, prev(1));
    b.run()?;
    Ok(got.to_vec()[0])
}

fn main() {
    for world in 2..=7 {
        assert_eq!(spawn(world, tree::tree_broadcast).unwrap(), vec![9.0; world]);
    }
    for world in 2..=4usize {
        let got = spawn(world, with_local_helpers).unwrap();
        let want: Vec<f32> = (0..world).map(|r| ((r + world - 1) % world) as f32).collect();
        assert_eq!(got, want);
    }
}
