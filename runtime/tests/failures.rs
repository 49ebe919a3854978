//! One test per failure mode: each must end in well under a second with an error that names
//! the ranks and call sites involved — never a hang, never a panic escaping `spawn`.

use std::time::{Duration, Instant};

use rankwise_runtime::{
    Error, OpKind, Options, PeerFailure, ReduceOp, Result, Tensor, Violation, spawn, spawn_each,
    spawn_with,
};

/// Runs `f` and asserts it took less than a second.
fn quick<R>(f: impl FnOnce() -> R) -> R {
    let t = Instant::now();
    let r = f();
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "took {:?}",
        t.elapsed()
    );
    r
}

fn line_of(marker: &str) -> u32 {
    let src = include_str!("failures.rs");
    let idx = src
        .lines()
        .position(|l| l.contains(marker) && !l.contains("line_of"))
        .expect("marker");
    idx as u32 + 1
}

#[test]
fn both_ranks_send_first_is_a_deadlock_naming_both_sends() {
    let err = quick(|| {
        spawn(2, |ctx| {
            let x = Tensor::full([4], 1.0f32)?;
            let mut y = Tensor::<f32>::zeros([4])?;
            let peer = 1 - ctx.rank();
            ctx.send(&x, peer)?; // SEND-FIRST
            ctx.recv(&mut y, peer)?;
            Ok(())
        })
    })
    .unwrap_err();
    let Error::Deadlock(report) = &err else {
        panic!("expected a deadlock, got {err}")
    };
    assert_eq!(report.waits.len(), 2);
    for (r, w) in report.waits.iter().enumerate() {
        assert_eq!(w.rank, r);
        assert_eq!(w.waiting_for, vec![1 - r]);
        assert_eq!(w.site.line, line_of("SEND-FIRST"));
        assert!(w.what.starts_with("send(to "), "{}", w.what);
    }
    let msg = err.to_string();
    assert!(
        msg.contains("rank 0 waits in send(to 1, f32[4]) at"),
        "{msg}"
    );
    assert!(msg.contains("failures.rs"), "{msg}");
}

#[test]
fn three_rank_ring_all_sending_first_reports_the_cycle() {
    let err = quick(|| {
        spawn(3, |ctx| {
            let (r, w) = (ctx.rank(), ctx.world());
            let x = Tensor::full([1], r as i32)?;
            let mut y = Tensor::<i32>::zeros([1])?;
            ctx.send(&x, (r + 1) % w)?;
            ctx.recv(&mut y, (r + w - 1) % w)?;
            Ok(())
        })
    })
    .unwrap_err();
    let Error::Deadlock(report) = err else {
        panic!("expected a deadlock, got {err}")
    };
    let cycle: Vec<(usize, Vec<usize>)> = report
        .waits
        .iter()
        .map(|w| (w.rank, w.waiting_for.clone()))
        .collect();
    assert_eq!(cycle, vec![(0, vec![1]), (1, vec![2]), (2, vec![0])]);
}

#[test]
fn oversubscribed_deadlock_is_found_quickly() {
    // Eight ranks on however few cores: every rank receives first.
    let err = quick(|| {
        spawn(8, |ctx| {
            let (r, w) = (ctx.rank(), ctx.world());
            let mut y = Tensor::<u8>::zeros([1])?;
            ctx.recv(&mut y, (r + 1) % w)?;
            Ok(())
        })
    })
    .unwrap_err();
    assert!(
        matches!(&err, Error::Deadlock(d) if d.waits.len() == 8),
        "{err}"
    );
}

#[test]
fn collectives_on_crossed_communicators_deadlock() {
    let err = quick(|| {
        spawn(2, |ctx| {
            let g = ctx.new_group([0, 1])?;
            let mut t = Tensor::full([2], 1.0f64)?;
            if ctx.rank() == 0 {
                ctx.all_reduce(&mut t, ReduceOp::Sum)?;
                ctx.group(&g).all_reduce(&mut t, ReduceOp::Sum)?;
            } else {
                ctx.group(&g).all_reduce(&mut t, ReduceOp::Sum)?;
                ctx.all_reduce(&mut t, ReduceOp::Sum)?;
            }
            Ok(())
        })
    })
    .unwrap_err();
    let Error::Deadlock(report) = err else {
        panic!("expected a deadlock, got {err}")
    };
    assert_eq!(report.waits[0].waiting_for, vec![1]);
    assert_eq!(report.waits[1].waiting_for, vec![0]);
}

#[test]
fn all_reduce_against_broadcast_names_both_call_sites() {
    let err = quick(|| {
        spawn(4, |ctx| {
            let mut t = Tensor::full([2, 5], ctx.rank() as f32)?;
            if ctx.rank() == 2 {
                ctx.broadcast(&mut t, 0)?; // THE-BROADCAST
            } else {
                ctx.all_reduce(&mut t, ReduceOp::Sum)?; // THE-ALL-REDUCE
            }
            Ok(())
        })
    })
    .unwrap_err();
    let Error::CollectiveMismatch(m) = &err else {
        panic!("expected a mismatch, got {err}")
    };
    assert_eq!((m.rank_a, m.rank_b), (0, 2));
    assert_eq!(m.site_a.line, line_of("THE-ALL-REDUCE"));
    assert_eq!(m.site_b.line, line_of("THE-BROADCAST"));
    assert_eq!(m.what_a, "all_reduce(Sum, f32[2, 5])");
    assert_eq!(m.what_b, "broadcast(root 0, f32[2, 5])");
}

#[test]
fn every_disagreement_in_a_collective_is_a_mismatch() {
    type Variant = fn(&mut rankwise_runtime::Ctx) -> Result<()>;
    let variants: [(&str, Variant); 4] = [
        ("root", |ctx| {
            ctx.broadcast(&mut Tensor::full([3], 1i32)?, ctx.rank() % 2)
        }),
        ("op", |ctx| {
            let op = if ctx.rank() == 1 {
                ReduceOp::Max
            } else {
                ReduceOp::Sum
            };
            ctx.all_reduce(&mut Tensor::full([3], 1i32)?, op)
        }),
        ("shape", |ctx| {
            ctx.all_reduce(
                &mut Tensor::full([3 + ctx.rank() / 2], 1i32)?,
                ReduceOp::Sum,
            )
        }),
        ("dtype", |ctx| {
            if ctx.rank() == 0 {
                ctx.all_reduce(&mut Tensor::full([3], 1i64)?, ReduceOp::Sum)
            } else {
                ctx.all_reduce(&mut Tensor::full([3], 1i32)?, ReduceOp::Sum)
            }
        }),
    ];
    for (what, f) in variants {
        let err = quick(|| spawn(3, f)).unwrap_err();
        assert!(matches!(err, Error::CollectiveMismatch(_)), "{what}: {err}");
    }
}

#[test]
fn a_skipped_collective_fails_the_waiting_ranks_promptly() {
    let results = quick(|| {
        spawn_each(3, Options::default(), |ctx| {
            let mut t = Tensor::full([2], 1.0f32)?;
            if ctx.rank() == 0 {
                ctx.all_reduce(&mut t, ReduceOp::Sum)?; // SKIPPED-BY-OTHERS
            }
            Ok(())
        })
    })
    .unwrap();
    match &results[0] {
        Err(Error::PeerFailed {
            rank: 0,
            peer,
            reason: PeerFailure::Exited,
            site: Some(site),
        }) => {
            assert!(*peer == 1 || *peer == 2);
            assert_eq!(site.line, line_of("SKIPPED-BY-OTHERS"));
        }
        other => panic!("rank 0 should see its peers exit, got {other:?}"),
    }
    assert!(results[1].is_ok() && results[2].is_ok());
    // `spawn` reports the same root cause.
    let err = spawn(3, |ctx| {
        if ctx.rank() == 0 {
            ctx.barrier()?;
        }
        Ok(())
    })
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::PeerFailed {
                rank: 0,
                reason: PeerFailure::Exited,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_panicking_rank_is_the_reported_root_cause() {
    let start = Instant::now();
    let each = spawn_each(4, Options::default(), |ctx| {
        if ctx.rank() == 3 {
            panic!("rank three gives up");
        }
        let mut t = Tensor::full([8], 1u32)?;
        ctx.all_reduce(&mut t, ReduceOp::Sum)?;
        Ok(())
    })
    .unwrap();
    assert!(start.elapsed() < Duration::from_secs(1));
    for (r, res) in each.iter().enumerate().take(3) {
        match res {
            Err(Error::PeerFailed {
                rank,
                peer: 3,
                reason: PeerFailure::Panicked(m),
                ..
            }) => {
                assert_eq!(*rank, r);
                assert_eq!(m, "rank three gives up");
            }
            other => panic!("rank {r}: {other:?}"),
        }
    }
    let err = spawn(4, |ctx| {
        if ctx.rank() == 3 {
            panic!("rank three gives up");
        }
        ctx.barrier()
    })
    .unwrap_err();
    assert!(
        matches!(&err, Error::Panicked { rank: 3, message } if message == "rank three gives up"),
        "{err}"
    );
}

#[test]
fn a_rank_returning_an_error_is_the_root_cause() {
    #[derive(Debug, thiserror::Error)]
    #[error("input file missing")]
    struct Missing;
    let err = quick(|| {
        spawn(3, |ctx| {
            if ctx.rank() == 1 {
                return Err(Error::user(Missing));
            }
            ctx.barrier()
        })
    })
    .unwrap_err();
    match &err {
        Error::Rank { rank: 1, error } => {
            assert_eq!(error.to_string(), "input file missing");
            // The message holds the cause once; it is not also a `source` for chain printers.
            assert!(std::error::Error::source(&err).is_none());
        }
        other => panic!("{other}"),
    }
}

#[test]
fn timeout_is_optional_and_reports_whom_it_waited_for() {
    let opts = Options::default().timeout(Duration::from_millis(50));
    let each = spawn_each(2, opts, |ctx| {
        if ctx.rank() == 1 {
            std::thread::sleep(Duration::from_millis(400));
        }
        ctx.barrier()
    })
    .unwrap();
    match &each[0] {
        Err(Error::Timeout {
            rank: 0,
            waiting_for,
            after,
            ..
        }) => {
            assert_eq!(waiting_for, &vec![1]);
            assert!(*after >= Duration::from_millis(50));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(&each[1], Err(Error::PeerFailed { peer: 0, .. })),
        "{:?}",
        each[1]
    );
    // Without a timeout the same slow rank is simply waited for.
    spawn(2, |ctx| {
        if ctx.rank() == 1 {
            std::thread::sleep(Duration::from_millis(100));
        }
        ctx.barrier()
    })
    .unwrap();
}

#[test]
fn mismatched_recv_size_and_dtype_are_errors() {
    let err = quick(|| {
        spawn(2, |ctx| {
            if ctx.rank() == 0 {
                ctx.send(&Tensor::full([4], 1.0f32)?, 1)
            } else {
                ctx.recv(&mut Tensor::<f32>::zeros([3])?, 0)
            }
        })
    })
    .unwrap_err();
    match &err {
        Error::P2pMismatch(m) if (m.src, m.dst) == (0, 1) => {
            assert_eq!(
                (m.send_what.as_str(), m.recv_what.as_str()),
                ("f32[4]", "f32[3]")
            );
        }
        other => panic!("{other}"),
    }
    let err = spawn(2, |ctx| {
        if ctx.rank() == 0 {
            ctx.send(&Tensor::full([4], 1.0f32)?, 1)
        } else {
            ctx.recv(&mut Tensor::<i32>::zeros([4])?, 0)
        }
    })
    .unwrap_err();
    assert!(matches!(err, Error::P2pMismatch(_)), "{err}");
}

/// The rule a misuse error reports, if it is one.
fn violation(e: &Error) -> Option<&Violation> {
    match e {
        Error::Misuse { violation, .. } => Some(violation),
        _ => None,
    }
}

/// Misuse is reported on the rank that made it, before anything is sent.
#[test]
fn misuse_is_a_specific_error() {
    type Misuse = fn(&mut rankwise_runtime::Ctx) -> Result<()>;
    type Check = fn(&Error) -> bool;
    let cases: Vec<(&str, Misuse, Check)> = vec![
        (
            "peer out of range",
            |c| c.send(&Tensor::full([1], 0u8)?, 4),
            |e| {
                matches!(
                    violation(e),
                    Some(Violation::RankOutOfRange {
                        role: "peer",
                        value: 4,
                        world: 4,
                        ..
                    })
                )
            },
        ),
        (
            "root out of range",
            |c| c.broadcast(&mut Tensor::full([1], 0u8)?, 9),
            |e| {
                matches!(
                    violation(e),
                    Some(Violation::RankOutOfRange {
                        role: "root",
                        value: 9,
                        ..
                    })
                )
            },
        ),
        (
            "self send outside a batch",
            |c| {
                let r = c.rank();
                c.send(&Tensor::full([1], 0u8)?, r)
            },
            |e| {
                matches!(
                    violation(e),
                    Some(Violation::SelfP2p {
                        kind: OpKind::Send,
                        ..
                    })
                )
            },
        ),
        (
            "bitwise op on floats",
            |c| c.all_reduce(&mut Tensor::full([1], 0f32)?, ReduceOp::BitAnd),
            |e| {
                matches!(
                    violation(e),
                    Some(Violation::OpNotSupported {
                        op: ReduceOp::BitAnd,
                        ..
                    })
                )
            },
        ),
        (
            "reduce_scatter not divisible",
            |c| {
                c.reduce_scatter(
                    &Tensor::full([6], 0f32)?,
                    &mut Tensor::zeros([1])?,
                    ReduceOp::Sum,
                    0,
                )
            },
            |e| {
                matches!(
                    violation(e),
                    Some(Violation::NotDivisible {
                        size: 6,
                        parts: 4,
                        ..
                    })
                )
            },
        ),
        (
            "all_to_all not divisible",
            |c| c.all_to_all(&Tensor::full([2, 3], 0f32)?, &mut Tensor::zeros([2, 3])?, 1),
            |e| {
                matches!(
                    violation(e),
                    Some(Violation::NotDivisible {
                        dim: 1,
                        size: 3,
                        ..
                    })
                )
            },
        ),
        (
            "dim out of range",
            |c| c.all_gather(&Tensor::full([2], 0f32)?, &mut Tensor::zeros([8])?, 1),
            |e| matches!(violation(e), Some(Violation::DimOutOfRange { dim: 1, .. })),
        ),
        (
            "all_gather output of the wrong shape",
            |c| c.all_gather(&Tensor::full([5, 2], 0f32)?, &mut Tensor::zeros([5, 6])?, 1),
            |e| {
                matches!(
                    violation(e),
                    Some(Violation::BadShape {
                        kind: OpKind::AllGather,
                        ..
                    })
                )
            },
        ),
        (
            "gather output on a non-root",
            |c| {
                let mut out = Tensor::zeros([4])?;
                c.gather(&Tensor::full([1], 0f32)?, Some(&mut out), 0, 0)
            },
            |e| {
                matches!(
                    violation(e),
                    Some(Violation::BadShape {
                        kind: OpKind::Gather,
                        ..
                    })
                )
            },
        ),
        (
            "group used by a non-member",
            |c| {
                let g = c.new_group([0])?;
                c.group(&g).barrier()
            },
            |e| matches!(violation(e), Some(Violation::NotAMember { .. })),
        ),
        (
            "root outside the group",
            |c| {
                let g = c.new_group([1, 2, 3])?;
                c.group(&g).broadcast(&mut Tensor::full([1], 0u8)?, 0)
            },
            |e| {
                matches!(
                    violation(e),
                    Some(Violation::RootNotInGroup { root: 0, .. })
                )
            },
        ),
        (
            "duplicate group members",
            |c| c.new_group([1, 1]).map(drop),
            |e| matches!(violation(e), Some(Violation::InvalidGroup { .. })),
        ),
        (
            "split that misses a rank",
            |c| c.split(&[&[0, 1], &[3]]).map(drop),
            |e| matches!(violation(e), Some(Violation::InvalidSplit { .. })),
        ),
        (
            "batched misuse surfaces at run",
            |c| {
                let x = Tensor::full([1], 0u8)?;
                let mut b = c.batch();
                b.send(&x, 7);
                b.run()
            },
            |e| {
                matches!(
                    violation(e),
                    Some(Violation::RankOutOfRange { value: 7, .. })
                )
            },
        ),
    ];
    for (what, f, ok) in cases {
        let each = quick(|| {
            spawn_each(4, Options::default(), |ctx| {
                if ctx.rank() == 1 { f(ctx) } else { Ok(()) }
            })
        })
        .unwrap();
        let err = each[1].as_ref().expect_err(what);
        assert!(ok(err), "{what}: got {err}");
        assert!(
            err.to_string().contains("failures.rs"),
            "{what}: no call site in {err}"
        );
    }
}

#[test]
fn invalid_world_is_an_error() {
    assert!(matches!(
        spawn(0, |_| Ok(())),
        Err(Error::InvalidWorld { world: 0 })
    ));
}

#[test]
fn no_deadlock_is_reported_while_a_rank_computes() {
    // Rank 1 is slow (parked waits on the others), yet the program is fine.
    let out = spawn_with(3, Options::default(), |ctx| {
        if ctx.rank() == 1 {
            std::thread::sleep(Duration::from_millis(30));
        }
        let mut t = Tensor::full([1], 1u64)?;
        ctx.all_reduce(&mut t, ReduceOp::Sum)?;
        Ok(t.to_vec()[0])
    })
    .unwrap();
    assert_eq!(out, vec![3, 3, 3]);
}

/// Steps where only the owner moves data (barriers, small reductions) must still be checked:
/// whichever member owns the step, a barrier against an all_reduce is a mismatch.
#[test]
fn a_barrier_against_a_small_all_reduce_is_a_mismatch_whoever_owns_the_step() {
    for world in [2, 3] {
        for warmup in 0..world {
            let err = quick(|| {
                spawn(world, |ctx| {
                    for _ in 0..warmup {
                        ctx.barrier()?;
                    }
                    if ctx.rank() == 0 {
                        ctx.barrier()
                    } else {
                        ctx.all_reduce(&mut Tensor::full([2], 1.0f32)?, ReduceOp::Sum)
                    }
                })
            })
            .unwrap_err();
            assert!(
                matches!(&err, Error::CollectiveMismatch(m) if m.step == warmup as u64),
                "world {world}, step {warmup}: {err}"
            );
        }
    }
}
