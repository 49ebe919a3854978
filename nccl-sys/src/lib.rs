//! The raw NCCL API that rankwise uses, loaded at run time.
//!
//! Nothing here links against NCCL: the library is opened with `dlopen` when a program first
//! asks for it, so everything builds and tests on machines without NCCL or CUDA, and a missing
//! library is an [`Err`] that lists what was searched — never a panic. (cudarc's own NCCL
//! loader looks only for `libnccl.so`, which the pip wheels PyTorch users have do not provide,
//! and panics when it is absent: that is why this crate exists.)
//!
//! Where the library is looked for, in order (see [`Search`]):
//!
//! 1. `RANKWISE_NCCL_LIB` — a file, or a directory holding `libnccl.so.2`. When it is set,
//!    nothing else is tried: a user who names a library means that one.
//! 2. `libnccl.so.2`, then `libnccl.so`, through the dynamic linker's own search
//!    (`LD_LIBRARY_PATH`, the cache, the system directories).
//! 3. `nvidia/nccl/lib/libnccl.so.2` inside the Python package directories where the
//!    `nvidia-nccl-cu12`/`nvidia-nccl-cu13` wheels install it (`PYTHONPATH`, the active
//!    virtualenv or conda environment, the user's and the system's site-packages, pyenv's).
//!
//! Layers: this crate is the *sys* layer (types, the function table, loading); the runtime's
//! NCCL backend turns result codes into errors and owns communicators. The declarations are
//! checked against the real `nccl.h` by `tests/header.rs`, so a wrong signature cannot reach a
//! GPU.

#![allow(non_snake_case)]

mod search;
mod types;

use std::ffi::{c_char, c_int, c_void};
use std::fmt;
use std::path::PathBuf;

pub use search::Search;
pub use types::*;

/// The oldest NCCL rankwise supports: 2.18. Every call it makes exists from 2.13 on (the last
/// to arrive was `ncclGetLastError`); the floor is set higher, at a 2023 release, so that a
/// years-old library is named as the problem rather than trusted on untested paths.
pub const MIN_VERSION: c_int = 21800;

/// One declared function: its name, the NCCL version that introduced it, and its parameter
/// and result types as written in the declaration (the header test maps them to C).
#[derive(Clone, Copy, Debug)]
pub struct Declaration {
    /// The C function name.
    pub name: &'static str,
    /// `NCCL_VERSION_CODE` of the first release that has it.
    pub since: c_int,
    /// Parameter types, as Rust tokens.
    pub args: &'static [&'static str],
    /// The result type, as Rust tokens.
    pub ret: &'static str,
}

/// Declares the functions rankwise calls, once: the [`Api`] table, its resolution from a
/// loaded library, and [`DECLARATIONS`] for the header check.
macro_rules! nccl_api {
    ($( $(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty, since $since:literal; )*) => {
        /// The NCCL functions rankwise calls, resolved from one loaded library. A function
        /// newer than the loaded library is `None`; every other one is present (loading fails
        /// otherwise).
        pub struct Api {
            $( $(#[$doc])* pub $name: Option<unsafe extern "C" fn($($arg: $ty),*) -> $ret>, )*
        }

        /// Every function [`Api`] declares.
        pub const DECLARATIONS: &[Declaration] = &[
            $( Declaration {
                name: stringify!($name),
                since: $since,
                args: &[$(stringify!($ty)),*],
                ret: stringify!($ret),
            }, )*
        ];

        impl Api {
            /// Resolves every function from `lib`, whose version is `version`; the names of
            /// functions that should be there and are not.
            fn resolve(lib: &libloading::Library, version: c_int) -> Result<Self, Vec<&'static str>> {
                let mut missing = Vec::new();
                let api = Api {
                    $( $name: resolve_one(lib, stringify!($name), $since, version, &mut missing), )*
                };
                if missing.is_empty() { Ok(api) } else { Err(missing) }
            }
        }
    };
}

/// One function of `lib`, or `None` when the library predates it; a function it should have
/// and lacks is added to `missing`.
fn resolve_one<T: Copy>(
    lib: &libloading::Library,
    name: &'static str,
    since: c_int,
    version: c_int,
    missing: &mut Vec<&'static str>,
) -> Option<T> {
    let mut symbol = name.as_bytes().to_vec();
    symbol.push(0);
    // SAFETY: `T` is the function pointer type declared for `name`, which `tests/header.rs`
    // checks against `nccl.h`; the library stays loaded for the life of the process (see
    // `Nccl`), so the pointer never dangles.
    match unsafe { lib.get::<T>(&symbol) } {
        Ok(f) => Some(*f),
        Err(_) => {
            if since <= version {
                missing.push(name);
            }
            None
        }
    }
}

nccl_api! {
    /// `ncclGetVersion(int*)`.
    fn ncclGetVersion(version: *mut c_int) -> ncclResult_t, since 20300;
    /// `ncclGetErrorString(ncclResult_t)`.
    fn ncclGetErrorString(result: ncclResult_t) -> *const c_char, since 20300;
    /// `ncclGetLastError(ncclComm_t)`: the last error's text.
    fn ncclGetLastError(comm: ncclComm_t) -> *const c_char, since 21300;
    /// `ncclGetUniqueId(ncclUniqueId*)`.
    fn ncclGetUniqueId(id: *mut ncclUniqueId) -> ncclResult_t, since 20300;
    /// `ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int)`.
    fn ncclCommInitRank(comm: *mut ncclComm_t, nranks: c_int, id: ncclUniqueId, rank: c_int) -> ncclResult_t, since 20300;
    /// `ncclCommInitAll(ncclComm_t*, int, const int*)`: one communicator per listed device,
    /// all made by the calling thread (one process driving several GPUs).
    fn ncclCommInitAll(comm: *mut ncclComm_t, ndev: c_int, devlist: *const c_int) -> ncclResult_t, since 20300;
    /// `ncclCommSplit(ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*)`.
    fn ncclCommSplit(comm: ncclComm_t, color: c_int, key: c_int, newcomm: *mut ncclComm_t, config: *mut ncclConfig_t) -> ncclResult_t, since 21800;
    /// `ncclCommFinalize(ncclComm_t)`.
    fn ncclCommFinalize(comm: ncclComm_t) -> ncclResult_t, since 21400;
    /// `ncclCommDestroy(ncclComm_t)`.
    fn ncclCommDestroy(comm: ncclComm_t) -> ncclResult_t, since 20300;
    /// `ncclCommAbort(ncclComm_t)`.
    fn ncclCommAbort(comm: ncclComm_t) -> ncclResult_t, since 20400;
    /// `ncclCommGetAsyncError(ncclComm_t, ncclResult_t*)`.
    fn ncclCommGetAsyncError(comm: ncclComm_t, error: *mut ncclResult_t) -> ncclResult_t, since 20400;
    /// `ncclCommCount(const ncclComm_t, int*)`.
    fn ncclCommCount(comm: ncclComm_t, count: *mut c_int) -> ncclResult_t, since 20300;
    /// `ncclCommUserRank(const ncclComm_t, int*)`.
    fn ncclCommUserRank(comm: ncclComm_t, rank: *mut c_int) -> ncclResult_t, since 20300;
    /// `ncclRedOpCreatePreMulSum(ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t, ncclComm_t)`.
    fn ncclRedOpCreatePreMulSum(op: *mut ncclRedOp_t, scalar: *mut c_void, datatype: ncclDataType_t, residence: ncclScalarResidence_t, comm: ncclComm_t) -> ncclResult_t, since 21100;
    /// `ncclRedOpDestroy(ncclRedOp_t, ncclComm_t)`.
    fn ncclRedOpDestroy(op: ncclRedOp_t, comm: ncclComm_t) -> ncclResult_t, since 21100;
    /// `ncclReduce`.
    fn ncclReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, op: ncclRedOp_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t, since 20300;
    /// `ncclBroadcast`.
    fn ncclBroadcast(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t, since 20300;
    /// `ncclAllReduce`.
    fn ncclAllReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, op: ncclRedOp_t, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t, since 20300;
    /// `ncclReduceScatter` (`recvcount` elements per rank).
    fn ncclReduceScatter(sendbuff: *const c_void, recvbuff: *mut c_void, recvcount: usize, datatype: ncclDataType_t, op: ncclRedOp_t, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t, since 20300;
    /// `ncclAllGather` (`sendcount` elements per rank).
    fn ncclAllGather(sendbuff: *const c_void, recvbuff: *mut c_void, sendcount: usize, datatype: ncclDataType_t, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t, since 20300;
    /// `ncclAlltoAll` (2.28 and later; grouped sends and receives before).
    fn ncclAlltoAll(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t, since 22800;
    /// `ncclGather` (2.28 and later).
    fn ncclGather(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t, since 22800;
    /// `ncclScatter` (2.28 and later).
    fn ncclScatter(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t, since 22800;
    /// `ncclSend`.
    fn ncclSend(sendbuff: *const c_void, count: usize, datatype: ncclDataType_t, peer: c_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t, since 20700;
    /// `ncclRecv`.
    fn ncclRecv(recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, peer: c_int, comm: ncclComm_t, stream: cudaStream_t) -> ncclResult_t, since 20700;
    /// `ncclGroupStart()`.
    fn ncclGroupStart() -> ncclResult_t, since 20300;
    /// `ncclGroupEnd()`.
    fn ncclGroupEnd() -> ncclResult_t, since 20300;
}

/// A loaded NCCL library: where it came from, its version, and its functions.
///
/// The library is never unloaded: NCCL starts threads that run its code, and a communicator's
/// proxy thread may outlive the communicator's handle, so `load` leaks its handle and returns a
/// `&'static` (loading twice only raises the loader's reference count).
pub struct Nccl {
    /// The file that was loaded (or the name the dynamic linker resolved).
    pub path: PathBuf,
    /// `NCCL_VERSION_CODE` of the library (`2.32.3` is `23203`).
    pub version: c_int,
    /// Its functions.
    pub api: Api,
}

impl Nccl {
    /// Loads NCCL from where the environment says (see [`Search::from_env`]).
    pub fn load() -> Result<&'static Nccl, LoadError> {
        Self::load_from(&Search::from_env())
    }

    /// Loads NCCL from the first candidate of `search` that opens and is recent enough.
    pub fn load_from(search: &Search) -> Result<&'static Nccl, LoadError> {
        let mut tried = Vec::new();
        for candidate in search.candidates() {
            // SAFETY: opening a shared library runs its initialisers; NCCL's only set up
            // static state (it opens libcuda lazily, at its first CUDA use).
            match unsafe { libloading::Library::new(&candidate) } {
                Ok(lib) => return Self::from_library(lib, candidate),
                Err(e) => tried.push((candidate, e.to_string())),
            }
        }
        Err(LoadError::NotFound {
            tried,
            searched: search.searched_dirs(),
        })
    }

    fn from_library(lib: libloading::Library, path: PathBuf) -> Result<&'static Nccl, LoadError> {
        let mut missing = Vec::new();
        let get_version: Option<unsafe extern "C" fn(*mut c_int) -> ncclResult_t> =
            resolve_one(&lib, "ncclGetVersion", 0, 0, &mut missing);
        let Some(get_version) = get_version else {
            return Err(LoadError::MissingSymbols {
                path,
                version: 0,
                missing: vec!["ncclGetVersion"],
            });
        };
        let mut version: c_int = 0;
        // SAFETY: `ncclGetVersion` writes one int; it needs no GPU.
        let code = unsafe { get_version(&mut version) };
        if code != ncclSuccess {
            return Err(LoadError::Failed {
                path,
                call: "ncclGetVersion",
                code,
            });
        }
        if version < MIN_VERSION {
            return Err(LoadError::TooOld {
                path,
                found: version,
                needed: MIN_VERSION,
            });
        }
        let api = Api::resolve(&lib, version).map_err(|missing| LoadError::MissingSymbols {
            path: path.clone(),
            version,
            missing,
        })?;
        // Never unloaded (see the type's docs).
        std::mem::forget(lib);
        Ok(Box::leak(Box::new(Nccl { path, version, api })))
    }

    /// The version as `(major, minor, patch)`.
    pub fn version_triple(&self) -> (c_int, c_int, c_int) {
        version_triple(self.version)
    }
}

/// `NCCL_VERSION_CODE` as `(major, minor, patch)` (codes before 2.9 had a digit less).
pub fn version_triple(code: c_int) -> (c_int, c_int, c_int) {
    if code >= 10000 {
        (code / 10000, code / 100 % 100, code % 100)
    } else {
        (code / 1000, code / 100 % 10, code % 100)
    }
}

fn show_version(code: c_int) -> String {
    let (a, b, c) = version_triple(code);
    format!("{a}.{b}.{c}")
}

/// Why NCCL could not be loaded.
#[derive(Debug)]
pub enum LoadError {
    /// No candidate opened: each with the loader's reason, and the directories searched for
    /// wheels.
    NotFound {
        /// Each candidate tried and why it did not open.
        tried: Vec<(PathBuf, String)>,
        /// Python package directories searched for `nvidia/nccl/lib`.
        searched: Vec<PathBuf>,
    },
    /// The library lacks functions its version should have.
    MissingSymbols {
        /// The library.
        path: PathBuf,
        /// Its version (0 if unknown).
        version: c_int,
        /// The functions not found.
        missing: Vec<&'static str>,
    },
    /// The library is older than [`MIN_VERSION`].
    TooOld {
        /// The library.
        path: PathBuf,
        /// Its version.
        found: c_int,
        /// The oldest version rankwise runs on.
        needed: c_int,
    },
    /// A call needed to load it failed.
    Failed {
        /// The library.
        path: PathBuf,
        /// The call.
        call: &'static str,
        /// Its result code.
        code: ncclResult_t,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::NotFound { tried, searched } => {
                writeln!(f, "NCCL could not be loaded; tried:")?;
                for (path, why) in tried {
                    writeln!(f, "  {}: {why}", path.display())?;
                }
                if !searched.is_empty() {
                    writeln!(
                        f,
                        "  (Python package directories searched for nvidia/nccl/lib:"
                    )?;
                    for d in searched {
                        writeln!(f, "     {}", d.display())?;
                    }
                    writeln!(f, "  )")?;
                }
                write!(
                    f,
                    "install NCCL (e.g. `pip install nvidia-nccl-cu13`, or your distribution's \
                     libnccl2), or set RANKWISE_NCCL_LIB to the library's path"
                )
            }
            LoadError::MissingSymbols {
                path,
                version,
                missing,
            } => write!(
                f,
                "{} (NCCL {}) lacks {}: is it a complete NCCL build?",
                path.display(),
                show_version(*version),
                missing.join(", ")
            ),
            LoadError::TooOld {
                path,
                found,
                needed,
            } => write!(
                f,
                "{} is NCCL {}, but rankwise supports {} and later: upgrade it (pip install \
                 nvidia-nccl-cu12), or set RANKWISE_NCCL_LIB to a newer library",
                path.display(),
                show_version(*found),
                show_version(*needed)
            ),
            LoadError::Failed { path, call, code } => {
                write!(f, "{call} in {} failed with code {code}", path.display())
            }
        }
    }
}

impl std::error::Error for LoadError {}
