//! rankwise: SPMD rank programs whose ranks are proven to agree.
//!
//! Write one function that every rank runs, with `torch.distributed`'s vocabulary, and let the
//! compiler check it for every world size you list:
//!
//! ```
//! use rankwise::prelude::*;
//!
//! #[rankwise::program(world in [2, 4, 8])]
//! fn ring_shift(ctx: &mut Ctx) -> Result<Vec<f32>> {
//!     let x = ctx.full([2], ctx.rank() as f32)?;
//!     let mut y = ctx.zeros::<f32>([2])?;
//!     let next = (ctx.rank() + 1) % ctx.world();
//!     let prev = (ctx.rank() + ctx.world() - 1) % ctx.world();
//!     let mut b = ctx.batch(); // posted together: nobody waits for anybody to receive first
//!     b.send(&x, next);
//!     b.recv(&mut y, prev);
//!     b.run()?;
//!     Ok(y.to_vec())
//! }
//!
//! let per_rank = rankwise::spawn(4, ring_shift)?; // one thread per rank
//! assert_eq!(per_rank[0], vec![3.0, 3.0]);
//! # Ok::<(), rankwise::Error>(())
//! ```
//!
//! A program that would hang or disagree does not compile. The seed tutorials' classic mistake —
//! both ranks send first — is reported as deadlock `RW001`, naming each rank's call:
//!
//! ```compile_fail
//! use rankwise::prelude::*;
//!
//! #[rankwise::program(world = 2)]
//! fn exchange(ctx: &mut Ctx) -> Result<()> {
//!     let x = ctx.full([4], 1.0f32)?;
//!     let mut y = ctx.zeros::<f32>([4])?;
//!     let peer = 1 - ctx.rank();
//!     ctx.send(&x, peer)?;
//!     ctx.recv(&mut y, peer)?;
//!     Ok(())
//! }
//! ```
//!
//! Without the macro the same API runs programs built at run time; the runtime then catches
//! the same mistakes as they happen — a deadlock, a collective mismatch, a failed or vanished
//! peer — and returns an error naming the ranks and call sites instead of hanging. See
//! [`verify`] to check a program described as data before launching it, and the README and the
//! book for the tour.

#![warn(missing_docs)]

pub use rankwise_runtime::*;

/// Checks a rank program at compile time: see the crate docs.
pub use rankwise_macros::program;

/// The names most rank programs need.
pub mod prelude {
    pub use rankwise_runtime::{Ctx, Element, Group, ReduceOp, Request, Result, Tensor};
    #[cfg(feature = "local")]
    pub use rankwise_runtime::{Options, spawn, spawn_with};
}

/// The README's code, compiled and run as a doctest so that it cannot rot.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
