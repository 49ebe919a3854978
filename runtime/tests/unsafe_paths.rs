//! Small programs that drive every unsafe path of the local backend — peers' buffers read and
//! written in place, sliced and whole reductions, strided copies, self-sends, and early exits
//! after an abort — sized so that Miri can run them:
//! `cargo +nightly miri test -p rankwise-runtime --test unsafe_paths`.

use rankwise_runtime::{Error, Options, ReduceOp, Result, Tensor, spawn, spawn_each};

/// Enough f32 elements that all_reduce slices the tensor across members.
const SLICED: usize = 2048 + 5;

#[test]
fn every_collective_touches_peers_buffers_soundly() {
    for world in [1, 2, 3] {
        let out = spawn(world, |ctx| {
            let (r, w) = (ctx.rank(), ctx.world());
            let root = w - 1;
            let mut big = Tensor::full([SLICED], r as f32 + 1.0)?;
            ctx.all_reduce(&mut big, ReduceOp::Sum)?;
            let mut small = Tensor::full([3], r as i32)?;
            ctx.reduce(&mut small, root, ReduceOp::Max)?;
            let mut b = Tensor::full([2, 2], r as u8)?;
            ctx.broadcast(&mut b, root)?;
            let x = Tensor::from_fn([2, 3], |i| (r * 100 + i[0] * 10 + i[1]) as i64)?;
            let mut ag = Tensor::zeros([2, 3 * w])?;
            ctx.all_gather(&x, &mut ag, 1)?;
            let mut g = Tensor::zeros([2 * w, 3])?;
            ctx.gather(&x, (r == root).then_some(&mut g), root, 0)?;
            let wide = Tensor::from_fn([2, 2 * w], |i| (i[1] + 10 * r) as f64)?;
            let mut s = Tensor::zeros([2, 2])?;
            ctx.scatter((r == root).then_some(&wide), &mut s, root, 1)?;
            let mut rs = Tensor::zeros([2, 2])?;
            ctx.reduce_scatter(&wide, &mut rs, ReduceOp::Sum, 1)?;
            let mut a2a = Tensor::zeros([2, 2 * w])?;
            ctx.all_to_all(&wide, &mut a2a, 1)?;
            let mine = Tensor::full([4], r as u16 as f32)?;
            let mut got = Tensor::<f32>::zeros([4])?;
            let mut batch = ctx.batch();
            batch
                .send(&mine, (r + 1) % w)
                .recv(&mut got, (r + w - 1) % w);
            batch.run()?;
            ctx.barrier()?;
            Ok((
                big.to_vec()[SLICED - 1],
                small.to_vec(),
                b.to_vec(),
                ag.to_vec(),
                s.to_vec(),
                got.to_vec(),
            ))
        })
        .unwrap();
        let total: f32 = (1..=world).map(|r| r as f32).sum();
        for (r, (big, small, b, ag, s, got)) in out.into_iter().enumerate() {
            assert_eq!(big, total);
            let want_small = if r == world - 1 {
                world as i32 - 1
            } else {
                r as i32
            };
            assert_eq!(small, vec![want_small; 3]);
            assert_eq!(b, vec![(world - 1) as u8; 4]);
            assert_eq!(
                ag[..3 * world],
                (0..world)
                    .flat_map(|q| (0..3).map(move |j| (q * 100 + j) as i64))
                    .collect::<Vec<_>>()
            );
            // Rank r gets columns 2r and 2r+1 of the root's [2, 2w] tensor (value col + 10·root).
            let base = 10.0 * (world - 1) as f64;
            let (c0, c1) = ((2 * r) as f64 + base, (2 * r + 1) as f64 + base);
            assert_eq!(s, vec![c0, c1, c0, c1]);
            assert_eq!(got, vec![((r + world - 1) % world) as f32; 4]);
        }
    }
}

/// A broadcast large enough that the root copies pieces into its peers' outputs, and an
/// all_gather above the eager size, which each member pushes into every peer's output.
#[test]
fn roots_and_gatherers_write_into_peers_outputs_soundly() {
    for world in [2, 3] {
        let out = spawn(world, |ctx| {
            let (r, w) = (ctx.rank(), ctx.world());
            let mut big = Tensor::from_fn([SLICED], |i| (r * 10_000 + i[0]) as f32)?;
            ctx.broadcast(&mut big, w - 1)?;
            let x = Tensor::from_fn([2, 100], |i| (r * 1000 + i[0] * 100 + i[1]) as i32)?;
            let mut ag = Tensor::zeros([2, 100 * w])?;
            ctx.all_gather(&x, &mut ag, 1)?;
            Ok((big.to_vec(), ag.to_vec()))
        })
        .unwrap();
        for (big, ag) in out {
            let root = world - 1;
            assert!(
                big.iter()
                    .enumerate()
                    .all(|(i, &v)| v == (root * 10_000 + i) as f32)
            );
            let want: Vec<i32> = (0..2)
                .flat_map(|row| {
                    (0..world)
                        .flat_map(move |q| (0..100).map(move |c| (q * 1000 + row * 100 + c) as i32))
                })
                .collect();
            assert_eq!(ag, want);
        }
    }
}

#[test]
fn aborts_wait_for_peers_to_leave_buffers_alone() {
    // Rank 1 disagrees at the second step of a batch while the others may still be working on
    // the first: every rank must get the error and no rank may free a buffer a peer still reads.
    let each = spawn_each(3, Options::default(), |ctx| {
        let mut a = Tensor::full([SLICED], 1.0f32)?;
        let mut b = Tensor::full([4], 1.0f32)?;
        let op = if ctx.rank() == 1 {
            ReduceOp::Max
        } else {
            ReduceOp::Sum
        };
        let mut batch = ctx.batch();
        batch
            .all_reduce(&mut a, ReduceOp::Sum)
            .all_reduce(&mut b, op);
        batch.run()
    })
    .unwrap();
    for res in each {
        assert!(matches!(res, Err(Error::CollectiveMismatch(_))), "{res:?}");
    }
}

#[test]
fn failures_and_deadlocks_end_every_rank() -> Result<()> {
    let err = spawn(2, |ctx| {
        if ctx.rank() == 0 {
            panic!("boom");
        }
        ctx.barrier()
    })
    .unwrap_err();
    assert!(matches!(err, Error::Panicked { rank: 0, .. }));
    let err = spawn(2, |ctx| {
        let mut t = Tensor::<u8>::zeros([1])?;
        ctx.recv(&mut t, 1 - ctx.rank())
    })
    .unwrap_err();
    assert!(matches!(err, Error::Deadlock(_)));
    Ok(())
}

/// Posted sends and receives: the backend's own buffers read by peers after the posting call
/// returned, a channel that holds one run while later posts wait their turn, requests dropped
/// unwaited (drained at the return), and a rank that fails with messages posted.
#[test]
fn posted_messages_own_their_buffers() {
    let out = spawn(3, |ctx| {
        let (r, w) = (ctx.rank(), ctx.world());
        let (next, prev) = ((r + 1) % w, (r + w - 1) % w);
        let a = Tensor::full([5], r as u16 as f32)?;
        let b = Tensor::full([2], 10 + r as u64)?;
        let mut ra = Tensor::<f32>::zeros([5])?;
        let mut rb = Tensor::<u64>::zeros([2])?;
        let s1 = ctx.isend(&a, next)?;
        let s2 = ctx.isend(&b, next)?; // waits for `s1` to be delivered before it is published
        drop(ctx.isend(&a, r)?); // to itself, never waited for: drained at the return
        let q1 = ctx.irecv(&mut ra, prev)?;
        let mut own = Tensor::<f32>::zeros([5])?;
        ctx.recv(&mut own, r).err(); // refused: a blocking receive from itself
        let mut batch = ctx.batch();
        batch.recv(&mut own, r);
        batch.run()?;
        ctx.recv(&mut rb, prev)?;
        q1.wait()?;
        s2.wait()?;
        s1.wait()?;
        Ok((ra.to_vec(), rb.to_vec(), own.to_vec()))
    })
    .unwrap();
    for (r, (ra, rb, own)) in out.iter().enumerate() {
        let p = (r + 2) % 3;
        assert_eq!(ra, &vec![p as f32; 5]);
        assert_eq!(rb, &vec![10 + p as u64; 2]);
        assert_eq!(own, &vec![r as f32; 5]);
    }
    let failed = spawn_each(2, Options::default(), |ctx| {
        let t = Tensor::full([64], 1u8)?;
        let mut u = Tensor::<u8>::zeros([64])?;
        if ctx.rank() == 0 {
            let _sent = ctx.isend(&t, 1)?;
            let _recv = ctx.irecv(&mut u, 1)?;
            return Err(Error::Tensor("rank 0 gives up".into()));
        }
        ctx.recv(&mut u, 0)?;
        ctx.send(&t, 0)?;
        Ok(())
    })
    .unwrap();
    assert!(failed[0].is_err() && failed[1].is_err(), "{failed:?}");
}

#[test]
fn packed_stretches_of_small_reductions_touch_peers_buffers_soundly() {
    // Two stretches (all_reduce, then reduce to the last rank) with shapes that get keys and
    // one that does not.
    for world in [2, 3] {
        let out = spawn(world, |ctx| {
            let r = ctx.rank();
            let shapes: [&[usize]; 5] = [&[3], &[2, 2], &[1, 1, 1, 1, 2], &[0], &[5]];
            let mut ts: Vec<Tensor<f32>> = shapes
                .iter()
                .map(|s| Tensor::full(s, r as f32 + 1.0))
                .collect::<Result<_>>()?;
            let mut rs: Vec<Tensor<i32>> = (0..3)
                .map(|i| Tensor::full([i + 1], r as i32))
                .collect::<Result<_>>()?;
            // Every rank batches the all_reduces (they run packed); rank 0 calls the reduces
            // one by one, meeting the others' stretch step by step.
            let mut b = ctx.batch();
            for t in ts.iter_mut() {
                b.all_reduce(t, ReduceOp::Sum);
            }
            b.run()?;
            if r == 0 {
                for t in rs.iter_mut() {
                    ctx.reduce(t, world - 1, ReduceOp::Max)?;
                }
            } else {
                let mut b = ctx.batch();
                for t in rs.iter_mut() {
                    b.reduce(t, world - 1, ReduceOp::Max);
                }
                b.run()?;
            }
            Ok((
                ts.iter().flat_map(|t| t.to_vec()).collect::<Vec<_>>(),
                rs.iter().flat_map(|t| t.to_vec()).collect::<Vec<_>>(),
            ))
        })
        .unwrap();
        let total: f32 = (1..=world).map(|r| r as f32).sum();
        for (r, (sums, maxes)) in out.into_iter().enumerate() {
            assert_eq!(sums, vec![total; 3 + 4 + 2 + 5]);
            let want = if r == world - 1 {
                world as i32 - 1
            } else {
                r as i32
            };
            assert_eq!(maxes, vec![want; 6]);
        }
    }
}

/// A rank keeps its pack table from one bucket to the next and rewrites what changed: the same
/// bucket twice, a longer one over other tensors, a shorter one, then a disagreement in a
/// table that agreed last time (after which the table is dropped, not kept). In between,
/// buckets of tensors made anew each time: the allocator hands back the addresses just freed,
/// so entries compare equal while the tensors are new (the table once kept the old pointers,
/// whose provenance was the freed tensors').
#[test]
fn pack_tables_kept_between_buckets_are_rewritten_soundly() {
    for world in [2, 3] {
        let each = spawn_each(world, Options::default(), move |ctx| {
            let r = ctx.rank();
            for round in 0..4 {
                let mut fresh: Vec<Tensor<f64>> = (0..3)
                    .map(|_| Tensor::full([2], (r + round) as f64))
                    .collect::<Result<_>>()?;
                let mut batch = ctx.batch();
                for t in fresh.iter_mut() {
                    batch.all_reduce(t, ReduceOp::Sum);
                }
                batch.run()?;
                let total: f64 = (0..world).map(|x| (x + round) as f64).sum();
                assert!(
                    fresh.iter().all(|t| t.to_vec() == [total; 2]),
                    "round {round}"
                );
            }
            let mut a: Vec<Tensor<f32>> = (0..4)
                .map(|i| Tensor::full([i + 1], 1.0))
                .collect::<Result<_>>()?;
            let mut b: Vec<Tensor<f32>> = (0..6)
                .map(|_| Tensor::full([2, 2], 1.0))
                .collect::<Result<_>>()?;
            for (ts, n) in [(0, 4), (0, 4), (1, 6), (0, 2)] {
                let ts = if ts == 0 { &mut a } else { &mut b };
                for t in ts.iter_mut() {
                    t.fill(r as f32 + 1.0);
                }
                let mut batch = ctx.batch();
                for t in ts[..n].iter_mut() {
                    batch.all_reduce(t, ReduceOp::Sum);
                }
                batch.run()?;
                let total: f32 = (1..=world).map(|x| x as f32).sum();
                for (i, t) in ts.iter().enumerate() {
                    let want = if i < n { total } else { r as f32 + 1.0 };
                    assert!(t.to_vec().iter().all(|&x| x == want), "tensor {i}");
                }
            }
            if r == 1 {
                let t = std::mem::replace(&mut a[1], Tensor::full([1], 0.0)?);
                a[1] = t.reshape([1, 2])?;
            }
            let mut batch = ctx.batch();
            for t in a.iter_mut() {
                batch.all_reduce(t, ReduceOp::Sum);
            }
            batch.run()
        })
        .unwrap();
        for res in each {
            assert!(matches!(res, Err(Error::CollectiveMismatch(_))), "{res:?}");
        }
    }
}

/// A disagreement in the middle of packed stretches: the rank that finds it stops the world
/// and leaves while peers may still be reading its pack table, which must outlive their reads
/// (it once was freed before the world was quiesced).
#[test]
fn a_mismatch_inside_a_stretch_frees_nothing_a_peer_still_reads() {
    for round in 0..3 {
        let each = spawn_each(3, Options::default(), move |ctx| {
            let odd = ctx.rank() == 1 + round % 2;
            let mut ts: Vec<Tensor<f32>> = (0..6)
                .map(|i| Tensor::full([if odd && i == 3 { 400 } else { 300 }], 1.0))
                .collect::<Result<_>>()?;
            let mut batch = ctx.batch();
            for t in ts.iter_mut() {
                batch.all_reduce(t, ReduceOp::Sum);
            }
            batch.run()
        })
        .unwrap();
        for res in each {
            assert!(matches!(res, Err(Error::CollectiveMismatch(_))), "{res:?}");
        }
    }
}

#[test]
fn device_tensors_of_the_nccl_emulation_are_reached_only_soundly() {
    // Emulated device memory: written through its own pointer by the engine, copied in and out
    // by the tensor, and by a list form's staging after the op.
    let opts = Options::default().emulate(rankwise_runtime::Emulation::NCCL);
    let out = rankwise_runtime::spawn_with(2, opts, |ctx| {
        let r = ctx.rank();
        let mut a = ctx.full([3], r as i32 + 1)?;
        ctx.all_reduce(&mut a, ReduceOp::Sum)?;
        let x = ctx.tensor([2], vec![r as u8, 10 + r as u8])?;
        let mut parts = vec![ctx.zeros::<u8>([2])?, ctx.zeros::<u8>([2])?];
        ctx.all_gather_list(&x, &mut parts)?;
        let mut c = a.clone();
        c.fill(7);
        Ok((
            a.to_vec(),
            parts[1].to_vec(),
            c.to_vec(),
            a.to_host()?.to_vec(),
        ))
    })
    .unwrap();
    for (a, p, c, h) in out {
        assert_eq!(a, vec![3; 3]);
        assert_eq!(p, vec![1, 11]);
        assert_eq!(c, vec![7; 3]);
        assert_eq!(h, vec![3; 3]);
    }
}

#[test]
fn list_forms_stage_through_one_buffer_soundly() {
    // The op writes the contiguous buffer; the copies into the list's tensors read it after.
    let out = spawn(2, |ctx| {
        let r = ctx.rank();
        let x = Tensor::full([2], r as i16 as f32)?;
        let mut parts = vec![Tensor::<f32>::zeros([2])?, Tensor::<f32>::zeros([2])?];
        ctx.all_gather_list(&x, &mut parts)?;
        let ins = vec![
            Tensor::full([3], 1i64 + r as i64)?,
            Tensor::full([3], 10i64)?,
        ];
        let mut outs = vec![Tensor::<i64>::zeros([3])?, Tensor::<i64>::zeros([3])?];
        ctx.all_to_all_list(&ins, &mut outs)?;
        Ok((parts[1].to_vec(), outs[0].to_vec()))
    })
    .unwrap();
    assert_eq!(out[0], (vec![1.0; 2], vec![1; 3]));
    assert_eq!(out[1], (vec![1.0; 2], vec![10; 3]));
}
