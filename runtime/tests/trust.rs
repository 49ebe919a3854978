//! Adversarial cases, grouped by the promise they try to break: no undefined behaviour from
//! safe code, no panic or abort on any run-time input, errors that read well. (Panics injected
//! inside the backend are the library's own tests: `exec::local::tests`.)

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::time::Duration;

use proptest::prelude::*;
use rankwise_runtime::Shape;
use rankwise_runtime::verify::{self, Item, Program, SiteId, VOp};
use rankwise_runtime::{
    CallSite, DType, Error, Group, GroupId, OpDesc, OpKind, Options, PeerFailure, ReduceOp, Result,
    Tensor, spawn, spawn_each, spawn_with,
};

#[path = "common/knobs.rs"]
mod knobs;

/// Promise: no undefined behaviour reachable from safe code.
mod no_ub {
    use super::*;

    /// A handle kept from one world and used in another is refused on every rank — before,
    /// the second world's backend sized its copies by its own communicator with that id and
    /// wrote past the end of the output.
    #[test]
    fn a_group_from_another_world_is_refused() {
        // World A creates [0, 1] then the world-sized group; world B the other way round, so
        // the same id names groups of different sizes in the two worlds.
        let kept: Mutex<Option<Group>> = Mutex::new(None);
        spawn(4, |ctx| {
            let _pair = ctx.new_group([0, 1])?;
            let all = ctx.new_group([0, 1, 2, 3])?;
            if ctx.rank() == 0 {
                *kept.lock().unwrap() = Some(all);
            }
            Ok(())
        })
        .unwrap();
        let foreign = kept.lock().unwrap().clone().unwrap();
        let each = spawn_each(4, Options::default(), |ctx| {
            let _all = ctx.new_group([0, 1, 2, 3])?;
            let _pair = ctx.new_group([0, 1])?;
            let x = Tensor::full([2], 1.0f32)?;
            let mut out = Tensor::<f32>::zeros([8])?;
            ctx.group(&foreign).all_gather(&x, &mut out, 0)
        })
        .unwrap();
        for res in each {
            assert!(matches!(res, Err(Error::ForeignGroup { .. })), "{res:?}");
        }
        // In a batch too, and the world group of another world as well.
        let err = spawn(4, |ctx| {
            let mut t = Tensor::full([2], 1.0f32)?;
            let mut b = ctx.batch();
            b.group(&foreign).all_reduce(&mut t, ReduceOp::Sum);
            b.run()
        })
        .unwrap_err();
        assert!(matches!(err, Error::ForeignGroup { .. }), "{err}");
        let world_of_a: Mutex<Option<Group>> = Mutex::new(None);
        spawn(2, |ctx| {
            *world_of_a.lock().unwrap() = Some(ctx.world_group().clone());
            Ok(())
        })
        .unwrap();
        let w = world_of_a.lock().unwrap().clone().unwrap();
        let err = spawn(2, |ctx| ctx.group(&w).barrier()).unwrap_err();
        refused_as_foreign(&err);
        // A batched call that repeats the last batch's call at its place (same site, tensor
        // and group id) reuses its op without describing it again: the handle is still checked.
        let err = spawn(2, |ctx| {
            let own = ctx.world_group().clone();
            let mut t = Tensor::full([2], 1.0f32)?;
            for g in [&own, &w] {
                let mut b = ctx.batch();
                b.group(g).all_reduce(&mut t, ReduceOp::Sum);
                b.run()?;
            }
            Ok(())
        })
        .unwrap_err();
        // A rank may see its peer's refusal before its own: every rank's error names it.
        refused_as_foreign(&err);
        // A lone call that repeats the last call at its site reruns its kept op: the same.
        let err = spawn(2, |ctx| {
            let own = ctx.world_group().clone();
            let mut t = Tensor::full([2], 1.0f32)?;
            for g in [&own, &own, &own, &w] {
                ctx.group(g).all_reduce(&mut t, ReduceOp::Sum)?;
            }
            Ok(())
        })
        .unwrap_err();
        refused_as_foreign(&err);
    }

    /// A handle passed between ranks of the *same* world is fine: ids mean the same there.
    #[test]
    fn a_group_shared_within_one_world_works() {
        let shared: Mutex<Option<Group>> = Mutex::new(None);
        let sums = spawn(2, |ctx| {
            let g = ctx.new_group([0, 1])?;
            if ctx.rank() == 0 {
                *shared.lock().unwrap() = Some(g.clone());
            }
            ctx.barrier()?;
            let g = shared.lock().unwrap().clone().unwrap();
            let mut t = Tensor::full([1], 1 + ctx.rank() as i32)?;
            ctx.group(&g).all_reduce(&mut t, ReduceOp::Sum)?;
            Ok(t.to_vec()[0])
        })
        .unwrap();
        assert_eq!(sums, vec![3, 3]);
    }
}

/// Promise: run-time input never panics or aborts the process; it is an `Err`.
mod no_panic {
    use super::*;

    #[test]
    fn huge_shapes_are_errors_in_bytes_not_elements() {
        assert!(matches!(
            Tensor::<f64>::zeros([1 << 61]),
            Err(Error::Tensor(_))
        ));
        assert!(matches!(
            Tensor::<u8>::zeros([1 << 40, 1 << 40]),
            Err(Error::Tensor(_))
        ));
        // Fits the address space but not the machine: the allocator says no, as an `Err`. (Miri
        // stops the program on such a request instead of failing it.)
        if !cfg!(miri) {
            let err = Tensor::<f32>::full([1 << 60], 0.0).unwrap_err();
            assert!(err.to_string().contains("cannot allocate"), "{err}");
        }
        assert!(Tensor::<f64>::from_fn([1 << 61], |_| 0.0).is_err());
    }

    /// Zero-size dims make every product zero, but the derived output shape must still be
    /// computed without wrapping: `[0, 2^63, 2]` gathered over 2 ranks along dim 1 has a dim of
    /// 2^64, which no tensor has, so `[0, 0, 2]` is not its output.
    #[test]
    fn derived_shapes_do_not_wrap() {
        let each = spawn_each(2, Options::default(), |ctx| {
            let x = Tensor::<f32>::zeros([0, 1 << 63, 2])?;
            let mut out = Tensor::<f32>::zeros([0, 0, 2])?;
            ctx.all_gather(&x, &mut out, 1)
        })
        .unwrap();
        for res in each {
            assert!(
                matches!(
                    res,
                    Err(Error::Misuse {
                        violation: rankwise_runtime::Violation::BadShape { .. },
                        ..
                    })
                ),
                "{res:?}"
            );
        }
        let err = spawn(2, |ctx| {
            let x = Tensor::<u8>::zeros([0, usize::MAX / 2 + 1])?;
            let mut out = Tensor::<u8>::zeros([0, usize::MAX])?;
            ctx.gather(&x, (ctx.rank() == 0).then_some(&mut out), 0, 1)
        })
        .unwrap_err();
        assert!(err.to_string().contains("larger than any"), "{err}");
    }

    /// A description with no communicators at all still runs (it used to slice `groups[1..]`).
    #[test]
    fn a_program_without_groups_runs() {
        let mut p = Program::new(2);
        p.groups.clear();
        p.rank(0).send(DType::F32, &[2], 1);
        p.rank(1).recv(DType::F32, &[2], 0);
        spawn(2, |ctx| rankwise_runtime::replay(&p, ctx)).unwrap();
        let err = spawn(3, |ctx| rankwise_runtime::replay(&p, ctx)).unwrap_err();
        assert!(
            err.to_string().contains("invalid program description"),
            "{err}"
        );
    }

    #[test]
    fn the_longest_timeout_means_none() {
        let got = spawn_with(2, Options::default().timeout(Duration::MAX), |ctx| {
            let mut t = Tensor::full([1], ctx.rank() as u8)?;
            ctx.broadcast(&mut t, 1)?;
            Ok(t.to_vec()[0])
        })
        .unwrap();
        assert_eq!(got, vec![1, 1]);
        // And a deadlock under it is still found.
        let err = spawn_with(2, Options::default().timeout(Duration::MAX), |ctx| {
            let mut t = Tensor::<u8>::zeros([1])?;
            ctx.recv(&mut t, 1 - ctx.rank())
        })
        .unwrap_err();
        assert!(matches!(err, Error::Deadlock(_)), "{err}");
    }

    fn site() -> CallSite {
        CallSite::caller()
    }

    fn shape_strategy() -> impl Strategy<Value = Vec<usize>> {
        let dim = prop_oneof![
            4 => 0usize..4,
            1 => Just(usize::MAX),
            1 => Just(1usize << 62),
            1 => Just(1usize << 32),
        ];
        prop::collection::vec(dim, 0..4)
    }

    fn vop_strategy() -> impl Strategy<Value = VOp> {
        let kind = prop::sample::select(OpKind::ALL.to_vec());
        let small = || prop_oneof![4 => 0usize..6, 1 => Just(usize::MAX)];
        (
            (kind, 0u32..5, prop::option::of(small())),
            prop::option::of(prop::sample::select(ReduceOp::ALL.to_vec())),
            prop::sample::select(DType::ALL.to_vec()),
            (
                shape_strategy(),
                prop_oneof![4 => 0usize..4, 1 => Just(usize::MAX)],
            ),
            (
                prop::option::of(shape_strategy()),
                prop::option::of(shape_strategy()),
            ),
            0u32..4,
        )
            .prop_map(
                |((kind, group, peer), op, dtype, (shape, dim), (out, root_in), id)| VOp {
                    desc: OpDesc {
                        kind,
                        group: GroupId(group),
                        peer,
                        op,
                        dtype,
                        shape: Shape::from_slice(&shape),
                        dim,
                        site: site(),
                    },
                    output: out.map(|s| Shape::from_slice(&s)),
                    root_input: root_in.map(|s| Shape::from_slice(&s)),
                    id: SiteId(id),
                },
            )
    }

    fn program_strategy() -> impl Strategy<Value = Program> {
        let item = prop_oneof![
            3 => vop_strategy().prop_map(Item::Op),
            1 => prop::collection::vec(vop_strategy(), 0..4).prop_map(Item::Batch),
        ];
        (
            0usize..6,
            prop::collection::vec(prop::collection::vec(0usize..7, 0..5), 0..4),
            prop::collection::vec(prop::collection::vec(item, 0..6), 0..7),
        )
            .prop_map(|(world, groups, ranks)| {
                let mut p = Program::new(world);
                p.groups.extend(groups);
                p.ranks = ranks;
                p
            })
    }

    /// 4000 programs by default; `RANKWISE_FUZZ_CASES=20000` for a longer run.
    fn fuzz_cases() -> u32 {
        super::knobs::count("RANKWISE_FUZZ_CASES").unwrap_or(4000)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: fuzz_cases(), ..ProptestConfig::default() })]

        /// Any value the public API can build — mismatched rank lists, undeclared groups, empty
        /// or invalid groups, absent peers, huge shapes, dims out of range — gets a verdict and
        /// never a panic. (Safe code, no `unsafe` below it: skipped under Miri, where proptest
        /// cannot reach the file system.)
        #[test]
        #[cfg_attr(miri, ignore)]
        fn the_verifier_never_panics(p in program_strategy(), drop_world in any::<bool>()) {
            let mut p = p;
            if drop_world {
                p.groups.clear();
            }
            let verdict = catch_unwind(AssertUnwindSafe(|| match verify::verify(&p) {
                Ok(s) => format!("{s:?}"),
                Err(d) => d.to_string(),
            }));
            prop_assert!(verdict.is_ok(), "the verifier panicked on {:?}", p);
        }
    }
}

/// Promise: errors read well, wherever they are printed.
mod errors_read_well {
    use super::*;

    /// `fn main() -> rankwise::Result<()>` prints the error with `{:?}`: it must be the same
    /// sentence as `Display`, not a struct dump.
    #[test]
    fn debug_reads_like_display() {
        let err = spawn(2, |ctx| {
            let x = Tensor::full([4], 1.0f32)?;
            ctx.send(&x, 1 - ctx.rank())
        })
        .unwrap_err();
        assert_eq!(format!("{err:?}"), err.to_string());
        assert!(format!("{err:?}").starts_with("deadlock: "), "{err:?}");
        assert!(!format!("{err:?}").contains("DeadlockReport"));
    }

    /// Rank 2 returns early; rank 1, waiting for it, fails; rank 0, waiting for rank 1, must
    /// still be told that rank 2 is the cause — not rank 1, which only relayed it.
    #[test]
    fn peer_failed_names_the_rank_that_caused_it() -> Result<()> {
        let each = spawn_each(3, Options::default(), |ctx| {
            let mut t = Tensor::<u8>::zeros([1])?;
            match ctx.rank() {
                0 => {
                    std::thread::sleep(Duration::from_millis(30));
                    ctx.recv(&mut t, 1)
                }
                1 => {
                    ctx.recv(&mut t, 2)?;
                    ctx.send(&t, 0)
                }
                _ => Ok(()),
            }
        })?;
        assert!(each[2].is_ok());
        for r in [0, 1] {
            match &each[r] {
                Err(Error::PeerFailed { peer, reason, .. }) => {
                    assert_eq!(*peer, 2, "rank {r}: {:?}", each[r]);
                    assert_eq!(*reason, PeerFailure::Exited);
                }
                other => panic!("rank {r}: {other:?}"),
            }
        }
        Ok(())
    }
}

/// `err` is the refusal of a group handle from another world, as every rank reports it.
fn refused_as_foreign(err: &Error) {
    assert!(
        err.to_string().contains("created in another world"),
        "{err}"
    );
}
