//! Execution backends behind one trait.
//!
//! A [`Ctx`](crate::Ctx) validates each call, describes it as an [`Op`] (an
//! [`OpDesc`] plus raw buffers), and hands batches of ops to its backend.
//! Backends move the bytes; they never see `Tensor` or user types.

use crate::error::{Error, Result};
use crate::model::{CallSite, GroupId, OpDesc, WorldId};
use crate::tensor::{Device, DeviceMemory};

pub(crate) mod copy;
/// The MPI backend's shared-memory lanes need no MPI: built for tests without it too, so that
/// Miri (which cannot call MPI) checks them.
#[cfg(all(test, not(feature = "mpi")))]
#[path = "mpi/lanes.rs"]
#[allow(dead_code)]
mod lanes;
#[cfg(feature = "local")]
pub(crate) mod local;
#[cfg(feature = "mpi")]
pub(crate) mod mpi;
pub(crate) mod nccl;

/// Bytes of a cache line on the CPUs rankwise targets: what tensors, slices and streamed copies
/// align to, and the stride of a prefetch.
pub(crate) const CACHE_LINE: usize = 64;

/// Tells a backend that waits outside rankwise's own world state (NCCL on GPUs, ranks as
/// threads of one process) that another rank failed: for rank `r`, the error to report, once
/// there is one.
pub(crate) type StopSignal = std::sync::Arc<dyn Fn(usize) -> Option<Error> + Send + Sync>;

/// A raw view of a tensor's storage, as a backend sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Buf {
    /// First byte. Null when the op has no such buffer on this rank.
    pub ptr: *mut u8,
    /// Length in elements.
    pub len: usize,
    /// Whether `ptr` is an address on the backend's device (see [`Backend::alloc_device`])
    /// rather than host memory. Only the GPU backend needs to tell them apart: the emulation's
    /// device memory is host memory, and the other backends have no device.
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    pub on_device: bool,
}

impl Buf {
    /// No buffer (e.g. the output of `gather` on a non-root rank).
    pub(crate) const NONE: Buf = Buf {
        ptr: std::ptr::null_mut(),
        len: 0,
        on_device: false,
    };

    /// Host memory of `len` elements at `ptr`.
    pub(crate) fn host(ptr: *mut u8, len: usize) -> Buf {
        Buf {
            ptr,
            len,
            on_device: false,
        }
    }

    /// Whether this is [`Buf::NONE`].
    pub(crate) fn is_none(&self) -> bool {
        self.ptr.is_null()
    }
}

/// What `Ctx` tells a backend about a batch it runs (see [`Backend::execute_batch`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BatchMark {
    /// This batch's number on this rank: each batch run gets the next one.
    pub serial: u64,
    /// The number of the batch this one repeats exactly, if it does: the same ops in the same
    /// order, with equal descriptions and equal buffer addresses (the pointers are this
    /// batch's own, taken from its borrowed tensors).
    pub repeats: Option<u64>,
}

/// One validated communication call: what it is, and the buffers it reads and writes.
///
/// `input` is read, `output` is written; in-place calls (`broadcast`, `reduce`, `all_reduce`)
/// set both to the same buffer. The buffers stay borrowed by the caller (through the `Ctx` or
/// `Batch` method that built the op) until the backend returns.
#[derive(Debug)]
pub(crate) struct Op {
    /// The call as data.
    pub desc: OpDesc,
    /// Buffer read by this rank's part of the call.
    pub input: Buf,
    /// Buffer written by this rank's part of the call.
    pub output: Buf,
}

// SAFETY: an `Op` is only created by `Ctx`/`Batch` methods from live `&Tensor`/`&mut Tensor`
// borrows that outlast the backend call, and backends touch the buffers only during that call.
// The pointers are plain addresses; sharing them between rank threads is what the local
// backend's protocol (see `exec::local`) is built to make sound.
unsafe impl Send for Op {}
// SAFETY: see `Send`; shared access to an `Op` only reads its fields.
unsafe impl Sync for Op {}

/// What every backend provides to a [`Ctx`](crate::Ctx).
///
/// Crate-private: backends live in this crate, one module each behind a feature, so the
/// contract below binds only code reviewed here.
///
/// # Safety
///
/// `execute` receives raw buffers. An implementation must, for every op: read at most
/// `input.len` elements of `desc.dtype` from `input.ptr` and write at most `output.len` elements
/// to `output.ptr`, only before `execute` returns;
/// never touch a [`Buf::NONE`]; and, before copying data that another rank sized, check that
/// the sizes its communicator implies fit these lengths (ranks validate their calls only
/// against their own view, so a peer's buffer may be smaller than this rank expects).
pub(crate) unsafe trait Backend: Send {
    /// Short name for messages (`"local"`, `"mpi"`, `"nccl"`).
    fn name(&self) -> &'static str;

    /// The world this backend's rank belongs to: the same on every rank of it, different from
    /// every other world in the process (see [`WorldId`]).
    fn world_id(&self) -> WorldId;

    /// Registers the communicator for a sorted, validated member list, the `ordinal`-th group
    /// with exactly these members that this rank creates. Members that create the same groups in
    /// the same order get the same id.
    fn create_group(&mut self, members: &[usize], ordinal: u32) -> Result<GroupId>;

    /// The device the tensors a `Ctx` makes live on (the host unless the backend has one).
    fn device(&self) -> Device {
        Device::Host
    }

    /// `bytes` of memory on [`Backend::device`], for a tensor a `Ctx` makes; `None` for
    /// backends whose tensors live on the host. Ops may then carry buffers with
    /// [`Buf::on_device`] set, which only this backend may dereference.
    fn alloc_device(&mut self, bytes: usize) -> Option<Result<Box<dyn DeviceMemory>>> {
        let _ = bytes;
        None
    }

    /// Whether this backend skips run-time agreement that a `#[rankwise::program]` proof
    /// makes unnecessary (for the calls it runs while `guard::proven` says so); the guard then
    /// makes every rank confirm, at the function's entry, that all run the same proof. The
    /// local backend's checks cost no round trip, so it keeps them all.
    fn trusts_proofs(&self) -> bool {
        false
    }

    /// Whether this backend has reduction `op` at all (for the dtypes it is defined on).
    fn supports(&self, op: crate::ReduceOp) -> bool {
        let _ = op;
        true
    }

    /// Runs a batch of validated ops (a single call is a batch of one) and returns when all of
    /// them have completed on this rank. Ops on different communicators or peers may complete in
    /// any order; ops on one communicator or one peer pair run in the order given. Posted ops
    /// (see [`Backend::post`]) progress meanwhile, and come first on their peer pair. A backend
    /// may reorder the ops but leaves each op as it is: `Ctx` reuses a lone call's op for the
    /// next call that repeats it.
    fn execute(&mut self, ops: &mut [Op]) -> Result<()>;

    /// [`Backend::execute`] for the ops of a [`Batch`](crate::Batch), which `Ctx` numbers and,
    /// when every call in it repeated the batch before it exactly, says so (`mark`): a backend
    /// that derives anything from a batch's descriptions (a plan, tables) may then keep what it
    /// derived from that batch instead of deriving it again.
    fn execute_batch(&mut self, ops: &mut [Op], mark: BatchMark) -> Result<()> {
        let _ = mark;
        self.execute(ops)
    }

    /// Posts a validated send or receive (`isend`/`irecv`) on a buffer the backend owns from
    /// now on, and returns at once. The op is matched in order with this rank's other messages
    /// to or from the same peer, and progresses during every later `execute`, `wait` and
    /// `drain` of this rank. Backends without non-blocking messages keep the default: an `Err`
    /// before anything is posted.
    fn post(&mut self, op: PostedOp) -> Result<Ticket> {
        Err(Error::Backend {
            backend: self.name(),
            detail: format!(
                "{}: non-blocking {} is not available on this backend yet; use a blocking call \
                 or a `ctx.batch()`",
                op.desc.site,
                if op.desc.kind == crate::model::OpKind::Send {
                    "isend"
                } else {
                    "irecv"
                },
            ),
        })
    }

    /// Blocks until the posted op `ticket` has completed and hands its buffer back (for a
    /// receive: the data received). `site` is the `wait()` call, for reports.
    fn wait(&mut self, ticket: Ticket, site: crate::model::CallSite) -> Result<Vec<u8>> {
        let _ = site;
        Err(Error::Internal(format!(
            "{}: wait on request {} that this backend never posted",
            self.name(),
            ticket.0
        )))
    }

    /// Blocks until every posted op has completed (a rank program's return), discarding their
    /// buffers.
    fn drain(&mut self) -> Result<()> {
        Ok(())
    }

    /// Settles what this rank left before every member reached it (the local backend's small
    /// broadcasts and scatters), as the backend does before running any other call: `Ctx`
    /// calls it before reporting a call it refused itself, so that a deadlock or disagreement
    /// in the call the rank left is reported first, as in the verifier's model, where the rank
    /// is still inside it. Backends that never leave a call early keep the default.
    fn settle_left(&mut self) -> Result<()> {
        Ok(())
    }
}

/// A send or receive for [`Backend::post`], with the buffer it owns: for a send, a copy of the
/// data; for a receive, room for it (`desc`'s element count and dtype size it).
#[derive(Debug)]
pub(crate) struct PostedOp {
    /// The call as data (kind `Send` or `Recv`, with its peer).
    pub desc: OpDesc,
    /// The bytes sent, or the room for the bytes received.
    pub data: Vec<u8>,
}

/// Names a posted op for [`Backend::wait`]: unique per rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ticket(pub u64);

/// Whether two call sites are the same: `file!()`s of one file usually share an address, so
/// the text is compared only when they do not.
pub(crate) fn same_site(a: &CallSite, b: &CallSite) -> bool {
    (a.line, a.column) == (b.line, b.column) && (std::ptr::eq(a.file, b.file) || a.file == b.file)
}
