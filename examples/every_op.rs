//! Every operation × dtype × reduce op × dim, on the world, a split into halves, the odd ranks
//! and a group of every rank; single calls, blocking pairs and a mixed batch with a send to self.
//! Prints one line per rank and call with a digest of the result.
//!
//! The same program under threads (`cargo run --example every_op -- 4`) and
//! under MPI (`mpirun -np 4 target/debug/examples/every_op`) must print the same lines: the
//! MPI tests compare them. The threads backend itself is checked against an independent
//! reference in `tests/collectives.rs`.

use rankwise::{Batch, Ctx, DType, Element, Group, ReduceOp, Result, Tensor, bf16, f16, launch};

/// Test values from small integers, and the bits of a value, for every element type.
trait Fill: Element {
    fn of(v: u32) -> Self;
    fn bits(self) -> u64;
}

macro_rules! fill {
    ($($t:ty => $e:expr, $b:expr);*) => {$(impl Fill for $t {
        fn of(v: u32) -> Self { $e(v) }
        fn bits(self) -> u64 { $b(self) }
    })*};
}
fill!(f32 => |v| v as f32, |x: f32| u64::from(x.to_bits());
      f64 => |v| v as f64, |x: f64| x.to_bits();
      f16 => |v| f16::from_f32(v as f32), |x: f16| u64::from(x.to_bits());
      bf16 => |v| bf16::from_f32(v as f32), |x: bf16| u64::from(x.to_bits());
      i8 => |v| v as i8, |x: i8| x as u8 as u64;
      u8 => |v| v as u8, |x: u8| u64::from(x);
      i32 => |v| v as i32, |x: i32| x as u32 as u64;
      u32 => |v| v, |x: u32| u64::from(x);
      i64 => |v| v as i64, |x: i64| x as u64;
      u64 => |v| v as u64, |x: u64| x);

fn data<T: Fill>(rank: usize, salt: usize, shape: &[usize]) -> Result<Tensor<T>> {
    let n: usize = shape.iter().product();
    // Element i is value i % 9 of one period; the period is doubled by copies rather than
    // computed element by element (which takes seconds in the debug builds the tests run).
    let period: Vec<T> = (0..9)
        .map(|i| T::of(((rank * 5 + salt * 3 + i * 7) % 9 + 1) as u32))
        .collect();
    let mut v = Vec::with_capacity(n);
    v.extend_from_slice(&period[..n.min(9)]);
    while v.len() < n {
        v.extend_from_within(..v.len().min(n - v.len()));
    }
    let t = Tensor::from_vec(shape, v)?;
    // Under MPI a copy lives in the ranks' shared heap, where a `Vec` given to `from_vec` stays
    // in the rank's own: by rank and salt, so that runs through the window meet members that
    // all go direct, members that all copy, and both (the values are the same either way).
    if rank.is_multiple_of(2) || salt.is_multiple_of(2) {
        t.try_clone()
    } else {
        Ok(t)
    }
}

/// The tensor's [`hash`], as the line prints it.
fn digest<T: Fill>(t: &Tensor<T>) -> String {
    format!("{:016x}", hash(t))
}

/// An FNV-style hash of the tensor's shape and the bits of its values (bits, not printed
/// values: equal bits on every engine is the claim, and printing large tensors is slow).
fn hash<T: Fill>(t: &Tensor<T>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mix = |w: u64| h = (h ^ w).wrapping_mul(0x0100_0000_01b3).rotate_left(29);
    for &d in t.shape() {
        mix(d as u64);
    }
    for x in t.to_vec() {
        mix(x.bits());
    }
    h
}

fn with(shape: &[usize], dim: usize, f: impl Fn(usize) -> usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s[dim] = f(s[dim]);
    s
}

/// Every collective on `g` for element type `T`, appending one line per call to `out`.
fn collectives<T: Fill>(ctx: &mut Ctx, g: &Group, name: &str, out: &mut Vec<String>) -> Result<()> {
    let (r, n) = (ctx.rank(), g.size());
    let m = g.members().to_vec();
    let mut line = |what: String, d: String| out.push(format!("{} {name} {what} {d}", T::DTYPE));
    // Every op the backend has for `T` (NCCL: no bitwise ones).
    let ops: Vec<ReduceOp> = ReduceOp::ALL
        .into_iter()
        .filter(|&o| ctx.supports(o, T::DTYPE))
        .collect();
    for (salt, shape) in [[3usize, 5, 2], [3, 6000, 1]].iter().enumerate() {
        for &op in &ops {
            let mut t = data::<T>(r, salt, shape)?;
            ctx.group(g).all_reduce(&mut t, op)?;
            line(format!("all_reduce {op} {shape:?}"), digest(&t));
            let mut t = data::<T>(r, salt + 1, shape)?;
            ctx.group(g).reduce(&mut t, m[1 % n], op)?;
            line(format!("reduce {op} {shape:?}"), digest(&t));
        }
    }
    // Small blocks, and blocks large enough that the MPI backend sends gathers and scatters as
    // direct messages (dims 0 and 1 of the second shape are contiguous per member).
    for (b, base) in [[3usize, 5, 2], [1, 1100, 4]].into_iter().enumerate() {
        for dim in 0..3 {
            let salt = dim + 10 * b;
            let x = data::<T>(r, salt, &with(&base, dim, |d| d * n))?;
            let mut y = Tensor::<T>::zeros(base)?;
            ctx.group(g)
                .reduce_scatter(&x, &mut y, ops[dim % ops.len()], dim)?;
            line(format!("reduce_scatter dim {dim} {base:?}"), digest(&y));

            let x = data::<T>(r, salt + 1, &base)?;
            let mut y = Tensor::<T>::zeros(with(&base, dim, |d| d * n))?;
            ctx.group(g).all_gather(&x, &mut y, dim)?;
            line(format!("all_gather dim {dim} {base:?}"), digest(&y));

            let root = m[(dim + 1) % n];
            let mut y = Tensor::<T>::zeros(with(&base, dim, |d| d * n))?;
            let out_y = (r == root).then_some(&mut y);
            ctx.group(g).gather(&x, out_y, root, dim)?;
            line(format!("gather dim {dim} {base:?}"), digest(&y));

            let root = m[(dim + 2) % n];
            let big = data::<T>(r, salt + 2, &with(&base, dim, |d| d * n))?;
            let mut y = Tensor::<T>::zeros(base)?;
            ctx.group(g)
                .scatter((r == root).then_some(&big), &mut y, root, dim)?;
            line(format!("scatter dim {dim} {base:?}"), digest(&y));

            let x = data::<T>(r, salt + 3, &with(&base, dim, |d| d * n))?;
            let mut y = Tensor::<T>::zeros(x.shape())?;
            ctx.group(g).all_to_all(&x, &mut y, dim)?;
            line(format!("all_to_all dim {dim} {base:?}"), digest(&y));
        }
    }
    let base = [3usize, 5, 2];
    let mut t = data::<T>(r, 7, &base)?;
    ctx.group(g).broadcast(&mut t, m[n - 1])?;
    line("broadcast".into(), digest(&t));
    // Larger than a small collective (the MPI backend exchanges it alone through a group's
    // shared-memory lanes, or sends it on its schedule path), and larger than one message
    // (through the group's window, or on the schedule path).
    for (salt, shape) in [(9, [1, 1100, 4]), (10, [1, 30_000, 4])] {
        let mut t = data::<T>(r, salt, &shape)?;
        ctx.group(g).broadcast(&mut t, m[n / 2])?;
        line(format!("broadcast {shape:?}"), digest(&t));
    }
    ctx.group(g).barrier()?;
    // The list forms, as torch writes them: one tensor of `base` per member.
    let x = data::<T>(r, 8, &base)?;
    let list = |salt: usize| -> Result<Vec<Tensor<T>>> {
        (0..n).map(|i| data::<T>(r, salt + i, &base)).collect()
    };
    let zeros = || -> Result<Vec<Tensor<T>>> { (0..n).map(|_| Tensor::zeros(base)).collect() };
    let digests = |ts: &[Tensor<T>]| ts.iter().map(digest).collect::<Vec<_>>().join(",");
    let mut ys = zeros()?;
    ctx.group(g).all_gather_list(&x, &mut ys)?;
    line("all_gather_list".into(), digests(&ys));
    let mut ys = zeros()?;
    let root = m[n / 2];
    ctx.group(g)
        .gather_list(&x, (r == root).then_some(&mut ys[..]), root)?;
    line("gather_list".into(), digests(&ys));
    let xs = list(20)?;
    let mut y = Tensor::<T>::zeros(base)?;
    ctx.group(g)
        .scatter_list((r == root).then_some(&xs[..]), &mut y, root)?;
    line("scatter_list".into(), digest(&y));
    let mut y = Tensor::<T>::zeros(base)?;
    ctx.group(g)
        .reduce_scatter_list(&list(30)?, &mut y, ReduceOp::Max)?;
    line("reduce_scatter_list".into(), digest(&y));
    let mut ys = zeros()?;
    ctx.group(g).all_to_all_list(&list(40)?, &mut ys)?;
    line("all_to_all_list".into(), digests(&ys));
    Ok(())
}

/// Point-to-point and a batch mixing everything, appending one line per result.
fn mixed<T: Fill>(ctx: &mut Ctx, halves: &Group, out: &mut Vec<String>) -> Result<()> {
    let (r, w) = (ctx.rank(), ctx.world());
    let (next, prev) = ((r + 1) % w, (r + w - 1) % w);
    // A ring in one batch (world 1: a send to itself), with a collective on each communicator.
    let x = data::<T>(r, 1, &[4, 3])?;
    let mut y = Tensor::<T>::zeros([4, 3])?;
    let mut s = data::<T>(r, 2, &[5])?;
    let h = data::<T>(r, 3, &[2, 2])?;
    let mut hg = Tensor::<T>::zeros([2, 2 * halves.size()])?;
    let mut b = ctx.batch();
    b.send(&x, next);
    b.recv(&mut y, prev);
    b.all_reduce(&mut s, ReduceOp::Max);
    b.group(halves).all_gather(&h, &mut hg, 1);
    b.run()?;
    for (what, d) in [
        ("ring", digest(&y)),
        ("batched all_reduce", digest(&s)),
        ("batched all_gather", digest(&hg)),
    ] {
        out.push(format!("{} mixed {what} {d}", T::DTYPE));
    }
    // A bucket of all_reduces that ranks batch differently (all at once, in threes, one by
    // one): the MPI backend packs what every member batched, and results must not change.
    let mut bucket: Vec<Tensor<T>> = (0..10)
        .map(|i| data::<T>(r, i, &[1 + i % 4, 3]))
        .collect::<Result<_>>()?;
    let per = [10, 3, 1][r % 3];
    in_batches(ctx, &mut bucket, per, |b, t| {
        b.all_reduce(t, ReduceOp::Sum);
    })?;
    for (i, t) in bucket.iter().enumerate() {
        out.push(format!("{} mixed bucket {i} {}", T::DTYPE, digest(t)));
    }
    // The same with reduces and broadcasts to and from the last rank.
    rooted_in_batches(ctx, &mut bucket, per, w - 1)?;
    for (i, t) in bucket.iter().enumerate() {
        out.push(format!(
            "{} mixed rooted bucket {i} {}",
            T::DTYPE,
            digest(t)
        ));
    }
    long_buckets::<T>(ctx, out)?;
    // Blocking pairs: even ranks send first, odd ranks receive first.
    if w >= 2 && !(w % 2 == 1 && r == w - 1) {
        let peer = r ^ 1;
        let x = data::<T>(r, 4, &[6])?;
        let mut y = Tensor::<T>::zeros([6])?;
        if r % 2 == 0 {
            ctx.send(&x, peer)?;
            ctx.recv(&mut y, peer)?;
        } else {
            ctx.recv(&mut y, peer)?;
            ctx.send(&x, peer)?;
        }
        out.push(format!("{} mixed pair {}", T::DTYPE, digest(&y)));
    }
    Ok(())
}

/// Calls `call` on every tensor of `bucket`, `per` calls to a batch.
fn in_batches<T: Fill>(
    ctx: &mut Ctx,
    bucket: &mut [Tensor<T>],
    per: usize,
    call: impl for<'b, 't> Fn(&mut Batch<'b, 't>, &'t mut Tensor<T>),
) -> Result<()> {
    for chunk in bucket.chunks_mut(per) {
        let mut b = ctx.batch();
        for t in chunk.iter_mut() {
            call(&mut b, t);
        }
        b.run()?;
    }
    Ok(())
}

/// Reduces `bucket` to `root`, then broadcasts it from there, `per` calls to a batch.
fn rooted_in_batches<T: Fill>(
    ctx: &mut Ctx,
    bucket: &mut [Tensor<T>],
    per: usize,
    root: usize,
) -> Result<()> {
    in_batches(ctx, bucket, per, |b, t| {
        b.reduce(t, root, ReduceOp::Max);
    })?;
    in_batches(ctx, bucket, per, |b, t| {
        b.broadcast(t, root);
    })
}

/// Buckets larger than one small-collective exchange carries (64 KiB): the MPI backend agrees
/// on them through one exchange of hashes and reduces the rest as one packed call when every
/// rank batched the same run, and falls back to shorter runs when ranks batch differently.
fn long_buckets<T: Fill>(ctx: &mut Ctx, out: &mut Vec<String>) -> Result<()> {
    let (r, w) = (ctx.rank(), ctx.world());
    // 260 tensors of 320 elements: 81 KiB of one-byte elements, 650 KiB of eight-byte ones.
    let mut bucket: Vec<Tensor<T>> = (0..260)
        .map(|i| data::<T>(r, i, &[320]))
        .collect::<Result<_>>()?;
    // All_reduces, then reduces to and broadcasts from one root.
    let run = |ctx: &mut Ctx, bucket: &mut [Tensor<T>], per: usize| -> Result<()> {
        in_batches(ctx, bucket, per, |b, t| {
            b.all_reduce(t, ReduceOp::Sum);
        })?;
        rooted_in_batches(ctx, bucket, per, w / 2)
    };
    run(ctx, &mut bucket, 260)?;
    for (i, t) in bucket.iter().enumerate() {
        out.push(format!("{} long bucket {i} {}", T::DTYPE, digest(t)));
    }
    // Ranks batching differently: all at once, in hundreds, one by one, in runs of 170.
    run(ctx, &mut bucket, [260, 100, 1, 170][r % 4])?;
    for (i, t) in bucket.iter().enumerate() {
        out.push(format!("{} long mixed bucket {i} {}", T::DTYPE, digest(t)));
    }
    Ok(())
}

/// An all_reduce larger than one shared-memory area (the MPI backend's window takes it in
/// steps), and large all_reduces that some ranks batch and others call one by one (their records
/// settle how many one step covers).
fn large_runs<T: Fill>(ctx: &mut Ctx, out: &mut Vec<String>) -> Result<()> {
    let r = ctx.rank();
    if T::DTYPE == DType::F32 {
        let mut t = data::<T>(r, 50, &[1_300_000])?;
        ctx.all_reduce(&mut t, ReduceOp::Sum)?;
        out.push(format!("{} all_reduce of 5 MB {}", T::DTYPE, digest(&t)));
        let mut t = data::<T>(r, 51, &[1_300_000])?;
        ctx.broadcast(&mut t, ctx.world() / 2)?;
        out.push(format!("{} broadcast of 5 MB {}", T::DTYPE, digest(&t)));
    }
    if T::DTYPE == DType::F32 {
        large_gathers(ctx, out)?;
    }
    let mut ts: Vec<Tensor<T>> = (0..3)
        .map(|i| data::<T>(r, 60 + i, &[6000]))
        .collect::<Result<_>>()?;
    if r.is_multiple_of(2) {
        let mut b = ctx.batch();
        for t in ts.iter_mut() {
            b.all_reduce(t, ReduceOp::Max);
        }
        b.run()?;
    } else {
        for t in ts.iter_mut() {
            ctx.all_reduce(t, ReduceOp::Max)?;
        }
    }
    for (i, t) in ts.iter().enumerate() {
        out.push(format!(
            "{} large batched or not {i} {}",
            T::DTYPE,
            digest(t)
        ));
    }
    Ok(())
}

/// Gathers, scatters and all_to_alls of blocks larger than one message (on one host the MPI
/// backend moves an all_gather through the group's window among more than two ranks, and sends
/// the others directly), along dims 0 and 1, and an all_gather of blocks larger than one step
/// of the window (5.2 MB).
fn large_gathers(ctx: &mut Ctx, out: &mut Vec<String>) -> Result<()> {
    let (r, n) = (ctx.rank(), ctx.world());
    let mut line = |what: String, d: String| out.push(format!("f32 large {what} {d}"));
    for (i, (base, dim)) in [
        ([1usize, 20_000, 4], 0),
        ([1, 20_000, 4], 1),
        ([1_300_000, 1, 1], 0),
    ]
    .into_iter()
    .enumerate()
    {
        let salt = 90 + 5 * i;
        let x = data::<f32>(r, salt, &base)?;
        let mut y = Tensor::<f32>::zeros(with(&base, dim, |d| d * n))?;
        ctx.all_gather(&x, &mut y, dim)?;
        line(format!("all_gather {base:?} dim {dim}"), digest(&y));
        if base[0] > 1 {
            // The largest block: an all_gather's is enough.
            continue;
        }
        let root = (i + 1) % n;
        let mut y = Tensor::<f32>::zeros(with(&base, dim, |d| d * n))?;
        ctx.gather(&x, (r == root).then_some(&mut y), root, dim)?;
        line(format!("gather {base:?} dim {dim}"), digest(&y));
        let big = data::<f32>(r, salt + 1, &with(&base, dim, |d| d * n))?;
        let mut y = Tensor::<f32>::zeros(base)?;
        ctx.scatter((r == root).then_some(&big), &mut y, root, dim)?;
        line(format!("scatter {base:?} dim {dim}"), digest(&y));
        let x = data::<f32>(r, salt + 2, &with(&base, dim, |d| d * n))?;
        let mut y = Tensor::<f32>::zeros(x.shape())?;
        ctx.all_to_all(&x, &mut y, dim)?;
        line(format!("all_to_all {base:?} dim {dim}"), digest(&y));
    }
    // all_to_alls larger than one message whose blocks fit one (the last at exactly one
    // message's 64 KiB a pair), and one whose blocks are not contiguous.
    for (i, (base, dim)) in [([1usize, 7_500], 1), ([2, 3_750], 1), ([16_384, 1], 0)]
        .into_iter()
        .enumerate()
    {
        let x = data::<f32>(r, 110 + i, &with(&base, dim, |d| d * n))?;
        let mut y = Tensor::<f32>::zeros(x.shape())?;
        ctx.all_to_all(&x, &mut y, dim)?;
        line(
            format!("all_to_all of blocks {base:?} dim {dim}"),
            digest(&y),
        );
    }
    Ok(())
}

/// A root that runs far ahead: the other ranks start late, and meanwhile the root makes 600
/// broadcasts of changing sizes, up to 64 KiB (without the agreement check they go one way, so
/// under MPI on one host the root fills its lanes to them and must wait for them to take).
fn root_runs_ahead<T: Fill>(ctx: &mut Ctx, out: &mut Vec<String>) -> Result<()> {
    let (r, w) = (ctx.rank(), ctx.world());
    let root = w - 1;
    if r != root {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // One line for all of them: each broadcast's hash folded in order.
    let mut all = 0u64;
    for i in 0..600 {
        let len = [
            1,
            9,
            1000,
            16_000 / T::DTYPE.size(),
            65_536 / T::DTYPE.size(),
        ][i % 5];
        let mut t = data::<T>(r, 80 + i, &[len])?;
        ctx.broadcast(&mut t, root)?;
        all = all.rotate_left(7) ^ hash(&t);
    }
    out.push(format!("{} root ran ahead {all:016x}", T::DTYPE));
    Ok(())
}

fn per_dtype<T: Fill>(ctx: &mut Ctx, out: &mut Vec<String>) -> Result<()> {
    let w = ctx.world();
    let world = ctx.world_group().clone();
    collectives::<T>(ctx, &world, "world", out)?;
    let (lo, hi): (Vec<usize>, Vec<usize>) = (0..w).partition(|&x| x < w.div_ceil(2));
    let halves = if hi.is_empty() {
        ctx.split(&[&lo])?
    } else {
        ctx.split(&[&lo, &hi])?
    };
    collectives::<T>(ctx, &halves, "halves", out)?;
    let odd: Vec<usize> = (1..w).step_by(2).collect();
    if !odd.is_empty() {
        let g = ctx.new_group(&odd)?;
        if g.contains(ctx.rank()) {
            collectives::<T>(ctx, &g, "odd", out)?;
        }
    }
    // A group of every rank is a communicator of its own, apart from the world's.
    let all = ctx.new_group((0..w).collect::<Vec<_>>())?;
    collectives::<T>(ctx, &all, "all", out)?;
    large_runs::<T>(ctx, out)?;
    if T::DTYPE == DType::F32 {
        root_runs_ahead::<T>(ctx, out)?;
    }
    mixed::<T>(ctx, &halves, out)
}

fn main() -> Result<()> {
    let world = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(4);
    let ranks = launch(world, |ctx| {
        let mut out = Vec::new();
        for d in DType::ALL {
            match d {
                DType::F32 => per_dtype::<f32>(ctx, &mut out)?,
                DType::F64 => per_dtype::<f64>(ctx, &mut out)?,
                DType::F16 => per_dtype::<f16>(ctx, &mut out)?,
                DType::BF16 => per_dtype::<bf16>(ctx, &mut out)?,
                DType::I8 => per_dtype::<i8>(ctx, &mut out)?,
                DType::U8 => per_dtype::<u8>(ctx, &mut out)?,
                DType::I32 => per_dtype::<i32>(ctx, &mut out)?,
                DType::U32 => per_dtype::<u32>(ctx, &mut out)?,
                DType::I64 => per_dtype::<i64>(ctx, &mut out)?,
                DType::U64 => per_dtype::<u64>(ctx, &mut out)?,
            }
        }
        Ok(out)
    })?;
    for (rank, lines) in ranks.iter() {
        for l in lines {
            println!("rank {rank} {l}");
        }
    }
    // For the MPI tests (on stderr, which the comparison with threads leaves out): whether the
    // window's collectives ran on tensors where they are, in the ranks' shared heap.
    let counts = [
        ("shared-heap steps", rankwise::__private::direct_steps()),
        ("calls handed back", rankwise::__private::handed_back()),
    ];
    if let Some((rank, _)) = ranks.iter().next() {
        for (what, count) in counts.into_iter().filter(|&(_, count)| count > 0) {
            // In one write: `eprintln!` writes its pieces one by one to the unbuffered stderr,
            // and under mpirun another rank's line could land between them (seen in CI:
            // "rank rank 1: …" then "0: …").
            let line = format!("rank {rank}: {what}: {count}\n");
            std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes())
                .map_err(|e| rankwise::Error::Internal(format!("stderr: {e}")))?;
        }
    }
    Ok(())
}
