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
    sites: &[(1, 1, "barrier")],
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
