//! The MPI backend against raw MPI (rsmpi's blocking collectives, no rankwise), measured side by
//! side in one job, and a bucket of small all_reduces batched against one by one.
//!
//! Run: `cargo bench -p rankwise-runtime --features mpi --bench mpi` (it starts `mpirun` itself,
//! at worlds 2 and 4, with the agreement check on and off; `RANKWISE_BENCH_QUICK=1` for a smoke
//! run; `RANKWISE_BENCH_ONLY=sizes` or `=batch` for one of the two tables; `RANKWISE_BENCH_SIZES=8,65536`
//! for chosen sizes; `RANKWISE_BENCH_TENSORS=vec` makes the sizes table's tensors with
//! `Tensor::from_vec`, outside the ranks' shared heap, to measure the paths such tensors take).
//! Processes are oversubscribed on small machines: at world 4 on 2 cores, every figure
//! includes waiting for a core, for rankwise and raw MPI alike.

use std::process::Command;
use std::time::Instant;

use mpi::collective::SystemOperation;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::*;
use rankwise_runtime::__private::{Guard, RankTable, Run, Table};
use rankwise_runtime::{Ctx, Engine, ReduceOp, Result, Tensor, launch};

const KIB: usize = 1024;

fn quick() -> bool {
    std::env::var_os("RANKWISE_BENCH_QUICK").is_some()
}

/// The table `RANKWISE_BENCH_ONLY` names (`sizes` or `batch`), or both.
fn wanted(table: &str) -> bool {
    std::env::var("RANKWISE_BENCH_ONLY").map_or(true, |o| o.is_empty() || o == table)
}

fn sizes() -> Vec<usize> {
    if !wanted("sizes") {
        return Vec::new();
    }
    // `RANKWISE_BENCH_SIZES=8,65536`: only these sizes, in bytes (for measuring one change).
    if let Ok(list) = std::env::var("RANKWISE_BENCH_SIZES") {
        let chosen: Vec<usize> = list
            .split(',')
            .filter_map(|s| s.trim().parse().ok())
            .collect();
        if !chosen.is_empty() {
            return chosen;
        }
    }
    if quick() {
        vec![8, 64 * KIB]
    } else {
        vec![8, KIB, 64 * KIB, 1024 * KIB, 16 * 1024 * KIB]
    }
}

/// A tensor of `numel` copies of `v`: allocated by rankwise (under MPI, in the ranks' shared
/// heap), or with `RANKWISE_BENCH_TENSORS=vec` from a `Vec` (in the rank's own memory).
fn tensor(numel: usize, v: f32) -> Result<Tensor<f32>> {
    if std::env::var("RANKWISE_BENCH_TENSORS").is_ok_and(|t| t == "vec") {
        Tensor::from_vec([numel], vec![v; numel])
    } else {
        Tensor::full([numel], v)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Calls per sample and samples, for a size.
fn plan(size: usize) -> (usize, usize) {
    let k = (4 * 1024 * KIB / size.max(64)).clamp(2, 500);
    (
        if quick() { k.min(20) } else { k },
        if quick() { 3 } else { 9 },
    )
}

/// Seconds per call of `body`, `k` calls started together, slowest rank (max over ranks).
fn time(world: &SimpleCommunicator, k: usize, mut body: impl FnMut()) -> f64 {
    world.barrier();
    let t = Instant::now();
    for _ in 0..k {
        body();
    }
    let mine = t.elapsed().as_secs_f64() / k as f64;
    let mut slowest = 0.0f64;
    world.all_reduce_into(&mine, &mut slowest, SystemOperation::max());
    slowest
}

fn fmt(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.2} µs", s * 1e6)
    } else {
        format!("{:.2} ms", s * 1e3)
    }
}

fn size_name(b: usize) -> String {
    match b {
        b if b >= 1024 * KIB => format!("{} MiB", b / (1024 * KIB)),
        b if b >= KIB => format!("{} KiB", b / KIB),
        b => format!("{b} B"),
    }
}

/// One row per op and size: rankwise, raw MPI, and their ratio (medians, interleaved samples).
fn measure(ctx: &mut Ctx) -> Result<Vec<String>> {
    let raw = SimpleCommunicator::world().duplicate();
    let n = ctx.world();
    let mut rows = Vec::new();
    for size in sizes() {
        let numel = (size / 4).max(n);
        let numel = numel / n * n;
        let (k, samples) = plan(size);
        let src = vec![1.0f32; numel];
        let mut dst = vec![0.0f32; numel];
        let part = numel / n;
        let mut t = tensor(numel, 1.0)?;
        let small = tensor(part, 1.0)?;
        let mut out = tensor(numel, 0.0)?;
        let mut part_out = tensor(part, 0.0)?;
        for name in [
            "all_reduce",
            "all_gather",
            "broadcast",
            "reduce_scatter",
            "all_to_all",
        ] {
            let (mut ours, mut theirs) = (Vec::new(), Vec::new());
            for _ in 0..samples {
                let mut err = Ok(());
                ours.push(time(&raw, k, || {
                    let r = match name {
                        "all_reduce" => ctx.all_reduce(&mut t, ReduceOp::Sum),
                        "all_gather" => ctx.all_gather(&small, &mut out, 0),
                        "broadcast" => ctx.broadcast(&mut t, 0),
                        "reduce_scatter" => ctx.reduce_scatter(&t, &mut part_out, ReduceOp::Sum, 0),
                        _ => ctx.all_to_all(&t, &mut out, 0),
                    };
                    if r.is_err() {
                        err = r;
                    }
                }));
                err?;
                theirs.push(time(&raw, k, || match name {
                    "all_reduce" => {
                        raw.all_reduce_into(&src[..], &mut dst[..], SystemOperation::sum())
                    }
                    "all_gather" => raw.all_gather_into(&src[..part], &mut dst[..]),
                    "broadcast" => raw.process_at_rank(0).broadcast_into(&mut dst[..]),
                    "reduce_scatter" => raw.reduce_scatter_block_into(
                        &src[..],
                        &mut dst[..part],
                        SystemOperation::sum(),
                    ),
                    _ => raw.all_to_all_into(&src[..], &mut dst[..]),
                }));
            }
            let (a, b) = (median(ours), median(theirs));
            rows.push(format!(
                "| {name} | {n} | {} | {} | {} | {:.2}× | {:+.2} µs |",
                size_name(size),
                fmt(a),
                fmt(b),
                a / b,
                (a - b) * 1e6
            ));
            // The same broadcasts in a checked program: only rooted calls take another path.
            if name == "broadcast" && ctx.backend_name() == "mpi" {
                let schedule = broadcast_schedule(ctx, &mut t)?;
                let (mut proven, mut theirs) = (Vec::new(), Vec::new());
                for _ in 0..samples {
                    let guard = Guard::enter(schedule, ctx)?;
                    let mut err = Ok(());
                    proven.push(time(&raw, k, || {
                        if let Err(e) = checked_broadcast(ctx, &mut t) {
                            err = Err(e);
                        }
                    }));
                    drop(guard);
                    err?;
                    theirs.push(time(&raw, k, || {
                        raw.process_at_rank(0).broadcast_into(&mut dst[..])
                    }));
                }
                let (a, b) = (median(proven), median(theirs));
                rows.push(format!(
                    "| broadcast, checked program | {n} | {} | {} | {} | {:.2}× | {:+.2} µs |",
                    size_name(size),
                    fmt(a),
                    fmt(b),
                    a / b,
                    (a - b) * 1e6
                ));
            }
        }
    }
    if !wanted("batch") {
        return Ok(rows);
    }
    // 1000 all_reduces of 1 KiB: one by one, and posted as one batch (packed).
    let count = if quick() { 100 } else { 1000 };
    let mut bucket: Vec<Tensor<f32>> = (0..count)
        .map(|_| Tensor::full([256], 1.0f32))
        .collect::<Result<_>>()?;
    // Raw MPI's own bounds: the same calls one by one, and one call of their total size.
    let src = vec![1.0f32; 256 * count];
    let mut dst = vec![0.0f32; 256 * count];
    let (mut single, mut batched, mut raw_single, mut raw_one) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // Several buckets per sample: the steady state, not the first bucket after a barrier.
    // A sample is timed on its slowest rank, so it includes how far apart the ranks leave the
    // barrier — at world 4 on two cores up to a scheduler time slice (milliseconds). A bucket
    // sent whole is ten times shorter than one sent call by call, so it gets ten times the
    // buckets per sample: every sample then lasts about as long, and carries the same skew.
    let reps = if quick() { 1 } else { 5 };
    let bulk_reps = 10 * reps;
    for _ in 0..if quick() { 3 } else { 7 } {
        let mut err = Ok(());
        single.push(time(&raw, reps, || {
            for b in bucket.iter_mut() {
                if let Err(e) = ctx.all_reduce(b, ReduceOp::Sum) {
                    err = Err(e);
                }
            }
        }));
        batched.push(time(&raw, bulk_reps, || {
            let mut batch = ctx.batch();
            for b in bucket.iter_mut() {
                batch.all_reduce(b, ReduceOp::Sum);
            }
            if let Err(e) = batch.run() {
                err = Err(e);
            }
        }));
        err?;
        raw_single.push(time(&raw, reps, || {
            for (s, d) in src.chunks(256).zip(dst.chunks_mut(256)) {
                raw.all_reduce_into(s, d, SystemOperation::sum());
            }
        }));
        raw_one.push(time(&raw, bulk_reps, || {
            raw.all_reduce_into(&src[..], &mut dst[..], SystemOperation::sum())
        }));
    }
    let (s, b) = (median(single), median(batched));
    let (rs, ro) = (median(raw_single), median(raw_one));
    rows.push(format!(
        "| {count} × all_reduce 1 KiB | {n} | {} | {} | {:.1}× | {} | {} | {:.1}× | {:.2}× |",
        fmt(s),
        fmt(b),
        s / b,
        fmt(rs),
        fmt(ro),
        rs / ro,
        b / ro,
    ));
    Ok(rows)
}

/// The broadcast of a checked program's loop: its one call site is the whole schedule.
fn checked_broadcast(ctx: &mut Ctx, t: &mut Tensor<f32>) -> Result<()> {
    ctx.broadcast(t, 0)
}

/// The guard table `#[rankwise::program]` emits for `for _ in 0..N { ctx.broadcast(&mut t,
/// 0)?; }` (N as large as a `u32` goes), with [`checked_broadcast`]'s call site. The site is
/// learnt from the guard itself: under a table that expects another site, the call is refused
/// with an error naming its own.
fn broadcast_schedule(ctx: &mut Ctx, t: &mut Tensor<f32>) -> Result<&'static Table> {
    fn table(world: usize, line: u32, column: u32) -> &'static Table {
        let runs: &'static [Run] = Box::leak(Box::new([Run {
            pattern: &[0],
            times: u32::MAX,
        }]));
        let ranks: Vec<RankTable> = (0..world).map(|_| RankTable { runs }).collect();
        let worlds = Box::leak(Box::new([(world, &*Box::leak(ranks.into_boxed_slice()))]));
        Box::leak(Box::new(Table {
            function: "bench",
            worlds,
            // Root 0, as the macro would verify it (the guard checks it, as for the macro's).
            sites: Box::leak(Box::new([(line, column, 0, "broadcast")])),
        }))
    }
    let probe = table(ctx.world(), 0, 0);
    let guard = Guard::enter(probe, ctx)?;
    let refused = checked_broadcast(ctx, t);
    drop(guard);
    match refused {
        Err(rankwise_runtime::Error::Diverged { site, .. }) => {
            Ok(table(ctx.world(), site.line, site.column))
        }
        other => Err(rankwise_runtime::Error::Internal(format!(
            "the probe of the broadcast's call site was not refused: {other:?}"
        ))),
    }
}

fn main() -> Result<()> {
    if Engine::detect()? == Engine::Mpi {
        let ranks = launch(1, measure)?;
        if let Some(rows) = ranks.get(0) {
            for r in rows {
                println!("{r}");
            }
        }
        return Ok(());
    }
    // Not under MPI: start the jobs and print their tables.
    let exe = std::env::current_exe().map_err(|e| rankwise_runtime::Error::Backend {
        backend: "mpi",
        detail: format!("cannot find this benchmark's executable: {e}"),
    })?;
    for (check, label) in [
        ("1", "agreement check on (default)"),
        ("0", "RANKWISE_MPI_CHECK=0"),
    ] {
        println!("\n### MPI backend vs raw MPI ({label})\n");
        println!("| op | world | size | rankwise | raw MPI | ratio | difference |");
        println!("|---|---:|---:|---:|---:|---:|---:|");
        let mut buckets = Vec::new();
        for world in [2, 4] {
            let out = Command::new("mpirun")
                .args(["--oversubscribe", "-np", &world.to_string()])
                .arg(&exe)
                .env("RANKWISE_MPI_CHECK", check)
                .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
                .output()
                .map_err(|e| rankwise_runtime::Error::Backend {
                    backend: "mpi",
                    detail: format!("cannot run mpirun: {e}"),
                })?;
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            for line in text.lines() {
                if line.contains(" × all_reduce") {
                    buckets.push(line.to_string());
                } else {
                    println!("{line}");
                }
            }
            if !out.status.success() {
                eprintln!("{}", String::from_utf8_lossy(&out.stderr));
            }
        }
        println!(
            "\nA bucket of small all_reduces: rankwise one by one and batched, raw MPI one by \
             one and as one call of the total size; the last column is rankwise batched over \
             raw MPI's one call.\n"
        );
        println!(
            "| bucket | world | rankwise one by one | rankwise batched | speed-up | raw one by \
             one | raw one call | raw speed-up | batched / raw one call |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for b in buckets {
            println!("{b}");
        }
    }
    Ok(())
}
