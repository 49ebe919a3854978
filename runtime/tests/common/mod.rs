//! A plain sequential reference implementation of every collective, written independently of
//! the backends: element by element, through multi-indices, with no shared helpers.

#![allow(dead_code)]

use rankwise_runtime::{Element, ReduceOp, bf16, f16};

/// The reference's own arithmetic, written from the documented semantics (integers wrap,
/// half precision is computed in `f32` and rounded after every step, `Avg` truncates integers),
/// not taken from the runtime.
pub trait Num: Element {
    fn of(v: f64) -> Self;
    fn add(a: Self, b: Self) -> Self;
    fn mul(a: Self, b: Self) -> Self;
    fn min(a: Self, b: Self) -> Self;
    fn max(a: Self, b: Self) -> Self;
    /// `(and, or, xor)`; floats never reach it.
    fn bits(a: Self, b: Self) -> (Self, Self, Self);
    fn div(a: Self, n: usize) -> Self;
}

macro_rules! int {
    ($($t:ty),*) => {$(
        impl Num for $t {
            fn of(v: f64) -> Self { v as $t }
            fn add(a: Self, b: Self) -> Self { a.wrapping_add(b) }
            fn mul(a: Self, b: Self) -> Self { a.wrapping_mul(b) }
            fn min(a: Self, b: Self) -> Self { a.min(b) }
            fn max(a: Self, b: Self) -> Self { a.max(b) }
            fn bits(a: Self, b: Self) -> (Self, Self, Self) { (a & b, a | b, a ^ b) }
            fn div(a: Self, n: usize) -> Self { (a as i128 / n as i128) as $t }
        }
    )*};
}
int!(i8, u8, i32, u32, i64, u64);

macro_rules! float {
    ($($t:ty),*) => {$(
        impl Num for $t {
            fn of(v: f64) -> Self { v as $t }
            fn add(a: Self, b: Self) -> Self { a + b }
            fn mul(a: Self, b: Self) -> Self { a * b }
            fn min(a: Self, b: Self) -> Self { if b < a { b } else { a } }
            fn max(a: Self, b: Self) -> Self { if b > a { b } else { a } }
            fn bits(_: Self, _: Self) -> (Self, Self, Self) { unreachable!("bitwise on a float") }
            fn div(a: Self, n: usize) -> Self { a / n as $t }
        }
    )*};
}
float!(f32, f64);

macro_rules! half {
    ($($t:ty),*) => {$(
        impl Num for $t {
            fn of(v: f64) -> Self { <$t>::from_f64(v) }
            fn add(a: Self, b: Self) -> Self { <$t>::from_f32(a.to_f32() + b.to_f32()) }
            fn mul(a: Self, b: Self) -> Self { <$t>::from_f32(a.to_f32() * b.to_f32()) }
            fn min(a: Self, b: Self) -> Self { if b < a { b } else { a } }
            fn max(a: Self, b: Self) -> Self { if b > a { b } else { a } }
            fn bits(_: Self, _: Self) -> (Self, Self, Self) { unreachable!("bitwise on a float") }
            fn div(a: Self, n: usize) -> Self { <$t>::from_f32(a.to_f32() / n as f32) }
        }
    )*};
}
half!(f16, bf16);

/// Deterministic, small, non-zero test values (1..=9) for a rank, a case and an element.
pub fn value<T: Num>(rank: usize, case: usize, i: usize) -> T {
    T::of(((rank * 5 + case * 3 + i * 7) % 9) as f64 + 1.0)
}

pub fn data<T: Num>(rank: usize, case: usize, numel: usize) -> Vec<T> {
    (0..numel).map(|i| value(rank, case, i)).collect()
}

/// Folds the inputs element-wise in order: ((x0 ∘ x1) ∘ x2) ∘ …
pub fn reduce<T: Num>(inputs: &[Vec<T>], op: ReduceOp) -> Vec<T> {
    let n = inputs.len();
    (0..inputs[0].len())
        .map(|i| {
            let scale = |x: T| match op {
                ReduceOp::PreMulSum(s) => T::mul(T::of(s), x),
                _ => x,
            };
            let mut acc = scale(inputs[0][i]);
            for input in &inputs[1..] {
                let x = input[i];
                acc = match op {
                    ReduceOp::Sum | ReduceOp::Avg => T::add(acc, x),
                    ReduceOp::PreMulSum(_) => T::add(acc, scale(x)),
                    ReduceOp::Prod => T::mul(acc, x),
                    ReduceOp::Min => T::min(acc, x),
                    ReduceOp::Max => T::max(acc, x),
                    ReduceOp::BitAnd => T::bits(acc, x).0,
                    ReduceOp::BitOr => T::bits(acc, x).1,
                    ReduceOp::BitXor => T::bits(acc, x).2,
                };
            }
            if let ReduceOp::Avg = op {
                T::div(acc, n)
            } else {
                acc
            }
        })
        .collect()
}

/// The index of element `flat` of `shape`, written into `idx` (one buffer for a whole tensor:
/// an allocation per element made the sanitizer runs' references slower than their collectives).
fn unravel(mut flat: usize, shape: &[usize], idx: &mut [usize]) {
    for d in (0..shape.len()).rev() {
        idx[d] = flat % shape[d];
        flat /= shape[d];
    }
}

fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &s)| acc * s + i)
}

/// Concatenates parts of equal `shape` along `dim`.
pub fn concat<T: Element>(parts: &[Vec<T>], shape: &[usize], dim: usize) -> Vec<T> {
    let mut out_shape = shape.to_vec();
    out_shape[dim] *= parts.len();
    let numel: usize = out_shape.iter().product();
    let mut idx = vec![0; shape.len()];
    (0..numel)
        .map(|flat| {
            unravel(flat, &out_shape, &mut idx);
            let part = idx[dim] / shape[dim];
            idx[dim] %= shape[dim];
            parts[part][ravel(&idx, shape)]
        })
        .collect()
}

/// Splits `data` of `shape` along `dim` into `n` equal parts.
pub fn split<T: Element>(data: &[T], shape: &[usize], dim: usize, n: usize) -> Vec<Vec<T>> {
    let mut part_shape = shape.to_vec();
    part_shape[dim] /= n;
    let part_numel: usize = part_shape.iter().product();
    let mut idx = vec![0; shape.len()];
    (0..n)
        .map(|p| {
            (0..part_numel)
                .map(|flat| {
                    unravel(flat, &part_shape, &mut idx);
                    idx[dim] += p * part_shape[dim];
                    data[ravel(&idx, shape)]
                })
                .collect()
        })
        .collect()
}

pub fn with_dim(shape: &[usize], dim: usize, f: impl Fn(usize) -> usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s[dim] = f(s[dim]);
    s
}
