//! The NCCL backend's machine-independent half: lowering a batch to NCCL calls
//! ([`lower`]) and a host emulation of those calls with NCCL's semantics ([`host`]), which runs
//! every program here — no GPU, no NCCL library — through exactly the call lists a GPU would get.
//!
//! The emulation is the test oracle for the lowering: random programs and every example are run
//! on it and on the threads backend, and must give the same bits (`tests/nccl_host.rs`,
//! `runtime/tests/differential.rs`). Users can run it too (`RANKWISE_BACKEND=nccl-host`,
//! [`Options::engine`](crate::Options::engine)) to test a program's NCCL lowering on a laptop.

#[cfg(feature = "nccl")]
pub(crate) mod gpu;
#[cfg(feature = "local")]
pub(crate) mod host;
pub(crate) mod lower;
