//! A lone broadcast, reduce or all_reduce that repeats the previous call exactly reuses that
//! call's validated description instead of describing the call again (`Ctx::in_place_one`).
//! These tests repeat a call from one call site, then change one thing at a time — the tensor,
//! the reduction, the root, the kind, the communicator, the shape of the same buffer, the call
//! site — and check that every change is seen: in the results (hand-computed), in the
//! mismatch every rank reports, in the line a report names, or in a refusal.

use rankwise_runtime::{Ctx, Error, Group, ReduceOp, Result, Tensor, spawn, spawn_each};

/// One call site for every call a test makes through it (the site is the only thing the tests
/// keep equal while they change the rest).
fn all_reduce(ctx: &mut Ctx, t: &mut Tensor<f32>, op: ReduceOp) -> Result<()> {
    ctx.all_reduce(t, op)
}

fn broadcast(ctx: &mut Ctx, t: &mut Tensor<f32>, root: usize) -> Result<()> {
    ctx.broadcast(t, root)
}

fn reduce(ctx: &mut Ctx, t: &mut Tensor<f32>, root: usize, op: ReduceOp) -> Result<()> {
    ctx.reduce(t, root, op)
}

fn broadcast_on(ctx: &mut Ctx, g: &Group, t: &mut Tensor<f32>, root: usize) -> Result<()> {
    ctx.group(g).broadcast(t, root)
}

#[test]
fn each_change_to_a_repeated_call_is_seen_in_its_results() {
    let results = spawn(3, |ctx| {
        let r = ctx.rank() as f32;
        let mut seen = Vec::new();
        let mut a = Tensor::full([4], r)?;
        for _ in 0..3 {
            all_reduce(ctx, &mut a, ReduceOp::Sum)?; // 0+1+2 = 3, then 9, then 27
        }
        seen.push(a.to_vec()[0]);
        // Another tensor of the same shape, same site.
        let mut b = Tensor::full([4], 10.0 + r)?;
        all_reduce(ctx, &mut b, ReduceOp::Sum)?;
        seen.push(b.to_vec()[0]); // 33
        // The same tensor, another reduction.
        for op in [ReduceOp::Sum, ReduceOp::Max] {
            a.fill(r);
            all_reduce(ctx, &mut a, op)?;
            seen.push(a.to_vec()[0]); // 3, then 2
        }
        // The same tensor and root, repeated; then another root.
        for root in [0, 0, 1, 1, 2] {
            a.fill(r);
            broadcast(ctx, &mut a, root)?;
            seen.push(a.to_vec()[0]); // the root's rank
        }
        // Reduce after reduce: only the root's tensor changes; then another root.
        for root in [2, 2, 0] {
            a.fill(r + 1.0);
            reduce(ctx, &mut a, root, ReduceOp::Sum)?;
            seen.push(a.to_vec()[0]); // 6 on the root, r + 1 elsewhere
        }
        // The same tensor, root and site on two communicators: all ranks, then ranks 1 and 2
        // (rank 0 returns meanwhile, so a broadcast on the first would fail).
        let all: Group = ctx.new_group([0, 1, 2])?;
        let pair: Group = ctx.new_group([1, 2])?;
        for _ in 0..2 {
            a.fill(r);
            broadcast_on(ctx, &all, &mut a, 1)?;
            seen.push(a.to_vec()[0]); // 1
        }
        if ctx.rank() != 0 {
            a.fill(r + 5.0);
            broadcast_on(ctx, &pair, &mut a, 1)?;
            seen.push(a.to_vec()[0]); // 6
        }
        Ok(seen)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    for (rank, seen) in results.iter().enumerate() {
        let r = rank as f32;
        let on = |root: usize| if rank == root { 6.0 } else { r + 1.0 };
        let mut expected = vec![27.0, 33.0, 3.0, 2.0, 0.0, 0.0, 1.0, 1.0, 2.0];
        expected.extend([on(2), on(2), on(0), 1.0, 1.0]);
        if rank != 0 {
            expected.push(6.0);
        }
        assert_eq!(seen, &expected, "rank {rank}");
    }
}

#[test]
fn a_new_shape_of_the_same_buffer_is_compared_anew() {
    // Every rank broadcasts a [4] tensor three times from one site; then rank 1 reshapes its
    // buffer (the same allocation) to [2, 2] and broadcasts it from the same site: a
    // disagreement every rank must report, naming both shapes.
    let results = spawn_each(2, Default::default(), |ctx| {
        let mut t = Tensor::full([4], 1.0f32)?;
        for _ in 0..3 {
            broadcast(ctx, &mut t, 0)?;
        }
        if ctx.rank() == 1 {
            t = t.reshape([2, 2])?;
        }
        broadcast(ctx, &mut t, 0)?;
        // Anything after it (the second rank would otherwise return at once).
        ctx.barrier()
    })
    .unwrap_or_else(|e| panic!("{e}"));
    every_rank_reports_shapes_4_and_2x2(&results);
}

#[test]
fn a_repeated_call_from_another_line_is_reported_at_that_line() {
    // Three broadcasts from one line, then the same broadcast from another line on rank 0
    // while rank 1 calls all_reduce: the mismatch must place rank 0's call at its new line.
    static LINE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let results = spawn_each(2, Default::default(), |ctx| {
        let mut t = Tensor::full([4], 1.0f32)?;
        for _ in 0..3 {
            ctx.broadcast(&mut t, 0)?;
        }
        if ctx.rank() == 0 {
            LINE.store(line!() + 1, std::sync::atomic::Ordering::Relaxed);
            ctx.broadcast(&mut t, 0)?;
        } else {
            ctx.all_reduce(&mut t, ReduceOp::Sum)?;
        }
        ctx.barrier()
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let line = LINE.load(std::sync::atomic::Ordering::Relaxed);
    for (rank, r) in results.iter().enumerate() {
        match r {
            Err(Error::CollectiveMismatch(m)) => {
                let site = if m.rank_a == 0 { m.site_a } else { m.site_b };
                assert_eq!(site.line, line, "rank {rank}: {m}");
            }
            other => panic!("rank {rank}: expected a collective mismatch, got {other:?}"),
        }
    }
}

#[test]
fn a_repeated_call_with_a_root_out_of_range_is_refused() {
    // A valid broadcast, then the same one with a root the world does not have: refused
    // before anything is posted, on the rank that made it, however often the valid one ran.
    let results = spawn_each(2, Default::default(), |ctx| {
        let mut t = Tensor::full([2], 1.0f32)?;
        for _ in 0..3 {
            broadcast(ctx, &mut t, 1)?;
        }
        broadcast(ctx, &mut t, 7)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    // A rank refused its own call, or was told of the other's refusal while it still waited
    // for the broadcasts before it (each rank left them early: see `exec::local::eager`).
    let mut refused = 0;
    for (rank, r) in results.iter().enumerate() {
        match r {
            Err(Error::Misuse { rank: at, .. }) if *at == rank => refused += 1,
            Err(e @ Error::PeerFailed { .. }) if e.to_string().contains("root 7") => {}
            other => panic!("rank {rank}: expected the root to be refused, got {other:?}"),
        }
    }
    assert!(refused > 0, "{results:?}");
}

fn all_gather(ctx: &mut Ctx, x: &Tensor<f32>, out: &mut Tensor<f32>, dim: usize) -> Result<()> {
    ctx.all_gather(x, out, dim)
}

fn all_to_all(ctx: &mut Ctx, x: &Tensor<f32>, out: &mut Tensor<f32>, dim: usize) -> Result<()> {
    ctx.all_to_all(x, out, dim)
}

fn reduce_scatter(
    ctx: &mut Ctx,
    x: &Tensor<f32>,
    out: &mut Tensor<f32>,
    op: ReduceOp,
) -> Result<()> {
    ctx.reduce_scatter(x, out, op, 0)
}

#[test]
fn each_change_to_a_repeated_call_with_an_output_is_seen() {
    let results = spawn(2, |ctx| {
        let r = ctx.rank() as f32;
        let mut seen: Vec<Vec<f32>> = Vec::new();
        // all_gather, repeated; then another input, then another output.
        let x = Tensor::from_vec([2], vec![r, r + 10.0])?;
        let y = Tensor::from_vec([2], vec![r + 20.0, r + 30.0])?;
        let mut out = Tensor::full([4], -1.0f32)?;
        let mut other = Tensor::full([4], -1.0f32)?;
        for _ in 0..2 {
            all_gather(ctx, &x, &mut out, 0)?;
        }
        seen.push(out.to_vec());
        all_gather(ctx, &y, &mut out, 0)?;
        seen.push(out.to_vec());
        all_gather(ctx, &y, &mut other, 0)?;
        seen.push(other.to_vec());
        // all_to_all of a 2 × 2 tensor along rows, repeated, then along columns.
        let m = Tensor::from_vec([2, 2], vec![r, r + 1.0, r + 10.0, r + 11.0])?;
        let mut t = Tensor::full([2, 2], -1.0f32)?;
        for dim in [0, 0, 1] {
            all_to_all(ctx, &m, &mut t, dim)?;
            seen.push(t.to_vec());
        }
        // reduce_scatter with Sum, repeated, then with Max.
        let z = Tensor::from_vec([2], vec![r + 1.0, r + 2.0])?;
        let mut part = Tensor::full([1], -1.0f32)?;
        for op in [ReduceOp::Sum, ReduceOp::Sum, ReduceOp::Max] {
            reduce_scatter(ctx, &z, &mut part, op)?;
            seen.push(part.to_vec());
        }
        Ok(seen)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    for (rank, seen) in results.iter().enumerate() {
        let r = rank as f32;
        let expected: Vec<Vec<f32>> = vec![
            vec![0.0, 10.0, 1.0, 11.0],
            vec![20.0, 30.0, 21.0, 31.0],
            vec![20.0, 30.0, 21.0, 31.0],
            // Rows: row `rank` of each member's matrix, in member order.
            vec![r * 10.0, r * 10.0 + 1.0, 1.0 + r * 10.0, 2.0 + r * 10.0],
            vec![r * 10.0, r * 10.0 + 1.0, 1.0 + r * 10.0, 2.0 + r * 10.0],
            // Columns: column `rank` of each member's matrix, side by side per row.
            vec![r, 1.0 + r, r + 10.0, 11.0 + r],
            // Element `rank` of (1, 2) + (2, 3): sums 3 and 5; maxima 2 and 3.
            vec![3.0 + 2.0 * r],
            vec![3.0 + 2.0 * r],
            vec![2.0 + r],
        ];
        assert_eq!(seen, &expected, "rank {rank}");
    }
}

#[test]
fn a_repeated_call_into_a_reshaped_output_is_refused() {
    // all_gather of [2] into [4], three times; then the same output buffer reshaped to
    // [2, 2], which an all_gather along dim 0 of [2] cannot fill: refused as a misuse, as it
    // would have been the first time.
    let results = spawn_each(2, Default::default(), |ctx| {
        let x = Tensor::full([2], 1.0f32)?;
        let mut out = Tensor::full([4], 0.0f32)?;
        for _ in 0..3 {
            all_gather(ctx, &x, &mut out, 0)?;
        }
        let mut out = out.reshape([2, 2])?;
        all_gather(ctx, &x, &mut out, 0)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    // A rank refused its own call, or was told of the other's refusal before it got there.
    let mut refused = 0;
    for (rank, r) in results.iter().enumerate() {
        match r {
            Err(Error::Misuse { rank: at, .. }) if *at == rank => refused += 1,
            Err(e @ Error::PeerFailed { .. }) if e.to_string().contains("has shape [2, 2]") => {}
            other => panic!("rank {rank}: expected the output's shape refused, got {other:?}"),
        }
    }
    assert!(refused > 0, "{results:?}");
}

#[test]
fn a_new_tensor_where_a_freed_one_was_is_read_through_its_own_pointer() {
    // A tensor made and dropped in every iteration: the allocator often gives the next one the
    // address of the last, so the call repeats the kept one in every respect — but the kept
    // pointers belong to a freed tensor. The call must use the new tensor's (Miri checks that
    // no access goes through a dead allocation's pointer; here, the values). Nothing else is
    // allocated in the loop, so that the freed address is the one handed out next.
    let results = spawn(2, |ctx| {
        let mut sums = [0.0f32; 24];
        for (i, sum) in sums.iter_mut().enumerate() {
            let mut t = Tensor::full([3], (ctx.rank() + i) as f32)?;
            all_reduce(ctx, &mut t, ReduceOp::Sum)?;
            *sum = t.as_slice()?[0];
        }
        Ok(sums)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    for sums in &results {
        for (i, &sum) in sums.iter().enumerate() {
            assert_eq!(sum, (2 * i + 1) as f32, "iteration {i}");
        }
    }
}

/// One bucket: an all_reduce of each of `ts` and an all_gather of `x` into `out`, recorded
/// from the same sites every time.
fn bucket(
    ctx: &mut Ctx,
    ts: &mut [Tensor<f32>],
    op: ReduceOp,
    x: &Tensor<f32>,
    out: &mut Tensor<f32>,
) -> Result<()> {
    let mut b = ctx.batch();
    for t in ts.iter_mut() {
        b.all_reduce(t, op);
    }
    b.all_gather(x, out, 0);
    b.run()
}

#[test]
fn a_batch_that_repeats_the_last_one_sees_every_change() {
    // The same bucket three times, then with one thing changed at a time: another tensor in
    // the middle, another reduction, fewer tensors, more tensors, another output. Each bucket's
    // results are checked against hand-computed sums, maxima and gathers.
    let results = spawn(2, |ctx| {
        let r = ctx.rank() as f32;
        let mut seen: Vec<Vec<f32>> = Vec::new();
        let fresh = |n: usize| -> Result<Vec<Tensor<f32>>> {
            (0..n).map(|i| Tensor::full([2], r + i as f32)).collect()
        };
        let x = Tensor::from_vec([2], vec![r, r + 10.0])?;
        let mut out = Tensor::full([4], -1.0f32)?;
        let mut ts = fresh(3)?;
        for _ in 0..3 {
            ts = fresh(3)?;
            bucket(ctx, &mut ts, ReduceOp::Sum, &x, &mut out)?;
        }
        seen.push(ts.iter().map(|t| t.to_vec()[0]).collect()); // 1, 3, 5
        // Another tensor in the middle.
        let mut other = Tensor::full([2], 100.0 + r)?;
        let mut ts = fresh(3)?;
        std::mem::swap(&mut ts[1], &mut other);
        bucket(ctx, &mut ts, ReduceOp::Sum, &x, &mut out)?;
        seen.push(ts.iter().map(|t| t.to_vec()[0]).collect()); // 1, 201, 5
        // Another reduction.
        let mut ts = fresh(3)?;
        bucket(ctx, &mut ts, ReduceOp::Max, &x, &mut out)?;
        seen.push(ts.iter().map(|t| t.to_vec()[0]).collect()); // 1, 2, 3
        // Fewer, then more tensors.
        for n in [2, 4] {
            let mut ts = fresh(n)?;
            bucket(ctx, &mut ts, ReduceOp::Sum, &x, &mut out)?;
            seen.push(ts.iter().map(|t| t.to_vec()[0]).collect());
        }
        // Another output for the gather.
        let mut out2 = Tensor::full([4], -1.0f32)?;
        let mut ts = fresh(1)?;
        bucket(ctx, &mut ts, ReduceOp::Sum, &x, &mut out2)?;
        seen.push(out2.to_vec()); // 0, 10, 1, 11
        seen.push(out.to_vec());
        Ok(seen)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    for (rank, seen) in results.iter().enumerate() {
        let expected: Vec<Vec<f32>> = vec![
            vec![1.0, 3.0, 5.0],
            vec![1.0, 201.0, 5.0],
            vec![1.0, 2.0, 3.0],
            vec![1.0, 3.0],
            vec![1.0, 3.0, 5.0, 7.0],
            vec![0.0, 10.0, 1.0, 11.0],
            vec![0.0, 10.0, 1.0, 11.0],
        ];
        assert_eq!(seen, &expected, "rank {rank}");
    }
}

#[test]
fn a_batch_repeat_with_a_new_shape_or_a_bad_root_is_checked_anew() {
    // A batch of one broadcast, repeated; then rank 1 reshapes the same buffer (a mismatch
    // every rank reports), and in another world the root goes out of range (refused).
    let results = spawn_each(2, Default::default(), |ctx| {
        let mut t = Tensor::full([4], 1.0f32)?;
        for _ in 0..3 {
            let mut b = ctx.batch();
            b.broadcast(&mut t, 0);
            b.run()?;
        }
        if ctx.rank() == 1 {
            t = t.reshape([2, 2])?;
        }
        let mut b = ctx.batch();
        b.broadcast(&mut t, 0);
        b.run()?;
        ctx.barrier()
    })
    .unwrap_or_else(|e| panic!("{e}"));
    every_rank_reports_shapes_4_and_2x2(&results);
    let results = spawn_each(1, Default::default(), |ctx| {
        let mut t = Tensor::full([4], 1.0f32)?;
        for root in [0, 0, 3] {
            let mut b = ctx.batch();
            b.broadcast(&mut t, root);
            b.run()?;
        }
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        matches!(&results[0], Err(Error::Misuse { .. })),
        "{:?}",
        results[0]
    );
}

#[test]
fn a_batch_of_new_tensors_where_freed_ones_were_reads_through_their_own_pointers() {
    // As for lone calls: every bucket's tensors are made and dropped anew, so they often get
    // the last bucket's addresses; the kept ops must take the new tensors' pointers.
    let results = spawn(2, |ctx| {
        let mut sums = [0.0f32; 16];
        for (i, sum) in sums.iter_mut().enumerate() {
            let mut a = Tensor::full([3], (ctx.rank() + i) as f32)?;
            let mut b = Tensor::full([3], 1.0f32)?;
            let mut batch = ctx.batch();
            batch.all_reduce(&mut a, ReduceOp::Sum);
            batch.all_reduce(&mut b, ReduceOp::Sum);
            batch.run()?;
            *sum = a.as_slice()?[0] + b.as_slice()?[0];
        }
        Ok(sums)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    for sums in &results {
        for (i, &sum) in sums.iter().enumerate() {
            assert_eq!(sum, (2 * i + 1) as f32 + 2.0, "iteration {i}");
        }
    }
}

/// A bucket over two communicators (the world and `pair`) with a message to self among its
/// calls, from the same sites every time: on the world, all_reduces of `ts`; on `pair` (for
/// its members), a sum of `p`.
fn two_group_bucket(
    ctx: &mut Ctx,
    pair: &Group,
    ts: &mut [Tensor<f32>],
    p: &mut Tensor<f32>,
    note: &Tensor<f32>,
    back: &mut Tensor<f32>,
) -> Result<()> {
    let me = ctx.rank();
    let mut b = ctx.batch();
    for t in ts.iter_mut() {
        b.all_reduce(t, ReduceOp::Sum);
    }
    if pair.members().contains(&me) {
        b.group(pair).all_reduce(p, ReduceOp::Sum);
    }
    b.send(note, me);
    b.recv(back, me);
    b.run()
}

#[test]
fn a_batch_repeated_around_other_calls_and_batches_keeps_its_results() {
    // The same bucket over two communicators, repeated with lone calls, another bucket (of a
    // different length) and a bucket of new tensors between the repeats: every result is
    // checked against hand-computed sums. The backend may reuse what it derived from a batch
    // only for the batch right after it, when that repeats it exactly.
    let results = spawn(3, |ctx| {
        let r = ctx.rank() as f32;
        let pair = ctx.new_group([0, 2])?;
        let mut ts: Vec<Tensor<f32>> = (0..4)
            .map(|i| Tensor::full([3], r + i as f32))
            .collect::<Result<_>>()?;
        let mut p = Tensor::full([2], 10.0 * r)?;
        let note = Tensor::full([1], 7.0 + r)?;
        let mut back = Tensor::full([1], 0.0f32)?;
        let mut seen: Vec<f32> = Vec::new();
        let mut lone = Tensor::full([1], 1.0f32)?;
        for round in 0..6 {
            for (i, t) in ts.iter_mut().enumerate() {
                t.fill(r + i as f32 + round as f32);
            }
            p.fill(10.0 * r);
            two_group_bucket(ctx, &pair, &mut ts, &mut p, &note, &mut back)?;
            // Sums over ranks 0, 1, 2 of r + i + round: 3 + 3i + 3 round.
            seen.extend(ts.iter().map(|t| t.to_vec()[0]));
            seen.push(p.to_vec()[0]); // 0 + 20 on ranks 0 and 2, 10 on rank 1
            seen.push(back.to_vec()[0]);
            match round {
                1 => all_reduce(ctx, &mut lone, ReduceOp::Sum)?,
                2 => {
                    // Another bucket: fewer tensors.
                    let (head, _) = ts.split_at_mut(2);
                    two_group_bucket(ctx, &pair, head, &mut p, &note, &mut back)?;
                }
                3 => {
                    // The same calls on new tensors (new addresses, mostly).
                    let mut fresh: Vec<Tensor<f32>> = (0..4)
                        .map(|_| Tensor::full([3], 1.0f32))
                        .collect::<Result<_>>()?;
                    p.fill(1.0);
                    two_group_bucket(ctx, &pair, &mut fresh, &mut p, &note, &mut back)?;
                    seen.extend(fresh.iter().map(|t| t.to_vec()[0])); // 3 each
                }
                _ => {}
            }
        }
        seen.push(lone.to_vec()[0]);
        Ok(seen)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    for (rank, seen) in results.iter().enumerate() {
        let mut want = Vec::new();
        for round in 0..6 {
            want.extend((0..4).map(|i| (3 + 3 * i + 3 * round) as f32));
            want.push(if rank == 1 { 10.0 } else { 20.0 });
            want.push(7.0 + rank as f32);
            if round == 3 {
                want.extend([3.0; 4]);
            }
        }
        want.push(3.0);
        assert_eq!(seen, &want, "rank {rank}");
    }
}

#[test]
fn a_batch_the_backend_reorders_is_repeated_in_its_own_order() {
    // Calls on a group made after the world come first here, so the backend runs the world's
    // call first (ops go by communicator); the next batch records the calls in the written
    // order again. Each is compared with the last batch's call at its place in that order, and
    // keeps the op made for that call — not whatever op the reordering left at that place
    // (another communicator's, with another tensor's length).
    let results = spawn(3, |ctx| {
        let r = ctx.rank() as f32;
        let pair = ctx.new_group([0, 1])?;
        let in_pair = pair.members().contains(&ctx.rank());
        let mut sums = Vec::new();
        for round in 0..4 {
            let mut small = Tensor::full([2], r + round as f32)?;
            let mut large = Tensor::full([64], 10.0 * r)?;
            let mut b = ctx.batch();
            if in_pair {
                b.group(&pair).all_reduce(&mut small, ReduceOp::Sum);
            }
            b.all_reduce(&mut large, ReduceOp::Sum);
            b.run()?;
            sums.push((small.to_vec(), large.to_vec()));
        }
        Ok(sums)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    for (rank, sums) in results.iter().enumerate() {
        for (round, (small, large)) in sums.iter().enumerate() {
            // The pair sums ranks 0 and 1; rank 2 keeps its own. The world sums 0, 10, 20.
            let want = if rank < 2 {
                1.0 + 2.0 * round as f32
            } else {
                rank as f32 + round as f32
            };
            assert_eq!(small, &vec![want; 2], "rank {rank} round {round}");
            assert_eq!(large, &vec![30.0; 64], "rank {rank} round {round}");
        }
    }
}

/// Every rank's result is a collective mismatch that names a `[4]` and a `[2, 2]` tensor.
fn every_rank_reports_shapes_4_and_2x2(results: &[Result<()>]) {
    for (rank, r) in results.iter().enumerate() {
        match r {
            Err(Error::CollectiveMismatch(m)) => {
                let both = format!("{} / {}", m.what_a, m.what_b);
                assert!(
                    both.contains("[4]") && both.contains("[2, 2]"),
                    "rank {rank}: {m}"
                );
            }
            other => panic!("rank {rank}: expected a collective mismatch, got {other:?}"),
        }
    }
}

/// Shares repeated on the same buffers go through them forward and backward in turn (every
/// other call starts with the lines the last one ended with): all_gathers and all_to_alls copy
/// their blocks backward, reduce_scatters fold theirs from the last row up, and all_reduces
/// fold the other half of their slices first. Each of three calls in a row of each kind, along
/// either dimension, at world 2 (the lone path) and 3 (ranks outnumber this host's cores: the
/// step-by-step path), writes every element of its output with what a hand-computed reference
/// puts there; a block's rows cross the backward copy's pieces (4 KiB; 16 bytes under Miri),
/// and an all_reduce's slices are long enough to be folded from both ends (8 KiB and more).
#[test]
fn repeated_shares_land_every_element_either_way() {
    let (rows, cols) = if cfg!(miri) { (3, 7) } else { (3, 1100) };
    let ar_rows = if cfg!(miri) { 2 } else { 6 };
    // The value of element (i, j) of rank `q`'s input in call `it` (i < 16, j < 4096): below
    // 2^20, so exact in f32, and so are sums of three.
    let value =
        |it: usize, q: usize, i: usize, j: usize| (((it * 4 + q) * 16 + i) * 4096 + j) as f32;
    let kinds = [
        ("all_gather", 0),
        ("all_gather", 1),
        ("all_to_all", 0),
        ("all_to_all", 1),
    ];
    let kinds = kinds
        .into_iter()
        .chain([("reduce_scatter", 0), ("reduce_scatter", 1)]);
    let kinds: Vec<_> = kinds.chain([("all_reduce", 0)]).collect();
    for n in [2, 3] {
        let kinds = kinds.clone();
        let errors = spawn(n, move |ctx| {
            let r = ctx.rank();
            let mut errors = Vec::new();
            for &(kind, dim) in &kinds {
                let along = |k: usize| if dim == 0 { [k * rows, cols] } else { [rows, k * cols] };
                let (shape_in, shape_out) = match kind {
                    "all_gather" => (along(1), along(n)),
                    "all_to_all" => (along(n), along(n)),
                    "reduce_scatter" => (along(n), along(1)),
                    // 24 KiB (8 KiB under Miri): sliced, each slice folded from both ends.
                    _ => ([ar_rows, 1024], [ar_rows, 1024]),
                };
                let mut x = Tensor::zeros(shape_in)?;
                let mut out = Tensor::zeros(shape_out)?;
                for it in 0..3 {
                    let xw = shape_in[1];
                    for (at, e) in x.as_mut_slice()?.iter_mut().enumerate() {
                        *e = value(it, r, at / xw, at % xw);
                    }
                    out.as_mut_slice()?.fill(-1.0);
                    match kind {
                        "all_gather" => all_gather(ctx, &x, &mut out, dim)?,
                        "all_to_all" => all_to_all(ctx, &x, &mut out, dim)?,
                        "reduce_scatter" => ctx.reduce_scatter(&x, &mut out, ReduceOp::Sum, dim)?,
                        _ => {
                            out.as_mut_slice()?.copy_from_slice(x.as_slice()?);
                            all_reduce(ctx, &mut out, ReduceOp::Sum)?;
                        }
                    }
                    let (got, width) = (out.to_vec(), shape_out[1]);
                    for (at, &g) in got.iter().enumerate() {
                        let (i, j) = (at / width, at % width);
                        // Output element (i, j) is element (si, sj) of member q's input, or
                        // the sum of that element over every member (`None`).
                        let (q, si, sj) = match (kind, dim) {
                            ("all_gather", 0) => (Some(i / rows), i % rows, j),
                            ("all_gather", _) => (Some(j / cols), i, j % cols),
                            ("all_to_all", 0) => (Some(i / rows), r * rows + i % rows, j),
                            ("all_to_all", _) => (Some(j / cols), i, r * cols + j % cols),
                            ("reduce_scatter", 0) => (None, r * rows + i, j),
                            ("reduce_scatter", _) => (None, i, r * cols + j),
                            _ => (None, i, j),
                        };
                        let want = match q {
                            Some(q) => value(it, q, si, sj),
                            None => (0..n).map(|q| value(it, q, si, sj)).sum(),
                        };
                        if g != want {
                            errors.push(format!(
                                "{kind} along {dim}, call {it}, element ({i}, {j}): {g}, want {want}"
                            ));
                            break;
                        }
                    }
                }
            }
            Ok(errors)
        })
        .unwrap_or_else(|e| panic!("{e}"));
        for (rank, e) in errors.iter().enumerate() {
            assert!(e.is_empty(), "world {n}, rank {rank}: {e:?}");
        }
    }
}
