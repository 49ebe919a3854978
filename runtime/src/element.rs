//! Element types a tensor can hold, and the arithmetic the reductions need.
//!
//! [`Element`] is sealed: the backends (NCCL, MPI) support a fixed set of data types, and the
//! verifier reasons about them by [`DType`] tag, so users cannot add their own.

use std::fmt;

use half::{bf16, f16};

/// The data type of a tensor, as a value the verifier and the backends can inspect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 64-bit IEEE float.
    F64,
    /// 16-bit IEEE float (`half::f16`).
    F16,
    /// bfloat16 (`half::bf16`).
    BF16,
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer.
    U32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 64-bit integer.
    U64,
}

impl DType {
    /// Every data type, in declaration order.
    pub const ALL: [DType; 10] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I8,
        DType::U8,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::U64,
    ];

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    /// Whether this is a floating-point type (bitwise reductions are undefined for these).
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// The Rust spelling of the type, as users write it.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::U64 => "u64",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A type that can be stored in a [`Tensor`](crate::Tensor) and communicated.
///
/// Arithmetic is defined so that every backend agrees bit for bit: integers wrap on overflow (as
/// NCCL and MPI do in C), half-precision values are combined in `f32` and rounded after every
/// step, and bitwise operations exist only for integers.
pub trait Element:
    sealed::Sealed + Copy + Send + Sync + PartialEq + fmt::Debug + Default + 'static
{
    /// The tag of this type.
    const DTYPE: DType;
    /// `a + b` (wrapping for integers).
    fn add(a: Self, b: Self) -> Self;
    /// `a * b` (wrapping for integers).
    fn mul(a: Self, b: Self) -> Self;
    /// The smaller of `a` and `b` (for floats, NaN-propagating as in NCCL's `fminf` is not
    /// guaranteed; a NaN operand yields the other operand's comparison result).
    fn min(a: Self, b: Self) -> Self;
    /// The larger of `a` and `b`.
    fn max(a: Self, b: Self) -> Self;
    /// Bitwise and/or/xor; `None` for floating-point types.
    fn bitwise(a: Self, b: Self, which: Bitwise) -> Option<Self>;
    /// Division by a count (for `Avg`): truncating for integers.
    fn div_count(a: Self, n: usize) -> Self;
    /// Conversion from `f64` (saturating/rounding as `as` does).
    fn from_f64(v: f64) -> Self;
    /// Conversion to `f64`.
    fn to_f64(self) -> f64;
}

/// Which bitwise operation to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bitwise {
    /// `a & b`
    And,
    /// `a | b`
    Or,
    /// `a ^ b`
    Xor,
}

macro_rules! impl_int {
    ($($t:ty => $d:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline(always)]
            fn add(a: Self, b: Self) -> Self { a.wrapping_add(b) }
            #[inline(always)]
            fn mul(a: Self, b: Self) -> Self { a.wrapping_mul(b) }
            #[inline(always)]
            fn min(a: Self, b: Self) -> Self { Ord::min(a, b) }
            #[inline(always)]
            fn max(a: Self, b: Self) -> Self { Ord::max(a, b) }
            #[inline(always)]
            fn bitwise(a: Self, b: Self, which: Bitwise) -> Option<Self> {
                Some(match which { Bitwise::And => a & b, Bitwise::Or => a | b, Bitwise::Xor => a ^ b })
            }
            #[inline(always)]
            fn div_count(a: Self, n: usize) -> Self {
                // `n` is a group size (>= 1); it fits every integer type we divide in i128.
                (a as i128 / n as i128) as $t
            }
            fn from_f64(v: f64) -> Self { v as $t }
            fn to_f64(self) -> f64 { self as f64 }
        }
    )*};
}
impl_int!(i8 => I8, u8 => U8, i32 => I32, u32 => U32, i64 => I64, u64 => U64);

macro_rules! impl_float {
    ($($t:ty => $d:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline(always)]
            fn add(a: Self, b: Self) -> Self { a + b }
            #[inline(always)]
            fn mul(a: Self, b: Self) -> Self { a * b }
            #[inline(always)]
            fn min(a: Self, b: Self) -> Self { if b < a { b } else { a } }
            #[inline(always)]
            fn max(a: Self, b: Self) -> Self { if b > a { b } else { a } }
            #[inline(always)]
            fn bitwise(_: Self, _: Self, _: Bitwise) -> Option<Self> { None }
            #[inline(always)]
            fn div_count(a: Self, n: usize) -> Self { a / n as $t }
            fn from_f64(v: f64) -> Self { v as $t }
            fn to_f64(self) -> f64 { self as f64 }
        }
    )*};
}
impl_float!(f32 => F32, f64 => F64);

macro_rules! impl_half {
    ($($t:ty => $d:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline(always)]
            fn add(a: Self, b: Self) -> Self { <$t>::from_f32(a.to_f32() + b.to_f32()) }
            #[inline(always)]
            fn mul(a: Self, b: Self) -> Self { <$t>::from_f32(a.to_f32() * b.to_f32()) }
            #[inline(always)]
            fn min(a: Self, b: Self) -> Self { if b < a { b } else { a } }
            #[inline(always)]
            fn max(a: Self, b: Self) -> Self { if b > a { b } else { a } }
            #[inline(always)]
            fn bitwise(_: Self, _: Self, _: Bitwise) -> Option<Self> { None }
            #[inline(always)]
            fn div_count(a: Self, n: usize) -> Self { <$t>::from_f32(a.to_f32() / n as f32) }
            fn from_f64(v: f64) -> Self { <$t>::from_f64(v) }
            fn to_f64(self) -> f64 { <$t>::to_f64(self) }
        }
    )*};
}
impl_half!(f16 => F16, bf16 => BF16);

/// Calls `$body` with the type alias `$T` bound to the Rust type of `$dtype`.
#[macro_export]
#[doc(hidden)]
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::F16 => {
                type $T = $crate::half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = $crate::half::bf16;
                $body
            }
            $crate::DType::I8 => {
                type $T = i8;
                $body
            }
            $crate::DType::U8 => {
                type $T = u8;
                $body
            }
            $crate::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::DType::U32 => {
                type $T = u32;
                $body
            }
            $crate::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::DType::U64 => {
                type $T = u64;
                $body
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_rust_types() {
        for d in DType::ALL {
            let size = with_dtype!(d, T => std::mem::size_of::<T>());
            assert_eq!(d.size(), size, "{d}");
            assert_eq!(with_dtype!(d, T => T::DTYPE), d);
        }
    }

    #[test]
    fn integer_arithmetic_wraps_and_avg_truncates() {
        assert_eq!(<i8 as Element>::add(127, 1), -128);
        assert_eq!(<u8 as Element>::mul(16, 16), 0);
        assert_eq!(<i32 as Element>::div_count(-7, 2), -3);
        assert_eq!(<u64 as Element>::div_count(u64::MAX, 1), u64::MAX);
        assert_eq!(<i64 as Element>::bitwise(6, 3, Bitwise::Xor), Some(5));
        assert_eq!(<f32 as Element>::bitwise(1.0, 2.0, Bitwise::And), None);
    }

    #[test]
    fn half_rounds_each_step() {
        let a = f16::from_f32(2048.0);
        // 2048 + 1 is not representable in f16 and rounds back to 2048.
        assert_eq!(<f16 as Element>::add(a, f16::ONE), a);
        assert_eq!(<bf16 as Element>::min(bf16::ONE, bf16::ZERO), bf16::ZERO);
    }
}
