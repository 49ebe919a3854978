//! The NCCL backend on GPUs (feature `nccl`). Three ways to start the ranks, one backend:
//!
//! * one process per GPU started by `torchrun` (or any launcher that sets `RANK`, `WORLD_SIZE`,
//!   `LOCAL_RANK`, `MASTER_ADDR` and `MASTER_PORT`): rank 0 hands out the NCCL ids over TCP
//!   ([`run`]);
//! * one process per GPU started by `mpirun` (with the `mpi` feature too): the ids travel over
//!   MPI ([`run_mpi`]);
//! * one process driving every GPU, a thread per rank ([`run_threads`]), like the threads
//!   engine: `ncclCommInitAll` makes the communicators.
//!
//! Layers: `nccl-sys` (the raw API, loaded at run time) → [`check`] (result codes → errors)
//! → this module (communicators, devices, one batch = the lowering's copies and one NCCL
//! group on one stream). What a batch asks of the GPU is decided by [`lower`], which the host
//! emulation and its differential tests have already run; here it is only issued.
//!
//! Tensors a `Ctx` makes live on the rank's GPU ([`GpuMemory`]): a batch passes their device
//! addresses to NCCL as they are. Host tensors (made by `Tensor`'s own constructors) are staged:
//! copied into device buffers before the batch and back after it. Either way `Mem::In`/`Mem::Out`
//! of the lowering resolve to a device address, so the lowering does not change.
//!
//! Faults: every wait polls the stream and `ncclCommGetAsyncError`; an asynchronous error or
//! the timeout (`RANKWISE_NCCL_TIMEOUT` seconds, 600 by default) aborts every communicator of
//! this rank (`ncclCommAbort`), so a failed peer is an `Err` here, not a hang.

use std::ffi::{CStr, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, sys};
use nccl_sys::{self as ffi, Nccl};

use super::lower::{self, At, Call, Coll, Comm, Copy2d, Mem, Red};
use crate::bootstrap::Rendezvous;
use crate::ctx::Ctx;
use crate::error::{Error, Result};
use crate::exec::{Backend, Op, StopSignal};
use crate::model::{GroupId, WorldId};
use crate::tensor::{Device as Where, DeviceMemory};
use crate::{DType, ReduceOp};

fn nccl_err(detail: impl Into<String>) -> Error {
    Error::Backend {
        backend: "nccl",
        detail: detail.into(),
    }
}

/// Turns an NCCL result into an error naming the call, NCCL's text for the code and, when
/// the library has it, its last error message.
fn check(nccl: &Nccl, code: ffi::ncclResult_t, call: &str) -> Result<()> {
    if code == ffi::ncclSuccess {
        return Ok(());
    }
    let text = |p: *const std::ffi::c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: NCCL returns NUL-terminated static (or thread-local) strings.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    let what = nccl
        .api
        .ncclGetErrorString
        // SAFETY: takes a result code, returns a static string.
        .map(|f| text(unsafe { f(code) }))
        .unwrap_or_default();
    let last = nccl
        .api
        .ncclGetLastError
        // SAFETY: a null communicator asks for the last error of any.
        .map(|f| text(unsafe { f(std::ptr::null_mut()) }))
        .unwrap_or_default();
    Err(nccl_err(format!(
        "{call} failed: {what} (code {code}). {last}"
    )))
}

/// A function the loaded NCCL must have (`nccl-sys` checked it against the version).
fn need<T>(f: Option<T>, name: &str, nccl: &Nccl) -> Result<T> {
    f.ok_or_else(|| {
        let (a, b, c) = nccl.version_triple();
        nccl_err(format!(
            "NCCL {a}.{b}.{c} at {} has no {name}",
            nccl.path.display()
        ))
    })
}

/// A CUDA context and the stream every batch of this rank runs on.
struct Device {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
}

/// Runs a CUDA driver call through cudarc, turning the panic cudarc raises for a driver too
/// old to have a function into an error.
fn driver<T>(what: &str, call: impl FnOnce() -> std::result::Result<T, String>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(call)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(why)) => Err(nccl_err(format!("{what}: {why}"))),
        Err(p) => Err(nccl_err(format!(
            "{what}: the CUDA driver is missing a function ({})",
            crate::error::panic_message(&*p)
        ))),
    }
}

impl Device {
    /// How many GPUs the CUDA driver shows this process (at least one), or why it cannot:
    /// no driver library, no GPU.
    fn count() -> Result<usize> {
        // SAFETY: only tries to dlopen the driver library.
        if !unsafe { sys::is_culib_present() } {
            return Err(nccl_err(
                "the CUDA driver library (libcuda.so) is not on this machine: it has no NVIDIA \
                 driver. Run on GPUs, or use RANKWISE_BACKEND=threads, mpi or nccl-host",
            ));
        }
        let count = driver("cannot count the GPUs", || {
            CudaContext::device_count().map_err(|e| format!("{e:?}"))
        })?;
        if count <= 0 {
            return Err(nccl_err(
                "the CUDA driver sees no GPU (CUDA_VISIBLE_DEVICES may hide them)",
            ));
        }
        Ok(count as usize)
    }

    /// Opens GPU `ordinal` (below [`Device::count`]).
    fn open(ordinal: usize) -> Result<Device> {
        driver(&format!("cannot use GPU {ordinal}"), || {
            let ctx = CudaContext::new(ordinal).map_err(|e| format!("{e:?}"))?;
            // One stream per rank, and buffers used only on it: cudarc's cross-stream events
            // would only cost time.
            // SAFETY: every buffer of this backend is allocated, used and freed on `stream`.
            unsafe { ctx.disable_event_tracking() };
            let stream = ctx.new_stream().map_err(|e| format!("{e:?}"))?;
            Ok(Device { ctx, stream })
        })
    }

    /// The GPU's UUID: what tells two ranks that they were given the same GPU.
    fn uuid(&self) -> Result<[u8; 16]> {
        let u = driver("cannot read the GPU's UUID", || {
            self.ctx.uuid().map_err(|e| format!("{e:?}"))
        })?;
        Ok(u.bytes.map(|b| b as u8))
    }

    /// Makes this rank's context current on the calling thread: NCCL's calls use the current
    /// context's device.
    fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| nccl_err(format!("cannot make the GPU's context current: {e:?}")))
    }

    fn alloc(&self, bytes: usize) -> Result<CudaSlice<u8>> {
        self.stream
            .alloc_zeros::<u8>(bytes.max(1))
            .map_err(|e| nccl_err(format!("cannot allocate {bytes} bytes on the GPU: {e:?}")))
    }
}

/// A device tensor's memory on this rank's GPU. Every copy runs on the rank's stream, after
/// the batches that came before it; reads wait for it to finish.
struct GpuMemory {
    buf: CudaSlice<u8>,
    stream: Arc<CudaStream>,
    ordinal: u32,
    /// Bytes (the allocation has at least one).
    len: usize,
}

impl GpuMemory {
    fn new(dev: &Device, len: usize) -> Result<GpuMemory> {
        Ok(GpuMemory {
            buf: dev.alloc(len)?,
            stream: Arc::clone(&dev.stream),
            ordinal: dev.ctx.ordinal() as u32,
            len,
        })
    }

    /// A copy of `len` host bytes must be exactly this memory's size (cudarc would panic).
    fn check_len(&self, len: usize) -> Result<()> {
        if len == self.len {
            return Ok(());
        }
        Err(Error::Internal(format!(
            "a copy of {len} bytes to or from {} bytes on cuda:{}",
            self.len, self.ordinal
        )))
    }

    fn copy_err(&self, what: &str, e: impl std::fmt::Debug) -> Error {
        nccl_err(format!(
            "{what} {} bytes on cuda:{} failed: {e:?}",
            self.len, self.ordinal
        ))
    }
}

impl DeviceMemory for GpuMemory {
    fn device(&self) -> Where {
        Where::Cuda(self.ordinal)
    }

    fn len(&self) -> usize {
        self.len
    }

    fn addr(&self) -> *mut u8 {
        let (ptr, _) = self.buf.device_ptr(&self.stream);
        ptr as usize as *mut u8
    }

    fn read(&self, into: &mut [u8]) -> Result<()> {
        self.check_len(into.len())?;
        if self.len == 0 {
            return Ok(()); // nothing to copy (the allocation itself has one byte)
        }
        let view = self.buf.slice(..self.len);
        self.stream
            .memcpy_dtoh(&view, into)
            .and_then(|()| self.stream.synchronize())
            .map_err(|e| self.copy_err("reading", e))
    }

    fn write(&mut self, from: &[u8]) -> Result<()> {
        self.check_len(from.len())?;
        if self.len == 0 {
            return Ok(());
        }
        let mut view = self.buf.slice_mut(..self.len);
        let done = self
            .stream
            .memcpy_htod(from, &mut view)
            // `from` may be freed when this returns: the copy must have read it.
            .and_then(|()| self.stream.synchronize());
        done.map_err(|e| self.copy_err("writing", e))
    }

    fn duplicate(&self) -> Result<Box<dyn DeviceMemory>> {
        let mut copy = GpuMemory {
            buf: self
                .stream
                .alloc_zeros::<u8>(self.len.max(1))
                .map_err(|e| self.copy_err("allocating a copy of", e))?,
            stream: Arc::clone(&self.stream),
            ordinal: self.ordinal,
            len: self.len,
        };
        self.stream
            .memcpy_dtod(&self.buf, &mut copy.buf)
            .map_err(|e| self.copy_err("copying", e))?;
        Ok(Box::new(copy))
    }
}

/// One NCCL communicator, destroyed when dropped unless it was aborted.
struct NcclComm {
    nccl: &'static Nccl,
    /// Null once aborted.
    raw: ffi::ncclComm_t,
}

impl NcclComm {
    /// Aborts the communicator now: its pending kernels end, so the stream drains and memory
    /// can be freed (cudarc synchronises the stream to free it). Destroying it instead would
    /// wait for work that may never finish.
    fn abort(&mut self) {
        if self.raw.is_null() {
            return;
        }
        if let Some(f) = self.nccl.api.ncclCommAbort {
            // SAFETY: `raw` is a live communicator of this rank; it is not used after this.
            unsafe { f(self.raw) };
        }
        self.raw = std::ptr::null_mut();
    }
}

// SAFETY: an NCCL communicator may be used from any thread, one call at a time; the backend
// owning it is used by one thread at a time (`&mut self`).
unsafe impl Send for NcclComm {}

impl Drop for NcclComm {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return; // aborted
        }
        if let Some(f) = self.nccl.api.ncclCommDestroy {
            // SAFETY: `raw` is a communicator this rank created and nobody uses any more.
            unsafe { f(self.raw) };
        }
    }
}

/// Creates this rank's member of a communicator of `n` ranks from `id`.
fn init_comm(nccl: &'static Nccl, n: usize, id: ffi::ncclUniqueId, me: usize) -> Result<NcclComm> {
    let f = need(nccl.api.ncclCommInitRank, "ncclCommInitRank", nccl)?;
    let mut raw: ffi::ncclComm_t = std::ptr::null_mut();
    // SAFETY: `raw` receives the handle; `id` is the same on every member (they got it from one
    // rank), `me < n`; the calling thread's current CUDA context is this rank's device.
    let code = unsafe { f(&mut raw, n as c_int, id, me as c_int) };
    check(nccl, code, "ncclCommInitRank")?;
    Ok(NcclComm { nccl, raw })
}

fn unique_id(nccl: &Nccl) -> Result<ffi::ncclUniqueId> {
    let f = need(nccl.api.ncclGetUniqueId, "ncclGetUniqueId", nccl)?;
    let mut id = ffi::ncclUniqueId {
        internal: [0; ffi::NCCL_UNIQUE_ID_BYTES],
    };
    // SAFETY: writes the id's 128 bytes.
    check(nccl, unsafe { f(&mut id) }, "ncclGetUniqueId")?;
    Ok(id)
}

fn id_bytes(id: &ffi::ncclUniqueId) -> Vec<u8> {
    id.internal.iter().map(|&c| c as u8).collect()
}

fn id_from(bytes: &[u8]) -> Result<ffi::ncclUniqueId> {
    if bytes.len() != ffi::NCCL_UNIQUE_ID_BYTES {
        return Err(nccl_err(format!(
            "rank 0 sent an NCCL id of {} bytes, not {}",
            bytes.len(),
            ffi::NCCL_UNIQUE_ID_BYTES
        )));
    }
    let mut id = ffi::ncclUniqueId {
        internal: [0; ffi::NCCL_UNIQUE_ID_BYTES],
    };
    for (d, &b) in id.internal.iter_mut().zip(bytes) {
        *d = b as std::ffi::c_char;
    }
    Ok(id)
}

/// NCCL's name for a dtype.
fn nccl_dtype(d: DType) -> ffi::ncclDataType_t {
    match d {
        DType::I8 => ffi::ncclInt8,
        DType::U8 => ffi::ncclUint8,
        DType::I32 => ffi::ncclInt32,
        DType::U32 => ffi::ncclUint32,
        DType::I64 => ffi::ncclInt64,
        DType::U64 => ffi::ncclUint64,
        DType::F16 => ffi::ncclFloat16,
        DType::F32 => ffi::ncclFloat32,
        DType::F64 => ffi::ncclFloat64,
        DType::BF16 => ffi::ncclBfloat16,
    }
}

/// A sub-group's communicator, created the first time a batch uses it.
struct GroupEntry {
    members: Box<[usize]>,
    ordinal: u32,
    comm: Option<NcclComm>,
}

/// One rank's NCCL backend.
pub(crate) struct GpuBackend {
    nccl: &'static Nccl,
    dev: Device,
    rank: usize,
    id: WorldId,
    /// Group 0 is the world (its communicator is `world`).
    groups: Vec<GroupEntry>,
    members: Vec<Box<[usize]>>,
    world: NcclComm,
    /// A duplicate of the world for the user's sends and receives (see `lower::Comm::P2p`).
    p2p: NcclComm,
    /// A duplicate of the world that carries sub-groups' ids from their lowest member.
    control: NcclComm,
    timeout: Duration,
    pack: bool,
    /// Under one process driving every GPU: whether another rank has failed.
    stop: Option<StopSignal>,
    /// The failure that aborted the communicators: every later call fails with it.
    broken: Option<Error>,
}

impl GpuBackend {
    fn comm(&self, c: Comm) -> Result<ffi::ncclComm_t> {
        match c {
            Comm::P2p => Ok(self.p2p.raw),
            Comm::Group(GroupId::WORLD) => Ok(self.world.raw),
            Comm::Group(g) => self
                .groups
                .get(g.0 as usize)
                .and_then(|e| e.comm.as_ref())
                .map(|c| c.raw)
                .ok_or_else(|| Error::Internal(format!("group {} has no communicator", g.0))),
        }
    }

    /// Creates the communicators of sub-groups this batch uses for the first time, in the
    /// order of their (members, ordinal) key, so that members agree. Only members take part:
    /// rankwise creates groups locally (no call on non-members), which `ncclCommSplit` — a
    /// call on every rank of the parent — cannot serve. The lowest member makes an id and
    /// sends it to the others on the control communicator.
    fn create_missing(&mut self, ops: &[Op]) -> Result<()> {
        let mut missing: Vec<usize> = ops
            .iter()
            .map(|o| o.desc.group.0 as usize)
            .filter(|&g| g != 0 && self.groups.get(g).is_some_and(|e| e.comm.is_none()))
            .collect();
        missing.sort_by(|&a, &b| {
            let (a, b) = (&self.groups[a], &self.groups[b]);
            (&a.members, a.ordinal).cmp(&(&b.members, b.ordinal))
        });
        missing.dedup();
        for g in missing {
            let members = self.groups[g].members.clone();
            let me = members
                .binary_search(&self.rank)
                .map_err(|_| Error::Internal(format!("rank {} uses group {g}", self.rank)))?;
            let mut buf = self.dev.alloc(ffi::NCCL_UNIQUE_ID_BYTES)?;
            let made = if me == 0 {
                Some(unique_id(self.nccl)?)
            } else {
                None
            };
            if let Some(id) = &made {
                self.dev
                    .stream
                    .memcpy_htod(&id_bytes(id), &mut buf)
                    .map_err(|e| nccl_err(format!("{e:?}")))?;
            }
            let (ptr, _) = buf.device_ptr(&self.dev.stream);
            let stream = self.dev.stream.cu_stream() as ffi::cudaStream_t;
            let count = ffi::NCCL_UNIQUE_ID_BYTES;
            let id = if let Some(id) = made {
                let send = need(self.nccl.api.ncclSend, "ncclSend", self.nccl)?;
                self.group(|| {
                    for &peer in &members[1..] {
                        // SAFETY: `ptr` holds `count` bytes on this device, live until the
                        // stream is synchronised below.
                        let code = unsafe {
                            send(
                                ptr as *const c_void,
                                count,
                                ffi::ncclUint8,
                                peer as c_int,
                                self.control.raw,
                                stream,
                            )
                        };
                        check(self.nccl, code, "ncclSend")?;
                    }
                    Ok(())
                })?;
                self.wait(&[self.control.raw])?;
                id
            } else {
                let recv = need(self.nccl.api.ncclRecv, "ncclRecv", self.nccl)?;
                self.group(|| {
                    // SAFETY: `ptr` has room for `count` bytes, live until the wait below.
                    let code = unsafe {
                        recv(
                            ptr as *mut c_void,
                            count,
                            ffi::ncclUint8,
                            members[0] as c_int,
                            self.control.raw,
                            stream,
                        )
                    };
                    check(self.nccl, code, "ncclRecv")
                })?;
                self.wait(&[self.control.raw])?;
                let bytes = self
                    .dev
                    .stream
                    .clone_dtoh(&buf)
                    .map_err(|e| nccl_err(format!("{e:?}")))?;
                id_from(&bytes)?
            };
            self.groups[g].comm = Some(init_comm(self.nccl, members.len(), id, me)?);
        }
        Ok(())
    }

    /// Runs `issue` between `ncclGroupStart` and `ncclGroupEnd` (ending the group even when
    /// `issue` fails, so that NCCL is not left inside a group).
    fn group(&self, issue: impl FnOnce() -> Result<()>) -> Result<()> {
        let start = need(self.nccl.api.ncclGroupStart, "ncclGroupStart", self.nccl)?;
        let end = need(self.nccl.api.ncclGroupEnd, "ncclGroupEnd", self.nccl)?;
        // SAFETY: no arguments; pairs with the `end` below.
        check(self.nccl, unsafe { start() }, "ncclGroupStart")?;
        let issued = issue();
        // SAFETY: closes the group opened above.
        let ended = check(self.nccl, unsafe { end() }, "ncclGroupEnd");
        issued.and(ended)
    }

    /// Waits for the stream, polling the communicators' asynchronous errors; on an error or
    /// the timeout, marks every communicator for abort and returns the error.
    fn wait(&mut self, comms: &[ffi::ncclComm_t]) -> Result<()> {
        let started = Instant::now();
        let async_error = need(
            self.nccl.api.ncclCommGetAsyncError,
            "ncclCommGetAsyncError",
            self.nccl,
        )?;
        loop {
            // SAFETY: queries this rank's own stream.
            let q = unsafe { sys::cuStreamQuery(self.dev.stream.cu_stream()) };
            if q == sys::CUresult::CUDA_SUCCESS {
                return Ok(());
            }
            if q != sys::CUresult::CUDA_ERROR_NOT_READY {
                return Err(self.failed(format!("the GPU stream failed: {q:?}")));
            }
            for &c in comms {
                let mut state: ffi::ncclResult_t = ffi::ncclSuccess;
                // SAFETY: `c` is a live communicator of this rank.
                let code = unsafe { async_error(c, &mut state) };
                if code != ffi::ncclSuccess
                    || (state != ffi::ncclSuccess && state != ffi::ncclInProgress)
                {
                    let failed = if code != ffi::ncclSuccess {
                        code
                    } else {
                        state
                    };
                    let why = match check(self.nccl, failed, "a collective") {
                        Err(Error::Backend { detail, .. }) => detail,
                        Err(e) => e.to_string(),
                        Ok(()) => String::new(),
                    };
                    return Err(self.failed(format!("{why} (a peer may have failed)")));
                }
            }
            if let Some(e) = self.stop.as_ref().and_then(|stop| stop(self.rank)) {
                // Another rank of this process failed: its peers' collectives cannot finish.
                return Err(self.abort_all(e));
            }
            if started.elapsed() > self.timeout {
                return Err(self.failed(format!(
                    "no progress for {:?} (RANKWISE_NCCL_TIMEOUT): a peer is missing or blocked \
                     elsewhere; the communicators were aborted",
                    self.timeout
                )));
            }
            // Poll without sleeping through the first 2 ms, where most collectives finish: a
            // sleep's granularity (tens of µs) would be most of a 1 MiB all_reduce on NVLink.
            // Yielding, not spinning: ranks may share cores (one process driving many GPUs).
            if started.elapsed() < Duration::from_millis(2) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Aborts every communicator of this rank at once (so that the stream drains and the
    /// program can free its tensors) and returns the error; later calls fail with it too.
    fn failed(&mut self, detail: String) -> Error {
        let e = nccl_err(format!("rank {}: {detail}", self.rank));
        self.abort_all(e)
    }

    /// Aborts every communicator (see [`GpuBackend::failed`]) for the failure `e`.
    fn abort_all(&mut self, e: Error) -> Error {
        self.world.abort();
        self.p2p.abort();
        self.control.abort();
        for g in &mut self.groups {
            if let Some(c) = &mut g.comm {
                c.abort();
            }
        }
        if self.broken.is_none() {
            self.broken = Some(e.clone());
        }
        e
    }
}

/// Where an op's buffer is on the GPU: a device tensor's own memory, or a buffer the batch
/// staged a host tensor into.
enum OnGpu {
    Tensor {
        addr: sys::CUdeviceptr,
        bytes: usize,
    },
    Staged(CudaSlice<u8>),
}

impl OnGpu {
    /// Its address and size in bytes.
    fn span(&self, stream: &CudaStream) -> (sys::CUdeviceptr, usize) {
        match self {
            OnGpu::Tensor { addr, bytes } => (*addr, *bytes),
            OnGpu::Staged(b) => (b.device_ptr(stream).0, b.len()),
        }
    }
}

/// A batch's device buffers: each op's input and output (one buffer for in-place ops), and the
/// lowering's scratch.
struct Staged {
    ins: Vec<Option<OnGpu>>,
    outs: Vec<Option<OnGpu>>,
    /// Whether op i's output is its input (in place).
    same: Vec<bool>,
    scratch: Vec<OnGpu>,
}

impl Staged {
    /// The device address `bytes` long at `at`, checked against its buffer.
    fn addr(&self, at: At, bytes: usize, stream: &CudaStream) -> Result<sys::CUdeviceptr> {
        let buf = match at.mem {
            Mem::In(i) => self.ins.get(i).and_then(Option::as_ref),
            Mem::Out(i) if self.same.get(i) == Some(&true) => {
                self.ins.get(i).and_then(Option::as_ref)
            }
            Mem::Out(i) => self.outs.get(i).and_then(Option::as_ref),
            Mem::Scratch(s) => self.scratch.get(s),
        }
        .ok_or_else(|| {
            Error::Internal(format!(
                "the NCCL lowering used a missing buffer {:?}",
                at.mem
            ))
        })?;
        let (base, len) = buf.span(stream);
        let r = at.within(bytes, len)?;
        Ok(base + r.start as u64)
    }
}

// SAFETY: inputs are read from and outputs written to host memory only within each op's
// `len` elements (`host_bytes`), before `execute` returns (the stream is synchronised first);
// every device address comes from `Staged::addr`, which checks it against the buffer the
// lowering named; a peer's data reaches this rank only through NCCL calls whose counts the
// lowering derived from this rank's own validated op.
unsafe impl Backend for GpuBackend {
    fn name(&self) -> &'static str {
        "nccl"
    }

    fn world_id(&self) -> WorldId {
        self.id
    }

    fn create_group(&mut self, members: &[usize], ordinal: u32) -> Result<GroupId> {
        if let Some(i) = self
            .groups
            .iter()
            .skip(1)
            .position(|e| *e.members == *members && e.ordinal == ordinal)
        {
            return Ok(GroupId(i as u32 + 1));
        }
        self.groups.push(GroupEntry {
            members: members.into(),
            ordinal,
            comm: None,
        });
        self.members.push(members.into());
        Ok(GroupId(self.groups.len() as u32 - 1))
    }

    fn supports(&self, op: ReduceOp) -> bool {
        lower::has_reduction(op)
    }

    fn device(&self) -> Where {
        Where::Cuda(self.dev.ctx.ordinal() as u32)
    }

    fn alloc_device(&mut self, bytes: usize) -> Option<Result<Box<dyn DeviceMemory>>> {
        Some(GpuMemory::new(&self.dev, bytes).map(|m| Box::new(m) as Box<dyn DeviceMemory>))
    }

    fn execute(&mut self, ops: &mut [Op]) -> Result<()> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        self.dev.bind()?;
        crate::plan::plan(ops);
        let descs: Vec<_> = ops.iter().map(|o| &o.desc).collect();
        let lowered = lower::lower(
            &descs,
            &lower::Setting {
                rank: self.rank,
                version: self.nccl.version as u32,
                groups: &self.members,
                pack: self.pack,
            },
        )?;
        self.create_missing(ops)?;
        let staged = self.stage(ops, &lowered.scratch)?;
        let stream = Arc::clone(&self.dev.stream);
        for c in &lowered.pre {
            self.copy(&staged, c)?;
        }
        let premul = self.premul_ops(&lowered.calls)?;
        let mut used: Vec<ffi::ncclComm_t> = Vec::new();
        let issued = self.group(|| {
            for (k, call) in lowered.calls.iter().enumerate() {
                self.issue(&staged, call, premul[k], &stream)?;
            }
            Ok(())
        });
        for call in &lowered.calls {
            let c = self.comm(call.comm())?;
            if !used.contains(&c) {
                used.push(c);
            }
        }
        let done = issued.and_then(|()| self.wait(&used));
        self.destroy_premul(&lowered.calls, &premul);
        done?;
        for c in &lowered.post {
            self.copy(&staged, c)?;
        }
        self.unstage(ops, &staged)
    }
}

/// The host bytes of op buffer `b` of dtype `d`.
fn host_bytes(b: &crate::exec::Buf, d: DType) -> usize {
    b.len * d.size()
}

/// A device tensor's memory as the batch uses it (its address is a `GpuMemory`'s).
fn device_tensor(b: &crate::exec::Buf, d: DType) -> OnGpu {
    OnGpu::Tensor {
        addr: b.ptr as usize as sys::CUdeviceptr,
        bytes: host_bytes(b, d),
    }
}

impl GpuBackend {
    fn stage(&self, ops: &[Op], scratch: &[usize]) -> Result<Staged> {
        let mut st = Staged {
            ins: Vec::with_capacity(ops.len()),
            outs: Vec::with_capacity(ops.len()),
            same: Vec::with_capacity(ops.len()),
            scratch: Vec::with_capacity(scratch.len()),
        };
        for op in ops {
            let same = !op.input.is_none() && op.input.ptr == op.output.ptr;
            let input = if op.input.is_none() {
                None
            } else if op.input.on_device {
                Some(device_tensor(&op.input, op.desc.dtype))
            } else {
                let bytes = host_bytes(&op.input, op.desc.dtype);
                let mut d = self.dev.alloc(bytes)?;
                // SAFETY: the op's input is a live host buffer of `len` elements (the `Op`
                // contract), read only here.
                let host = unsafe { std::slice::from_raw_parts(op.input.ptr as *const u8, bytes) };
                self.dev
                    .stream
                    .memcpy_htod(host, &mut d)
                    .map_err(|e| nccl_err(format!("copying to the GPU: {e:?}")))?;
                Some(OnGpu::Staged(d))
            };
            let output = if op.output.is_none() || same {
                None
            } else if op.output.on_device {
                Some(device_tensor(&op.output, op.desc.dtype))
            } else {
                Some(OnGpu::Staged(
                    self.dev.alloc(host_bytes(&op.output, op.desc.dtype))?,
                ))
            };
            st.ins.push(input);
            st.outs.push(output);
            st.same.push(same);
        }
        for &b in scratch {
            st.scratch.push(OnGpu::Staged(self.dev.alloc(b)?));
        }
        Ok(st)
    }

    /// Copies every op's output back to its host tensor (after the stream has finished).
    fn unstage(&self, ops: &[Op], st: &Staged) -> Result<()> {
        for (i, op) in ops.iter().enumerate() {
            if op.output.is_none() || op.output.on_device {
                continue;
            }
            let src = if st.same[i] { &st.ins[i] } else { &st.outs[i] };
            let Some(OnGpu::Staged(src)) = src else {
                continue;
            };
            let bytes = host_bytes(&op.output, op.desc.dtype);
            // SAFETY: the op's output is a live host buffer of `len` elements that this call
            // borrows exclusively (the `Op` contract).
            let host = unsafe { std::slice::from_raw_parts_mut(op.output.ptr, bytes) };
            self.dev
                .stream
                .memcpy_dtoh(src, host)
                .map_err(|e| nccl_err(format!("copying from the GPU: {e:?}")))?;
        }
        self.dev
            .stream
            .synchronize()
            .map_err(|e| nccl_err(format!("{e:?}")))
    }

    fn copy(&self, st: &Staged, c: &Copy2d) -> Result<()> {
        if c.rows == 0 || c.width == 0 {
            return Ok(());
        }
        let (dst_bytes, src_bytes) = c.extents()?;
        let stream = &self.dev.stream;
        let dst = st.addr(c.dst, dst_bytes, stream)?;
        let src = st.addr(c.src, src_bytes, stream)?;
        // Every field written out: the memory types are Rust enums without a zero variant, so
        // `mem::zeroed` would be undefined behaviour (found by the fake GPU: a debug build
        // aborts there).
        let p = sys::CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: std::ptr::null(),
            srcDevice: src,
            srcArray: std::ptr::null_mut(),
            srcPitch: c.src_pitch,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstHost: std::ptr::null_mut(),
            dstDevice: dst,
            dstArray: std::ptr::null_mut(),
            dstPitch: c.dst_pitch,
            WidthInBytes: c.width,
            Height: c.rows,
        };
        // SAFETY: both regions lie inside live device buffers of this batch (checked by
        // `addr`), which outlive the stream's work (synchronised before they are freed).
        let r = unsafe { sys::cuMemcpy2DAsync_v2(&p, stream.cu_stream()) };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(nccl_err(format!("cuMemcpy2DAsync failed: {r:?}")));
        }
        Ok(())
    }

    /// NCCL's op for each call: built in, or a `PreMulSum` made for its communicator.
    fn premul_ops(&self, calls: &[Call]) -> Result<Vec<ffi::ncclRedOp_t>> {
        let mut out = Vec::with_capacity(calls.len());
        for call in calls {
            let op = match *call {
                Call::Coll {
                    op: Some(op),
                    dtype,
                    comm,
                    ..
                } => match op {
                    Red::Sum => ffi::ncclSum,
                    Red::Prod => ffi::ncclProd,
                    Red::Max => ffi::ncclMax,
                    Red::Min => ffi::ncclMin,
                    Red::Avg => ffi::ncclAvg,
                    Red::PreMulSum(s) => {
                        let f = need(
                            self.nccl.api.ncclRedOpCreatePreMulSum,
                            "ncclRedOpCreatePreMulSum",
                            self.nccl,
                        )?;
                        let mut scalar = scalar_bytes(s, dtype);
                        let mut op: ffi::ncclRedOp_t = 0;
                        // SAFETY: `scalar` holds one element of `dtype`, read before return
                        // (host-immediate); `op` receives the new handle.
                        let code = unsafe {
                            f(
                                &mut op,
                                scalar.as_mut_ptr().cast(),
                                nccl_dtype(dtype),
                                ffi::ncclScalarHostImmediate,
                                self.comm(comm)?,
                            )
                        };
                        check(self.nccl, code, "ncclRedOpCreatePreMulSum")?;
                        op
                    }
                },
                _ => ffi::ncclSum,
            };
            out.push(op);
        }
        Ok(out)
    }

    fn destroy_premul(&self, calls: &[Call], ops: &[ffi::ncclRedOp_t]) {
        let Some(f) = self.nccl.api.ncclRedOpDestroy else {
            return;
        };
        for (call, &op) in calls.iter().zip(ops) {
            if let Call::Coll {
                op: Some(Red::PreMulSum(_)),
                comm,
                ..
            } = *call
                && let Ok(c) = self.comm(comm)
            {
                // SAFETY: `op` was created for `c` by `premul_ops` and its calls have finished.
                unsafe { f(op, c) };
            }
        }
    }

    fn issue(
        &self,
        st: &Staged,
        call: &Call,
        red: ffi::ncclRedOp_t,
        stream: &CudaStream,
    ) -> Result<()> {
        let s = stream.cu_stream() as ffi::cudaStream_t;
        let api = &self.nccl.api;
        match *call {
            Call::Send {
                comm,
                peer,
                buf,
                count,
                dtype,
                ..
            } => {
                let p = st.addr(buf, count * dtype.size(), stream)?;
                let f = need(api.ncclSend, "ncclSend", self.nccl)?;
                // SAFETY: `p` holds `count` elements (checked), live until the wait.
                check(
                    self.nccl,
                    unsafe {
                        f(
                            p as *const c_void,
                            count,
                            nccl_dtype(dtype),
                            peer as c_int,
                            self.comm(comm)?,
                            s,
                        )
                    },
                    "ncclSend",
                )
            }
            Call::Recv {
                comm,
                peer,
                buf,
                count,
                dtype,
                ..
            } => {
                let p = st.addr(buf, count * dtype.size(), stream)?;
                let f = need(api.ncclRecv, "ncclRecv", self.nccl)?;
                // SAFETY: `p` has room for `count` elements (checked), live until the wait.
                check(
                    self.nccl,
                    unsafe {
                        f(
                            p as *mut c_void,
                            count,
                            nccl_dtype(dtype),
                            peer as c_int,
                            self.comm(comm)?,
                            s,
                        )
                    },
                    "ncclRecv",
                )
            }
            Call::Coll {
                coll,
                comm,
                send,
                recv,
                count,
                dtype,
                ..
            } => {
                let c = self.comm(comm)?;
                let n = self.members_of(comm).len();
                let me = self.members_of(comm).binary_search(&self.rank).unwrap_or(0);
                let (sb, rb) = coll.bytes(count * dtype.size(), n, me);
                let addr = |a: Option<At>, bytes: usize| -> Result<*mut c_void> {
                    match a {
                        Some(a) => Ok(st.addr(a, bytes, stream)? as *mut c_void),
                        None => Ok(std::ptr::null_mut()),
                    }
                };
                let sp = addr(send, sb)? as *const c_void;
                let rp = addr(recv, rb)?;
                let dt = nccl_dtype(dtype);
                // SAFETY: the buffers hold what NCCL reads and writes for this call on this rank
                // (checked by `addr` against the lowering's sizes) and live until the wait; `c`
                // is this rank's communicator of the call's group.
                let code = unsafe {
                    match coll {
                        Coll::AllReduce => need(api.ncclAllReduce, "ncclAllReduce", self.nccl)?(
                            sp, rp, count, dt, red, c, s,
                        ),
                        Coll::Reduce { root } => need(api.ncclReduce, "ncclReduce", self.nccl)?(
                            sp,
                            rp,
                            count,
                            dt,
                            red,
                            root as c_int,
                            c,
                            s,
                        ),
                        Coll::Broadcast { root } => need(
                            api.ncclBroadcast,
                            "ncclBroadcast",
                            self.nccl,
                        )?(
                            sp, rp, count, dt, root as c_int, c, s
                        ),
                        Coll::AllGather => need(api.ncclAllGather, "ncclAllGather", self.nccl)?(
                            sp, rp, count, dt, c, s,
                        ),
                        Coll::ReduceScatter => {
                            need(api.ncclReduceScatter, "ncclReduceScatter", self.nccl)?(
                                sp, rp, count, dt, red, c, s,
                            )
                        }
                        Coll::AllToAll => need(api.ncclAlltoAll, "ncclAlltoAll", self.nccl)?(
                            sp, rp, count, dt, c, s,
                        ),
                        Coll::Gather { root } => need(api.ncclGather, "ncclGather", self.nccl)?(
                            sp,
                            rp,
                            count,
                            dt,
                            root as c_int,
                            c,
                            s,
                        ),
                        Coll::Scatter { root } => need(api.ncclScatter, "ncclScatter", self.nccl)?(
                            sp,
                            rp,
                            count,
                            dt,
                            root as c_int,
                            c,
                            s,
                        ),
                    }
                };
                check(self.nccl, code, "an NCCL collective")
            }
        }
    }

    fn members_of(&self, c: Comm) -> &[usize] {
        match c {
            Comm::P2p => &self.members[0],
            Comm::Group(g) => self.members.get(g.0 as usize).map_or(&[][..], |m| &m[..]),
        }
    }
}

/// One element of `dtype` holding `s` (a `PreMulSum` scalar), in native byte order.
fn scalar_bytes(s: f64, dtype: DType) -> Vec<u8> {
    use crate::element::with_dtype;
    with_dtype!(dtype, T => {
        let v = <T as crate::element::Arith>::from_f64(s);
        let mut out = vec![0u8; size_of::<T>()];
        // SAFETY: `out` holds exactly one `T`; elements are plain data.
        unsafe { std::ptr::copy_nonoverlapping((&v as *const T).cast::<u8>(), out.as_mut_ptr(), size_of::<T>()) };
        out
    })
}

/// The GPU of a process-per-GPU rank: `LOCAL_RANK` (torchrun sets it), else `fallback` (the
/// rank's index among its node's processes under mpirun, the rank under other launchers).
fn local_rank(fallback: usize) -> Result<usize> {
    match std::env::var("LOCAL_RANK") {
        Ok(v) => v
            .trim()
            .parse()
            .map_err(|_| nccl_err(format!("LOCAL_RANK={v:?} is not a number"))),
        Err(_) => Ok(fallback),
    }
}

/// Opens the GPU a process-per-GPU rank was given.
fn open_local(ordinal: usize) -> Result<Device> {
    let count = Device::count()?;
    if ordinal >= count {
        return Err(nccl_err(format!(
            "this rank's LOCAL_RANK asks for GPU {ordinal}, but the CUDA driver sees {count} \
             (CUDA_VISIBLE_DEVICES may hide the others; start at most {count} ranks on this node)"
        )));
    }
    Device::open(ordinal)
}

/// What every way of starting reads from the environment.
struct Settings {
    timeout: Duration,
    pack: bool,
}

fn settings() -> Result<Settings> {
    let timeout = match std::env::var("RANKWISE_NCCL_TIMEOUT") {
        Err(_) => Duration::from_secs(600),
        Ok(v) => crate::bootstrap::seconds(&v)
            .filter(|d| !d.is_zero())
            .ok_or_else(|| {
                nccl_err(format!(
                    "RANKWISE_NCCL_TIMEOUT={v:?} is not a number of seconds"
                ))
            })?,
    };
    let pack = crate::vars::flag("RANKWISE_NCCL_PACK", false)?;
    Ok(Settings { timeout, pack })
}

/// Every rank has three communicators: collectives, the user's messages, group creation.
const COMMS: usize = 3;

/// Rank 0's ids for the three communicators, as the bytes it hands out.
fn new_ids(nccl: &Nccl) -> Result<Vec<u8>> {
    let mut b = Vec::with_capacity(COMMS * ffi::NCCL_UNIQUE_ID_BYTES);
    for _ in 0..COMMS {
        b.extend(id_bytes(&unique_id(nccl)?));
    }
    Ok(b)
}

/// This rank's three communicators from the ids rank 0 handed out (its device current).
fn comms_from_ids(
    nccl: &'static Nccl,
    world: usize,
    rank: usize,
    ids: &[u8],
) -> Result<[NcclComm; COMMS]> {
    if ids.len() != COMMS * ffi::NCCL_UNIQUE_ID_BYTES {
        return Err(nccl_err(format!(
            "rank 0 sent {} bytes of NCCL ids, not {}",
            ids.len(),
            COMMS * ffi::NCCL_UNIQUE_ID_BYTES
        )));
    }
    let mut made = ids
        .chunks(ffi::NCCL_UNIQUE_ID_BYTES)
        .map(|c| init_comm(nccl, world, id_from(c)?, rank));
    let mut next = || {
        made.next()
            .unwrap_or_else(|| Err(Error::Internal("three NCCL ids".into())))
    };
    Ok([next()?, next()?, next()?])
}

/// The three communicators of every rank of a one-process world, one per device of `devs`
/// (`ncclCommInitAll`); `comms[i][r]` is rank r's i-th communicator.
fn comms_for_all(nccl: &'static Nccl, devs: &[Device]) -> Result<Vec<Vec<NcclComm>>> {
    let f = need(nccl.api.ncclCommInitAll, "ncclCommInitAll", nccl)?;
    let ordinals: Vec<c_int> = devs.iter().map(|d| d.ctx.ordinal() as c_int).collect();
    (0..COMMS)
        .map(|_| {
            let mut raw: Vec<ffi::ncclComm_t> = vec![std::ptr::null_mut(); devs.len()];
            // SAFETY: `raw` has room for one handle per device of `ordinals`, which are
            // distinct GPUs this process has opened.
            let code = unsafe { f(raw.as_mut_ptr(), ordinals.len() as c_int, ordinals.as_ptr()) };
            check(nccl, code, "ncclCommInitAll")?;
            Ok(raw.into_iter().map(|raw| NcclComm { nccl, raw }).collect())
        })
        .collect()
}

/// NVIDIA's way of writing a GPU's UUID (as `nvidia-smi -L` shows it).
fn uuid_text(u: &[u8]) -> String {
    let hex: String = u.iter().map(|b| format!("{b:02x}")).collect();
    if hex.len() != 32 {
        return format!("GPU-{hex}");
    }
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Refuses a job in which two ranks were given one GPU (`uuids[r]` is rank r's): NCCL needs a
/// GPU per rank and would fail later with a less helpful message, or hang.
pub(crate) fn one_gpu_per_rank(uuids: &[Vec<u8>]) -> std::result::Result<(), String> {
    let mut shared: Vec<(String, Vec<usize>)> = Vec::new();
    for (rank, u) in uuids.iter().enumerate() {
        if u.len() != 16 {
            return Err(format!(
                "rank {rank} described its GPU in {} bytes, not 16: are all ranks the same \
                 build of the program?",
                u.len()
            ));
        }
        match uuids[..rank].iter().position(|v| v == u) {
            None => {}
            Some(first) => match shared.iter_mut().find(|(_, r)| r[0] == first) {
                Some((_, ranks)) => ranks.push(rank),
                None => shared.push((uuid_text(u), vec![first, rank])),
            },
        }
    }
    if shared.is_empty() {
        return Ok(());
    }
    let each: Vec<String> = shared
        .iter()
        .map(|(gpu, ranks)| format!("ranks {ranks:?} were all given {gpu}"))
        .collect();
    Err(format!(
        "{}. NCCL needs a GPU of its own for every rank: start at most as many ranks per node as \
         it has GPUs (torchrun --nproc-per-node), give each its own LOCAL_RANK, and check \
         CUDA_VISIBLE_DEVICES",
        each.join("; ")
    ))
}

impl GpuBackend {
    fn new(
        nccl: &'static Nccl,
        dev: Device,
        (rank, world): (usize, usize),
        [world_comm, p2p, control]: [NcclComm; COMMS],
        settings: &Settings,
        stop: Option<StopSignal>,
    ) -> GpuBackend {
        let everyone: Box<[usize]> = (0..world).collect();
        GpuBackend {
            nccl,
            dev,
            rank,
            id: WorldId::fresh(),
            groups: vec![GroupEntry {
                members: everyone.clone(),
                ordinal: u32::MAX,
                comm: None,
            }],
            members: vec![everyone],
            world: world_comm,
            p2p,
            control,
            timeout: settings.timeout,
            pack: settings.pack,
            stop,
            broken: None,
        }
    }
}

/// Runs `f` on one rank's backend, with a trace if `RANKWISE_TRACE` asks for one.
fn run_rank<T, F>(backend: GpuBackend, world: usize, f: &F) -> Result<T>
where
    F: Fn(&mut Ctx) -> Result<T>,
{
    let rank = backend.rank;
    let mut ctx = Ctx::new(rank, world, Box::new(backend));
    let trace = crate::trace::path_from_env();
    if trace.is_some() {
        ctx.start_trace(std::time::Instant::now());
    }
    let value = ctx.run(f);
    crate::trace::write_process(&mut ctx, trace.as_deref(), rank)?;
    value
}

/// Runs `f` as this process's rank of a job started by torchrun; returns (rank, world, value).
/// Rank 0 checks that every rank has a GPU of its own and hands out the NCCL ids over TCP.
pub(crate) fn run<T, F>(f: &F) -> Result<(usize, usize, T)>
where
    F: Fn(&mut Ctx) -> Result<T>,
{
    let rv = Rendezvous::from_env()?.ok_or_else(|| {
        nccl_err(
            "RANKWISE_BACKEND=nccl as one process per GPU needs the launcher's RANK, \
             WORLD_SIZE, MASTER_ADDR and MASTER_PORT (torchrun sets them); none are set",
        )
    })?;
    let (rank, world) = (rv.rank, rv.world);
    let nccl = Nccl::load().map_err(|e| nccl_err(e.to_string()))?;
    let dev = open_local(local_rank(rank)?)?;
    let settings = settings()?;
    let uuid = dev.uuid()?;
    let ids = if rank == 0 {
        new_ids(nccl)?
    } else {
        Vec::new()
    };
    let ids = rv.exchange(&uuid, |uuids| {
        one_gpu_per_rank(uuids)?;
        Ok(ids)
    })?;
    dev.bind()?;
    let comms = comms_from_ids(nccl, world, rank, &ids)?;
    let backend = GpuBackend::new(nccl, dev, (rank, world), comms, &settings, None);
    Ok((rank, world, run_rank(backend, world, f)?))
}

/// Runs `f` as this process's rank of a job started by `mpirun` (feature `mpi` too): the GPU
/// is `LOCAL_RANK` if set, else the rank's index among the processes of its node; the GPUs'
/// UUIDs are all-gathered and checked, and rank 0's NCCL ids are broadcast over MPI. A rank
/// that fails ends the job (`MPI_Abort`), like the MPI backend: peers blocked in NCCL cannot be
/// told otherwise. Returns (rank, world, value).
#[cfg(feature = "mpi")]
pub(crate) fn run_mpi<T, F>(f: &F) -> Result<(usize, usize, T)>
where
    F: Fn(&mut Ctx) -> Result<T>,
{
    use crate::exec::mpi::launch::abort_job;
    use mpi::collective::{CommunicatorCollectives, Root};
    use mpi::topology::Communicator;

    let universe = mpi::initialize().ok_or_else(|| {
        nccl_err(
            "MPI was already initialised (or finalised) in this process: under mpirun, \
             `launch` runs once per process",
        )
    })?;
    let comm = universe.world();
    let (rank, world) = (comm.rank() as usize, comm.size() as usize);
    let node = comm.split_shared(comm.rank());
    let started = (|| -> Result<GpuBackend> {
        let nccl = Nccl::load().map_err(|e| nccl_err(e.to_string()))?;
        let dev = open_local(local_rank(node.rank() as usize)?)?;
        let settings = settings()?;
        let uuid = dev.uuid()?;
        let mut uuids = vec![0u8; 16 * world];
        comm.all_gather_into(&uuid[..], &mut uuids[..]);
        let uuids: Vec<Vec<u8>> = uuids.chunks(16).map(<[u8]>::to_vec).collect();
        // Every rank reaches the same verdict from the same bytes.
        one_gpu_per_rank(&uuids).map_err(nccl_err)?;
        let mut ids = if rank == 0 {
            new_ids(nccl)?
        } else {
            vec![0u8; COMMS * ffi::NCCL_UNIQUE_ID_BYTES]
        };
        comm.process_at_rank(0).broadcast_into(&mut ids[..]);
        dev.bind()?;
        let comms = comms_from_ids(nccl, world, rank, &ids)?;
        Ok(GpuBackend::new(
            nccl,
            dev,
            (rank, world),
            comms,
            &settings,
            None,
        ))
    })();
    let value = match started.and_then(|b| run_rank(b, world, f)) {
        Ok(v) => v,
        Err(e) => abort_job(rank, &e),
    };
    drop(node);
    drop(comm);
    drop(universe);
    Ok((rank, world, value))
}

/// Runs `f` on `world` threads of this process, one per GPU (rank r on GPU r of those
/// `CUDA_VISIBLE_DEVICES` shows), with the threads engine's failure handling: a rank that fails
/// stops the others' waits, which abort their communicators. Each rank's value in rank order.
#[cfg(feature = "local")]
pub(crate) fn run_threads<T, F>(world: usize, f: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(&mut Ctx) -> Result<T> + Sync,
{
    if world == 0 {
        return Err(Error::InvalidWorld { world });
    }
    let start = || -> Result<_> {
        let nccl = Nccl::load().map_err(|e| nccl_err(e.to_string()))?;
        let count = Device::count()?;
        if world > count {
            return Err(nccl_err(format!(
                "a world of {world} needs {world} GPUs, one per rank, but the CUDA driver sees \
                 {count} (CUDA_VISIBLE_DEVICES may hide some). Run a world of at most {count}, \
                 or one process per GPU on several nodes (torchrun, mpirun)"
            )));
        }
        let settings = settings()?;
        let devs = (0..world).map(Device::open).collect::<Result<Vec<_>>>()?;
        let comms = comms_for_all(nccl, &devs)?;
        Ok((nccl, settings, devs, comms))
    };
    // Say which way the ranks were started: the fix differs (a launcher, fewer ranks).
    let (nccl, settings, devs, mut comms) = start().map_err(|e| match e {
        Error::Backend { backend, detail } => Error::Backend {
            backend,
            detail: format!(
                "{detail} [RANKWISE_BACKEND=nccl without torchrun or mpirun: this process runs \
                 every rank, one thread per GPU]"
            ),
        },
        e => e,
    })?;
    crate::spawn::spawn_prepared(world, f, |stop| {
        let mut ranks: Vec<Box<dyn Backend>> = Vec::with_capacity(world);
        let mut next = |i: usize| comms[i].remove(0);
        for (rank, dev) in devs.into_iter().enumerate() {
            let mine = [next(0), next(1), next(2)];
            ranks.push(Box::new(GpuBackend::new(
                nccl,
                dev,
                (rank, world),
                mine,
                &settings,
                Some(Arc::clone(&stop)),
            )));
        }
        ranks
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(n: u8) -> Vec<u8> {
        let mut u = vec![0u8; 16];
        u[0] = n;
        u[15] = 0xab;
        u
    }

    #[test]
    fn distinct_gpus_pass() {
        assert_eq!(one_gpu_per_rank(&[gpu(1), gpu(2), gpu(3)]), Ok(()));
        assert_eq!(one_gpu_per_rank(&[]), Ok(()));
    }

    #[test]
    fn ranks_sharing_a_gpu_are_named_with_the_gpu() {
        let e = one_gpu_per_rank(&[gpu(1), gpu(2), gpu(1), gpu(2), gpu(1)]).expect_err("shared");
        assert!(
            e.starts_with(
                "ranks [0, 2, 4] were all given GPU-01000000-0000-0000-0000-0000000000ab; \
                 ranks [1, 3] were all given GPU-02000000-0000-0000-0000-0000000000ab."
            ),
            "{e}"
        );
        assert!(e.contains("torchrun --nproc-per-node"), "{e}");
    }

    #[test]
    fn a_malformed_identity_is_refused_not_misread() {
        let e = one_gpu_per_rank(&[gpu(1), vec![1, 2]]).expect_err("short");
        assert!(e.starts_with("rank 1 described its GPU in 2 bytes"), "{e}");
    }

    #[test]
    fn uuids_read_as_nvidia_writes_them() {
        let u: Vec<u8> = (0..16).collect();
        assert_eq!(uuid_text(&u), "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f");
    }
}
