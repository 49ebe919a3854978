//! Running this process's rank of an MPI job, and ending the job when a rank fails.

use std::panic::{AssertUnwindSafe, catch_unwind};

use mpi::Threading;
use mpi::ffi;
use mpi::topology::Communicator;

use std::sync::Arc;

use super::MpiBackend;
use super::monitor::{self, Board, Phase};
use crate::ctx::Ctx;
use crate::error::{Error, Result, panic_message};

/// The monitor's communicator, handed to its thread.
struct MonitorComm(mpi::topology::SimpleCommunicator);

// SAFETY: `run` requires MPI_THREAD_MULTIPLE before creating it, under which any thread may
// use a communicator; only the monitor thread uses this one.
unsafe impl Send for MonitorComm {}

/// Initialises MPI, runs `f` on this process's rank and finalises MPI: this rank's value, with
/// its rank and the job's size. A rank whose function fails or panics ends the whole job
/// ([`abort_job`]): its peers may be waiting for it, and MPI cannot tell them otherwise.
pub(crate) fn run<T, F>(f: &F) -> Result<(usize, usize, T)>
where
    F: Fn(&mut Ctx) -> Result<T>,
{
    // `Multiple`: the launcher's monitor thread talks to its peers while the rank computes.
    let (universe, threading) =
        mpi::initialize_with_threading(Threading::Multiple).ok_or_else(|| Error::Backend {
            backend: "mpi",
            detail: "MPI was already initialised (or finalised) in this process: under MPI, \
                     `launch` runs once per process"
                .into(),
        })?;
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    if threading != Threading::Multiple {
        // A `Ctx` may move between threads, and the monitor runs beside the rank.
        let e = Error::Backend {
            backend: "mpi",
            detail: format!(
                "the MPI library grants thread level {threading:?}; rankwise needs \
                 MPI_THREAD_MULTIPLE (Open MPI and MPICH provide it)"
            ),
        };
        abort_job(rank, &e);
    }
    let board = Arc::new(Board::default());
    let backend = match MpiBackend::new(&world, Arc::clone(&board)) {
        Ok(b) => b,
        Err(e) => abort_job(rank, &e),
    };
    let monitor = {
        let (board, comm) = (Arc::clone(&board), MonitorComm(world.duplicate()));
        std::thread::Builder::new()
            .name(format!("rankwise-monitor-{rank}"))
            .spawn(move || {
                let comm = comm;
                monitor::watch(board, comm.0)
            })
    };
    let monitor = match monitor {
        Ok(m) => m,
        Err(e) => abort_job(
            rank,
            &Error::Backend {
                backend: "mpi",
                detail: format!("could not start the monitor thread: {e}"),
            },
        ),
    };
    let mut ctx = Ctx::new(rank, size, Box::new(backend));
    let trace = crate::trace::path_from_env();
    if trace.is_some() {
        ctx.start_trace(std::time::Instant::now());
    }
    let outcome = catch_unwind(AssertUnwindSafe(|| ctx.run(f)));
    // Written on every outcome: the trace of a failing run is the one worth reading.
    if let Err(e) = crate::trace::write_process(&mut ctx, trace.as_deref(), rank) {
        abort_job(rank, &e);
    }
    let value = match outcome {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => abort_job(rank, &e),
        Err(payload) => abort_job(
            rank,
            &Error::Panicked {
                rank,
                message: panic_message(&*payload),
            },
        ),
    };
    // The monitor runs until every rank has finished: a rank that returned may be the one
    // the others wait for, and only the monitors can tell them.
    board.update(|s| s.phase = Phase::Finished);
    match monitor.join() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => abort_job(rank, &e),
        Err(_) => abort_job(rank, &Error::Internal("the monitor thread panicked".into())),
    }
    // Communicators are freed before MPI is finalised (dropping the universe finalises).
    drop(ctx);
    drop(world);
    drop(universe);
    Ok((rank, size, value))
}

/// Prints `error` (which names its ranks) and ends every process of the job with `MPI_Abort`.
pub(crate) fn abort_job_with(error: &Error) -> ! {
    eprintln!("rankwise: {error}\nrankwise: ending the MPI job (MPI_Abort)");
    end_job()
}

/// `MPI_Abort` on the world, after a moment: the launcher forwards a process's standard error
/// through its daemon, and an abort right after the message can tear that channel down before
/// the message — the one that explains the failure — is through (seen under load in the
/// `mpirun` tests).
fn end_job() -> ! {
    std::thread::sleep(std::time::Duration::from_millis(50));
    // SAFETY: MPI is initialised (a backend or monitor exists only then); aborting needs no
    // more.
    unsafe { ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, 1) };
    std::process::abort()
}

/// Prints `error` as rank `rank`'s failure and ends every process of the job with
/// `MPI_Abort` (exit status 1).
pub(crate) fn abort_job(rank: usize, error: &Error) -> ! {
    let shown = match error {
        Error::Rank { .. } | Error::Panicked { .. } => error.to_string(),
        e if e.names_rank() => e.to_string(),
        e => format!("rank {rank}: {e}"),
    };
    eprintln!("rankwise: {shown}\nrankwise: rank {rank} ends the MPI job (MPI_Abort)");
    end_job()
}
