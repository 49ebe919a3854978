//! `#[rankwise::program]` functions at run time: they run on checked world sizes, refuse the
//! others before communicating, and the guard turns any call off the verified schedule into an
//! error naming the call site.

use rankwise::__private::{Guard, RankTable, Run, Table};
use rankwise::prelude::*;
use rankwise::{Error, Options, spawn_each};

#[rankwise::program(world in [2, 4])]
fn sum_of_ranks(ctx: &mut Ctx) -> Result<u64> {
    let mut t = ctx.full([1], ctx.rank() as u64)?;
    ctx.all_reduce(&mut t, ReduceOp::Sum)?;
    Ok(t.to_vec()[0])
}

#[test]
fn checked_world_sizes_run_and_others_are_refused() {
    assert_eq!(spawn(2, sum_of_ranks).unwrap(), vec![1, 1]);
    assert_eq!(spawn(4, sum_of_ranks).unwrap(), vec![6; 4]);
    match spawn(3, sum_of_ranks) {
        Err(Error::WorldNotChecked {
            function: "sum_of_ranks",
            world: 3,
            checked,
        }) => assert_eq!(checked, vec![2, 4]),
        other => panic!("{other:?}"),
    }
}

/// A schedule by hand: one barrier at a line where this test makes none, so the first real
/// call diverges — as a call the macro could not see would.
static RUNS: [Run; 1] = [Run {
    pattern: &[0],
    times: 1,
}];
static RANKS: [RankTable; 2] = [RankTable { runs: &RUNS }, RankTable { runs: &RUNS }];
static TABLE: Table = Table {
    function: "by_hand",
    worlds: &[(2, &RANKS)],
    sites: &[(1, 1, u32::MAX, "barrier")],
};

#[test]
fn a_call_off_the_schedule_is_an_error_naming_it() {
    let each = spawn_each(2, Options::default(), |ctx| {
        let _guard = Guard::enter(&TABLE, ctx)?;
        ctx.barrier() // OFF-SCHEDULE
    })
    .unwrap();
    let line = include_str!("program.rs")
        .lines()
        .position(|l| l.contains("// OFF-SCHEDULE") && !l.contains("position"))
        .unwrap() as u32
        + 1;
    for res in each {
        match res {
            Err(Error::Diverged {
                function: "by_hand",
                site,
                expected,
                ..
            }) => {
                assert_eq!(site.line, line);
                assert!(expected.starts_with("barrier at "), "{expected}");
            }
            other => panic!("{other:?}"),
        }
    }
}

/// Where the line holding `marker` calls `method` in this file: the call site the guard sees.
fn site_of(marker: &str, method: &str) -> (u32, u32) {
    let src = include_str!("program.rs");
    let (i, line) = src
        .lines()
        .enumerate()
        .find(|(_, l)| l.contains(marker) && !l.contains("site_of"))
        .expect("the marker is in this file");
    let col = line.find(method).expect("the method is on the marked line");
    (i as u32 + 1, col as u32 + 1)
}

/// A table by hand for a function that broadcasts at `site` three times, the macro having
/// verified the roots `roots` (one row per root, as the macro emits them).
fn broadcasts(site: (u32, u32), roots: [u32; 3]) -> &'static Table {
    let rows: Vec<(u32, u32, u32, &'static str)> = roots
        .iter()
        .map(|&r| (site.0, site.1, r, "broadcast"))
        .collect();
    let runs: Vec<Run> = (0..3u32)
        .map(|i| Run {
            pattern: Vec::leak(vec![i]),
            times: 1,
        })
        .collect();
    let runs: &'static [Run] = Vec::leak(runs);
    let ranks: &'static [RankTable] = Vec::leak(vec![RankTable { runs }, RankTable { runs }]);
    Box::leak(Box::new(Table {
        function: "by_hand",
        worlds: Vec::leak(vec![(2, ranks)]),
        sites: Vec::leak(rows),
    }))
}

/// A checked call whose root is not the one the macro verified it with — which the macro's
/// evaluation makes impossible, and which would be a call nobody checked, on a backend that
/// trusts the proof (MPI skips asking the members of a small broadcast whether they agree on
/// the root). The guard refuses it before anything is posted, on every path a call takes: a
/// lone call described anew, a lone call that repeats the last one (not described again), and
/// the same two inside batches.
#[test]
fn a_root_other_than_the_verified_one_is_refused_before_it_is_posted() {
    let lone = site_of("// LONE-BROADCAST", "broadcast");
    let batched = site_of("// BATCHED-BROADCAST", "broadcast");
    let run = |table: &'static Table, batch: bool| {
        spawn_each(2, Options::default(), move |ctx| {
            let _guard = Guard::enter(table, ctx)?;
            let mut t = ctx.full([2], ctx.rank() as f32)?;
            for _ in 0..3 {
                if batch {
                    let mut b = ctx.batch();
                    b.broadcast(&mut t, 0); // BATCHED-BROADCAST
                    b.run()?;
                } else {
                    ctx.broadcast(&mut t, 0)?; // LONE-BROADCAST
                }
            }
            Ok(t.to_vec())
        })
        .unwrap()
    };
    for (batch, site) in [(false, lone), (true, batched)] {
        // The control: the verified roots are the roots used.
        for res in run(broadcasts(site, [0, 0, 0]), batch) {
            assert_eq!(res.unwrap(), vec![0.0, 0.0]);
        }
        // The first call names another root: refused where it is described.
        // The third: refused where it repeats the second (not described again).
        for (roots, call) in [([1, 0, 0], 1), ([0, 0, 1], 3)] {
            for (rank, res) in run(broadcasts(site, roots), batch).into_iter().enumerate() {
                match res {
                    Err(Error::UnverifiedPeer {
                        function: "by_hand",
                        site: at,
                        verified: 1,
                        actual: Some(0),
                        ..
                    }) => assert_eq!((at.line, at.column), site),
                    // A rank the other's failure stopped first.
                    Err(Error::PeerFailed { .. }) => {}
                    other => panic!(
                        "batch {batch}, call {call} verified with root 1, rank {rank}: {other:?}"
                    ),
                }
            }
        }
    }
}

/// A trait of the program's crate that gives `Vec<usize>` a method named like one of the
/// slice's: Rust picks the trait's, the macro (which sees only the function) follows the
/// slice's, and verifies the broadcast with root 0 where the run names root 1. The guard stops
/// the call before it is posted, on every rank. (`book/src/proofs.md`, "What it cannot see".)
trait Ends {
    fn first(&self) -> Option<&usize>;
}

impl Ends for Vec<usize> {
    fn first(&self) -> Option<&usize> {
        self.last()
    }
}

#[rankwise::program(world = 2)]
fn shadowed_first(ctx: &mut Ctx) -> Result<Vec<f32>> {
    let peers = vec![0usize, 1];
    let mut t = ctx.full([2], ctx.rank() as f32)?;
    ctx.broadcast(&mut t, *peers.first().unwrap_or(&0))?; // SHADOWED-ROOT
    Ok(t.to_vec())
}

#[test]
fn a_method_the_crate_shadows_is_stopped_by_the_guard() {
    let site = site_of("// SHADOWED-ROOT", "broadcast");
    let Err(err) = spawn(2, shadowed_first) else {
        panic!("the run used a root the macro did not verify");
    };
    match err {
        Error::UnverifiedPeer {
            function: "shadowed_first",
            site: at,
            verified: 0,
            actual: Some(1),
            ..
        } => assert_eq!((at.line, at.column), site),
        other => panic!("{other:?}"),
    }
}
