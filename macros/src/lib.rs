//! `#[rankwise::program]`: compile-time checking of rank programs.
//!
//! A thin entry point: the work is done by `rankwise-macros-core`, a plain library (so that it
//! can be tested and benchmarked outside a compiler).

#![warn(missing_docs)]

/// Checks a rank program at compile time for every world size listed:
/// `#[program(world = 4)]`, `#[program(world in [2, 4, 8])]`, `#[program(world in 2..=64)]`.
///
/// The function must take the context first (`ctx: &mut Ctx`) and return
/// `rankwise::Result<T>`. Every rank's communication is evaluated statically for every listed
/// world size and checked with the verifier; problems are compile errors (codes RW001–RW015)
/// at the offending calls. The emitted function refuses unchecked world sizes and follows its
/// verified schedule at run time.
#[proc_macro_attribute]
pub fn program(
    args: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    rankwise_macros_core::expand(args.into(), item.into()).into()
}
