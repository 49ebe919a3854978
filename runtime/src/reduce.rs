//! The element-wise kernels that apply reduction operators.

use crate::ReduceOp;
use crate::element::{Arith, Bitwise};

/// Whether this CPU runs the AVX2 variants of the reduction loops (checked once, then a load
/// and a test). The loops are the same Rust code compiled twice: the default build targets
/// baseline x86-64, whose 16-byte vectors leave a reduction of cache-resident data short of what
/// the core can load and store; with 32-byte vectors a packed bucket's data pass takes about
/// three quarters of the time (BENCHMARKS.md, session 26). Element-wise operations give the same
/// bits at either width: nothing is reassociated.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn wide() -> bool {
    #[cfg(test)]
    if NARROW.with(std::cell::Cell::get) {
        return false;
    }
    std::arch::is_x86_feature_detected!("avx2")
}

/// Runs `loops`, compiled for AVX2 where [`wide`] says the CPU has it: the one place the
/// reduction loops pick their width. `loops` is inlined into the function built with AVX2 (a
/// closure called once), so its loops are vectorised 32 bytes at a time there.
#[inline(always)]
pub(crate) fn widest<R>(loops: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if wide() {
        // SAFETY: the CPU has AVX2 (just checked).
        return unsafe { with_avx2(loops) };
    }
    loops()
}

/// [`widest`]'s AVX2 build.
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn with_avx2<R>(loops: impl FnOnce() -> R) -> R {
    loops()
}

#[cfg(test)]
thread_local! {
    /// Set by [`narrow`]: this thread runs the baseline loops even where the CPU has AVX2.
    static NARROW: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` on the baseline loops, so that tests on a CPU with AVX2 check both variants.
#[cfg(test)]
pub(crate) fn narrow<R>(f: impl FnOnce() -> R) -> R {
    NARROW.with(|n| n.set(true));
    let r = f();
    NARROW.with(|n| n.set(false));
    r
}

/// Every variant of the loops, for tests: each value of `f` is computed on the baseline loops
/// and, where the CPU has AVX2, on the wide ones too.
#[cfg(test)]
pub(crate) fn both_widths<R>(f: impl Fn() -> R) -> Vec<R> {
    vec![narrow(&f), f()]
}

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
        self.combine_ordered::<false>(acc, x);
    }

    /// `acc = first ∘ acc`: [`Reducer::combine`] with the operands in the other places, for a
    /// fold whose running value is the first input while the buffer holds the second (an
    /// in-place fold whose own part comes last) — each element's operation and operand order
    /// are exactly `combine`'s after copying `first` into `acc`. Not for `PreMulSum`, whose first
    /// input must be scaled ([`Reducer::start`]) before it is combined.
    #[inline]
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))] // the MPI backend's in-place fold
    pub(crate) fn combine_before(&self, acc: &mut [T], first: &[T]) {
        debug_assert!(!matches!(self.op, ReduceOp::PreMulSum(_)));
        self.combine_ordered::<true>(acc, first);
    }

    /// The loops of both: `acc[i] = acc[i] ∘ x[i]`, or with `SWAP` `x[i] ∘ acc[i]` — decided
    /// at compile time, so each loop is as tight as one written out for its order.
    #[inline(always)]
    fn combine_ordered<const SWAP: bool>(&self, acc: &mut [T], x: &[T]) {
        widest(|| self.combine_loops::<SWAP>(acc, x));
    }

    /// The loops of [`Reducer::combine_ordered`], at the width [`widest`] picks.
    #[inline(always)]
    fn combine_loops<const SWAP: bool>(&self, acc: &mut [T], x: &[T]) {
        let acc = &mut acc[..x.len()];
        let ordered = |a: T, x: T| if SWAP { (x, a) } else { (a, x) };
        match self.op {
            ReduceOp::Sum | ReduceOp::Avg => {
                for (a, &x) in acc.iter_mut().zip(x) {
                    let (l, r) = ordered(*a, x);
                    *a = T::add(l, r);
                }
            }
            ReduceOp::PreMulSum(_) => {
                for (a, &x) in acc.iter_mut().zip(x) {
                    let (l, r) = ordered(*a, T::mul(self.scale, x));
                    *a = T::add(l, r);
                }
            }
            ReduceOp::Prod => {
                for (a, &x) in acc.iter_mut().zip(x) {
                    let (l, r) = ordered(*a, x);
                    *a = T::mul(l, r);
                }
            }
            ReduceOp::Min => {
                for (a, &x) in acc.iter_mut().zip(x) {
                    let (l, r) = ordered(*a, x);
                    *a = T::min(l, r);
                }
            }
            ReduceOp::Max => {
                for (a, &x) in acc.iter_mut().zip(x) {
                    let (l, r) = ordered(*a, x);
                    *a = T::max(l, r);
                }
            }
            ReduceOp::BitAnd | ReduceOp::BitOr | ReduceOp::BitXor => {
                let which = match self.op {
                    ReduceOp::BitOr => Bitwise::Or,
                    ReduceOp::BitXor => Bitwise::Xor,
                    _ => Bitwise::And,
                };
                for (a, &x) in acc.iter_mut().zip(x) {
                    let (l, r) = ordered(*a, x);
                    // Floats never reach here: ops are validated against the dtype before any
                    // data moves. Keep the value rather than invent one if that ever changes.
                    *a = T::bitwise(l, r, which).unwrap_or(*a);
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

    /// `combine_before(b, a)` computes exactly `combine(a, b)`, to the bit. Min and Max
    /// compare, so their result depends on the operand order where the operands are unordered
    /// or equal (a NaN, or zeros of both signs): that is where a swapped order shows. (Rust
    /// leaves the payload of a NaN that arithmetic produces unspecified — Miri draws it — so the
    /// arithmetic ops are checked on ordinary numbers.)
    #[test]
    fn combining_before_keeps_the_operand_order() {
        let nan = |payload: u32| f32::from_bits(0x7fc0_0000 | payload);
        let unordered = (
            [1.5f32, nan(1), -0.0, 2.0, 0.0],
            [2.25f32, 3.0, 0.0, nan(2), -0.0],
        );
        let ordinary = (
            [1.5f32, -3.25, 1e30, 0.1, 4.0],
            [2.25f32, 7.5, 1e10, 0.2, -4.0],
        );
        let cases = [
            (ReduceOp::Sum, ordinary),
            (ReduceOp::Avg, ordinary),
            (ReduceOp::Prod, ordinary),
            (ReduceOp::Min, unordered),
            (ReduceOp::Max, unordered),
        ];
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for (op, (a, b)) in cases {
            let r = Reducer::<f32>::new(op, 2);
            let mut want = a.to_vec();
            r.combine(&mut want, &b);
            let mut got = b.to_vec();
            r.combine_before(&mut got, &a);
            assert_eq!(bits(&got), bits(&want), "{op:?}");
        }
        for op in [ReduceOp::BitAnd, ReduceOp::BitOr, ReduceOp::BitXor] {
            let r = Reducer::<u8>::new(op, 2);
            let (a, b) = ([0b1100u8, 0xff, 0], [0b1010u8, 0x0f, 0x80]);
            let mut want = a;
            r.combine(&mut want, &b);
            let mut got = b;
            r.combine_before(&mut got, &a);
            assert_eq!(got, want, "{op:?}");
        }
    }

    /// The contents of `v` as bytes, so that NaNs and signed zeros compare exactly.
    fn bytes<T: Arith>(v: &[T]) -> Vec<u8> {
        // SAFETY: every element type is a plain number: no padding, every byte initialised.
        unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), size_of_val(v)) }.to_vec()
    }

    /// The wide loops give the baseline loops' bits, for every operator, element type, length
    /// (vector-sized or not, with a remainder) and operand order, on values that include the
    /// awkward ones: NaNs and zeros of both signs for the comparisons, wrapping integers.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "Miri runs the baseline loops only: there is one variant to check"
    )]
    fn wide_and_narrow_loops_agree_to_the_bit() {
        use ReduceOp::*;
        fn check<T: Arith>(ops: &[ReduceOp], value: impl Fn(usize) -> T) {
            for &op in ops {
                for len in 0..=70 {
                    let a: Vec<T> = (0..len).map(|i| value(3 * i + 1)).collect();
                    let b: Vec<T> = (0..len).map(|i| value(5 * i + 2)).collect();
                    let r = Reducer::<T>::new(op, 2);
                    let run = || {
                        let mut fwd = a.clone();
                        r.start(&mut fwd);
                        r.combine(&mut fwd, &b);
                        r.finish(&mut fwd);
                        let mut back = b.clone();
                        if !matches!(op, PreMulSum(_)) {
                            r.combine_before(&mut back, &a);
                        }
                        (bytes(&fwd), bytes(&back))
                    };
                    let [narrow, wide] = <[_; 2]>::try_from(both_widths(run)).unwrap();
                    assert!(narrow == wide, "{op:?} {} len={len}", T::DTYPE);
                }
            }
        }
        let ordinary = |k: usize| ((k * 37 % 101) as f32 - 50.0) / 8.0;
        let awkward = |k: usize| match k % 7 {
            0 => f32::from_bits(0x7fc0_0000 | k as u32),
            1 => -0.0,
            2 => 0.0,
            3 => f32::INFINITY,
            _ => ordinary(k),
        };
        let arith = [Sum, Avg, PreMulSum(0.75), Prod];
        let compare = [Min, Max];
        check::<f32>(&arith, ordinary);
        check::<f32>(&compare, awkward);
        check::<f64>(&arith, |k| f64::from(ordinary(k)));
        check::<f64>(&compare, |k| f64::from(awkward(k)));
        check::<half::f16>(&arith, |k| half::f16::from_f32(ordinary(k)));
        check::<half::f16>(&compare, |k| half::f16::from_f32(awkward(k)));
        check::<half::bf16>(&arith, |k| half::bf16::from_f32(ordinary(k)));
        check::<half::bf16>(&compare, |k| half::bf16::from_f32(awkward(k)));
        let ints = [
            Sum,
            Avg,
            PreMulSum(3.0),
            Prod,
            Min,
            Max,
            BitAnd,
            BitOr,
            BitXor,
        ];
        let wild = |k: usize| k.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        check::<i8>(&ints, |k| wild(k) as i8);
        check::<u8>(&ints, |k| wild(k) as u8);
        check::<i32>(&ints, |k| wild(k) as i32);
        check::<u32>(&ints, |k| wild(k) as u32);
        check::<i64>(&ints, |k| wild(k) as i64);
        check::<u64>(&ints, |k| wild(k) as u64);
    }

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
