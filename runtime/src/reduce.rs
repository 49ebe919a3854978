//! Reduction operators and the element-wise kernels that apply them.

use std::fmt;

use crate::element::{Bitwise, DType, Element};

/// How a reducing collective combines the members' values, as `torch.distributed.ReduceOp`.
///
/// Values are combined in member (group rank) order, `((x0 ∘ x1) ∘ x2) ∘ …`, on every backend
/// that rankwise controls, so the result is the same on every rank, bit for bit.
#[derive(Clone, Copy, Debug)]
pub enum ReduceOp {
    /// Sum (wrapping for integers).
    Sum,
    /// Product (wrapping for integers).
    Prod,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// Sum divided by the number of members (truncating for integers).
    Avg,
    /// `Σ scalar · xᵢ`; the scalar is converted to the element type first (NCCL's
    /// `ncclRedOpCreatePreMulSum`).
    PreMulSum(f64),
    /// Bitwise and (integer types only).
    BitAnd,
    /// Bitwise or (integer types only).
    BitOr,
    /// Bitwise xor (integer types only).
    BitXor,
}

impl PartialEq for ReduceOp {
    /// Two ops are equal when they compute the same thing; `PreMulSum` scalars compare by bits
    /// so that a NaN scalar still equals itself in the cross-rank agreement check.
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (ReduceOp::PreMulSum(a), ReduceOp::PreMulSum(b)) => a.to_bits() == b.to_bits(),
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }
}

impl Eq for ReduceOp {}

impl ReduceOp {
    /// Every operator, with `PreMulSum(2.0)` standing for its family.
    pub const ALL: [ReduceOp; 9] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
        ReduceOp::PreMulSum(2.0),
        ReduceOp::BitAnd,
        ReduceOp::BitOr,
        ReduceOp::BitXor,
    ];

    /// The name users write (`Sum`, `PreMulSum`, …).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "Sum",
            ReduceOp::Prod => "Prod",
            ReduceOp::Min => "Min",
            ReduceOp::Max => "Max",
            ReduceOp::Avg => "Avg",
            ReduceOp::PreMulSum(_) => "PreMulSum",
            ReduceOp::BitAnd => "BitAnd",
            ReduceOp::BitOr => "BitOr",
            ReduceOp::BitXor => "BitXor",
        }
    }

    /// Whether this is one of the bitwise operators.
    pub fn is_bitwise(self) -> bool {
        matches!(self, ReduceOp::BitAnd | ReduceOp::BitOr | ReduceOp::BitXor)
    }

    /// Whether the operator is defined for `dtype` (bitwise operators are not, for floats).
    pub fn supports(self, dtype: DType) -> bool {
        !(self.is_bitwise() && dtype.is_float())
    }

    fn bitwise(self) -> Option<Bitwise> {
        match self {
            ReduceOp::BitAnd => Some(Bitwise::And),
            ReduceOp::BitOr => Some(Bitwise::Or),
            ReduceOp::BitXor => Some(Bitwise::Xor),
            _ => None,
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReduceOp::PreMulSum(s) => write!(f, "PreMulSum({s})"),
            other => f.write_str(other.name()),
        }
    }
}

/// Element-wise reduction of equally long slices, in the order given.
///
/// Kept as straight loops over slices (one per operator) so that the compiler vectorises them;
/// callers feed cache-sized blocks.
pub(crate) struct Reducer<T: Element> {
    op: ReduceOp,
    scale: T,
    count: usize,
}

impl<T: Element> Reducer<T> {
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
                let which = self.op.bitwise().unwrap_or(Bitwise::And);
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

    #[test]
    fn bitwise_is_rejected_for_floats_only() {
        assert!(!ReduceOp::BitAnd.supports(DType::BF16));
        assert!(ReduceOp::BitXor.supports(DType::U8));
        assert!(ReduceOp::Max.supports(DType::F16));
        assert_eq!(ReduceOp::PreMulSum(f64::NAN), ReduceOp::PreMulSum(f64::NAN));
        assert_ne!(ReduceOp::PreMulSum(1.0), ReduceOp::PreMulSum(2.0));
        assert_ne!(ReduceOp::Sum, ReduceOp::Avg);
    }
}
