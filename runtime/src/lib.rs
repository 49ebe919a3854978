//! rankwise runtime: the program model, the rules each call obeys, and the backends that run
//! rank programs.
//!
//! A *rank program* is one function that every rank of a world runs, as with
//! `torch.distributed`. It talks to its peers through a [`Ctx`]:
//!
//! ```
//! use rankwise_runtime::{ReduceOp, Result, Tensor, spawn};
//!
//! let sums = spawn(4, |ctx| -> Result<Vec<f32>> {
//!     let mut t = Tensor::full([2], ctx.rank() as f32 + 1.0)?;
//!     ctx.all_reduce(&mut t, ReduceOp::Sum)?;
//!     Ok(t.to_vec())
//! })?;
//! assert_eq!(sums, vec![vec![10.0, 10.0]; 4]);
//! # Ok::<(), rankwise_runtime::Error>(())
//! ```
//!
//! Programs that are wrong fail with an error rather than hang: every live rank blocked is a
//! [`Error::Deadlock`] naming each rank's call site; members reaching one collective step with
//! different calls get [`Error::CollectiveMismatch`]; a rank that panics, fails or returns early
//! makes its waiting peers return [`Error::PeerFailed`]; misuse (a peer out of range, a split the
//! group size does not divide, …) is a specific error before anything is sent.

#![warn(missing_docs)]
// Kernels and helpers serve the backends; without any backend compiled in they sit unused.
#![cfg_attr(not(feature = "local"), allow(dead_code))]

#[macro_use]
mod fail;

pub mod ctx;
pub mod element;
pub mod error;
pub mod exec;
pub mod group;
pub mod guard;
pub mod model;
pub mod plan;
pub mod reduce;
pub mod rules;
#[cfg(feature = "local")]
pub mod spawn;
pub mod tensor;
pub mod verify;

pub use ctx::{Batch, BatchComm, Comm, Ctx};
pub use element::{DType, Element};
pub use error::{
    CollectiveMismatch, DeadlockReport, Error, P2pMismatch, PeerFailure, RankWait, Result,
};
pub use group::Group;
pub use model::{CallSite, GroupId, OpDesc, OpKind, Shape};
pub use reduce::ReduceOp;
#[cfg(feature = "local")]
pub use spawn::{Options, spawn, spawn_each, spawn_with};
pub use tensor::{Device, Tensor};

#[doc(hidden)]
pub use half;
/// Half-precision types (`half::f16`, `half::bf16`).
pub use half::{bf16, f16};
