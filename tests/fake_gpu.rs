//! The GPU executor end to end, on a machine without a GPU: the examples run with
//! `RANKWISE_BACKEND=nccl` in one process (a thread per GPU) against `fake-gpu`, a test double
//! of the CUDA driver and of NCCL on host memory, loaded through the same paths as the real
//! libraries (cudarc's `libcuda.so`, `RANKWISE_NCCL_LIB`). Device tensors, stream copies, strided
//! copies around dim-0 calls, groups, sub-group communicators, the watchdog and aborts all run;
//! what is not modelled is the hardware (timing, device faults) and NCCL across processes.
//!
//! The fake folds reductions in member order, so every line must equal the threads engine's,
//! except bitwise reductions (NCCL has none; the examples ask `ctx.supports`).

#![cfg(feature = "nccl")]

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

#[path = "common/examples.rs"]
mod examples;

fn example(name: &str) -> PathBuf {
    examples::example(name, &examples::same_features())
}

/// A directory holding the fake under the libraries' names (built once per test binary).
fn fake_libs() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", "fake-gpu"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building fake-gpu failed");
        let exe = std::env::current_exe().expect("test binary path");
        let lib = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("target/<profile>/deps")
            .join("libfake_gpu.so");
        assert!(lib.exists(), "{} is not built", lib.display());
        let dir = std::env::temp_dir().join(format!("rankwise-fake-gpu-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        for name in ["libcuda.so", "libcuda.so.1", "libnccl.so.2"] {
            let link = dir.join(name);
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&lib, &link).expect("symlink");
        }
        dir
    })
}

/// Runs `name args` as `world` ranks on fake GPUs (`gpus` of them), with `env`.
fn on_fake(
    name: &str,
    args: &[&str],
    world: usize,
    gpus: usize,
    env: &[(&str, &str)],
) -> (Output, Duration) {
    let exe = example(name);
    let dir = fake_libs();
    let started = Instant::now();
    let out = Command::new(exe)
        .args(args)
        .env("RANKWISE_BACKEND", "nccl")
        .env("RANKWISE_WORLD", world.to_string())
        .env("RANKWISE_FAKE_GPUS", gpus.to_string())
        .env("LD_LIBRARY_PATH", dir)
        .env("RANKWISE_NCCL_LIB", dir.join("libnccl.so.2"))
        .env("RUST_BACKTRACE", "0")
        .env_remove("RANK")
        .env_remove("OMPI_COMM_WORLD_SIZE")
        .envs(env.iter().copied())
        .output()
        .expect("example runs");
    (out, started.elapsed())
}

fn lines_on_fake(name: &str, args: &[&str], world: usize, env: &[(&str, &str)]) -> Vec<String> {
    let (out, _) = on_fake(name, args, world, world.max(1), env);
    assert!(
        out.status.success(),
        "{name} {args:?} on {world} fake GPUs ({env:?}) failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    comparable(&String::from_utf8_lossy(&out.stdout))
}

fn lines_on_threads(name: &str, args: &[&str], world: usize) -> Vec<String> {
    let out = Command::new(example(name))
        .args(args)
        .env("RANKWISE_BACKEND", "threads")
        .env("RANKWISE_WORLD", world.to_string())
        .output()
        .expect("example runs");
    assert!(out.status.success());
    comparable(&String::from_utf8_lossy(&out.stdout))
}

/// Sorted lines, without bitwise reductions (which NCCL does not have).
fn comparable(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text
        .lines()
        .filter(|l| !l.contains(" Bit"))
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

#[test]
fn every_operation_on_fake_gpus_gives_the_threads_engines_bits() {
    for world in [1, 2, 3, 4] {
        let w = world.to_string();
        let want = lines_on_threads("every_op", &[&w], world);
        // NCCL 2.32 (its own all_to_all, gather, scatter) and 2.27 (grouped sends instead).
        for version in ["23203", "22703"] {
            let got = lines_on_fake(
                "every_op",
                &[&w],
                world,
                &[("RANKWISE_FAKE_NCCL_VERSION", version)],
            );
            assert!(got.len() > 100, "every_op printed {} lines", got.len());
            assert_eq!(got, want, "every_op at world {world}, NCCL {version}");
        }
    }
}

#[test]
fn examples_and_seed_ports_on_fake_gpus_print_what_threads_print() {
    // One of each kind: columns (strided copies), list forms, sub-groups, a world of 6.
    let ports = [
        ("quickstart", 4),
        ("ring_allreduce", 4),
        ("seed001_all_reduce", 6),
        ("seed002_new_group", 4),
        ("seed004_column_all_gather", 4),
        ("seed004_column_reduce_scatter", 4),
        ("seed004_row_reduce_scatter_list", 4),
        ("seed004_column_all_to_all", 4),
    ];
    for (name, world) in ports {
        let got = lines_on_fake(name, &[], world, &[]);
        let want = lines_on_threads(name, &[], world);
        // Some examples show other world sizes on threads after the run itself.
        assert!(
            got.iter().all(|l| want.contains(l)) && !got.is_empty(),
            "{name}: {got:?}\nthreads: {want:?}"
        );
    }
}

#[test]
fn random_programs_on_fake_gpus_give_the_threads_engines_digests() {
    let args = ["good", "11", "60"];
    let want = lines_on_threads("random_programs", &args, 3);
    let got = lines_on_fake("random_programs", &args, 3, &[]);
    for l in got.iter().filter(|l| !l.contains("needs a reduction")) {
        assert!(want.contains(l), "{l}");
    }
}

#[test]
fn failures_on_fake_gpus_end_every_rank_promptly_and_say_why() {
    let cases: [(&str, &str); 6] = [
        ("panic", "rank 2 panicked"),
        ("error", "rank 1: disk full"),
        ("deadlock", "no progress for 2s (RANKWISE_NCCL_TIMEOUT)"),
        ("mismatch", "members issued different collectives"),
        ("sizes", "members issued different collectives"),
        ("p2p", "a send of 4 elements met a receive of 3"),
    ];
    for (case, says) in cases {
        let (out, took) = on_fake("failures", &[case], 4, 4, &[("RANKWISE_NCCL_TIMEOUT", "2")]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{case} succeeded");
        assert!(err.contains(says), "{case}: {err}");
        assert!(
            !err.contains("panicked at") || case == "panic",
            "{case}: {err}"
        );
        assert!(took < Duration::from_secs(20), "{case} took {took:?}");
    }
    // More ranks than GPUs is refused before anything starts.
    let (out, _) = on_fake("quickstart", &[], 4, 3, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("a world of 4 needs 4 GPUs, one per rank, but the CUDA driver sees 3"),
        "{err}"
    );
}

fn free_port() -> String {
    rankwise::bootstrap::free_port()
        .expect("a free port")
        .to_string()
}

/// Starts `name` as rank `rank` of a torchrun-style job of `world` processes on fake GPUs.
fn torchrun_rank(
    name: &str,
    rank: usize,
    world: usize,
    local: usize,
    port: &str,
) -> std::process::Child {
    let dir = fake_libs();
    Command::new(example(name))
        .env("RANKWISE_BACKEND", "nccl")
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("LOCAL_RANK", local.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port)
        .env("RANKWISE_BOOTSTRAP_TIMEOUT", "20")
        .env("RANKWISE_FAKE_GPUS", "2")
        .env("LD_LIBRARY_PATH", dir)
        .env("RANKWISE_NCCL_LIB", dir.join("libnccl.so.2"))
        .env("RUST_BACKTRACE", "0")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("example starts")
}

#[test]
fn a_torchrun_style_rank_runs_through_the_tcp_bootstrap() {
    // One process per GPU, as torchrun starts them: the bootstrap, the GPU check, the ids and
    // the communicators (the fake's communicators meet only within a process: world 1).
    let out = torchrun_rank("quickstart", 0, 1, 0, &free_port())
        .wait_with_output()
        .expect("rank ends");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = comparable(&String::from_utf8_lossy(&out.stdout));
    let want = lines_on_threads("quickstart", &[], 1);
    assert!(
        !got.is_empty() && got.iter().all(|l| want.contains(l)),
        "{got:?}"
    );
}

#[test]
fn two_processes_given_one_gpu_are_refused_on_both_before_nccl() {
    // Both ranks say LOCAL_RANK=0: rank 0 sees the same GPU UUID twice and refuses the job.
    let port = free_port();
    let ranks: Vec<_> = (0..2)
        .map(|r| torchrun_rank("quickstart", r, 2, 0, &port))
        .collect();
    for (r, child) in ranks.into_iter().enumerate() {
        let out = child.wait_with_output().expect("rank ends");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "rank {r} started");
        assert!(
            err.contains("ranks [0, 1] were all given GPU-face0690-0000-0000-0000-000000000000"),
            "rank {r}: {err}"
        );
    }
}

#[test]
fn a_device_fault_on_one_rank_ends_every_rank_with_that_rank_named() {
    // The fake breaks rank r's stream at its k-th NCCL call, as a crashed kernel would: that
    // rank's watchdog reports it, aborts its communicators, and the others are released.
    for (rank, after) in [(0, 1), (1, 7), (3, 40)] {
        let env = [
            ("RANKWISE_FAKE_FAIL_RANK", rank.to_string()),
            ("RANKWISE_FAKE_FAIL_AFTER", after.to_string()),
        ];
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (out, took) = on_fake("every_op", &["4"], 4, 4, &env);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "a fault at rank {rank} went unnoticed"
        );
        assert!(
            err.contains(&format!("rank {rank}: the GPU stream failed")),
            "rank {rank}, call {after}: {err}"
        );
        assert!(took < Duration::from_secs(20), "took {took:?}");
    }
}
