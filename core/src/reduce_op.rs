//! Reduction operators: what they mean and which element types they are defined for.

use std::fmt;

use crate::DType;

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
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReduceOp::PreMulSum(s) => write!(f, "PreMulSum({s})"),
            other => f.write_str(other.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
