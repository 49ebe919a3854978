//! Element types the `#[rankwise::program]` macro leaves to rustc.
//!
//! Where the macro cannot follow a tensor's element type (data from a function it does not
//! read, a type inferred from a later use), the type is a variable: the lowering binds the
//! call's tensor argument to a `PhantomData` per call site ([`bind_ref`], [`bind_mut`]) and
//! states what the verifier needed — that calls which meet move the same element type
//! ([`same`]), or the type the other side is known to have ([`is`]), and that a bitwise
//! reduction gets an integer type ([`bind_mut_integer`]). A failure is a compile error at the user's call
//! with the diagnostic code it would have had.

use std::marker::PhantomData;

use crate::{Element, Tensor};

/// `Self` and `U` are the same type.
#[diagnostic::on_unimplemented(
    message = "RW008: calls that meet move different element types: `{Self}` here, `{U}` in the call it meets",
    label = "this call's tensor holds `{Self}`",
    note = "the k-th send from one rank to another meets the k-th recv there, and every member of a collective step meets the others: give them one element type"
)]
pub trait SameElement<U> {}

impl<T> SameElement<T> for T {}

/// An element type with bitwise reductions.
#[diagnostic::on_unimplemented(
    message = "RW013: bitwise reductions need an integer element type, not `{Self}`",
    label = "this call reduces `{Self}` elements bitwise",
    note = "use `Sum`, `Max`, … on floats, or reduce an integer tensor"
)]
pub trait IntegerElement {}

macro_rules! integers {
    ($($t:ty),*) => {$(impl IntegerElement for $t {})*};
}
integers!(i8, u8, i32, u32, i64, u64);

/// The call's tensor, unchanged, with its element type bound to `_var`.
#[inline(always)]
pub fn bind_ref<'t, T: Element>(_var: &PhantomData<T>, tensor: &'t Tensor<T>) -> &'t Tensor<T> {
    tensor
}

/// [`bind_ref`] for a tensor the call writes.
#[inline(always)]
pub fn bind_mut<'t, T: Element>(
    _var: &PhantomData<T>,
    tensor: &'t mut Tensor<T>,
) -> &'t mut Tensor<T> {
    tensor
}

/// The two call sites' element types are equal.
#[inline(always)]
pub fn same<A: SameElement<B>, B>(_a: &PhantomData<A>, _b: &PhantomData<B>) {}

/// The call site's element type is `E`.
#[inline(always)]
pub fn is<E, A: SameElement<E>>(_a: &PhantomData<A>) {}

/// [`bind_ref`] for a call that reduces bitwise: the element type must be an integer.
#[inline(always)]
pub fn bind_ref_integer<'t, T: Element + IntegerElement>(
    _var: &PhantomData<T>,
    tensor: &'t Tensor<T>,
) -> &'t Tensor<T> {
    tensor
}

/// [`bind_mut`] for a call that reduces bitwise: the element type must be an integer.
#[inline(always)]
pub fn bind_mut_integer<'t, T: Element + IntegerElement>(
    _var: &PhantomData<T>,
    tensor: &'t mut Tensor<T>,
) -> &'t mut Tensor<T> {
    tensor
}
