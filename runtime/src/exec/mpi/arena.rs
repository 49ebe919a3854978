//! The shared heap of the processes on one host: each rank's host tensors live in a file in
//! `/dev/shm` that every other rank on its host has mapped (see `crate::heap`).
//!
//! Why: a collective through the window (`shm`) otherwise copies each member's data into the
//! window and the results back out, because a process cannot see another's heap. With the
//! tensors in shared memory, a member reads its peers' data and writes their results where
//! they are, as the threads backend does: a world-2 bucket of 1,000 × 1 KiB all_reduces then
//! moves each byte once each way instead of three times (`BENCHMARKS.md`, session 35).
//!
//! **No bus error.** A file in tmpfs can be larger than the memory behind it (the mapping
//! reserves addresses only), and touching a page tmpfs cannot back kills the process with
//! `SIGBUS`. So the heap hands out only bytes the file has been *allocated* for
//! (`fallocate`, in [`CHUNK`]s, which fails cleanly when `/dev/shm` is full); a tensor that
//! does not fit goes to the process's heap instead, and its collectives take the copying path.
//!
//! **All or none, per host.** Each rank creates its file, the ranks of a host exchange the
//! files' names and map each other's, and only if every one of them succeeded does any of them
//! use its heap (one exchange of flags); the files are then unlinked, so that nothing is left
//! in `/dev/shm` however the job ends (the mappings stay valid until the process exits). A
//! host where this fails runs exactly as before, with tensors on the heap.
//!
//! The heap and the mappings are never freed: tensors may outlive the backend (a rank
//! program's return value), and the memory is the process's until it exits.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::Mutex;

use mpi::topology::{Communicator, SimpleCommunicator};

use super::raw;
use crate::error::Result;
use crate::heap::{Classes, Heap};
use crate::vars::{self, Choice};

/// Addresses each rank's file reserves in every mapping (no memory until allocated).
pub(super) const SPAN: usize = 1 << 36;

/// Bytes allocated to the file at a time, as the heap grows.
const CHUNK: usize = 16 << 20;

/// The longest file name exchanged.
const NAME: usize = 128;

/// Whether `RANKWISE_MPI_HEAP` lets tensors live in the shared heap: on unless it says `0`/
/// `off`/`false`/`no` (tensors then stay in each rank's own memory, where tools such as
/// AddressSanitizer or valgrind watch them). Another value stops the job at start.
pub(super) fn wanted() -> Result<bool> {
    Ok(vars::read("RANKWISE_MPI_HEAP", &SETTINGS)?.unwrap_or(true))
}

/// `RANKWISE_MPI_HEAP`'s settings.
pub(super) const SETTINGS: [Choice<bool>; 2] = [
    Choice {
        values: vars::ON,
        means: "tensors in a heap the ranks of a host share: the default",
        value: true,
    },
    Choice {
        values: vars::OFF,
        means: "tensors in each rank's own memory",
        value: false,
    },
];

/// This process's shared heap.
pub(super) struct Arena {
    base: NonNull<u8>,
    file: File,
    state: Mutex<State>,
}

struct State {
    classes: Classes,
    /// Bytes of the file allocated so far (from its start).
    allocated: usize,
}

// SAFETY: the mapping is process-wide and never unmapped; the allocator's state is behind a
// mutex, and a block is handed to one owner at a time.
unsafe impl Send for Arena {}
// SAFETY: as above.
unsafe impl Sync for Arena {}

impl Heap for Arena {
    fn alloc(&self, bytes: usize) -> Option<NonNull<u8>> {
        let class = Classes::class_of(bytes)?;
        let mut state = self.state.lock().ok()?;
        let State { classes, allocated } = &mut *state;
        let fd = self.file.as_raw_fd();
        let at = classes.take(class, SPAN, |end| {
            if end <= *allocated {
                return true;
            }
            let upto = end.next_multiple_of(CHUNK).min(SPAN);
            let (Ok(from), Ok(len)) = (
                libc::off_t::try_from(*allocated),
                libc::off_t::try_from(upto - *allocated),
            ) else {
                return false;
            };
            // SAFETY: `fd` is this arena's open file; `fallocate` only allocates its blocks.
            if unsafe { libc::fallocate(fd, 0, from, len) } != 0 {
                return false;
            }
            *allocated = upto;
            true
        })?;
        // SAFETY: `at` + the block lies within SPAN, all of it mapped at `base`.
        NonNull::new(unsafe { self.base.as_ptr().add(at) })
    }

    unsafe fn free(&self, block: NonNull<u8>, bytes: usize) {
        let (Some(class), Ok(mut state)) = (Classes::class_of(bytes), self.state.lock()) else {
            return;
        };
        let at = block.as_ptr() as usize - self.base.as_ptr() as usize;
        state.classes.give(class, at);
    }
}

/// Where the other ranks' heaps are mapped in this process: by world rank.
#[derive(Default)]
pub(super) struct Peers {
    bases: HashMap<usize, usize>,
}

impl Peers {
    /// Where world rank `rank`'s heap is mapped here, if it is.
    pub(super) fn base_of(&self, rank: usize) -> Option<*mut u8> {
        self.bases.get(&rank).map(|&b| b as *mut u8)
    }
}

/// What [`create`] came to on this host.
pub(super) enum Made {
    /// This rank's heap, and every heap of the host mapped here.
    Heaps(&'static Arena, Peers),
    /// The rank is alone on its host: nobody to share with.
    Alone,
    /// Some rank of the host could not make or map a heap (no `/dev/shm`, no address space):
    /// the host's tensors stay in the ranks' own memory.
    Failed,
}

/// Creates this process's heap and maps its host's others, collectively over `world` (every
/// rank calls it at the same point, at start).
pub(super) fn create(world: &SimpleCommunicator) -> Result<Made> {
    let host = world.split_shared(0);
    let n = host.size() as usize;
    let me = world.rank() as usize;
    // Every rank of the host decides alike: alone on its host, a rank has nobody to share with.
    if n < 2 {
        return Ok(Made::Alone);
    }
    let own = make(me);
    // Every rank of the host: its world rank and its file's name (empty if it has none).
    let mut mine = [0u8; NAME + 8];
    mine[..8].copy_from_slice(&(me as u64).to_le_bytes());
    if let Some((_, path)) = &own {
        let b = path.as_bytes();
        if b.len() <= NAME {
            mine[8..8 + b.len()].copy_from_slice(b);
        }
    }
    let mut all = vec![0u8; n * (NAME + 8)];
    let counts = vec![raw::count(NAME + 8)?; n];
    let displs: Vec<_> = (0..n)
        .map(|j| raw::count(j * (NAME + 8)))
        .collect::<Result<_>>()?;
    raw::poll_allgatherv_bytes(&host, &mine, &mut all, &counts, &displs)?;
    let mut peers = Peers::default();
    let mut ok = own.is_some();
    for entry in all.chunks(NAME + 8) {
        let mut rank = [0u8; 8];
        rank.copy_from_slice(&entry[..8]);
        let rank = u64::from_le_bytes(rank) as usize;
        let name = &entry[8..];
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(NAME)];
        match (rank == me, &own) {
            (true, Some((arena, _))) => {
                peers.bases.insert(rank, arena.base.as_ptr() as usize);
            }
            _ => match std::str::from_utf8(name).ok().and_then(map_peer) {
                Some(base) => _ = peers.bases.insert(rank, base),
                None => ok = false,
            },
        }
    }
    // All or none: one flag per rank of the host.
    let mut flags = vec![0; n];
    raw::poll_allgather_int(&host, i32::from(ok), &mut flags)?;
    if let Some((_, path)) = &own {
        // Everyone has mapped it (or given up): the name is no longer needed.
        let _ = std::fs::remove_file(path);
    }
    match own {
        Some((arena, _)) if flags.iter().all(|&f| f != 0) => Ok(Made::Heaps(arena, peers)),
        _ => Ok(Made::Failed),
    }
}

/// This process's file and its mapping, leaked for the process's life.
fn make(rank: usize) -> Option<(&'static Arena, String)> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let path = format!(
        "/dev/shm/rankwise-heap-{}-{rank}-{stamp}",
        std::process::id()
    );
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .ok()?;
    let mapped = file.set_len(SPAN as u64).ok().and_then(|()| map(&file));
    let Some(base) = mapped else {
        let _ = std::fs::remove_file(&path);
        return None;
    };
    let arena = Box::leak(Box::new(Arena {
        base,
        file,
        state: Mutex::new(State {
            classes: Classes::new(),
            allocated: 0,
        }),
    }));
    Some((arena, path))
}

/// A peer's file, mapped here (its address), if it can be.
fn map_peer(path: &str) -> Option<usize> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .ok()?;
    // The mapping outlives the file handle.
    map(&file).map(|b| b.as_ptr() as usize)
}

/// `file`'s first SPAN bytes, mapped shared for reading and writing.
fn map(file: &File) -> Option<NonNull<u8>> {
    // SAFETY: a new shared mapping of an open file; nothing else is at the address the kernel
    // picks. It is never unmapped.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            SPAN,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    NonNull::new(p.cast())
}
