//! Collective benchmarks for the local backend, each against a memory-traffic floor measured in
//! the same run with the same threads.
//!
//! Run: `cargo bench -p rankwise-runtime --bench collectives` (set `RANKWISE_BENCH_QUICK=1`
//! for a fast smoke run with small sizes only).
//!
//! *Size* is the larger per-rank buffer, as in nccl-tests: the buffer of all_reduce and
//! broadcast, the output of all_gather, the input of reduce_scatter, both buffers of
//! all_to_all. The *floor* is the time for every rank to copy `size` bytes at once — a
//! shared-memory collective must read and write each rank's bytes at least once. Times are the
//! median over samples of the mean time per op (rank 0's clock; every op synchronises the ranks).

use std::hint::black_box;
use std::time::{Duration, Instant};

use rankwise_runtime::{Ctx, ReduceOp, Result, Tensor, spawn};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

#[derive(Clone, Copy, Debug)]
enum Op {
    AllReduce,
    AllGather,
    Broadcast,
    ReduceScatter,
    AllToAll,
}

const OPS: [Op; 5] = [
    Op::AllReduce,
    Op::AllGather,
    Op::Broadcast,
    Op::ReduceScatter,
    Op::AllToAll,
];

/// Ops per sample and number of samples for a size: enough work per sample to be timed well.
fn plan(size: usize, world: usize) -> (usize, usize) {
    let per_sample = (2 * MIB / size.max(1)).clamp(1, 2000) / world.max(1).min(4);
    let samples = if size >= 16 * MIB { 5 } else { 11 };
    (per_sample.max(1), samples)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median seconds per op of `body`, run `k` times per sample on every rank.
fn time_op(
    ctx: &mut Ctx,
    k: usize,
    samples: usize,
    mut body: impl FnMut(&mut Ctx) -> Result<()>,
) -> Result<f64> {
    body(ctx)?; // warm-up: page faults, caches
    body(ctx)?;
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        ctx.barrier()?;
        let t = Instant::now();
        for _ in 0..k {
            body(ctx)?;
        }
        out.push(t.elapsed().as_secs_f64() / k as f64);
    }
    Ok(median(out))
}

/// The floor: every rank copies `size` bytes at once; the slowest rank's time per copy.
fn floor(ctx: &mut Ctx, size: usize, k: usize, samples: usize) -> Result<f64> {
    let src = vec![1u8; size.max(1)];
    let mut dst = vec![0u8; size.max(1)];
    dst.copy_from_slice(&src);
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        ctx.barrier()?;
        let t = Instant::now();
        for _ in 0..k {
            dst.copy_from_slice(black_box(&src));
            black_box(&mut dst);
        }
        let mut mine = Tensor::full([1], t.elapsed().as_secs_f64() / k as f64)?;
        ctx.all_reduce(&mut mine, ReduceOp::Max)?;
        out.push(mine.to_vec()[0]);
    }
    Ok(median(out))
}

fn bench_op(ctx: &mut Ctx, op: Op, size: usize) -> Result<f64> {
    let w = ctx.world();
    let n = (size / 4).max(1); // f32 elements in the larger buffer
    let small = (n / w).max(1);
    let (k, samples) = plan(size, w);
    match op {
        Op::AllReduce => {
            let mut t = Tensor::full([n], 1.0f32)?;
            time_op(ctx, k, samples, |c| c.all_reduce(&mut t, ReduceOp::Sum))
        }
        Op::Broadcast => {
            let mut t = Tensor::full([n], 1.0f32)?;
            time_op(ctx, k, samples, |c| c.broadcast(&mut t, 0))
        }
        Op::AllGather => {
            let x = Tensor::full([small], 1.0f32)?;
            let mut y = Tensor::zeros([small * w])?;
            time_op(ctx, k, samples, |c| c.all_gather(&x, &mut y, 0))
        }
        Op::ReduceScatter => {
            let x = Tensor::full([small * w], 1.0f32)?;
            let mut y = Tensor::zeros([small])?;
            time_op(ctx, k, samples, |c| {
                c.reduce_scatter(&x, &mut y, ReduceOp::Sum, 0)
            })
        }
        Op::AllToAll => {
            let x = Tensor::full([small * w], 1.0f32)?;
            let mut y = Tensor::zeros([small * w])?;
            time_op(ctx, k, samples, |c| c.all_to_all(&x, &mut y, 0))
        }
    }
}

fn fmt_time(s: f64) -> String {
    if s < 1e-6 {
        format!("{:.0} ns", s * 1e9)
    } else if s < 1e-3 {
        format!("{:.2} µs", s * 1e6)
    } else {
        format!("{:.2} ms", s * 1e3)
    }
}

fn fmt_size(b: usize) -> String {
    if b >= MIB {
        format!("{} MiB", b / MIB)
    } else if b >= KIB {
        format!("{} KiB", b / KIB)
    } else {
        format!("{b} B")
    }
}

fn main() -> Result<()> {
    let quick = std::env::var_os("RANKWISE_BENCH_QUICK").is_some();
    let sizes: Vec<usize> = if quick {
        vec![8, KIB, 64 * KIB]
    } else {
        vec![8, KIB, 64 * KIB, MIB, 16 * MIB, 64 * MIB]
    };
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!("# rankwise local backend — {cores} core(s)\n");
    println!("| op | world | size | median | floor | ratio |");
    println!("|---|---:|---:|---:|---:|---:|");
    for world in [2, 4, 8] {
        let rows = spawn(world, |ctx| {
            let mut rows = Vec::new();
            for &size in &sizes {
                let (k, samples) = plan(size, ctx.world());
                let fl = floor(ctx, size, k, samples)?;
                for op in OPS {
                    let t = bench_op(ctx, op, size)?;
                    rows.push((op, size, t, fl));
                }
            }
            Ok(rows)
        })?;
        let mut rows = rows.into_iter().next().unwrap_or_default();
        rows.sort_by_key(|(op, size, ..)| (*op as usize, *size));
        for (op, size, t, fl) in rows {
            println!(
                "| {op:?} | {world} | {} | {} | {} | {:.2}× |",
                fmt_size(size),
                fmt_time(t),
                fmt_time(fl),
                t / fl
            );
        }
    }

    println!("\n## 1000 all_reduces of 1 KiB: one by one vs one batch\n");
    println!("| world | one by one | batched | speed-up |");
    println!("|---:|---:|---:|---:|");
    for world in [2, 4, 8] {
        let times = spawn(world, |ctx| {
            let mut ts: Vec<Tensor<f32>> = (0..1000)
                .map(|_| Tensor::full([256], 1.0f32))
                .collect::<Result<_>>()?;
            let samples = if quick { 3 } else { 9 };
            let single = time_op(ctx, 1, samples, |c| {
                for t in ts.iter_mut() {
                    c.all_reduce(t, ReduceOp::Sum)?;
                }
                Ok(())
            })?;
            let batched = time_op(ctx, 1, samples, |c| {
                let mut b = c.batch();
                for t in ts.iter_mut() {
                    b.all_reduce(t, ReduceOp::Sum);
                }
                b.run()
            })?;
            Ok((single, batched))
        })?;
        let (single, batched) = times[0];
        println!(
            "| {world} | {} | {} | {:.1}× |",
            fmt_time(single),
            fmt_time(batched),
            single / batched
        );
    }
    let _ = Duration::ZERO;
    Ok(())
}
