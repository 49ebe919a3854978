//! `launch`: one entry point for a rank program, whichever engine runs it.

use crate::ctx::Ctx;
use crate::error::{Error, Result};

/// The engine that runs the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Engine {
    /// Threads of this process, one per rank (the `local` backend).
    Threads,
    /// This process is one rank of an MPI job (the `mpi` backend).
    Mpi,
    /// Threads of this process running the NCCL backend's call lists on host memory
    /// ([`Emulation::Nccl`](crate::Emulation::Nccl)): `RANKWISE_BACKEND=nccl-host`, with
    /// `RANKWISE_NCCL_VERSION` (e.g. `2.27.3`) choosing the NCCL version to lower for.
    NcclHost,
    /// The NCCL backend on GPUs: `RANKWISE_BACKEND=nccl`, or a process started by `torchrun`.
    /// Started by torchrun (`RANK` set) or by `mpirun` (with the `mpi` feature too), this
    /// process is one rank, on the GPU `LOCAL_RANK` names (under mpirun, by default, its index
    /// among its node's processes); otherwise this process runs every rank, a thread per GPU.
    Nccl,
}

impl Engine {
    /// The engine [`launch`] uses: `RANKWISE_BACKEND` if set (`threads`, `mpi`, `nccl` or
    /// `nccl-host`), otherwise NCCL when `torchrun` started this process
    /// (`TORCHELASTIC_RUN_ID` is set), MPI when an MPI launcher did (`mpirun`/`mpiexec` of
    /// Open MPI, MPICH or any PMI/PMIx launcher set their variables), otherwise threads.
    pub fn detect() -> Result<Engine> {
        match std::env::var("RANKWISE_BACKEND") {
            Ok(v) => match v.trim() {
                "threads" | "local" => Ok(Engine::Threads),
                "mpi" => Ok(Engine::Mpi),
                "nccl-host" => Ok(Engine::NcclHost),
                "nccl" => Ok(Engine::Nccl),
                other => Err(Error::Backend {
                    backend: "launch",
                    detail: format!(
                        "RANKWISE_BACKEND={other:?} names no engine; use `threads`, `mpi`, \
                         `nccl` or `nccl-host` (or unset it to choose by how the process was started)"
                    ),
                }),
            },
            // torchrun marks its processes; they are GPU ranks unless told otherwise.
            Err(_) if std::env::var_os("TORCHELASTIC_RUN_ID").is_some() => Ok(Engine::Nccl),
            Err(_) => Ok(if started_by_mpi() {
                Engine::Mpi
            } else {
                Engine::Threads
            }),
        }
    }
}

/// Whether an MPI launcher (`mpirun`/`mpiexec` of Open MPI, MPICH or any PMI/PMIx launcher)
/// started this process: they set these variables.
fn started_by_mpi() -> bool {
    const LAUNCHERS: [&str; 4] = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"];
    LAUNCHERS.iter().any(|v| std::env::var_os(v).is_some())
}

/// The values of the ranks this process ran, with their ranks.
///
/// Under threads that is every rank of the world, in rank order; under MPI it is this
/// process's rank alone (each process of the job gets its own `Ranks`). Code that prints or
/// checks "each rank's result" iterates over it and works unchanged under both.
#[derive(Clone, Debug, PartialEq)]
pub struct Ranks<T> {
    world: usize,
    first: usize,
    values: Vec<T>,
}

impl<T> Ranks<T> {
    /// The world size the program ran at.
    pub fn world(&self) -> usize {
        self.world
    }

    /// `(rank, value)` for each rank this process ran, in rank order.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &T)> {
        self.values
            .iter()
            .enumerate()
            .map(|(i, v)| (self.first + i, v))
    }

    /// Rank `rank`'s value, if this process ran it.
    pub fn get(&self, rank: usize) -> Option<&T> {
        rank.checked_sub(self.first)
            .and_then(|i| self.values.get(i))
    }

    /// Whether every rank ran here (threads), so that [`Ranks::all`] has every value.
    pub fn is_all(&self) -> bool {
        self.first == 0 && self.values.len() == self.world
    }

    /// Every rank's value in rank order, if every rank ran in this process (threads).
    pub fn all(self) -> Option<Vec<T>> {
        self.is_all().then_some(self.values)
    }

    /// `(rank, value)` pairs, in rank order.
    pub fn into_vec(self) -> Vec<(usize, T)> {
        let first = self.first;
        self.values
            .into_iter()
            .enumerate()
            .map(|(i, v)| (first + i, v))
            .collect()
    }
}

/// Runs the rank program `f`: on `world` threads of this process (or `RANKWISE_WORLD` threads,
/// if that is set), or — when this process is one rank of an MPI job (see [`Engine::detect`])
/// — on this process's rank, with the job's size as the world.
///
/// So one binary runs both ways: `cargo run --example ring` and
/// `mpirun -np 4 target/debug/examples/ring`. A program checked by `#[rankwise::program]`
/// refuses a world size it was not checked for on every rank, before any communication.
///
/// Failures: under threads, the root cause is returned as with [`spawn`](crate::spawn). Under
/// MPI, a rank that fails or panics prints its error (naming the rank and the call) and ends
/// the whole job with `MPI_Abort` and exit status 1, since its peers may be waiting for it:
/// `launch` then does not return on any process. MPI is initialised and finalised inside, so
/// under MPI `launch` runs once per process.
pub fn launch<T, F>(world: usize, f: F) -> Result<Ranks<T>>
where
    T: Send,
    F: Fn(&mut Ctx) -> Result<T> + Sync,
{
    launch_on(Engine::detect()?, world, f)
}

/// [`launch`] on the engine the program chooses instead of the one [`Engine::detect`] reads
/// from the environment (e.g. `Engine::Nccl` in a program meant only for GPUs). The engine's
/// own variables still apply: `RANKWISE_WORLD` for threads, the launcher's under MPI or NCCL.
pub fn launch_on<T, F>(engine: Engine, world: usize, f: F) -> Result<Ranks<T>>
where
    T: Send,
    F: Fn(&mut Ctx) -> Result<T> + Sync,
{
    match engine {
        Engine::Threads => threads(threads_world(world)?, f, Default::default()),
        Engine::NcclHost => threads(threads_world(world)?, f, nccl_host()?),
        Engine::Mpi => mpi(f),
        Engine::Nccl => nccl(world, f),
    }
}

/// The threads engine's world: `RANKWISE_WORLD` if set (the threads counterpart of
/// `mpirun -np`), otherwise the program's own.
fn threads_world(world: usize) -> Result<usize> {
    match std::env::var("RANKWISE_WORLD") {
        Err(_) => Ok(world),
        Ok(v) => v.trim().parse().map_err(|_| Error::Backend {
            backend: "launch",
            detail: format!("RANKWISE_WORLD={v:?} is not a world size (a number of ranks)"),
        }),
    }
}

/// The NCCL emulation, for the version `RANKWISE_NCCL_VERSION` names (`2.27.3` or `22703`)
/// or the default one, packing small collectives if `RANKWISE_NCCL_PACK=1`.
#[cfg(feature = "local")]
fn nccl_host() -> Result<crate::Options> {
    let version = match std::env::var("RANKWISE_NCCL_VERSION") {
        Err(_) => crate::exec::nccl::host::DEFAULT_VERSION,
        Ok(v) => parse_nccl_version(&v).ok_or_else(|| Error::Backend {
            backend: "launch",
            detail: format!(
                "RANKWISE_NCCL_VERSION={v:?} is not an NCCL version; write it as 2.27.3 or as \
                 NCCL's version code, 22703"
            ),
        })?,
    };
    let pack = crate::vars::flag("RANKWISE_NCCL_PACK", false)?;
    Ok(crate::Options::default().emulate(crate::Emulation::Nccl { version, pack }))
}

#[cfg(not(feature = "local"))]
fn nccl_host() -> Result<Options> {
    Ok(Options)
}

/// `2.27.3` → 22703 (NCCL's code for 2.9 and later: major·10000 + minor·100 + patch), or a code
/// as it is.
fn parse_nccl_version(v: &str) -> Option<u32> {
    let parts: Vec<u32> = v
        .trim()
        .split('.')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    match parts[..] {
        [code] if code >= 20000 => Some(code),
        [major, minor, patch] if major >= 2 && minor < 100 && patch < 100 => {
            Some(major * 10000 + minor * 100 + patch)
        }
        _ => None,
    }
}

#[cfg(feature = "local")]
fn threads<T, F>(world: usize, f: F, options: crate::Options) -> Result<Ranks<T>>
where
    T: Send,
    F: Fn(&mut Ctx) -> Result<T> + Sync,
{
    let values = crate::spawn::spawn_with(world, options, f)?;
    Ok(Ranks {
        world,
        first: 0,
        values,
    })
}

/// Without the `local` feature there are no options to carry.
#[cfg(not(feature = "local"))]
#[derive(Default)]
struct Options;

#[cfg(not(feature = "local"))]
fn threads<T, F>(_world: usize, _f: F, _options: Options) -> Result<Ranks<T>> {
    Err(Error::Backend {
        backend: "local",
        detail: "this program was built without rankwise's `local` feature (threads); \
                 rebuild with it, or start the program under mpirun"
            .into(),
    })
}

#[cfg(feature = "mpi")]
fn mpi<T, F>(f: F) -> Result<Ranks<T>>
where
    F: Fn(&mut Ctx) -> Result<T>,
{
    let (rank, world, value) = crate::exec::mpi::run(&f)?;
    Ok(Ranks {
        world,
        first: rank,
        values: vec![value],
    })
}

/// The NCCL engine: one rank per process under torchrun or mpirun, else a thread per GPU.
#[cfg(feature = "nccl")]
fn nccl<T, F>(world: usize, f: F) -> Result<Ranks<T>>
where
    T: Send,
    F: Fn(&mut Ctx) -> Result<T> + Sync,
{
    use crate::exec::nccl::gpu;
    let (rank, world, value) = if crate::bootstrap::Rendezvous::from_env()?.is_some() {
        gpu::run(&f)?
    } else if started_by_mpi() {
        nccl_under_mpi(&f)?
    } else {
        return nccl_threads(threads_world(world)?, f);
    };
    Ok(Ranks {
        world,
        first: rank,
        values: vec![value],
    })
}

#[cfg(all(feature = "nccl", feature = "mpi"))]
fn nccl_under_mpi<T, F>(f: &F) -> Result<(usize, usize, T)>
where
    F: Fn(&mut Ctx) -> Result<T>,
{
    crate::exec::nccl::gpu::run_mpi(f)
}

#[cfg(all(feature = "nccl", not(feature = "mpi")))]
fn nccl_under_mpi<T, F>(_f: &F) -> Result<(usize, usize, T)> {
    Err(Error::Backend {
        backend: "nccl",
        detail: "this process was started by an MPI launcher with RANKWISE_BACKEND=nccl, but \
                 the program was built without rankwise's `mpi` feature, which carries the \
                 NCCL ids under mpirun; rebuild with `--features mpi,nccl`, or start the job \
                 with torchrun"
            .into(),
    })
}

#[cfg(all(feature = "nccl", feature = "local"))]
fn nccl_threads<T, F>(world: usize, f: F) -> Result<Ranks<T>>
where
    T: Send,
    F: Fn(&mut Ctx) -> Result<T> + Sync,
{
    let values = crate::exec::nccl::gpu::run_threads(world, f)?;
    Ok(Ranks {
        world,
        first: 0,
        values,
    })
}

#[cfg(all(feature = "nccl", not(feature = "local")))]
fn nccl_threads<T, F>(_world: usize, _f: F) -> Result<Ranks<T>> {
    Err(Error::Backend {
        backend: "nccl",
        detail: "RANKWISE_BACKEND=nccl without a launcher runs a thread per GPU, which needs \
                 rankwise's `local` feature; rebuild with it, or start one process per GPU \
                 with torchrun"
            .into(),
    })
}

#[cfg(not(feature = "nccl"))]
fn nccl<T, F>(_world: usize, _f: F) -> Result<Ranks<T>> {
    Err(Error::Backend {
        backend: "nccl",
        detail: "this process was started by torchrun (or RANKWISE_BACKEND=nccl), but the \
                 program was built without rankwise's `nccl` feature; rebuild with \
                 `--features nccl`, or set RANKWISE_BACKEND=threads"
            .into(),
    })
}

#[cfg(not(feature = "mpi"))]
fn mpi<T, F>(_f: F) -> Result<Ranks<T>> {
    Err(Error::Backend {
        backend: "mpi",
        detail: "this process was started by an MPI launcher (or RANKWISE_BACKEND=mpi), but \
                 the program was built without rankwise's `mpi` feature; rebuild with \
                 `--features mpi`, or run it without mpirun"
            .into(),
    })
}

#[cfg(test)]
mod tests {
    use super::parse_nccl_version;

    #[test]
    fn nccl_versions_read_as_dotted_or_as_codes() {
        assert_eq!(parse_nccl_version("2.27.3"), Some(22703));
        assert_eq!(parse_nccl_version(" 23203 "), Some(23203));
        assert_eq!(parse_nccl_version("2.18.1"), Some(21801));
        for bad in ["", "2.27", "two", "2.100.1", "1.2.3", "999"] {
            assert_eq!(parse_nccl_version(bad), None, "{bad:?}");
        }
    }
}
