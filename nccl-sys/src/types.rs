//! NCCL's C types, as `nccl.h` (2.18 and later) defines them. `tests/header.rs` compiles these
//! against the real header, so a wrong size or value cannot reach a GPU.

#![allow(non_camel_case_types, non_upper_case_globals)]

use std::ffi::{c_char, c_int};

/// A result code (`ncclResult_t`).
pub type ncclResult_t = c_int;
/// Success.
pub const ncclSuccess: ncclResult_t = 0;
/// A CUDA call failed inside NCCL.
pub const ncclUnhandledCudaError: ncclResult_t = 1;
/// A system call failed (network, memory, …).
pub const ncclSystemError: ncclResult_t = 2;
/// An internal NCCL error.
pub const ncclInternalError: ncclResult_t = 3;
/// An argument was invalid.
pub const ncclInvalidArgument: ncclResult_t = 4;
/// The API was used wrongly (for example mismatched calls).
pub const ncclInvalidUsage: ncclResult_t = 5;
/// A peer failed or disconnected.
pub const ncclRemoteError: ncclResult_t = 6;
/// A non-blocking operation is still in progress.
pub const ncclInProgress: ncclResult_t = 7;
/// An operation timed out (newer libraries).
pub const ncclTimeout: ncclResult_t = 8;

/// A communicator handle (`ncclComm_t`).
pub type ncclComm_t = *mut ncclComm;

/// The opaque communicator object.
#[repr(C)]
pub struct ncclComm {
    _private: [u8; 0],
}

/// The opaque communicator configuration (rankwise passes null: defaults).
#[repr(C)]
pub struct ncclConfig_t {
    _private: [u8; 0],
}

/// Bytes of a unique id.
pub const NCCL_UNIQUE_ID_BYTES: usize = 128;

/// The id rank 0 makes and every rank needs to create a communicator (`ncclUniqueId`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ncclUniqueId {
    /// Its bytes, opaque.
    pub internal: [c_char; NCCL_UNIQUE_ID_BYTES],
}

/// A reduction operator (`ncclRedOp_t`); values from `ncclNumOps` up are created ones.
pub type ncclRedOp_t = c_int;
/// Sum.
pub const ncclSum: ncclRedOp_t = 0;
/// Product.
pub const ncclProd: ncclRedOp_t = 1;
/// Maximum.
pub const ncclMax: ncclRedOp_t = 2;
/// Minimum.
pub const ncclMin: ncclRedOp_t = 3;
/// Average (2.10 and later).
pub const ncclAvg: ncclRedOp_t = 4;

/// An element type (`ncclDataType_t`).
pub type ncclDataType_t = c_int;
/// `i8`.
pub const ncclInt8: ncclDataType_t = 0;
/// `u8`.
pub const ncclUint8: ncclDataType_t = 1;
/// `i32`.
pub const ncclInt32: ncclDataType_t = 2;
/// `u32`.
pub const ncclUint32: ncclDataType_t = 3;
/// `i64`.
pub const ncclInt64: ncclDataType_t = 4;
/// `u64`.
pub const ncclUint64: ncclDataType_t = 5;
/// `f16`.
pub const ncclFloat16: ncclDataType_t = 6;
/// `f32`.
pub const ncclFloat32: ncclDataType_t = 7;
/// `f64`.
pub const ncclFloat64: ncclDataType_t = 8;
/// `bf16` (2.10 and later, built with CUDA 11 or later).
pub const ncclBfloat16: ncclDataType_t = 9;

/// Where the scalar of a `PreMulSum` lives (`ncclScalarResidence_t`).
pub type ncclScalarResidence_t = c_int;
/// In device memory, read while the collective runs.
pub const ncclScalarDevice: ncclScalarResidence_t = 0;
/// In host memory, read before `ncclRedOpCreatePreMulSum` returns.
pub const ncclScalarHostImmediate: ncclScalarResidence_t = 1;

/// A CUDA stream (`cudaStream_t`, the same handle as the driver's `CUstream`).
pub type cudaStream_t = *mut CUstream_st;

/// The opaque CUDA stream object.
#[repr(C)]
pub struct CUstream_st {
    _private: [u8; 0],
}
