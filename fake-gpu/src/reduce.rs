//! The data movement of the fake NCCL's collectives, on host memory, with reductions folded in
//! member order (rankwise's threads backend does the same, so results can be compared bit for
//! bit; real NCCL may round float sums differently).

use std::collections::HashMap;
use std::ffi::{c_int, c_void};

use half::{bf16, f16};

use super::{Call, Kind};

/// Bytes of an element of NCCL type `dtype`.
pub(crate) fn size(dtype: c_int) -> usize {
    match dtype {
        0 | 1 => 1,
        6 | 9 => 2,
        2 | 3 | 7 => 4,
        _ => 8,
    }
}

/// An element type: the arithmetic rankwise's reductions use.
trait El: Copy {
    fn add(a: Self, b: Self) -> Self;
    fn mul(a: Self, b: Self) -> Self;
    fn min(a: Self, b: Self) -> Self;
    fn max(a: Self, b: Self) -> Self;
    fn div(a: Self, n: usize) -> Self;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
}

macro_rules! ints {
    ($($t:ty),*) => {$(
        impl El for $t {
            fn add(a: Self, b: Self) -> Self { a.wrapping_add(b) }
            fn mul(a: Self, b: Self) -> Self { a.wrapping_mul(b) }
            fn min(a: Self, b: Self) -> Self { Ord::min(a, b) }
            fn max(a: Self, b: Self) -> Self { Ord::max(a, b) }
            fn div(a: Self, n: usize) -> Self { (a as i128 / n as i128) as $t }
            fn from_f64(v: f64) -> Self { v as $t }
            fn to_f64(self) -> f64 { self as f64 }
        }
    )*};
}
ints!(i8, u8, i32, u32, i64, u64);

macro_rules! floats {
    ($($t:ty),*) => {$(
        impl El for $t {
            fn add(a: Self, b: Self) -> Self { a + b }
            fn mul(a: Self, b: Self) -> Self { a * b }
            fn min(a: Self, b: Self) -> Self { if b < a { b } else { a } }
            fn max(a: Self, b: Self) -> Self { if b > a { b } else { a } }
            fn div(a: Self, n: usize) -> Self { a / n as $t }
            fn from_f64(v: f64) -> Self { v as $t }
            fn to_f64(self) -> f64 { self as f64 }
        }
    )*};
}
floats!(f32, f64);

macro_rules! halves {
    ($($t:ty),*) => {$(
        impl El for $t {
            fn add(a: Self, b: Self) -> Self { <$t>::from_f32(a.to_f32() + b.to_f32()) }
            fn mul(a: Self, b: Self) -> Self { <$t>::from_f32(a.to_f32() * b.to_f32()) }
            fn min(a: Self, b: Self) -> Self { if b < a { b } else { a } }
            fn max(a: Self, b: Self) -> Self { if b > a { b } else { a } }
            fn div(a: Self, n: usize) -> Self { <$t>::from_f32(a.to_f32() / n as f32) }
            fn from_f64(v: f64) -> Self { <$t>::from_f64(v) }
            fn to_f64(self) -> f64 { <$t>::to_f64(self) }
        }
    )*};
}
halves!(f16, bf16);

/// Runs `$body` with `$T` the Rust type of NCCL type `$dtype` (NCCL's codes, in order).
macro_rules! with_type {
    ($dtype:expr, $T:ident => $body:expr) => {
        with_type!(@arms $dtype, $T, $body;
            0 => i8, 1 => u8, 2 => i32, 3 => u32, 4 => i64, 5 => u64,
            6 => f16, 7 => f32, 8 => f64, 9 => bf16)
    };
    (@arms $dtype:expr, $T:ident, $body:expr; $($code:literal => $ty:ty),*) => {
        match $dtype {
            $($code => {
                type $T = $ty;
                $body
            })*
            other => return Err(format!("no NCCL type {other}")),
        }
    };
}

/// A `PreMulSum` scalar (one element of `dtype` at `p`) as f64.
pub(crate) unsafe fn read_scalar(p: *const c_void, dtype: c_int) -> f64 {
    let read = || -> Result<f64, String> {
        // SAFETY: the caller passes one element of `dtype`.
        with_type!(dtype, T => Ok(unsafe { p.cast::<T>().read_unaligned() }.to_f64()))
    };
    read().unwrap_or(0.0)
}

/// `count` elements at `addr`, copied out (a member's input may be another's output).
fn load<T: El>(addr: u64, at: usize, count: usize) -> Vec<T> {
    // SAFETY: the calls' buffers hold what NCCL reads for them (the caller's contract).
    (0..count)
        .map(|i| unsafe { (addr as *const T).add(at + i).read_unaligned() })
        .collect()
}

fn store<T: El>(addr: u64, at: usize, v: &[T]) {
    for (i, &x) in v.iter().enumerate() {
        // SAFETY: as in `load`, for what NCCL writes.
        unsafe { (addr as *mut T).add(at + i).write_unaligned(x) };
    }
}

/// Folds `parts` (one per member, in member order) with NCCL operator `op`.
fn fold<T: El>(
    parts: &[Vec<T>],
    op: c_int,
    premul: &HashMap<c_int, f64>,
) -> Result<Vec<T>, String> {
    let n = parts.len();
    let mut acc = parts[0].clone();
    let scale = premul.get(&op).map(|&s| T::from_f64(s));
    if let Some(s) = scale {
        acc.iter_mut().for_each(|a| *a = T::mul(s, *a));
    }
    for p in &parts[1..] {
        for (a, &x) in acc.iter_mut().zip(p) {
            *a = match (op, scale) {
                (_, Some(s)) => T::add(*a, T::mul(s, x)),
                (0 | 4, _) => T::add(*a, x),
                (1, _) => T::mul(*a, x),
                (2, _) => T::max(*a, x),
                (3, _) => T::min(*a, x),
                (other, _) => return Err(format!("no NCCL operator {other}")),
            };
        }
    }
    if op == 4 {
        acc.iter_mut().for_each(|a| *a = T::div(*a, n));
    }
    Ok(acc)
}

/// Moves the data of one collective whose members' calls are `calls` (in member order).
pub(crate) fn collective(calls: &[Call], premul: &HashMap<c_int, f64>) -> Result<(), String> {
    let c0 = calls[0];
    // Created operators differ by member; what must agree is the scalar.
    let op = |c: &Call| premul.get(&c.op).map_or(Ok(c.op), |s| Err(s.to_bits()));
    if calls.iter().any(|c| {
        c.kind != c0.kind
            || c.count != c0.count
            || c.dtype != c0.dtype
            || c.root != c0.root
            || op(c) != op(&c0)
    }) {
        return Err(format!(
            "members issued different collectives: {:?}",
            c0.kind
        ));
    }
    let n = calls.len();
    let (k, root) = (c0.count, c0.root);
    with_type!(c0.dtype, T => {
        match c0.kind {
            Kind::AllReduce | Kind::Reduce => {
                let parts: Vec<Vec<T>> = calls.iter().map(|c| load(c.send, 0, k)).collect();
                let out = fold(&parts, c0.op, premul)?;
                for (r, c) in calls.iter().enumerate() {
                    if c0.kind == Kind::AllReduce || r == root {
                        store(c.recv, 0, &out);
                    }
                }
            }
            Kind::Broadcast => {
                let data: Vec<T> = load(calls[root].send, 0, k);
                calls.iter().for_each(|c| store(c.recv, 0, &data));
            }
            Kind::AllGather => {
                let parts: Vec<Vec<T>> = calls.iter().map(|c| load(c.send, 0, k)).collect();
                for c in calls {
                    for (j, p) in parts.iter().enumerate() {
                        store(c.recv, j * k, p);
                    }
                }
            }
            Kind::ReduceScatter => {
                let blocks: Vec<Vec<Vec<T>>> = (0..n)
                    .map(|r| calls.iter().map(|c| load(c.send, r * k, k)).collect())
                    .collect();
                for (r, c) in calls.iter().enumerate() {
                    store(c.recv, 0, &fold(&blocks[r], c0.op, premul)?);
                }
            }
            Kind::AllToAll => {
                let blocks: Vec<Vec<Vec<T>>> = calls
                    .iter()
                    .map(|c| (0..n).map(|j| load(c.send, j * k, k)).collect())
                    .collect();
                for (r, c) in calls.iter().enumerate() {
                    for (j, from) in blocks.iter().enumerate() {
                        store(c.recv, j * k, &from[r]);
                    }
                }
            }
            Kind::Gather => {
                let parts: Vec<Vec<T>> = calls.iter().map(|c| load(c.send, 0, k)).collect();
                for (j, p) in parts.iter().enumerate() {
                    store(calls[root].recv, j * k, p);
                }
            }
            Kind::Scatter => {
                let blocks: Vec<Vec<T>> = (0..n).map(|j| load(calls[root].send, j * k, k)).collect();
                for (r, c) in calls.iter().enumerate() {
                    store(c.recv, 0, &blocks[r]);
                }
            }
            Kind::Send | Kind::Recv => return Err("a message is not a collective".into()),
        }
    });
    Ok(())
}
