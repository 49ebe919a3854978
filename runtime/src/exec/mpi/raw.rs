//! The result layer over the MPI C API (`mpi::ffi`, rsmpi's raw bindings): each non-blocking
//! call the backend uses, taking element counts and raw buffers, checking the return code, and
//! returning its request. Nothing here knows about rankwise's ops; `steps` does.
//!
//! Every data communicator has `MPI_ERRORS_RETURN` set (see `Comm::new`), so a failure is a
//! code to turn into an error, not a process killed inside the library.

use std::ffi::{c_int, c_void};

use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;

use crate::DType;
use crate::error::{Error, Result};

/// A pending non-blocking operation.
pub(super) type Request = ffi::MPI_Request;

/// The MPI datatype that moves elements of `dtype`: an unsigned integer of the same size.
/// Reductions never run inside MPI (they run in rankwise's kernels, in rank order), so only the
/// size matters; f16 and bf16 travel as 16-bit words.
pub(super) fn datatype(dtype: DType) -> ffi::MPI_Datatype {
    // SAFETY: reading rsmpi's datatype handles, initialised by its C shim before `main`.
    unsafe {
        match dtype.size() {
            1 => ffi::RSMPI_UINT8_T,
            2 => ffi::RSMPI_UINT16_T,
            4 => ffi::RSMPI_UINT32_T,
            _ => ffi::RSMPI_UINT64_T,
        }
    }
}

/// An element count as MPI takes it.
pub(super) fn count(n: usize) -> Result<c_int> {
    c_int::try_from(n).map_err(|_| Error::Backend {
        backend: "mpi",
        detail: format!(
            "a message of {n} elements is more than MPI's count type can address ({}); split \
             the tensor",
            c_int::MAX
        ),
    })
}

/// The error for MPI return code `code` from `what`.
pub(super) fn error(code: c_int, what: &str) -> Error {
    let mut buf = vec![0u8; 512];
    let mut len: c_int = 0;
    // SAFETY: `buf` has room for MPI_MAX_ERROR_STRING (256 in OpenMPI and MPICH) bytes.
    let ok = unsafe { ffi::MPI_Error_string(code, buf.as_mut_ptr().cast(), &mut len) };
    let text = if ok == 0 {
        String::from_utf8_lossy(&buf[..len.clamp(0, 512) as usize]).into_owned()
    } else {
        format!("error code {code}")
    };
    Error::Backend {
        backend: "mpi",
        detail: format!("{what} failed: {text}"),
    }
}

fn check(code: c_int, what: &str) -> Result<()> {
    if code == ffi::MPI_SUCCESS as c_int {
        Ok(())
    } else {
        Err(error(code, what))
    }
}

/// A communicator that returns errors instead of aborting.
pub(super) struct Comm {
    comm: SimpleCommunicator,
}

impl Comm {
    /// Takes over `comm`, switching it to `MPI_ERRORS_RETURN`.
    pub(super) fn new(comm: SimpleCommunicator) -> Result<Self> {
        // SAFETY: `comm` is a valid communicator; the error handler is a predefined one.
        let code = unsafe { ffi::MPI_Comm_set_errhandler(comm.as_raw(), ffi::RSMPI_ERRORS_RETURN) };
        check(code, "MPI_Comm_set_errhandler")?;
        Ok(Comm { comm })
    }

    fn raw(&self) -> ffi::MPI_Comm {
        self.comm.as_raw()
    }
}

/// Why the functions below are `unsafe`: each starts a transfer that reads or writes raw
/// buffers after it returns.
///
/// # Safety (all posting functions)
/// Every pointer must be valid for the bytes its count and datatype imply (`count × size of
/// the datatype`; for the `v` variants, every count and displacement) and stay valid, and not
/// be accessed otherwise, until the returned request has completed. Counts and roots must be
/// the same on every member where MPI requires it.
macro_rules! post {
    ($what:expr, $call:expr) => {{
        // SAFETY: reading rsmpi's null-request handle, initialised before `main`.
        let mut req: Request = unsafe { ffi::RSMPI_REQUEST_NULL };
        let code = $call(&mut req);
        check(code, $what).map(|()| req)
    }};
}

/// How a send completes.
#[derive(Clone, Copy)]
pub(super) enum SendMode {
    /// `MPI_Issend`: once the receiver has started receiving (rendezvous, as the verifier's
    /// model of a blocking send).
    Rendezvous,
    /// `MPI_Isend`: MPI may buffer it (collectives' own messages need no rendezvous).
    Standard,
}

/// A send of `n` elements to `dest` with `tag`, completing as `mode` says.
///
/// # Safety
/// See the module's posting contract.
pub(super) unsafe fn isend(
    mode: SendMode,
    buf: *const u8,
    n: c_int,
    ty: ffi::MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: &Comm,
) -> Result<Request> {
    let buf = buf as *const c_void;
    match mode {
        // SAFETY: the caller's contract.
        SendMode::Rendezvous => post!("MPI_Issend", |r| unsafe {
            ffi::MPI_Issend(buf, n, ty, dest, tag, comm.raw(), r)
        }),
        // SAFETY: the caller's contract.
        SendMode::Standard => post!("MPI_Isend", |r| unsafe {
            ffi::MPI_Isend(buf, n, ty, dest, tag, comm.raw(), r)
        }),
    }
}

/// `MPI_Irecv` of at most `n` elements from `src`, with `tag` (`None`: any tag).
///
/// # Safety
/// See the module's posting contract.
pub(super) unsafe fn irecv(
    buf: *mut u8,
    n: c_int,
    ty: ffi::MPI_Datatype,
    src: c_int,
    tag: Option<c_int>,
    comm: &Comm,
) -> Result<Request> {
    // SAFETY: reading rsmpi's any-tag constant, initialised before `main`.
    let tag = tag.unwrap_or(unsafe { ffi::RSMPI_ANY_TAG });
    // SAFETY: the caller's contract.
    post!("MPI_Irecv", |r| unsafe {
        ffi::MPI_Irecv(buf as *mut c_void, n, ty, src, tag, comm.raw(), r)
    })
}

/// `MPI_Ibarrier`.
pub(super) fn ibarrier(comm: &Comm) -> Result<Request> {
    // SAFETY: no buffers.
    post!("MPI_Ibarrier", |r| unsafe {
        ffi::MPI_Ibarrier(comm.raw(), r)
    })
}

/// `MPI_Ibcast` of `n` elements from `root`.
///
/// # Safety
/// See the module's posting contract.
pub(super) unsafe fn ibcast(
    buf: *mut u8,
    n: c_int,
    ty: ffi::MPI_Datatype,
    root: c_int,
    comm: &Comm,
) -> Result<Request> {
    // SAFETY: the caller's contract.
    post!("MPI_Ibcast", |r| unsafe {
        ffi::MPI_Ibcast(buf as *mut c_void, n, ty, root, comm.raw(), r)
    })
}

/// The collectives whose every member sends and receives `n` elements per member (the root's
/// buffers alone count for the rooted ones): one shape of call, so one definition.
macro_rules! symmetric {
    ($($(#[$doc:meta])* $name:ident => $ffi:ident $(($root:ident))?;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// See the module's posting contract.
        pub(super) unsafe fn $name(
            send: *const u8,
            recv: *mut u8,
            n: c_int,
            ty: ffi::MPI_Datatype,
            $($root: c_int,)?
            comm: &Comm,
        ) -> Result<Request> {
            // SAFETY: the caller's contract.
            post!(stringify!($ffi), |r| unsafe {
                ffi::$ffi(
                    send as *const c_void,
                    n,
                    ty,
                    recv as *mut c_void,
                    n,
                    ty,
                    $($root,)?
                    comm.raw(),
                    r,
                )
            })
        }
    )*};
}

symmetric! {
    /// `MPI_Iallgather` of `n` elements per member.
    iallgather => MPI_Iallgather;
    /// `MPI_Igather` of `n` elements per member to `root` (`recv` is read only at the root).
    igather => MPI_Igather(root);
    /// `MPI_Iscatter` of `n` elements per member from `root` (`send` is read only at the root).
    iscatter => MPI_Iscatter(root);
    /// `MPI_Ialltoall` of `n` elements per pair.
    ialltoall => MPI_Ialltoall;
}

/// `MPI_Iallgatherv`: member `j` contributes `counts[j]` elements, placed at `displs[j]`.
///
/// # Safety
/// See the module's posting contract; `counts` and `displs` too must live until completion.
pub(super) unsafe fn iallgatherv(
    send: *const u8,
    n: c_int,
    recv: *mut u8,
    counts: &[c_int],
    displs: &[c_int],
    ty: ffi::MPI_Datatype,
    comm: &Comm,
) -> Result<Request> {
    // SAFETY: the caller's contract.
    post!("MPI_Iallgatherv", |r| unsafe {
        ffi::MPI_Iallgatherv(
            send as *const c_void,
            n,
            ty,
            recv as *mut c_void,
            counts.as_ptr(),
            displs.as_ptr(),
            ty,
            comm.raw(),
            r,
        )
    })
}

/// `MPI_Igatherv` to `root`: member `j` contributes `counts[j]` elements at `displs[j]`.
///
/// # Safety
/// See the module's posting contract; `counts` and `displs` too must live until completion.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn igatherv(
    send: *const u8,
    n: c_int,
    recv: *mut u8,
    counts: &[c_int],
    displs: &[c_int],
    ty: ffi::MPI_Datatype,
    root: c_int,
    comm: &Comm,
) -> Result<Request> {
    // SAFETY: the caller's contract.
    post!("MPI_Igatherv", |r| unsafe {
        ffi::MPI_Igatherv(
            send as *const c_void,
            n,
            ty,
            recv as *mut c_void,
            counts.as_ptr(),
            displs.as_ptr(),
            ty,
            root,
            comm.raw(),
            r,
        )
    })
}

/// `MPI_Ialltoallv` with per-member counts and displacements (in elements).
///
/// # Safety
/// See the module's posting contract; the four arrays too must live until completion.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn ialltoallv(
    send: *const u8,
    send_counts: &[c_int],
    send_displs: &[c_int],
    recv: *mut u8,
    recv_counts: &[c_int],
    recv_displs: &[c_int],
    ty: ffi::MPI_Datatype,
    comm: &Comm,
) -> Result<Request> {
    // SAFETY: the caller's contract.
    post!("MPI_Ialltoallv", |r| unsafe {
        ffi::MPI_Ialltoallv(
            send as *const c_void,
            send_counts.as_ptr(),
            send_displs.as_ptr(),
            ty,
            recv as *mut c_void,
            recv_counts.as_ptr(),
            recv_displs.as_ptr(),
            ty,
            comm.raw(),
            r,
        )
    })
}

/// Whether every one of the `n` members of `comm` runs on this process's host (members that
/// share memory, by `MPI_Comm_split_type`). Collective over `comm`.
pub(super) fn on_one_host(comm: &Comm, n: usize) -> Result<bool> {
    Ok(ranks_on_host(comm)? == n)
}

/// How many members of `comm` run on this process's host (this one included; by
/// `MPI_Comm_split_type`). Collective over `comm`.
pub(super) fn ranks_on_host(comm: &Comm) -> Result<usize> {
    // SAFETY: reading rsmpi's null handles, initialised before `main`.
    let mut local: ffi::MPI_Comm = unsafe { ffi::RSMPI_COMM_NULL };
    // SAFETY: `comm` is a valid communicator; `local` receives a new one, freed below.
    let code = unsafe {
        ffi::MPI_Comm_split_type(
            comm.raw(),
            ffi::RSMPI_COMM_TYPE_SHARED,
            0,
            ffi::RSMPI_INFO_NULL,
            &mut local,
        )
    };
    check(code, "MPI_Comm_split_type")?;
    let mut size: c_int = 0;
    // SAFETY: `local` is the communicator just created.
    let code = unsafe { ffi::MPI_Comm_size(local, &mut size) };
    let sized = check(code, "MPI_Comm_size");
    // SAFETY: as above; freeing it is local.
    let code = unsafe { ffi::MPI_Comm_free(&mut local) };
    let freed = check(code, "MPI_Comm_free");
    sized.and(freed)?;
    usize::try_from(size)
        .map_err(|_| Error::Internal(format!("MPI_Comm_size gave {size} ranks on this host")))
}

/// `MPI_Win_allocate_shared` of `bytes` per member on `comm` (of `n` members, all on this
/// host): the base address of every member's part, in member order. The window is never freed
/// (see `shm::Window`). Collective over `comm`.
pub(super) fn allocate_shared(comm: &Comm, bytes: usize, n: usize) -> Result<Vec<*mut u8>> {
    let size = ffi::MPI_Aint::try_from(bytes)
        .map_err(|_| Error::Internal(format!("a shared window of {bytes} bytes")))?;
    let mut base: *mut c_void = std::ptr::null_mut();
    // SAFETY: reading rsmpi's null handle, initialised before `main`.
    let mut win: ffi::MPI_Win = unsafe { ffi::RSMPI_WIN_NULL };
    // SAFETY: `comm` is valid; MPI writes the base address and the window handle.
    let code = unsafe {
        ffi::MPI_Win_allocate_shared(
            size,
            1,
            ffi::RSMPI_INFO_NULL,
            comm.raw(),
            &mut base as *mut *mut c_void as *mut c_void,
            &mut win,
        )
    };
    check(code, "MPI_Win_allocate_shared")?;
    (0..n)
        .map(|j| {
            let (mut got, mut unit, mut at): (ffi::MPI_Aint, c_int, *mut c_void) =
                (0, 0, std::ptr::null_mut());
            let rank = count(j)?;
            // SAFETY: `win` is the window just created; `j` is a rank of its group.
            let code = unsafe {
                ffi::MPI_Win_shared_query(
                    win,
                    rank,
                    &mut got,
                    &mut unit,
                    &mut at as *mut *mut c_void as *mut c_void,
                )
            };
            check(code, "MPI_Win_shared_query")?;
            if usize::try_from(got).ok() != Some(bytes) {
                return Err(Error::Internal(format!(
                    "member {j}'s part of a shared window has {got} bytes, not {bytes}"
                )));
            }
            Ok(at as *mut u8)
        })
        .collect()
}

/// `MPI_Barrier` on `comm`.
pub(super) fn barrier(comm: &Comm) -> Result<()> {
    // SAFETY: `comm` is a valid communicator.
    let code = unsafe { ffi::MPI_Barrier(comm.raw()) };
    check(code, "MPI_Barrier")
}

/// Whether `req` is the null request (MPI sets completed requests to it).
pub(super) fn is_null(req: Request) -> bool {
    // SAFETY: reading rsmpi's null-request handle, initialised before `main`.
    req == unsafe { ffi::RSMPI_REQUEST_NULL }
}

/// What a completed receive reports.
#[derive(Clone, Copy, Debug)]
pub(super) struct Received {
    /// The sender's tag.
    pub tag: c_int,
    /// Elements received, or `None` if the message was longer than the buffer.
    pub count: Option<usize>,
}

/// Waits for requests, reusing its arrays across calls (a batch of small calls waits many
/// times, and allocating three arrays per wait showed in profiles).
#[derive(Default)]
pub(super) struct Waiter {
    indices: Vec<c_int>,
    statuses: Vec<ffi::MPI_Status>,
    done: Vec<(usize, Received)>,
}

impl Waiter {
    /// Waits until at least one of `reqs` completes; returns the indices that did (their
    /// entries become `MPI_REQUEST_NULL`), with the receive status of each (none when no
    /// request is active).
    ///
    /// It polls `MPI_Testsome` and never blocks in `MPI_Waitsome`. Open MPI 4.1's Waitsome
    /// hangs one wake-up object, on its own stack, on every pending request, and counts it down
    /// once per completion. When two threads complete two of those requests at once (here the
    /// monitor's thread, which polls its own exchange, and this one), the second countdown can
    /// land after Waitsome has returned: one word of whatever the caller's stack holds next is
    /// decremented. In our wait loop that word can be a loop counter, and then one completion
    /// is counted twice: the likely cause of the rare CI failures "header message … completed
    /// although it was not awaited", "shorter (0 bytes)" and "no request was outstanding".
    /// `docs/decisions.md` has the reproduction. Testsome hangs nothing on a request.
    ///
    /// Like Waitsome, it leaves giving the core up to MPI's progress engine (which a Testsome
    /// that finds nothing runs), and yields only every 64 empty polls. Yielding after every
    /// empty poll when ranks outnumber cores doubled the give-ups: a 64 KiB broadcast at world
    /// 4 without shared memory went from 1.00–1.09× raw MPI to 1.26–1.35×.
    pub(super) fn wait_some(
        &mut self,
        reqs: &mut [Request],
        ty_of: impl Fn(usize) -> ffi::MPI_Datatype,
    ) -> Result<&[(usize, Received)]> {
        let mut idle = 0u32;
        while self.poll(reqs, &ty_of)? == Some(0) {
            idle = idle.wrapping_add(1);
            if idle.is_multiple_of(64) {
                std::thread::yield_now();
            }
        }
        Ok(&self.done)
    }

    /// [`Self::wait_some`] without waiting: the requests that completed, perhaps none.
    pub(super) fn test_some(
        &mut self,
        reqs: &mut [Request],
        ty_of: impl Fn(usize) -> ffi::MPI_Datatype,
    ) -> Result<&[(usize, Received)]> {
        self.poll(reqs, &ty_of)?;
        Ok(&self.done)
    }

    /// One `MPI_Testsome`: its completions into `done`, and how many there were (`None` when
    /// no request is active, which MPI reports as `MPI_UNDEFINED`).
    fn poll(
        &mut self,
        reqs: &mut [Request],
        ty_of: &impl Fn(usize) -> ffi::MPI_Datatype,
    ) -> Result<Option<usize>> {
        let n = self.arrays(reqs.len(), false)?;
        let mut done: c_int = 0;
        // SAFETY: the arrays have at least `reqs.len()` entries, as MPI_Testsome needs.
        let code = unsafe {
            ffi::MPI_Testsome(
                n,
                reqs.as_mut_ptr(),
                &mut done,
                self.indices.as_mut_ptr(),
                self.statuses.as_mut_ptr(),
            )
        };
        // (MPI_UNDEFINED is negative.)
        let active = done >= 0;
        let count = self
            .collect(code, "MPI_Testsome", done.max(0) as usize, ty_of)?
            .len();
        Ok(active.then_some(count))
    }

    /// Whether every one of `reqs` has completed, without waiting; when so, returns each index
    /// with its receive status (as [`Self::wait_all`]), and otherwise leaves them all posted.
    pub(super) fn test_all(
        &mut self,
        reqs: &mut [Request],
        ty_of: impl Fn(usize) -> ffi::MPI_Datatype,
    ) -> Result<Option<&[(usize, Received)]>> {
        let n = self.arrays(reqs.len(), true)?;
        let mut flag: c_int = 0;
        // SAFETY: `statuses` has `reqs.len()` entries, as MPI_Testall needs.
        let code = unsafe {
            ffi::MPI_Testall(n, reqs.as_mut_ptr(), &mut flag, self.statuses.as_mut_ptr())
        };
        if flag == 0 && code == ffi::MPI_SUCCESS as c_int {
            return Ok(None);
        }
        self.collect(code, "MPI_Testall", reqs.len(), ty_of)
            .map(Some)
    }

    /// Waits until every one of `reqs` completes (one call where a loop of [`Self::wait_some`]
    /// would make several); returns each index with its receive status.
    pub(super) fn wait_all(
        &mut self,
        reqs: &mut [Request],
        ty_of: impl Fn(usize) -> ffi::MPI_Datatype,
    ) -> Result<&[(usize, Received)]> {
        let n = self.arrays(reqs.len(), true)?;
        // SAFETY: `statuses` has `reqs.len()` entries, as MPI_Waitall needs.
        let code = unsafe { ffi::MPI_Waitall(n, reqs.as_mut_ptr(), self.statuses.as_mut_ptr()) };
        self.collect(code, "MPI_Waitall", reqs.len(), ty_of)
    }

    /// Sizes the arrays for a wait on `reqs` requests (as MPI's count); `all`: the indices are
    /// every request's, in order (MPI's all-or-nothing calls report no indices).
    fn arrays(&mut self, reqs: usize, all: bool) -> Result<c_int> {
        let n = count(reqs)?;
        if all {
            self.indices.clear();
            self.indices.extend(0..n);
        } else {
            self.indices.resize(reqs, 0);
        }
        // SAFETY: MPI_Status is plain C data; zeroed is a valid (unused) value.
        self.statuses.resize(reqs, unsafe { std::mem::zeroed() });
        Ok(n)
    }

    /// The first `done` completions that a wait reported in `indices`/`statuses`, or its error
    /// (a truncated receive is no error here: its count is `None`, for the caller to name).
    fn collect(
        &mut self,
        code: c_int,
        call: &str,
        done: usize,
        ty_of: impl Fn(usize) -> ffi::MPI_Datatype,
    ) -> Result<&[(usize, Received)]> {
        let in_status = code == ffi::MPI_ERR_IN_STATUS as c_int;
        if code != ffi::MPI_SUCCESS as c_int && !in_status {
            return Err(error(code, call));
        }
        self.done.clear();
        for k in 0..done {
            let i = self.indices[k] as usize;
            let st = &self.statuses[k];
            let truncated = in_status && st.MPI_ERROR == ffi::MPI_ERR_TRUNCATE as c_int;
            // Waitall leaves MPI_ERR_PENDING in requests it did not complete after another failed.
            if in_status && !truncated && st.MPI_ERROR != ffi::MPI_SUCCESS as c_int {
                return Err(error(st.MPI_ERROR, "a transfer"));
            }
            let count = if truncated {
                None
            } else {
                let mut c: c_int = 0;
                // SAFETY: `st` is the status MPI filled for this request.
                let code = unsafe { ffi::MPI_Get_count(st, ty_of(i), &mut c) };
                (code == ffi::MPI_SUCCESS as c_int && c >= 0).then_some(c as usize)
            };
            self.done.push((
                i,
                Received {
                    tag: st.MPI_TAG,
                    count,
                },
            ));
        }
        Ok(&self.done)
    }
}

/// The largest tag `comm` allows (at least 32767, by the standard).
pub(super) fn tag_ub(comm: &SimpleCommunicator) -> c_int {
    let mut value: *mut c_int = std::ptr::null_mut();
    let mut flag: c_int = 0;
    // SAFETY: MPI_TAG_UB's attribute value is a pointer to an int owned by MPI, written into
    // `value` when `flag` is set.
    let code = unsafe {
        ffi::MPI_Comm_get_attr(
            comm.as_raw(),
            ffi::MPI_TAG_UB as c_int,
            (&mut value as *mut *mut c_int).cast(),
            &mut flag,
        )
    };
    if code == ffi::MPI_SUCCESS as c_int && flag != 0 && !value.is_null() {
        // SAFETY: set by MPI above.
        unsafe { *value }.max(32767)
    } else {
        32767
    }
}

/// The tag under which the communicator for (`members`, `ordinal`) is created: the same on
/// every member, and — being a 64-bit hash folded into the tag range — different for different
/// groups but by a chance of one in `tag_ub`.
pub(super) fn creation_tag(members: &[usize], ordinal: u32, tag_ub: c_int) -> c_int {
    // FNV-1a: stable across processes and builds (std's hasher is randomly seeded).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for x in members
        .iter()
        .map(|&m| m as u64)
        .chain([u64::MAX, u64::from(ordinal)])
    {
        for b in x.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    (h % tag_ub.max(1) as u64) as c_int
}

/// `MPI_Comm_create_group` of `members` (ranks of `parent`), called by the members only.
pub(super) fn create_group(
    parent: &SimpleCommunicator,
    members: &[usize],
    tag: c_int,
) -> Result<SimpleCommunicator> {
    use mpi::topology::{Communicator, Group};
    let ranks = members
        .iter()
        .map(|&m| count(m))
        .collect::<Result<Vec<c_int>>>()?;
    let group = parent.group().include(&ranks);
    parent
        .split_by_subgroup_with_tag(&group, tag)
        .ok_or_else(|| Error::Backend {
            backend: "mpi",
            detail: format!("MPI_Comm_create_group for ranks {members:?} returned no communicator"),
        })
}

/// Waits for `req` by polling with short sleeps (for the monitor thread, which must not take a
/// core from the ranks while its peers are busy).
fn poll(mut req: Request, what: &str) -> Result<()> {
    loop {
        let mut flag: c_int = 0;
        // SAFETY: `req` is a live request; the status is not needed.
        let code = unsafe { ffi::MPI_Test(&mut req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
        check(code, what)?;
        if flag != 0 {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_micros(500));
    }
}

/// Every member's `value`, in rank order, into `out` (one entry per member).
pub(super) fn poll_allgather_int(
    comm: &SimpleCommunicator,
    value: c_int,
    out: &mut [c_int],
) -> Result<()> {
    // SAFETY: reading rsmpi's null-request handle, initialised before `main`.
    let mut req: Request = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: `value` and `out` (one int per member) live until `poll` returns.
    let code = unsafe {
        ffi::MPI_Iallgather(
            (&value as *const c_int).cast(),
            1,
            ffi::RSMPI_INT32_T,
            out.as_mut_ptr().cast(),
            1,
            ffi::RSMPI_INT32_T,
            comm.as_raw(),
            &mut req,
        )
    };
    check(code, "MPI_Iallgather")?;
    poll(req, "MPI_Iallgather")
}

/// Every member's bytes into `out` at `displs`, with lengths `counts`.
pub(super) fn poll_allgatherv_bytes(
    comm: &SimpleCommunicator,
    mine: &[u8],
    out: &mut [u8],
    counts: &[c_int],
    displs: &[c_int],
) -> Result<()> {
    // SAFETY: reading rsmpi's null-request handle, initialised before `main`.
    let mut req: Request = unsafe { ffi::RSMPI_REQUEST_NULL };
    let n = count(mine.len())?;
    // SAFETY: the buffers and arrays live until `poll` returns; `out` holds the sum of
    // `counts`, as the caller sized it.
    let code = unsafe {
        ffi::MPI_Iallgatherv(
            mine.as_ptr().cast(),
            n,
            ffi::RSMPI_UINT8_T,
            out.as_mut_ptr().cast(),
            counts.as_ptr(),
            displs.as_ptr(),
            ffi::RSMPI_UINT8_T,
            comm.as_raw(),
            &mut req,
        )
    };
    check(code, "MPI_Iallgatherv")?;
    poll(req, "MPI_Iallgatherv")
}

#[cfg(test)]
mod tests {
    /// The backend's sources, as compiled.
    const SOURCES: [(&str, &str); 10] = [
        ("arena.rs", include_str!("arena.rs")),
        ("drive.rs", include_str!("drive.rs")),
        ("eager.rs", include_str!("eager.rs")),
        ("lanes.rs", include_str!("lanes.rs")),
        ("launch.rs", include_str!("launch.rs")),
        ("mod.rs", include_str!("mod.rs")),
        ("monitor.rs", include_str!("monitor.rs")),
        ("raw.rs", include_str!("raw.rs")),
        ("shm.rs", include_str!("shm.rs")),
        ("steps.rs", include_str!("steps.rs")),
    ];

    /// No MPI wait that hangs one wake-up object on several requests and counts it down by one
    /// (`MPI_Waitsome`, `MPI_Waitany`): with the monitor thread in MPI at the same time, Open
    /// MPI 4.1 can count it down after the wait returned, on the caller's stack (see
    /// `Waiter::wait_some`). Named in prose (between backticks) they are fine.
    #[test]
    fn no_wait_counts_down_a_wake_up_shared_by_several_requests() {
        for (file, text) in SOURCES {
            for call in ["MPI_Waitsome", "MPI_Waitany", "wait_any("] {
                for (at, _) in text.match_indices(call) {
                    let quoted = text[..at].ends_with('`');
                    let this_test = file == "raw.rs" && text[..at].ends_with('"');
                    assert!(
                        quoted || this_test,
                        "{file} calls {call} (byte {at}): wait by polling (`Waiter::wait_some`)"
                    );
                }
            }
        }
    }
}
