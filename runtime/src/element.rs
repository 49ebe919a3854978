//! Element types a tensor can hold, and the arithmetic the reductions need.

use std::fmt;

use half::{bf16, f16};

use crate::DType;

/// Sealing: a `pub` trait in a private module, so users cannot implement [`Element`].
mod sealed {
    pub trait Sealed {}
}

/// Which bitwise operation to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bitwise {
    /// `a & b`
    And,
    /// `a | b`
    Or,
    /// `a ^ b`
    Xor,
}

/// The arithmetic the reductions need, defined so that every backend agrees bit for bit:
/// integers wrap on overflow (as NCCL and MPI do in C), half-precision values are combined
/// in `f32` and rounded after every step, and bitwise operations exist only for integers.
pub(crate) trait Arith: Element {
    /// `a + b` (wrapping for integers).
    fn add(a: Self, b: Self) -> Self;
    /// `a * b` (wrapping for integers).
    fn mul(a: Self, b: Self) -> Self;
    /// The smaller of `a` and `b` (for floats: `b` if `b < a`, else `a`; so a NaN in `b`
    /// is ignored and a NaN in `a` kept).
    fn min(a: Self, b: Self) -> Self;
    /// The larger of `a` and `b` (NaN as for `min`).
    fn max(a: Self, b: Self) -> Self;
    /// Bitwise and/or/xor; `None` for floating-point types.
    fn bitwise(a: Self, b: Self, which: Bitwise) -> Option<Self>;
    /// Division by a count (for `Avg`): truncating for integers.
    fn div_count(a: Self, n: usize) -> Self;
    /// Conversion from `f64` (saturating/rounding as `as` does).
    fn from_f64(v: f64) -> Self;
    /// Conversion to `f64` (for printing).
    fn to_f64(self) -> f64;
}

/// A type that can be stored in a [`Tensor`](crate::Tensor) and communicated: `f32`, `f64`,
/// `f16`, `bf16`, `i8`, `u8`, `i32`, `u32`, `i64`, `u64`.
///
/// The set is closed (the trait is sealed): the backends support these types and no others, and
/// the verifier reasons about them by their [`DType`] tag. Reductions combine values so that
/// every backend agrees bit for bit: integers wrap on overflow (as NCCL and MPI do in C),
/// half-precision values are combined in `f32` and rounded after every step.
pub trait Element:
    sealed::Sealed + Copy + Send + Sync + PartialEq + fmt::Debug + fmt::Display + Default + 'static
{
    /// The tag of this type.
    const DTYPE: DType;
}

/// `x` as an `f64` (for printing). Goes through `Any` because [`Element`] deliberately carries
/// no arithmetic; the sealed set guarantees that `T::DTYPE` names `T` itself.
pub(crate) fn to_f64<T: Element>(x: T) -> f64 {
    let any = &x as &dyn std::any::Any;
    with_dtype!(T::DTYPE, U => any.downcast_ref::<U>().map_or(f64::NAN, |u| Arith::to_f64(*u)))
}

macro_rules! impl_int {
    ($($t:ty => $d:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
        }
        impl Arith for $t {
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
        }
        impl Arith for $t {
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
        }
        impl Arith for $t {
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
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            crate::DType::F32 => {
                type $T = f32;
                $body
            }
            crate::DType::F64 => {
                type $T = f64;
                $body
            }
            crate::DType::F16 => {
                type $T = half::f16;
                $body
            }
            crate::DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            crate::DType::I8 => {
                type $T = i8;
                $body
            }
            crate::DType::U8 => {
                type $T = u8;
                $body
            }
            crate::DType::I32 => {
                type $T = i32;
                $body
            }
            crate::DType::U32 => {
                type $T = u32;
                $body
            }
            crate::DType::I64 => {
                type $T = i64;
                $body
            }
            crate::DType::U64 => {
                type $T = u64;
                $body
            }
        }
    };
}
pub(crate) use with_dtype;

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
        assert_eq!(<i8 as Arith>::add(127, 1), -128);
        assert_eq!(<u8 as Arith>::mul(16, 16), 0);
        assert_eq!(<i32 as Arith>::div_count(-7, 2), -3);
        assert_eq!(<u64 as Arith>::div_count(u64::MAX, 1), u64::MAX);
        assert_eq!(<i64 as Arith>::bitwise(6, 3, Bitwise::Xor), Some(5));
        assert_eq!(<f32 as Arith>::bitwise(1.0, 2.0, Bitwise::And), None);
    }

    #[test]
    fn half_rounds_each_step() {
        let a = f16::from_f32(2048.0);
        // 2048 + 1 is not representable in f16 and rounds back to 2048.
        assert_eq!(<f16 as Arith>::add(a, f16::ONE), a);
        assert_eq!(<bf16 as Arith>::min(bf16::ONE, bf16::ZERO), bf16::ZERO);
    }
}
