//! Running this process's rank of an MPI job, and ending the job when a rank fails.

use std::panic::{AssertUnwindSafe, catch_unwind};

use mpi::Threading;
use mpi::ffi;
use mpi::topology::Communicator;

use super::MpiBackend;
use crate::ctx::Ctx;
use crate::error::{Error, Result, panic_message};

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
                "the MPI library grants thread level {threading:?}; rankwise needs                  MPI_THREAD_MULTIPLE (Open MPI and MPICH provide it)"
            ),
        };
        abort_job(rank, &e);
    }
    let backend = match MpiBackend::new(&world) {
        Ok(b) => b,
        Err(e) => abort_job(rank, &e),
    };
    let mut ctx = Ctx::new(rank, size, Box::new(backend));
    let value = match catch_unwind(AssertUnwindSafe(|| f(&mut ctx))) {
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
    // Communicators are freed before MPI is finalised (dropping the universe finalises).
    drop(ctx);
    drop(world);
    drop(universe);
    Ok((rank, size, value))
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
    // SAFETY: MPI is initialised (the backend exists only then); aborting needs no more.
    unsafe { ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, 1) };
    std::process::abort()
}
