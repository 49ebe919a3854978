//! rankwise: SPMD rank programs whose ranks are proven to agree.
//!
//! This facade re-exports the runtime ([`rankwise_runtime`]) and the `#[program]` macro.
//! See the README and the book for the tour.

#![warn(missing_docs)]

pub use rankwise_runtime::*;

/// Checks a rank program at compile time: see the crate docs.
pub use rankwise_macros::program;

/// The names most rank programs need.
pub mod prelude {
    pub use rankwise_runtime::{Ctx, Element, Group, ReduceOp, Result, Tensor};
    #[cfg(feature = "local")]
    pub use rankwise_runtime::{Options, spawn, spawn_with};
}
