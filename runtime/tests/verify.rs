//! The verifier, rule by rule, with the seeds' classic mistakes among the cases.

use rankwise_runtime::GroupId;
use rankwise_runtime::verify::{
    Code, Diagnostics, Match, Program, RankBuilder, Verdict, verify, verify_worlds,
};
use rankwise_runtime::{DType, ReduceOp};

const W: GroupId = GroupId::WORLD;
const F32: DType = DType::F32;

/// An SPMD program: `body` runs once per rank, as a rank program would.
fn spmd(world: usize, body: impl Fn(usize, &mut RankBuilder<'_>)) -> Program {
    let mut p = Program::new(world);
    for r in 0..world {
        body(r, &mut p.rank(r));
    }
    p
}

/// Like [`spmd`], with one extra group declared up front.
fn spmd_group(
    world: usize,
    members: &[usize],
    body: impl Fn(usize, GroupId, &mut RankBuilder<'_>),
) -> Program {
    let mut p = Program::new(world);
    let g = p.group(members);
    for r in 0..world {
        body(r, g, &mut p.rank(r));
    }
    p
}

fn rejected(p: &Program) -> Diagnostics {
    match verify(p) {
        Ok(_) => panic!("expected the verifier to reject:\n{p:#?}"),
        Err(d) => d,
    }
}

fn line_of(marker: &str) -> u32 {
    let src = include_str!("verify.rs");
    src.lines()
        .position(|l| l.contains(marker) && !l.contains("line_of("))
        .expect("marker") as u32
        + 1
}

#[test]
fn seed_deadlock_both_ranks_send_first() {
    let p = spmd(2, |r, b| {
        b.send(F32, &[4], 1 - r); // BOTH-SEND
        b.recv(F32, &[4], 1 - r);
    });
    let d = rejected(&p);
    assert_eq!(d.codes(), vec![Code::RW001], "{d}");
    let x = &d.0[0];
    assert_eq!(x.ranks, vec![0, 1]);
    assert_eq!(x.verdict, Verdict::Hang);
    assert_eq!(x.primary.site.line, line_of("BOTH-SEND"));
    assert!(
        x.message
            .starts_with("deadlock: rank 0 waits in send(to 1, f32[4]) at"),
        "{}",
        x.message
    );
    assert!(
        x.message.contains("which waits in send(to 0, f32[4])"),
        "{}",
        x.message
    );
    assert!(x.message.ends_with("for rank 0"), "{}", x.message);
    assert!(x.help.contains("batch"), "{}", x.help);
    // The fix from the seed: rank 1 receives first.
    let fixed = spmd(2, |r, b| {
        if r == 0 {
            b.send(F32, &[4], 1).recv(F32, &[4], 1);
        } else {
            b.recv(F32, &[4], 0).send(F32, &[4], 0);
        }
    });
    assert!(verify(&fixed).is_ok());
}

#[test]
fn three_rank_ring_where_everyone_sends_first() {
    let p = spmd(3, |r, b| {
        b.send(DType::I32, &[1], (r + 1) % 3)
            .recv(DType::I32, &[1], (r + 2) % 3);
    });
    let d = rejected(&p);
    assert_eq!(d.0.len(), 1, "{d}");
    let m = &d.0[0].message;
    assert!(m.contains("rank 0 waits in send(to 1, i32[1])"), "{m}");
    assert!(
        m.contains("which waits in send(to 2, i32[1])")
            && m.contains("which waits in send(to 0, i32[1])"),
        "{m}"
    );
    // Batched, the same ring is fine.
    let ok = spmd(3, |r, b| {
        b.batch()
            .send(DType::I32, &[1], (r + 1) % 3)
            .recv(DType::I32, &[1], (r + 2) % 3)
            .end_batch();
    });
    assert!(verify(&ok).is_ok());
}

#[test]
fn collective_behind_if_rank_zero_at_the_end_is_skipped() {
    let p = spmd(4, |r, b| {
        if r == 0 {
            b.all_reduce(W, F32, &[2], ReduceOp::Sum); // ONLY-RANK-0
        }
    });
    let d = rejected(&p);
    assert_eq!(d.codes(), vec![Code::RW005], "{d}");
    let x = &d.0[0];
    assert_eq!(x.primary.site.line, line_of("ONLY-RANK-0"));
    assert!(
        x.message
            .contains("every rank but 0 finish without calling it"),
        "{}",
        x.message
    );
    assert_eq!(x.verdict, Verdict::Hang);
}

#[test]
fn collective_behind_if_rank_zero_in_the_middle_is_recognised_as_skipped() {
    let p = spmd(4, |r, b| {
        if r == 0 {
            b.all_reduce(W, F32, &[2], ReduceOp::Sum); // SKIPPED
        }
        b.barrier(W); // AFTER
    });
    let d = rejected(&p);
    assert_eq!(d.codes(), vec![Code::RW005], "{d}");
    let x = &d.0[0];
    assert_eq!(x.primary.site.line, line_of("SKIPPED"));
    assert_eq!(x.secondary[0].0.site.line, line_of("AFTER"));
    assert!(
        x.message.contains("rank 0 calls all_reduce(Sum, f32[2])"),
        "{}",
        x.message
    );
    assert!(
        x.message.contains("every rank but 0 skip it"),
        "{}",
        x.message
    );
    // One problem, one diagnostic: no echo for the barrier rank 0 then waits in.
    assert_eq!(d.0.len(), 1);
}

#[test]
fn all_reduce_against_broadcast_is_a_mismatch() {
    let p = spmd(4, |r, b| {
        if r == 2 {
            b.broadcast(W, F32, &[2, 5], 0); // BCAST
        } else {
            b.all_reduce(W, F32, &[2, 5], ReduceOp::Sum); // AR
        }
    });
    let d = rejected(&p);
    assert_eq!(d.codes(), vec![Code::RW004], "{d}");
    let x = &d.0[0];
    assert_eq!(x.primary.site.line, line_of("BCAST"));
    assert_eq!(x.secondary[0].0.site.line, line_of("AR"));
    assert!(
        x.message.contains(
            "rank 2 calls broadcast(root 0, f32[2, 5]) here, but every rank but 2 call all_reduce"
        ),
        "{}",
        x.message
    );
}

#[test]
fn dtype_shape_root_and_op_disagreements() {
    let dtype = spmd(2, |r, b| {
        b.all_reduce(
            W,
            if r == 0 { F32 } else { DType::F64 },
            &[3],
            ReduceOp::Sum,
        );
    });
    assert_eq!(rejected(&dtype).codes(), vec![Code::RW008]);
    let shape = spmd(3, |r, b| {
        b.all_gather(W, F32, &[2, 1 + r / 2], 1);
    });
    assert_eq!(rejected(&shape).codes(), vec![Code::RW006]);
    let root = spmd(2, |r, b| {
        b.broadcast(W, F32, &[3], r);
    });
    assert_eq!(rejected(&root).codes(), vec![Code::RW004]);
    let op = spmd(2, |r, b| {
        b.all_reduce(
            W,
            F32,
            &[3],
            if r == 0 { ReduceOp::Max } else { ReduceOp::Min },
        );
    });
    assert_eq!(rejected(&op).codes(), vec![Code::RW004]);
}

#[test]
fn reduce_scatter_the_world_does_not_divide() {
    let p = spmd(4, |_, b| {
        b.reduce_scatter(W, F32, &[6], ReduceOp::Sum, 0);
    });
    let d = rejected(&p);
    // Every rank makes the same mistake at the same call: one diagnostic, all ranks named.
    assert_eq!(d.0.len(), 1, "{d}");
    let x = &d.0[0];
    assert_eq!(x.code, Code::RW007);
    assert_eq!(x.ranks, vec![0, 1, 2, 3]);
    assert!(
        x.message
            .starts_with("every rank: reduce_scatter splits dim 0 (size 6) into 4 equal parts"),
        "{}",
        x.message
    );
    assert!(x.help.contains("multiple of the group size 4"));
}

#[test]
fn p2p_count_and_dtype_mismatches() {
    let count = spmd(2, |r, b| {
        if r == 0 {
            b.send(F32, &[4], 1);
        } else {
            b.recv(F32, &[3], 0); // SHORT-RECV
        }
    });
    let d = rejected(&count);
    assert_eq!(d.codes(), vec![Code::RW006]);
    assert_eq!(d.0[0].primary.site.line, line_of("SHORT-RECV"));
    assert!(
        d.0[0]
            .message
            .contains("a recv of f32[3] here meets a send of f32[4]"),
        "{}",
        d.0[0].message
    );
    let dtype = spmd(2, |r, b| {
        if r == 0 {
            b.send(F32, &[4], 1);
        } else {
            b.recv(DType::I32, &[4], 0);
        }
    });
    assert_eq!(rejected(&dtype).codes(), vec![Code::RW008]);
}

#[test]
fn unmatched_sends_and_recvs() {
    let send = spmd(2, |r, b| {
        if r == 0 {
            b.send(F32, &[1], 1);
        }
    });
    assert_eq!(rejected(&send).codes(), vec![Code::RW002]);
    let recv = spmd(2, |r, b| {
        if r == 1 {
            b.recv(F32, &[1], 0);
        }
    });
    let d = rejected(&recv);
    assert_eq!(d.codes(), vec![Code::RW003]);
    assert!(
        d.0[0]
            .message
            .contains("rank 0 finishes without a matching send"),
        "{}",
        d.0[0].message
    );
}

#[test]
fn rules_of_single_calls() {
    let cases: Vec<(Code, Program)> = vec![
        (
            Code::RW009,
            spmd(4, |r, b| {
                b.send(F32, &[1], r + 1).recv(F32, &[1], (r + 3) % 4);
            }),
        ),
        (
            Code::RW010,
            spmd(2, |r, b| {
                b.send(F32, &[1], r);
            }),
        ),
        (
            Code::RW011,
            spmd_group(4, &[0, 1], |_, g, b| {
                b.barrier(g);
            }),
        ),
        (
            Code::RW011,
            spmd_group(4, &[0, 0, 1], |r, g, b| {
                if r < 2 {
                    b.barrier(g);
                }
            }),
        ),
        (
            Code::RW013,
            spmd(2, |_, b| {
                b.all_reduce(W, F32, &[1], ReduceOp::BitAnd);
            }),
        ),
        (
            Code::RW014,
            spmd(2, |_, b| {
                b.all_gather(W, F32, &[3], 1);
            }),
        ),
        (
            Code::RW006,
            spmd(2, |_, b| {
                b.all_gather(W, F32, &[3], 0).with_output(Some(&[3]));
            }),
        ),
    ];
    for (code, p) in cases {
        let d = rejected(&p);
        assert_eq!(d.codes(), vec![code], "{d}");
        assert!(d.0.iter().all(|x| x.verdict == Verdict::Misuse));
    }
    // Self send/recv inside a batch is fine.
    let ok = spmd(2, |r, b| {
        b.batch().send(F32, &[1], r).recv(F32, &[1], r).end_batch();
    });
    assert!(verify(&ok).is_ok());
}

#[test]
fn a_rank_that_stops_on_misuse_causes_no_echo() {
    // Rank 1 names a peer outside the world; rank 0 waits for it forever, but that is only a
    // consequence: one diagnostic.
    let p = spmd(2, |r, b| {
        if r == 0 {
            b.recv(F32, &[1], 1);
        } else {
            b.send(F32, &[1], 2);
        }
    });
    let d = rejected(&p);
    assert_eq!(d.codes(), vec![Code::RW009], "{d}");
    assert_eq!(d.0.len(), 1);
}

#[test]
fn independent_problems_are_all_reported() {
    // Ranks 0 and 1 deadlock; ranks 2 and 3 disagree on a collective of their own group.
    let mut p = Program::new(4);
    let g = p.group([2, 3]);
    for r in 0..4 {
        let mut b = p.rank(r);
        if r < 2 {
            b.send(F32, &[1], 1 - r).recv(F32, &[1], 1 - r);
        } else {
            b.all_reduce(
                g,
                F32,
                &[1],
                if r == 2 { ReduceOp::Sum } else { ReduceOp::Max },
            );
        }
    }
    let d = rejected(&p);
    assert_eq!(d.codes(), vec![Code::RW001, Code::RW004], "{d}");
}

#[test]
fn odd_ranks_are_named_as_such() {
    let p = spmd(8, |r, b| {
        if r % 2 == 1 {
            b.all_reduce(W, DType::F32, &[3], ReduceOp::BitXor);
        }
    });
    let d = rejected(&p);
    assert!(
        d.0[0]
            .message
            .starts_with("odd ranks: reduce op BitXor is not defined for f32"),
        "{d}"
    );
}

#[test]
fn a_send_waiting_on_a_collective_is_a_mixed_deadlock() {
    let p = spmd(2, |r, b| {
        if r == 0 {
            b.send(F32, &[1], 1).barrier(W);
        } else {
            b.barrier(W).recv(F32, &[1], 0);
        }
    });
    let d = rejected(&p);
    assert_eq!(d.codes(), vec![Code::RW001]);
    assert!(
        d.0[0].message.contains("which waits in barrier()"),
        "{}",
        d.0[0].message
    );
}

#[test]
fn fine_at_world_2_broken_at_world_3() {
    let build = |w: usize| {
        spmd(w, |r, b| {
            b.reduce_scatter(W, F32, &[4], ReduceOp::Sum, 0);
            let _ = r;
        })
    };
    let d = verify_worlds([2, 3], build).unwrap_err();
    assert_eq!(d.0.len(), 1);
    assert_eq!(d.0[0].world, 3);
    assert_eq!(d.0[0].code, Code::RW007);
    assert!(d.to_string().contains("(world = 3)"));
}

// ---- valid programs ---------------------------------------------------------------------------

/// Ring all-reduce by hand: W−1 reduce-scatter steps and W−1 all-gather steps, each a batched
/// send to the next rank and recv from the previous one.
pub fn ring_all_reduce(world: usize) -> Program {
    spmd(world, |r, b| {
        for _ in 0..2 * (world - 1) {
            b.batch()
                .send(F32, &[1024], (r + 1) % world)
                .recv(F32, &[1024], (r + world - 1) % world)
                .end_batch();
        }
    })
}

#[test]
fn hand_written_ring_all_reduce_is_proved_and_matched() {
    for w in [1, 2, 3, 8] {
        let p = ring_all_reduce(w);
        let s = verify(&p).unwrap_or_else(|d| panic!("world {w}: {d}"));
        if w > 1 {
            // Rank 0's send in step 0 meets rank 1's recv in step 0.
            let m: Vec<Match> = s.matches(0, 0).collect();
            assert_eq!(
                m[0],
                Match::P2p {
                    peer: 1,
                    item: 0,
                    op: 1
                }
            );
            assert_eq!(
                m[1],
                Match::P2p {
                    peer: (w - 1) as u32,
                    item: 0,
                    op: 0
                }
            );
        }
    }
}

#[test]
fn odd_even_ordered_exchange_and_binomial_broadcast() {
    for w in 2..=9 {
        let exchange = spmd(w, |r, b| {
            let peer = r ^ 1;
            if peer < w {
                if r % 2 == 0 {
                    b.send(F32, &[2], peer).recv(F32, &[2], peer);
                } else {
                    b.recv(F32, &[2], peer).send(F32, &[2], peer);
                }
            }
        });
        assert!(verify(&exchange).is_ok(), "exchange at world {w}");
        // Binomial tree from root 0: in round k, ranks below 2^k send to rank + 2^k.
        let tree = spmd(w, |r, b| {
            let mut k = 1;
            while k < w {
                if r < k && r + k < w {
                    b.send(F32, &[8], r + k);
                } else if r >= k && r < 2 * k {
                    b.recv(F32, &[8], r - k);
                }
                k *= 2;
            }
        });
        assert!(verify(&tree).is_ok(), "binomial broadcast at world {w}");
    }
}

#[test]
fn recursive_doubling_for_powers_of_two() {
    let build = |w: usize| {
        spmd(w, |r, b| {
            let mut d = 1;
            while d < w {
                b.batch()
                    .send(DType::F64, &[16], r ^ d)
                    .recv(DType::F64, &[16], r ^ d)
                    .end_batch();
                d *= 2;
            }
        })
    };
    assert!(verify_worlds([2, 4, 8, 16], build).is_ok());
}

#[test]
fn collectives_on_split_groups_and_all_kinds() {
    let mut p = Program::new(4);
    let lo = p.group([0, 1]);
    let hi = p.group([2, 3]);
    for r in 0..4 {
        let g = if r < 2 { lo } else { hi };
        let root = if r < 2 { 1 } else { 3 };
        let mut b = p.rank(r);
        b.all_reduce(g, F32, &[5], ReduceOp::Avg)
            .broadcast(W, DType::U8, &[2], 3)
            .reduce(g, DType::I64, &[2], root, ReduceOp::BitOr)
            .gather(W, F32, &[1, 5], 0, 0)
            .scatter(g, F32, &[5, 1], root, 1)
            .reduce_scatter(W, F32, &[5, 4], ReduceOp::Sum, 1)
            .all_to_all(g, DType::BF16, &[4, 2], 0)
            .barrier(W);
    }
    verify(&p).unwrap_or_else(|d| panic!("{d}"));
}

// ---- launch-time use ---------------------------------------------------------------------------

#[test]
fn spawn_refuses_a_program_the_verifier_rejects() {
    use rankwise_runtime::{Error, Options, spawn_with};
    use std::sync::Arc;
    let bad = Arc::new(spmd(2, |r, b| {
        b.send(F32, &[4], 1 - r).recv(F32, &[4], 1 - r); // LAUNCH-BAD
    }));
    let started = std::sync::atomic::AtomicBool::new(false);
    let err = spawn_with(2, Options::default().verify(bad.clone()), |ctx| {
        started.store(true, std::sync::atomic::Ordering::Relaxed);
        rankwise_runtime::replay(&bad, ctx)
    })
    .unwrap_err();
    assert!(
        !started.load(std::sync::atomic::Ordering::Relaxed),
        "no rank may start"
    );
    let Error::Rejected(d) = &err else {
        panic!("{err}")
    };
    assert_eq!(d.codes(), vec![Code::RW001]);
    let text = err.to_string();
    assert!(text.contains("error[RW001]: deadlock"), "{text}");
    assert!(
        text.contains(&format!("tests/verify.rs:{}", line_of("LAUNCH-BAD"))),
        "{text}"
    );

    let good = Arc::new(ring_all_reduce(3));
    spawn_with(3, Options::default().verify(good.clone()), |ctx| {
        rankwise_runtime::replay(&good, ctx)
    })
    .unwrap();
    // A description for another world size is refused too.
    assert!(
        spawn_with(4, Options::default().verify(good.clone()), |ctx| {
            rankwise_runtime::replay(&good, ctx)
        })
        .is_err()
    );
}

/// `isend`/`irecv`: a post never blocks, its wait does, and a rank's return waits for every
/// post still open.
mod posts {
    use super::*;

    #[test]
    fn both_ranks_isend_first_then_recv_is_fine() {
        // The seeds' deadlock, fixed the torch way: post the send, then receive, then wait.
        let p = spmd(2, |r, b| {
            let s = b.isend(F32, &[4], 1 - r);
            b.recv(F32, &[4], 1 - r);
            b.wait(s);
        });
        let s = verify(&p).expect("posting the sends first cannot deadlock");
        let first: Vec<Match> = s.matches(0, 0).collect();
        assert!(
            matches!(first[..], [Match::P2p { peer: 1, .. }]),
            "{first:?}"
        );
        // The wait itself has no op to match.
        assert_eq!(s.matches(0, 2).count(), 0);
    }

    #[test]
    fn the_seed_chain_of_isend_and_irecv() {
        // seed 002: 0 → 1 → 2, each hop posted, then waited.
        let p = spmd(3, |r, b| match r {
            0 => {
                let s = b.isend(F32, &[2], 1);
                b.wait(s);
            }
            1 => {
                let q = b.irecv(F32, &[2], 0);
                b.wait(q);
                let s = b.isend(F32, &[2], 2);
                b.wait(s);
            }
            _ => {
                let q = b.irecv(F32, &[2], 1);
                b.wait(q);
            }
        });
        verify(&p).expect("a chain of posted hops is fine");
    }

    #[test]
    fn waiting_in_the_wrong_order_is_a_deadlock_naming_the_wait() {
        // Rank 0 waits for its receive before it sends what rank 1 needs first.
        let p = spmd(2, |r, b| {
            if r == 0 {
                let q = b.irecv(F32, &[4], 1);
                b.wait(q); // WRONG-WAIT
                b.send(F32, &[4], 1);
            } else {
                b.recv(F32, &[4], 0); // RANK1-RECV
                b.send(F32, &[4], 0);
            }
        });
        let d = rejected(&p);
        assert_eq!(d.codes(), vec![Code::RW001], "{d}");
        let x = &d.0[0];
        assert_eq!(x.ranks, vec![0, 1]);
        let wait = format!("verify.rs:{}", line_of("WRONG-WAIT"));
        assert!(x.message.contains(&wait), "{}", x.message);
        assert!(x.message.contains("posted at"), "{}", x.message);
    }

    #[test]
    fn two_posts_waited_in_either_order_are_fine() {
        // MPI's pattern: post both, wait for one, make a blocking call the peer needs, wait
        // for the other. Folding posts into the next blocking call would deadlock here.
        let p = spmd(2, |r, b| {
            if r == 0 {
                let s = b.isend(F32, &[1], 1);
                let q = b.irecv(F32, &[1], 1);
                b.wait(s);
                b.send(F32, &[2], 1);
                b.wait(q);
            } else {
                b.recv(F32, &[1], 0);
                b.recv(F32, &[2], 0);
                b.send(F32, &[1], 0);
            }
        });
        verify(&p).expect("the posted receive is matched while rank 0 is in its send");
    }

    #[test]
    fn posts_match_in_order_with_blocking_calls_on_the_same_pair() {
        // The posted send is the first message to rank 1: it meets rank 1's first receive, so
        // their sizes must agree even though rank 0's blocking send comes later.
        let p = spmd(2, |r, b| {
            if r == 0 {
                let s = b.isend(F32, &[3], 1);
                b.send(F32, &[5], 1);
                b.wait(s);
            } else {
                b.recv(F32, &[5], 0); // FIRST-RECV
                b.recv(F32, &[3], 0);
            }
        });
        let d = rejected(&p);
        assert_eq!(d.codes(), vec![Code::RW006], "{d}");
        let first = format!("verify.rs:{}", line_of("FIRST-RECV"));
        assert!(d.to_string().contains(&first), "{d}");
        assert!(d.to_string().contains("meets a send of f32[3]"), "{d}");
    }

    #[test]
    fn an_unwaited_post_is_drained_at_return_and_can_hang() {
        // Rank 0 never waits for its receive; its return does, and rank 1 never sends.
        let p = spmd(2, |r, b| {
            if r == 0 {
                let _forgotten = b.irecv(F32, &[4], 1);
            }
        });
        let d = rejected(&p);
        assert_eq!(d.codes(), vec![Code::RW003], "{d}");
        assert_eq!(d.0[0].ranks, vec![0]);
        // Matched, it needs no wait.
        let p = spmd(2, |r, b| {
            if r == 0 {
                let _forgotten = b.irecv(F32, &[4], 1);
            } else {
                b.send(F32, &[4], 0);
            }
        });
        verify(&p).expect("an unwaited post that is matched is fine");
    }

    #[test]
    fn a_post_to_self_is_matched_by_a_later_receive() {
        let p = spmd(2, |r, b| {
            let s = b.isend(F32, &[2], r);
            let q = b.irecv(F32, &[2], r);
            b.wait(q);
            b.wait(s);
        });
        verify(&p).expect("a rank may post to itself");
    }

    #[test]
    fn a_wait_on_a_cycle_of_posts_and_collectives() {
        // Rank 1 waits for a receive before the all_reduce rank 0 must finish before sending.
        let p = spmd(2, |r, b| {
            if r == 0 {
                b.all_reduce(W, F32, &[1], ReduceOp::Sum);
                b.send(F32, &[1], 1);
            } else {
                let q = b.irecv(F32, &[1], 0);
                b.wait(q);
                b.all_reduce(W, F32, &[1], ReduceOp::Sum);
            }
        });
        let d = rejected(&p);
        assert_eq!(d.codes(), vec![Code::RW001], "{d}");
    }
}

/// Element types left to whoever built the program (`Program::free_dtypes`): never compared,
/// and every meeting that involves one is listed for the builder to check.
mod free_dtypes {
    use super::*;
    use rankwise_runtime::verify::{Item, SiteId};

    fn first_id(p: &Program, rank: usize, item: usize) -> SiteId {
        match &p.ranks[rank][item] {
            Item::Op(op) | Item::Post(op) => op.id,
            other => panic!("no op: {other:?}"),
        }
    }

    #[test]
    fn free_sites_meet_anything_and_are_linked() {
        let mut p = spmd(2, |r, b| {
            if r == 0 {
                b.send(DType::U8, &[4], 1); // a stand-in for an unknown type
            } else {
                b.recv(F32, &[4], 0);
            }
            b.all_reduce(W, if r == 0 { DType::U8 } else { F32 }, &[2], ReduceOp::Sum);
        });
        // Known dtypes only: two mismatches.
        let d = rejected(&p);
        assert_eq!(d.codes(), vec![Code::RW008], "{d}");
        assert_eq!(d.0.len(), 2, "{d}");
        let (send, reduce0) = (first_id(&p, 0, 0), first_id(&p, 0, 1));
        let (recv, reduce1) = (first_id(&p, 1, 0), first_id(&p, 1, 1));
        p.free_dtypes = vec![send, reduce0];
        let s = verify(&p).expect("free element types are not compared");
        // One source line is one static type: the all_reduce (one site on both ranks) needs no
        // link, the send and its receive do.
        assert_eq!(reduce0, reduce1);
        assert_eq!(s.dtype_links, vec![(send.min(recv), send.max(recv))]);
    }

    #[test]
    fn everything_but_the_element_type_is_still_checked() {
        let mut p = spmd(2, |r, b| {
            if r == 0 {
                b.send(DType::U8, &[4], 1);
            } else {
                b.recv(F32, &[3], 0);
            }
        });
        p.free_dtypes = vec![first_id(&p, 0, 0)];
        let d = rejected(&p);
        assert!(d.to_string().contains("element counts differ"), "{d}");
        // And a collective whose members differ in shape, one of them free.
        let mut p = spmd(2, |r, b| {
            b.all_reduce(W, DType::U8, &[2 + r], ReduceOp::Sum);
        });
        p.free_dtypes = vec![first_id(&p, 0, 0), first_id(&p, 1, 0)];
        let d = rejected(&p);
        assert_eq!(d.codes(), vec![Code::RW006], "{d}");
    }
}
