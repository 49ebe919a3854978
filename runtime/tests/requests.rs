//! `isend`/`irecv`: posted messages progress while the rank does other things, complete at
//! `wait()`, keep their order with the rank's other messages, and fail like blocking calls when
//! the program is wrong. Values are computed by hand.

use std::time::Duration;

use rankwise_runtime::{Error, Options, Result, Tensor, spawn, spawn_with};

fn quick() -> Options {
    Options::default().timeout(Duration::from_secs(20))
}

#[test]
fn the_seed_chain_doubles_on_the_way() {
    // seed 002: rank 0 posts [100, 200] to rank 1, which doubles it and posts it to rank 2.
    let got = spawn(3, |ctx| {
        let mut t = ctx.zeros::<f32>([2])?;
        match ctx.rank() {
            0 => {
                t = ctx.tensor([2], vec![100.0, 200.0])?;
                let req = ctx.isend(&t, 1)?;
                // Work while the message is under way.
                let busy: f32 = (0..1000).map(|i| i as f32).sum();
                assert!(busy > 0.0);
                req.wait()?;
            }
            1 => {
                ctx.irecv(&mut t, 0)?.wait()?;
                let doubled = ctx.tensor([2], t.to_vec().iter().map(|x| x * 2.0).collect())?;
                ctx.isend(&doubled, 2)?.wait()?;
                t = doubled;
            }
            _ => ctx.irecv(&mut t, 1)?.wait()?,
        }
        Ok(t.to_vec())
    })
    .unwrap();
    assert_eq!(
        got,
        vec![vec![100.0, 200.0], vec![200.0, 400.0], vec![200.0, 400.0]]
    );
}

#[test]
fn every_rank_posts_its_send_first_around_a_ring() {
    // The seeds' deadlock (everyone sends first) is fine once the sends are posted.
    for world in 2..=5 {
        let got = spawn_with(world, quick(), |ctx| {
            let (r, w) = (ctx.rank(), ctx.world());
            let mine = ctx.tensor([3], vec![r as i64, 10 * r as i64, 100 * r as i64])?;
            let mut from_prev = ctx.zeros::<i64>([3])?;
            let req = ctx.isend(&mine, (r + 1) % w)?;
            ctx.recv(&mut from_prev, (r + w - 1) % w)?;
            req.wait()?;
            Ok(from_prev.to_vec())
        })
        .unwrap();
        for (r, v) in got.iter().enumerate() {
            let p = ((r + world - 1) % world) as i64;
            assert_eq!(v, &vec![p, 10 * p, 100 * p], "world {world}, rank {r}");
        }
    }
}

#[test]
fn a_posted_receive_progresses_while_the_rank_blocks_in_a_send() {
    // Post both, wait for one, make a blocking call the peer needs, wait for the other: correct
    // under MPI, and a deadlock if posts were only folded into the next blocking call.
    let got = spawn_with(2, quick(), |ctx| {
        let mut out = Vec::new();
        if ctx.rank() == 0 {
            let a = ctx.tensor([1], vec![1u32])?;
            let b = ctx.tensor([2], vec![2u32, 3])?;
            let mut c = ctx.zeros::<u32>([1])?;
            let s = ctx.isend(&a, 1)?;
            let q = ctx.irecv(&mut c, 1)?;
            s.wait()?;
            ctx.send(&b, 1)?;
            q.wait()?;
            out.extend(c.to_vec());
        } else {
            let mut a = ctx.zeros::<u32>([1])?;
            let mut b = ctx.zeros::<u32>([2])?;
            ctx.recv(&mut a, 0)?;
            ctx.recv(&mut b, 0)?;
            ctx.send(&ctx.tensor([1], vec![7u32])?, 0)?;
            out.extend(a.to_vec());
            out.extend(b.to_vec());
        }
        Ok(out)
    })
    .unwrap();
    assert_eq!(got, vec![vec![7], vec![1, 2, 3]]);
}

#[test]
fn posted_sends_progress_while_the_rank_waits_in_a_lone_small_collective() {
    // Rank 0 posts two sends to rank 1. The channel holds one at a time, so the second is
    // published by a later progress pass of rank 0 — made while it waits in a small all_reduce
    // (a call the threads backend can complete eagerly), which rank 1 reaches only after
    // receiving both. Skipping those passes would be a deadlock.
    let got = spawn_with(2, quick(), |ctx| {
        let mut x = ctx.tensor([1], vec![1.0f32 + ctx.rank() as f32])?;
        let mut got = Vec::new();
        if ctx.rank() == 0 {
            let a = ctx.tensor([1], vec![5i32])?;
            let b = ctx.tensor([2], vec![6i32, 7])?;
            let first = ctx.isend(&a, 1)?;
            let second = ctx.isend(&b, 1)?;
            ctx.all_reduce(&mut x, rankwise_runtime::ReduceOp::Sum)?;
            first.wait()?;
            second.wait()?;
        } else {
            let mut a = ctx.zeros::<i32>([1])?;
            let mut b = ctx.zeros::<i32>([2])?;
            ctx.recv(&mut a, 0)?;
            ctx.recv(&mut b, 0)?;
            ctx.all_reduce(&mut x, rankwise_runtime::ReduceOp::Sum)?;
            got.extend(a.to_vec());
            got.extend(b.to_vec());
        }
        Ok((x.to_vec(), got))
    })
    .unwrap();
    assert_eq!(got, vec![(vec![3.0], vec![]), (vec![3.0], vec![5, 6, 7])]);
}

#[test]
fn posted_and_blocking_messages_on_one_pair_keep_their_order() {
    // Ten posted sends (the channel holds one at a time, so nine wait their turn), then a
    // blocking one; the receiver posts ten receives, waits for them in reverse, then receives.
    let got = spawn_with(2, quick(), |ctx| {
        if ctx.rank() == 0 {
            let ts = (0..10)
                .map(|i| ctx.tensor([i + 1], vec![i as u8; i + 1]))
                .collect::<Result<Vec<_>>>()?;
            let reqs = ts
                .iter()
                .map(|t| ctx.isend(t, 1))
                .collect::<Result<Vec<_>>>()?;
            ctx.send(&ctx.tensor([1], vec![99u8])?, 1)?;
            for r in reqs {
                r.wait()?;
            }
            Ok(Vec::new())
        } else {
            let mut ts = (0..10)
                .map(|i| ctx.zeros::<u8>([i + 1]))
                .collect::<Result<Vec<_>>>()?;
            let mut reqs = Vec::new();
            for t in ts.iter_mut() {
                reqs.push(ctx.irecv(t, 0)?);
            }
            while let Some(r) = reqs.pop() {
                r.wait()?;
            }
            let mut last = ctx.zeros::<u8>([1])?;
            ctx.recv(&mut last, 0)?;
            let mut all: Vec<Vec<u8>> = ts.iter().map(Tensor::to_vec).collect();
            all.push(last.to_vec());
            Ok(all)
        }
    })
    .unwrap();
    let mut want: Vec<Vec<u8>> = (0..10).map(|i| vec![i as u8; i + 1]).collect();
    want.push(vec![99]);
    assert_eq!(got[1], want);
}

#[test]
fn a_request_dropped_without_wait_still_delivers_and_a_rank_may_post_to_itself() {
    let got = spawn_with(2, quick(), |ctx| {
        let r = ctx.rank();
        let t = ctx.tensor([2], vec![r as f64, 0.5])?;
        // Dropped: the message is still delivered, and the rank's return waits for it.
        drop(ctx.isend(&t, 1 - r)?);
        let mut from_peer = ctx.zeros::<f64>([2])?;
        ctx.recv(&mut from_peer, 1 - r)?;
        // To itself: post the send, then receive it.
        let mut own = ctx.zeros::<f64>([2])?;
        let s = ctx.isend(&t, r)?;
        ctx.irecv(&mut own, r)?.wait()?;
        s.wait()?;
        Ok((from_peer.to_vec(), own.to_vec()))
    })
    .unwrap();
    assert_eq!(got[0], (vec![1.0, 0.5], vec![0.0, 0.5]));
    assert_eq!(got[1], (vec![0.0, 0.5], vec![1.0, 0.5]));
}

#[test]
fn waiting_in_the_wrong_order_is_a_deadlock_naming_the_wait() {
    let err = spawn_with(2, quick(), |ctx| {
        let mut t = ctx.zeros::<f32>([4])?;
        if ctx.rank() == 0 {
            let q = ctx.irecv(&mut t, 1)?;
            q.wait()?; // WRONG-WAIT
            ctx.send(&ctx.zeros::<f32>([4])?, 1)?;
        } else {
            ctx.recv(&mut t, 0)?;
            ctx.send(&t, 0)?;
        }
        Ok(())
    })
    .unwrap_err();
    let Error::Deadlock(report) = &err else {
        panic!("expected a deadlock, got {err}")
    };
    let w0 = &report.waits[0];
    assert_eq!(w0.rank, 0);
    assert_eq!(w0.waiting_for, vec![1]);
    let line = include_str!("requests.rs")
        .lines()
        .position(|l| l.contains("WRONG-WAIT") && l.contains("q.wait"))
        .unwrap() as u32
        + 1;
    assert_eq!(w0.site.line, line, "{err}");
    assert!(
        w0.what
            .starts_with("wait() for recv(from 1, f32[4]) posted at"),
        "{}",
        w0.what
    );
}

#[test]
fn a_receive_never_matched_fails_the_rank_at_its_return() {
    // Rank 0 posts a receive and returns without waiting; rank 1 never sends. Rank 0's return
    // waits for the receive, so the run ends with an error, not a hang or a lost message.
    let err = spawn_with(2, quick(), |ctx| {
        let mut t = ctx.zeros::<f32>([4])?;
        if ctx.rank() == 0 {
            drop(ctx.irecv(&mut t, 1)?);
        }
        Ok(())
    })
    .unwrap_err();
    assert!(
        matches!(&err, Error::PeerFailed { peer: 1, .. } | Error::Deadlock(_))
            || matches!(&err, Error::Rank { error, .. } if matches!(**error, Error::PeerFailed { peer: 1, .. })),
        "{err}"
    );
}

#[test]
fn mismatched_posted_pairs_and_misuse_are_errors() {
    // A posted send of 3 elements meets a receive of 4.
    let err = spawn_with(2, quick(), |ctx| {
        if ctx.rank() == 0 {
            ctx.isend(&ctx.zeros::<f32>([3])?, 1)?.wait()?;
        } else {
            ctx.irecv(&mut ctx.zeros::<f32>([4])?, 0)?.wait()?;
        }
        Ok(())
    })
    .unwrap_err();
    assert!(err.to_string().contains("f32[3]"), "{err}");
    // A peer outside the world is refused at the call, before anything is posted.
    let err = spawn_with(2, quick(), |ctx| {
        let t = ctx.zeros::<f32>([1])?;
        let _ = ctx.isend(&t, 2)?;
        Ok(())
    })
    .unwrap_err();
    assert!(matches!(&err, Error::Misuse { .. }), "{err}");
}

#[test]
fn a_panic_with_messages_posted_stops_every_rank() {
    let err = spawn_with(2, quick(), |ctx| {
        let t = ctx.zeros::<f32>([1 << 12])?;
        let mut u = ctx.zeros::<f32>([1 << 12])?;
        if ctx.rank() == 0 {
            let _s = ctx.isend(&t, 1)?;
            let _q = ctx.irecv(&mut u, 1)?;
            panic!("boom with two messages posted");
        }
        ctx.recv(&mut u, 0)?;
        ctx.send(&t, 0)?;
        Ok(())
    })
    .unwrap_err();
    assert!(err.to_string().contains("boom"), "{err}");
}

#[test]
fn backends_without_posted_messages_refuse_them_before_any_call() {
    use rankwise_runtime::Emulation;
    let opts = quick().emulate(Emulation::Nccl {
        version: 23203,
        pack: false,
    });
    let err = spawn_with(2, opts, |ctx| {
        let t = ctx.zeros::<f32>([1])?;
        ctx.isend(&t, 1 - ctx.rank())?.wait()?; // POSTED
        Ok(())
    })
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("isend is not available"), "{msg}");
    assert!(msg.contains("requests.rs"), "{msg}");
}
