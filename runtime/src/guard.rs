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
//!
//! **Proven calls.** On a backend that can use the proof (MPI, see `Backend::trusts_proofs`),
//! the ranks first make sure they all run the same proof: one all_gather of the schedule's
//! fingerprint at entry. From then on every call the guard admits is *proven* — every member
//! of its step is on the same verified schedule, so the call's peers, root and shapes agree
//! without asking — and the backend may skip the run-time agreement that only a root
//! disagreement needs (a small broadcast then travels one way, as MPI's does). A rank that
//! leaves its schedule stays off it: every later call of that rank in the function is refused,
//! so no proven call of it can meet a peer that is elsewhere.

use std::cell::{Cell, RefCell};

use crate::Ctx;
use crate::error::{Error, Result};
use crate::model::CallSite;

/// A call's site as the guard's checks take it: a [`CallSite`], or the `Location` it is made
/// from — made into one only when a guard is active, so that a call without a guard (most of
/// them) never copies its site.
pub(crate) trait Site: Copy {
    /// The site itself.
    fn site(self) -> CallSite;
}

impl Site for &CallSite {
    #[inline(always)]
    fn site(self) -> CallSite {
        *self
    }
}

impl Site for &'static std::panic::Location<'static> {
    #[inline(always)]
    fn site(self) -> CallSite {
        CallSite::from(self)
    }
}

/// In [`Table::sites`]: a call that names no peer or root (or whose is not checked).
pub(crate) const NO_PEER: u32 = u32::MAX;

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
    /// Each site id's source location, the peer or root the verified call names there
    /// (`u32::MAX` if none), and what the call does, for messages.
    pub sites: &'static [(u32, u32, u32, &'static str)],
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
    /// Every rank entered the same schedule (the handshake at entry): admitted calls are proven.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))] // only the MPI backend asks
    proven: bool,
    /// Where this rank left its schedule, once it has: every later call is refused.
    left_at: Option<CallSite>,
    /// The peer or root the verified schedule has for the call admitted last (see
    /// [`Guard::check_peer`]), [`NO_PEER`] if none.
    peer: u32,
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
    /// Checks the world size and starts following `table` for `ctx`'s rank. On a backend that
    /// uses proofs, the ranks then agree that they all run this schedule (see the module docs):
    /// one all_gather at the function's entry; a rank that runs another checked function, or
    /// none, makes every rank's entry fail.
    #[track_caller]
    pub fn enter(table: &'static Table, ctx: &mut Ctx) -> Result<Guard> {
        let site = CallSite::caller();
        let (rank, world) = (ctx.rank(), ctx.world());
        let all = schedules(table, world)?;
        let proven = ctx.trusts_proofs();
        if proven {
            let mine = fingerprint(table, all, site.file);
            // Outside every schedule: a guard already active (the attribute twice) would
            // refuse the handshake's call as off its schedule.
            let seen = Unchecked::during(|| ctx.handshake(site, mine))
                .map_err(|e| name_the_handshake(e, table.function, site))?;
            let others: Vec<usize> = (0..seen.len()).filter(|&r| seen[r] != mine).collect();
            if !others.is_empty() {
                return Err(Error::ProofsDiffer {
                    function: table.function,
                    rank,
                    others,
                });
            }
        }
        Self::push(table, all, rank, site.file, proven)
    }

    /// Starts following `table` for `rank` among the schedules `all` of one world size.
    fn push(
        table: &'static Table,
        all: &'static [RankTable],
        rank: usize,
        file: &'static str,
        proven: bool,
    ) -> Result<Guard> {
        let world = all.len();
        let ranks = all.get(rank).ok_or_else(|| Error::BadProgram {
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
                proven,
                left_at: None,
                peer: NO_PEER,
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
    pub(crate) fn check(site: impl Site) -> Result<()> {
        if !ANY.with(Cell::get) {
            return Ok(());
        }
        Self::check_active(&site.site())
    }

    /// After [`Guard::check`] admitted the call at `site`: checks that the peer or root it
    /// names, `peer`, is the one the verified schedule has for it. The macro computes it as the
    /// program does, so the two agree; if they did not, a backend that trusts the proof (and
    /// skips asking the members of a rooted collective whether they agree on the root) would
    /// run a call nobody verified — so the rank leaves its schedule here, with an error, before
    /// anything is posted.
    #[inline(always)]
    pub(crate) fn check_peer(peer: Option<usize>, site: impl Site) -> Result<()> {
        if !ANY.with(Cell::get) {
            return Ok(());
        }
        Self::check_peer_active(peer, &site.site())
    }

    /// [`Guard::check_peer`] with a guard active.
    #[inline(never)]
    fn check_peer_active(peer: Option<usize>, site: &CallSite) -> Result<()> {
        let site = *site;
        ACTIVE.with(|a| {
            let mut a = a.borrow_mut();
            let Some(g) = a.last_mut() else {
                return Ok(());
            };
            let expected = g.peer;
            if expected == NO_PEER || peer.is_some_and(|p| p == expected as usize) {
                return Ok(());
            }
            g.left_at = Some(site);
            Err(Error::UnverifiedPeer {
                function: g.table.function,
                rank: g.rank,
                world: g.world,
                site,
                verified: expected as usize,
                actual: peer,
            })
        })
    }

    /// Whether the calls this thread makes now are proven (see the module docs): the innermost
    /// active guard made its handshake and its rank is still on its schedule. A backend asks
    /// when it runs calls, which the guard admitted on this same thread (a `Ctx` call runs
    /// where it is made; a batch is recorded and run inside the function whose guard admitted
    /// its calls, since it borrows the context the guard's entry needed).
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))] // only the MPI backend asks
    pub(crate) fn proven() -> bool {
        ANY.with(Cell::get)
            && ACTIVE.with(|a| {
                a.borrow()
                    .last()
                    .is_some_and(|g| g.proven && g.left_at.is_none())
            })
    }

    /// [`Guard::check`] with a guard active.
    #[inline(never)]
    fn check_active(site: &CallSite) -> Result<()> {
        let site = *site;
        ACTIVE.with(|a| {
            let mut a = a.borrow_mut();
            let Some(g) = a.last_mut() else {
                return Ok(());
            };
            if let Some(left) = g.left_at {
                return Err(Error::Diverged {
                    function: g.table.function,
                    rank: g.rank,
                    world: g.world,
                    site,
                    expected: format!("no call, since this rank left its schedule at {left}"),
                });
            }
            let next = g.ranks.runs.get(g.run).map(|r| r.pattern[g.pos]);
            let expected = next.and_then(|id| g.table.sites.get(id as usize));
            if let Some(&(line, column, peer, _)) = expected {
                // Same file too: a helper in another file may have a call at the same line and
                // column (`&'static str`s from `file!()` usually share an address; compare the
                // text when they do not).
                let same_file = std::ptr::eq(site.file, g.file) || site.file == g.file;
                if (line, column) == (site.line, site.column) && same_file {
                    g.peer = peer;
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
            g.left_at = Some(site);
            let expected = match expected {
                Some(&(line, col, _, what)) => format!("{what} at {}:{line}:{col}", g.file),
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

/// Lifts the checks of the guards active on this thread for its lifetime (see
/// [`Unchecked::during`]).
struct Unchecked;

impl Unchecked {
    /// Runs `f` with the guards lifted, and restores them however `f` ends (a panic too).
    fn during<T>(f: impl FnOnce() -> T) -> T {
        ANY.with(|any| any.set(false));
        let _restore = Unchecked;
        f()
    }
}

impl Drop for Unchecked {
    fn drop(&mut self) {
        let active = ACTIVE.with(|a| !a.borrow().is_empty());
        ANY.with(|any| any.set(active));
    }
}

/// A collective mismatch met by the handshake at `site`, with the handshake's call named as
/// what it is for the user (who never wrote that all_gather): the entry of `function`.
fn name_the_handshake(e: Error, function: &str, site: CallSite) -> Error {
    let Error::CollectiveMismatch(mut m) = e else {
        return e;
    };
    let entry = format!("the entry of checked program `{function}` (its handshake)");
    for (what, at) in [(&mut m.what_a, m.site_a), (&mut m.what_b, m.site_b)] {
        if crate::exec::same_site(&at, &site) {
            *what = entry.clone();
        }
    }
    Error::CollectiveMismatch(m)
}

/// Every rank's schedule at `world`, or why `table`'s function does not run there (refused
/// before any communication, on every rank alike).
fn schedules(table: &'static Table, world: usize) -> Result<&'static [RankTable]> {
    match table.worlds.binary_search_by_key(&world, |w| w.0) {
        Ok(i) if table.worlds[i].1.len() == world => Ok(table.worlds[i].1),
        Ok(_) => Err(Error::BadProgram {
            detail: format!(
                "the schedule of `{}` for a world of {world} does not list every rank",
                table.function
            ),
        }),
        Err(_) => Err(Error::WorldNotChecked {
            function: table.function,
            world,
            checked: table.worlds.iter().map(|w| w.0).collect(),
        }),
    }
}

/// A fingerprint of what the ranks must share to trust the proof: the function, its file, its
/// sites and every rank's schedule at this world size (FNV-1a: stable across processes and
/// builds, unlike `std`'s hasher).
fn fingerprint(table: &Table, ranks: &[RankTable], file: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    };
    for text in [table.function, file] {
        eat(&text.len().to_le_bytes());
        eat(text.as_bytes());
    }
    for &(line, column, peer, what) in table.sites {
        eat(&line.to_le_bytes());
        eat(&column.to_le_bytes());
        eat(&peer.to_le_bytes());
        eat(what.as_bytes());
    }
    for r in ranks {
        eat(&r.runs.len().to_le_bytes());
        for run in r.runs {
            eat(&run.times.to_le_bytes());
            eat(&run.pattern.len().to_le_bytes());
            for id in run.pattern {
                eat(&id.to_le_bytes());
            }
        }
    }
    h
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
        sites: &[
            (3, 5, 0, "send"),
            (4, 5, 0, "recv"),
            (9, 1, NO_PEER, "barrier"),
        ],
    };

    /// [`Guard::enter`] without a context (no handshake): `proven` says what it would have
    /// established.
    fn start(rank: usize, world: usize, proven: bool) -> Result<Guard> {
        schedules(&TABLE, world).and_then(|all| Guard::push(&TABLE, all, rank, file!(), proven))
    }

    #[test]
    fn a_call_at_the_same_place_in_another_file_diverges() {
        let g = start(0, 1, false).unwrap();
        let here = CallSite::caller().file;
        let elsewhere = CallSite {
            file: "other.rs",
            line: 3,
            column: 5,
        };
        assert!(Guard::check(&elsewhere).is_err());
        drop(g);
        let _g = start(0, 1, false).unwrap();
        let same = CallSite {
            file: here,
            line: 3,
            column: 5,
        };
        assert!(Guard::check(&same).is_ok());
    }

    #[test]
    fn follows_the_pattern_and_names_divergence() {
        let at = |line, column| CallSite {
            file: file!(),
            line,
            column,
        };
        assert!(matches!(
            start(0, 2, false),
            Err(Error::WorldNotChecked { world: 2, .. })
        ));
        let g = start(0, 1, false).unwrap();
        for (l, c) in [(3, 5), (4, 5), (3, 5), (4, 5), (9, 1)] {
            Guard::check(&at(l, c)).unwrap();
            assert!(!Guard::proven(), "proven without a handshake");
        }
        let err = Guard::check(&at(3, 5)).unwrap_err();
        assert!(
            err.to_string().contains("no further communication"),
            "{err}"
        );
        drop(g);
        // Without an active guard (unchecked programs), nothing is checked.
        Guard::check(&at(1, 1)).unwrap();
        let _g = start(0, 1, false).unwrap();
        let err = Guard::check(&at(4, 5)).unwrap_err();
        assert!(err.to_string().contains("send at"), "{err}");
    }

    #[test]
    fn a_rank_that_left_its_schedule_stays_off_it() {
        let at = |line, column| CallSite {
            file: file!(),
            line,
            column,
        };
        assert!(!Guard::proven(), "proven without a guard");
        let g = start(0, 1, true).unwrap();
        Guard::check(&at(3, 5)).unwrap();
        assert!(Guard::proven(), "on schedule after the handshake: proven");
        // The expected call is the receive; a send instead leaves the schedule...
        assert!(Guard::check(&at(3, 5)).is_err());
        // ...and the receive the schedule expected is no longer admitted either: a proven
        // call of this rank could otherwise meet a peer that is not where the proof says.
        let err = Guard::check(&at(4, 5)).unwrap_err();
        assert!(
            err.to_string().contains("left its schedule at") && err.to_string().contains(":3:5"),
            "{err}"
        );
        assert!(!Guard::proven(), "proven after leaving the schedule");
        drop(g);
        // While the checks are lifted (the handshake of an inner guard), nothing is proven.
        let _g = start(0, 1, true).unwrap();
        assert!(Guard::proven());
        Unchecked::during(|| assert!(!Guard::proven()));
        assert!(Guard::proven(), "the checks are back after the handshake");
    }

    #[test]
    fn the_fingerprint_covers_the_schedule_the_sites_and_the_file() {
        static OTHER_RUNS: [Run; 1] = [Run {
            pattern: &[0, 1],
            times: 3,
        }];
        static OTHER: [RankTable; 1] = [RankTable { runs: &OTHER_RUNS }];
        static MOVED: Table = Table {
            function: "demo",
            worlds: &[(1, &RANKS)],
            sites: &[
                (3, 6, 0, "send"),
                (4, 5, 0, "recv"),
                (9, 1, NO_PEER, "barrier"),
            ],
        };
        let base = fingerprint(&TABLE, &RANKS, "a.rs");
        assert_eq!(base, fingerprint(&TABLE, &RANKS, "a.rs"));
        assert_ne!(base, fingerprint(&TABLE, &OTHER, "a.rs"));
        assert_ne!(base, fingerprint(&MOVED, &RANKS, "a.rs"));
        assert_ne!(base, fingerprint(&TABLE, &RANKS, "b.rs"));
    }
}
