//! The element-wise kernels that apply reduction operators.

use crate::ReduceOp;
use crate::element::{Arith, Bitwise};

/// Element-wise reduction of equally long slices, in the order given.
///
/// Kept as straight loops over slices (one per operator) so that the compiler vectorises them;
/// callers feed cache-sized blocks.
pub(crate) struct Reducer<T: Arith> {
    op: ReduceOp,
    scale: T,
    count: usize,
}

impl<T: Arith> Reducer<T> {
    /// A reducer over `count` inputs. The caller has checked `op.supports(T::DTYPE)`.
    pub(crate) fn new(op: ReduceOp, count: usize) -> Self {
        let scale = match op {
            ReduceOp::PreMulSum(s) => T::from_f64(s),
            _ => T::default(),
        };
        Reducer { op, scale, count }
    }

    /// Prepares `acc`, which holds a copy of the first input (scaling it for `PreMulSum`).
    #[inline]
    pub(crate) fn start(&self, acc: &mut [T]) {
        if let ReduceOp::PreMulSum(_) = self.op {
            for a in acc.iter_mut() {
                *a = T::mul(self.scale, *a);
            }
        }
    }

    /// `acc = acc ∘ x`.
    #[inline]
    pub(crate) fn combine(&self, acc: &mut [T], x: &[T]) {
        let acc = &mut acc[..x.len()];
        match self.op {
            ReduceOp::Sum | ReduceOp::Avg => {
                for (a, &x) in acc.iter_mut().zip(x) {
                    *a = T::add(*a, x);
                }
            }
            ReduceOp::PreMulSum(_) => {
                for (a, &x) in acc.iter_mut().zip(x) {
                    *a = T::add(*a, T::mul(self.scale, x));
                }
            }
            ReduceOp::Prod => {
                for (a, &x) in acc.iter_mut().zip(x) {
                    *a = T::mul(*a, x);
                }
            }
            ReduceOp::Min => {
                for (a, &x) in acc.iter_mut().zip(x) {
                    *a = T::min(*a, x);
                }
            }
            ReduceOp::Max => {
                for (a, &x) in acc.iter_mut().zip(x) {
                    *a = T::max(*a, x);
                }
            }
            ReduceOp::BitAnd | ReduceOp::BitOr | ReduceOp::BitXor => {
                let which = match self.op {
                    ReduceOp::BitOr => Bitwise::Or,
                    ReduceOp::BitXor => Bitwise::Xor,
                    _ => Bitwise::And,
                };
                for (a, &x) in acc.iter_mut().zip(x) {
                    // Floats never reach here: ops are validated against the dtype before any
                    // data moves. Keep the value rather than invent one if that ever changes.
                    *a = T::bitwise(*a, x, which).unwrap_or(*a);
                }
            }
        }
    }

    /// Applies the final step (division for `Avg`).
    #[inline]
    pub(crate) fn finish(&self, acc: &mut [T]) {
        if let ReduceOp::Avg = self.op {
            for a in acc.iter_mut() {
                *a = T::div_count(*a, self.count);
            }
        }
    }
}

/// A loop over elements that applies a reduction given as its per-element steps: the first
/// input's preparation, the combination of the running value with the next input, and the
/// final step. A trait rather than a closure because the steps' types differ per operator and
/// the loop must be compiled for each (so that they inline into it).
pub(crate) trait Fold<T> {
    /// What the loop returns.
    type Output;
    /// Runs the loop with these steps.
    fn fold(
        self,
        start: impl Fn(T) -> T + Copy,
        combine: impl Fn(T, T) -> T + Copy,
        finish: impl Fn(T) -> T + Copy,
    ) -> Self::Output;
}

impl<T: Arith> Reducer<T> {
    /// Runs `f` with this reduction's per-element steps, the operator chosen once (see
    /// [`Fold`]). The same values as [`Reducer::start`], [`Reducer::combine`] and
    /// [`Reducer::finish`] applied to slices.
    #[inline(always)]
    pub(crate) fn fold<F: Fold<T>>(&self, f: F) -> F::Output {
        let (scale, count) = (self.scale, self.count);
        let same = |a: T| a;
        match self.op {
            ReduceOp::Sum => f.fold(same, T::add, same),
            ReduceOp::Avg => f.fold(same, T::add, move |a| T::div_count(a, count)),
            ReduceOp::PreMulSum(_) => f.fold(
                move |a| T::mul(scale, a),
                move |a, x| T::add(a, T::mul(scale, x)),
                same,
            ),
            ReduceOp::Prod => f.fold(same, T::mul, same),
            ReduceOp::Min => f.fold(same, T::min, same),
            ReduceOp::Max => f.fold(same, T::max, same),
            ReduceOp::BitAnd | ReduceOp::BitOr | ReduceOp::BitXor => {
                let which = match self.op {
                    ReduceOp::BitOr => Bitwise::Or,
                    ReduceOp::BitXor => Bitwise::Xor,
                    _ => Bitwise::And,
                };
                // As in `combine`: floats never get here.
                f.fold(same, move |a, x| T::bitwise(a, x, which).unwrap_or(a), same)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn premulsum_scales_every_input() {
        let r = Reducer::<i32>::new(ReduceOp::PreMulSum(3.0), 2);
        let mut acc = [1, 2, 3];
        r.start(&mut acc);
        r.combine(&mut acc, &[10, 20, 30]);
        r.finish(&mut acc);
        assert_eq!(acc, [33, 66, 99]);
    }

    #[test]
    fn avg_divides_by_count() {
        let r = Reducer::<f32>::new(ReduceOp::Avg, 4);
        let mut acc = [1.0];
        r.start(&mut acc);
        for x in [2.0, 3.0, 4.0] {
            r.combine(&mut acc, &[x]);
        }
        r.finish(&mut acc);
        assert_eq!(acc, [2.5]);
    }
}
