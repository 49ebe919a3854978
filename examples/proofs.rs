//! Checked programs on MPI: what the macro's proof buys at run time, and what happens when the
//! ranks of a job do not all run the proof they claim.
//!
//! Under `mpirun`, a `#[rankwise::program]` function starts with one handshake (the ranks
//! compare fingerprints of the schedule they were checked against); after it, every call on
//! that schedule is *proven*, and a small broadcast, scatter, reduce or gather travels one way
//! (root to members, or members to root), as raw MPI's does, instead of every member hearing
//! from every other. Under threads nothing changes (its checks cost no round trip).
//!
//! `cargo run --example proofs` prints every rank's results of small rooted collectives (the
//! same under threads and under `mpirun -np 2|3|4 target/debug/examples/proofs`). With an
//! argument, a case:
//!
//! * `one-way`: rank 1 times a proven broadcast from root 0 while rank 2 arrives a second
//!   late; under MPI rank 1 does not wait for rank 2 (it would with the check of unchecked
//!   calls, where every member hears from every other). Prints `rank 1 waited for rank 2:
//!   no` or `yes`.
//! * `twice`: a function under the attribute twice (two guards, two handshakes).
//! * `different`: ranks 0 and 1 run one checked function, ranks 2 and 3 another; under MPI
//!   every rank's entry fails (`ProofsDiffer`) before any call of either function.
//! * `unchecked`: rank 3 runs unchecked code while the others enter a checked function; under
//!   MPI the handshake meets rank 3's call and the mismatch names both.

use rankwise::prelude::*;

/// Small rooted collectives of every kind from every root, alone and batched (the macro
/// batches adjacent calls on distinct tensors), on the world and on a sub-group.
#[rankwise::program(world in 1..=4)]
pub fn rooted(ctx: &mut Ctx) -> Result<Vec<String>> {
    let (rank, world) = (ctx.rank(), ctx.world());
    let mut lines = Vec::new();
    for root in 0..world {
        let base = (10 * rank + root) as f32;
        let mut b = ctx.full([3], base)?;
        ctx.broadcast(&mut b, root)?;
        let mut r = ctx.full([2], base)?;
        ctx.reduce(&mut r, root, ReduceOp::Max)?;
        let x = ctx.tensor(
            [world, 2],
            (0..2 * world).map(|i| i as f32 + base).collect(),
        )?;
        let mut part = ctx.zeros::<f32>([1, 2])?;
        let from = if rank == root { Some(&x) } else { None };
        ctx.scatter(from, &mut part, root, 0)?;
        let mut all = ctx.zeros::<f32>([2, world])?;
        let y = ctx.full([2, 1], base)?;
        let into = if rank == root { Some(&mut all) } else { None };
        ctx.gather(&y, into, root, 1)?;
        // Adjacent calls on distinct tensors: one batch, a run of rooted heads.
        let mut u = ctx.full([1], base)?;
        let mut v = ctx.full([1], -base)?;
        ctx.broadcast(&mut u, root)?;
        ctx.reduce(&mut v, root, ReduceOp::Sum)?;
        // A reduce leaves the non-roots' tensors unspecified: only the root's is printed.
        let reduced = |t: &Tensor<f32>| {
            if rank == root {
                format!("{:?}", t.to_vec())
            } else {
                "-".to_string()
            }
        };
        lines.push(format!(
            "root {root}: broadcast {:?} reduce {} scatter {:?} gather {:?} batch {:?} {}",
            b.to_vec(),
            reduced(&r),
            part.to_vec(),
            all.to_vec(),
            u.to_vec(),
            reduced(&v)
        ));
    }
    if world >= 2 {
        let pair = ctx.new_group([0, 1])?;
        if rank < 2 {
            let mut p = ctx.full([2], rank as f32 + 0.5)?;
            ctx.group(&pair).broadcast(&mut p, 1)?;
            lines.push(format!("pair broadcast {:?}", p.to_vec()));
        }
    }
    Ok(lines)
}

/// Rank 2 comes late to a broadcast from rank 0; rank 1 times its own part of it.
#[rankwise::program(world in 3..=4)]
fn one_way(ctx: &mut Ctx) -> Result<Vec<String>> {
    let rank = ctx.rank();
    ctx.barrier()?;
    if rank == 2 {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    let start = std::time::Instant::now();
    let mut t = ctx.full([2], rank as f32)?;
    ctx.broadcast(&mut t, 0)?;
    let took = start.elapsed();
    let mut lines = vec![format!("broadcast {:?}", t.to_vec())];
    if rank == 1 {
        let waited = if took >= std::time::Duration::from_millis(500) {
            "yes"
        } else {
            "no"
        };
        lines.push(format!("rank 1 waited for rank 2: {waited}"));
    }
    Ok(lines)
}

/// The attribute twice (`twice`): two guards, each with its handshake, the inner one's made
/// outside the outer one's schedule.
#[rankwise::program(world in 2..=4)]
#[rankwise::program(world in 1..=4)]
fn twice(ctx: &mut Ctx) -> Result<Vec<String>> {
    let mut t = ctx.full([2], ctx.rank() as f32)?;
    ctx.broadcast(&mut t, ctx.world() - 1)?;
    Ok(vec![format!("twice {:?}", t.to_vec())])
}

/// One of two different checked programs (`different`).
#[rankwise::program(world = 4)]
fn first(ctx: &mut Ctx) -> Result<Vec<String>> {
    let mut t = ctx.full([2], 1.0f32)?;
    ctx.broadcast(&mut t, 0)?;
    Ok(vec![format!("{:?}", t.to_vec())])
}

/// The other (`different`).
#[rankwise::program(world = 4)]
fn second(ctx: &mut Ctx) -> Result<Vec<String>> {
    let mut t = ctx.full([2], 2.0f32)?;
    ctx.broadcast(&mut t, 3)?;
    Ok(vec![format!("{:?}", t.to_vec())])
}

#[allow(dead_code)] // also compiled into tests/examples.rs, which calls `rooted` directly
fn main() -> Result<()> {
    let case = std::env::args().nth(1).unwrap_or_default();
    let ranks = rankwise::launch(4, |ctx| match case.as_str() {
        "one-way" => one_way(ctx),
        "twice" => twice(ctx),
        "different" if ctx.rank() < 2 => first(ctx),
        "different" => second(ctx),
        "unchecked" if ctx.rank() == 3 => {
            let mut t = ctx.full([2], 3.0f32)?;
            ctx.broadcast(&mut t, 0)?;
            Ok(vec![format!("{:?}", t.to_vec())])
        }
        "unchecked" => first(ctx),
        _ => rooted(ctx),
    })?;
    for (rank, lines) in ranks.iter() {
        for line in lines {
            println!("rank {rank}: {line}");
        }
    }
    Ok(())
}
