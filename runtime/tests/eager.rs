//! Lone small collectives, which the threads backend completes eagerly (one-way, from per-member
//! slots): results bit for bit against the sequential reference in `common` for every kind the
//! eager path computes, every element type and reduction, sizes on both sides of its 1 KiB and
//! 4 KiB limits; ranks that make a call alone meeting ranks that batch it (so one side is eager
//! and the other in place); slots reused thousands of times under stragglers; disagreements,
//! which must be reported as collective mismatches whichever path each rank took; and
//! broadcasts and scatters, whose ranks leave as soon as their data is there, against all of
//! these.

mod common;
#[path = "common/knobs.rs"]
mod knobs;

use common::{Num, concat, data, reduce, split};
use rankwise_runtime::{
    Ctx, Error, Options, PeerFailure, ReduceOp, Result, Tensor, bf16, f16, spawn, spawn_each,
};

/// What one lone call is. Calls with a `dim` split or concatenate along it, on tensors whose
/// dimensions before `dim` are 1 (`[n]` for dim 0, `[1, n]` for dim 1).
#[derive(Clone, Copy, Debug)]
enum Call {
    AllReduce(ReduceOp),
    Reduce(usize, ReduceOp),
    Broadcast(usize),
    AllGather(usize),
    Gather(usize, usize),
    Scatter(usize, usize),
    ReduceScatter(ReduceOp, usize),
    AllToAll(usize),
}

/// Element counts of a call's part: one element; exactly 1 KiB and 4 KiB (the eager limits of
/// an input of one part: 1 KiB for the kinds whose members wait for each other while every rank
/// has a core, 4 KiB for broadcasts, scatters, and every kind once ranks outnumber cores; both
/// 32 bytes under Miri) and one element more each; and none.
fn sizes<T>() -> Vec<usize> {
    // Under Miri the backend's limits are both 32 bytes (slow interpretation; the same code),
    // probed once.
    let (shared, alone) = if cfg!(miri) { (32, 32) } else { (1024, 4096) };
    let (shared, alone) = (shared / size_of::<T>(), alone / size_of::<T>());
    let mut sizes = vec![1, shared, shared + 1, alone, alone + 1, 0];
    if shared == alone {
        sizes.drain(3..5);
    }
    sizes
}

/// At most how many sizes [`sizes`] gives (the stride of case numbers).
const SIZES: usize = 6;

/// The calls to make at `world`, for element type `T` (`int`: bitwise reductions apply).
fn calls(world: usize, int: bool) -> Vec<Call> {
    let mut ops = vec![
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
        ReduceOp::PreMulSum(3.0),
    ];
    if int {
        ops.extend([ReduceOp::BitAnd, ReduceOp::BitOr, ReduceOp::BitXor]);
    }
    let mut out: Vec<Call> = ops.iter().map(|&op| Call::AllReduce(op)).collect();
    for root in 0..world {
        out.push(Call::Reduce(root, ops[root % ops.len()]));
        out.push(Call::Broadcast(root));
        out.push(Call::Gather(root, root % 2));
        out.push(Call::Scatter(root, (root + 1) % 2));
    }
    for dim in 0..2 {
        out.push(Call::AllGather(dim));
        out.push(Call::AllToAll(dim));
        out.push(Call::ReduceScatter(ops[dim * 3], dim));
    }
    out
}

/// A shape of `numel` elements along `dim` (dimensions before it are 1).
fn along(dim: usize, numel: usize) -> Vec<usize> {
    if dim == 1 {
        vec![1, numel]
    } else {
        vec![numel]
    }
}

/// The call's dim (0 for kinds without one).
fn dim_of(call: Call) -> usize {
    match call {
        Call::AllGather(d) | Call::Gather(_, d) | Call::Scatter(_, d) => d,
        Call::ReduceScatter(_, d) | Call::AllToAll(d) => d,
        _ => 0,
    }
}

/// `(input shape, output shape)` on `rank` for a part of `part` elements at `world`; `None`
/// where the rank passes no tensor (gather's output and scatter's input off the root), and an
/// in-place call's output is its input.
fn io(
    call: Call,
    part: usize,
    world: usize,
    rank: usize,
) -> (Option<Vec<usize>>, Option<Vec<usize>>) {
    let d = dim_of(call);
    let (one, all) = (along(d, part), along(d, part * world));
    match call {
        Call::AllReduce(_) | Call::Reduce(..) | Call::Broadcast(_) => (Some(one), None),
        Call::AllGather(_) => (Some(one), Some(all)),
        Call::Gather(root, _) => (Some(one), (rank == root).then_some(all)),
        Call::Scatter(root, _) => ((rank == root).then_some(all), Some(one)),
        Call::ReduceScatter(..) => (Some(all), Some(one)),
        Call::AllToAll(_) => (Some(all.clone()), Some(all)),
    }
}

/// Rounds of calls: every slot is reused many times within one round already (each call is
/// followed by a barrier); more rounds vary the values. Miri runs one.
/// `RANKWISE_TEST_ROUNDS` sets it: CI's sanitizer builds run one (what they look for, an access
/// out of bounds or a race, needs the paths, and one round takes every one of them; three cost
/// them minutes).
fn rounds() -> usize {
    let default = if cfg!(miri) { 1 } else { 3 };
    knobs::count("RANKWISE_TEST_ROUNDS").map_or(default, |r| r as usize)
}

/// The case number of a call, so that inputs differ from call to call.
fn case_of(round: usize, c: usize, calls: usize, s: usize) -> usize {
    (round * calls + c) * SIZES + s
}

/// Makes every call once per size, alone, [`rounds`] times; returns each rank's results in order
/// (the output, or the in-place tensor; empty where the rank has no output).
fn run_calls<T: Num>(world: usize, calls: &[Call]) -> Vec<Vec<Vec<T>>> {
    spawn(world, |ctx| {
        let rank = ctx.rank();
        let mut results = Vec::new();
        for round in 0..rounds() {
            for (c, &call) in calls.iter().enumerate() {
                for (s, part) in sizes::<T>().into_iter().enumerate() {
                    let case = case_of(round, c, calls.len(), s);
                    let (ins, outs) = io(call, part, world, rank);
                    let input = match ins {
                        Some(shape) => {
                            let n = shape.iter().product();
                            Some(Tensor::from_vec(shape, data::<T>(rank, case, n))?)
                        }
                        None => None,
                    };
                    let mut output = match outs {
                        Some(shape) => Some(Tensor::<T>::zeros(shape)?),
                        None => None,
                    };
                    match (call, input, output.as_mut()) {
                        (Call::AllReduce(op), Some(mut t), _) => {
                            ctx.all_reduce(&mut t, op)?;
                            output = Some(t);
                        }
                        (Call::Reduce(root, op), Some(mut t), _) => {
                            ctx.reduce(&mut t, root, op)?;
                            output = Some(t);
                        }
                        (Call::Broadcast(root), Some(mut t), _) => {
                            ctx.broadcast(&mut t, root)?;
                            output = Some(t);
                        }
                        (Call::AllGather(d), Some(x), Some(out)) => ctx.all_gather(&x, out, d)?,
                        (Call::Gather(root, d), Some(x), out) => ctx.gather(&x, out, root, d)?,
                        (Call::Scatter(root, d), x, Some(out)) => {
                            ctx.scatter(x.as_ref(), out, root, d)?
                        }
                        (Call::ReduceScatter(op, d), Some(x), Some(out)) => {
                            ctx.reduce_scatter(&x, out, op, d)?
                        }
                        (Call::AllToAll(d), Some(x), Some(out)) => ctx.all_to_all(&x, out, d)?,
                        (call, ..) => panic!("no tensors for {call:?}"),
                    }
                    results.push(output.map(|t| t.to_vec()).unwrap_or_default());
                    ctx.barrier()?;
                }
            }
        }
        Ok(results)
    })
    .unwrap_or_else(|e| panic!("world {world}: {e}"))
}

/// What `rank` must hold after `call`, from the reference.
fn expected<T: Num>(call: Call, part: usize, world: usize, rank: usize, case: usize) -> Vec<T> {
    let d = dim_of(call);
    let input = |r: usize| {
        let n = io(call, part, world, r).0.map_or(0, |s| s.iter().product());
        data::<T>(r, case, n)
    };
    let inputs: Vec<Vec<T>> = (0..world).map(input).collect();
    let (one, all) = (along(d, part), along(d, part * world));
    match call {
        Call::AllReduce(op) => reduce(&inputs, op),
        Call::Reduce(root, op) if rank == root => reduce(&inputs, op),
        Call::Reduce(..) => inputs[rank].clone(),
        Call::Broadcast(root) => inputs[root].clone(),
        Call::AllGather(_) => concat(&inputs, &one, d),
        Call::Gather(root, _) if rank == root => concat(&inputs, &one, d),
        Call::Gather(..) => Vec::new(),
        Call::Scatter(root, _) => split(&inputs[root], &all, d, world).swap_remove(rank),
        Call::ReduceScatter(op, _) => split(&reduce(&inputs, op), &all, d, world).swap_remove(rank),
        Call::AllToAll(_) => {
            let parts: Vec<Vec<T>> = inputs
                .iter()
                .map(|x| split(x, &all, d, world).swap_remove(rank))
                .collect();
            concat(&parts, &one, d)
        }
    }
}

fn check<T: Num + Bits>(world: usize, int: bool) {
    let calls = calls(world, int);
    let got = run_calls::<T>(world, &calls);
    let mut at = 0;
    for round in 0..rounds() {
        for (c, &call) in calls.iter().enumerate() {
            for (s, part) in sizes::<T>().into_iter().enumerate() {
                let case = case_of(round, c, calls.len(), s);
                for (rank, results) in got.iter().enumerate() {
                    let want = expected::<T>(call, part, world, rank, case);
                    let same = results[at].len() == want.len()
                        && results[at]
                            .iter()
                            .zip(&want)
                            .all(|(a, b)| a.bits() == b.bits());
                    assert!(
                        same,
                        "world {world}, {} {call:?}, parts of {part}, round {round}, rank \
                         {rank}: {:?} != {:?}",
                        std::any::type_name::<T>(),
                        results[at].iter().map(|x| x.bits()).collect::<Vec<_>>(),
                        want.iter().map(|x| x.bits()).collect::<Vec<_>>()
                    );
                }
                at += 1;
            }
        }
    }
}

/// Bit patterns, so that float results compare exactly.
trait Bits {
    fn bits(self) -> u64;
}
macro_rules! bits {
    ($($t:ty => $e:expr),*) => {$(
        impl Bits for $t {
            fn bits(self) -> u64 {
                let f: fn($t) -> u64 = $e;
                f(self)
            }
        }
    )*};
}
bits!(
    f32 => |x| x.to_bits().into(),
    f64 => |x| x.to_bits(),
    f16 => |x| x.to_bits().into(),
    bf16 => |x| x.to_bits().into(),
    i32 => |x| x as u32 as u64,
    u8 => |x| x.into(),
    i64 => |x| x as u64
);

#[test]
fn lone_small_collectives_match_the_reference() {
    if cfg!(miri) {
        // The unsafe paths once per kind of element (float, half, integer), at a world where
        // member 0 is not the root of every rooted call.
        check::<f32>(3, false);
        check::<f16>(2, false);
        check::<i32>(2, true);
        return;
    }
    for world in 1..=4 {
        check::<f32>(world, false);
        check::<f64>(world, false);
        check::<f16>(world, false);
        check::<bf16>(world, false);
        check::<i32>(world, true);
        check::<u8>(world, true);
        check::<i64>(world, true);
    }
}

/// One step of the mixed program: a small all_reduce, made alone by some ranks and inside a
/// batch (with a barrier after it, so that the rank's run has two ops and goes in place) by the
/// others; which ranks batch changes from step to step.
fn mixed_step(ctx: &mut Ctx, step: usize, batches: bool) -> Result<Vec<f32>> {
    let rank = ctx.rank();
    let mut t = Tensor::from_vec([3], data::<f32>(rank, step, 3))?;
    if batches {
        let mut b = ctx.batch();
        b.all_reduce(&mut t, ReduceOp::Sum).barrier();
        b.run()?;
    } else {
        ctx.all_reduce(&mut t, ReduceOp::Sum)?;
        ctx.barrier()?;
    }
    Ok(t.to_vec())
}

#[test]
fn ranks_that_batch_a_small_call_meet_ranks_that_make_it_alone() {
    for world in if cfg!(miri) { 3..=3 } else { 2..=4 } {
        let steps = if cfg!(miri) { 12 } else { 200 };
        let got = spawn(world, |ctx| {
            let rank = ctx.rank();
            (0..steps)
                .map(|step| mixed_step(ctx, step, (step + rank) % 3 == 0))
                .collect::<Result<Vec<_>>>()
        })
        .unwrap_or_else(|e| panic!("world {world}: {e}"));
        for step in 0..steps {
            let inputs: Vec<Vec<f32>> = (0..world).map(|r| data(r, step, 3)).collect();
            let want = reduce(&inputs, ReduceOp::Sum);
            for (rank, results) in got.iter().enumerate() {
                assert_eq!(
                    results[step], want,
                    "world {world}, step {step}, rank {rank}"
                );
            }
        }
    }
}

/// A cheap deterministic generator, so every rank draws the same program.
fn draw(seed: u64, i: u64) -> u64 {
    let mut x = seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^ (x >> 29)
}

#[test]
fn slots_reused_thousands_of_times_under_stragglers_hold_the_right_step() {
    // Four ranks on this machine's cores: ranks are descheduled mid-step, and a rank that is
    // made to sleep falls a step behind while the others race ahead to the next slot parity.
    let world = 4;
    let steps: u64 = if cfg!(miri) { 40 } else { 3000 };
    let got = spawn(world, |ctx| {
        let rank = ctx.rank() as u64;
        let mut sums = Vec::new();
        for i in 0..steps {
            let r = draw(7, i);
            if draw(rank + 11, i).is_multiple_of(97) {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
            let v = (i * 10 + rank) as f64;
            let mut t = Tensor::from_vec([2], vec![v, -v])?;
            match r % 4 {
                0 => ctx.broadcast(&mut t, (r / 4 % world as u64) as usize)?,
                1 => {
                    // In place for everyone: two ops in one batch.
                    let mut u = Tensor::from_vec([1], vec![1.0f64])?;
                    let mut b = ctx.batch();
                    b.all_reduce(&mut t, ReduceOp::Sum)
                        .all_reduce(&mut u, ReduceOp::Sum);
                    b.run()?;
                }
                _ => ctx.all_reduce(&mut t, ReduceOp::Sum)?,
            }
            sums.push(t.to_vec());
        }
        Ok(sums)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    for i in 0..steps {
        let r = draw(7, i);
        let want = if r.is_multiple_of(4) {
            let root = r / 4 % world as u64;
            let v = (i * 10 + root) as f64;
            vec![v, -v]
        } else {
            let s: f64 = (0..world as u64).map(|k| (i * 10 + k) as f64).sum();
            vec![s, -s]
        };
        for (rank, sums) in got.iter().enumerate() {
            assert_eq!(sums[i as usize], want, "step {i}, rank {rank}");
        }
    }
}

/// Rank `odd` makes `theirs` where the others make `ours`, alone; every rank must stop with a
/// collective mismatch at step 0 naming the odd rank (or rank 1, if the odd one is member 0).
fn mismatch(odd: usize, ours: Call, theirs: Call, their_numel: usize) {
    let results = spawn_each(3, Options::default(), |ctx| {
        let (call, numel) = if ctx.rank() == odd {
            (theirs, their_numel)
        } else {
            (ours, 2)
        };
        let mut t = Tensor::<f32>::full([numel], 1.0)?;
        match call {
            Call::AllReduce(op) => ctx.all_reduce(&mut t, op),
            Call::Reduce(root, op) => ctx.reduce(&mut t, root, op),
            Call::Broadcast(root) => ctx.broadcast(&mut t, root),
            // Any other call stands for a barrier here.
            _ => ctx.barrier(),
        }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    for (rank, r) in results.iter().enumerate() {
        let case = format!("{ours:?} vs {theirs:?} ({their_numel}) on rank {odd}, rank {rank}");
        let Err(Error::CollectiveMismatch(m)) = r else {
            panic!("{case}: expected a mismatch, got {r:?}")
        };
        assert_eq!(m.step, 0, "{case}");
        assert_eq!(m.rank_b, odd.max(1), "{case}");
    }
}

#[test]
fn disagreements_are_mismatches_whichever_path_each_rank_took() {
    let sum = Call::AllReduce(ReduceOp::Sum);
    for odd in if cfg!(miri) { 1..2 } else { 0..3 } {
        // Both eager: the signatures differ in the op, the scalar, the shape, the root, the kind.
        mismatch(odd, sum, Call::AllReduce(ReduceOp::Max), 2);
        mismatch(
            odd,
            Call::AllReduce(ReduceOp::PreMulSum(2.0)),
            Call::AllReduce(ReduceOp::PreMulSum(3.0)),
            2,
        );
        mismatch(odd, sum, sum, 3);
        mismatch(odd, Call::Broadcast(0), Call::Broadcast(1), 2);
        mismatch(odd, sum, Call::Reduce(0, ReduceOp::Sum), 2);
        // A barrier (`AllGather` stands for it here) against a reduction.
        mismatch(odd, sum, Call::AllGather(0), 2);
        // One side too large to go eagerly: it runs in place, the others fall back to it.
        mismatch(odd, sum, sum, if cfg!(miri) { 9 } else { 300 });
    }
}

#[test]
fn a_rank_that_returns_without_the_call_is_reported() {
    let results = spawn_each(2, Options::default(), |ctx| {
        if ctx.rank() == 1 {
            return Ok(());
        }
        let mut t = Tensor::full([2], 1.0f32)?;
        ctx.all_reduce(&mut t, ReduceOp::Sum)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(results[1].is_ok());
    match &results[0] {
        Err(Error::PeerFailed {
            peer: 1,
            reason: PeerFailure::Exited,
            ..
        }) => {}
        other => panic!("expected rank 1 to be reported as exited, got {other:?}"),
    }
}

#[test]
fn sums_fold_in_member_order_like_the_in_place_path() {
    // Values whose float sum depends on the order: 1e8 + 1 rounds back to 1e8.
    let vals = [1e8f32, 1.0, -1e8, 0.5];
    for world in 2..=4 {
        let got = spawn(world, |ctx| {
            let v = vals[ctx.rank()];
            let mut alone = Tensor::full([2], v)?;
            ctx.all_reduce(&mut alone, ReduceOp::Sum)?;
            let mut batched = Tensor::full([2], v)?;
            let mut other = Tensor::full([1], 0.0f32)?;
            let mut b = ctx.batch();
            b.all_reduce(&mut batched, ReduceOp::Sum)
                .all_reduce(&mut other, ReduceOp::Sum);
            b.run()?;
            Ok((alone.to_vec(), batched.to_vec()))
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let inputs: Vec<Vec<f32>> = vals[..world].iter().map(|&v| vec![v; 2]).collect();
        let want = reduce(&inputs, ReduceOp::Sum);
        for (rank, (alone, batched)) in got.iter().enumerate() {
            assert_eq!(alone, &want, "world {world}, rank {rank}, alone");
            assert_eq!(batched, &want, "world {world}, rank {rank}, in place");
        }
    }
}

/// The value rank `rank` holds before broadcast `(i, j)`: the root's is what every rank must hold
/// after it.
fn bvalue(i: u64, j: u64, rank: usize) -> Vec<f64> {
    let v = (i * 100 + j * 10 + rank as u64) as f64;
    vec![v, -v, 0.5 * v]
}

/// The root's input of the scatter of iteration `i`: 3 elements per member.
fn svalue(i: u64, root: usize, world: usize) -> Vec<f64> {
    (0..3 * world)
        .map(|e| (i * 1000 + root as u64 * 100 + e as u64) as f64)
        .collect()
}

#[test]
fn broadcasts_and_scatters_left_early_meet_ranks_that_batch_them_and_stragglers() {
    // Small broadcasts and scatters leave early (a lone root at once, a non-root once the root's
    // slot is there), so roots race ahead of their members by up to the slot ring. Against that:
    // ranks that run the same calls in place (batched with a barrier, or several broadcasts in
    // one batch), roots that change from call to call, stragglers, and enough calls to wrap the
    // ring many times. Every rank must hold the root's values after every call.
    for world in if cfg!(miri) { 3..=3 } else { 2..=4 } {
        let iters: u64 = if cfg!(miri) { 30 } else { 600 };
        let got = spawn(world, |ctx| {
            let rank = ctx.rank();
            let mut seen: Vec<Vec<f64>> = Vec::new();
            for i in 0..iters {
                let pattern = draw(3, i) % 3;
                let batched = draw(rank as u64 + 5, i).is_multiple_of(3);
                if draw(rank as u64 + 17, i).is_multiple_of(41) {
                    std::thread::sleep(std::time::Duration::from_micros(30));
                }
                let calls = if pattern == 1 { 3 } else { 1 };
                let roots: Vec<usize> = (0..calls)
                    .map(|j| (draw(9, i * 4 + j) % world as u64) as usize)
                    .collect();
                let mut ts: Vec<Tensor<f64>> = (0..calls)
                    .map(|j| Tensor::from_vec([3], bvalue(i, j, rank)))
                    .collect::<Result<_>>()?;
                // Every fourth iteration also scatters (the other call that leaves early): the
                // root's input of 3 parts per member, part `rank` to each member.
                if i % 4 == 3 {
                    let root = (draw(13, i) % world as u64) as usize;
                    let all = Tensor::from_vec([3 * world], svalue(i, root, world))?;
                    let input = (rank == root).then_some(&all);
                    let mut part = Tensor::<f64>::zeros([3])?;
                    if batched {
                        let mut b = ctx.batch();
                        b.scatter(input, &mut part, root, 0).barrier();
                        b.run()?;
                    } else {
                        ctx.scatter(input, &mut part, root, 0)?;
                        ctx.barrier()?;
                    }
                    seen.push(part.to_vec());
                }
                match (pattern, batched) {
                    // A broadcast and a barrier, batched (in place) or one by one.
                    (0, true) => {
                        let mut b = ctx.batch();
                        b.broadcast(&mut ts[0], roots[0]).barrier();
                        b.run()?;
                    }
                    (0, false) => {
                        ctx.broadcast(&mut ts[0], roots[0])?;
                        ctx.barrier()?;
                    }
                    // Three broadcasts back to back, batched or one by one.
                    (1, true) => {
                        let mut b = ctx.batch();
                        for (t, &root) in ts.iter_mut().zip(&roots) {
                            b.broadcast(t, root);
                        }
                        b.run()?;
                    }
                    _ => {
                        for (t, &root) in ts.iter_mut().zip(&roots) {
                            ctx.broadcast(t, root)?;
                        }
                    }
                }
                seen.extend(ts.iter().map(|t| t.to_vec()));
            }
            Ok(seen)
        })
        .unwrap_or_else(|e| panic!("world {world}: {e}"));
        let mut want = Vec::new();
        for i in 0..iters {
            if i % 4 == 3 {
                want.push(None);
            }
            let calls = if draw(3, i) % 3 == 1 { 3 } else { 1 };
            for j in 0..calls {
                let root = (draw(9, i * 4 + j) % world as u64) as usize;
                want.push(Some(bvalue(i, j, root)));
            }
        }
        for (rank, seen) in got.iter().enumerate() {
            assert_eq!(seen.len(), want.len(), "world {world}, rank {rank}");
            let mut it = 0;
            for (c, (s, w)) in seen.iter().zip(&want).enumerate() {
                let w = match w {
                    Some(w) => w.clone(),
                    // The scatter of the iteration this entry belongs to.
                    None => {
                        while it % 4 != 3 {
                            it += 1;
                        }
                        let root = (draw(13, it) % world as u64) as usize;
                        let all = svalue(it, root, world);
                        it += 1;
                        all[3 * rank..3 * rank + 3].to_vec()
                    }
                };
                assert_eq!(s, &w, "world {world}, rank {rank}, call {c}");
            }
        }
    }
}

#[test]
fn a_root_running_ahead_keeps_small_and_larger_inputs_of_every_step_apart() {
    // A root broadcasting without pause runs ahead of its members by up to the whole slot ring
    // when inputs fit in a slot's line, and by no more than its data areas when they do not
    // (24 bytes and less travel with the signature; more, up to the eager limit, in a separate,
    // shorter ring). Members that start late and stall now and then, sizes mixed from call to
    // call, ranks running some steps in place, and enough calls to wrap both rings: every
    // member must get each step's own values.
    let (iters, small, larger) = if cfg!(miri) {
        (40, 3, 4)
    } else {
        (1_500, 3, 128)
    };
    for world in if cfg!(miri) { 3..=3 } else { 2..=4 } {
        let sizes: Vec<usize> = (0..iters)
            .map(|i| {
                if draw(21, i).is_multiple_of(3) {
                    larger
                } else {
                    small
                }
            })
            .collect();
        let value = |i: u64, e: usize| (i * 1000 + e as u64) as f64;
        let sizes_in = sizes.clone();
        let got = spawn(world, move |ctx| {
            let rank = ctx.rank();
            if rank != 0 {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            let mut seen = Vec::with_capacity(sizes_in.len());
            for (i, &n) in (0..).zip(&sizes_in) {
                if rank != 0 && draw(rank as u64 + 30, i).is_multiple_of(97) {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
                let v = (0..n)
                    .map(|e| if rank == 0 { value(i, e) } else { -1.0 })
                    .collect();
                let mut t = Tensor::<f64>::from_vec([n], v)?;
                // In the second half, now and then a broadcast and a barrier, which some ranks
                // batch (so they run it in place, reading the members that left through the
                // ops kept in their slots, small and larger inputs alike) and others make one by
                // one. (Not in the first: a barrier stops the root from running ahead.)
                if 2 * i >= iters && draw(40, i).is_multiple_of(10) {
                    if draw(rank as u64 + 50, i).is_multiple_of(2) {
                        let mut b = ctx.batch();
                        b.broadcast(&mut t, 0).barrier();
                        b.run()?;
                    } else {
                        ctx.broadcast(&mut t, 0)?;
                        ctx.barrier()?;
                    }
                } else {
                    ctx.broadcast(&mut t, 0)?;
                }
                seen.push(t.to_vec());
            }
            Ok(seen)
        })
        .unwrap_or_else(|e| panic!("world {world}: {e}"));
        for (rank, seen) in got.iter().enumerate() {
            assert_eq!(seen.len(), sizes.len(), "world {world}, rank {rank}");
            for ((i, &n), s) in (0..).zip(&sizes).zip(seen) {
                let want: Vec<f64> = (0..n).map(|e| value(i, e)).collect();
                assert_eq!(s, &want, "world {world}, rank {rank}, broadcast {i}");
            }
        }
    }
}

/// How a rank makes the broadcast under test: alone, or batched with a barrier (in place).
#[derive(Clone, Copy, Debug)]
enum Way {
    Alone,
    Batched,
}

/// `before` agreeing broadcasts (enough to wrap the slot ring), then rank `odd` makes a
/// broadcast of `their_numel` elements from `their_root` (the others: 2 elements from root 0),
/// each rank the way given. Every rank must stop with a collective mismatch at that step — the
/// root, which left it early, included.
fn late_mismatch(before: u64, odd: usize, their_root: usize, their_numel: usize, ways: [Way; 3]) {
    let results = spawn_each(3, Options::default(), |ctx| {
        let rank = ctx.rank();
        for i in 0..before {
            let mut t = Tensor::full([2], i as f32)?;
            ctx.broadcast(&mut t, (i % 3) as usize)?;
        }
        let (root, numel) = if rank == odd {
            (their_root, their_numel)
        } else {
            (0, 2)
        };
        let mut t = Tensor::<f32>::full([numel], 1.0)?;
        match ways[rank] {
            Way::Alone => {
                ctx.broadcast(&mut t, root)?;
                ctx.barrier()
            }
            Way::Batched => {
                let mut b = ctx.batch();
                b.broadcast(&mut t, root).barrier();
                b.run()
            }
        }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    for (rank, r) in results.iter().enumerate() {
        let case = format!(
            "{before} before, rank {odd} with root {their_root}, {their_numel} elements, \
             {ways:?}, rank {rank}"
        );
        let Err(Error::CollectiveMismatch(m)) = r else {
            panic!("{case}: expected a mismatch, got {r:?}")
        };
        assert_eq!(m.step, before, "{case}");
        assert_eq!(m.rank_b, odd.max(1), "{case}");
    }
}

#[test]
fn broadcasts_left_early_still_report_every_disagreement_to_every_rank() {
    use Way::{Alone, Batched};
    // Past the slot ring (512 slots; 8 under Miri) at the last, its roots more than half a
    // ring ahead of the check they must make.
    let befores: &[u64] = if cfg!(miri) {
        &[0, 10]
    } else {
        &[0, 5, 70, 600]
    };
    let wayss: &[[Way; 3]] = if cfg!(miri) {
        &[[Alone; 3], [Alone, Batched, Alone]]
    } else {
        &[
            [Alone; 3],
            [Alone, Batched, Alone],
            [Batched, Alone, Alone],
            [Alone, Alone, Batched],
        ]
    };
    for &before in befores {
        for &ways in wayss {
            for odd in 1..3 {
                // Another root: both roots leave; only their checks can see it.
                late_mismatch(before, odd, odd, 2, ways);
                // Another shape: the odd member compares itself with the root.
                late_mismatch(before, odd, 0, 3, ways);
            }
            // The root itself disagrees on the shape.
            late_mismatch(before, 0, 0, 3, ways);
        }
    }
}

#[test]
fn a_rank_that_stops_broadcasting_is_reported_by_the_roots_that_left() {
    // Rank 1 returns after a few broadcasts; the others keep broadcasting (rank 0 the root,
    // leaving at once, far past the slot ring). They must be told rank 1 exited, not hang and
    // not succeed.
    let results = spawn_each(3, Options::default(), |ctx| {
        let calls = if ctx.rank() == 1 { 4 } else { 100 };
        for i in 0..calls {
            let mut t = Tensor::full([2], i as f32)?;
            ctx.broadcast(&mut t, 0)?;
        }
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(results[1].is_ok(), "{:?}", results[1]);
    for rank in [0, 2] {
        match &results[rank] {
            Err(Error::PeerFailed {
                peer: 1,
                reason: PeerFailure::Exited,
                ..
            }) => {}
            other => panic!("rank {rank}: expected rank 1 reported as exited, got {other:?}"),
        }
    }
}

#[test]
fn a_broadcast_left_early_does_not_hide_a_deadlock_behind_it() {
    // The verifier's model: rank 0 is blocked in the broadcast until rank 1 arrives, and rank
    // 1 waits for rank 0's send first — a deadlock. Rank 0 leaves the broadcast early, but
    // waits for every member to reach it before its next call, so the deadlock is reported,
    // naming both ranks.
    let err = spawn(2, |ctx| {
        let mut t = Tensor::full([2], 1.0f32)?;
        if ctx.rank() == 0 {
            ctx.broadcast(&mut t, 0)?;
            ctx.send(&t, 1)?;
        } else {
            ctx.recv(&mut t, 0)?;
            ctx.broadcast(&mut t, 0)?;
        }
        Ok(())
    })
    .unwrap_err();
    let Error::Deadlock(report) = &err else {
        panic!("expected a deadlock, got {err}")
    };
    assert_eq!(report.waits.len(), 2, "{err}");
    assert_eq!(report.waits[0].waiting_for, vec![1], "{err}");
    assert!(report.waits[0].what.starts_with("broadcast("), "{err}");
    assert!(report.waits[1].what.starts_with("recv("), "{err}");
}

#[test]
fn a_broadcast_left_early_is_reported_at_its_own_call_after_its_slot_served_another() {
    // Rank 0's last broadcast reuses the eager slot of its first (64 steps apart: a multiple
    // of the slot ring, under Miri too) with the same signature but from another line, and
    // leaves early; rank 1 never reaches it (it waits for rank 0's send). The deadlock report
    // must place rank 0 at the last broadcast's line, not at the line the slot last kept.
    static LAST: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let err = spawn(2, |ctx| {
        let mut t = Tensor::full([2], 1.0f32)?;
        for _ in 0..64 {
            ctx.broadcast(&mut t, 0)?;
        }
        let mut flag = Tensor::full([1], 0u8)?;
        if ctx.rank() == 0 {
            // Every member is past the first 64 steps before this rank goes on (a call other
            // than a broadcast settles them), so the last one's slot is free and it is eager.
            ctx.recv(&mut flag, 1)?;
            LAST.store(line!() + 1, std::sync::atomic::Ordering::Relaxed);
            ctx.broadcast(&mut t, 0)?;
        } else {
            ctx.send(&flag, 0)?;
            ctx.recv(&mut t, 0)?;
        }
        Ok(())
    })
    .unwrap_err();
    let Error::Deadlock(report) = &err else {
        panic!("expected a deadlock, got {err}")
    };
    let root = report
        .waits
        .iter()
        .find(|w| w.rank == 0)
        .expect("rank 0 is blocked");
    assert!(root.what.starts_with("broadcast("), "{err}");
    assert_eq!(
        root.site.line,
        LAST.load(std::sync::atomic::Ordering::Relaxed),
        "{err}"
    );
}

#[test]
fn scatters_left_early_report_a_disagreement_about_the_root_to_every_rank() {
    // Scatters leave early like broadcasts: after enough agreeing ones to wrap the slot ring,
    // rank `odd` names another root; both roots leave at once, so only their checks can see it.
    let before: u64 = if cfg!(miri) { 10 } else { 70 };
    for odd in 1..3 {
        let results = spawn_each(3, Options::default(), |ctx| {
            let rank = ctx.rank();
            let mut part = Tensor::<f32>::zeros([2])?;
            for i in 0..before {
                let root = (i % 3) as usize;
                let all = Tensor::full([6], i as f32)?;
                ctx.scatter((rank == root).then_some(&all), &mut part, root, 0)?;
            }
            let root = if rank == odd { odd } else { 0 };
            let all = Tensor::full([6], 1.0f32)?;
            ctx.scatter((rank == root).then_some(&all), &mut part, root, 0)?;
            ctx.barrier()
        })
        .unwrap_or_else(|e| panic!("{e}"));
        for (rank, r) in results.iter().enumerate() {
            let Err(Error::CollectiveMismatch(m)) = r else {
                panic!("rank {odd} names itself root, rank {rank}: expected a mismatch, got {r:?}")
            };
            assert_eq!(m.step, before, "odd {odd}, rank {rank}");
        }
    }
}

/// How rank 0 breaks a rule right after a broadcast it left early: each is refused by `Ctx`
/// before the backend runs anything.
const REFUSALS: [&str; 5] = ["self send", "batch", "isend", "group", "foreign group"];

fn refuse(ctx: &mut Ctx, how: &str, t: &mut Tensor<f32>) -> Result<()> {
    match how {
        "self send" => ctx.send(t, 0),
        "batch" => {
            let mut b = ctx.batch();
            b.broadcast(t, 7);
            b.run()
        }
        "isend" => ctx.isend(t, 9).map(drop),
        "group" => ctx.new_group([0, 0]).map(drop),
        _ => {
            // A group made in another world.
            let other = spawn(1, |c| c.new_group([0]))?.pop();
            let other = other.expect("the other world's group");
            ctx.group(&other).all_reduce(t, ReduceOp::Sum)
        }
    }
}

#[test]
fn a_call_refused_after_a_broadcast_left_early_waits_for_the_broadcast_first() {
    // The verifier's model: rank 0 is inside the broadcast until rank 1 reaches it, and rank 1
    // first waits in a send to rank 0 — a deadlock, whatever rank 0 would have done next. Rank 0
    // leaves the broadcast early; a call it makes next that `Ctx` refuses (a misuse) must not be
    // reported instead of the deadlock (found by the random-program differential test: a self
    // send after the broadcast came out as RW010 where the verifier said RW001).
    for how in REFUSALS {
        let err = spawn(2, |ctx| {
            let mut t = Tensor::full([2], 1.0f32)?;
            if ctx.rank() == 0 {
                ctx.broadcast(&mut t, 0)?;
                refuse(ctx, how, &mut t)?;
            } else {
                ctx.send(&t, 0)?;
                ctx.broadcast(&mut t, 0)?;
            }
            Ok(())
        })
        .unwrap_err();
        let Error::Deadlock(report) = &err else {
            panic!("{how}: expected the deadlock, got {err}")
        };
        assert!(
            report.waits[0].what.starts_with("broadcast("),
            "{how}: {err}"
        );
        assert!(report.waits[1].what.starts_with("send("), "{how}: {err}");
    }
    // When every member reaches the broadcast, the refusal is what is reported.
    for how in REFUSALS {
        let err = spawn(2, |ctx| {
            let mut t = Tensor::full([2], 1.0f32)?;
            ctx.broadcast(&mut t, 0)?;
            if ctx.rank() == 0 {
                refuse(ctx, how, &mut t)?;
            }
            Ok(())
        })
        .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Misuse { rank: 0, .. } | Error::ForeignGroup { rank: 0, .. }
            ),
            "{how}: expected rank 0's refusal, got {err}"
        );
    }
}

/// What the members other than the odd one call at the step under test.
#[derive(Clone, Copy, Debug)]
enum Rooted {
    Broadcast,
    Scatter,
}

/// `before` agreeing all_reduces, then every rank but `odd` makes a lone `rooted` call from
/// root 3 (which members complete from the root's slot, and the root leaves), then a batch of
/// small all_reduces; rank `odd` skips the rooted call and makes only the batch (with a barrier
/// first, `barrier`). Every rank must stop with a collective mismatch — in particular `odd`,
/// which in a batch has nothing to move at steps it neither checks nor reduces.
fn skipped_rooted_call(before: usize, odd: usize, rooted: Rooted, barrier: bool) {
    let results = spawn_each(4, Options::default(), |ctx| {
        let rank = ctx.rank();
        for i in 0..before {
            let mut t = Tensor::full([2], i as f32)?;
            ctx.all_reduce(&mut t, ReduceOp::Sum)?;
        }
        if rank != odd {
            match rooted {
                Rooted::Broadcast => ctx.broadcast(&mut Tensor::<f32>::full([2], 1.0)?, 3)?,
                Rooted::Scatter => {
                    let input = (rank == 3)
                        .then(|| Tensor::<f32>::full([8], 1.0))
                        .transpose()?;
                    ctx.scatter(input.as_ref(), &mut Tensor::<f32>::full([2], 0.0)?, 3, 0)?
                }
            }
        }
        let mut ts = (0..3)
            .map(|i| Tensor::<f32>::full([2], i as f32))
            .collect::<Result<Vec<_>>>()?;
        let mut b = ctx.batch();
        if barrier && rank == odd {
            b.barrier();
        }
        for t in ts.iter_mut() {
            b.all_reduce(t, ReduceOp::Prod);
        }
        b.run()
    })
    .unwrap_or_else(|e| panic!("{e}"));
    for (rank, r) in results.iter().enumerate() {
        let case = format!("{before} before, rank {odd} skips a {rooted:?}, barrier {barrier}");
        assert!(
            matches!(r, Err(Error::CollectiveMismatch(_))),
            "{case}: rank {rank} got {r:?}"
        );
    }
}

#[test]
fn a_rank_with_nothing_to_move_is_compared_with_rooted_calls_left_early() {
    // Each step's checker is `step mod 4`, so the steps before it place the odd rank
    // everywhere relative to the checker.
    // Under Miri (slow): one step before, and one rooted kind per odd rank.
    let befores: &[usize] = if cfg!(miri) { &[1] } else { &[0, 1, 2, 3, 6] };
    for &before in befores {
        for odd in 0..3 {
            for rooted in [Rooted::Broadcast, Rooted::Scatter] {
                if cfg!(miri) && matches!(rooted, Rooted::Scatter) != (odd == 1) {
                    continue;
                }
                for barrier in [false, true] {
                    skipped_rooted_call(before, odd, rooted, barrier);
                }
            }
        }
    }
}
