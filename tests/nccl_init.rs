//! The NCCL backend's start-up on a machine without a GPU (feature `nccl`; CI runs it with the
//! `nvidia-nccl-cu13` wheel on `PYTHONPATH` and `RANKWISE_NCCL_REQUIRED=1`): every missing
//! piece is a specific error on the rank that meets it — never a panic, never a hang.

#![cfg(feature = "nccl")]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "common/examples.rs"]
mod examples;

/// The quickstart example, built with this test's features.
fn example() -> PathBuf {
    examples::example("quickstart", &examples::same_features())
}

/// Runs the example under `RANKWISE_BACKEND=nccl` with `env` (with `RANK` and friends: as
/// rank 0 of a one-process torchrun job); its stderr.
fn start(env: &[(&str, &str)]) -> String {
    // Built (and found) before the clock starts: the first call builds every example.
    let exe = example();
    let started = Instant::now();
    let out = Command::new(exe)
        .env("RANKWISE_BACKEND", "nccl")
        .env_remove("OMPI_COMM_WORLD_SIZE")
        .env_remove("PMI_SIZE")
        .env_remove("PMIX_RANK")
        .env_remove("PMI_RANK")
        .env("RUST_BACKTRACE", "0")
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .envs(env.iter().copied())
        .output()
        .expect("example runs");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "started without a GPU: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    err
}

const ONE_RANK: [(&str, &str); 4] = [
    ("RANK", "0"),
    ("WORLD_SIZE", "1"),
    ("MASTER_ADDR", "127.0.0.1"),
    ("MASTER_PORT", "29517"),
];

/// Whether the wheel's NCCL is on `PYTHONPATH` (CI puts it there and requires it).
fn wheel() -> bool {
    let found = std::env::var_os("PYTHONPATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| d.join("nvidia/nccl/lib/libnccl.so.2").exists())
    });
    if !found {
        assert!(
            std::env::var_os("RANKWISE_NCCL_REQUIRED").is_none(),
            "RANKWISE_NCCL_REQUIRED is set but PYTHONPATH holds no nvidia/nccl wheel"
        );
        eprintln!("no nvidia/nccl wheel on PYTHONPATH: nothing to load (CI installs one)");
    }
    found
}

/// What a machine without a GPU says once NCCL has loaded.
fn says_there_is_no_gpu(err: &str) {
    let driver = std::path::Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.1").exists();
    if driver {
        // A machine with a driver but (here) no GPU says so instead.
        assert!(err.contains("GPU"), "{err}");
    } else {
        assert!(
            err.contains("CUDA driver library (libcuda.so) is not on this machine"),
            "{err}"
        );
    }
}

#[test]
fn without_a_launcher_one_process_runs_a_thread_per_gpu() {
    // No torchrun or mpirun variables: this process is every rank, one thread per GPU; here
    // it stops at the first missing piece and says which way it was started.
    let err = start(&[("RANKWISE_NCCL_LIB", "/nonexistent/libnccl.so.2")]);
    assert!(err.contains("NCCL could not be loaded"), "{err}");
    assert!(err.contains("one thread per GPU"), "{err}");
    if wheel() {
        let err = start(&[]);
        says_there_is_no_gpu(&err);
        assert!(err.contains("one thread per GPU"), "{err}");
    }
}

#[test]
fn a_missing_nccl_library_lists_what_was_tried() {
    let mut env = ONE_RANK.to_vec();
    env.push(("RANKWISE_NCCL_LIB", "/nonexistent/libnccl.so.2"));
    let err = start(&env);
    assert!(err.contains("NCCL could not be loaded"), "{err}");
    assert!(err.contains("/nonexistent/libnccl.so.2"), "{err}");
}

#[test]
fn no_cuda_driver_is_a_clear_error_after_nccl_loads() {
    if wheel() {
        says_there_is_no_gpu(&start(&ONE_RANK));
    }
}

/// Under mpirun (with the `mpi` feature too) each process is one rank; a rank that cannot
/// start ends the whole job, naming itself and the cause.
#[cfg(feature = "mpi")]
#[test]
fn under_mpirun_each_process_is_a_rank_and_a_failed_start_ends_the_job() {
    let exe = example();
    let run = |env: &[(&str, &str)]| {
        let started = Instant::now();
        let out = Command::new("mpirun")
            .args(["--oversubscribe", "-np", "2"])
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("RANKWISE_BACKEND", "nccl")
            .env("RUST_BACKTRACE", "0")
            .env_remove("RANK")
            .envs(env.iter().copied())
            .arg(&exe)
            .output()
            .expect("mpirun runs");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "started without a GPU: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(30));
        err
    };
    let err = run(&[("RANKWISE_NCCL_LIB", "/nonexistent/libnccl.so.2")]);
    assert!(err.contains("NCCL could not be loaded"), "{err}");
    assert!(err.contains("ends the MPI job"), "{err}");
    assert!(err.contains("rank 0") || err.contains("rank 1"), "{err}");
    if wheel() {
        let err = run(&[]);
        says_there_is_no_gpu(&err);
        assert!(err.contains("ends the MPI job"), "{err}");
    }
}

#[test]
fn processes_started_by_torchrun_are_nccl_ranks() {
    // torchrun marks its processes with TORCHELASTIC_RUN_ID: without RANKWISE_BACKEND they
    // start the NCCL engine (which then asks for the launcher's other variables).
    let out = Command::new(example())
        .env_remove("RANKWISE_BACKEND")
        .env("TORCHELASTIC_RUN_ID", "test")
        .env("RUST_BACKTRACE", "0")
        .env_remove("RANK")
        .output()
        .expect("example runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("backend nccl"),
        "torchrun's processes use NCCL: {err}"
    );
}
