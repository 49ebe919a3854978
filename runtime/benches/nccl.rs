//! The NCCL backend against raw NCCL on the same GPUs, in nccl-tests' terms: per collective and
//! size (8 B to 1 GiB), the time per call, algorithm bandwidth (bytes / time) and bus bandwidth
//! (algbw × the collective's traffic factor), for rankwise on device tensors and for the same
//! NCCL call issued directly (no rankwise), measured in one run; then a batch of K same-kind
//! collectives (rankwise's batch, NCCL's group).
//!
//! ```sh
//! cargo bench -p rankwise-runtime --features nccl --bench nccl
//! ```
//!
//! One process drives every visible GPU (a thread per GPU, as `RANKWISE_BACKEND=nccl` without a
//! launcher does); `RANKWISE_BENCH_GPUS` uses fewer, `RANKWISE_BENCH_MAX` caps the size in bytes,
//! `RANKWISE_BENCH_QUICK=1` runs a few sizes. rankwise's calls return when the collective has
//! finished on the rank (its stream is synchronised), so the raw loop synchronises after each
//! call too: both columns time the same thing. Targets (issue 10): ≤ 1.05× raw NCCL from 1 MiB
//! up, and a batch issued as one group.
//!
//! Without a GPU the raw half cannot run; the rankwise half then runs on the NCCL emulation at
//! small sizes, so that the benchmark itself is exercised (its times mean nothing).

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, sys};
use nccl_sys::{self as ffi, Nccl};
use rankwise_runtime::{Ctx, Engine, ReduceOp, Result, launch_on};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Coll {
    AllReduce,
    AllGather,
    Broadcast,
    Reduce,
    ReduceScatter,
    AllToAll,
}

const COLLS: [Coll; 6] = [
    Coll::AllReduce,
    Coll::AllGather,
    Coll::Broadcast,
    Coll::Reduce,
    Coll::ReduceScatter,
    Coll::AllToAll,
];

impl Coll {
    fn name(self) -> &'static str {
        match self {
            Coll::AllReduce => "all_reduce",
            Coll::AllGather => "all_gather",
            Coll::Broadcast => "broadcast",
            Coll::Reduce => "reduce",
            Coll::ReduceScatter => "reduce_scatter",
            Coll::AllToAll => "all_to_all",
        }
    }

    /// nccl-tests' bus bandwidth factor: how much of the size each rank's link carries.
    fn bus_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            Coll::AllReduce => 2.0 * (n - 1.0) / n,
            Coll::AllGather | Coll::ReduceScatter | Coll::AllToAll => (n - 1.0) / n,
            Coll::Broadcast | Coll::Reduce => 1.0,
        }
    }
}

/// The f32 count of a size in bytes, as a whole number of blocks of `n` (at least one each).
fn count(bytes: usize, n: usize) -> usize {
    (bytes / 4 / n).max(1) * n
}

fn sizes(max: usize) -> Vec<usize> {
    let mut s = Vec::new();
    let mut b = 8usize;
    while b <= max {
        s.push(b);
        b *= 4;
    }
    s
}

/// Calls per timed sample: enough to amortise the launch at small sizes, few at large ones.
fn iters(bytes: usize, quick: bool) -> usize {
    if quick {
        return 3;
    }
    ((256 << 20) / bytes.max(1)).clamp(5, 200)
}

/// One row: (collective, size in bytes, seconds per call).
type Row = (Coll, usize, f64);

/// rankwise on `n` ranks of `engine`: every collective at every size on device tensors (what a
/// `Ctx` makes), each rank timing its own loop between barriers; the slowest rank per point.
fn rankwise(engine: Engine, n: usize, sizes: &[usize], quick: bool) -> Result<Vec<Row>> {
    let ranks = launch_on(engine, n, |ctx| {
        let mut rows = Vec::new();
        for &c in &COLLS {
            for &bytes in sizes {
                let secs = time_rankwise(ctx, c, count(bytes, n), iters(bytes, quick))?;
                rows.push((c, bytes, secs));
            }
        }
        Ok(rows)
    })?;
    let all = ranks.all().unwrap_or_default();
    let mut out: Vec<Row> = all.first().cloned().unwrap_or_default();
    for rank in &all {
        for (o, r) in out.iter_mut().zip(rank) {
            o.2 = o.2.max(r.2);
        }
    }
    Ok(out)
}

fn time_rankwise(ctx: &mut Ctx, c: Coll, count: usize, iters: usize) -> Result<f64> {
    let n = ctx.world();
    let mut a = ctx.full([count], 1.0f32)?;
    let mut b = ctx.zeros::<f32>([count])?;
    let part = ctx.full([count / n], 1.0f32)?;
    let mut part_out = ctx.zeros::<f32>([count / n])?;
    let mut once = |ctx: &mut Ctx| -> Result<()> {
        match c {
            Coll::AllReduce => ctx.all_reduce(&mut a, ReduceOp::Sum),
            Coll::AllGather => ctx.all_gather(&part, &mut b, 0),
            Coll::Broadcast => ctx.broadcast(&mut a, 0),
            Coll::Reduce => ctx.reduce(&mut a, 0, ReduceOp::Sum),
            Coll::ReduceScatter => ctx.reduce_scatter(&a, &mut part_out, ReduceOp::Sum, 0),
            Coll::AllToAll => ctx.all_to_all(&a, &mut b, 0),
        }
    };
    once(ctx)?; // warm-up: communicators, buffers
    ctx.barrier()?;
    let start = Instant::now();
    for _ in 0..iters {
        once(ctx)?;
    }
    Ok(start.elapsed().as_secs_f64() / iters as f64)
}

/// K small all_reduces: one by one, and as one batch (one NCCL group); seconds per K.
fn rankwise_batch(engine: Engine, n: usize, k: usize, bytes: usize) -> Result<(f64, f64)> {
    let ranks = launch_on(engine, n, |ctx| {
        let mut ts: Vec<_> = (0..k)
            .map(|_| ctx.full([bytes / 4], 1.0f32))
            .collect::<Result<_>>()?;
        let mut one_by_one = f64::MAX;
        let mut batched = f64::MAX;
        for _ in 0..5 {
            ctx.barrier()?;
            let start = Instant::now();
            for t in &mut ts {
                ctx.all_reduce(t, ReduceOp::Sum)?;
            }
            one_by_one = one_by_one.min(start.elapsed().as_secs_f64());
            ctx.barrier()?;
            let start = Instant::now();
            let mut batch = ctx.batch();
            for t in &mut ts {
                batch.all_reduce(t, ReduceOp::Sum);
            }
            batch.run()?;
            batched = batched.min(start.elapsed().as_secs_f64());
        }
        Ok((one_by_one, batched))
    })?;
    let all = ranks.all().unwrap_or_default();
    let worst = |f: fn(&(f64, f64)) -> f64| all.iter().map(f).fold(0.0, f64::max);
    Ok((worst(|p| p.0), worst(|p| p.1)))
}

/// The raw side: NCCL's own calls on buffers of this process's GPUs.
mod raw {
    use super::*;

    pub struct Gpu {
        pub ctx: Arc<CudaContext>,
        pub stream: Arc<CudaStream>,
        pub comm: ffi::ncclComm_t,
    }

    // SAFETY: each `Gpu` is used by one thread at a time (its own; threads borrow distinct
    // elements of the list); NCCL communicators may be used from any thread, one call at a time.
    unsafe impl Send for Gpu {}
    // SAFETY: as for `Send`: shared references to a `Gpu` never reach two threads at once.
    unsafe impl Sync for Gpu {}

    fn check(code: ffi::ncclResult_t, what: &str) -> std::result::Result<(), String> {
        if code == ffi::ncclSuccess {
            Ok(())
        } else {
            Err(format!("{what} failed with NCCL code {code}"))
        }
    }

    fn need<T>(f: Option<T>, name: &str) -> std::result::Result<T, String> {
        f.ok_or_else(|| format!("the loaded NCCL has no {name}"))
    }

    /// NCCL, the driver and `n` GPUs with one communicator clique, or why not.
    pub fn open(n: Option<usize>) -> std::result::Result<(&'static Nccl, Vec<Gpu>), String> {
        let nccl = Nccl::load().map_err(|e| e.to_string())?;
        // SAFETY: only tries to dlopen the driver library.
        if !unsafe { sys::is_culib_present() } {
            return Err("no CUDA driver library (libcuda.so) on this machine".into());
        }
        let visible = std::panic::catch_unwind(CudaContext::device_count)
            .map_err(|_| "the CUDA driver is missing a function".to_string())?
            .map_err(|e| format!("{e:?}"))? as usize;
        let n = n.unwrap_or(visible).min(visible);
        if n == 0 {
            return Err("the CUDA driver sees no GPU".into());
        }
        let init = need(nccl.api.ncclCommInitAll, "ncclCommInitAll")?;
        let mut comms: Vec<ffi::ncclComm_t> = vec![std::ptr::null_mut(); n];
        let devs: Vec<c_int> = (0..n as c_int).collect();
        // SAFETY: room for `n` handles; `devs` are distinct visible GPUs.
        check(
            unsafe { init(comms.as_mut_ptr(), n as c_int, devs.as_ptr()) },
            "ncclCommInitAll",
        )?;
        let gpus = comms
            .into_iter()
            .enumerate()
            .map(|(i, comm)| {
                let ctx = CudaContext::new(i).map_err(|e| format!("{e:?}"))?;
                // SAFETY: every buffer here is used on its GPU's one stream.
                unsafe { ctx.disable_event_tracking() };
                let stream = ctx.new_stream().map_err(|e| format!("{e:?}"))?;
                Ok(Gpu { ctx, stream, comm })
            })
            .collect::<std::result::Result<_, String>>()?;
        Ok((nccl, gpus))
    }

    /// Runs `work` on a thread per GPU (its context current, with a barrier shared by all),
    /// and returns each GPU's result in order.
    fn on_every_gpu<T: Send>(
        gpus: &[Gpu],
        work: impl Fn(&Gpu, &Barrier) -> std::result::Result<T, String> + Sync,
    ) -> Vec<std::result::Result<T, String>> {
        let barrier = Barrier::new(gpus.len());
        std::thread::scope(|s| {
            let handles: Vec<_> = gpus
                .iter()
                .map(|g| {
                    let (barrier, work) = (&barrier, &work);
                    s.spawn(move || {
                        g.ctx.bind_to_thread().map_err(|e| format!("{e:?}"))?;
                        work(g, barrier)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("a GPU thread panicked".into()))
                })
                .collect()
        })
    }

    /// Issues one collective of `count` f32s between `send` and `recv` on `g`'s stream.
    fn issue(
        nccl: &Nccl,
        g: &Gpu,
        c: Coll,
        count: usize,
        n: usize,
        send: &CudaSlice<u8>,
        recv: &CudaSlice<u8>,
    ) -> std::result::Result<(), String> {
        let api = &nccl.api;
        let s = g.stream.cu_stream() as ffi::cudaStream_t;
        let (sp, _) = send.device_ptr(&g.stream);
        let (rp, _) = recv.device_ptr(&g.stream);
        let (sp, rp) = (sp as usize as *const c_void, rp as usize as *mut c_void);
        let f32t = ffi::ncclFloat32;
        // SAFETY: both buffers hold the largest size's bytes (≥ what each call reads or
        // writes), live until the caller has synchronised the stream.
        let code = unsafe {
            match c {
                Coll::AllReduce => need(api.ncclAllReduce, "ncclAllReduce")?(
                    sp,
                    rp,
                    count,
                    f32t,
                    ffi::ncclSum,
                    g.comm,
                    s,
                ),
                Coll::AllGather => {
                    need(api.ncclAllGather, "ncclAllGather")?(sp, rp, count / n, f32t, g.comm, s)
                }
                Coll::Broadcast => {
                    need(api.ncclBroadcast, "ncclBroadcast")?(sp, rp, count, f32t, 0, g.comm, s)
                }
                Coll::Reduce => need(api.ncclReduce, "ncclReduce")?(
                    sp,
                    rp,
                    count,
                    f32t,
                    ffi::ncclSum,
                    0,
                    g.comm,
                    s,
                ),
                Coll::ReduceScatter => need(api.ncclReduceScatter, "ncclReduceScatter")?(
                    sp,
                    rp,
                    count / n,
                    f32t,
                    ffi::ncclSum,
                    g.comm,
                    s,
                ),
                Coll::AllToAll => match api.ncclAlltoAll {
                    Some(f) => f(sp, rp, count / n, f32t, g.comm, s),
                    None => {
                        // Before NCCL 2.28: grouped sends and receives, as rankwise lowers it.
                        let (send_f, recv_f) = (
                            need(api.ncclSend, "ncclSend")?,
                            need(api.ncclRecv, "ncclRecv")?,
                        );
                        check(need(api.ncclGroupStart, "ncclGroupStart")?(), "group start")?;
                        let block = count / n;
                        for peer in 0..n {
                            let off = peer * block * 4;
                            check(
                                send_f(sp.byte_add(off), block, f32t, peer as c_int, g.comm, s),
                                "ncclSend",
                            )?;
                            check(
                                recv_f(rp.byte_add(off), block, f32t, peer as c_int, g.comm, s),
                                "ncclRecv",
                            )?;
                        }
                        need(api.ncclGroupEnd, "ncclGroupEnd")?()
                    }
                },
            }
        };
        check(code, c.name())
    }

    /// Every collective at every size, each GPU's thread timing its loop (synchronising after
    /// each call, as rankwise's blocking calls do); the slowest GPU per point.
    pub fn run(
        nccl: &'static Nccl,
        gpus: &[Gpu],
        sizes: &[usize],
        quick: bool,
    ) -> std::result::Result<Vec<Row>, String> {
        let n = gpus.len();
        let max = count(*sizes.last().unwrap_or(&8), n) * 4;
        let per_gpu = on_every_gpu(gpus, |g, barrier| {
            let send = g
                .stream
                .alloc_zeros::<u8>(max)
                .map_err(|e| format!("{e:?}"))?;
            let recv = g
                .stream
                .alloc_zeros::<u8>(max)
                .map_err(|e| format!("{e:?}"))?;
            let sync = || g.stream.synchronize().map_err(|e| format!("{e:?}"));
            let mut rows = Vec::new();
            for &c in &COLLS {
                for &bytes in sizes {
                    let k = count(bytes, n);
                    issue(nccl, g, c, k, n, &send, &recv)?;
                    sync()?;
                    barrier.wait();
                    let it = iters(bytes, quick);
                    let start = Instant::now();
                    for _ in 0..it {
                        issue(nccl, g, c, k, n, &send, &recv)?;
                        sync()?;
                    }
                    rows.push((c, bytes, start.elapsed().as_secs_f64() / it as f64));
                }
            }
            Ok(rows)
        });
        let per_gpu = per_gpu
            .into_iter()
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let mut out = per_gpu.first().cloned().unwrap_or_default();
        for g in &per_gpu {
            for (o, r) in out.iter_mut().zip(g) {
                o.2 = o.2.max(r.2);
            }
        }
        Ok(out)
    }

    /// K all_reduces of `bytes` each as one NCCL group; seconds per group, slowest GPU.
    pub fn batch(
        nccl: &'static Nccl,
        gpus: &[Gpu],
        k: usize,
        bytes: usize,
    ) -> std::result::Result<f64, String> {
        let n = gpus.len();
        let times = on_every_gpu(gpus, |g, barrier| {
            let bufs: Vec<CudaSlice<u8>> = (0..k)
                .map(|_| g.stream.alloc_zeros::<u8>(bytes))
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| format!("{e:?}"))?;
            let (start_f, end_f) = (
                need(nccl.api.ncclGroupStart, "ncclGroupStart")?,
                need(nccl.api.ncclGroupEnd, "ncclGroupEnd")?,
            );
            let mut best = f64::MAX;
            for _ in 0..5 {
                barrier.wait();
                let start = Instant::now();
                // SAFETY: no arguments; paired with the end below.
                check(unsafe { start_f() }, "ncclGroupStart")?;
                for b in &bufs {
                    issue(nccl, g, Coll::AllReduce, bytes / 4, n, b, b)?;
                }
                // SAFETY: closes the group above.
                check(unsafe { end_f() }, "ncclGroupEnd")?;
                g.stream.synchronize().map_err(|e| format!("{e:?}"))?;
                best = best.min(start.elapsed().as_secs_f64());
            }
            Ok(best)
        });
        times
            .into_iter()
            .try_fold(0.0f64, |acc, t| t.map(|t| acc.max(t)))
    }
}

fn human_bytes(b: usize) -> String {
    match b {
        b if b >= 1 << 30 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

fn gbps(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / secs / 1e9
}

fn main() -> Result<()> {
    let quick = std::env::var_os("RANKWISE_BENCH_QUICK").is_some();
    let env_usize = |k: &str| std::env::var(k).ok().and_then(|v| v.trim().parse().ok());
    let max = env_usize("RANKWISE_BENCH_MAX").unwrap_or(if quick { 1 << 20 } else { 1 << 30 });
    let (nccl, gpus) = match raw::open(env_usize("RANKWISE_BENCH_GPUS")) {
        Ok(found) => found,
        Err(why) => {
            println!("No GPU to measure on ({why}): raw NCCL cannot run here.");
            println!("Running rankwise's half on the NCCL emulation at small sizes instead, to");
            println!("check the benchmark itself (these times are host copies, not NCCL):\n");
            let sizes = sizes(max.min(64 << 10));
            let rows = rankwise(Engine::NcclHost, 2, &sizes, true)?;
            println!("| op | size | rankwise (emulated) |");
            println!("|---|---:|---:|");
            for (c, bytes, secs) in rows {
                println!(
                    "| {} | {} | {:.2} µs |",
                    c.name(),
                    human_bytes(bytes),
                    secs * 1e6
                );
            }
            let (one, batched) = rankwise_batch(Engine::NcclHost, 2, 16, 1024)?;
            println!(
                "\n16 × 1 KiB all_reduce (emulated): one by one {:.1} µs, batched {:.1} µs",
                one * 1e6,
                batched * 1e6
            );
            return Ok(());
        }
    };
    let n = gpus.len();
    let (a, b, c) = nccl.version_triple();
    println!(
        "NCCL {a}.{b}.{c} ({}), {n} GPU(s) in one process\n",
        nccl.path.display()
    );
    let sizes = sizes(max);
    let raw_rows = raw::run(nccl, &gpus, &sizes, quick).map_err(|detail| {
        rankwise_runtime::Error::Backend {
            backend: "nccl",
            detail,
        }
    })?;
    let ours = rankwise(Engine::Nccl, n, &sizes, quick)?;
    println!(
        "| op | size | rankwise time | algbw | busbw | raw NCCL time | algbw | busbw | rankwise / raw |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut worst_large: f64 = 0.0;
    for ((c, bytes, mine), (_, _, theirs)) in ours.iter().zip(&raw_rows) {
        let ratio = mine / theirs;
        if *bytes >= 1 << 20 {
            worst_large = worst_large.max(ratio);
        }
        let f = c.bus_factor(n);
        println!(
            "| {} | {} | {:.2} µs | {:.2} GB/s | {:.2} GB/s | {:.2} µs | {:.2} GB/s | {:.2} GB/s | {ratio:.3}× |",
            c.name(),
            human_bytes(*bytes),
            mine * 1e6,
            gbps(*bytes, *mine),
            gbps(*bytes, *mine) * f,
            theirs * 1e6,
            gbps(*bytes, *theirs),
            gbps(*bytes, *theirs) * f,
        );
    }
    if worst_large > 0.0 {
        println!(
            "\nFrom 1 MiB up, rankwise is at most {worst_large:.3}× raw NCCL (target ≤ 1.05×)."
        );
    }
    let k = 64;
    let (one, batched) = rankwise_batch(Engine::Nccl, n, k, 1024)?;
    let group =
        raw::batch(nccl, &gpus, k, 1024).map_err(|detail| rankwise_runtime::Error::Backend {
            backend: "nccl",
            detail,
        })?;
    println!(
        "\n{k} × 1 KiB all_reduce: rankwise one by one {:.1} µs, rankwise batch {:.1} µs, raw NCCL \
         group {:.1} µs (batch / group {:.2}×)",
        one * 1e6,
        batched * 1e6,
        group * 1e6,
        batched / group
    );
    Ok(())
}
