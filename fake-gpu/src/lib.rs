//! A test double of the CUDA driver and of NCCL, on host memory, for machines without a GPU.
//!
//! Built as one shared library and loaded under the names the GPU backend looks for
//! (`libcuda.so` through cudarc, `libnccl.so.2` through `nccl-sys`), it lets rankwise's GPU
//! executor — device memory, stream copies, strided copies, NCCL groups, communicator creation,
//! the watchdog's polling — run end to end in CI, so that everything but the hardware is tested.
//!
//! What it is: "device memory" is host memory; copies run at once (rankwise copies only on an
//! idle stream); an NCCL group is registered by `ncclGroupEnd`, which returns at once, and its
//! calls complete when every peer's matching calls have been issued (collectives matched in
//! order per communicator, messages per ordered pair in order): until then the stream is busy
//! (`cuStreamQuery` says `CUDA_ERROR_NOT_READY`), so the backend's watchdog loop runs as on a GPU.
//! Members that issue different collectives, or messages of different sizes, make
//! `ncclCommGetAsyncError` report an error and the calls never complete. Reductions fold in member order, as
//! rankwise's threads backend does. What it is not: a model of GPU timing or of NCCL's algorithms,
//! or of errors a real device raises. Only the calls rankwise makes are provided.
//!
//! Variables: `RANKWISE_FAKE_GPUS` (devices, default 2), `RANKWISE_FAKE_NCCL_VERSION` (default
//! 23203; 22703 leaves out 2.28's all_to_all, gather and scatter), and an injected device fault:
//! `RANKWISE_FAKE_FAIL_RANK=r` with `RANKWISE_FAKE_FAIL_AFTER=k` makes the stream of the member
//! `r` that issues its `k`-th NCCL call fail (`cuStreamQuery` returns
//! `CUDA_ERROR_LAUNCH_FAILED`), as a GPU whose kernel crashed.
#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod reduce;

type CUresult = c_int;
const OK: c_int = 0;
/// `CUDA_ERROR_INVALID_VALUE` / `ncclInvalidArgument`.
const INVALID: c_int = 1;
const NCCL_INVALID_ARGUMENT: c_int = 4;
const NCCL_INVALID_USAGE: c_int = 5;

fn env_number(key: &str, default: i64) -> i64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------------------------------------
// The CUDA driver
// ---------------------------------------------------------------------------------------------

thread_local! {
    static CURRENT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Live allocations: address → size, so frees and copies can be checked.
static ALLOCS: Mutex<Option<HashMap<u64, usize>>> = Mutex::new(None);

#[unsafe(no_mangle)]
pub extern "C" fn cuInit(_flags: c_uint) -> CUresult {
    OK
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    unsafe { *count = env_number("RANKWISE_FAKE_GPUS", 2) as c_int };
    OK
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGet(device: *mut c_int, ordinal: c_int) -> CUresult {
    if ordinal < 0 || i64::from(ordinal) >= env_number("RANKWISE_FAKE_GPUS", 2) {
        return INVALID;
    }
    unsafe { *device = ordinal };
    OK
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut c_int,
    _attr: c_int,
    _dev: c_int,
) -> CUresult {
    // 0 for everything: in particular no memory pools, so cudarc allocates synchronously.
    unsafe { *value = 0 };
    OK
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut u8, dev: c_int) -> CUresult {
    let mut u = [0u8; 16];
    u[..4].copy_from_slice(&[0xfa, 0xce, 0x06, 0x90]);
    u[15] = dev as u8;
    unsafe { std::ptr::copy_nonoverlapping(u.as_ptr(), uuid, 16) };
    OK
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut u8, dev: c_int) -> CUresult {
    unsafe { cuDeviceGetUuid(uuid, dev) }
}

/// Contexts are `ordinal + 1` as a pointer (never null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut usize, dev: c_int) -> CUresult {
    unsafe { *ctx = dev as usize + 1 };
    OK
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(_dev: c_int) -> CUresult {
    OK
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetCurrent(ctx: *mut usize) -> CUresult {
    unsafe { *ctx = CURRENT.with(|c| c.get()) };
    OK
}

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetCurrent(ctx: usize) -> CUresult {
    CURRENT.with(|c| c.set(ctx));
    OK
}

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSynchronize() -> CUresult {
    OK
}

/// Streams are distinct non-null handles; every operation on them runs at once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreate(stream: *mut usize, _flags: c_uint) -> CUresult {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0x1000);
    unsafe { *stream = NEXT.fetch_add(16, std::sync::atomic::Ordering::Relaxed) };
    OK
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamDestroy_v2(_stream: usize) -> CUresult {
    OK
}

/// `CUDA_ERROR_NOT_READY`.
const NOT_READY: CUresult = 600;
/// `CUDA_ERROR_LAUNCH_FAILED`.
const LAUNCH_FAILED: CUresult = 719;

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamSynchronize(stream: usize) -> CUresult {
    let started = Instant::now();
    loop {
        match cuStreamQuery(stream) {
            NOT_READY if started.elapsed() < Duration::from_secs(60) => {
                std::thread::sleep(Duration::from_micros(100))
            }
            NOT_READY => return INVALID,
            done => return done,
        }
    }
}

/// Busy while a group issued on `stream` has calls whose peers have not issued theirs.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamQuery(stream: usize) -> CUresult {
    let mut g = state();
    let s = g.get_or_insert_with(State::default);
    if s.faulted == Some(stream) {
        return LAUNCH_FAILED;
    }
    s.progress();
    // Forget finished calls, so that a query costs what is pending, not the stream's history.
    let State {
        on_stream,
        done,
        owner,
        ..
    } = s;
    let Some(pending) = on_stream.get_mut(&stream) else {
        return OK;
    };
    pending.retain(|t| {
        let finished = done.remove(t);
        if finished {
            owner.remove(t);
        }
        !finished
    });
    if pending.is_empty() { OK } else { NOT_READY }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamWaitEvent(_stream: usize, _event: usize, _flags: c_uint) -> CUresult {
    OK
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventCreate(event: *mut usize, _flags: c_uint) -> CUresult {
    unsafe { *event = 1 };
    OK
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventRecord(_event: usize, _stream: usize) -> CUresult {
    OK
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventDestroy_v2(_event: usize) -> CUresult {
    OK
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorString(_error: CUresult, text: *mut *const c_char) -> CUresult {
    unsafe { *text = c"an error of the fake CUDA driver".as_ptr() };
    OK
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorName(_error: CUresult, text: *mut *const c_char) -> CUresult {
    unsafe { *text = c"FAKE_CUDA_ERROR".as_ptr() };
    OK
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAlloc_v2(ptr: *mut u64, bytes: usize) -> CUresult {
    let words = bytes.div_ceil(8).max(1);
    let mem: Box<[u64]> = vec![0u64; words].into_boxed_slice();
    let addr = Box::into_raw(mem) as *mut u64 as u64;
    lock(&ALLOCS)
        .get_or_insert_with(HashMap::new)
        .insert(addr, words);
    unsafe { *ptr = addr };
    OK
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocAsync(ptr: *mut u64, bytes: usize, _stream: usize) -> CUresult {
    unsafe { cuMemAlloc_v2(ptr, bytes) }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemFree_v2(ptr: u64) -> CUresult {
    let Some(words) = lock(&ALLOCS).get_or_insert_with(HashMap::new).remove(&ptr) else {
        return INVALID;
    };
    let slice = std::ptr::slice_from_raw_parts_mut(ptr as *mut u64, words);
    // SAFETY: `ptr` came from `cuMemAlloc_v2` with `words` words and is freed once.
    drop(unsafe { Box::from_raw(slice) });
    OK
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemFreeAsync(ptr: u64, _stream: usize) -> CUresult {
    cuMemFree_v2(ptr)
}

/// Whether `[addr, addr + len)` lies in one live allocation.
fn allocated(addr: u64, len: usize) -> bool {
    if len == 0 {
        return true;
    }
    lock(&ALLOCS)
        .get_or_insert_with(HashMap::new)
        .iter()
        .any(|(&a, &w)| addr >= a && addr + len as u64 <= a + 8 * w as u64)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemsetD8Async(
    ptr: u64,
    value: u8,
    n: usize,
    _stream: usize,
) -> CUresult {
    if !allocated(ptr, n) {
        return INVALID;
    }
    unsafe { std::ptr::write_bytes(ptr as *mut u8, value, n) };
    OK
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: u64,
    src: *const c_void,
    n: usize,
    _s: usize,
) -> CUresult {
    if !allocated(dst, n) {
        return INVALID;
    }
    unsafe { std::ptr::copy(src.cast::<u8>(), dst as *mut u8, n) };
    OK
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: u64,
    n: usize,
    _s: usize,
) -> CUresult {
    if !allocated(src, n) {
        return INVALID;
    }
    unsafe { std::ptr::copy(src as *const u8, dst.cast::<u8>(), n) };
    OK
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(dst: u64, src: u64, n: usize, _s: usize) -> CUresult {
    if !allocated(src, n) || !allocated(dst, n) {
        return INVALID;
    }
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, n) };
    OK
}

/// `CUDA_MEMCPY2D`, as `cuda.h` lays it out.
#[repr(C)]
pub struct Memcpy2d {
    src_x: usize,
    src_y: usize,
    src_type: c_int,
    src_host: *const c_void,
    src_device: u64,
    src_array: *mut c_void,
    src_pitch: usize,
    dst_x: usize,
    dst_y: usize,
    dst_type: c_int,
    dst_host: *mut c_void,
    dst_device: u64,
    dst_array: *mut c_void,
    dst_pitch: usize,
    width: usize,
    height: usize,
}

/// `CU_MEMORYTYPE_DEVICE`.
const DEVICE_MEMORY: c_int = 2;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpy2DAsync_v2(p: *const Memcpy2d, _stream: usize) -> CUresult {
    let p = unsafe { &*p };
    if p.src_type != DEVICE_MEMORY || p.dst_type != DEVICE_MEMORY {
        return INVALID; // rankwise copies device to device only
    }
    let src = p.src_device + (p.src_y * p.src_pitch + p.src_x) as u64;
    let dst = p.dst_device + (p.dst_y * p.dst_pitch + p.dst_x) as u64;
    if p.height > 0 {
        let span = |pitch: usize| (p.height - 1) * pitch + p.width;
        if !allocated(src, span(p.src_pitch)) || !allocated(dst, span(p.dst_pitch)) {
            return INVALID;
        }
    }
    for row in 0..p.height {
        unsafe {
            std::ptr::copy(
                (src + (row * p.src_pitch) as u64) as *const u8,
                (dst + (row * p.dst_pitch) as u64) as *mut u8,
                p.width,
            )
        };
    }
    OK
}

// ---------------------------------------------------------------------------------------------
// NCCL
// ---------------------------------------------------------------------------------------------

/// One member of a communicator (what an `ncclComm_t` points to).
pub struct Comm {
    clique: u64,
    rank: usize,
    size: usize,
}

/// A call of a group, as issued.
#[derive(Clone, Copy)]
struct Call {
    kind: Kind,
    send: u64,
    recv: u64,
    count: usize,
    dtype: c_int,
    op: c_int,
    root: usize,
    peer: usize,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    AllReduce,
    Reduce,
    Broadcast,
    AllGather,
    ReduceScatter,
    AllToAll,
    Gather,
    Scatter,
    Send,
    Recv,
}

/// A call and the ticket its issuer waits on.
type Ticketed = (u64, Call);

/// Issued calls waiting for their peers, and the count of those completed.
#[derive(Default)]
struct State {
    /// Collective `seq` of clique: each member's call, with its ticket, once issued.
    colls: HashMap<(u64, u64), Vec<Option<Ticketed>>>,
    /// Next collective of each (clique, member).
    next: HashMap<(u64, usize), u64>,
    /// Sends and receives of each (clique, from, to) waiting for their match, with tickets.
    sends: HashMap<(u64, usize, usize), VecDeque<(u64, Call)>>,
    recvs: HashMap<(u64, usize, usize), VecDeque<(u64, Call)>>,
    /// Tickets of calls done.
    done: std::collections::HashSet<u64>,
    ticket: u64,
    /// Cliques made by `ncclCommInitRank`, by unique id.
    by_id: HashMap<[u8; 16], u64>,
    next_clique: u64,
    /// PreMulSum operators: scalar as f64.
    premul: HashMap<c_int, f64>,
    /// Tickets of the calls issued on each stream.
    on_stream: HashMap<usize, Vec<u64>>,
    /// The communicator (clique, rank) that issued each ticket.
    owner: HashMap<u64, (u64, usize)>,
    /// Calls issued by the member the injected fault is for, and the stream it broke.
    fault_count: i64,
    faulted: Option<usize>,
    error: Option<String>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn state() -> MutexGuard<'static, Option<State>> {
    lock(&STATE)
}

/// A call as issued: its communicator, the call, its stream.
type Issued = (*const Comm, Call, usize);

thread_local! {
    /// Calls of the open group.
    static GROUP: std::cell::RefCell<Option<Vec<Issued>>> = const { std::cell::RefCell::new(None) };
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetVersion(version: *mut c_int) -> c_int {
    unsafe { *version = env_number("RANKWISE_FAKE_NCCL_VERSION", 23203) as c_int };
    OK
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGetErrorString(_code: c_int) -> *const c_char {
    c"an error of the fake NCCL".as_ptr()
}

/// The text of the error the calls ran into (kept alive until the next call replaces it).
#[unsafe(no_mangle)]
pub extern "C" fn ncclGetLastError(_comm: *mut c_void) -> *const c_char {
    static LAST: Mutex<Option<std::ffi::CString>> = Mutex::new(None);
    let text = state()
        .as_ref()
        .and_then(|s| s.error.clone())
        .unwrap_or_default();
    let mut last = lock(&LAST);
    let c = std::ffi::CString::new(text).unwrap_or_default();
    last.insert(c).as_ptr()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetUniqueId(id: *mut u8) -> c_int {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let mut bytes = [0u8; 128];
    bytes[..8].copy_from_slice(b"FAKENCCL");
    bytes[8..16].copy_from_slice(
        &NEXT
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .to_le_bytes(),
    );
    bytes[16..24].copy_from_slice(&u64::from(std::process::id()).to_le_bytes());
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), id, 128) };
    OK
}

fn new_comm(clique: u64, rank: usize, size: usize) -> *mut Comm {
    Box::into_raw(Box::new(Comm { clique, rank, size }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitAll(
    comms: *mut *mut Comm,
    n: c_int,
    _devs: *const c_int,
) -> c_int {
    let mut g = state();
    let s = g.get_or_insert_with(State::default);
    s.next_clique += 1;
    let clique = s.next_clique;
    for r in 0..n.max(0) as usize {
        unsafe { *comms.add(r) = new_comm(clique, r, n as usize) };
    }
    OK
}

/// `ncclUniqueId`, passed by value.
#[repr(C)]
pub struct UniqueId {
    internal: [u8; 128],
}

/// Members of one process meet by id (a multi-process job would need a real NCCL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRank(
    comm: *mut *mut Comm,
    n: c_int,
    id: UniqueId,
    rank: c_int,
) -> c_int {
    if rank < 0 || rank >= n {
        return NCCL_INVALID_ARGUMENT;
    }
    let key: [u8; 16] = id.internal[..16].try_into().unwrap_or([0; 16]);
    let mut g = state();
    let s = g.get_or_insert_with(State::default);
    let clique = match s.by_id.get(&key) {
        Some(&c) => c,
        None => {
            s.next_clique += 1;
            s.by_id.insert(key, s.next_clique);
            s.next_clique
        }
    };
    unsafe { *comm = new_comm(clique, rank as usize, n as usize) };
    OK
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommDestroy(comm: *mut Comm) -> c_int {
    if !comm.is_null() {
        drop(unsafe { Box::from_raw(comm) });
    }
    OK
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommAbort(comm: *mut Comm) -> c_int {
    if comm.is_null() {
        return OK;
    }
    // Its pending calls end, as NCCL's kernels do on abort: their streams drain, and no peer
    // can complete a call with this member's buffers any more.
    let (clique, rank) = unsafe { ((*comm).clique, (*comm).rank) };
    let mut g = state();
    let s = g.get_or_insert_with(State::default);
    for ((c, _), slot) in s.colls.iter_mut() {
        if *c == clique && slot.get(rank).is_some_and(Option::is_some) {
            slot[rank] = None;
        }
    }
    for (&(c, from, to), q) in s.sends.iter_mut().chain(s.recvs.iter_mut()) {
        if c == clique && (from == rank || to == rank) {
            q.clear();
        }
    }
    let ended: Vec<u64> = s
        .owner
        .iter()
        .filter(|&(_, &o)| o == (clique, rank))
        .map(|(&t, _)| t)
        .collect();
    s.done.extend(ended);
    drop(g);
    unsafe { ncclCommDestroy(comm) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommGetAsyncError(_comm: *mut Comm, error: *mut c_int) -> c_int {
    let failed = state().as_ref().is_some_and(|s| s.error.is_some());
    unsafe { *error = if failed { NCCL_INVALID_USAGE } else { OK } };
    OK
}

/// Not used by rankwise (groups are made by their members); present because NCCL has it.
#[unsafe(no_mangle)]
pub extern "C" fn ncclCommSplit(
    _comm: *mut Comm,
    _color: c_int,
    _key: c_int,
    _new: *mut *mut Comm,
    _config: *mut c_void,
) -> c_int {
    NCCL_INVALID_USAGE
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommFinalize(_comm: *mut Comm) -> c_int {
    OK
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommUserRank(comm: *const Comm, rank: *mut c_int) -> c_int {
    unsafe { *rank = (*comm).rank as c_int };
    OK
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommCount(comm: *const Comm, count: *mut c_int) -> c_int {
    unsafe { *count = (*comm).size as c_int };
    OK
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclRedOpCreatePreMulSum(
    op: *mut c_int,
    scalar: *const c_void,
    dtype: c_int,
    _residence: c_int,
    _comm: *mut Comm,
) -> c_int {
    let value = unsafe { reduce::read_scalar(scalar, dtype) };
    let mut g = state();
    let s = g.get_or_insert_with(State::default);
    let handle = 100 + s.premul.len() as c_int;
    s.premul.insert(handle, value);
    unsafe { *op = handle };
    OK
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclRedOpDestroy(_op: c_int, _comm: *mut Comm) -> c_int {
    OK
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGroupStart() -> c_int {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.is_none() {
            *g = Some(Vec::new());
        }
    });
    OK
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGroupEnd() -> c_int {
    let calls = GROUP.with(|g| g.borrow_mut().take()).unwrap_or_default();
    issue(calls)
}

/// Adds a call to the open group, or issues it alone.
fn enqueue(comm: *const Comm, call: Call, stream: usize) -> c_int {
    let in_group = GROUP.with(|g| match g.borrow_mut().as_mut() {
        Some(v) => {
            v.push((comm, call, stream));
            true
        }
        None => false,
    });
    if in_group {
        OK
    } else {
        issue(vec![(comm, call, stream)])
    }
}

/// Registers a group's calls on their streams; they complete as their peers issue theirs.
fn issue(calls: Vec<(*const Comm, Call, usize)>) -> c_int {
    let mut g = state();
    let s = g.get_or_insert_with(State::default);
    for (comm, call, stream) in calls {
        // SAFETY: communicators passed in were made by this library and are alive.
        let c = unsafe { &*comm };
        s.ticket += 1;
        let t = s.ticket;
        s.on_stream.entry(stream).or_default().push(t);
        s.owner.insert(t, (c.clique, c.rank));
        if c.size > 1 && c.rank as i64 == env_number("RANKWISE_FAKE_FAIL_RANK", -1) {
            s.fault_count += 1;
            if s.fault_count == env_number("RANKWISE_FAKE_FAIL_AFTER", 0) {
                s.faulted = Some(stream);
            }
        }
        match call.kind {
            Kind::Send => s
                .sends
                .entry((c.clique, c.rank, call.peer))
                .or_default()
                .push_back((t, call)),
            Kind::Recv => s
                .recvs
                .entry((c.clique, call.peer, c.rank))
                .or_default()
                .push_back((t, call)),
            _ => {
                let seq = s.next.entry((c.clique, c.rank)).or_insert(0);
                let key = (c.clique, *seq);
                *seq += 1;
                let slot = s.colls.entry(key).or_insert_with(|| vec![None; c.size]);
                slot[c.rank] = Some((t, call));
            }
        }
    }
    s.progress();
    OK
}

impl State {
    /// Runs every call whose peers have all issued theirs.
    fn progress(&mut self) {
        let ready: Vec<(u64, u64)> = self
            .colls
            .iter()
            .filter(|(_, v)| v.iter().all(Option::is_some))
            .map(|(k, _)| *k)
            .collect();
        for key in ready {
            let Some(calls) = self.colls.remove(&key) else {
                continue;
            };
            let (tickets, calls): (Vec<u64>, Vec<Call>) = calls.into_iter().flatten().unzip();
            if let Err(e) = reduce::collective(&calls, &self.premul) {
                // Never completes: the watchdog hears of it through the asynchronous error.
                self.error = Some(e);
                continue;
            }
            self.done.extend(tickets);
        }
        let pairs: Vec<(u64, usize, usize)> = self.sends.keys().copied().collect();
        for pair in pairs {
            while let (Some(sq), Some(rq)) = (self.sends.get_mut(&pair), self.recvs.get_mut(&pair))
            {
                let (Some((ts, send)), Some((tr, recv))) =
                    (sq.front().copied(), rq.front().copied())
                else {
                    break;
                };
                sq.pop_front();
                rq.pop_front();
                if send.count != recv.count || send.dtype != recv.dtype {
                    self.error = Some(format!(
                        "a send of {} elements met a receive of {}",
                        send.count, recv.count
                    ));
                    continue;
                }
                let bytes = send.count.min(recv.count) * reduce::size(send.dtype);
                // SAFETY: both buffers hold `count` elements (the caller's contract).
                unsafe { std::ptr::copy(send.send as *const u8, recv.recv as *mut u8, bytes) };
                self.done.insert(ts);
                self.done.insert(tr);
            }
        }
    }
}

fn coll(
    kind: Kind,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: c_int,
    op: c_int,
    root: c_int,
) -> Call {
    Call {
        kind,
        send: send as u64,
        recv: recv as u64,
        count,
        dtype,
        op,
        root: root.max(0) as usize,
        peer: 0,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclAllReduce(
    s: *const c_void,
    r: *mut c_void,
    n: usize,
    t: c_int,
    op: c_int,
    comm: *const Comm,
    st: usize,
) -> c_int {
    enqueue(comm, coll(Kind::AllReduce, s, r, n, t, op, 0), st)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclReduce(
    s: *const c_void,
    r: *mut c_void,
    n: usize,
    t: c_int,
    op: c_int,
    root: c_int,
    comm: *const Comm,
    st: usize,
) -> c_int {
    enqueue(comm, coll(Kind::Reduce, s, r, n, t, op, root), st)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclBroadcast(
    s: *const c_void,
    r: *mut c_void,
    n: usize,
    t: c_int,
    root: c_int,
    comm: *const Comm,
    st: usize,
) -> c_int {
    enqueue(comm, coll(Kind::Broadcast, s, r, n, t, 0, root), st)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclAllGather(
    s: *const c_void,
    r: *mut c_void,
    n: usize,
    t: c_int,
    comm: *const Comm,
    st: usize,
) -> c_int {
    enqueue(comm, coll(Kind::AllGather, s, r, n, t, 0, 0), st)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclReduceScatter(
    s: *const c_void,
    r: *mut c_void,
    n: usize,
    t: c_int,
    op: c_int,
    comm: *const Comm,
    st: usize,
) -> c_int {
    enqueue(comm, coll(Kind::ReduceScatter, s, r, n, t, op, 0), st)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclAlltoAll(
    s: *const c_void,
    r: *mut c_void,
    n: usize,
    t: c_int,
    comm: *const Comm,
    st: usize,
) -> c_int {
    enqueue(comm, coll(Kind::AllToAll, s, r, n, t, 0, 0), st)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGather(
    s: *const c_void,
    r: *mut c_void,
    n: usize,
    t: c_int,
    root: c_int,
    comm: *const Comm,
    st: usize,
) -> c_int {
    enqueue(comm, coll(Kind::Gather, s, r, n, t, 0, root), st)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclScatter(
    s: *const c_void,
    r: *mut c_void,
    n: usize,
    t: c_int,
    root: c_int,
    comm: *const Comm,
    st: usize,
) -> c_int {
    enqueue(comm, coll(Kind::Scatter, s, r, n, t, 0, root), st)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclSend(
    s: *const c_void,
    n: usize,
    t: c_int,
    peer: c_int,
    comm: *const Comm,
    st: usize,
) -> c_int {
    let mut c = coll(Kind::Send, s, std::ptr::null_mut(), n, t, 0, 0);
    c.peer = peer.max(0) as usize;
    enqueue(comm, c, st)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclRecv(
    r: *mut c_void,
    n: usize,
    t: c_int,
    peer: c_int,
    comm: *const Comm,
    st: usize,
) -> c_int {
    let mut c = coll(Kind::Recv, std::ptr::null(), r, n, t, 0, 0);
    c.peer = peer.max(0) as usize;
    enqueue(comm, c, st)
}
