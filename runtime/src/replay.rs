//! Runs a [`Program`] on a real [`Ctx`]: each rank makes exactly the calls its item list
//! describes, on tensors of the described shapes. This is how programs built at run time are
//! executed, and how the differential tests hold the verifier to what really happens. It lives
//! here, not in the backend-free verifier, because it needs tensors and a context.

use rankwise_core::verify::{Item, Program, VOp};

use crate::DType;
use crate::ctx::Ctx;
use crate::element::with_dtype;
use crate::element::{Arith, Element};
use crate::error::{Error, Result};
use crate::group::Group;
use crate::model::{OpKind, Shape};
use crate::request::Request;
use crate::tensor::Tensor;

/// A tensor of any element type.
enum AnyTensor {
    F32(Tensor<f32>),
    F64(Tensor<f64>),
    F16(Tensor<crate::f16>),
    BF16(Tensor<crate::bf16>),
    I8(Tensor<i8>),
    U8(Tensor<u8>),
    I32(Tensor<i32>),
    U32(Tensor<u32>),
    I64(Tensor<i64>),
    U64(Tensor<u64>),
}

/// Recovers the typed tensor from an [`AnyTensor`] of the same element type.
trait Pick: Element {
    fn pick(a: &mut AnyTensor) -> Option<&mut Tensor<Self>>;
    fn wrap(t: Tensor<Self>) -> AnyTensor;
}

macro_rules! pick {
    ($($t:ty => $v:ident),*) => {$(
        impl Pick for $t {
            fn pick(a: &mut AnyTensor) -> Option<&mut Tensor<Self>> {
                match a { AnyTensor::$v(t) => Some(t), _ => None }
            }
            fn wrap(t: Tensor<Self>) -> AnyTensor { AnyTensor::$v(t) }
        }
    )*};
}
pick!(f32 => F32, f64 => F64, crate::f16 => F16, crate::bf16 => BF16, i8 => I8, u8 => U8,
      i32 => I32, u32 => U32, i64 => I64, u64 => U64);

/// A tensor of `shape` holding small values that depend on `seed` (so ranks and ops differ).
fn alloc(dtype: DType, shape: &[usize], seed: usize) -> Result<AnyTensor> {
    let n: usize = shape.iter().product();
    with_dtype!(dtype, T => {
        let v: Vec<T> = (0..n)
            .map(|i| T::from_f64(((seed + i * 7) % 9 + 1) as f64))
            .collect();
        Ok(<T as Pick>::wrap(Tensor::from_vec(shape, v)?))
    })
}

impl AnyTensor {
    /// The tensor's shape and values, as text (what [`replay`]'s digest covers).
    fn text(&self) -> String {
        macro_rules! show {
            ($($v:ident),*) => {
                match self {
                    $(AnyTensor::$v(t) => format!("{:?}{:?}", t.shape(), t.to_vec()),)*
                }
            };
        }
        show!(F32, F64, F16, BF16, I8, U8, I32, U32, I64, U64)
    }
}

/// Folds the outputs of `bufs` into the digest `h` (FNV-1a).
fn digest(mut h: u64, bufs: &Bufs) -> u64 {
    if let Some(t) = &bufs.output {
        for b in t.text().bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The tensors one op reads and writes.
struct Bufs {
    input: Option<AnyTensor>,
    output: Option<AnyTensor>,
}

fn bufs(op: &VOp, seed: usize) -> Result<Bufs> {
    let d = &op.desc;
    let of = |s: &Option<Shape>| s.as_ref().map(|s| alloc(d.dtype, s, seed)).transpose();
    Ok(match d.kind {
        OpKind::Send => Bufs {
            input: Some(alloc(d.dtype, &d.shape, seed)?),
            output: None,
        },
        OpKind::Recv | OpKind::Broadcast | OpKind::Reduce | OpKind::AllReduce => Bufs {
            input: None,
            output: Some(alloc(d.dtype, &d.shape, seed)?),
        },
        OpKind::Scatter => Bufs {
            input: of(&op.root_input)?,
            output: Some(alloc(d.dtype, &d.shape, seed)?),
        },
        OpKind::Barrier => Bufs {
            input: None,
            output: None,
        },
        _ => Bufs {
            input: Some(alloc(d.dtype, &d.shape, seed)?),
            output: of(&op.output)?,
        },
    })
}

fn missing() -> Error {
    Error::BadProgram {
        detail: "a described op lacks the buffer its kind needs".into(),
    }
}

/// Issues `op` on `$target` (a `Comm` or a `BatchComm`) with the typed buffers of `$b`.
macro_rules! issue {
    ($target:expr, $op:expr, $b:expr, $T:ty) => {{
        let d = &$op.desc;
        let peer = d.peer.unwrap_or(0);
        let (input, output) = (&mut $b.input, &mut $b.output);
        let input = input.as_mut().and_then(<$T as Pick>::pick);
        let output = output.as_mut().and_then(<$T as Pick>::pick);
        let op = d.op.unwrap_or(crate::ReduceOp::Sum);
        match d.kind {
            OpKind::Send => $target.send(input.ok_or_else(missing)?, peer),
            OpKind::Recv => $target.recv(output.ok_or_else(missing)?, peer),
            OpKind::Broadcast => $target.broadcast(output.ok_or_else(missing)?, peer),
            OpKind::Reduce => $target.reduce(output.ok_or_else(missing)?, peer, op),
            OpKind::AllReduce => $target.all_reduce(output.ok_or_else(missing)?, op),
            OpKind::Gather => $target.gather(input.ok_or_else(missing)?, output, peer, d.dim),
            OpKind::AllGather => $target.all_gather(
                input.ok_or_else(missing)?,
                output.ok_or_else(missing)?,
                d.dim,
            ),
            OpKind::Scatter => {
                $target.scatter(input.map(|t| &*t), output.ok_or_else(missing)?, peer, d.dim)
            }
            OpKind::ReduceScatter => $target.reduce_scatter(
                input.ok_or_else(missing)?,
                output.ok_or_else(missing)?,
                op,
                d.dim,
            ),
            OpKind::AllToAll => $target.all_to_all(
                input.ok_or_else(missing)?,
                output.ok_or_else(missing)?,
                d.dim,
            ),
            OpKind::Barrier => $target.barrier(),
        }
    }};
}

/// Posts `op` (`isend` or `irecv`) on `b`'s tensor.
fn post<'a, T: Pick>(ctx: &mut Ctx, op: &VOp, b: &'a mut Bufs) -> Result<Request<'a>> {
    let peer = op.desc.peer.ok_or_else(missing)?;
    match op.desc.kind {
        OpKind::Send => {
            let t = b.input.as_mut().and_then(T::pick).ok_or_else(missing)?;
            ctx.isend(&*t, peer)
        }
        OpKind::Recv => {
            let t = b.output.as_mut().and_then(T::pick).ok_or_else(missing)?;
            ctx.irecv(t, peer)
        }
        _ => Err(Error::BadProgram {
            detail: format!(
                "only sends and receives can be posted, not {}",
                op.desc.kind
            ),
        }),
    }
}

/// Makes exactly the calls `program` describes for `ctx.rank()`, on tensors of small values
/// that depend on the rank and the call: the way to run a program built as data at run time
/// (check it first with [`verify::verify`](crate::verify::verify)). Every rank creates every
/// declared group, in order, so that ids agree.
///
/// Returns a digest (FNV-1a) of every output this rank received, in program order (posted
/// receives last, in posting order): the same on every engine for the same program, rank and
/// world, which is how engines are compared. Posts left unwaited are waited for at the end.
pub fn replay(program: &Program, ctx: &mut Ctx) -> Result<u64> {
    let rank = ctx.rank();
    let items = program.ranks.get(rank).ok_or_else(|| Error::BadProgram {
        detail: format!(
            "no items for rank {rank}: the program describes {} rank(s)",
            program.ranks.len()
        ),
    })?;
    let mut groups: Vec<Result<Group>> = vec![Ok(ctx.world_group().clone())];
    for members in program.groups.iter().skip(1) {
        groups.push(ctx.new_group(members));
    }
    let group = |op: &VOp| -> Result<Group> {
        match groups.get(op.desc.group.0 as usize) {
            Some(g) => g.clone(),
            None => Err(missing()),
        }
    };
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut k = 0;
    let mut seed = || {
        k += 1;
        rank * 5 + k * 3
    };
    // Posted ops' tensors live across items: one slot per post, handed out in order.
    let mut posted: Vec<Bufs> = items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| match item {
            Item::Post(op) => Some(bufs(op, rank * 5 + 1000 + i * 3)),
            _ => None,
        })
        .collect::<Result<_>>()?;
    let mut slots = posted.iter_mut();
    let mut open: Vec<(usize, Request<'_>)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item {
            Item::Post(op) => {
                let slot = slots.next().ok_or_else(missing)?;
                let req = with_dtype!(op.desc.dtype, T => post::<T>(ctx, op, slot))?;
                open.push((i, req));
            }
            Item::Wait { post, .. } => {
                if let Some(j) = open.iter().position(|(p, _)| p == post) {
                    open.remove(j).1.wait()?;
                }
            }
            Item::Op(op) => {
                let g = group(op)?;
                let mut b = bufs(op, seed())?;
                let mut comm = ctx.group(&g);
                with_dtype!(op.desc.dtype, T => issue!(comm, op, b, T))?;
                h = digest(h, &b);
            }
            Item::Batch(ops) => {
                let gs = ops.iter().map(group).collect::<Result<Vec<_>>>()?;
                let mut bs = ops
                    .iter()
                    .map(|op| bufs(op, seed()))
                    .collect::<Result<Vec<_>>>()?;
                let mut batch = ctx.batch();
                for ((op, g), b) in ops.iter().zip(&gs).zip(bs.iter_mut()) {
                    let mut comm = batch.group(g);
                    with_dtype!(op.desc.dtype, T => { issue!(comm, op, b, T); });
                }
                batch.run()?;
                h = bs.iter().fold(h, digest);
            }
        }
    }
    for (_, req) in open {
        req.wait()?;
    }
    Ok(posted.iter().fold(h, digest))
}
