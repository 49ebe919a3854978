//! The run-time guard of `#[rankwise::program]` functions.
//!
//! The macro proves a program correct for the checked world sizes by evaluating it statically;
//! the guard makes sure the run follows that proof. At entry it refuses world sizes outside the
//! checked set; at each communication call (every `Ctx`, `Comm` and `Batch` method asks it) it
//! compares the call's source location with the next one the verified schedule expects for this
//! rank, so that code the macro could not see (a caught panic, an early `return` hidden in opaque
//! code, a bug) becomes an error naming the call site instead of a hang.
//!
//! The expected sequence of each (world, rank) is stored compactly as runs of a repeated
//! pattern of site ids (a ring all-reduce is one pattern of two sites repeated `2·(W−1)` times).
//! The guard lives in a thread-local: each rank runs on its own thread, and the checks must not
//! borrow the `Ctx`, which a batch may be holding.

use std::cell::{Cell, RefCell};

use crate::error::{Error, Result};
use crate::model::CallSite;

/// One run of an expected sequence: `pattern` repeated `times` times.
#[derive(Debug)]
pub struct Run {
    /// Site ids, in order.
    pub pattern: &'static [u32],
    /// How many times the pattern repeats.
    pub times: u32,
}

/// The expected call sequence of one rank at one world size.
#[derive(Debug)]
pub struct RankTable {
    /// The runs, in order.
    pub runs: &'static [Run],
}

/// Everything the guard of one program function needs.
#[derive(Debug)]
pub struct Table {
    /// The function's name, for messages.
    pub function: &'static str,
    /// The checked world sizes, ascending, and each one's per-rank sequences.
    pub worlds: &'static [(usize, &'static [RankTable])],
    /// Each site id's source location and what the call does, for messages.
    pub sites: &'static [(u32, u32, &'static str)],
}

struct Active {
    table: &'static Table,
    ranks: &'static RankTable,
    rank: usize,
    world: usize,
    run: usize,
    rep: u32,
    pos: usize,
    file: &'static str,
}

thread_local! {
    static ACTIVE: RefCell<Vec<Active>> = const { RefCell::new(Vec::new()) };
    /// Whether `ACTIVE` is non-empty: a plain `Cell` without a destructor, so the check made by
    /// every unchecked call (no guard) is one thread-local load.
    static ANY: Cell<bool> = const { Cell::new(false) };
}

/// Installed for the duration of one call of a program function; see the module docs.
///
/// Neither `Send` nor `Sync`: it stands for an entry in this thread's stack of active guards,
/// and dropping it on another thread would pop that thread's entry instead.
#[must_use]
pub struct Guard {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Guard {
    /// Checks the world size and starts following `table` for `rank`.
    #[track_caller]
    pub fn enter(table: &'static Table, rank: usize, world: usize) -> Result<Guard> {
        let file = CallSite::caller().file;
        let Ok(i) = table.worlds.binary_search_by_key(&world, |w| w.0) else {
            return Err(Error::WorldNotChecked {
                function: table.function,
                world,
                checked: table.worlds.iter().map(|w| w.0).collect(),
            });
        };
        let ranks = table.worlds[i]
            .1
            .get(rank)
            .ok_or_else(|| Error::BadProgram {
                detail: format!(
                    "`{}` entered by rank {rank}, which is not a rank of a world of {world}",
                    table.function
                ),
            })?;
        ACTIVE.with(|a| {
            a.borrow_mut().push(Active {
                table,
                ranks,
                rank,
                world,
                run: 0,
                rep: 0,
                pos: 0,
                file,
            })
        });
        ANY.with(|any| any.set(true));
        Ok(Guard {
            _not_send: std::marker::PhantomData,
        })
    }

    /// Checks that the call at `site` is the next one the verified schedule expects (no-op when
    /// no guard is active on this thread). Inlined: every call passes here, most of them
    /// without a guard, and a call would cost more than the test.
    #[inline(always)]
    pub(crate) fn check(site: CallSite) -> Result<()> {
        if !ANY.with(Cell::get) {
            return Ok(());
        }
        Self::check_active(site)
    }

    /// [`Guard::check`] with a guard active.
    #[inline(never)]
    fn check_active(site: CallSite) -> Result<()> {
        ACTIVE.with(|a| {
            let mut a = a.borrow_mut();
            let Some(g) = a.last_mut() else { return Ok(()) };
            let next = g.ranks.runs.get(g.run).map(|r| r.pattern[g.pos]);
            let expected = next.and_then(|id| g.table.sites.get(id as usize));
            if let Some(&(line, column, _)) = expected {
                // Same file too: a helper in another file may have a call at the same line and
                // column (`&'static str`s from `file!()` usually share an address; compare the
                // text when they do not).
                let same_file = std::ptr::eq(site.file, g.file) || site.file == g.file;
                if (line, column) == (site.line, site.column) && same_file {
                    let run = &g.ranks.runs[g.run];
                    g.pos += 1;
                    if g.pos == run.pattern.len() {
                        g.pos = 0;
                        g.rep += 1;
                        if g.rep == run.times {
                            g.rep = 0;
                            g.run += 1;
                        }
                    }
                    return Ok(());
                }
            }
            let expected = match expected {
                Some(&(line, col, what)) => format!("{what} at {}:{line}:{col}", g.file),
                None => "no further communication".to_string(),
            };
            Err(Error::Diverged {
                function: g.table.function,
                rank: g.rank,
                world: g.world,
                site,
                expected,
            })
        })
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        ACTIVE.with(|a| {
            let mut a = a.borrow_mut();
            a.pop();
            ANY.with(|any| any.set(!a.is_empty()));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static RUNS: [Run; 2] = [
        Run {
            pattern: &[0, 1],
            times: 2,
        },
        Run {
            pattern: &[2],
            times: 1,
        },
    ];
    static RANKS: [RankTable; 1] = [RankTable { runs: &RUNS }];
    static TABLE: Table = Table {
        function: "demo",
        worlds: &[(1, &RANKS)],
        sites: &[(3, 5, "send"), (4, 5, "recv"), (9, 1, "barrier")],
    };

    #[test]
    fn a_call_at_the_same_place_in_another_file_diverges() {
        let _g = Guard::enter(&TABLE, 0, 1).unwrap();
        let here = CallSite::caller().file;
        let elsewhere = CallSite {
            file: "other.rs",
            line: 3,
            column: 5,
        };
        assert!(Guard::check(elsewhere).is_err());
        let same = CallSite {
            file: here,
            line: 3,
            column: 5,
        };
        assert!(Guard::check(same).is_ok());
    }

    #[test]
    fn follows_the_pattern_and_names_divergence() {
        let at = |line, column| CallSite {
            file: file!(),
            line,
            column,
        };
        assert!(matches!(
            Guard::enter(&TABLE, 0, 2),
            Err(Error::WorldNotChecked { world: 2, .. })
        ));
        let g = Guard::enter(&TABLE, 0, 1).unwrap();
        for (l, c) in [(3, 5), (4, 5), (3, 5), (4, 5), (9, 1)] {
            Guard::check(at(l, c)).unwrap();
        }
        let err = Guard::check(at(3, 5)).unwrap_err();
        assert!(
            err.to_string().contains("no further communication"),
            "{err}"
        );
        drop(g);
        // Without an active guard (unchecked programs), nothing is checked.
        Guard::check(at(1, 1)).unwrap();
        let _g = Guard::enter(&TABLE, 0, 1).unwrap();
        let err = Guard::check(at(4, 5)).unwrap_err();
        assert!(err.to_string().contains("send at"), "{err}");
    }
}
