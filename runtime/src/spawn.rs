//! `spawn`: run a rank program on one thread per rank (≈ `torch.multiprocessing.spawn`).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::ctx::Ctx;
use crate::error::{Error, PeerFailure, Result, panic_message};
use crate::exec::Backend;
use crate::exec::local::{Abort, LocalBackend, WorldState};
use crate::exec::nccl::host::{HostBackend, HostNccl};
use crate::verify::Program;

/// Settings for [`spawn_with`].
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Options {
    /// Give up on any single communication call after this long (off by default: deadlocks,
    /// mismatches and failed peers are detected without one).
    pub timeout: Option<Duration>,
    /// A description of what the ranks will do, verified before any thread starts.
    pub program: Option<Arc<Program>>,
    /// What carries the ranks' communication (the threads backend unless set).
    pub emulate: Emulation,
    /// Record every call of every rank and write them to this file as Chrome trace-event JSON
    /// (see [`Options::trace`]); `RANKWISE_TRACE` sets it too.
    pub trace: Option<String>,
    /// Pin each rank's thread to a core (see [`Options::pin`]); `RANKWISE_PIN=1` sets it too.
    pub pin: bool,
}

/// What carries the communication of ranks started by [`spawn_with`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Emulation {
    /// The threads backend: ranks read each other's buffers in place.
    #[default]
    Off,
    /// The NCCL backend's lowering on host memory: every batch becomes the NCCL calls and
    /// copies a GPU would run (for NCCL `version`, as `ncclGetVersion` reports it, e.g. 22803),
    /// executed with NCCL's matching and grouping rules. Reductions fold in member order, so
    /// results equal the threads backend's bit for bit (real NCCL may round float sums
    /// differently). `RANKWISE_BACKEND=nccl-host` selects it for [`launch`](crate::launch).
    Nccl {
        /// The NCCL version to lower for (all_to_all, gather and scatter are NCCL's own calls
        /// from 22800 on, grouped sends and receives before).
        version: u32,
        /// Pack runs of small same-kind collectives of a batch into one call. A promise that
        /// every member batches its collectives the same way (rankwise lets ranks batch
        /// differently); if it is broken, members issue different calls and the emulation
        /// reports a collective mismatch. `RANKWISE_NCCL_PACK=1` for [`launch`](crate::launch).
        pack: bool,
    },
}

impl Emulation {
    /// [`Emulation::Nccl`] for the NCCL version CI checks the declarations against.
    pub const NCCL: Emulation = Emulation::Nccl {
        version: crate::exec::nccl::host::DEFAULT_VERSION,
        pack: false,
    };
}

impl Options {
    /// Sets [`Options::timeout`]. A duration too long to reach (`Duration::MAX`) means no
    /// timeout.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    /// Verifies `program` before starting: `spawn_with` then refuses to start a program the
    /// verifier rejects (or one described for another world size), returning
    /// [`Error::Rejected`] with the diagnostics.
    pub fn verify(mut self, program: impl Into<Arc<Program>>) -> Self {
        self.program = Some(program.into());
        self
    }

    /// Records every call of every rank — kind, peer or root, group, dtype, shape, call site,
    /// batch, start and end — and writes them to `path` when the ranks have finished (also when
    /// they failed), as Chrome trace-event JSON: open it in Perfetto (<https://ui.perfetto.dev>),
    /// one lane per rank. Off by default, and free when off.
    pub fn trace(mut self, path: impl Into<String>) -> Self {
        self.trace = Some(path.into());
        self
    }

    /// Sets [`Options::emulate`].
    pub fn emulate(mut self, emulation: Emulation) -> Self {
        self.emulate = emulation;
        self
    }

    /// Pins rank `r`'s thread to the `r`-th CPU this process may use (round robin when ranks
    /// outnumber them), as MPI launchers bind processes to cores. Off by default: leave it off
    /// when several worlds run at once or the cores are shared with other work. Small calls
    /// gain the most (rank threads the scheduler would otherwise move, or stack on one core,
    /// hand their cache lines across farther); see BENCHMARKS.md. A hint: where the system
    /// refuses (or is not Linux), ranks run unpinned. Unpinned ranks start spread over those
    /// CPUs all the same (each world from the CPU after the last world's) and are then free
    /// to move.
    pub fn pin(mut self, on: bool) -> Self {
        self.pin = on;
        self
    }
}

/// Whether `RANKWISE_PIN` asks for pinned rank threads (a yes/no variable, off by default).
fn pin_from_env() -> Result<bool> {
    crate::vars::flag("RANKWISE_PIN", false)
}

/// Checks the program attached to `options`, if any, for a world of `world` ranks.
fn check_program(world: usize, options: &Options) -> Result<()> {
    let Some(p) = &options.program else {
        return Ok(());
    };
    if p.world != world {
        return Err(Error::BadProgram {
            detail: format!(
                "the program was described for {} ranks but spawned on {world}",
                p.world
            ),
        });
    }
    crate::verify::verify(p).map(drop).map_err(Error::from)
}

/// Runs `f` on `world` threads, one per rank, and returns each rank's value in rank order.
///
/// If any rank fails, returns the root cause: the first rank's panic or error (ranks that only
/// failed because of it are not reported), a deadlock with every rank's blocking call, or a
/// collective mismatch naming both call sites. No thread outlives the call.
pub fn spawn<T, F>(world: usize, f: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(&mut Ctx) -> Result<T> + Sync,
{
    spawn_with(world, Options::default(), f)
}

/// [`spawn`] with [`Options`].
pub fn spawn_with<T, F>(world: usize, options: Options, f: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(&mut Ctx) -> Result<T> + Sync,
{
    let (results, shared) = run_ranks(world, &options, &f)?;
    if results.iter().all(Result::is_ok) {
        return Ok(results.into_iter().filter_map(Result::ok).collect());
    }
    Err(root_cause(results, shared.abort_cause()))
}

/// Like [`spawn_with`], but returns every rank's own result (echoes included), for callers that
/// want to see how each rank ended. The outer `Err` is for an invalid world or a thread that
/// could not be started.
pub fn spawn_each<T, F>(world: usize, options: Options, f: F) -> Result<Vec<Result<T>>>
where
    T: Send,
    F: Fn(&mut Ctx) -> Result<T> + Sync,
{
    Ok(run_ranks(world, &options, &f)?.0)
}

type RankResults<T> = (Vec<Result<T>>, Arc<WorldState>);

fn run_ranks<T, F>(world: usize, options: &Options, f: &F) -> Result<RankResults<T>>
where
    T: Send,
    F: Fn(&mut Ctx) -> Result<T> + Sync,
{
    if world == 0 {
        return Err(Error::InvalidWorld { world });
    }
    check_program(world, options)?;
    let shared = WorldState::new(world, options.timeout);
    let nccl = match options.emulate {
        Emulation::Off => None,
        Emulation::Nccl { version, pack } => {
            Some(HostNccl::new(Arc::clone(&shared), version, pack))
        }
    };
    let backends = (0..world)
        .map(|rank| -> Box<dyn Backend> {
            match &nccl {
                None => Box::new(LocalBackend::new(Arc::clone(&shared), rank)),
                Some(n) => Box::new(HostBackend::new(Arc::clone(n), rank)),
            }
        })
        .collect();
    // Read even when `options` pins: a mistyped value is reported either way.
    let pin_env = pin_from_env()?;
    let cpus: Arc<[usize]> = crate::pin::allowed_cpus().into();
    let place = if options.pin || pin_env {
        Place::Pin(&cpus)
    } else {
        Place::Start(&cpus, NEXT_START.fetch_add(world, Ordering::Relaxed))
    };
    run_on(shared, backends, options.trace.clone(), place, f)
}

/// Where the next unpinned world's rank 0 starts, as an index into the allowed CPUs: worlds
/// that run at once (a test suite's) start on different cores.
static NEXT_START: AtomicUsize = AtomicUsize::new(0);

/// Where rank threads run (see `pin`).
#[derive(Clone, Copy)]
enum Place<'a> {
    /// Wherever the scheduler puts them.
    Anywhere,
    /// Rank `r` on `cpus[r % len]` for good.
    Pin(&'a [usize]),
    /// Rank `r` starts on `cpus[(first + r) % len]`, then may run on any of them.
    Start(&'a Arc<[usize]>, usize),
}

/// Runs `f` on `world` threads over backends that `make` builds, one per rank in rank order,
/// with the threads engine's failure handling. `make` gets a function that tells rank `r`,
/// once another rank has failed, the error to report (backends that wait outside rankwise's
/// own world state — NCCL on GPUs — poll it).
#[cfg_attr(not(feature = "nccl"), allow(dead_code))]
pub(crate) fn spawn_prepared<T, F>(
    world: usize,
    f: F,
    make: impl FnOnce(crate::exec::StopSignal) -> Vec<Box<dyn Backend>>,
) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(&mut Ctx) -> Result<T> + Sync,
{
    let shared = WorldState::new(world, None);
    let watched = Arc::clone(&shared);
    let backends = make(Arc::new(move |rank| {
        watched
            .is_aborted()
            .then(|| watched.abort_error(rank, None))
    }));
    if backends.len() != world {
        return Err(Error::Internal(format!(
            "{} backends for a world of {world}",
            backends.len()
        )));
    }
    let (results, shared) = run_on(shared, backends, None, Place::Anywhere, &f)?;
    if results.iter().all(Result::is_ok) {
        return Ok(results.into_iter().filter_map(Result::ok).collect());
    }
    Err(root_cause(results, shared.abort_cause()))
}

/// Runs rank `r` of `f` on a thread of its own over `backends[r]`, placed by `place`.
fn run_on<T, F>(
    shared: Arc<WorldState>,
    backends: Vec<Box<dyn Backend>>,
    trace: Option<String>,
    place: Place<'_>,
    f: &F,
) -> Result<RankResults<T>>
where
    T: Send,
    F: Fn(&mut Ctx) -> Result<T> + Sync,
{
    let world = backends.len();
    let trace_path = trace.or_else(crate::trace::path_from_env);
    let traces: Option<Traces> = trace_path
        .is_some()
        .then(|| (Instant::now(), Mutex::new(Vec::new())));
    let results = std::thread::scope(|scope| -> Result<Vec<Result<T>>> {
        let mut handles = Vec::with_capacity(world);
        for (rank, backend) in backends.into_iter().enumerate() {
            let rank_shared = Arc::clone(&shared);
            let traces = traces.as_ref();
            let handle = std::thread::Builder::new()
                .name(format!("rank-{rank}"))
                .spawn_scoped(scope, move || {
                    // Hints: a refusal leaves the rank where the scheduler puts it.
                    match place {
                        Place::Pin(cpus) if !cpus.is_empty() => {
                            crate::pin::pin_current_thread(cpus[rank % cpus.len()]);
                        }
                        // One CPU: nowhere else to start.
                        Place::Start(cpus, first) if cpus.len() > 1 => {
                            let cpu = cpus[first.wrapping_add(rank) % cpus.len()];
                            crate::pin::start_on(cpu, cpus);
                        }
                        _ => {}
                    }
                    run_rank(rank, world, rank_shared, backend, f, traces)
                });
            match handle {
                Ok(h) => handles.push(h),
                Err(e) => {
                    // Ranks already started would wait for this one forever: stop them.
                    let detail = format!("could not start a thread for rank {rank}: {e}");
                    let reason = PeerFailure::Errored(detail.clone());
                    shared.abort(Abort::Failed { peer: rank, reason });
                    for h in handles {
                        let _ = h.join();
                    }
                    return Err(Error::Backend {
                        backend: "local",
                        detail,
                    });
                }
            }
        }
        Ok(handles
            .into_iter()
            .enumerate()
            .map(|(rank, h)| {
                // `run_rank` catches the user's panics; a panic here is rankwise's own bug.
                h.join().unwrap_or_else(|p| {
                    Err(Error::Panicked {
                        rank,
                        message: panic_message(&*p),
                    })
                })
            })
            .collect())
    })?;
    if let (Some(path), Some((_, traces))) = (trace_path, traces) {
        let mut ranks = traces.into_inner().unwrap_or_else(|p| p.into_inner());
        ranks.sort_by_key(|(r, _)| *r);
        crate::trace::write(&path, ranks)?;
    }
    Ok((results, shared))
}

/// When tracing: the epoch every rank's times count from, and each rank's events.
type Traces = (Instant, Mutex<Vec<(usize, Vec<crate::trace::Event>)>>);

fn run_rank<T, F>(
    rank: usize,
    world: usize,
    shared: Arc<WorldState>,
    backend: Box<dyn Backend>,
    f: &F,
    traces: Option<&Traces>,
) -> Result<T>
where
    F: Fn(&mut Ctx) -> Result<T> + Sync,
{
    let mut ctx = Ctx::new(rank, world, backend);
    if let Some((epoch, _)) = traces {
        ctx.start_trace(*epoch);
    }
    let result = match catch_unwind(AssertUnwindSafe(|| ctx.run(f))) {
        Ok(r) => r,
        Err(payload) => {
            let message = panic_message(&*payload);
            shared.abort(Abort::Failed {
                peer: rank,
                reason: PeerFailure::Panicked(message.clone()),
            });
            Err(Error::Panicked { rank, message })
        }
    };
    if let Err(e) = &result {
        shared.abort(Abort::for_error(rank, e));
    }
    shared.exit(rank);
    if let (Some((_, all)), Some(events)) = (traces, ctx.take_trace()) {
        all.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((rank, events));
    }
    result
}

/// The error that explains the others: the abort's first cause if there is one.
fn root_cause<T>(results: Vec<Result<T>>, cause: Option<&Abort>) -> Error {
    let mut errors: Vec<(usize, Error)> = results
        .into_iter()
        .enumerate()
        .filter_map(|(r, res)| res.err().map(|e| (r, e)))
        .collect();
    let pick = match cause {
        Some(Abort::Error(e)) => return e.clone(),
        Some(Abort::Failed { peer, .. }) => errors.iter().position(|(r, _)| r == peer),
        None => None,
    };
    let idx = pick
        .or_else(|| errors.iter().position(|(_, e)| !e.is_echo()))
        .unwrap_or(0);
    let (rank, err) = errors.swap_remove(idx);
    if err.is_world_level() || err.names_rank() {
        err
    } else {
        Error::Rank {
            rank,
            error: Box::new(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Op;
    use crate::model::{GroupId, WorldId};

    /// A backend that, like NCCL on a GPU, waits for its peers outside rankwise's world state:
    /// every batch spins until all members have reached it or the world is stopped.
    struct External {
        rank: usize,
        world: WorldId,
        arrived: Arc<std::sync::atomic::AtomicUsize>,
        members: usize,
        stop: crate::exec::StopSignal,
    }

    // SAFETY: touches no buffer at all.
    unsafe impl Backend for External {
        fn name(&self) -> &'static str {
            "external"
        }
        fn world_id(&self) -> WorldId {
            self.world
        }
        fn create_group(&mut self, _: &[usize], _: u32) -> Result<GroupId> {
            Ok(GroupId::WORLD)
        }
        fn execute(&mut self, _: &mut [Op]) -> Result<()> {
            use std::sync::atomic::Ordering::SeqCst;
            self.arrived.fetch_add(1, SeqCst);
            let started = Instant::now();
            while self.arrived.load(SeqCst) < self.members {
                if let Some(e) = (self.stop)(self.rank) {
                    return Err(e);
                }
                assert!(started.elapsed() < Duration::from_secs(20), "never stopped");
                std::thread::yield_now();
            }
            Ok(())
        }
    }

    fn external(world: usize, f: impl Fn(&mut Ctx) -> Result<usize> + Sync) -> Result<Vec<usize>> {
        let arrived = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let id = WorldId::fresh();
        spawn_prepared(world, f, |stop| {
            (0..world)
                .map(|rank| -> Box<dyn Backend> {
                    Box::new(External {
                        rank,
                        world: id,
                        arrived: Arc::clone(&arrived),
                        members: world,
                        stop: Arc::clone(&stop),
                    })
                })
                .collect()
        })
    }

    #[test]
    fn prepared_backends_run_every_rank() {
        let got = external(3, |ctx| {
            ctx.barrier()?;
            Ok(ctx.rank() * 10)
        });
        assert_eq!(got.expect("runs"), vec![0, 10, 20]);
    }

    #[test]
    fn a_failing_rank_stops_peers_waiting_outside_rankwise() {
        // Rank 1 fails before the barrier; ranks 0 and 2 wait in the backend, which hears of
        // it only through the stop function — and the root cause is rank 1's error.
        let err = external(3, |ctx| {
            if ctx.rank() == 1 {
                return Err(Error::Tensor("rank 1 could not load its shard".into()));
            }
            ctx.barrier()?;
            Ok(0)
        })
        .expect_err("rank 1 fails");
        let text = err.to_string();
        assert!(
            text.contains("rank 1") && text.contains("could not load its shard"),
            "{text}"
        );
        let err = external(2, |ctx| {
            if ctx.rank() == 0 {
                panic!("rank 0 trips");
            }
            ctx.barrier()?;
            Ok(0)
        })
        .expect_err("rank 0 panics");
        assert!(matches!(err, Error::Panicked { rank: 0, .. }), "{err}");
    }
}
