//! What the run-time guard of `#[rankwise::program]` costs: the same all_reduce loop, checked
//! (guard active, every call compared with the verified schedule) and unchecked, interleaved
//! in one run. Run: `cargo bench -p rankwise --bench guard`.

use std::time::Instant;

use rankwise::prelude::*;

const CALLS: usize = 2000;

#[rankwise::program(world = 2)]
fn checked_small(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    for _ in 0..2000 {
        ctx.all_reduce(&mut t, ReduceOp::Sum)?;
    }
    Ok(())
}

fn unchecked_small(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([2], 1.0f32)?;
    for _ in 0..CALLS {
        ctx.all_reduce(&mut t, ReduceOp::Sum)?;
    }
    Ok(())
}

#[rankwise::program(world = 2)]
fn checked_large(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([262144], 1.0f32)?;
    for _ in 0..20 {
        ctx.all_reduce(&mut t, ReduceOp::Sum)?;
    }
    Ok(())
}

fn unchecked_large(ctx: &mut Ctx) -> Result<()> {
    let mut t = ctx.full([262144], 1.0f32)?;
    for _ in 0..20 {
        ctx.all_reduce(&mut t, ReduceOp::Sum)?;
    }
    Ok(())
}

/// Median seconds per call over `samples` runs of `f` (which makes `calls` calls per rank).
fn per_call(f: fn(&mut Ctx) -> Result<()>, calls: usize, samples: &mut Vec<f64>) -> Result<()> {
    let t = Instant::now();
    spawn(2, f)?;
    samples.push(t.elapsed().as_secs_f64() / calls as f64);
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let rounds = if std::env::var_os("RANKWISE_BENCH_QUICK").is_some() {
        5
    } else {
        31
    };
    let (mut cs, mut us, mut cl, mut ul) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        per_call(checked_small, CALLS, &mut cs)?;
        per_call(unchecked_small, CALLS, &mut us)?;
        per_call(checked_large, 20, &mut cl)?;
        per_call(unchecked_large, 20, &mut ul)?;
    }
    let (cs, us, cl, ul) = (median(cs), median(us), median(cl), median(ul));
    println!(
        "| all_reduce, world 2 | unchecked | checked (guard) | guard cost per call | relative |"
    );
    println!("|---|---:|---:|---:|---:|");
    println!(
        "| 8 B | {:.0} ns | {:.0} ns | {:.0} ns | {:+.1}% |",
        us * 1e9,
        cs * 1e9,
        (cs - us) * 1e9,
        (cs / us - 1.0) * 100.0
    );
    println!(
        "| 1 MiB | {:.1} µs | {:.1} µs | {:.0} ns | {:+.2}% |",
        ul * 1e6,
        cl * 1e6,
        (cl - ul) * 1e9,
        (cl / ul - 1.0) * 100.0
    );
    Ok(())
}
