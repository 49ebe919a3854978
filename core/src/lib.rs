//! rankwise's backend-free core: what a rank program *is* and what makes one wrong.
//!
//! * [`model`]: the description of one communication call ([`OpDesc`]: kind, peer or root,
//!   group, reduce op, dtype, shape, dim, call site);
//! * [`ops`]: the table of operations — each kind's method name and arguments, from which
//!   everything that names or reads calls is derived;
//! * [`rules`]: what one call must satisfy on its own, and how groups are declared, as
//!   [`Violation`]s that carry their diagnostic [`Code`];
//! * [`verify`]: the verifier, which proves a whole program deadlock-free and in agreement.
//!
//! This crate has no backend, no tensor and no run-time error type: the proc macro depends on
//! it (and only on it) to check programs at compile time, and the runtime (`rankwise-runtime`)
//! applies the same rules before every call and runs the same verifier at launch. Users reach
//! it through the `rankwise` crate, which re-exports what they need; its own layout is not a
//! stable API.

#![warn(missing_docs, unreachable_pub)]
// Plain data and algorithms: nothing here needs `unsafe`, and nothing may.
#![forbid(unsafe_code)]

mod code;
mod dtype;
pub mod model;
pub mod ops;
mod reduce_op;
pub mod rules;
pub mod verify;

pub use code::Code;
pub use dtype::DType;
pub use model::{CallSite, GroupId, OpDesc, OpKind, Shape};
pub use reduce_op::ReduceOp;
pub use rules::Violation;
