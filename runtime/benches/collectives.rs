//! Collective benchmarks for the local backend, each against a memory-traffic floor measured in
//! the same run with the same threads.
//!
//! Run: `cargo bench -p rankwise-runtime --bench collectives` (set `RANKWISE_BENCH_QUICK=1`
//! for a fast smoke run with small sizes only; `RANKWISE_BENCH_ONLY=sizes` or `=batch` runs one
//! of the two tables; `RANKWISE_BENCH_SIZES=8,16777216` only these sizes, in bytes;
//! `RANKWISE_PIN=1` pins rank threads to cores, as `mpirun` binds Open MPI's processes at 2
//! ranks; `RANKWISE_BENCH_TOUCH=1` has each rank read a word of every cache line of the last
//! output and write one of every line of the next input before each call, as a program that
//! consumes and produces its tensors does, so that where a collective leaves its lines shows
//! in its time. The floors and Open MPI's loop touch nothing: with it, compare builds, not
//! ratios).
//!
//! *Size* is the larger per-rank buffer, as in nccl-tests: the buffer of all_reduce and
//! broadcast, the output of all_gather, the input of reduce_scatter, both buffers of
//! all_to_all. The *floor* is the time for every rank to copy `size` bytes at once (one buffer
//! to another) — a shared-memory collective must read and write each rank's bytes at least once.
//! In-place collectives (all_reduce, broadcast) touch one buffer per rank, so they are also
//! compared with a stricter floor: one in-place read-modify-write pass over `size` bytes.
//!
//! Every number is a median over samples; a sample is the mean time per call over `k` calls
//! started together on every rank, as seen by the slowest rank. Samples of the floors and of the
//! collectives are interleaved, so that noise on this shared machine hits them alike.
//!
//! When Open MPI is installed (`mpicc` and `mpirun` on the `PATH`), the same run also builds
//! `openmpi_ref.c` and runs it at each world size with the same sizes and conventions, and the
//! table gets Open MPI's figure and rankwise's ratio to it. It takes its samples in the same
//! order too, floors included, so that a call on either side finds the caches in the same state.
//!
//! Each world size is launched several times (`RANKWISE_BENCH_LAUNCHES`, 3 by default; 1 in a
//! quick run), a fresh rankwise world and an Open MPI run in turn, and each figure is the median
//! over launches of the launch's own median. Where the scheduler places unpinned threads and
//! processes is decided at launch and holds for the whole launch: with ranks outnumbering cores
//! it can put three of four on one core, which changes a small call's time by 1.5–2× on either
//! side. One launch per side made the ratio a draw of two placements.

use std::collections::HashMap;
use std::hint::black_box;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

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

impl Op {
    fn in_place(self) -> bool {
        matches!(self, Op::AllReduce | Op::Broadcast)
    }
}

/// Calls per sample and number of samples for a size: enough work per sample to time well —
/// 16 MiB of traffic, so that a sample of a mid-size call is several calls, not one call timed
/// with the skew of the barrier before it (with 2 MiB, a 1 MiB call at world 4 was sampled
/// alone, and measured 2–4× its time in a loop).
fn plan(size: usize, world: usize) -> (usize, usize) {
    let per_sample = (16 * MIB / size.max(1)).clamp(1, 2000) / world.clamp(1, 4);
    // From 16 MiB a sample is one call, whose time swings with where the VM's memory traffic
    // stands (Open MPI's all_to_all at world 4 and 16 MiB: 4.1–6.4 ms between runs of one day):
    // nine samples, so that the median is not the third of five such draws.
    let samples = if size >= 16 * MIB { 9 } else { 11 };
    (per_sample.max(1), samples)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Seconds per call of `body` over `k` calls started together on every rank (slowest rank).
fn sample(ctx: &mut Ctx, k: usize, mut body: impl FnMut(&mut Ctx) -> Result<()>) -> Result<f64> {
    ctx.barrier()?;
    let t = Instant::now();
    for _ in 0..k {
        body(ctx)?;
    }
    let mut mine = Tensor::full([1], t.elapsed().as_secs_f64() / k as f64)?;
    ctx.all_reduce(&mut mine, ReduceOp::Max)?;
    Ok(mine.to_vec()[0])
}

/// One rank's buffers for one size: the floors' and each collective's.
struct Buffers {
    src: Vec<u64>,
    dst: Vec<u64>,
    inout: Tensor<f32>,
    small: Tensor<f32>,
    big_in: Tensor<f32>,
    big_out: Tensor<f32>,
    /// `RANKWISE_BENCH_TOUCH`: read the output and write the input around each call.
    touch: bool,
}

impl Buffers {
    fn new(size: usize, world: usize) -> Result<Self> {
        let words = (size / 8).max(1);
        let n = (size / 4).max(1); // f32 elements in the larger buffer
        let small = (n / world).max(1);
        Ok(Buffers {
            src: vec![1; words],
            dst: vec![0; words],
            inout: Tensor::full([n], 1.0)?,
            small: Tensor::full([small], 1.0)?,
            big_in: Tensor::full([small * world], 1.0)?,
            big_out: Tensor::zeros([small * world])?,
            touch: std::env::var_os("RANKWISE_BENCH_TOUCH").is_some(),
        })
    }

    /// Copy floor: `size` bytes read from one buffer and written to another.
    fn copy(&mut self) {
        self.dst.copy_from_slice(black_box(&self.src));
        black_box(&mut self.dst);
    }

    /// In-place floor: `size` bytes read and written back.
    fn rmw(&mut self) {
        for w in black_box(&mut self.dst).iter_mut() {
            *w = w.wrapping_add(1);
        }
        black_box(&mut self.dst);
    }

    fn run(&mut self, ctx: &mut Ctx, op: Op) -> Result<()> {
        if self.touch {
            // A consumer reads the last output and a producer writes the next input.
            let out = match op {
                Op::AllReduce | Op::Broadcast => &self.inout,
                Op::AllGather | Op::AllToAll => &self.big_out,
                Op::ReduceScatter => &self.small,
            };
            black_box(out.as_slice()?.iter().step_by(16).sum::<f32>());
            let inp = match op {
                Op::AllReduce | Op::Broadcast => &mut self.inout,
                Op::AllGather => &mut self.small,
                Op::ReduceScatter | Op::AllToAll => &mut self.big_in,
            };
            for x in inp.as_mut_slice()?.iter_mut().step_by(16) {
                *x = 1.0;
            }
        }
        match op {
            Op::AllReduce => ctx.all_reduce(&mut self.inout, ReduceOp::Sum),
            Op::Broadcast => ctx.broadcast(&mut self.inout, 0),
            Op::AllGather => ctx.all_gather(&self.small, &mut self.big_out, 0),
            Op::ReduceScatter => {
                ctx.reduce_scatter(&self.big_in, &mut self.small, ReduceOp::Sum, 0)
            }
            Op::AllToAll => ctx.all_to_all(&self.big_in, &mut self.big_out, 0),
        }
    }
}

struct SizeResult {
    copy: f64,
    rmw: f64,
    ops: Vec<f64>,
}

fn bench_size(ctx: &mut Ctx, size: usize) -> Result<SizeResult> {
    let (k, samples) = plan(size, ctx.world());
    let mut b = Buffers::new(size, ctx.world())?;
    b.copy();
    for op in OPS {
        b.run(ctx, op)?; // warm-up: page faults, caches
        b.run(ctx, op)?;
    }
    let (mut copy, mut rmw) = (Vec::new(), Vec::new());
    let mut ops = vec![Vec::new(); OPS.len()];
    for _ in 0..samples {
        copy.push(sample(ctx, k, |_| {
            b.copy();
            Ok(())
        })?);
        rmw.push(sample(ctx, k, |_| {
            b.rmw();
            Ok(())
        })?);
        for (i, op) in OPS.into_iter().enumerate() {
            ops[i].push(sample(ctx, k, |c| b.run(c, op))?);
        }
    }
    Ok(SizeResult {
        copy: median(copy),
        rmw: median(rmw),
        ops: ops.into_iter().map(median).collect(),
    })
}

/// Per size, the median over launches of each figure (every launch measured every size).
fn median_launch(launches: &[Vec<SizeResult>]) -> Vec<SizeResult> {
    let of = |f: &dyn Fn(&SizeResult) -> f64, i: usize| {
        median(launches.iter().map(|l| f(&l[i])).collect())
    };
    (0..launches[0].len())
        .map(|i| SizeResult {
            copy: of(&|r| r.copy, i),
            rmw: of(&|r| r.rmw, i),
            ops: (0..OPS.len()).map(|o| of(&|r| r.ops[o], i)).collect(),
        })
        .collect()
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

/// A bucket of 1000 all_reduces of 1 KiB, issued one by one and as one batch, and one
/// all_reduce of a tensor of the bucket's total size (what a packed bucket aims to cost):
/// seconds for each.
fn batched_vs_single(ctx: &mut Ctx, samples: usize) -> Result<(f64, f64, f64)> {
    let mut ts: Vec<Tensor<f32>> = (0..1000)
        .map(|_| Tensor::full([256], 1.0f32))
        .collect::<Result<_>>()?;
    let mut whole = Tensor::full([256 * 1000], 1.0f32)?;
    let (mut single, mut batched, mut one) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..samples + 1 {
        single.push(sample(ctx, 1, |c| {
            for t in ts.iter_mut() {
                c.all_reduce(t, ReduceOp::Sum)?;
            }
            Ok(())
        })?);
        batched.push(sample(ctx, 1, |c| {
            let mut b = c.batch();
            for t in ts.iter_mut() {
                b.all_reduce(t, ReduceOp::Sum);
            }
            b.run()
        })?);
        one.push(sample(ctx, 1, |c| c.all_reduce(&mut whole, ReduceOp::Sum))?);
    }
    // The first sample of each warms up.
    let rest = |v: Vec<f64>| median(v[1..].to_vec());
    Ok((rest(single), rest(batched), rest(one)))
}

/// Open MPI's figures for the benchmark's ops and sizes: the reference program built with
/// `mpicc` and run under `mpirun`, per world size. `None` (with the reason printed) when Open
/// MPI is not installed or the run fails: the rest of the benchmark does not depend on it.
struct OpenMpi {
    exe: PathBuf,
}

impl OpenMpi {
    fn build() -> Option<OpenMpi> {
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/openmpi_ref.c");
        let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("openmpi_ref");
        match Command::new("mpicc")
            .args(["-O2", "-o"])
            .arg(&exe)
            .arg(src)
            .output()
        {
            Ok(out) if out.status.success() => Some(OpenMpi { exe }),
            Ok(out) => {
                println!(
                    "(Open MPI's reference did not build; no side-by-side figures: {})\n",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                None
            }
            Err(e) => {
                println!("(no mpicc here ({e}); no side-by-side figures with Open MPI)\n");
                None
            }
        }
    }

    /// Seconds per call by (op name, size) at `world` ranks.
    fn measure(&self, world: usize, sizes: &[usize]) -> HashMap<(String, usize), f64> {
        let out = Command::new("mpirun")
            .args(["--oversubscribe", "-np", &world.to_string()])
            .arg(&self.exe)
            .args(sizes.iter().map(|s| s.to_string()))
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .output();
        let out = match out {
            Ok(out) if out.status.success() => out,
            Ok(out) => {
                println!(
                    "(Open MPI's reference failed at world {world}: {})",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                return HashMap::new();
            }
            Err(e) => {
                println!("(cannot run mpirun: {e})");
                return HashMap::new();
            }
        };
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| {
                let mut f = line.split_whitespace();
                let op = f.next()?.to_string();
                let size = f.next()?.parse().ok()?;
                let secs = f.next()?.parse().ok()?;
                Some(((op, size), secs))
            })
            .collect()
    }
}

fn main() -> Result<()> {
    let quick = std::env::var_os("RANKWISE_BENCH_QUICK").is_some();
    let only = std::env::var("RANKWISE_BENCH_ONLY").unwrap_or_default();
    // `RANKWISE_BENCH_SIZES=8,16777216`: only these sizes, in bytes (for measuring one change).
    let chosen: Vec<usize> = std::env::var("RANKWISE_BENCH_SIZES")
        .unwrap_or_default()
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let sizes: Vec<usize> = if !chosen.is_empty() {
        chosen
    } else if quick {
        vec![8, KIB, 64 * KIB]
    } else {
        vec![8, KIB, 64 * KIB, MIB, 16 * MIB, 64 * MIB]
    };
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let pinned = std::env::var("RANKWISE_PIN").is_ok_and(|v| v == "1");
    let launches: usize = std::env::var("RANKWISE_BENCH_LAUNCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 1 } else { 3 })
        .max(1);
    println!(
        "# rankwise local backend, {cores} core(s), rank threads {}; each figure the median of \
         {launches} launch(es) per world size (RANKWISE_BENCH_LAUNCHES)\n",
        if pinned {
            "pinned (RANKWISE_PIN=1)"
        } else {
            "unpinned (the default; RANKWISE_PIN=1 pins them)"
        }
    );
    let openmpi = if only == "batch" {
        None
    } else {
        OpenMpi::build()
    };
    println!(
        "| op | world | size | median | copy floor | ratio | in-place floor | ratio | Open MPI \
         | rankwise / Open MPI |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for world in [2, 4, 8].into_iter().filter(|_| only != "batch") {
        let mut ours: Vec<Vec<SizeResult>> = Vec::new();
        let mut theirs: Vec<HashMap<(String, usize), f64>> = Vec::new();
        for _ in 0..launches {
            let mut per_size = spawn(world, |ctx| {
                sizes
                    .iter()
                    .map(|&s| bench_size(ctx, s))
                    .collect::<Result<Vec<_>>>()
            })?;
            ours.push(per_size.swap_remove(0));
            if let Some(o) = &openmpi {
                theirs.push(o.measure(world, &sizes));
            }
        }
        let results = &median_launch(&ours);
        let theirs: HashMap<(String, usize), f64> = (theirs.first().into_iter())
            .flat_map(|first| first.keys())
            .filter_map(|key| {
                let all: Vec<f64> = theirs.iter().filter_map(|m| m.get(key).copied()).collect();
                (!all.is_empty()).then(|| (key.clone(), median(all)))
            })
            .collect();
        for (i, op) in OPS.into_iter().enumerate() {
            for (&size, r) in sizes.iter().zip(results) {
                let t = r.ops[i];
                let strict = if op.in_place() {
                    format!("{} | {:.2}×", fmt_time(r.rmw), t / r.rmw)
                } else {
                    "– | –".to_string()
                };
                let peer = match theirs.get(&(format!("{op:?}"), size)) {
                    Some(&m) => format!("{} | {:.2}×", fmt_time(m), t / m),
                    None => "– | –".to_string(),
                };
                println!(
                    "| {op:?} | {world} | {} | {} | {} | {:.2}× | {strict} | {peer} |",
                    fmt_size(size),
                    fmt_time(t),
                    fmt_time(r.copy),
                    t / r.copy
                );
            }
        }
    }

    println!("\n## 1000 all_reduces of 1 KiB: one by one vs one batch\n");
    println!(
        "| world | one by one | batched | speed-up (median of the launches' own) | one all_reduce of 1000 KiB | batched / that |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for world in [2, 4, 8].into_iter().filter(|_| only != "sizes") {
        // Per launch, the three are measured in turn in one world (one placement): the ratios
        // are the medians of the launches' own.
        let mut launched = Vec::new();
        for _ in 0..launches {
            let times = spawn(world, |ctx| {
                batched_vs_single(ctx, if quick { 3 } else { 9 })
            })?;
            launched.push(times[0]);
        }
        let of = |f: &dyn Fn(&(f64, f64, f64)) -> f64| median(launched.iter().map(f).collect());
        println!(
            "| {world} | {} | {} | {:.1}× | {} | {:.2}× |",
            fmt_time(of(&|l| l.0)),
            fmt_time(of(&|l| l.1)),
            of(&|l| l.0 / l.1),
            fmt_time(of(&|l| l.2)),
            of(&|l| l.1 / l.2),
        );
    }
    Ok(())
}
