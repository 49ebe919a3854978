//! A plain sequential reference implementation of every collective, written independently of
//! the backends: element by element, through multi-indices, with no shared helpers.

#![allow(dead_code)]

use rankwise_runtime::{Element, ReduceOp};

/// Deterministic, small, non-zero test values (1..=9) for a rank, a case and an element.
pub fn value<T: Element>(rank: usize, case: usize, i: usize) -> T {
    T::from_f64(((rank * 5 + case * 3 + i * 7) % 9) as f64 + 1.0)
}

pub fn data<T: Element>(rank: usize, case: usize, numel: usize) -> Vec<T> {
    (0..numel).map(|i| value(rank, case, i)).collect()
}

/// Folds the inputs element-wise in order: ((x0 ∘ x1) ∘ x2) ∘ …
pub fn reduce<T: Element>(inputs: &[Vec<T>], op: ReduceOp) -> Vec<T> {
    let n = inputs.len();
    (0..inputs[0].len())
        .map(|i| {
            let scale = |x: T| match op {
                ReduceOp::PreMulSum(s) => T::mul(T::from_f64(s), x),
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
                    ReduceOp::BitAnd => {
                        T::bitwise(acc, x, rankwise_runtime::element::Bitwise::And).unwrap()
                    }
                    ReduceOp::BitOr => {
                        T::bitwise(acc, x, rankwise_runtime::element::Bitwise::Or).unwrap()
                    }
                    ReduceOp::BitXor => {
                        T::bitwise(acc, x, rankwise_runtime::element::Bitwise::Xor).unwrap()
                    }
                };
            }
            if let ReduceOp::Avg = op {
                T::div_count(acc, n)
            } else {
                acc
            }
        })
        .collect()
}

fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = flat % shape[d];
        flat /= shape[d];
    }
    idx
}

fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &s)| acc * s + i)
}

/// Concatenates parts of equal `shape` along `dim`.
pub fn concat<T: Element>(parts: &[Vec<T>], shape: &[usize], dim: usize) -> Vec<T> {
    let mut out_shape = shape.to_vec();
    out_shape[dim] *= parts.len();
    let numel: usize = out_shape.iter().product();
    (0..numel)
        .map(|flat| {
            let mut idx = unravel(flat, &out_shape);
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
    (0..n)
        .map(|p| {
            (0..part_numel)
                .map(|flat| {
                    let mut idx = unravel(flat, &part_shape);
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
